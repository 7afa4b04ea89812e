"""Journal files that survive crashes: an OS lock for writers, a check before a journal is opened,
and a repair that keeps every intact record.

An Optuna journal is one JSON record per line, appended under a lock.  A crash or a full disk in
the middle of an append leaves a torn last line; left alone, the next append would be glued onto it
and the study could no longer be read.  ``check_journal`` refuses such a file before anything is
written to it, and ``repair_journal`` (``python -m nas.repair``) rewrites it without the damage.
"""

from __future__ import annotations

import io
import json
import logging
import re
import shlex
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from filelock import FileLock
from optuna.storages import JournalStorage
from optuna.storages.journal import BaseJournalBackend, JournalFileBackend
from optuna.storages.journal._file import BaseJournalFileLock  # the documented base, not re-exported
from optuna.storages.journal._storage import JournalOperation  # the op codes Optuna replays, not re-exported

from nas._io import atomic_write_bytes, lock_path

__all__ = ["JournalFileLock", "RepairReport", "check_journal", "journal_lock_path", "repair_journal",
           "study_counts", "study_names"]

log = logging.getLogger(__name__)

# Optuna's own file locks use "<journal>.lock" (a symlink or a plain file, left behind by a killed
# holder); ours is a different file so such leftovers never matter.
LOCK_SUFFIX = ".flock"
_ID_CREATING_OPS = {JournalOperation.CREATE_STUDY, JournalOperation.CREATE_TRIAL}  # later records count them
_OP_CODES = frozenset(int(op) for op in JournalOperation)
_OP_CODE = re.compile(rb'^\s*\{\s*"op_code"\s*:\s*(\d+)')
_RECORD_START = re.compile(rb'\{\s*"op_code"\s*:')


def journal_lock_path(path: str | Path) -> Path:
    """The file the journal writers lock (an OS lock, released when its holder dies), in the hidden
    lock folder beside the journal (``nas._io.lock_path``)."""
    return lock_path(path, LOCK_SUFFIX)


class JournalFileLock(BaseJournalFileLock):
    """Optuna's journal file lock as an OS lock (``filelock``) on ``.locks/<journal>.flock``: a killed
    holder releases it at once, so the next writer never waits out a grace period."""

    def __init__(self, path: str | Path) -> None:
        self._lock_file = str(journal_lock_path(path))
        self._lock: Any = None

    def _filelock(self) -> Any:
        if self._lock is None:
            self._lock = FileLock(self._lock_file)
        return self._lock

    def acquire(self) -> bool:
        self._filelock().acquire()
        return True

    def release(self) -> None:
        self._filelock().release()

    def __enter__(self) -> JournalFileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __getstate__(self) -> dict[str, Any]:  # a storage sent to another process takes its own lock
        return {"_lock_file": self._lock_file, "_lock": None}


# --------------------------------------------------------------------------------------------
# reading a journal line by line


@dataclass
class _Line:
    number: int  # 1-based
    raw: bytes
    record: dict | None = None  # the parsed record when the line is intact
    salvaged: bytes | None = None  # a whole record glued after a torn one, with its newline
    problem: str = ""

    @property
    def torn(self) -> bool:
        """Cut off mid-append: never a record Optuna replayed, so dropping it shifts nothing."""
        return not self.raw.endswith(b"\n") or self.salvaged is not None


def _parse(raw: bytes) -> dict | None:
    """The journal record on a line, else None."""
    return _record(raw)[0]


def _record(raw: bytes) -> tuple[dict | None, str]:
    """``(record, "")`` for a line holding an Optuna journal record, else ``(None, what it is instead)``."""
    try:
        rec = json.loads(raw)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        return None, "not a valid JSON record"
    if not isinstance(rec, dict):
        return None, f"valid JSON but not an Optuna journal record (a {type(rec).__name__}, not an object)"
    op = rec.get("op_code")
    if isinstance(op, bool) or not isinstance(op, int):
        return None, "valid JSON but not an Optuna journal record (no integer op_code)"
    if op not in _OP_CODES:
        return None, (f"valid JSON but not an Optuna journal record (unknown op_code {op}; Optuna "
                      f"{optuna.__version__} knows {min(_OP_CODES)}..{max(_OP_CODES)})")
    if not isinstance(rec.get("worker_id"), str):
        return None, "valid JSON but not an Optuna journal record (no worker_id)"
    return rec, ""


