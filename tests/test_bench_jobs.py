"""A benchmark's parts run as processes on cores of their own (benchmarks/_jobs.py), and the supernet
benchmark's scores split into such parts (``python -m benchmarks supernet --jobs N``)."""

import json
import os
import sys
import time
from types import SimpleNamespace

import pytest

from benchmarks import _jobs
from benchmarks import supernet as bs
from benchmarks._jobs import Part


def _recording(path):
    """A part's command: a process that appends its name and the cores it may use to ``path``, and
    fails when its name starts with ``fail``."""
    code = ("import json, os, sys; n = sys.argv[1]; print('output of', n); "
            f"open({str(path)!r}, 'a').write(json.dumps([n, sorted(os.sched_getaffinity(0))]) + '\\n'); "
            "sys.exit(3 if n.startswith('fail') else 0)")
    return lambda part: [sys.executable, "-c", code, part.name]


def _ran(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_part_waits_for_what_it_needs_and_the_dearest_ready_part_goes_first(tmp_path):
    """One core: ``a`` first (``c`` needs it, although ``b`` costs more), then ``b``, then ``c``; every
    process pinned to the core given, its output in its own log."""
    core = sorted(os.sched_getaffinity(0))[-1]
    parts = [Part("b", 5.0), Part("c", 3.0, needs=("a",)), Part("a", 1.0)]
    seconds = _jobs.run_parts(parts, _recording(tmp_path / "ran"), [core], tmp_path / "logs", poll_s=0.01)
    assert _ran(tmp_path / "ran") == [["a", [core]], ["b", [core]], ["c", [core]]]
    assert set(seconds) == {"a", "b", "c"} and all(s > 0 for s in seconds.values())
    assert (tmp_path / "logs" / "b.log").read_text().strip() == "output of b"


def test_a_failed_part_stops_the_rest_and_names_its_log(tmp_path):
    parts = [Part("fail_x", 2.0), Part("y", 1.0, needs=("fail_x",)), Part("z", 0.5)]
    with pytest.raises(SystemExit, match=r"part fail_x failed \(its output: .*fail_x.log\); 2 part\(s\) not started"):
        _jobs.run_parts(parts, _recording(tmp_path / "ran"), [sorted(os.sched_getaffinity(0))[0]], tmp_path / "logs",
                        poll_s=0.01)
    assert [n for n, _ in _ran(tmp_path / "ran")] == ["fail_x"]


def test_parts_that_cannot_run_are_refused():
    cores = [0]
    with pytest.raises(ValueError, match="a name given twice"):
        _jobs.run_parts([Part("a", 1), Part("a", 2)], lambda p: [], cores, None)
    with pytest.raises(ValueError, match=r"needs \['q'\], which no part provides"):
        _jobs.run_parts([Part("a", 1, needs=("q",))], lambda p: [], cores, None)
    assert _jobs.next_part([Part("a", 1, needs=("b",)), Part("b", 1, needs=("a",))], set()) is None
    with pytest.raises(SystemExit, match=r"--jobs 0: this process may run on \d+ core"):
        _jobs.job_cores(0)
    with pytest.raises(SystemExit, match=r"give 1 to \d+"):
        _jobs.job_cores(len(os.sched_getaffinity(0)) + 1)


def test_parts_that_wait_on_each_other_are_an_error_not_a_hang(tmp_path):
    with pytest.raises(ValueError, match="wait on each other"):
        _jobs.run_parts([Part("a", 1, needs=("b",)), Part("b", 1, needs=("a",))], lambda p: [], [0], tmp_path)


def test_supernet_benchmark_splits_its_missing_scores_into_parts(tmp_path, monkeypatch):
    """Each supernet with its scores, each stand-alone run and estimator seed a part, the zero-cost
    proxies one; train_equal waits for the supernet and train; a complete score is no part; each
    part's process is the benchmark with the same settings and that part's scores."""
    a = bs.parse_args(["--standalone-seeds", "2", "--out", str(tmp_path), "--estimator-seeds", "2", "--jobs", "2", "--seed",
                  "5", "--space", "bench/wide", "--pick", "graded"])
    work = tmp_path / "w"
    archs = [type("A", (), {"digest": lambda self, k=k: f"d{k}"})() for k in range(4)]
    sizes = bs.SplitSizes(10000, 12000, 10000)
    got = bs.parts(a, work, archs, sizes)
    named = {p.name: (p, s) for p, s in got.items()}
    assert set(named) == {"supernet", "progressive", "train", "train_equal", "train_1epoch", "zero_cost", "standalone0",
                          "standalone1", "supernet@1", "progressive@1", "train@1", "train_equal@1", "train_1epoch@1"}
    assert named["supernet"][1] == ["supernet", "supernet_again"] and named["supernet@1"][1] == ["supernet@1"]
    assert named["zero_cost"][1] == ["naswot", "synflow", "naswot@1", "synflow@1"]
    assert named["train_equal"][0].needs == named["train_equal@1"][0].needs == ("supernet", "train")
    # the order follows the training each part does: a supernet's 20 epochs (about seven each), 8, 3, 1
    assert named["progressive"][0].cost > named["standalone0"][0].cost > named["train"][0].cost > \
        named["train_1epoch"][0].cost > named["zero_cost"][0].cost
    # a part's cost is its estimated seconds: 4 architectures x (8 epochs of 10000 images + a scoring of the
    # 10000 test images at a third of the cost) at 640 images/s
    assert named["standalone0"][0].cost == pytest.approx(4 * (8 * 10000 + 10000 / 3) / 640)
    # a score complete in the cache is left out, and nothing waits for it
    for name in ("supernet", "supernet_again"):
        path = bs.cache_path(work, name, a)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({f"d{k}": {"score": 0.5, "seconds": 1.0} for k in range(4)}))
    named = {p.name: p for p in bs.parts(a, work, archs, sizes)}
    assert "supernet" not in named and named["train_equal"].needs == ("train",)

    seen = {}
    monkeypatch.setattr(bs, "job_cores", lambda jobs: [0, 1][:jobs])
    monkeypatch.setattr(bs, "run_parts", lambda todo, command, cores, logs: seen.update(
        cores=cores, commands={p.name: command(p) for p in todo}) or {})
    bs.run_parts_of(a, work, archs, sizes)
    assert seen["cores"] == [0, 1]
    rec = json.loads((work / "jobs.json").read_text())  # what the report gives as its "jobs"
    assert rec["cores"] == [0, 1] and rec["wall_s"] >= 0 and rec["part_wall_s"] == {}
    assert (rec["scores_computed"], rec["scores_complete_before"]) == (len(a.scores) - 2, 2)
    cmd = seen["commands"]["train_equal@1"]
    assert cmd[:4] == [sys.executable, "-m", "benchmarks", "supernet"]
    again = bs.parse_args(cmd[4:])
    assert again.scores == ["train_equal@1"] and again.jobs == 1
    same = (*bs._SETTINGS, "standalone_seeds", "estimator_seeds", "quick", "out")
    assert {k: getattr(again, k) for k in same} == {k: getattr(a, k) for k in same}
    quick = bs.parse_args(["--quick", "--out", str(tmp_path), "--jobs", "2"])
    bs.run_parts_of(quick, tmp_path / "q", archs, sizes)
    assert bs.parse_args(seen["commands"]["standalone1"][4:]).quick


