"""The supernet ranking benchmark's pieces (``benchmarks/supernet.py``, ``supernet_ablation.py``): its options and
cache, its architectures, the reference's ceiling, the ablation's variants (the statistics themselves:
tests/test_bench_ranking.py)."""

import json

import numpy as np
import pytest
import torch
from scipy.stats import kendalltau

import nas
from benchmarks import _ranking
from benchmarks import supernet as bs
from benchmarks import supernet_ablation as ab
from benchmarks.harness import usable_device
from nas.cost import arch_cost
from nas.space import load_space
from nas.supernet.checkpoint import SUPERNET_FORMAT, SUPERNET_VERSION
from nas.supernet.elastic import ArchOutsideSpace, locate


def test_bench_supernet_refuses_a_cache_of_other_settings_and_measures_its_reference(tmp_path, capsys):
    """A cache written with other settings is refused, each difference named; the reference's agreement
    with itself is the Kendall tau between its runs."""
    a = bs.parse_args(["--quick", "--out", str(tmp_path)])
    further = [f"{m}@1" for m in bs.METHODS]  # every estimator with a second seed, the supernets' too
    assert a.scores == ["supernet", "progressive", "train", "train_equal", "train_1epoch", "naswot", "synflow",
                        "supernet_again", "standalone0", "standalone1", *further]
    # the estimators run with --seed (+ 100 k), the stand-alone runs with the seeds after it (no shared initial weights)
    assert [bs._seed(n, a) for n in a.scores] == [0, 0, 0, 0, 0, 0, 0, 3, 1, 2, *[100] * 7]
    assert bs.cache_path(tmp_path, "standalone1", a).name == "standalone_seed2.json"
    assert bs.cache_path(tmp_path, "supernet_again", a).name == "supernet_seed3.json"
    assert bs.cache_path(tmp_path, "train", a).name == "train.json"
    # --estimator-seeds: every estimator again with seeds clear of the others'; a supernet seed trains its own
    e = bs.parse_args(["--quick", "--out", str(tmp_path), "--estimator-seeds", "3"])
    extra = [n for n in e.scores if "@" in n]
    assert extra == [f"{m}@{k}" for k in (1, 2) for m in bs.METHODS]
    assert [bs._seed(n, e) for n in ("train@1", "naswot@2", "supernet@2")] == [100, 200, 200]
    assert bs.cache_path(tmp_path, "train_equal@2", e).name == "train_equal_seed200.json"
    assert {bs._seed(n, e) for n in extra}.isdisjoint(bs._seed(n, e) for n in e.scores if "@" not in n)
    w = tmp_path / "w"
    assert [bs.supernet_dir(w, n, e) for n in ("supernet", "supernet_again", "supernet@2", "progressive",
                                                "progressive@1")] == \
        [w, w, w / "supernet_seed200", w / "progressive", w / "progressive_seed100"]
    assert bs.supernet_of("supernet_again") == "supernet" and bs.supernet_of("train@1") is None
    assert bs.parse_args(["--quick", "--archs", "12"]).archs == 12  # --quick's settings are defaults: an option wins
    with pytest.raises(SystemExit):
        bs.parse_args(["--estimator-seeds", "0"])
    assert "at least 1" in capsys.readouterr().err
    bs.check_work(tmp_path / "w", a)
    bs.check_work(tmp_path / "w", a)  # the same settings: reused
    b = bs.parse_args(["--quick", "--out", str(tmp_path), "--seed", "3", "--scores", "standalone1"])
    assert b.scores == ["standalone1"]
    with pytest.raises(SystemExit, match="seed 0 there, 3 asked"):
        bs.check_work(tmp_path / "w", b)
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "scores.json").write_text("{}")
    with pytest.raises(SystemExit, match="no settings.json"):
        bs.check_work(tmp_path / "v", a)
    with pytest.raises(SystemExit):
        bs.parse_args(["--scores", "standalone7"])
    assert "unknown standalone7" in capsys.readouterr().err
    agree = _ranking.reference_agreement([[1, 2, 3, 4], [1, 2, 3, 4], [4, 3, 2, 1]])
    assert agree["pairwise_max"] == pytest.approx(1.0) and agree["pairwise_min"] == pytest.approx(-1.0)
    assert agree["pairwise_mean"] == pytest.approx(-1 / 3)


