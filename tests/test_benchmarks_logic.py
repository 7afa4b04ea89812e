"""What single benchmarks compute: their pieces tested on small inputs (the benchmarks themselves are
run, with figures, by hand; tests/test_benchmarks.py checks the package as a whole)."""

import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest


def _script(name: str):
    """The benchmark ``benchmarks/<name>.py``, imported."""
    return importlib.import_module(f"benchmarks.{name}")


def _bench_targets():
    return _script("targets")


def test_bench_targets_cross_hypervolume_judges_each_front_on_each_latency():
    """Front a, networks x (90%) and y (80%); front b, x alone.  On latency p, x is slower than y and
    both are optimal; on latency q, x is faster and dominates y."""
    bt = _bench_targets()
    scores = {"x": 0.9, "y": 0.8}
    lat = {"p": {"x": 2.0, "y": 1.0}, "q": {"x": 1.0, "y": 2.0}}
    refs = {"p": (0.5, 4.0), "q": (0.5, 4.0)}  # boxes of 0.5 x 4 = 2
    fronts = {"a": ["x", "y"], "b": ["x"]}
    hv = bt.cross_hypervolume(fronts, scores, lat, refs)
    assert hv["a"]["p"] == pytest.approx((1.0 * 0.3 + 2.0 * 0.4) / 2)
    assert hv["a"]["q"] == pytest.approx(3.0 * 0.4 / 2)  # y adds nothing where x dominates it
    assert hv["b"]["p"] == pytest.approx(2.0 * 0.4 / 2)
    assert hv["b"]["q"] == pytest.approx(hv["a"]["q"])
    assert bt.front_of(["x", "y"], scores, lat["q"]) == ["x"]
    assert bt.still_optimal(fronts, ["x", "y"], scores, lat) == {"a": {"p": 2, "q": 1}, "b": {"p": 1, "q": 1}}
    cmp = bt.compare_fronts(fronts, ["x", "y"], scores, lat, refs)
    assert cmp["jaccard"]["a"]["b"] == pytest.approx(0.5) and cmp["common"]["a"]["b"] == 1
    assert cmp["hypervolume"][bt.BEST] == pytest.approx({"p": hv["a"]["p"], "q": hv["a"]["q"]})
    assert cmp["hypervolume_share_of_best"]["b"]["p"] == pytest.approx(0.8 / 1.1)
    assert cmp["kendall_tau"]["p"]["q"] == pytest.approx(-1.0)  # p and q rank x and y the other way round


def test_bench_targets_shares_each_score_across_searches(tmp_path):
    """A score is kept per (Arch, seed): asked again, in this process or the next, it is not re-evaluated;
    the wrapper reports the wrapped evaluator's settings, so the study records what it would."""
    import dataclasses

    from nas.search.evaluate import EvalResult, Evaluator
    from nas.space import load_space

    calls = []

    @dataclasses.dataclass(frozen=True)
    class Counting(Evaluator):
        name = "counting"
        epochs: int = 2

        @property
        def metric(self):
            return "val_accuracy"

        def evaluate(self, arch, data, *, seed):
            calls.append((arch.digest(), seed))
            return EvalResult(0.5 + seed / 100, self.metric, 1.0, {"epochs": 2.0})

    bt = _bench_targets()
    arch, other = load_space("tiny").random(0), load_space("tiny").random(1)
    path = tmp_path / "evaluations.json"
    ev = bt.SharedEvaluations(Counting(), path, context={"data": "d"})
    assert ev.settings() == {"name": "counting", "epochs": 2} and ev.metric == "val_accuracy"
    assert ev.evaluate(arch, None, seed=3).score == ev.evaluate(arch, None, seed=3).score == 0.53
    ev.evaluate(arch, None, seed=4)
    again = bt.SharedEvaluations(Counting(), path, context={"data": "d"})
    assert again.evaluate(arch, None, seed=4).score == 0.54 and again.reused == 1 and again.trained == 0
    again.evaluate(other, None, seed=3)
    assert calls == [(arch.digest(), 3), (arch.digest(), 4), (other.digest(), 3)]
    fresh = bt.SharedEvaluations(Counting(), path, context={"data": "other data"})
    assert fresh.scores == {}


def _bench_supernet_search():
    return _script("supernet_search")