def test_supernet_benchmark_jobs_are_cpu_cores(capsys):
    with pytest.raises(SystemExit):
        bs.parse_args(["--jobs", "2", "--device", "cuda"])
    assert "--jobs runs the parts on CPU cores" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bs.parse_args(["--jobs", "0"])
    assert "--jobs must be at least 1, got 0" in capsys.readouterr().err


def test_ctrl_c_interrupts_every_running_part(tmp_path, monkeypatch):
    """Ctrl-C while parts run: each is interrupted as Ctrl-C would interrupt it (it may save what it
    finished) and waited for, then the interruption goes on.  Two slots (0 and 1) run the two parts
    together whatever cores this process may use (one under ``taskset -c 0``): the children are not
    pinned here (``pin`` is a no-op), which ``test_a_part_waits_for_what_it_needs...`` checks instead."""
    code = "import time, sys; print('started', flush=True); time.sleep(60)"
    procs = []
    start = _jobs._start
    monkeypatch.setattr(_jobs, "_start", lambda *a: procs.append(start(*a)) or procs[-1])
    monkeypatch.setattr(_jobs, "pin", lambda cores: list(cores))

    def interrupt(seconds):
        if all((tmp_path / f"{n}.log").is_file() and (tmp_path / f"{n}.log").read_text() for n in "ab"):
            raise KeyboardInterrupt
        time.sleep(0.01)  # let the children start on a busy core
    monkeypatch.setattr(_jobs, "time", SimpleNamespace(perf_counter=time.perf_counter, sleep=interrupt))
    with pytest.raises(KeyboardInterrupt):
        _jobs.run_parts([Part("a", 1), Part("b", 1)], lambda p: [sys.executable, "-c", code], [0, 1], tmp_path)
    assert len(procs) == 2 and all(p.returncode not in (None, 0) for p in procs)
    assert all("KeyboardInterrupt" in (tmp_path / f"{n}.log").read_text() for n in "ab")