def test_bench_supernet_reference_ceiling():
    """The ceiling a noisy reference leaves: 1 without noise, 0 when the runs are all noise, the
    Gaussian arcsine law in between, and more runs for a higher target."""
    bs = _ranking
    truth = np.linspace(0.80, 0.90, 24)
    exact = bs.reference_ceiling([list(truth)] * 3)
    assert exact["perfect_score_tau"] == pytest.approx(1.0) and exact["runs_for_target"] == 1
    assert exact["noise_std"] == pytest.approx(0.0)
    rng = np.random.default_rng(0)
    d = rng.normal(0, 0.01, size=24)  # the runs differ, their means do not: nothing for a score to rank
    noise_only = bs.reference_ceiling([list(0.85 + d), list(0.85 - d)])
    assert noise_only["perfect_score_tau"] == 0.0 and noise_only["runs_for_target"] is None
    arch = rng.normal(0.85, 0.003, size=80)  # more architectures: the simulation meets the law
    runs = arch + rng.normal(0, 0.003, size=(4, 80))
    c = bs.reference_ceiling(list(runs), draws=100)
    assert c["noise_std"] == pytest.approx(0.003, rel=0.1) and c["arch_std"] == pytest.approx(0.003, rel=0.2)
    rho = 1 / np.sqrt(1 + (c["noise_std"] / c["arch_std"]) ** 2 / 4)
    assert c["perfect_score_tau"] == pytest.approx(2 / np.pi * np.arcsin(rho), abs=0.03)
    assert c["runs_for_target"] > bs.reference_ceiling(list(runs), target=0.6, draws=100)["runs_for_target"]
    curve = list(c["by_runs"].values())  # 1, 2 ... runs, up to the target: more runs, a steadier reference
    assert list(c["by_runs"]) == list(range(1, c["runs_for_target"] + 1)) and curve == sorted(curve)
    assert c["by_runs"][4] == c["perfect_score_tau"] and curve[-2] < 0.8 <= curve[-1]
    t = rng.normal(size=24)  # the vectorised tau is scipy's
    want = np.mean([kendalltau(t, t + e).statistic for e in np.random.default_rng(1).normal(0, 0.5, (300, 24))])
    assert bs.expected_tau(t, 0.5, 300, np.random.default_rng(1)) == pytest.approx(want)
    with pytest.raises(ValueError, match="at least 2 runs"):
        bs.reference_ceiling([list(truth)])