def _lines(data: bytes) -> Iterator[_Line]:
    for n, raw in enumerate(io.BytesIO(data), start=1):
        line = _Line(n, raw)
        if not raw.endswith(b"\n"):
            line.problem = "the last line is cut off (no newline: a write was interrupted by a crash or a full disk)"
            if _parse(raw) is not None:  # complete but for its newline
                line.salvaged = raw + b"\n"
        else:
            line.record, line.problem = _record(raw)
            if line.record is None:
                for m in _RECORD_START.finditer(raw, 1):  # a record appended onto a torn one
                    if _parse(raw[m.start():]) is not None:
                        line.salvaged = raw[m.start():]
                        break
        yield line


def study_names(path: str | Path) -> list[str]:
    """The studies created in the journal at ``path``, in order, read without opening it for
    writing (damaged lines are skipped: ``check_journal`` reports them when it is opened)."""
    data = Path(path).read_bytes()
    names = [str(ln.record["study_name"]) for ln in _lines(data)
             if ln.record is not None and ln.record.get("op_code") == 0 and ln.record.get("study_name")]
    return list(dict.fromkeys(names))


def _repair_hint(path: Path) -> str:
    return f"python -m nas.repair {shlex.quote(str(path))}"


def check_journal(path: str | Path) -> None:
    """Raise ``ValueError`` (naming the file, the line and the repair command) unless every line of
    the journal at ``path`` is a newline-terminated JSON record.  A missing file is fine."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        return
    for line in _lines(data):
        if line.problem:
            raise ValueError(f"study journal {p} is damaged at line {line.number}: {line.problem}; nothing was "
                             f"written to it. Repair it (keeps every intact record, backs up the original): "
                             f"{_repair_hint(p)}")


# --------------------------------------------------------------------------------------------
# repair


class _RecordsBackend(BaseJournalBackend):
    """Journal records held in memory, for replaying a candidate repair with Optuna."""

    def __init__(self, records: list[dict]) -> None:
        self._records = records

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        yield from self._records[log_number_from:]

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        raise RuntimeError("read-only journal")


def study_counts(backend: BaseJournalBackend) -> dict[str, Counter]:
    """Each study in the journal and its trials counted by state, as Optuna replays them."""
    storage = JournalStorage(backend)
    out = {}
    for s in optuna.get_all_study_summaries(storage, include_best_trial=False):
        trials = storage.get_all_trials(s._study_id, deepcopy=False)
        out[s.study_name] = Counter(t.state.name for t in trials)
    return out


@dataclass
class RepairReport:
    path: Path
    intact: bool = True
    kept: int = 0  # records in the repaired journal
    dropped: list[int] = field(default_factory=list)  # damaged line numbers
    problems: dict[int, str] = field(default_factory=dict)  # damaged line number -> what is wrong with it
    salvaged: int = 0  # whole records recovered from damaged lines
    prefix_only: bool = False  # kept only the records before the first damaged line (``keep_prefix``)
    prefix_dropped: int = 0  # intact records dropped by that fallback
    reason: str = ""  # why the fallback
    backup: Path | None = None
    studies: dict[str, Counter] = field(default_factory=dict)


def _plan(lines: list[_Line], report: RepairReport, *, keep_prefix: bool) -> list[bytes]:
    """The lines of the repaired journal: every intact record, unless dropping a damaged line could
    shift the ids of later studies or trials; then (``keep_prefix`` only) the intact prefix before
    the first damage.

    Raises:
        ValueError: only the prefix could be kept and ``keep_prefix`` is false.
    """
    keep: list[bytes] = []
    first_bad = next(i for i, ln in enumerate(lines) if ln.problem)
    for i, ln in enumerate(lines):
        if ln.record is not None:
            keep.append(ln.raw)
            continue
        report.dropped.append(ln.number)
        report.problems[ln.number] = ln.problem
        if ln.salvaged is not None:
            keep.append(ln.salvaged)
            report.salvaged += 1
        m = _OP_CODE.match(ln.raw)
        later = any(x.record is not None or x.salvaged is not None for x in lines[i + 1:])
        if not ln.torn and later and (m is None or int(m.group(1)) in _ID_CREATING_OPS):
            report.reason = (f"line {ln.number} may have created a study or trial, so later records could point "
                             f"at the wrong trial without it")
    if not report.reason:
        try:
            report.studies = study_counts(_RecordsBackend([json.loads(r) for r in keep]))
        except Exception as e:  # any replay failure: fall back to what was certainly consistent
            report.reason = f"Optuna could not replay the repaired records ({type(e).__name__}: {e})"
    if report.reason:
        return _prefix(lines, first_bad, report, keep_prefix=keep_prefix)
    return keep


def _prefix(lines: list[_Line], first_bad: int, report: RepairReport, *, keep_prefix: bool) -> list[bytes]:
    keep = [ln.raw for ln in lines[:first_bad]]
    dropped = sum(ln.record is not None or ln.salvaged is not None for ln in lines[first_bad + 1:])
    if not keep_prefix and dropped:
        raise ValueError(f"{report.path}: {report.reason}; keeping only the {len(keep)} record(s) before line "
                         f"{lines[first_bad].number} would drop {dropped} intact record(s) after it, so nothing was "
                         f"changed. To do that all the same (the original is backed up; the dropped trials run again "
                         f"on resume), add --keep-prefix")
    report.prefix_only = True
    report.prefix_dropped = dropped
    report.salvaged = 0
    report.dropped = [ln.number for ln in lines[first_bad:] if ln.problem]
    report.problems = {ln.number: ln.problem for ln in lines[first_bad:] if ln.problem}
    report.studies = study_counts(_RecordsBackend([json.loads(r) for r in keep]))
    return keep


def _refuse_not_a_journal(p: Path, lines: list[_Line]) -> None:
    """Refuse (``ValueError``, nothing changed) a file none of whose lines is an Optuna journal record:
    a CSV, a text file, a run's pareto.json hold no study to repair, and dropping their lines would empty them."""
    if any(ln.record is not None or ln.salvaged is not None for ln in lines):
        return
    first = lines[0]
    raise ValueError(f"{p} is not an Optuna study journal: none of its {len(lines)} line(s) is a journal record "
                     f"(line 1: {first.problem}); nothing was changed. Give a search run folder or its "
                     f"study.journal (or the storage=<path>.journal file of a search)")


