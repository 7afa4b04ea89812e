"""What single benchmarks compute: their pieces tested on small inputs (the benchmarks themselves are
run, with figures, by hand; tests/test_benchmarks.py checks the package as a whole)."""

import importlib
import subprocess
import sys
from pathlib import Path

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
    # a network whose fresh-session rounds disagree by more than 10% (a busy core) is left out of the scores, named
    left_out = json.loads((tmp_path / "graph_validate.json").read_text())["repeatability"]["left_out"]
    assert leg["table_reproducibility"]["entries"] > 0 and leg["methods"]["predictor"]["n"] + len(left_out) == 3
    assert {"graph_table.json", "graph_validate.json", "gpu_check.md", "gpu_check.log"} <= {
        p.name for p in tmp_path.iterdir()}
    assert "| graph |" in (tmp_path / "gpu_check.md").read_text()


