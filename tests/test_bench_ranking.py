"""The ranking benchmark's statistics (``benchmarks/_ranking.py``) and its report (``benchmarks/supernet.py``):
Kendall's tau within equal-latency bands, partialled on MACs, the paired bootstrap, the mean over seeds,
the trivial scores as rows, the reference on the test split and the cost estimate."""

import json
import subprocess
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy.stats import kendalltau

from benchmarks import _ranking as rk
from benchmarks import supernet as bs
from benchmarks._inputs import on_test_split
from benchmarks._supernet_report import BASELINES, report
from nas.cost import arch_cost
from nas.space import load_space
from nas.supernet.checkpoint import SUPERNET_FORMAT, SUPERNET_VERSION


def test_the_vectorised_tau_is_scipys():
    """``tau_b`` (the bootstrap's) gives scipy's tau-b, ties and a constant side included."""
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 4, size=(50, 12)).astype(float), rng.integers(0, 3, size=(50, 12)).astype(float)
    want = [kendalltau(a, b).statistic for a, b in zip(x, y)]
    np.testing.assert_allclose(rk.tau_b(x, y), want, equal_nan=True)
    assert np.isnan(rk.tau_b(np.ones(5), np.arange(5.0)))
    assert rk.tau_b(np.arange(5.0), np.arange(5.0)) == 1.0


def test_partial_tau_of_a_known_case():
    """z = 1 2 3 4, x = 1 2 4 3, y = 2 1 3 4: tau_xz = tau_yz = 2/3 (5 of 6 pairs agree), tau_xy = 1/3 (4 of 6),
    so tau_xy.z = (1/3 - 4/9) / (1 - 4/9) = -1/5; a score that is z itself knows nothing beyond it: 0."""
    z, x, y = np.array([1, 2, 3, 4.0]), np.array([1, 2, 4, 3.0]), np.array([2, 1, 3, 4.0])
    assert (rk.kendall_tau(x, z), rk.kendall_tau(y, z), rk.kendall_tau(x, y)) == pytest.approx((2 / 3, 2 / 3, 1 / 3))
    assert rk.partial_tau(1 / 3, 2 / 3, 2 / 3) == pytest.approx(-0.2)
    assert rk.point_taus(y, x, z, [np.arange(4)])["tau_partial_macs"] == pytest.approx(-0.2)
    assert rk.point_taus(y, z, z, [np.arange(4)])["tau_partial_macs"] == 0.0
    np.testing.assert_allclose(rk.partial_tau(np.array([1 / 3, np.nan]), 2 / 3, 2 / 3), [-0.2, np.nan])


def _sized_but_reversed(n_per_band=15, bands=3):
    """Bands of rising latency and accuracy; within each band MACs rise as accuracy falls, and an estimator
    orders each band rightly but the bands wrongly."""
    ms, ref, macs, good = [], [], [], []
    for b in range(bands):
        for i in range(n_per_band):
            ms.append(b + i / n_per_band)
            ref.append(10 * b + i)
            macs.append(100 * b - i)  # the bands' order right, every band's order reversed
            good.append(-10 * b + i)  # every band's order right, the bands' order reversed
    return [np.asarray(v, dtype=float) for v in (ms, ref, macs, good)]


def test_band_tau_judges_each_band_alone():
    """A size count ranks the whole set well (the bands differ by size) but each band backwards; an estimator
    that orders each band rightly scores 1 in every band, whatever it does across them."""
    ms, ref, macs, good = _sized_but_reversed()
    bands = rk.latency_bands(ms, 3)
    assert [list(b) for b in bands] == [list(range(k * 15, (k + 1) * 15)) for k in range(3)]
    out = rk.rank_scores(ref, {"good": [good]}, macs, bands, draws=100)
    assert out["macs"].tau_all.value == pytest.approx(kendalltau(macs, ref).statistic) and out["macs"].tau_all.value > 0.3
    assert out["macs"].tau_bands.value == pytest.approx(-1.0) and [b.value for b in out["macs"].bands] == [-1.0] * 3
    assert out["good"].tau_bands.value == pytest.approx(1.0) and out["good"].tau_all.value < 0
    assert out["good"].minus_macs["tau_bands"].value == pytest.approx(2.0)
    assert out["good"].minus_macs["tau_bands"].low == pytest.approx(2.0)  # within a band nothing is left to chance
    with pytest.raises(ValueError, match="cannot make 4 latency bands"):
        rk.latency_bands([1.0, 2.0, 3.0], 4)


