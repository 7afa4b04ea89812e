"""benchmarks search_value's pieces on small inputs: the budgets, each method's pick, the final
trainings, the intervals and the verdicts (the benchmark itself runs for hours; its --quick run is
checked in the slow set)."""

import sys
import types
from pathlib import Path

import forked
import numpy as np
import pytest

from benchmarks import search_value as sv
from benchmarks.harness import diff_ci, mean_ci


def _rec(number, score, ms, macs, digest=None):
    return {"number": number, "score": score, "latency_ms": ms, "macs": macs, "digest": digest or f"d{number}",
            "_arch": {"n": number}}


RECS = [_rec(0, 0.80, 1.0, 10e6), _rec(1, 0.85, 2.0, 30e6), _rec(2, 0.84, 1.5, 40e6), _rec(3, 0.90, 3.0, 50e6)]


def test_budgets_sit_at_the_pools_percentiles_with_matched_macs():
    pool = {"ms": np.arange(1, 101, dtype=float), "macs": np.arange(1, 101, dtype=float) * 1e6}
    b = sv.budgets(pool)
    assert [x["quantile"] for x in b] == [25, 50, 75]
    assert [x["latency_ms"] for x in b] == pytest.approx([25.75, 50.5, 75.25])
    assert [x["macs"] for x in b] == pytest.approx([25.75e6, 50.5e6, 75.25e6])


def test_each_method_picks_by_its_own_rule_under_the_budget():
    b = {"latency_ms": 2.0, "macs": 35e6}
    assert sv.pick("nsga2", RECS, b)["number"] == 1      # the best score that fits 2 ms
    assert sv.pick("largest", RECS, b)["number"] == 2    # the most MACs that fits 2 ms, whatever its score
    assert sv.pick("macs", RECS, b)["number"] == 1       # the best score under 35M MACs, latency unseen
    assert sv.pick("random", RECS, {"latency_ms": 0.5, "macs": 1.0}) is None


def test_the_noise_rule_picks_the_largest_network_within_the_best_ones_interval():
    from nas.stats import wilson_interval

    def rec(number, score, ms, macs):
        return {**_rec(number, score, ms, macs), "_ci": wilson_interval(score, 2000)}

    # 2000 images: the best's (0.860) Wilson interval reaches down to 0.844
    recs = [rec(0, 0.860, 1.0, 10e6), rec(1, 0.850, 1.5, 30e6), rec(2, 0.840, 1.8, 60e6), rec(3, 0.855, 3.0, 90e6)]
    b = {"latency_ms": 2.0, "macs": 1e9}
    assert sv.pick("nsga2", recs, b)["number"] == 0        # the best score
    assert sv.pick("nsga2_noise", recs, b)["number"] == 1  # #2 is larger but outside the interval, #3 over the budget
    assert sv.pick("supernet_noise", recs, {"latency_ms": 3.0, "macs": 1e9})["number"] == 3
    assert sv.pick("nsga2_noise", [dict(r, _ci=None) for r in recs], b)["number"] == 0  # a proxy score: the best
    assert sv.pick("nsga2_noise", recs, {"latency_ms": 0.5, "macs": 1e9}) is None


def test_a_tie_goes_to_the_earlier_trial():
    recs = [_rec(4, 0.9, 1.0, 1e6), _rec(2, 0.9, 1.0, 1e6)]
    assert sv.pick("nsga2", recs, {"latency_ms": 1.0, "macs": 1e6})["number"] == 2


def test_trainings_train_each_distinct_pick_once_per_seed_budget_by_budget():
    a, b, c = RECS[0], RECS[1], RECS[2]
    picks = {"nsga2": [a, b], "supernet": [a, None], "random": [b, c], "largest": [c, c], "macs": [a, b]}
    t = sv.trainings(picks, seeds=2)
    assert [(d, s) for d, _, s in t] == [("d0", 0), ("d0", 1), ("d1", 0), ("d1", 1), ("d2", 0), ("d2", 1)]
    picks["macs"] = [RECS[3], a]  # (e)'s own pick trains after every pick the verdicts compare
    assert [d for d, _, s in sv.trainings(picks, seeds=1)] == ["d0", "d1", "d2", "d3"]


