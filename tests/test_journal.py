"""Study journals that survive crashes: a damaged journal is refused (one line naming the file, the
line and the repair command) and never written to; ``python -m nas.repair`` keeps every intact
record; a killed lock holder never stalls the next start."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import forked
import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from nas.cli import repair as repair_cli
from nas.config import compose_app
from nas.search.journal import JournalFileLock, check_journal, journal_lock_path, repair_journal
from nas.search.storage import journal_storage

ROOT = Path(__file__).resolve().parent.parent
SEARCH = ["evaluator=zero_cost", "search_space=tiny", "n_trials=2", "progress=false"]
optuna.logging.set_verbosity(optuna.logging.WARNING)


def _study(path: Path, n: int, name: str = "s") -> None:
    """A journal with a study of ``n`` complete trials, written by Optuna."""
    storage, _ = journal_storage(path)
    study = optuna.create_study(storage=storage, study_name=name, load_if_exists=True)
    for i in range(n):
        study.enqueue_trial({"x": float(i)})
        study.optimize(lambda t: t.suggest_float("x", 0, 10), n_trials=1)


def _trials(path: Path, name: str = "s") -> list[tuple]:
    storage = JournalStorage(JournalFileBackend(str(path), lock_obj=JournalFileLock(path)))
    return [(t.number, t.state.name, t.params) for t in optuna.load_study(study_name=name, storage=storage).trials]


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _repair(capsys, *args: str) -> str:
    repair_cli.main([*args])
    return capsys.readouterr().out


@pytest.fixture
def journal(tmp_path) -> Path:
    p = tmp_path / "study.journal"
    _study(p, 3)
    return p


def test_torn_last_line_is_refused_and_left_as_it_is(journal):
    torn = journal.read_bytes() + b'{"op_code":4,"worker_id":"w","study_id":0,"dat'
    journal.write_bytes(torn)
    n = len(_lines(journal))
    with pytest.raises(ValueError) as e:
        journal_storage(journal)
    msg = str(e.value)
    assert str(journal) in msg and f"line {n}" in msg and "nothing was written" in msg
    assert f"python -m nas.repair {journal}" in msg and "\n" not in msg
    assert journal.read_bytes() == torn


def test_damaged_middle_line_is_refused(journal):
    lines = _lines(journal)
    lines[2] = b"garbage\n"
    journal.write_bytes(b"".join(lines))
    with pytest.raises(ValueError, match="line 3: not a valid JSON record"):
        check_journal(journal)


def test_repair_keeps_every_intact_record(journal, capsys):
    intact = journal.read_bytes()
    want = _trials(journal)
    journal.write_bytes(intact + b'{"op_code":4,"worker_id":"w","stu')
    out = _repair(capsys, str(journal.parent))  # a run folder names its study.journal
    assert journal.read_bytes() == intact and _trials(journal) == want
    backup = next(journal.parent.glob("study.journal.damaged-*"))
    assert backup.read_bytes().endswith(b'"stu') and str(backup) in out
    assert f"kept {len(_lines(journal))} records" in out and "'s': 3 trials (3 complete)" in out
    _study(journal, 1)  # the journal opens and takes new trials
    assert len(_trials(journal)) == 4


def test_record_glued_onto_a_torn_one_is_recovered(journal):
    """An older writer appended onto a torn line: the whole record after it is kept."""
    lines = _lines(journal)
    glued = lines[-1]
    journal.write_bytes(b"".join(lines[:-1]) + b'{"op_code":8,"worker_id":"w","tr' + glued)
    r = repair_journal(journal)
    assert r.salvaged == 1 and not r.prefix_only and journal.read_bytes() == b"".join(lines)


def test_damaged_middle_line(journal):
    """A damaged attribute record is dropped alone; a damaged record that may have created a trial
    would shift the ids of later trials, so only the intact records before it are kept."""
    lines = _lines(journal)
    attr = next(i for i, ln in enumerate(lines) if json.loads(ln)["op_code"] == 5)  # a trial's param
    journal.write_bytes(b"".join(lines[:attr] + [b'{"op_code":5,"wor\n'] + lines[attr + 1:]))
    r = repair_journal(journal)
    assert r.dropped == [attr + 1] and not r.prefix_only and r.kept == len(lines) - 1

    journal.write_bytes(b"".join(lines))
    creates = [i for i, ln in enumerate(lines) if json.loads(ln)["op_code"] == 4]
    damaged = b"".join(lines[:creates[1]] + [b"\x00\x00\n"] + lines[creates[1] + 1:])
    journal.write_bytes(damaged)
    backups = list(journal.parent.glob("*.damaged-*"))
    with pytest.raises(ValueError, match="would drop .* intact record.*nothing was changed.*--keep-prefix") as e:
        repair_journal(journal)  # it drops intact records: only when asked
    assert "\n" not in str(e.value) and journal.read_bytes() == damaged
    assert list(journal.parent.glob("*.damaged-*")) == backups
    r = repair_journal(journal, keep_prefix=True)
    assert r.prefix_only and r.kept == creates[1] and r.prefix_dropped == len(lines) - creates[1] - 1
    assert [t[0] for t in _trials(journal)] == [0]


def test_unknown_op_code_is_named_and_dropped(journal, capsys):
    """A line that is valid JSON but no record Optuna replays (an unknown op_code) is damage: the check names
    it, and the repair drops it alone and says why."""
    intact = journal.read_bytes()
    journal.write_bytes(intact + b'{"op_code": 99, "worker_id": "x"}\n')
    n = len(_lines(journal))
    with pytest.raises(ValueError, match=f"line {n}: valid JSON but not an Optuna journal record "
                                         "\\(unknown op_code 99"):
        journal_storage(journal)
    out = _repair(capsys, "--dry-run", str(journal.parent))
    assert f"dropped damaged line(s) {n}\n  line {n}: valid JSON but not an Optuna journal record" in out
    _repair(capsys, str(journal.parent))
    assert journal.read_bytes() == intact


def _pareto_json(tmp_path: Path) -> Path:
    p = tmp_path / "runs" / "pareto.json"
    p.parent.mkdir()
    p.write_text(json.dumps({"schema": "hwnas.pareto", "pareto": [{"trial": 1, "latency_ms": 0.5}]}, indent=1) + "\n")
    return p


@pytest.mark.parametrize("make", [
    lambda t: (t / "results.csv", b"number,score\n0,0.5\n1,0.7\n"),
    lambda t: (t / "services", Path("/etc/services").read_bytes() if Path("/etc/services").is_file()
               else b"ssh\t\t22/tcp\n# a comment\n"),
    lambda t: (t / "records.jsonl", b'{"a": 1}\n[1, 2]\n'),
    lambda t: (_pareto_json(t), None),
], ids=["csv", "etc-services", "json-lines", "pareto.json"])
@pytest.mark.parametrize("dry_run", [False, True], ids=["repair", "dry-run"])
def test_a_file_that_is_not_a_journal_is_refused_and_left_as_it_is(tmp_path, capsys, make, dry_run):
    path, data = make(tmp_path)
    if data is not None:
        path.write_bytes(data)
    before = {p: p.read_bytes() for p in path.parent.iterdir()}
    with pytest.raises(SystemExit) as e:
        repair_cli.main([*(["--dry-run"] if dry_run else []), str(path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {path} is not an Optuna study journal") and "nothing was changed" in err
    assert {p: p.read_bytes() for p in path.parent.iterdir()} == before  # no backup, no lock folder, same bytes


def test_a_repair_never_writes_fewer_bytes_than_the_intact_records(journal, monkeypatch):
    from nas.search import journal as journal_mod

    damaged = journal.read_bytes() + b'{"op_code":4,"worker_id":"w","stu'
    journal.write_bytes(damaged)
    monkeypatch.setattr(journal_mod, "_plan", lambda lines, report, **k: [ln.raw for ln in lines[:2]])
    with pytest.raises(ValueError, match="fewer than its intact records hold.*nothing was changed"):
        repair_journal(journal)
    assert journal.read_bytes() == damaged and not list(journal.parent.glob("*.damaged-*"))


def test_dry_run_and_intact_journal_change_nothing(journal, capsys):
    intact = journal.read_bytes()
    out = _repair(capsys, str(journal))
    assert "intact" in out and journal.read_bytes() == intact
    damaged = intact + b"{"
    journal.write_bytes(damaged)
    out = _repair(capsys, "--dry-run", str(journal))
    assert "would keep" in out and journal.read_bytes() == damaged
    assert not list(journal.parent.glob("*.damaged-*"))


def test_repair_errors_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        repair_cli.main([str(tmp_path)])
    assert e.value.code == 2 and capsys.readouterr().err.startswith("error: no journal file at")


def _enospc(*a, **k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _copy_then_fill(src, dst, *a, **k):
    """shutil.copy2 on a disk that fills up: an empty file made, then no space for its bytes."""
    Path(dst).touch()
    _enospc()


@pytest.mark.parametrize("full", ["checked", "backup", "repaired"])
def test_repair_on_a_full_disk_is_refused_in_one_line_and_leaves_no_backup(journal, capsys, monkeypatch, full):
    from nas.search import journal as journal_mod

    damaged = journal.read_bytes() + b"{"
    journal.write_bytes(damaged)
    if full == "checked":  # no room, as the disk says: nothing is tried
        usage = shutil.disk_usage(journal.parent)._replace(free=4096)
        monkeypatch.setattr(journal_mod.shutil, "disk_usage", lambda p: usage)
        monkeypatch.setattr(journal_mod.shutil, "copy2", lambda *a: pytest.fail("copied on a full disk"))
    elif full == "backup":  # room as the disk says, then none
        monkeypatch.setattr(journal_mod.shutil, "copy2", _copy_then_fill)
    else:
        monkeypatch.setattr(journal_mod, "atomic_write_bytes", _enospc)
    with pytest.raises(SystemExit) as e:
        repair_cli.main([str(journal.parent)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert ("not enough free space to repair" if full == "checked" else "No space left on device") in err
    assert journal.read_bytes() == damaged and not list(journal.parent.glob("*.damaged-*"))


def test_killed_lock_holder_does_not_stall_the_next_start(tmp_path):
    journal = tmp_path / "study.journal"
    _study(journal, 1)
    os.symlink(journal, str(journal) + ".lock")  # an older run's Optuna lock, left behind
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from nas.search.journal import JournalFileLock; "
         f"JournalFileLock({str(journal)!r}).acquire(); print('held', flush=True); time.sleep(60)"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    storage, _ = journal_storage(journal)
    waits = []
    with pytest.MonkeyPatch.context() as mp:  # any wait for the lock (a grace period, a poll) is a stall
        mp.setattr(time, "sleep", waits.append)
        optuna.create_study(storage=storage, study_name="next")  # an append, under the lock
    assert waits == []
    assert journal_lock_path(journal).exists() and Path(str(journal) + ".lock").is_symlink()


@pytest.mark.parametrize("bad", [b'{"op_code":6,"worker_id":"w","tri', b'{"op_code": 99, "worker_id": "x"}\n'],
                         ids=["torn", "unknown-op-code"])
def test_search_refuses_a_damaged_journal(journal, bad):
    torn = journal.read_bytes() + bad
    journal.write_bytes(torn)
    p = forked.run([sys.executable, "-m", "nas.search", *SEARCH, "study_name=s", f"out={journal.parent}"], cwd=ROOT)
    err = p.stderr.strip()
    assert p.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr
    assert err.startswith("error: ") and str(journal) in err and "python -m nas.repair" in err
    assert journal.read_bytes() == torn


@pytest.mark.slow
def test_search_resumes_once_repaired(tmp_path):
    from nas.cli.search import run

    run(compose_app("search", SEARCH), run_dir=tmp_path)
    journal = tmp_path / "study.journal"
    intact = journal.read_bytes()
    journal.write_bytes(intact + b'{"op_code":6,"worker_id":"w","tri')
    with pytest.raises(SystemExit):  # refused, and nothing appended
        run(compose_app("search", SEARCH), run_dir=tmp_path)
    repair_cli.main([str(tmp_path)])
    assert journal.read_bytes() == intact
    out = run(compose_app("search", [*SEARCH[:2], "n_trials=3", "progress=false"]), run_dir=tmp_path)
    assert out["ran"] == 1 and sum(out["statuses"].values()) == 3


_OPEN_SQLITE = """
import sys, time
from pathlib import Path
from nas.search.storage import make_storage
d = Path(sys.argv[1])
(d / f"ready{sys.argv[2]}").touch()
while not (d / "go").exists():
    time.sleep(0.005)
make_storage(f"sqlite:///{d / 'new.db'}", run_dir=d)
"""


def test_workers_opening_a_new_sqlite_file_at_once(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", _OPEN_SQLITE, str(tmp_path), str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    deadline = time.time() + 120
    while len(list(tmp_path.glob("ready*"))) < 4 and time.time() < deadline:
        time.sleep(0.05)
    (tmp_path / "go").touch()
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