def test_bench_supernet_runs_elsewhere_and_keeps_older_caches(tmp_path, capsys):
    """--space / --target / --device / --batch-size / --data-root are cache settings; a cache written
    before they existed reads as the defaults; the report's command names what differs; a bad space,
    target or batch is a one-line error."""
    work = tmp_path / "w"
    work.mkdir()
    old = {k: v for k, v in vars(bs.parse_args(["--out", str(tmp_path)])).items() if k in bs._SETTINGS and k not in bs._ADDED}
    (work / "settings.json").write_text(json.dumps(old))
    a = bs.parse_args(["--out", str(tmp_path)])
    # a cache of the former benchmark: its pick the latency spread, its reference scored on the validation split
    assert bs.settings_differences(work, a) == ["pick 'spread' there, 'uniform' asked",
                                                "reference_split 'val' there, 'test' asked"]
    (work / "settings.json").write_text(json.dumps({**old, "pick": "random", "reference_split": "test"}))
    assert bs.settings_differences(work, bs.parse_args(["--pick", "spread"])) == []  # spread's former name
    g = bs.parse_args(["--out", str(tmp_path), "--space", "mbv3", "--device", "cuda", "--batch-size", "128", "--pick",
                       "spread"])
    assert bs.settings_differences(work, g) == ["space 'tiny' there, 'mbv3' asked", "device 'cpu' there, 'cuda' asked",
                                                "batch_size None there, 128 asked"]
    assert bs.command(a) == "taskset -c 0 python -m benchmarks supernet"
    assert bs.command(g) == "python -m benchmarks supernet --space mbv3 --device cuda --batch-size 128 --pick spread"
    assert [bs._evaluator(n, g, tmp_path / "c")[0].device for n in ("supernet", "train", "naswot", "standalone0")] \
        == ["cuda"] * 4
    assert bs._evaluator("standalone0", g, tmp_path / "c")[0].batch_size == 128
    with pytest.raises(SystemExit, match="--space nope: unknown search space"):
        bs.load_bench_space("nope")
    with pytest.raises(SystemExit, match="--target: unknown target 'nope'"):
        bs.pick_archs(bs.load_bench_space("tiny"), None, 2, 0, "nope")
    with pytest.raises(SystemExit):
        bs.parse_args(["--batch-size", "0"])
    assert "--batch-size must be a positive integer" in capsys.readouterr().err


def test_bench_supernet_ablation_reads_its_variants():
    """A variant is ``base`` or supernet-setting overrides; anything else is a one-line error."""
    assert ab.parse_variant("base") == {}
    assert ab.parse_variant("epochs=40,sort_channels=false") == {"epochs": 40, "sort_channels": False}
    assert ab.parse_variant("seed=1") == {"seed": 1}
    # scoring settings: eval.<key>, scored with the supernet the training part names (none: the benchmark's)
    v = ab.parse_variant("eval.finetune_steps=50,seed=1")
    assert ab.split_overrides(v) == ({"seed": 1}, {"finetune_steps": 50})
    assert ab._label(ab.split_overrides(ab.parse_variant("sort_channels=false,seed=1"))[0]) == "sort_channels=false_seed=1"
    assert ab.parse_variant("split=s1_width,warm=true,epochs=7") == {"split": "s1_width", "warm": True, "epochs": 7}
    for bad, words in [("split=s1_kernel", "split= takes"), ("warm=true", "goes with split"),
                       ("split=s1_width,warm=3", "goes with split")]:
        with pytest.raises(SystemExit, match=words):
            ab.parse_variant(bad)
    for bad, words in [("epochs", "expected base"), ("device=cuda", "'device' is not"), ("distil=0", "'distil' is not"),
                       ("epochs=0", "epochs"), ("eval.checkpoint=x", "'eval.checkpoint' is not"),
                       ("eval.finetune_steps=-1", "finetune_steps")]:
        with pytest.raises(SystemExit, match=words):
            ab.parse_variant(bad)


def test_bench_supernet_ablation_follows_the_benchmark_run(tmp_path):
    """The ablation takes the settings the benchmark run recorded (space, device ... included; older
    records read as the defaults); no run there is a one-line error."""
    with pytest.raises(SystemExit, match="no benchmarks/supernet.py run there"):
        ab.benchmark_run(tmp_path, str(tmp_path), 3)
    (tmp_path / "settings.json").write_text(json.dumps({"data": "digits", "space": "mbv3", "device": "cuda",
                                                         "archs": 6, "resolution": 32}))
    b = ab.benchmark_run(tmp_path, str(tmp_path), 2)
    assert (b.data, b.space, b.device, b.archs, b.resolution, b.standalone_seeds) == ("digits", "mbv3", "cuda", 6, 32, 2)
    assert (b.target, b.batch_size, b.data_root) == ("cpu", None, None)  # not recorded: the defaults
    assert ab.benchmark_run(tmp_path, str(tmp_path), 2, "cpu").device == "cpu"  # --device: the variants train there
    assert ab._args(["--device", "cuda:1"]).device == "cuda:1" and ab._args([]).device is None
    assert usable_device("cpu") == "cpu"
    with pytest.raises(SystemExit, match="--device takes cpu, cuda or cuda:<i> .* got 'gpu'"):
        usable_device("gpu")


