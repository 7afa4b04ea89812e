"""Per-measurement claims, so processes sharing one table never time the same block or network at once.

Several ``nas.profile`` runs may measure into one table file (processes, or machines over a shared
folder); the table merges what each saves (``LatencyTable.save``).  Before measuring an item a run
claims it: a file ``.locks/<table>.claims/<job id>`` beside the table, naming the claiming host and
process.  An item another run has claimed is put off to the end of the run; by then the other run has
usually saved it, and it is skipped, else this run waits for the claim to go.  A claim goes once its
measurement is saved.

A claim is stale, and taken over, when its process is gone (a claim made on this host) or its file is
older than ``stale_s`` (a claim made on another host, whose processes cannot be seen; the default, 10
minutes, is far above one measurement's time).  Claims are taken under a lock on the claims folder,
so two runs never take over one stale claim together.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Collection
from pathlib import Path

from nas._io import file_lock, lock_path, pid_alive

__all__ = ["STALE_S", "Claims"]

#: Seconds after which a claim made on another host is taken to be abandoned.
STALE_S = 600.0


class Claims:
    """The claims on the items of the table at ``table_path``.

    Args:
        table_path: the table file.
        stale_s: seconds after which another host's claim is abandoned.
    """

    def __init__(self, table_path: str | Path, *, stale_s: float = STALE_S) -> None:
        self.folder = lock_path(table_path, ".claims")
        self.folder.mkdir(exist_ok=True)
        self.stale_s = stale_s
        self.host = socket.gethostname()
        self.mine: set[str] = set()

    def take(self, name: str) -> bool:
        """Claim item ``name`` (a job id); False when another live process holds it."""
        if name in self.mine:
            return True
        f = self.folder / name
        with file_lock(self.folder / "claims", what=f"the claims in {self.folder}"):
            if f.exists() and not self._stale(f):
                return False
            f.write_text(json.dumps({"host": self.host, "pid": os.getpid(), "since": time.time()}))
        self.mine.add(name)
        return True

    def drop(self, name: str) -> None:
        """Let the claim on ``name`` go (nothing measured under it)."""
        if name in self.mine:
            self.mine.discard(name)
            (self.folder / name).unlink(missing_ok=True)

    def release(self, keep: Collection[str] = ()) -> None:
        """Drop every claim this object holds (their measurements are saved) but those in ``keep``."""
        for name in self.mine - set(keep):
            try:
                (self.folder / name).unlink()
            except FileNotFoundError:
                pass
        self.mine &= set(keep)

    def holder(self, name: str) -> str:
        """Who holds the claim on ``name``: ``process 123 on host``."""
        h = self._read(self.folder / name)
        return f"process {h.get('pid', '?')} on {h.get('host', '?')}"

    @staticmethod
    def _read(f: Path) -> dict:
        try:
            h = json.loads(f.read_text())
            return h if isinstance(h, dict) else {}
        except (OSError, ValueError):
            return {}

    def _stale(self, f: Path) -> bool:
        h = self._read(f)
        if h.get("host") == self.host and isinstance(h.get("pid"), int):
            return not pid_alive(h["pid"])
        try:
            return time.time() - f.stat().st_mtime > self.stale_s
        except FileNotFoundError:
            return True
