"""Uncertainty on every front: the intervals' math, the neighbours within noise, the baseline to beat, the
intervals in pareto.json, trials.csv, pareto.png, the search's summary and the training report."""

from __future__ import annotations

import csv
import json

import optuna
import pytest
from optuna.distributions import IntDistribution

from nas.cli.search import _baseline_lines, _roomy_lines, _with_intervals
from nas.search.budget import Budgets
from nas.search.results import write_outputs
from nas.search.storage import STUDY_ATTR
from nas.search.uncertainty import baseline_to_beat, noise_neighbours
from nas.stats import accuracy_difference, fmt_interval, wilson_interval
from nas.train.report import accuracy_uncertainty, deployment_choice, report_rows, write_report

optuna.logging.set_verbosity(optuna.logging.WARNING)


# ------------------------------------------------------------------------------------------- the math

# Newcombe (1998), "Two-sided confidence intervals for the single proportion", Statistics in Medicine 17:857,
# Table II, method 3 (Wilson score, no continuity correction)
@pytest.mark.parametrize(("k", "n", "low", "high"), [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605),
                                                    (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)])
def test_wilson_interval_gives_the_published_values(k, n, low, high):
    iv = wilson_interval(k / n, n)
    assert (round(iv.low, 4), round(iv.high, 4)) == (low, high) and iv.n == n and iv.accuracy == k / n


def test_wilson_interval_narrows_with_more_images_and_refuses_nonsense():
    # wilson(430, 474) of the wilson-score-interval package (z = 1.96): 0.87767508..., 0.93012398...
    iv = wilson_interval(430 / 474, 474)
    assert iv.low == pytest.approx(0.8776750858, abs=1e-5) and iv.high == pytest.approx(0.9301239840, abs=1e-5)
    assert wilson_interval(0.9, 10_000).high - wilson_interval(0.9, 10_000).low < iv.high - iv.low
    wide = wilson_interval(430 / 474, 474, level=0.99)
    assert wide.low < iv.low and wide.high > iv.high
    assert wilson_interval(1.0, 50).high == 1.0 and fmt_interval(wilson_interval(0.95, 360)) == "[92.2, 96.8]"
    for bad in ({"accuracy": 0.5, "n": 0}, {"accuracy": 1.2, "n": 10}, {"accuracy": 0.5, "n": 10, "level": 1.0},
                {"accuracy": 0.5, "n": True}):
        with pytest.raises(ValueError):
            wilson_interval(**bad)


# Newcombe (1998), "Interval estimation for the difference between independent proportions", Statistics in
# Medicine 17:873, Table II, method 10 (hybrid score, no continuity correction)
@pytest.mark.parametrize(("a", "b", "low", "high", "verdict"), [
    ((56, 70), (48, 80), 0.0524, 0.3339, "beats"), ((9, 10), (3, 10), 0.1705, 0.8090, "beats"),
    ((5, 56), (0, 29), -0.0381, 0.1926, "ties")])
def test_the_difference_gives_the_published_values(a, b, low, high, verdict):
    d = accuracy_difference(wilson_interval(a[0] / a[1], a[1]), wilson_interval(b[0] / b[1], b[1]))
    assert (round(d.low, 4), round(d.high, 4), d.verdict) == (low, high, verdict)
    flipped = accuracy_difference(wilson_interval(b[0] / b[1], b[1]), wilson_interval(a[0] / a[1], a[1]))
    assert flipped.verdict == {"beats": "loses", "ties": "ties"}[verdict]
    assert (round(flipped.low, 4), round(flipped.high, 4)) == (-high, -low)
    with pytest.raises(ValueError, match="different levels"):
        accuracy_difference(wilson_interval(0.5, 10), wilson_interval(0.5, 10, level=0.9))


# ------------------------------------------------------------------------------------------- the search's outputs

