"""A search stopped in the middle of a trial (Ctrl-C, SIGTERM, a killed process, its database going
away) resumes with the interrupted architecture: it is run again, once, and nothing finished is lost."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState

from nas.search import objective
from nas.search.evaluate import EvalResult
from nas.search.study import count_trials, run_search
from tests.test_cli_errors import _one_line
from tests.test_search import FakeEvaluator, _prepare, _reload, digits, target  # noqa: F401  (fixtures)


def _counted_digests(study: optuna.Study) -> list[str]:
    return [t.user_attrs["digest"] for t in study.trials
            if t.state == TrialState.COMPLETE or (t.state == TrialState.FAIL and t.user_attrs.get("status") == "error")]


def test_ctrl_c_in_a_trial_runs_its_architecture_again_on_resume(tmp_path, target, digits):  # noqa: F811
    evaluated: list[str] = []
    s = _prepare(tmp_path, target, digits, FakeEvaluator(interrupt_on=3, calls=evaluated))
    with pytest.raises(KeyboardInterrupt):
        run_search(s.study, s.problem, n_trials=5)
    interrupted = s.study.trials[-1]
    assert interrupted.user_attrs["status"] == "interrupted" and len(evaluated) == 3
    s = _prepare(tmp_path, target, digits, FakeEvaluator(calls=evaluated))
    rep = run_search(s.study, s.problem, n_trials=5)
    assert evaluated[3] == evaluated[2], "the interrupted architecture was not the first one run on resume"
    assert rep.redone == [interrupted.number]
    redo = s.study.trials[interrupted.number + 1]
    assert redo.params == interrupted.params and redo.user_attrs["redo_of"] == interrupted.number
    counted = _counted_digests(s.study)
    assert count_trials(s.study) == 5 and len(counted) == len(set(counted)) == 5  # none lost, none twice
    rep = run_search(s.study, s.problem, n_trials=6)  # a later resume does not run it a third time
    assert rep.redone == [] and evaluated.count(evaluated[2]) == 2
    # nothing is queued beyond n_trials: with its one slot taken, a study interrupted in its second trial
    s = _prepare(tmp_path / "b", target, digits, FakeEvaluator(interrupt_on=2))
    with pytest.raises(KeyboardInterrupt):
        run_search(s.study, s.problem, n_trials=3)
    rep = run_search(s.study, s.problem, n_trials=1)
    assert rep.redone == [] and not [t for t in s.study.trials if t.state == TrialState.WAITING]


def test_a_trial_left_running_by_a_killed_process_is_redone(tmp_path, target, digits):  # noqa: F811
    """SIGKILL leaves the trial RUNNING; the next start fails it as stale and runs its architecture first."""
    s = _prepare(tmp_path, target, digits, FakeEvaluator())
    run_search(s.study, s.problem, n_trials=2)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    t = s.study.ask()  # as the killed worker left it: sampled, its digest recorded, never told
    dep = s.problem.deployed(s.problem.space.sample(t))
    t.set_user_attr("worker", f"{socket.gethostname()}:{dead.pid}")
    t.set_user_attr("digest", dep.digest())
    evaluated: list[str] = []
    s = _prepare(tmp_path, target, digits, FakeEvaluator(calls=evaluated))
    rep = run_search(s.study, s.problem, n_trials=4, storage=s.storage)
    assert s.problem.deployed(s.problem.space.decode(s.study.trials[t.number + 1].params)).digest() == dep.digest()
    assert rep.redone == [t.number] and s.study.trials[t.number].user_attrs["status"] == "stale"
    counted = _counted_digests(s.study)
    assert count_trials(s.study) == 4 and len(counted) == len(set(counted)) == 4 and dep.digest() in counted


def _fake_evaluate(calls, stop_on=None):
    """``SearchProblem._evaluate`` without training: a score from the digest; SIGTERM to this process on
    call ``stop_on`` (delivered to the main thread at once, as ``kill <pid>`` would)."""

    def evaluate(self, trial, arch, digest, epochs):
        calls.append(digest)
        if len(calls) == stop_on:
            os.kill(os.getpid(), signal.SIGTERM)
        return EvalResult(int(digest[:6], 16) / 2**24, "val_accuracy", 0.0)

    return evaluate


def _search_cli(monkeypatch, capsys, out, *args):
    import nas.cli.search as m

    monkeypatch.setattr(sys, "argv", ["nas.search", "conf=cpu", "search_space=tiny", "evaluator=zero_cost",
                                      "latency_budget_ms=null", "progress=false", f"out={out}", *args])
    with pytest.raises(SystemExit) as e:
        m.main()
    return e.value.code, capsys.readouterr()


def test_sigterm_stops_a_search_as_ctrl_c_does(tmp_path, monkeypatch, capsys):
    """``kill <pid>`` (a scheduler ending the job): a line saying it was stopped and how to resume, and
    the trial recorded interrupted (so its architecture is run first on resume)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    calls: list[str] = []
    out = tmp_path / "run"
    monkeypatch.setattr(objective.SearchProblem, "_evaluate", _fake_evaluate(calls, stop_on=2))
    unhandled = []  # without the command's own handler the SIGTERM lands here (not in pytest's default: death)
    def fallback(signum, frame):
        unhandled.append(signum)

    previous = signal.signal(signal.SIGTERM, fallback)
    try:
        code, shown = _search_cli(monkeypatch, capsys, out, "n_trials=4")
        assert signal.getsignal(signal.SIGTERM) is fallback  # the command's handler is gone once it returns
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert not unhandled, "the search left SIGTERM to the default handler"
    line = shown.err.strip().splitlines()[-1]
    assert code == 143 and line == (f"stopped by SIGTERM: finished trials are saved in {out / 'study.journal'}; run "
                                    f"the same command (out={out}) to continue (the interrupted trial is redone)")
    assert "Traceback" not in shown.err and (out / "pareto.json").exists()
    study = _reload(out / "study.journal", "tiny-digits-cpu")
    assert [t.user_attrs.get("status") for t in study.trials] == ["evaluated", "interrupted"]  # a redo on resume:
    # test_ctrl_c_in_a_trial_runs_its_architecture_again_on_resume