def _refuse_losing_records(p: Path, lines: list[_Line], repaired: bytes) -> None:
    """Refuse (``ValueError``, nothing changed) to replace ``p`` with fewer bytes than its intact records hold."""
    intact = sum(len(ln.raw) for ln in lines if ln.record is not None)
    if len(repaired) < intact:
        raise ValueError(f"the repair of {p} would keep {len(repaired)} bytes, fewer than its intact records hold "
                         f"({intact} bytes); nothing was changed")


def _backup_path(p: Path) -> Path:
    stem = f"{p.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}"
    b, n = p.with_name(stem), 1
    while b.exists():  # never overwrite an earlier backup
        b, n = p.with_name(f"{stem}-{n}"), n + 1
    return b


SPACE_MARGIN = 1 << 20  # free bytes a repair leaves beside the backup and the repaired copy


def _check_space(p: Path, repaired: int) -> None:
    """Refuse a repair the disk holding ``p`` has no room for: a backup as big as ``p`` and the repaired
    copy (``repaired`` bytes, written beside it before the rename), and ``SPACE_MARGIN``."""
    need, free = p.stat().st_size + repaired + SPACE_MARGIN, shutil.disk_usage(p.parent).free
    if free < need:
        raise ValueError(f"not enough free space to repair {p}: it needs {_mb(need)} (a backup, the repaired copy "
                         f"and a margin), {_mb(free)} free in {p.parent}; free some space and run it again "
                         f"(nothing was changed)")


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _write_or_undo(p: Path, what: str, write: Callable[[], Any], backup: Path) -> None:
    """``write()`` (``what`` it writes); when it fails (a full disk), remove ``backup`` (partial, or
    not needed: the journal is unchanged) and raise one line.

    Raises:
        ValueError: the write failed; the journal at ``p`` is as it was.
    """
    try:
        write()
    except OSError as e:
        backup.unlink(missing_ok=True)
        raise ValueError(f"cannot repair {p}: writing {what} failed ({e.strerror or e}); free some space and run "
                         f"it again (the journal is as it was)") from None