def test_bench_supernet_keeps_its_architectures(tmp_path, monkeypatch):
    """The architectures are drawn uniformly from the space; with ``keep`` they are saved and read back, so a
    part of the run on another machine (another predictor) scores the same ones."""
    space = bs.load_bench_space("tiny")

    class Model:
        def predict(self, archs):
            return [float(a.blocks[0].out_ch + len(a.blocks)) for a in archs]

    monkeypatch.setattr(nas, "load_target", lambda name: type("T", (), {"resolution": None})())
    monkeypatch.setattr(nas, "load_latency_model", lambda target: Model())
    monkeypatch.setattr(_ranking, "adapt_arch", lambda a, data, resolution=None: a)
    archs, ms = bs.pick_archs(space, None, 4, 0, "cpu", keep=tmp_path)
    assert (tmp_path / "archs.json").is_file() and ms == sorted(ms)
    # the default pick: the first distinct uniform draws of the space (what a search meets), fastest first
    rng = np.random.default_rng(0)
    drawn = list(dict.fromkeys(space.random(rng).digest() for _ in range(8)))[:4]
    assert sorted(a.digest() for a in archs) == sorted(drawn)
    monkeypatch.setattr(nas, "load_target", lambda name: pytest.fail("a kept pick is not picked again"))
    again, ms2 = bs.pick_archs(space, None, 4, 0, "nope", keep=tmp_path)
    assert [a.digest() for a in again] == [a.digest() for a in archs] and ms2 == ms


def test_bench_supernet_ablation_averages_seed_supernets():
    """Averaged supernets: every set of k seed supernets (settings variants left out), then all variants."""
    ref = [1.0, 2.0, 3.0, 4.0]
    rows = [{"overrides": {}, "scores": [1, 2, 3, 4]}, {"overrides": {"seed": 1}, "scores": [4, 3, 1, 2]},
            {"overrides": {"seed": 2}, "scores": [2, 1, 4, 3]}, {"overrides": {"epochs": 40}, "scores": [1, 2, 4, 3]}]
    out = ab.averaged_supernets(rows, ref)
    assert [(e["k"], e["sets"]) for e in out] == [(1, 3), (2, 3), (3, 1), (4, 1)]
    assert (out[0]["tau_min"], out[0]["tau_max"]) == (pytest.approx(-2 / 3), pytest.approx(1.0))
    assert out[0]["tau_mean"] == pytest.approx((1 - 2 / 3 + 1 / 3) / 3)
    pairs = [[2.5, 2.5, 2, 3], [1.5, 1.5, 3.5, 3.5], [3, 2, 2.5, 2.5]]  # seeds 0+1, 0+2, 1+2
    assert out[1]["tau_mean"] == pytest.approx(np.mean([ab.kendall_tau(ref, p) for p in pairs]))
    assert out[2]["tau_mean"] == pytest.approx(ab.kendall_tau(ref, [7 / 3, 2, 8 / 3, 3]))  # the three seeds
    assert out[3]["tau_mean"] == pytest.approx(ab.kendall_tau(ref, [2, 2, 3, 3]))  # every variant
    assert [e["supernets"] for e in ab.averaged_supernets(rows[2:], ref)] == ["all 2 variants"]  # one seed
    assert ab.averaged_supernets(rows[3:], ref) == []
    assert ab.is_seed_variant({"seed": 3}) and not ab.is_seed_variant({"seed": 3, "epochs": 40})