def test_bench_supernet_search_gives_the_train_path_the_trials_that_fit_its_budget():
    """Equal compute: the first trials, in trial order, whose recorded durations sum within the budget."""
    bss = _bench_supernet_search()
    recs = [{"number": 2, "duration_s": 5.0}, {"number": 0, "duration_s": 4.0}, {"number": 1, "duration_s": 0.5},
            {"number": 3, "duration_s": None}]
    got, used = bss.prefix_within(recs, 10.0)
    assert [r["number"] for r in got] == [0, 1, 2, 3] and used == pytest.approx(9.5)
    got, used = bss.prefix_within(recs, 9.0)
    assert [r["number"] for r in got] == [0, 1] and used == pytest.approx(4.5)
    assert bss.prefix_within(recs, 1.0) == ([], 0.0)
    # one network at 55% and 1 ms against (10%, 2 ms): half the box's width, half its height
    assert bss.hv_share([(0.55, 1.0)], (0.1, 2.0)) == pytest.approx(0.25)


def test_bench_supernet_refuses_a_cache_of_other_settings_and_measures_its_reference(tmp_path, capsys):
    """A cache written with other settings is refused, each difference named; the reference's agreement
    with itself is the Kendall tau between its runs."""
    bs = _script("supernet")
    a = bs._args(["--quick", "--out", str(tmp_path)])
    assert a.scores == ["supernet", "progressive", "train", "train_equal", "train_1epoch", "naswot", "synflow",
                        "supernet_again", "standalone0", "standalone1"]
    # the estimators run with --seed, the stand-alone runs with the seeds after it (no shared initial weights)
    assert [bs._seed(n, a) for n in a.scores] == [0, 0, 0, 0, 0, 0, 0, 3, 1, 2]
    assert bs._cache_path(tmp_path, "standalone1", a).name == "standalone_seed2.json"
    assert bs._cache_path(tmp_path, "supernet_again", a).name == "supernet_seed3.json"
    assert bs._cache_path(tmp_path, "train", a).name == "train.json"
    # --estimator-seeds: the estimators that train or score at init again with seeds clear of the others'
    e = bs._args(["--quick", "--out", str(tmp_path), "--estimator-seeds", "3"])
    extra = [n for n in e.scores if "@" in n]
    assert extra == [f"{m}@{k}" for k in (1, 2) for m in bs.SEEDED] and "supernet@1" not in e.scores
    assert [bs._seed(n, e) for n in ("train@1", "naswot@2")] == [100, 200]
    assert bs._cache_path(tmp_path, "train_equal@2", e).name == "train_equal_seed200.json"
    assert {bs._seed(n, e) for n in extra}.isdisjoint(bs._seed(n, e) for n in e.scores if "@" not in n)
    with pytest.raises(SystemExit):
        bs._args(["--estimator-seeds", "0"])
    assert "at least 1" in capsys.readouterr().err
    bs.check_work(tmp_path / "w", a)
    bs.check_work(tmp_path / "w", a)  # the same settings: reused
    b = bs._args(["--quick", "--out", str(tmp_path), "--seed", "3", "--scores", "standalone1"])
    assert b.scores == ["standalone1"]
    with pytest.raises(SystemExit, match="seed 0 there, 3 asked"):
        bs.check_work(tmp_path / "w", b)
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "scores.json").write_text("{}")
    with pytest.raises(SystemExit, match="no settings.json"):
        bs.check_work(tmp_path / "v", a)
    with pytest.raises(SystemExit):
        bs._args(["--scores", "standalone7"])
    assert "unknown standalone7" in capsys.readouterr().err
    agree = _script("_ranking").reference_agreement([[1, 2, 3, 4], [1, 2, 3, 4], [4, 3, 2, 1]])
    assert agree["pairwise_max"] == pytest.approx(1.0) and agree["pairwise_min"] == pytest.approx(-1.0)
    assert agree["pairwise_mean"] == pytest.approx(-1 / 3)


def test_bench_supernet_reference_ceiling():
    """The ceiling a noisy reference leaves: 1 without noise, 0 when the runs are all noise, the
    Gaussian arcsine law in between, and more runs for a higher target."""
    from scipy.stats import kendalltau

    bs = _script("_ranking")
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
    assert bs._expected_tau(t, 0.5, 300, np.random.default_rng(1)) == pytest.approx(want)
    with pytest.raises(ValueError, match="at least 2 runs"):
        bs.reference_ceiling([list(truth)])


