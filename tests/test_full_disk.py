"""A disk that fills up (ENOSPC) or a file size limit (``ulimit -f``: EFBIG) during a command: one line
naming the folder it wrote into and what to do, exit code 2, and what was finished is kept."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from optuna.storages.journal import JournalFileBackend

from nas._io import atomic_write_text
from nas.cli import _common
from nas.cli._common import writing_into
from nas.search import objective
from nas.search.evaluate import EvalResult
from nas.search.journal import check_journal
from tests.test_cli_errors import _one_line

ROOT = Path(__file__).resolve().parents[1]


def test_an_atomic_write_to_a_full_disk_names_the_file_and_leaves_nothing(tmp_path, monkeypatch):
    real = os.fdopen

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")  # what write(2) gives: no file name

    monkeypatch.setattr(os, "fdopen", lambda fd, mode: Full(real(fd, mode)))
    with pytest.raises(OSError) as e:
        atomic_write_text(tmp_path / "run.json", "{}")
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "run.json")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("err, what", [(errno.ENOSPC, "No space left on device; free space there"),
                                       (errno.EFBIG, "File too large; raise the file size limit (ulimit -f)")])
def test_a_write_that_names_no_file_is_reported_as_the_output_folders(capsys, tmp_path, err, what):
    """The mechanism nas.train and nas.search use: a library's own write (a journal append, an exporter)."""
    with pytest.raises(SystemExit) as e, _common._unexpected_errors(show=False), writing_into(tmp_path / "out"):
        raise OSError(err, os.strerror(err))
    assert e.value.code == 2 and capsys.readouterr().err.strip() == (
        f"error: {tmp_path / 'out'}: {what}, then run the same command again: it keeps what it finished")


def _fake_evaluate(self, trial, arch, digest, epochs):
    return EvalResult(int(digest[:6], 16) / 2**24, "val_accuracy", 0.0)


def test_a_search_on_a_full_disk_says_where_and_how_to_resume(tmp_path, monkeypatch, capsys):
    """The journal append that meets the full disk (Optuna's ``JournalFileBackend.append_logs``, whose write
    names no file) wrote part of its line first, as write(2) does when the disk fills mid-line."""
    import nas.cli.search as m

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setattr(objective.SearchProblem, "_evaluate", _fake_evaluate)
    out, real, calls = tmp_path / "run", JournalFileBackend.append_logs, []

    def append_logs(self, logs):  # from the 60th on, every append fails: the disk stays full
        calls.append(1)
        if len(calls) >= 60:
            if len(calls) == 60:
                with open(out / "study.journal", "ab") as f:
                    f.write(b'{"op_code": 5, "worker_id": "w", "trial_id": 3, "param_na')
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, logs)

    monkeypatch.setattr(JournalFileBackend, "append_logs", append_logs)
    monkeypatch.setattr(sys, "argv", ["nas.search", "conf=cpu", "search_space=tiny", "evaluator=zero_cost",
                                      "latency_budget_ms=null", "progress=false", "n_trials=30", f"out={out}"])
    with pytest.raises(SystemExit) as e:
        m.main()
    assert e.value.code == 2 and _one_line(capsys.readouterr().err) == (
        f"error: {out}: No space left on device; free space there, repair the study journal, whose last write was "
        f"cut off (python -m nas.repair {out / 'study.journal'}), then run the same command again: it keeps what it "
        f"finished")
    with pytest.raises(ValueError, match="line 60: the last line is cut off"):  # what the repair mends
        check_journal(out / "study.journal")


@pytest.mark.slow
def test_a_search_under_a_file_size_limit(tmp_path):
    """``ulimit -f`` for real: the kernel refuses the journal's growth with EFBIG (Python ignores SIGXFSZ)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20 * 1024, resource.RLIM_INFINITY))

    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "nas.search", "conf=cpu", "search_space=tiny", "evaluator=zero_cost",
                        "latency_budget_ms=null", "n_trials=40", "progress=false", f"out={out}"], cwd=tmp_path,
                       preexec_fn=limit, capture_output=True, text=True, timeout=900,
                       env={**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2, r.stderr
    line = _one_line(r.stderr)
    assert line.startswith(f"error: {out}: File too large; raise the file size limit (ulimit -f), ") and \
        line.endswith("then run the same command again: it keeps what it finished"), line