def test_final_methods_take_only_their_picks_to_more_seeds(tmp_path, monkeypatch):
    import json

    (tmp_path / "budgets.json").write_text(json.dumps({"budgets": [{"quantile": 50, "latency_ms": 1.0}]}))
    picks = {m: [{**RECS[i], "_arch": {}}] for i, m in enumerate(("nsga2", "supernet_noise", "random", "largest"))}
    monkeypatch.setattr(sv, "all_picks", lambda out, b: picks)
    monkeypatch.setattr(sv, "final_data", lambda a: None)
    trained = []

    class Recipe:
        def __init__(self, **kw):
            pass

        def evaluate(self, arch, data, seed):
            trained.append(seed)
            return types.SimpleNamespace(score=0.9, seconds=1.0, metrics={})

    monkeypatch.setattr(sv, "TrainEvaluator", Recipe)
    monkeypatch.setattr(sv.Arch, "from_dict", staticmethod(lambda d: d))
    for s in range(3):  # three seeds of every pick done
        for m in picks:
            sv.final_path(tmp_path, picks[m][0]["digest"], s).parent.mkdir(exist_ok=True)
            sv.final_path(tmp_path, picks[m][0]["digest"], s).write_text(json.dumps({"test_accuracy": 0.9}))
    a = sv._args(["--out", str(tmp_path), "--final-seeds", "5", "--final-methods", "supernet_noise", "random"])
    sv.part_final(a, tmp_path, 0, 1)
    assert trained == [3, 4, 3, 4]
    done = {p.name for p in (tmp_path / "final").glob("*-s[34].json")}
    assert done == {f"{picks[m][0]['digest'][:16]}-s{s}.json" for m in ("supernet_noise", "random") for s in (3, 4)}
    assert sv.final_runs(tmp_path, picks["random"][0]["digest"]) == [0.9] * 5
    # the report of this run, and of a later `--parts report` at the default seeds: every method has what it is due
    due = {**dict.fromkeys(sv.METHODS, 3), "supernet_noise": 5, "random": 5}
    assert sv.due_seeds(a, tmp_path) == due
    assert sv.due_seeds(sv._args(["--out", str(tmp_path), "--parts", "report"]), tmp_path) == due


def test_a_method_no_final_run_asked_for_is_due_the_default_seeds(tmp_path):
    a = sv._args(["--out", str(tmp_path), "--final-seeds", "5", "--final-methods", "random"])
    assert sv.due_seeds(a, tmp_path) == {**dict.fromkeys(sv.METHODS, 3), "random": 5}
    sv.record_due_seeds(sv._args(["--out", str(tmp_path), "--final-seeds", "4", "--final-methods", "largest"]),
                        tmp_path)
    sv.record_due_seeds(sv._args(["--out", str(tmp_path), "--final-seeds", "2", "--final-methods", "largest"]),
                        tmp_path)  # a later run asking for fewer does not lower what is due
    assert sv.due_seeds(a, tmp_path) == {**dict.fromkeys(sv.METHODS, 3), "random": 5, "largest": 4}


def test_mean_ci_is_students_t():
    m, h = mean_ci([0.80, 0.82, 0.84])
    assert m == pytest.approx(0.82)
    assert h == pytest.approx(4.302653 * 0.02 / np.sqrt(3), rel=1e-5)  # t(0.975, 2) * sd / sqrt(n)
    assert np.isnan(mean_ci([0.5])[1])


def test_diff_ci_is_welchs_and_the_verdict_follows_its_sign():
    d, lo, hi = diff_ci([0.90, 0.91, 0.92], [0.80, 0.81, 0.82])
    assert d == pytest.approx(0.10)
    assert lo > 0 and sv.verdict(lo, hi) == "beats"
    d, lo, hi = diff_ci([0.80, 0.85, 0.90], [0.82, 0.83, 0.84])
    assert lo < 0 < hi and sv.verdict(lo, hi) == "ties"
    assert sv.verdict(*diff_ci([0.1, 0.11, 0.12], [0.5, 0.51, 0.52])[1:]) == "loses"


