"""nas.predict and nas.validate end to end, on a small table measured here in the test."""

import json
import shutil
import sys
from pathlib import Path

import forked
import numpy as np
import pytest

# tests measure on whatever machine runs them: the target's device name and required ISA are cleared
HERE = ("conf.device.name=null", "conf.device.cpu_flags=[]")
FAST = ["profile.warmup=1", "profile.repeats=5", "profile.min_time_s=0", "profile.rounds=1", "progress=false"]
# nas.profile's: these tests are not about the machine, a busy one must not fail them (nas.validate refuses it)
PROFILE_FAST = [*FAST, "profile.watch=false"]
# the space of the table measured here: tiny's kinds and options, fewer of them (45 blocks with those of its
# pruned networks, where tiny has 273): the table measures in seconds, a predictor fits on it in a fraction of one
MINI = Path(__file__).parent / "data" / "spaces" / "mini.yaml"


def run(mod, *args, cwd):
    return forked.run([sys.executable, "-m", mod, *args], cwd=cwd, timeout=900)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    d = tmp_path_factory.mktemp("table")
    out = d / "mini.json"
    r = run("nas.profile", "conf=cpu", *HERE, f"search_space={MINI}", f"out={out}", "calibration_networks=15", "pruned_networks=3", *PROFILE_FAST, cwd=d)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.slow