def test_the_headline_is_the_mean_over_seeds_never_the_best():
    ms, ref, macs, good = _sized_but_reversed()
    bands = rk.latency_bands(ms, 3)
    rng = np.random.default_rng(1)
    seeds = [ref.copy(), rng.permutation(ref), rng.permutation(ref)]  # seed 0 is perfect, the others noise
    r = rk.rank_scores(ref, {"e": seeds}, macs, bands, draws=200)["e"]
    want = [kendalltau(s, ref).statistic for s in seeds]
    assert r.seeds == 3 and r.by_seed["tau_all"] == pytest.approx(want)
    assert r.tau_all.value == pytest.approx(np.mean(want)) and r.tau_all.value < 0.6
    assert r.tau_all.low <= r.tau_all.value <= r.tau_all.high
    assert r.to_dict()["by_seed"]["tau_bands"][0] == pytest.approx(1.0)


def test_the_paired_bootstrap_covers_a_known_difference():
    """Reference, estimator and MACs are a shared latent plus independent normal noise, so each population
    tau is (2 / pi) arcsin(rho) and the estimator's difference from MACs is known.  Over 20 samples of 60
    architectures the 95% interval of the paired difference covers it in most; an estimator that is MACs
    differs by exactly 0 on every resample (an unpaired bootstrap would give it an interval around 0)."""
    def tau(sx, sy):  # population tau of latent + noise sx against latent + noise sy
        return 2 / np.pi * np.arcsin(1 / np.sqrt((1 + sx ** 2) * (1 + sy ** 2)))

    s_ref, s_est, s_macs = 0.3, 0.5, 1.5
    truth = tau(s_est, s_ref) - tau(s_macs, s_ref)  # about 0.29
    covered, excluded = 0, 0
    for k in range(20):
        rng = np.random.default_rng(100 + k)
        t = rng.normal(size=60)
        ref, est, macs = (t + s * rng.normal(size=60) for s in (s_ref, s_est, s_macs))
        bands = rk.latency_bands(t + rng.normal(size=60), 3)
        d = rk.rank_scores(ref, {"est": [est], "same": [macs]}, macs, bands, draws=300, seed=k)
        ci = d["est"].minus_macs["tau_all"]
        covered += ci.low <= truth <= ci.high
        excluded += ci.low > 0
        same = d["same"].minus_macs
        assert all((same[m].low, same[m].value, same[m].high) == (0.0, 0.0, 0.0) for m in rk.METRICS)
    assert covered >= 16 and excluded >= 18


def _fake_run(tmp_path):
    """A complete quick run's caches with made-up scores (the estimators noisy copies of a reference that
    follows MACs), its supernets' checkpoints holding their histories only."""
    a = bs.parse_args(["--quick", "--out", str(tmp_path), "--archs", "12", "--bands", "3"])
    work = tmp_path / "work"
    bs.check_work(work, a)
    space = load_space("tiny")
    archs = list({x.digest(): x for x in (space.random(s) for s in range(40))}.values())[:12]
    data = SimpleNamespace(num_classes=10, in_chans=1, resolution=28, describe=lambda: "made up")
    macs = np.array([arch_cost(x.with_head(num_classes=10, in_chans=1).with_resolution(28)).macs for x in archs], float)
    ms = list(np.sort(macs) / 1e6 + np.arange(12) * 1e-3)
    rng = np.random.default_rng(0)
    ref = 0.8 + 0.1 * np.argsort(np.argsort(macs)) / 12
    for name in bs.score_names(a.standalone_seeds, a.estimator_seeds):
        path = bs.cache_path(work, name, a)
        path.parent.mkdir(parents=True, exist_ok=True)
        vals = ref + rng.normal(0, 0.02, size=12)
        path.write_text(json.dumps({x.digest(): {"score": float(v), "seconds": 1.0} for x, v in zip(archs, vals)}))
        if bs.supernet_of(name) == name:
            bs.supernet_dir(work, name, a).mkdir(parents=True, exist_ok=True)
            torch.save({"format": SUPERNET_FORMAT, "version": SUPERNET_VERSION, "history": [{"seconds": 6.0}] * 2},
                       bs.supernet_dir(work, name, a) / "supernet.ckpt")
    (work / "equal_compute.json").write_text(json.dumps({"epochs": 2, "train_epochs": 3}))
    return a, work, archs, ms, data