def test_bench_supernet_ablation_pairs_settings_by_seed():
    """A setting trained with several seeds is compared with the default settings of the same seeds
    only; a setting with one seed, or with no default run of its seeds, is left out."""
    rows = [{"overrides": o, "kendall_tau_vs_reference": t} for o, t in [
        ({}, 0.3), ({"seed": 1}, 0.5), ({"seed": 2}, 0.2), ({"distill": 0}, 0.4), ({"distill": 0, "seed": 1}, 0.45),
        ({"distill": 0, "seed": 5}, 0.9), ({"epochs": 40}, 0.35), ({"lr": 0.01, "seed": 7}, 0.1),
        ({"lr": 0.01, "seed": 8}, 0.2)]]
    out = ab.by_seed(rows, base_seed=0)
    assert len(out) == 1
    e = out[0]
    assert (e["setting"], e["seeds"], e["paired_seeds"]) == ("distill=0", [0, 1, 5], [0, 1])
    assert e["tau_mean_paired"] == pytest.approx(0.425) and e["default_tau_mean_paired"] == pytest.approx(0.4)
    assert e["better_on"] == 1


def test_bench_supernet_ablation_ranks_features():
    """Each architecture feature ranked against the reference and the averaged supernets."""
    archs = [load_space("tiny").random(s) for s in range(6)]
    f = ab.arch_features(archs[0])
    assert f["blocks"] == len(archs[0].blocks) and f["last_width"] == archs[0].blocks[-1].out_ch
    assert f["se_blocks"] == sum(getattr(b, "se", None) is not None for b in archs[0].blocks)
    depth = [float(len(a.blocks)) for a in archs]
    by = ab.ranked_by(archs, list(range(6)), depth, None)
    assert set(by) == {"blocks", "expanded_channels", "mean_kernel", "se_blocks", "last_width", "predicted_ms"}
    assert by["blocks"]["vs_reference"] == pytest.approx(1.0) and by["blocks"]["vs_averaged_supernets"] is None
    by = ab.ranked_by(archs, list(range(6)), depth, list(range(6)))
    assert by["predicted_ms"]["vs_averaged_supernets"] == pytest.approx(1.0)


def test_bench_supernet_graded_pool_reaches_the_narrowest_and_widest_networks():
    """Random draws of a space cluster in the middle of its sizes; graded draws reach both ends."""
    sp = load_space("bench/wide")
    rng = np.random.default_rng(0)
    graded = [arch_cost(_ranking.graded_arch(sp, rng)).params for _ in range(300)]
    rand = [arch_cost(sp.random(rng)).params for _ in range(300)]
    lo, hi = arch_cost(sp.smallest()).params, arch_cost(sp.largest()).params
    assert min(graded) < 2 * lo < min(rand) and max(rand) < 0.8 * hi < max(graded)


def test_bench_supernet_train_equal_takes_the_supernets_cost(tmp_path):
    """train_equal's epochs: train's epochs scaled by the supernet's training and scoring over train's
    scoring; refused before both are complete; kept once computed."""
    a = bs.parse_args(["--quick", "--out", str(tmp_path), "--archs", "4", "--bands", "2"])
    work = tmp_path / "w"
    (work / "scores").mkdir(parents=True)
    with pytest.raises(SystemExit, match="train_equal needs the supernet and train scores"):
        bs.equal_epochs(work, a)
    (work / "scores" / "supernet.json").write_text(json.dumps({str(i): {"score": 0.5, "seconds": 1.0} for i in range(a.archs)}))
    (work / "scores" / "train.json").write_text(json.dumps({str(i): {"score": 0.5, "seconds": 10.0} for i in range(a.archs)}))
    torch.save({"format": SUPERNET_FORMAT, "version": SUPERNET_VERSION, "history": [{"seconds": 36.0}] * 2},
               work / "supernet.ckpt")
    # supernet: 72 s of training + 4 x 1 s of scoring = 76 s; train: 4 x 10 s at 3 epochs -> 3 x 76 / 40 = 5.7
    assert bs.equal_epochs(work, a) == 6
    (work / "scores" / "train.json").write_text(json.dumps({str(i): {"score": 0.5, "seconds": 1e6} for i in range(a.archs)}))
    assert bs.equal_epochs(work, a) == 6  # kept: every process of a split run trains the same epochs
    assert json.loads((work / "equal_compute.json").read_text())["train_epochs"] == 3
    # an epoch slowed by other load counts as a typical one: every epoch does the same work
    (work / "equal_compute.json").unlink()
    (work / "scores" / "train.json").write_text(json.dumps({str(i): {"score": 0.5, "seconds": 10.0} for i in range(a.archs)}))
    torch.save({"format": SUPERNET_FORMAT, "version": SUPERNET_VERSION,
                "history": [{"seconds": 36.0}, {"seconds": 300.0}, {"seconds": 36.0}]}, work / "supernet.ckpt")
    assert bs.equal_epochs(work, a) == round(3 * (3 * 36 + 4) / 40)  # 8 (the sum, 340 s of training: 26)
    assert json.loads((work / "equal_compute.json").read_text())["supernet_epoch_s"] == [36.0, 300.0, 36.0]