def test_predict_cli(table, tmp_path):
    from nas.space import load_space

    load_space(MINI).random(5).save(tmp_path / "a.json")
    r = run("nas.predict", "conf=cpu", *HERE, f"conf.table={table}", f"arch={tmp_path / 'a.json'}", "breakdown=true",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "measured table on" in r.stdout and "calibrated" in r.stdout and "layer" in r.stdout
    r = run("nas.predict", "conf=cpu", *HERE, f"conf.table={table}", "model=timm:lcnet_050", "resolution=32", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "learned" in r.stdout
    # measured on this machine: re-timed first (refreshed on the fly, or not where the machine misled it)
    assert "table refreshed on the fly: " in r.stdout or "table not refreshed" in r.stdout, r.stdout
    r = run("nas.predict", "conf=cpu", *HERE, f"conf.table={table}", "model=timm:lcnet_050", "resolution=32",
            "retime=false", cwd=tmp_path)
    assert r.returncode == 0 and "refresh" not in r.stdout, r.stdout + r.stderr
    r = run("nas.predict", "conf=jetson", "model=timm:mobilenetv2_100", cwd=tmp_path)
    assert r.returncode == 0 and "ESTIMATE" in r.stdout and "python -m nas.profile conf=jetson" in r.stdout
    r = run("nas.predict", "conf=cpu", *HERE, f"conf.table={table}", cwd=tmp_path)
    assert r.returncode == 2 and "exactly one of arch=" in r.stderr
    r = run("nas.predict", "conf=cpu", "model=timm:resnet18", cwd=tmp_path)
    assert r.returncode == 2 and "resnet18" in r.stderr and "not a timm EfficientNet-family model" in r.stderr
    r = run("nas.predict", "conf=cpu_int8", f"conf.table={table}", "model=timm:lcnet_050", cwd=tmp_path)
    assert r.returncode == 2 and "does not match target 'cpu_int8'" in r.stderr


@pytest.mark.slow
def test_validate_cli(table, tmp_path):
    out = tmp_path / "v" / "report.json"
    # retime=false: the table as built, so that a re-run scores the same predictions (the refresh: below)
    args = ["conf=cpu", *HERE, f"conf.table={table}", f"search_space={MINI}", "n=6", "pruned=2", "models=[timm:lcnet_050]",
            "resolution=32", "retime=false", f"out={out}", *FAST]
    r = run("nas.validate", *args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rep = json.loads(out.read_text())
    for m in ("predictor", "table_sum", "flops_linear", "roofline"):
        assert set(rep["methods"][m]) == {"within_5pct", "within_10pct", "mape", "kendall_tau", "n"}
        assert rep["methods"][m]["n"] == 9
    assert set(rep["groups"]) == {"mini", "mini pruned", "timm"} and rep["groups"]["mini pruned"]["predictor"]["n"] == 2
    assert out.with_suffix(".png").stat().st_size > 10_000
    assert "Kendall" in r.stdout and "report:" in r.stdout
    assert set(rep["drift"]) == {"mini"} and rep["drift"]["mini"]["n"] == 10  # the drift check ran
    assert 0.5 < rep["drift"]["mini"]["now_over_table"] < 2.0
    # ... and the predictor rescaled by it is scored as a fifth method, on the same held-out networks
    scale = rep["drift_scale"]["now_over_table"]
    assert rep["drift_scale"]["n"] == 10 and scale == pytest.approx(rep["drift"]["mini"]["now_over_table"])
    assert rep["methods"]["predictor_rescaled"]["n"] == 9 and "predictor_rescaled" in r.stdout
    # the error per range of measured latency, and the drift verdict, reported and printed
    assert sum(s["n"] for s in rep["latency_ranges"]["predictor"].values()) == 9 and "predictor at " in r.stdout
    assert set(rep["drift_verdict"]) >= {"median", "spread", "threshold", "drifted", "noisy"} and "drift verdict" in r.stdout
    assert all(p["predictor_rescaled"] == pytest.approx(p["predictor"] * scale) for p in rep["points"])
    # the measurement's own reproducibility: the table's figure of the re-measured calibration networks
    assert set(rep["reproducibility"]) == {"as_built", "rescaled"} and rep["reproducibility"]["as_built"]["n"] == 10
    assert "reproducibility (as_built)" in r.stdout
    # held out: none of the validation networks is in the calibration set
    from nas.latency.tables.table import LatencyTable

    calib = {a.digest() for a in LatencyTable.load(table).networks}
    assert not calib & {p["digest"] for p in rep["points"]}
    # re-running reuses the cached measurements
    r2 = run("nas.validate", *args, cwd=tmp_path)
    assert r2.returncode == 0 and "measuring held-out" not in r2.stderr
    again = json.loads(out.read_text())["points"]
    assert [(p["digest"], p["measured_ms"]) for p in again] == [(p["digest"], p["measured_ms"]) for p in rep["points"]]
    # the predictions are computed again: equal but for the last digit of the calibration's numerics
    assert again == [{k: pytest.approx(v, rel=1e-9) if isinstance(v, float) else v for k, v in p.items()}
                     for p in rep["points"]]
    # drift_anchors=0: no drift check, the four methods only (the held-out networks measured above,
    # their cache copied beside the new report)
    for name in ("nd", "rc"):
        shutil.copy(out.with_suffix(".measurements.json"), tmp_path / f"{name}.measurements.json")
    r4 = run("nas.validate", *args[:-len(FAST) - 1], f"out={tmp_path / 'nd.json'}", "drift_anchors=0", *FAST,
             cwd=tmp_path)
    assert r4.returncode == 0, r4.stderr
    nd = json.loads((tmp_path / "nd.json").read_text())
    assert set(nd["methods"]) == {"predictor", "table_sum", "flops_linear", "roofline"} and "drift" not in nd
    # recalibrate=true: every calibration network of the table re-measured (the 10 drift anchors are
    # in the copied cache), a sixth method
    r5 = run("nas.validate", *args[:-len(FAST) - 1], f"out={tmp_path / 'rc.json'}", "recalibrate=true", *FAST,
             cwd=tmp_path)
    assert r5.returncode == 0, r5.stderr
    rc = json.loads((tmp_path / "rc.json").read_text())
    assert rc["methods"]["predictor_recalibrated"]["n"] == 9 and rc["drift"]["mini"]["n"] == 18
    # the space's networks (lcnet_050 at 32 px lies far outside this 18-network table, for every method)
    # (the bound holds for the median: with 5 repeats per network a single measurement on a noisy
    # 2-core VM can sit 40% off its own network's median, whatever the predictor does)
    ratios = [p["predictor_recalibrated"] / p["measured_ms"] for p in rc["points"] if p["group"] != "timm"]
    assert 0.7 < float(np.median(ratios)) < 1.4, sorted(ratios)
    # by default, on the table's own machine: refreshed on the fly before measuring, as nas.search and
    # nas.predict use it, and the table as built beside it
    shutil.copy(out.with_suffix(".measurements.json"), tmp_path / "rt.measurements.json")
    r6 = run("nas.validate", *[a for a in args if a != "retime=false"][:-len(FAST) - 1], f"out={tmp_path / 'rt.json'}",
             *FAST, cwd=tmp_path)
    assert r6.returncode == 0, r6.stderr
    rt = json.loads((tmp_path / "rt.json").read_text())
    assert rt["refresh"]["anchors"] and ("table refreshed on the fly" in r6.stdout or "table not refreshed" in r6.stdout)
    if rt["refresh"]["applied"]:
        assert all(p["predictor"] == pytest.approx(p["predictor_as_built"] * rt["refresh"]["ratio"]) for p in rt["points"])
        assert rt["drift_verdict"]["refreshed"] == pytest.approx(rt["refresh"]["ratio"])
        assert "refreshed on the fly at" in r6.stdout
    assert "repeatability: each network measured in one round only" in r6.stdout  # profile.rounds=1
    r3 = run("nas.validate", "conf=cpu", *HERE, f"conf.table={table}", "pruned=-2", f"out={tmp_path / 'neg.json'}",
             cwd=tmp_path)
    assert r3.returncode == 2 and "pruned=-2" in r3.stderr and not (tmp_path / "neg.json").exists()


@pytest.mark.slow
def test_profile_refresh_rescales_predictions_and_changes_no_measurement(table, tmp_path):
    import numpy as np

    from nas.latency.predict.predictor import LatencyPredictor
    from nas.latency.tables.table import LatencyTable
    from nas.space import load_space

    t = tmp_path / "t.json"
    shutil.copy(table, t)
    before = LatencyTable.load(t)
    r = run("nas.profile", "conf=cpu", *HERE, f"search_space={MINI}", f"out={t}", "refresh=3", *PROFILE_FAST, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "now run at" in r.stdout and "unchanged" in r.stdout
    after = LatencyTable.load(t)
    rf = after.metadata["refresh"]
    assert rf["networks"] == 3 and set(rf["per_space"]) == {"mini"} and 0.5 < rf["now_over_table"] < 2.0
    assert rf["previous"] is None and rf["measured_at"]
    # measurements untouched: every entry and network as measured
    assert {k: e.median_ms for k, e in after.entries.items()} == {k: e.median_ms for k, e in before.entries.items()}
    assert {a: e.median_ms for a, e in after.networks.items()} == {a: e.median_ms for a, e in before.networks.items()}
    archs = [load_space(MINI).random(s).with_resolution(32) for s in range(5)]
    built = LatencyPredictor(refresh=False).fit(after)
    now = LatencyPredictor().fit(after)
    np.testing.assert_allclose(now.predict(archs), rf["now_over_table"] * built.predict(archs), rtol=1e-9)
    np.testing.assert_allclose(built.predict(archs), LatencyPredictor().fit(before).predict(archs), rtol=1e-12)
    sp = load_space(MINI)
    P = sp.sample_indices(20, rng=1)
    np.testing.assert_allclose(now.compile(sp).predict_indices(P),  # the vectorised path is rescaled too
                               rf["now_over_table"] * built.compile(sp).predict_indices(P), rtol=1e-9)
    assert "rescaled x" in now.describe() and "rescaled x" in now.explain(archs[0]).label()
    assert "rescaled" not in built.describe() and "rescaled" not in built.explain(archs[0]).label()
    load_space(MINI).random(5).save(tmp_path / "a.json")
    r = run("nas.predict", "conf=cpu", *HERE, f"conf.table={t}", f"arch={tmp_path / 'a.json'}", cwd=tmp_path)
    assert r.returncode == 0 and "rescaled x" in r.stdout, r.stderr
    # a table without calibration networks: a clear error, the file unchanged
    empty = tmp_path / "empty.json"
    LatencyTable(metadata=after.metadata, entries=dict(after.entries), path=empty).save(empty)
    data = empty.read_bytes()
    r = run("nas.profile", "conf=cpu", *HERE, f"search_space={MINI}", f"out={empty}", "refresh=3", *PROFILE_FAST, cwd=tmp_path)
    assert r.returncode == 2 and "no calibration networks" in r.stderr and empty.read_bytes() == data


@pytest.mark.slow
def test_profile_recalibrate_refits_the_calibration_on_networks_measured_now(table, tmp_path):
    import numpy as np

    from nas.latency.predict.predictor import LatencyPredictor
    from nas.latency.tables.table import LatencyTable
    from nas.space import load_space

    t = tmp_path / "t.json"
    shutil.copy(table, t)
    before = LatencyTable.load(t)
    r = run("nas.profile", "conf=cpu", *HERE, f"search_space={MINI}", f"out={t}", "recalibrate=true", *PROFILE_FAST,
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "recalibrate: the table's calibration networks now run at" in r.stdout and "within ±5%" in r.stdout
    assert not t.with_suffix(".recalibrate.json").exists()  # the progress file goes once the record is saved
    after = LatencyTable.load(t)
    rc = after.metadata["recalibration"]
    figs = rc["network_ms"]
    assert set(figs) == {a.digest() for a in before.networks} and all(v > 0 for v in figs.values())
    assert rc["networks"] == len(before.networks) == 18 and rc["rounds"] == 1 and rc["measured_at"]
    # measurements untouched: every entry and network as measured
    assert {k: e.median_ms for k, e in after.entries.items()} == {k: e.median_ms for k, e in before.entries.items()}
    assert {a: e.median_ms for a, e in after.networks.items()} == {a: e.median_ms for a, e in before.networks.items()}
    archs = [load_space(MINI).random(s).with_resolution(32) for s in range(5)]
    now = LatencyPredictor().fit(after)
    by_hand = LatencyPredictor(refresh=False).fit(after, [(a, figs[a.digest()]) for a in after.networks])
    built = LatencyPredictor(refresh=False).fit(after)
    np.testing.assert_allclose(now.predict(archs), by_hand.predict(archs), rtol=1e-12)
    assert not np.allclose(now.predict(archs), built.predict(archs), rtol=1e-6)
    assert now.rescale_ == 1.0 and now.recalibrated_ == rc["measured_at"]
    assert "nas.profile recalibrate" in now.describe() and "recalibrated" in now.explain(archs[0]).label()
    assert "recalibrat" not in built.describe() and "recalibrated" not in built.explain(archs[0]).label()
    load_space(MINI).random(5).save(tmp_path / "a.json")
    r = run("nas.predict", "conf=cpu", *HERE, f"conf.table={t}", f"arch={tmp_path / 'a.json'}", cwd=tmp_path)
    assert r.returncode == 0 and "recalibrated" in r.stdout, r.stderr
    # a later refresh=N is newer: its ratio (over the table's figures) applies, on the calibration as built
    r = run("nas.profile", "conf=cpu", *HERE, f"search_space={MINI}", f"out={t}", "refresh=3", *PROFILE_FAST, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    later = LatencyTable.load(t)
    p = LatencyPredictor().fit(later)
    assert p.recalibrated_ == "" and p.rescale_ == later.metadata["refresh"]["now_over_table"]
    np.testing.assert_allclose(p.predict(archs), p.rescale_ * built.predict(archs), rtol=1e-9)
    # both at once: a clear error
    r = run("nas.profile", "conf=cpu", *HERE, f"search_space={MINI}", f"out={t}", "refresh=3", "recalibrate=true",
            *PROFILE_FAST, cwd=tmp_path)
    assert r.returncode == 2 and "pick one" in r.stderr


@pytest.mark.slow
def test_recalibrate_interrupted_keeps_the_table_and_resumes(table, tmp_path, monkeypatch):
    from types import SimpleNamespace

    import numpy as np

    import nas.latency.profile.profiler as profiler
    from nas.latency.predict.predictor import LatencyPredictor
    from nas.latency.profile.workflow import _recalibrate
    from nas.latency.runtimes.loop import Interrupted
    from nas.latency.tables.table import LatencyTable, TableError

    t = tmp_path / "t.json"
    shutil.copy(table, t)
    data = t.read_bytes()
    calls = []

    def fake(a, runtime, settings):
        calls.append(a.digest())
        if len(calls) == 12:
            raise KeyboardInterrupt
        return SimpleNamespace(median_ms=0.5 * LatencyTable.load(table).networks[a].median_ms, remeasured=0)

    monkeypatch.setattr(profiler, "measure_arch", fake)
    rt = SimpleNamespace(name="fake", version=lambda: "0", info=lambda: {"runtime": "fake"}, precision="fp32")
    settings = SimpleNamespace(rounds=1)
    with pytest.raises(Interrupted):
        _recalibrate(LatencyTable.load(t), t, rt, settings, progress=False)
    assert t.read_bytes() == data and t.with_suffix(".recalibrate.json").is_file()
    out = _recalibrate(LatencyTable.load(t), t, rt, settings, progress=False)
    assert len(calls) == 19  # 11 measured and kept, the 12th interrupted; then it again and the other 6
    assert abs(out["recalibration"]["now_over_table"] - 0.5) < 1e-9
    tab = LatencyTable.load(t)
    # each fitted once, used below: as nas.predict / search / train use the table, and the table as built
    used, as_built = LatencyPredictor().fit(tab), LatencyPredictor(refresh=False).fit(tab)
    half = used.predict(list(tab.networks))
    built = as_built.predict(list(tab.networks))
    assert abs(float(np.median(half / built)) - 0.5) < 0.02  # the machine now runs twice as fast
    # nas.validate scores the table as built and, beside it, as nas.predict / search / train use it
    from nas.latency.predict.roofline import Roofline
    from nas.latency.profile.validate import STORED, ValidationSet, validate
    from nas.space import load_space

    held = [load_space(MINI).random(s).with_resolution(32) for s in range(100, 110)]
    now = used.predict(held)
    rep = validate(as_built, Roofline(peak_gflops=100.0, mem_bandwidth_gbs=20.0),
                   ValidationSet(held, list(now), ["mini"] * 10))
    assert rep["methods"][STORED]["mape"] < 1e-9 and rep["methods"]["predictor"]["mape"] > 40
    assert rep["stored"]["record"] == "recalibration"
    # with the calibration networks re-measured (now 7% slower than the record): the record's ceiling
    figs = tab.metadata["recalibration"]["network_ms"]
    again = [(a, 1.07 * figs[a.digest()]) for a in tab.networks]
    anchors = {"mini": [(ms, tab.networks[a].median_ms) for a, ms in again]}
    rep = validate(as_built, Roofline(peak_gflops=100.0, mem_bandwidth_gbs=20.0),
                   ValidationSet(held, list(now), ["mini"] * 10, anchors, again))
    ceiling = rep["reproducibility"]["recalibration"]
    assert ceiling["n"] == 18 and ceiling["within_5pct"] == 0.0 and ceiling["within_10pct"] == 1.0
    assert abs(ceiling["mape"] - 100 * (1 - 1 / 1.07)) < 1e-6
    # a record that lacks networks (added since) is not applied; a corrupt one is a clear error
    rc = tab.metadata["recalibration"]
    rc["network_ms"].pop(next(iter(rc["network_ms"])))
    assert LatencyPredictor().fit(tab).recalibrated_ == ""
    rc["network_ms"] = [1.0]
    with pytest.raises(TableError, match="corrupt recalibration"):
        LatencyPredictor().fit(tab)


def test_validate_prints_the_budget_section():
    from nas.cli.validate import _budget_lines

    point = {"minutes": 2.0, "blocks": 40, "networks": 12, "time_covered": 0.5, "within_5pct": 0.25,
             "within_10pct": 0.5, "mape": 12.0, "kendall_tau": 0.8}
    b = {"blocks": {"measured": 80, "of": 200, "share": 0.4}, "budget_min": [5.0], "time_covered": 0.7,
         "networks": 30, "minutes_measured": 5.0, "order_source": "profile log", "unlogged": 0,
         "curve": [point, {**point, "minutes": 5.0, "blocks": 80, "within_10pct": 0.6}],
         "sentence": "measuring the remaining 120 blocks (~7.5 min at the measured rate, 1 round(s) each) would ..."}
    lines = _budget_lines(b)
    assert lines[0].startswith("budget: 80 of 200 blocks of the spaces measured (40.0%) under a budget of 5 min")
    assert "covering 70.0% of the held-out networks' time" in lines[0]
    assert "within ±10%" in lines[1] and "60.0%" in lines[1] and lines[-1] == b["sentence"]
    lines = _budget_lines({**b, "order_source": "measured_at", "budget_min": []})
    assert "no profile log" in lines[1] and "under a budget" not in lines[0]


@pytest.mark.slow
def test_validate_a_budgeted_table_reports_the_curve(tmp_path):
    # a budget of 3 s against a profile that cannot take less than 250 blocks x 30 ms of timed calls
    # (profile.min_time_s), however fast the machine
    t = tmp_path / "t.json"
    r = run("nas.profile", "conf=cpu", *HERE, "search_space=tiny", f"out={t}", "calibration_networks=10",
            "pruned_networks=0", "budget_min=0.05", *PROFILE_FAST, "profile.min_time_s=0.03", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "budget of 0.05 min spent" in r.stdout
    out = tmp_path / "v" / "report.json"
    # retime=false: the table as built (the refresh on the fly before measuring is test_validate_cli's)
    r = run("nas.validate", "conf=cpu", *HERE, f"conf.table={t}", "search_space=tiny", "n=8", "drift_anchors=0",
            "retime=false", f"out={out}", *FAST, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    b = json.loads(out.read_text())["budget"]
    assert b["budget_min"] == [0.05] and b["stopped_by_budget"] and 0 < b["blocks"]["share"] < 1
    assert b["order_source"] == "profile log" and b["curve"] and b["curve"][-1]["n"] == 8
    assert b["sentence"].startswith(f"measuring the remaining {b['remaining']['blocks']} blocks")
    assert "blocks of the spaces (tiny) measured" in r.stdout and b["sentence"] in r.stdout
    assert out.with_suffix(".budget.png").stat().st_size > 5000 and "budget curve:" in r.stdout


def test_validate_models_take_arch_files(tmp_path):
    """models= mixes timm names and Arch JSON files (group "arch files"); a missing file is one line."""
    from nas.latency.profile.validate import held_out_set
    from nas.space import load_space

    arch = load_space("tiny").random(0)
    path = tmp_path / "front_00.json"
    arch.save(path)
    archs, groups = held_out_set(["tiny"], 2, 0, [str(path), "timm:lcnet_050"], exclude=set(), resolution=None,
                                 seed=7)
    assert groups == ["tiny", "tiny", "arch files", "timm"]
    assert archs[2].digest() == arch.digest()
    with pytest.raises(ValueError, match="models: no Arch file"):
        held_out_set(["tiny"], 0, 0, [str(tmp_path / "nope.json")], exclude=set(), resolution=None, seed=7)