def test_the_report_has_the_trivial_scores_as_rows_and_an_interval_for_every_tau(tmp_path):
    a, work, archs, ms, data = _fake_run(tmp_path)
    sizes = bs.SplitSizes(256, 128, 256)
    res = report(bs.collect(a, data, sizes, archs, ms, work), tmp_path, "r")
    assert list(res["ranking"]) == [*bs.METHODS, "supernet+macs", "progressive+macs", "macs", "params", "latency"]
    for name, r in res["ranking"].items():
        assert r["seeds"] == (1 if name in BASELINES else 2) and len(r["band_taus"]) == 3
        assert all(-1 <= r[m]["ci95"][0] <= r[m]["ci95"][1] <= 1 for m in rk.METRICS)
        assert r["minus_macs"] is None if name == "macs" else all(
            -2 <= r["minus_macs"][m]["ci95"][0] <= r["minus_macs"][m]["ci95"][1] <= 2 for m in rk.METRICS)
    assert res["ranking"]["macs"]["tau_partial_macs"]["value"] == 0.0
    assert [b["archs"] for b in res["bands"]] == [4, 4, 4] and res["rows"][0]["macs"] > 0
    assert "test split" in res["reference"] and "validation" in res["estimators_scored_on"]
    assert res["estimated_cost"]["cpu_hours"] > 0 and res["cost_per_arch_s"]["supernet"] == pytest.approx(2.0)
    table = (tmp_path / "r.md").read_text()
    assert all(f"| {row} |" in table for row in ("MACs", "parameters", "predicted latency", "supernet"))
    assert "score − MACs" in table and (tmp_path / "r.png").is_file()


def test_the_supernet_combined_with_macs_ranks_by_the_mean_of_the_two_ranks(tmp_path):
    from benchmarks._supernet_report import with_macs

    assert with_macs([[0.3, 0.1, 0.2, 0.4]], [10, 40, 30, 20]) == [[2.0, 2.5, 2.5, 3.0]]  # ranks (3,1,2,4) and (1,4,3,2)
    a, work, archs, ms, data = _fake_run(tmp_path)
    run = bs.collect(a, data, bs.SplitSizes(256, 128, 256), archs, ms, work)
    res = report(run, tmp_path, "r")
    ref = np.mean([run.values[s] for s in run.standalone], axis=0)
    macs = run.baselines["macs"]
    for k, seed_name in enumerate(run.estimators["supernet"]):  # each seed of the supernet with MACs, judged alone
        combined = (np.argsort(np.argsort(run.values[seed_name])) + np.argsort(np.argsort(macs))) / 2
        alone = rk.point_taus(ref, combined, macs, rk.latency_bands(ms, 3))
        assert res["ranking"]["supernet+macs"]["by_seed"]["tau_bands"][k] == pytest.approx(alone["tau_bands"])
    assert "| supernet + MACs (the mean of their ranks) | 2 |" in (tmp_path / "r.md").read_text()


def test_how_far_each_score_follows_size_within_the_bands(tmp_path):
    from benchmarks._supernet_report import follows_macs

    macs = [1, 2, 3, 4, 5, 6]
    bands = [np.array([0, 1, 2]), np.array([3, 4, 5])]
    got = follows_macs(np.array([1.0, 2, 3, 4, 5, 6]), {"flat": [[3, 2, 1, 6, 5, 4], [1, 2, 3, 4, 5, 6]]}, macs, bands)
    assert got == {"reference": 1.0, "flat": 0.0}  # seeds: -1 (reversed in each band) and +1
    a, work, archs, ms, data = _fake_run(tmp_path)
    res = report(bs.collect(a, data, bs.SplitSizes(256, 128, 256), archs, ms, work), tmp_path, "r")
    assert list(res["follows_macs_in_bands"]) == ["reference", *bs.METHODS]