def test_bench_supernet_runs_elsewhere_and_keeps_older_caches(tmp_path, capsys):
    """--space / --target / --device / --batch-size / --data-root are cache settings; a cache written
    before they existed reads as the defaults; the report's command names what differs; a bad space,
    target or batch is a one-line error."""
    import json

    bs = _script("supernet")
    work = tmp_path / "w"
    work.mkdir()
    old = {k: v for k, v in vars(bs._args(["--out", str(tmp_path)])).items() if k in bs._SETTINGS and k not in bs._ADDED}
    (work / "settings.json").write_text(json.dumps(old))
    a = bs._args(["--out", str(tmp_path)])
    assert bs.settings_differences(work, a) == []
    g = bs._args(["--out", str(tmp_path), "--space", "mbv3", "--device", "cuda", "--batch-size", "128"])
    assert bs.settings_differences(work, g) == ["space 'tiny' there, 'mbv3' asked", "device 'cpu' there, 'cuda' asked",
                                                "batch_size None there, 128 asked"]
    assert bs.command(a) == "taskset -c 0 python -m benchmarks supernet"
    assert bs.command(g) == "python -m benchmarks supernet --space mbv3 --device cuda --batch-size 128"
    assert [bs._evaluator(n, g, tmp_path / "c")[0].device for n in ("supernet", "train", "naswot", "standalone0")] \
        == ["cuda"] * 4
    assert bs._evaluator("standalone0", g, tmp_path / "c")[0].batch_size == 128
    with pytest.raises(SystemExit, match="--space nope: unknown search space"):
        bs.load_bench_space("nope")
    with pytest.raises(SystemExit, match="--target: unknown target 'nope'"):
        bs._pick_archs(bs.load_bench_space("tiny"), None, 2, 0, "nope")
    with pytest.raises(SystemExit):
        bs._args(["--batch-size", "0"])
    assert "--batch-size must be a positive integer" in capsys.readouterr().err


def test_bench_supernet_cost_projects_the_benchmark(capsys):
    """The projection is the measured rates' arithmetic: epochs x images / rate, per part."""
    bc = _script("supernet_cost")
    a = bc._args(["--supernet-epochs", "2", "--standalone-epochs", "3", "--archs", "4", "--standalone-seeds", "2"])
    assert a.images == [1_281_167, 9_469]
    p = bc.projected(a, 3600, sn_ips=2.0, sa_ips=4.0, score_s=90.0)
    assert p["supernet_h"] == pytest.approx(2 * 3600 / 2.0 / 3600)  # 1 h
    assert p["reference_h"] == pytest.approx(4 * 2 * 3 * 3600 / 4.0 / 3600)  # 6 h
    assert p["scoring_h"] == pytest.approx(0.1) and p["total_h"] == pytest.approx(7.1)
    for bad in (["--images", "0"], ["--batch-size", "0"]):
        with pytest.raises(SystemExit):
            bc._args(bad)
        assert "must be a positive integer" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bc._args(["--train-samples", "-1"])
    assert "0 (every training image) or more" in capsys.readouterr().err


def test_bench_supernet_ablation_reads_its_variants():
    """A variant is ``base`` or supernet-setting overrides; anything else is a one-line error."""
    ab = _script("supernet_ablation")
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
    import json

    ab = _script("supernet_ablation")
    with pytest.raises(SystemExit, match="no benchmarks/supernet.py run there"):
        ab.benchmark_run(tmp_path, str(tmp_path), 3)
    (tmp_path / "settings.json").write_text(json.dumps({"data": "digits", "space": "mbv3", "device": "cuda",
                                                         "archs": 6, "resolution": 32}))
    b = ab.benchmark_run(tmp_path, str(tmp_path), 2)
    assert (b.data, b.space, b.device, b.archs, b.resolution, b.standalone_seeds) == ("digits", "mbv3", "cuda", 6, 32, 2)
    assert (b.target, b.batch_size, b.data_root) == ("cpu", None, None)  # not recorded: the defaults
    assert ab.benchmark_run(tmp_path, str(tmp_path), 2, "cpu").device == "cpu"  # --device: the variants train there
    assert ab._args(["--device", "cuda:1"]).device == "cuda:1" and ab._args([]).device is None
    from benchmarks.harness import usable_device

    assert usable_device("cpu") == "cpu"
    with pytest.raises(SystemExit, match="--device takes cpu, cuda or cuda:<i> .* got 'gpu'"):
        usable_device("gpu")