def test_macs_model_reports_millions_of_macs_not_a_latency():
    import nas

    arch = nas.load_space("tiny").random(0)
    p = sv.MacsModel().explain(arch)
    assert p.ms == pytest.approx(nas.arch_cost(arch).macs / 1e6)
    assert p.source == "estimated" and "not a latency" in p.device


def test_a_run_folder_of_other_settings_is_refused(tmp_path):
    a = sv._args(["--quick", "--out", str(tmp_path)])
    sv.check_settings(tmp_path, a)
    b = sv._args(["--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="other settings.*trials: 4 there, 36 now"):
        sv.check_settings(tmp_path, b)


@pytest.mark.slow
def test_quick_run_reports_every_method_at_every_budget(tmp_path):
    if not Path("/usr/share/datasets/fashion-mnist").is_dir():
        pytest.skip("Fashion-MNIST (Debian's dataset-fashion-mnist) is not installed")
    r = forked.run([sys.executable, "-m", "benchmarks", "search_value", "--quick", "--out", str(tmp_path)],
                   timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    import json

    res = json.loads((tmp_path / "search_value.json").read_text())
    assert {(r["budget"], r["method"]) for r in res["rows"]} == {(i, m) for i in range(3) for m in sv.METHODS}
    assert (tmp_path / "search_value.png").is_file() and "differences of test accuracy" in r.stdout


def test_the_report_part_reports_what_is_done_and_names_what_is_missing(tmp_path, monkeypatch):
    import json

    bs = [{"quantile": q, "latency_ms": ms, "macs": macs} for q, ms, macs in ((25, 1.2, 20e6), (50, 2.2, 35e6),
                                                                             (75, 3.5, 60e6))]
    (tmp_path / "budgets.json").write_text(json.dumps({"budgets": bs}))
    arch = {"arch": "c16 ir24", "params": 1000}
    picks = {m: [{**_rec(i, 0.8, 1.0, 10e6, digest=f"{m}{i}".ljust(16, "0")), **arch} for i in range(3)]
             for m in sv.METHODS}
    monkeypatch.setattr(sv, "all_picks", lambda out, b: picks)
    monkeypatch.setattr(sv, "search_cost", lambda out, m: None)
    for m, acc in (("nsga2", (0.91, 0.92, 0.915)), ("random", (0.88, 0.885, 0.882))):
        for s, x in enumerate(acc):
            sv.final_path(tmp_path, picks[m][0]["digest"], s).parent.mkdir(exist_ok=True)
            sv.final_path(tmp_path, picks[m][0]["digest"], s).write_text(json.dumps({"test_accuracy": x}))
    sv.final_path(tmp_path, picks["nsga2"][0]["digest"], 3).write_text(json.dumps({"test_accuracy": 0.913}))
    sv.run_part(sv._args(["--out", str(tmp_path)]), tmp_path, "report")
    res = json.loads((tmp_path / "search_value.json").read_text())
    assert not res["complete"] and "nsga2@50" in res["missing"] and "nsga2@25" not in res["missing"]
    [row] = [r for r in res["rows"] if (r["method"], r["budget"]) == ("nsga2", 0)]
    assert row["test_accuracy"] == [0.91, 0.92, 0.915, 0.913]  # a fourth seed trained is read too
    [c] = [c for c in res["comparisons"] if (c["method"], c["baseline"], c["budget"]) == ("nsga2", "random", 0)]
    assert c["verdict"] == "beats"
    assert "INCOMPLETE" in (tmp_path / "search_value.md").read_text()


def test_a_method_whose_search_has_not_run_is_reported_as_such(tmp_path, monkeypatch):
    """(b2), the progressive-shrinking supernet path, added to a run whose other searches are done: its rows
    say it was not searched, its search is named missing, no comparison or training is made up for it."""
    import json

    bs = [{"quantile": q, "latency_ms": ms, "macs": 30e6} for q, ms in ((25, 1.2), (50, 2.2), (75, 3.5))]
    (tmp_path / "budgets.json").write_text(json.dumps({"budgets": bs}))
    picks = {m: None if m.startswith("progressive") else
             [{**_rec(i, 0.8, 1.0, 10e6, digest=f"{m}{i}".ljust(16, "0")), "arch": "c16", "params": 1, "_arch": {}}
              for i in range(3)] for m in sv.METHODS}
    monkeypatch.setattr(sv, "all_picks", lambda out, b: picks)
    monkeypatch.setattr(sv, "search_cost", lambda out, m: None)
    digests = [d for d, *_ in sv.trainings(picks, 1)]
    assert len(digests) == 7 * 3 and not [d for d in digests if d.startswith("progressive")]
    res = sv.report(sv._args(["--out", str(tmp_path)]), tmp_path)
    assert res["missing"].count("search:progressive") == 1 and not res["complete"]
    rows = [r for r in res["rows"] if r["method"] == "progressive_noise"]
    assert len(rows) == 3 and all(r["searched"] is False and r["pick"] is None for r in rows)
    assert not [c for c in res["comparisons"] if c["method"].startswith("progressive")]
    assert "(b2') (b2), largest within noise of its best | not searched yet" in (tmp_path / "search_value.md").read_text()
    # a study journal that exists is read: the picks of every searched method, None for the one not searched
    (tmp_path / "studies").mkdir()
    monkeypatch.undo()
    monkeypatch.setattr(sv, "records", lambda out, m: [_rec(0, 0.8, 1.0, 10e6)])
    for m in ("nsga2", "random", "macs", "supernet"):
        sv.study_path(tmp_path, m).write_text("")
    got = sv.all_picks(tmp_path, bs)
    assert got["progressive"] is None and got["progressive_noise"] is None and got["supernet_noise"][0]["number"] == 0


def test_each_supernet_path_plans_its_epochs_by_a_pilot_of_its_own_schedule(tmp_path, monkeypatch):
    """(b2)'s epochs match (a)'s compute by progressive shrinking's own pilot, one epoch of each of its four
    phases (whose epochs cost unlike amounts), not by a sandwich epoch; (b)'s pilot stays one epoch."""
    from nas.supernet.schedule import phases
    from nas.supernet.settings import SupernetSettings

    assert [p.name for p in phases(SupernetSettings(epochs=sv.PILOT_EPOCHS["progressive"],
                                                    schedule="progressive"))] == ["largest", "kernel", "depth", "width"]
    trained = []
    monkeypatch.setattr(sv, "train_supernet", lambda space, data, st, where: trained.append((st.schedule, st.epochs)))

    class Scorer:
        def __init__(self, **kw):
            pass

        def evaluate(self, *args, **kw):
            pass

    monkeypatch.setattr(sv, "SupernetEvaluator", Scorer)
    monkeypatch.setattr(sv, "adapt_arch", lambda arch, data: arch)
    monkeypatch.setattr(sv, "search_cost", lambda out, m: {"total_s": 1640.0})
    clock = iter([0.0, 400.0, 400.0, 406.0, 0.0, 80.0, 80.0, 86.0])
    monkeypatch.setattr(sv, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    a = sv._args(["--out", str(tmp_path)])
    space = sv.nas.load_space("tiny")
    plan = sv.supernet_plan(a, tmp_path, space, None, "progressive")
    assert trained == [("progressive", 4)] and plan["pilot_epoch_s"] == 100.0 and plan["score_s"] == 2.0
    assert plan["epochs"] == (1640 - 120 * 2) // 100 == 14
    assert sv.supernet_plan(a, tmp_path, space, None, "supernet")["epochs"] == (1640 - 120 * 2) // 80
    assert trained[-1] == ("sandwich", 1)
    assert sv.supernet_plan(a, tmp_path, space, None, "progressive") == plan  # kept: not piloted again
    assert len(trained) == 2
