"""A search run dir belongs to one study.

``run.json`` in the run dir names the study whose results the folder holds (its name, where it is
stored, the command that started it).  A later start in the same folder must be the same study:
re-using ``out=`` with another space, dataset, target or storage would otherwise start a second
study beside the first and overwrite its ``pareto.json``, ``trials.csv`` and ``pareto.png``.  Such a
start is refused before anything is written, with the command that starts it in a new folder.

Run dirs made before ``run.json`` existed are recognised by the studies in their ``study.journal``.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nas._io import atomic_write_json, file_lock
from nas.search.journal import study_names

__all__ = ["RUN_FILE", "RunDirTaken", "RunOwner", "check_run_dir", "claim_run_dir", "new_run_command",
           "read_owner"]

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
