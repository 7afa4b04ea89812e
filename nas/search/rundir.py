"""A search run dir belongs to one study.

``run.json`` in the run dir names the study whose results the folder holds (its name, where it is
stored, the command that started it).  A later start in the same folder must be the same study:
re-using ``out=`` with another space, dataset, target or storage would otherwise start a second
study beside the first and overwrite its ``pareto.json``, ``trials.csv`` and ``pareto.png``.  Such a
start is refused before anything is written, with the command that starts it in a new folder.

Run dirs made before ``run.json`` existed are recognised by the studies in their ``study.journal``.

Starting in a new (empty) folder is atomic: ``starting_in`` holds the folder's start lock (beside it,
in its parent's hidden ``.locks/``) while that start prepares it, so a second start in the same folder
waits until the first has claimed it (``run.json``) or given up; only a start that found the folder
empty, alone in it under that lock, removes what it wrote when it fails.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from nas._io import LOCK_DIR, atomic_write_json, file_lock, lock_path
from nas.search.journal import study_names

__all__ = ["RUN_FILE", "RunDirTaken", "RunOwner", "check_run_dir", "claim_run_dir",
           "new_run_command", "read_owner", "starting_in"]

RUN_FILE = "run.json"
SCHEMA = "hwnas.run"


class RunDirTaken(ValueError):
    """The run dir holds another search."""


@dataclass(frozen=True)
class RunOwner:
    """The study a run dir holds: its name, its storage (as the user sees it) and how it was started."""

    study: str
    storage: str
    command: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "study": self.study, "storage": self.storage, "command": self.command,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def storage_label(storage_desc: str, run_dir: Path) -> str:
    """The storage as recorded in run.json: the run dir's own journal as ``study.journal``."""
    p = Path(storage_desc)
    if "://" not in storage_desc and p.resolve() == (run_dir / "study.journal").resolve():
        return "study.journal"
    return storage_desc


def read_owner(run_dir: str | Path, study: str | None = None) -> RunOwner | None:
    """The study ``run_dir`` holds, from run.json (or, in an older run dir, its study.journal: ``study``
    if the journal holds it); None if none."""
    run_dir = Path(run_dir)
    p = run_dir / RUN_FILE
    if p.is_file():
        try:
            d = json.loads(p.read_text())
            return RunOwner(str(d["study"]), str(d["storage"]), d.get("command"))
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{p}: not a valid run record (expected JSON with 'study' and 'storage'); "
                             f"if the folder's study is intact, delete {p} and run again") from None
    journal = run_dir / "study.journal"
    if journal.is_file() and journal.stat().st_size:
        names = study_names(journal)
        if names:
            return RunOwner(study if study in names else ", ".join(names), "study.journal")
    return None


def new_run_command(command: Sequence[str] | None, run_dir: Path) -> str | None:
    """``command`` (the user's arguments) with ``out=`` set to the first free ``<run dir>-<n>``."""
    if command is None:
        return None
    n = 2
    while run_dir.with_name(f"{run_dir.name}-{n}").exists():
        n += 1
    args = [a for a in command if not a.startswith("out=")] + [f"out={run_dir.with_name(f'{run_dir.name}-{n}')}"]
    return "python -m nas.search " + " ".join(shlex.quote(a) for a in args)


def check_run_dir(run_dir: str | Path, *, study: str, storage_desc: str,
                  command: Sequence[str] | None = None) -> RunOwner | None:
    """Refuse (``RunDirTaken``) a start in a run dir that holds another study; the owner, if any."""
    run_dir = Path(run_dir)
    owner = read_owner(run_dir, study)
    if owner is None:
        return None
    storage = storage_label(storage_desc, run_dir)
    if owner.study == study and owner.storage == storage:
        return owner
    what = f"{study!r}" + ("" if owner.storage == storage else f" in {storage}")
    new = new_run_command(command, run_dir)
    start = f"start it in a new folder: {new}" if new else "give it a new run dir (out=<new folder>)"
    cont = f"; continue the search that is there with its own command: {owner.command}" if owner.command else ""
    raise RunDirTaken(f"out={run_dir} holds the search {owner.study!r} (in {owner.storage}) and this command is "
                      f"another one ({what}); a run dir holds one search, so nothing was changed. To run this one, "
                      f"{start}{cont}")


def claim_run_dir(run_dir: str | Path, *, study: str, storage_desc: str,
                  command: Sequence[str] | None = None) -> None:
    """Record in run.json that ``run_dir`` holds ``study`` (once; a concurrent claim for another
    study is refused under the folder's lock)."""
    run_dir = Path(run_dir)
    p = run_dir / RUN_FILE
    with file_lock(p):
        check_run_dir(run_dir, study=study, storage_desc=storage_desc, command=command)
        if not p.is_file():
            cmd = "python -m nas.search " + " ".join(shlex.quote(a) for a in command) if command is not None else None
            atomic_write_json(p, RunOwner(study, storage_label(storage_desc, run_dir), cmd).to_dict())


def _start_lock(run_dir: Path) -> tuple[Path, bool]:
    """The file that locks starts in ``run_dir``, and whether it lies inside it: beside the folder (its
    parent's ``.locks/``), so a failed start removes the folder whole; inside it where the parent is
    not writable."""
    try:
        return lock_path(run_dir, ".start.lock"), False
    except OSError:
        return lock_path(run_dir / RUN_FILE, ".start.lock"), True


def _is_new(run_dir: Path, inside: bool) -> bool:
    return not run_dir.is_dir() or not any(p for p in run_dir.iterdir() if not (inside and p.name == LOCK_DIR))


def _remove_new(run_dir: Path, inside: bool) -> None:
    """What a failed start wrote in a folder it found new: the folder (or, with the lock inside it, all but the lock)."""
    if not inside:
        shutil.rmtree(run_dir, ignore_errors=True)
        return
    for p in run_dir.iterdir():
        if p.name == LOCK_DIR:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


@contextmanager
def starting_in(run_dir: str | Path, *, say: Callable[[str], None] | None = None) -> Iterator[bool]:
    """Start a search in ``run_dir``: yield whether the folder is new (missing or empty).

    A new folder's start holds the folder's start lock until the block ends, so no other start
    prepares it meanwhile; a start that finds the lock held waits (saying so once through ``say``)
    and then looks again: the folder is claimed (another search's ``run.json``), or new again (that
    start failed and removed what it wrote).  When the block raises in a new folder, what this start
    wrote there is removed; a folder that was not new is never touched.

    Args:
        run_dir: the run dir.
        say: where the waiting message goes (default: standard error).

    Yields:
        Whether the folder is new to this start.
    """
    run_dir = Path(run_dir)
    lock_file, inside = _start_lock(run_dir)
    lock = FileLock(str(lock_file), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        (say or (lambda m: print(m, file=sys.stderr, flush=True)))(
            f"waiting: another search is starting in {run_dir}; this one goes on when that one has claimed the "
            f"folder or given up")
        lock = FileLock(str(lock_file), timeout=-1)
        lock.acquire()
    try:
        new = _is_new(run_dir, inside)
        if not new:
            lock.release()  # a claimed folder is never removed: starts in it need not wait for each other
        try:
            yield new
        except BaseException:
            if new:
                _remove_new(run_dir, inside)
            raise
    finally:
        if lock.is_locked:
            lock.release()