def test_the_complete_report_replaces_the_interim_one(tmp_path, capsys):
    a, work, archs, ms, data = _fake_run(tmp_path)
    run = bs.collect(a, data, bs.SplitSizes(256, 128, 256), archs, ms, work)
    report(run, tmp_path, "r_interim")
    (tmp_path / "other_interim.md").write_text("another run's")
    bs.complete_report(run, tmp_path, "r")
    assert sorted(p.name for p in tmp_path.glob("*_interim.*")) == ["other_interim.md"]
    assert {p.suffix for p in tmp_path.glob("r.*")} == {".json", ".md", ".png"}
    assert "removed the interim report (r_interim" in capsys.readouterr().out


def test_the_reference_runs_score_on_the_test_split(tmp_path, monkeypatch):
    """The stand-alone runs are scored on the test split, the estimators on the validation split."""
    a = bs.parse_args(["--quick", "--out", str(tmp_path), "--scores", "train", "standalone0"])
    archs = [load_space("tiny").random(0)]
    val, test = SimpleNamespace(tag="val"), SimpleNamespace(tag="test")
    seen = {}

    class Recorder:
        def __init__(self, name):
            self.name = name

        def evaluate(self, arch, data, *, seed):
            seen[self.name] = data.val.tag
            return SimpleNamespace(score=0.5, seconds=0.0)

    @dataclass
    class Data:
        val: object
        test: object
        name: str = "made up"

    monkeypatch.setattr(bs, "_evaluator", lambda name, a, work: (Recorder(name), 0))
    monkeypatch.setattr(bs, "adapt_arch", lambda arch, data: arch)
    data = Data(val, test)
    bs.compute_here(a, None, data, on_test_split(data), archs, tmp_path)
    assert seen == {"train": "val", "standalone0": "test"}
    with pytest.raises(SystemExit, match="--data made up: no test split to score the reference on"):
        on_test_split(Data(val, None))


def test_the_cost_estimate_follows_the_settings(tmp_path, capsys):
    """CPU seconds: images trained at --images-per-s, a scored image a third of one; a supernet epoch six
    stand-alone epochs; too small a band, or a bad rate, is a one-line error."""
    a = bs.parse_args(["--out", str(tmp_path), "--images-per-s", "100"])
    sizes = bs.SplitSizes(1000, 300, 600)
    archs = [SimpleNamespace(digest=lambda k=k: str(k)) for k in range(60)]
    assert bs.estimated_seconds("standalone0", a, 60, sizes, tmp_path) == pytest.approx(60 * (8 * 1000 + 200) / 100)
    assert bs.estimated_seconds("train@3", a, 60, sizes, tmp_path) == pytest.approx(60 * (3 * 1000 + 100) / 100)
    assert bs.estimated_seconds("supernet@1", a, 60, sizes, tmp_path) == pytest.approx(
        (60 * 100 + 20 * (6 * 1000 + 200)) / 100)
    est = bs.cost_estimate(a, tmp_path, archs, sizes)
    assert est["cpu_hours"] == pytest.approx(est["still_to_compute_h"]) and est["by_kind_h"]["reference"] == \
        pytest.approx(3 * 60 * 8200 / 100 / 3600)
    assert "CPU hours" in bs.estimate_line(est, 2) and "on 2 cores" in bs.estimate_line(est, 2)
    for bad, words in [(["--archs", "40"], "leaves bands of 13 architectures; a band needs at least 15"),
                       (["--images-per-s", "0"], "--images-per-s must be positive"),
                       (["--bands", "0"], "--bands must be a positive integer")]:
        with pytest.raises(SystemExit):
            bs.parse_args(bad)
        assert words in capsys.readouterr().err