def _study(trials, *, metric="val_accuracy", budget_ms=1.0, images=360):
    """A study as the search leaves it: (accuracy, ms, MACs, feasible) per trial, each scored on ``images``."""
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.set_user_attr(STUDY_ATTR, {"objectives": [metric, "latency_ms"],
                                     "budgets": Budgets(latency_budget_ms=budget_ms).to_dict()})
    for i, (acc, ms, macs, ok) in enumerate(trials):
        metrics = {"seconds": 1.0, **({"val_images": float(images)} if images else {})}
        ua = {"status": "evaluated" if ok else "over_budget", "digest": f"d{i}", "metrics": metrics,
              "latency": {"ms": ms, "source": "measured", "device": "cpu"},
              "cost": {"params": macs // 10, "macs": macs, "peak_activation_bytes": 4096}}
        study.add_trial(optuna.trial.create_trial(
            params={"i": i}, distributions={"i": IntDistribution(0, 99)}, values=[acc if ok else 0.0, ms],
            user_attrs=ua, system_attrs={"constraints": [ms - budget_ms]}))
    return study


# along the front: #0 and #1 within noise on 360 images (1 point apart), #2 beyond them (8 points), #3 within
# noise of #2; #4 is the largest network within the budget, dominated; #5 is larger still but over the budget
TRIALS = [(0.86, 0.2, 1_000_000, True), (0.87, 0.3, 2_000_000, True), (0.95, 0.5, 3_000_000, True),
          (0.96, 0.8, 4_000_000, True), (0.90, 0.9, 9_000_000, True), (0.99, 1.5, 20_000_000, False)]


def test_front_neighbours_within_noise_are_marked(tmp_path):
    out = write_outputs(_study(TRIALS), tmp_path, plot=False)
    front = out["front"]
    assert [r["number"] for r in front] == [0, 1, 2, 3]
    assert noise_neighbours(front) == {0: [1], 1: [0], 2: [3], 3: [2]}
    pj = json.loads((tmp_path / "pareto.json").read_text())
    assert [e["within_noise_of"] for e in pj["pareto"]] == [[1], [0], [3], [2]]
    ci = pj["pareto"][2]["accuracy_ci95"]
    assert ci["n"] == 360 and ci["method"] == "wilson" and ci["low"] < 0.95 < ci["high"]
    assert (round(ci["low"], 4), round(ci["high"], 4)) == (0.9224, 0.9681)  # wilson_interval(0.95, 360)
    assert pj["accuracy_uncertainty"]["images"] == 360 and pj["accuracy_uncertainty"]["method"] == "wilson"
    wide = write_outputs(_study([(0.86, 0.2, 1, True), (0.95, 0.5, 2, True)], images=30), tmp_path, plot=False)
    assert noise_neighbours(wide["front"]) == {0: [1], 1: [0]}  # 9 points apart on 30 images: noise


def test_trials_csv_carries_each_accuracys_interval(tmp_path):
    write_outputs(_study(TRIALS), tmp_path, plot=False)
    rows = list(csv.DictReader((tmp_path / "trials.csv").open()))
    head = list(rows[0])
    assert head[head.index("val_accuracy") + 1: head.index("val_accuracy") + 4] == ["ci95_low", "ci95_high",
                                                                                  "scored_images"]
    assert rows[2]["scored_images"] == "360" and float(rows[2]["ci95_low"]) == pytest.approx(0.9224, abs=1e-4)
    assert rows[5]["ci95_low"] == "" and rows[5]["status"] == "over_budget"  # not scored: no interval


def test_an_old_trial_takes_the_validation_splits_size_and_a_proxy_gets_no_interval(tmp_path):
    out = write_outputs(_study(TRIALS, images=None), tmp_path, info={"val_images": 120}, plot=False)
    assert out["front"][0]["_ci"].n == 120
    assert all(r["_ci"] is None for r in write_outputs(_study(TRIALS, images=None), tmp_path, plot=False)["front"])
    out = write_outputs(_study([(5.0, 0.2, 1, True), (7.0, 0.5, 2, True)], metric="naswot"), tmp_path, plot=False)
    pj = json.loads((tmp_path / "pareto.json").read_text())
    assert all(r["_ci"] is None for r in out["front"]) and pj["accuracy_uncertainty"]["method"] is None
    assert pj["baseline"]["difference"] is None and pj["baseline"]["verdict"] == "same"


def test_the_baseline_is_the_largest_network_within_the_budget(tmp_path):
    out = write_outputs(_study(TRIALS), tmp_path, plot=False)
    b = out["baseline"]
    assert (b.trial, b.macs, b.candidates, b.pick) == (4, 9_000_000, 5, 3)  # #5 is larger but over the budget
    assert b.verdict == "beats" and b.difference.low > 0  # 96% vs 90% on 360 images
    pj = json.loads((tmp_path / "pareto.json").read_text())
    assert pj["baseline"]["trial"] == 4 and pj["baseline"]["verdict"] == "beats" and pj["baseline"]["ci95"]["n"] == 360
    lines = _baseline_lines("val_accuracy", b, Budgets(latency_budget_ms=1.0))
    assert lines[0] == ("baseline: #4, the largest-MACs network within the budget among the study's 5 evaluated trials "
                        "(9.00M MACs, 0.900 ms): 90.00% [86.5, 92.7]")
    assert lines[1] == ("  the search's pick #3 (96.00% [93.4, 97.6]) beats it beyond noise: +6.00 points "
                        "(95% CI +2.29 to +9.87)")
    close = baseline_to_beat(*_records(tmp_path, [(0.95, 0.5, 3, True), (0.94, 0.4, 5, True)]))
    assert close.verdict == "ties" and "ties with it, within noise: " in _baseline_lines(
        "val_accuracy", close, Budgets(latency_budget_ms=1.0))[1]


def test_the_largest_network_within_noise_of_the_pick_is_named(tmp_path):
    # #3 (96%) is the pick; #2 (95%) lies within its interval on 360 images but is smaller, #4 (90%) outside
    out = write_outputs(_study(TRIALS), tmp_path, plot=False)
    assert out["largest_within_noise"]["number"] == 3 and not _roomy_lines("val_accuracy", out["largest_within_noise"],
                                                                          out["baseline"])
    assert json.loads((tmp_path / "pareto.json").read_text())["largest_within_noise"]["trial"] == 3
    # #1 (94%, 5 MACs) is within noise of the pick #0 (95%, 3 MACs), the baseline #2 (80%, 9 MACs) is not: named
    out = write_outputs(_study([(0.95, 0.5, 3, True), (0.94, 0.4, 5, True), (0.80, 0.3, 9, True)]), tmp_path,
                        plot=False)
    [line] = _roomy_lines("val_accuracy", out["largest_within_noise"], out["baseline"])
    assert line.startswith("largest within noise of the pick: #1 (0.00M MACs, 0.400 ms): 94.00% [")
    pj = json.loads((tmp_path / "pareto.json").read_text())["largest_within_noise"]
    assert pj["trial"] == 1 and pj["ci95"]["n"] == 360
    proxy = write_outputs(_study([(0.95, 0.5, 3, True), (0.94, 0.4, 5, True)], metric="naswot", images=None), tmp_path,
                          plot=False)
    assert proxy["largest_within_noise"]["number"] == 0  # a proxy score has no interval: the most accurate one
    same = write_outputs(_study([(0.95, 0.5, 3, True), (0.94, 0.4, 5, True)]), tmp_path, plot=False)
    assert same["largest_within_noise"]["number"] == same["baseline"].trial == 1  # the baseline's line says it
    assert not _roomy_lines("val_accuracy", same["largest_within_noise"], same["baseline"])
    same = baseline_to_beat(*_records(tmp_path, [(0.95, 0.5, 9, True), (0.90, 0.4, 5, True)]))
    assert same.verdict == "same" and "is this one" in _baseline_lines("val_accuracy", same, Budgets())[1]
    assert "(no budget)" in _baseline_lines("val_accuracy", same, Budgets())[0]


def _records(tmp_path, trials):
    out = write_outputs(_study(trials), tmp_path, plot=False)
    return out["records"], out["front"]


def test_the_printed_front_shows_intervals_and_neighbours(tmp_path):
    out = write_outputs(_study(TRIALS), tmp_path, plot=False)
    rows, header = _with_intervals([[f"#{r['number']}", "x", "0.1"] for r in out["front"]], ["trial", "acc", "ms"],
                                   out["front"], out["within_noise"])
    assert header == ["trial", "acc", "95% CI", "within noise of", "ms"]
    assert rows[0] == ["#0", "x", "[82.0, 89.2]", "#1", "0.1"] and rows[2][3] == "#3"
    assert rows[2][2] == fmt_interval(wilson_interval(0.95, 360))


def test_the_plot_draws_intervals_ties_and_the_baseline(tmp_path, monkeypatch):
    import matplotlib.axes

    drawn: dict[str, list] = {"errorbar": [], "plot": []}
    for name in drawn:
        real = getattr(matplotlib.axes.Axes, name)

        def spy(self, *a, _real=real, _name=name, **kw):
            drawn[_name].append((a, kw))
            return _real(self, *a, **kw)

        monkeypatch.setattr(matplotlib.axes.Axes, name, spy)
    out = write_outputs(_study(TRIALS), tmp_path)
    assert out["pareto_png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    front_bars = drawn["errorbar"][0]
    assert list(front_bars[0][0]) == [0.2, 0.3, 0.5, 0.8] and len(front_bars[1]["yerr"][0]) == 4
    bands = [a for a, kw in drawn["plot"] if kw.get("color") == "tab:orange"]
    assert [list(a[0]) for a in bands] == [[0.2, 0.3], [0.5, 0.8]]  # the two pairs within noise
    assert len(drawn["errorbar"]) == 2  # the baseline, off the front, has its own interval


# ------------------------------------------------------------------------------------------- the training report

def _variant(name, acc, n, ms):
    return {"variant": name, "accuracy": acc, "accuracy_images": n, "params": 10, "file_bytes": 2048,
            "measured": {"median_ms": ms}, "predicted": None}


def test_the_report_gives_intervals_neighbours_and_the_deploy_choice_against_noise(tmp_path):
    models = [{"id": "m1", "index": 1, "variants": [_variant("fp32", 0.93, 360, 0.02)]},
              {"id": "m0", "index": 0, "variants": [_variant("fp32", 0.92, 360, 0.01),
                                                    _variant("qat_int8", 0.915, 360, 0.005)]},
              {"id": "m2", "index": 2, "variants": [_variant("fp32", 0.99, 360, 0.03)]}]
    u = accuracy_uncertainty(models, seed=7)
    assert u["seeds"] == [7] and [t["models"] for t in u["within_noise"]] == [["m0", "m1"]]
    rep = {"run": "r", "target": "cpu", "data": "d", "accuracy_split": "test", "latency_targets": {"fp32": "cpu"},
           "measured_here": {"fp32": True}, "quantization": {"qat": {}, "ptq": {}}, "models": models,
           "deploy": {m["id"]: deployment_choice(m) for m in models}, "accuracy_uncertainty": u}
    assert report_rows(rep)[1][2] == "92.00 [88.7, 94.4]"
    write_report(tmp_path, rep)
    md = (tmp_path / "report.md").read_text()
    assert "| model | variant | acc % [95% CI] |" in md and "| m0 | fp32 | 92.00 [88.7, 94.4] |" in md
    assert ("Accuracy [95% CI]: the Wilson interval on the 360 test images each file was scored on; one training "
            "run per network (seed 7)") in md
    assert "Within noise: m0 and m1, front neighbours whose fp32 accuracies differ by +1.00 points" in md
    assert "- m0: **qat_int8**" in md and "accuracy vs fp32 -0.50 points (95% CI" in md and "), within noise" in md
    assert json.loads((tmp_path / "report.json").read_text())["accuracy_uncertainty"]["within_noise"][0]["models"] \
        == ["m0", "m1"]
    old = {**rep, "models": [{"id": "m", "variants": [{**_variant("fp32", 0.9, None, 0.01)}]}], "deploy": {}}
    old.pop("accuracy_uncertainty")
    write_report(tmp_path, old)  # a report from before the intervals: no interval, no error
    assert "| m | fp32 | 90.00 |" in (tmp_path / "report.md").read_text()