# the error a search met when its PostgreSQL server was stopped (pg_ctl stop -m fast) between two of its
# writes (Optuna 5.0, SQLAlchemy 2.1, psycopg 3.3): Optuna's RDB storage wraps SQLAlchemy's OperationalError
_REFUSED = ('connection failed: connection to server at "127.0.0.1", port 55432 failed: Connection refused\n'
            '\tIs the server running on that host and accepting TCP/IP connections?')
_OPTUNA = ("An exception is raised during the commit. This typically happens due to invalid data in the commit, "
           "e.g. exceeding max length. ")


def _storage_went_away() -> optuna.exceptions.StorageInternalError:
    import sqlalchemy

    try:
        try:
            raise sqlalchemy.exc.OperationalError("SELECT 1", {}, OSError(_REFUSED))
        except sqlalchemy.exc.OperationalError as e:
            raise optuna.exceptions.StorageInternalError(_OPTUNA) from e
    except optuna.exceptions.StorageInternalError as e:
        return e


def test_a_lost_database_is_recognised_in_optunas_error():
    from nas.search.storage import lost_storage

    assert lost_storage(_storage_went_away()) == _REFUSED.splitlines()[0]
    assert lost_storage(optuna.exceptions.StorageInternalError(_OPTUNA)) is None  # no database error under it
    assert lost_storage(ValueError("x")) is None


def test_the_database_going_away_mid_search_says_so_and_how_to_resume(tmp_path, monkeypatch, capsys):
    from nas.search import study

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    real, seen = study._run_one, []

    def run_one(*a, **k):
        seen.append(1)
        if len(seen) == 2:
            raise _storage_went_away()
        return real(*a, **k)

    monkeypatch.setattr(study, "_run_one", run_one)
    monkeypatch.setattr(objective.SearchProblem, "_evaluate", _fake_evaluate([]))
    out = tmp_path / "run"
    code, shown = _search_cli(monkeypatch, capsys, out, "n_trials=3")
    line = _one_line(shown.err)
    assert code == 1 and line == (
        f"error: the study's database went away: {out / 'study.journal'}: {_REFUSED.splitlines()[0]}; the finished "
        f"trials are saved in it: when it is back, run the same command (out={out}) to continue (the interrupted "
        f"trial is redone)")