def test_a_split_supernet_trains_one_supernet_per_choice_of_its_parameter():
    """``split=<parameter>``: one sub-space per choice, each holding exactly the architectures with that
    choice; a parameter the space does not vary is a one-line error naming those it does."""
    space = bs.load_bench_space("bench/wide")
    parts = ab.sub_spaces(space, "s1_width")
    assert [v for v, _ in parts] == list(space.param_choices()["s1_width"])
    for seed in range(20):
        arch = space.random(seed)
        v = locate(space, arch)[0]["s1_width"]
        for w, sub in parts:
            if w == v:
                assert locate(sub, arch)[0] == locate(space, arch)[0]
            else:
                with pytest.raises(ArchOutsideSpace):
                    locate(sub, arch)
    assert [v for v, _ in ab.sub_spaces(space, "s3_depth")] == [1, 2, 3]
    with pytest.raises(SystemExit, match="no such choice to split on .*s1_width"):
        ab.sub_spaces(space, "head_hidden")  # bench/wide's head has one choice



def test_bench_supernet_train_equal_at_trains_epochs_is_train(tmp_path, capsys):
    """Where the supernet's cost buys as many epochs as train's, train_equal is the same training with the
    same seeds: it reads train's scores (its cache is train's), costs nothing more, and runs no part of
    its own; at other epochs it keeps its own cache."""
    a = bs.parse_args(["--out", str(tmp_path), "--estimator-seeds", "2"])
    work = tmp_path / "w"
    (work / "scores").mkdir(parents=True)
    assert bs.cache_path(work, "train_equal@1", a).name == "train_equal_seed100.json"  # not known yet: its own
    (work / "equal_compute.json").write_text(json.dumps({"epochs": 3, "train_epochs": 3}))
    assert bs.cache_path(work, "train_equal@1", a) == bs.cache_path(work, "train@1", a)
    assert bs.cache_path(work, "train_equal", a).name == "train.json"
    sizes = bs.SplitSizes(10000, 12000, 10000)
    assert bs.estimated_seconds("train_equal@1", a, 60, sizes, work) == 0.0
    archs = [load_space("tiny").random(s) for s in range(3)]
    assert not [p for p in bs.parts(a, work, archs, sizes) if p.name.startswith("train_equal")]
    b = bs.parse_args(["--out", str(tmp_path), "--scores", "train_equal"])
    bs.compute_here(b, None, None, None, archs, work)  # nothing trained: train's part computes those scores
    assert "its scores are train's, computed there" in capsys.readouterr().out
    (work / "equal_compute.json").write_text(json.dumps({"epochs": 5, "train_epochs": 3}))
    assert bs.cache_path(work, "train_equal@1", a).name == "train_equal_seed100.json"
    assert any(p.name.startswith("train_equal") for p in bs.parts(a, work, archs, sizes))