def test_the_time_left_follows_the_seconds_this_run_measured(tmp_path):
    """What is left, at the rates measured: another seed's seconds an architecture, a supernet's epochs left
    at its schedule's median epoch; a kind with nothing measured at the nominal estimate, named."""
    a, work, archs, ms, data = _fake_run(tmp_path)  # every architecture scored in 1 s, every epoch 6 s
    sizes = bs.SplitSizes(256, 128, 256)
    assert bs.cost_estimate(a, work, archs, sizes)["measured_still_to_compute_h"] is None  # nothing left
    bs.cache_path(work, "train@1", a).unlink()  # 12 architectures at train's 1 s
    cache = json.loads(bs.cache_path(work, "supernet@1", a).read_text())
    bs.cache_path(work, "supernet@1", a).write_text(json.dumps(dict(list(cache.items())[:4])))  # 8 left
    ckpt = bs.supernet_dir(work, "supernet@1", a) / "supernet.ckpt"
    torch.save({"format": SUPERNET_FORMAT, "version": SUPERNET_VERSION, "history": [{"seconds": 60.0}]}, ckpt)
    for name in ("progressive", "progressive@1"):  # nothing of its kind measured
        bs.cache_path(work, name, a).unlink()
        (bs.supernet_dir(work, name, a) / "supernet.ckpt").unlink()
    est = bs.cost_estimate(a, work, archs, sizes)
    nominal = sum(bs.estimated_seconds(n, a, 12, sizes, work) for n in ("progressive", "progressive@1"))
    median_epoch = 6.0  # of supernet's 2 epochs of 6 s and supernet@1's one of 60 s
    left = 12 * 1.0 + 8 * 1.0 + (a.supernet_epochs - 1) * median_epoch + nominal
    assert est["measured_still_to_compute_h"] == pytest.approx(left / 3600)
    assert est["measured_lacks"] == ["progressive"]
    assert "by the seconds this run measured" in bs.estimate_line(est, 1)
    assert "(progressive at the estimate: none measured yet)" in bs.estimate_line(est, 1)


def test_an_interim_report_judges_the_scores_complete_so_far(tmp_path, capsys):
    """--report while parts still run: each estimator with its seeds complete, one without any left out, the
    missing scores named; without the complete reference it is a one-line error naming what is lacking."""
    a, work, archs, ms, data = _fake_run(tmp_path)
    sizes = bs.SplitSizes(256, 128, 256)
    for name in ("progressive", "progressive@1", "train_1epoch", "supernet_again"):  # not begun
        bs.cache_path(work, name, a).unlink()
    half = bs.cache_path(work, "supernet@1", a)  # a seed halfway through its architectures
    half.write_text(json.dumps(dict(list(json.loads(half.read_text()).items())[:6])))
    with pytest.raises(SystemExit, match="not complete .missing progressive, "):  # the full report refuses
        bs.collect(a, data, sizes, archs, ms, work)
    run = bs.collect(a, data, sizes, archs, ms, work, so_far=True)
    assert run.estimators["supernet"] == ("supernet",) and "progressive" not in run.estimators
    assert run.estimators["train"] == ("train", "train@1") and run.estimators["train_1epoch"] == ("train_1epoch@1",)
    assert run.extra["interim"]["missing"] == ["progressive", "train_1epoch", "supernet_again", "supernet@1",
                                               "progressive@1"]
    res = report(run, tmp_path, "r_interim")
    assert res["ranking"]["supernet"]["seeds"] == 1 and res["ranking"]["train"]["seeds"] == 2
    assert "progressive" not in res["ranking"] and res["trials_at_1epoch_cost"] is None
    assert res["supernet_against_itself"] is None and res["progressive_history"] is None
    assert res["command"].endswith(" --report")  # what writes it again
    table = (tmp_path / "r_interim.md").read_text()
    assert table.startswith("**Interim report**: 12 of the run's 17 scores complete") and "supernet@1" in table
    bs.cache_path(work, "standalone1", a).write_text("{}")
    with pytest.raises(SystemExit, match="the stand-alone run standalone1 lacks 12 of 12 architectures"):
        bs.collect(a, data, sizes, archs, ms, work, so_far=True)
    with pytest.raises(SystemExit):
        bs.parse_args(["--report", "--scores", "train"])
    assert "--report computes nothing" in capsys.readouterr().err