def test_bench_supernet_keeps_its_architectures(tmp_path, monkeypatch):
    """With ``keep`` the picked architectures are saved and read back, so a part of the run on another
    machine (another predictor) scores the same ones."""
    import nas

    bs = _script("supernet")
    space = bs.load_bench_space("tiny")

    class Model:
        def predict(self, archs):
            return [float(a.blocks[0].out_ch + len(a.blocks)) for a in archs]

    monkeypatch.setattr(nas, "load_target", lambda name: type("T", (), {"resolution": None})())
    monkeypatch.setattr(nas, "load_latency_model", lambda target: Model())
    monkeypatch.setattr("nas.data.adapt_arch", lambda a, data, resolution=None: a)
    archs, ms = bs._pick_archs(space, None, 4, 0, "cpu", keep=tmp_path)
    assert (tmp_path / "archs.json").is_file() and ms == sorted(ms)
    monkeypatch.setattr(nas, "load_target", lambda name: pytest.fail("a kept pick is not picked again"))
    again, ms2 = bs._pick_archs(space, None, 4, 0, "nope", keep=tmp_path)
    assert [a.digest() for a in again] == [a.digest() for a in archs] and ms2 == ms


def test_bench_supernet_ablation_averages_seed_supernets():
    """Averaged supernets: every set of k seed supernets (settings variants left out), then all variants."""
    ab = _script("supernet_ablation")
    ref = [1.0, 2.0, 3.0, 4.0]
    rows = [{"overrides": {}, "scores": [1, 2, 3, 4]}, {"overrides": {"seed": 1}, "scores": [4, 3, 1, 2]},
            {"overrides": {"seed": 2}, "scores": [2, 1, 4, 3]}, {"overrides": {"epochs": 40}, "scores": [1, 2, 4, 3]}]
    out = ab.averaged_supernets(rows, ref)
    assert [(e["k"], e["sets"]) for e in out] == [(1, 3), (2, 3), (3, 1), (4, 1)]
    assert (out[0]["tau_min"], out[0]["tau_max"]) == (pytest.approx(-2 / 3), pytest.approx(1.0))
    assert out[0]["tau_mean"] == pytest.approx((1 - 2 / 3 + 1 / 3) / 3)
    pairs = [[2.5, 2.5, 2, 3], [1.5, 1.5, 3.5, 3.5], [3, 2, 2.5, 2.5]]  # seeds 0+1, 0+2, 1+2
    assert out[1]["tau_mean"] == pytest.approx(np.mean([ab._tau(ref, p) for p in pairs]))
    assert out[2]["tau_mean"] == pytest.approx(ab._tau(ref, [7 / 3, 2, 8 / 3, 3]))  # the three seeds
    assert out[3]["tau_mean"] == pytest.approx(ab._tau(ref, [2, 2, 3, 3]))  # every variant
    assert [e["supernets"] for e in ab.averaged_supernets(rows[2:], ref)] == ["all 2 variants"]  # one seed
    assert ab.averaged_supernets(rows[3:], ref) == []
    assert ab.is_seed_variant({"seed": 3}) and not ab.is_seed_variant({"seed": 3, "epochs": 40})


def test_bench_supernet_ablation_pairs_settings_by_seed():
    """A setting trained with several seeds is compared with the default settings of the same seeds
    only; a setting with one seed, or with no default run of its seeds, is left out."""
    ab = _script("supernet_ablation")
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
    from nas.space import load_space

    ab = _script("supernet_ablation")
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


def test_bench_startup_times_help_and_a_typo(tmp_path):
    """One round for one command: --help exits 0, the typo and the refused value 2, and a subset writes
    no result file."""
    bs = _script("startup")
    rows = bs.main(["--commands", "space", "--rounds", "1", "--out", str(tmp_path)])
    assert [(r["command"], r["help_exit"], r["typo_exit"], r["refused_exit"]) for r in rows] == [("space", 0, 2, 2)]
    assert set(bs.REFUSED) == set(bs.COMMANDS)
    assert rows[0]["help_s"] > 0 and not list(tmp_path.iterdir())
    with pytest.raises(SystemExit):
        bs.main(["--rounds", "0"])