def repair_journal(path: str | Path, *, dry_run: bool = False, keep_prefix: bool = False) -> RepairReport:
    """Rewrite the journal at ``path`` without its damaged lines, keeping every intact record.

    Under the journal's lock (so no worker appends meanwhile): back the original up as
    ``<file>.damaged-<timestamp>``, write the repaired file atomically, and check that Optuna
    replays it.  ``dry_run``: report what would be done, write nothing.  An intact journal is
    left as it is.  A damaged line is one that is not a whole Optuna journal record: torn, not JSON,
    or JSON that Optuna does not replay (an unknown ``op_code``).

    Args:
        path: the journal file.
        dry_run: report only.
        keep_prefix: when a damaged line may have created a study or trial (dropping it alone could
            attach later records to the wrong trial), keep only the records before it; without it,
            such a repair is refused.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file holds no journal record (not a journal), only the records before the first
            damage could be kept and ``keep_prefix`` is false, Optuna cannot replay an undamaged journal,
            the disk has no room for the backup and the repaired copy (checked first), a write failed
            (what was written is removed; the journal is as it was), or the repaired journal does not
            replay (the original is put back).  In each case the file is as it was.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no journal file at {p}")
    report = RepairReport(p)
    lines = list(_lines(p.read_bytes()))
    if lines:  # before the lock, whose file would be made beside it
        _refuse_not_a_journal(p, lines)
    with JournalFileLock(p):
        lines = list(_lines(p.read_bytes()))
        if not any(ln.problem for ln in lines):
            report.kept = len(lines)
            report.studies = _replayed(p)
            return report
        report.intact = False
        keep = _plan(lines, report, keep_prefix=keep_prefix)
        report.kept = len(keep)
        repaired = b"".join(keep)
        if not keep_prefix:
            _refuse_losing_records(p, lines, repaired)
        if dry_run:
            return report
        _check_space(p, len(repaired))
        report.backup = _backup_path(p)
        _write_or_undo(p, f"the backup {report.backup.name}", lambda: shutil.copy2(p, report.backup), report.backup)
        _write_or_undo(p, "the repaired journal", lambda: atomic_write_bytes(p, repaired), report.backup)
        try:
            report.studies = study_counts(JournalFileBackend(str(p), lock_obj=JournalFileLock(p)))
        except Exception as e:
            atomic_write_bytes(p, report.backup.read_bytes())
            raise ValueError(f"the repaired journal {p} could not be replayed ({type(e).__name__}: {e}); "
                             f"the original is back in place") from None
    log.info("repaired %s: kept %d records, dropped lines %s", p, report.kept, report.dropped)
    return report


def _replayed(p: Path) -> dict[str, Counter]:
    """``study_counts`` of an undamaged journal; a ``ValueError`` (nothing changed) when Optuna cannot replay it."""
    try:
        return study_counts(JournalFileBackend(str(p), lock_obj=JournalFileLock(p)))
    except Exception as e:
        raise ValueError(f"{p}: every line is a journal record, but Optuna cannot replay them ({type(e).__name__}: "
                         f"{e}); nothing was changed. Restore the journal from a backup") from None