def test_a_run_whose_caches_were_lost_continues_from_its_report(tmp_path, monkeypatch, capsys):
    """--restore: a fresh clone lacks the git-ignored caches; its committed (interim) report puts back every
    score, the supernets' seconds and train_equal's epochs, so the report of the restored run is the report's
    own, the missing scores stay missing (to be computed), and the report names what came from where."""
    a, work, archs, ms, data = _fake_run(tmp_path / "first")
    sizes = bs.SplitSizes(256, 128, 256)
    for name in ("progressive@1", "train_1epoch@1"):  # not computed before the caches were lost
        bs.cache_path(work, name, a).unlink()
    first = report(bs.collect(a, data, sizes, archs, ms, work, so_far=True), tmp_path, "r_interim")
    saved = tmp_path / "r_interim.json"
    monkeypatch.setattr(bs, "pick_archs", lambda *args, **kw: (list(reversed(archs)), list(reversed(ms))))
    b = bs.parse_args(["--quick", "--out", str(tmp_path / "clone"), "--archs", "12", "--bands", "3"])
    fresh = tmp_path / "clone" / "work"
    bs.check_work(fresh, b)
    names = bs.restore(b, fresh, saved, None, data)
    assert "progressive@1" not in names and len(names) == len(first["seeds"])
    kept = json.loads((fresh / "archs.json").read_text())  # the report's order and predicted latency
    assert kept["predicted_ms"] == ms and [x["blocks"] for x in kept["archs"]] == [x.to_dict()["blocks"] for x in archs]
    assert bs._missing(b.scores, fresh, b, archs) == ["progressive@1", "train_1epoch@1"]
    again = report(bs.collect(b, data, sizes, archs, ms, fresh, so_far=True), tmp_path / "clone", "r_interim")
    for key in ("ranking", "seeds", "supernet_train_seconds", "follows_macs_in_bands", "reference_ceiling",
                "train_equal", "progressive_history"):
        assert again[key] == first[key], key
    blob = subprocess.run(["git", "hash-object", str(saved)], capture_output=True, text=True).stdout.strip() or \
        bs.git_blob(saved.read_bytes())  # git's own id of the file where git is installed
    assert again["restored"] == {"from": [str(saved)], "git_blobs": {str(saved): blob}, "measured_on": first["machine"],
                                 "scores": sorted(names)}
    assert f"Restored from {saved} (git blob {blob[:12]})" in (tmp_path / "clone" / "r_interim.md").read_text()
    assert bs.restore(b, fresh, saved, None, data) == names  # again: nothing changes
    # what does not fit is a one-line error, and nothing is written
    other = bs.parse_args(["--quick", "--out", str(tmp_path / "x"), "--archs", "12", "--bands", "3", "--seed", "3"])
    with pytest.raises(SystemExit, match="a run with other settings .seed 0 there, 3 asked"):
        bs.restore(other, tmp_path / "x", saved, None, data)
    (tmp_path / "notes.json").write_text('{"rows": []}')
    with pytest.raises(SystemExit, match="not a report of this benchmark"):
        bs.restore(b, fresh, tmp_path / "notes.json", None, data)
    (tmp_path / "cut.json").write_text(saved.read_text()[:100])
    with pytest.raises(SystemExit, match="cut.json: cannot read it"):
        bs.restore(b, fresh, tmp_path / "cut.json", None, data)
    monkeypatch.setattr(bs, "pick_archs", lambda *args, **kw: (archs[:11] + [load_space("tiny").random(99)], ms))
    with pytest.raises(SystemExit, match="its architectures are not those this run draws"):
        bs.restore(b, tmp_path / "y", saved, None, data)
    assert not (tmp_path / "y").exists() and not (tmp_path / "x").exists()
    monkeypatch.setattr(bs, "pick_archs", lambda *args, **kw: (archs, ms))
    cache = json.loads(bs.cache_path(fresh, "train", b).read_text())
    cache[archs[0].digest()]["score"] += 0.01
    bs.cache_path(fresh, "train", b).write_text(json.dumps(cache))
    before = {f: f.read_text() for f in (fresh / "scores").iterdir()}
    with pytest.raises(SystemExit, match="train of .* in .*train.json: not the same run"):
        bs.restore(b, fresh, saved, None, data)
    assert {f: f.read_text() for f in (fresh / "scores").iterdir()} == before
    (fresh / "equal_compute.json").write_text(json.dumps({"epochs": 3, "train_epochs": 3}))
    with pytest.raises(SystemExit, match="train_equal trains 2 epochs there, 3 in"):
        bs.restore(b, fresh, saved, None, data)
    (fresh / bs.RESTORED).unlink()  # a supernet with neither its checkpoint nor a restored record
    with pytest.raises(SystemExit, match="the supernet of supernet, .* has no checkpoint and no restored record"):
        bs.collect(b, data, sizes, archs, ms, fresh, so_far=True)
