"""``nas.train`` on a run a search is still writing (a resumed search) is refused in one line, or with
``wait=true`` waits for the search to end: it trained the front as it stood (2 models of a final 4),
saying nothing, and a re-run left a model folder of the old front behind."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import forked
import pytest

from nas.config import compose_app
from nas.space import load_space

REPO = Path(__file__).resolve().parent.parent
WAIT = 120  # seconds an event is waited for before the test gives up (never reached when it passes)


def _run_dir(tmp_path: Path) -> Path:
    arch = load_space("tiny").random(0)
    run = tmp_path / "run"
    run.mkdir()
    (run / "pareto.json").write_text(json.dumps({"schema": "hwnas.pareto", "pareto": [
        {"arch": arch.to_dict(), "latency_ms": 0.1}], "search": {"data": {"name": "digits"}}}))
    return run


def _train(run: Path, capsys, *args: str) -> tuple[int, str]:
    from nas.cli.train import run as train_run

    try:
        train_run(compose_app("train", [f"run={run}", *args]))
        return 0, capsys.readouterr().err
    except SystemExit as e:
        return int(e.code), capsys.readouterr().err


def test_train_refuses_a_run_a_search_still_writes(tmp_path, capsys, monkeypatch):
    from nas._io import working
    from nas.train import pipeline

    monkeypatch.setattr(pipeline, "_train_front", lambda s: pytest.fail("trained while the search ran"))
    run = _run_dir(tmp_path)
    with working(run, "search", command="python -m nas.search out=run"):
        code, err = _train(run, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: run={run}: a search is still writing it (process ") and "wait=true" in err
    assert "python -m nas.search out=run" in err and not (run / "train").exists()


def test_train_with_wait_starts_when_the_search_ends(tmp_path, monkeypatch):
    from nas._io import working
    from nas.train.search_run import search_finished

    run = _run_dir(tmp_path)
    said, done = threading.Event(), threading.Event()
    with working(run, "search"):
        t = threading.Thread(target=lambda: (search_finished(run, wait=True, say=lambda m: said.set()), done.set()))
        t.start()
        assert said.wait(WAIT)
        assert not done.is_set()  # it waits while the search runs
    t.join(WAIT)
    assert done.is_set()
    search_finished(run)  # the search's mark is gone: nothing to wait for


def test_a_dead_search_leaves_no_mark(tmp_path):
    """A search killed with SIGKILL cannot remove its mark; its OS lock goes with it, so nothing waits."""
    from nas.train.search_run import search_finished

    run = _run_dir(tmp_path)
    code = ("import sys, os; from nas._io import working; w = working(sys.argv[1], 'search'); w.__enter__(); "
            "os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(run)], cwd=REPO, check=True)
    assert list((run / ".locks").glob("search.*.lock"))
    search_finished(run)
    assert not list((run / ".locks").glob("search.*"))


@pytest.mark.slow
def test_train_on_a_run_whose_search_is_resumed(tmp_path, capsys, monkeypatch):
    """A real resumed search in another process: nas.train refuses the run while it writes trials."""
    from nas.train import pipeline

    monkeypatch.setattr(pipeline, "_train_front", lambda s: pytest.fail("trained while the search ran"))
    search = [sys.executable, "-m", "nas.search", "evaluator=zero_cost", "search_space=tiny", "progress=false",
              f"out={tmp_path / 'run'}"]
    forked.run([*search, "n_trials=2"], cwd=REPO, check=True)
    journal = tmp_path / "run" / "study.journal"
    size = journal.stat().st_size
    proc = subprocess.Popen([*search, "n_trials=400"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 300
        while journal.stat().st_size == size and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)  # the resumed search has begun writing trials
        assert proc.poll() is None, proc.stderr.read()
        code, err = _train(tmp_path / "run", capsys)
    finally:
        proc.kill()
        proc.wait()
    assert code == 2 and "a search is still writing it" in err, err