def test_gpu_check_without_a_gpu_says_to_rehearse(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("has CUDA")
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-m", "benchmarks", "gpu", "--out", str(tmp_path / "g.json")],
                       capture_output=True, text=True, timeout=120, cwd=root)
    assert r.returncode == 1 and r.stderr.strip() == ("python -m benchmarks gpu: torch sees no CUDA GPU here; run with --rehearse "
                                                      "to try the steps on the CPU")
    assert not (tmp_path / "g.json").exists()


@pytest.mark.slow
def test_gpu_check_rehearses_every_step_on_the_cpu(tmp_path):
    """The prepared GPU check's wrapper, rehearsed: profile (re-timing its sample), validate (reporting
    it) and the summary, on this machine's CPU with torch, in a few tens of seconds."""
    import json
    import os

    root = Path(__file__).resolve().parent.parent
    r = subprocess.run(["bash", str(root / "benchmarks" / "gpu_check.sh"), "--rehearse", "--skip-tests", "--legs",
                        "graph", "--budget-min", "0.05", "--n", "3"], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OUT": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((tmp_path / "gpu_check.json").read_text())
    leg = res["legs"]["graph"]
    assert res["rehearsal"] and leg["profile_exit"] == 0 and leg["validate_exit"] == 0
    assert leg["runtime"]["name"] == "torch" and leg["runtime"]["timing"] == "eager"  # a CPU replays no graphs
    assert leg["table_reproducibility"]["entries"] > 0 and leg["methods"]["predictor"]["n"] == 3
    assert {"graph_table.json", "graph_validate.json", "gpu_check.md", "gpu_check.log"} <= {
        p.name for p in tmp_path.iterdir()}
    assert "| graph |" in (tmp_path / "gpu_check.md").read_text()


def test_bench_supernet_graded_pool_reaches_the_narrowest_and_widest_networks():
    """Random draws of a space cluster in the middle of its sizes; graded draws reach both ends."""
    from nas.cost import arch_cost
    from nas.space import load_space

    sp = load_space("bench/wide")
    rng = np.random.default_rng(0)
    graded = [arch_cost(_script("_ranking").graded_arch(sp, rng)).params for _ in range(300)]
    rand = [arch_cost(sp.random(rng)).params for _ in range(300)]
    lo, hi = arch_cost(sp.smallest()).params, arch_cost(sp.largest()).params
    assert min(graded) < 2 * lo < min(rand) and max(rand) < 0.8 * hi < max(graded)


def test_bench_supernet_train_equal_takes_the_supernets_cost(tmp_path):
    """train_equal's epochs: train's epochs scaled by the supernet's training and scoring over train's
    scoring; refused before both are complete; kept once computed."""
    import json

    import torch

    bs = _script("supernet")
    a = bs._args(["--quick", "--out", str(tmp_path)])
    work = tmp_path / "w"
    (work / "scores").mkdir(parents=True)
    with pytest.raises(SystemExit, match="train_equal needs the supernet and train scores"):
        bs.equal_epochs(work, a)
    (work / "scores" / "supernet.json").write_text(json.dumps({str(i): {"score": 0.5, "seconds": 1.0} for i in range(a.archs)}))
    (work / "scores" / "train.json").write_text(json.dumps({str(i): {"score": 0.5, "seconds": 10.0} for i in range(a.archs)}))
    from nas.supernet.checkpoint import SUPERNET_FORMAT, SUPERNET_VERSION

    torch.save({"format": SUPERNET_FORMAT, "version": SUPERNET_VERSION, "history": [{"seconds": 36.0}] * 2},
               work / "supernet.ckpt")
    # supernet: 72 s of training + 4 x 1 s of scoring = 76 s; train: 4 x 10 s at 3 epochs -> 3 x 76 / 40 = 5.7
    assert bs.equal_epochs(work, a) == 6
    (work / "scores" / "train.json").write_text(json.dumps({str(i): {"score": 0.5, "seconds": 1e6} for i in range(a.archs)}))
    assert bs.equal_epochs(work, a) == 6  # kept: every process of a split run trains the same epochs
    assert json.loads((work / "equal_compute.json").read_text())["train_epochs"] == 3


def test_a_split_supernet_trains_one_supernet_per_choice_of_its_parameter():
    """``split=<parameter>``: one sub-space per choice, each holding exactly the architectures with that
    choice; a parameter the space does not vary is a one-line error naming those it does."""
    from benchmarks.supernet import load_bench_space
    from nas.supernet.elastic import ArchOutsideSpace, locate

    ab = _script("supernet_ablation")
    space = load_bench_space("bench/wide")
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
