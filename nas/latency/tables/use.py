"""Which latency table a command uses or writes, settled before the libraries that fit a predictor or
measure load: a table no predictor can use is refused (``check_target_table``, ``require_entries``),
and ``nas.profile``'s table and writer's lock are found (``default_table_out``, ``profile_writer``), so
a second writer is refused at once."""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nas.latency.tables.table import TABLES_DIR, LatencyTable, TableError, resolve_table_path
from nas.resources import user_tables_dir
from nas.target import Target

__all__ = ["check_target_table", "default_table_out", "profile_writer", "require_entries"]


def require_entries(table: LatencyTable, *, target: Target | None = None) -> LatencyTable:
    """``table``, refused when it holds no measured block (what a latency predictor is fitted on).

    Args:
        table: a loaded table.
        target: the target it is for, named in the command the error suggests.

    Returns:
        ``table``.

    Raises:
        TableError: its ``entries`` are empty; the message names the file and how to measure it.
    """
    if table.entries:
        return table
    conf = f" conf={target.name}" if target is not None else ""
    if target is not None and target.table and Path(target.table).parent != Path("."):  # the user's own path
        conf += f" conf.table={target.table}"
    raise TableError(f"{table.path or 'the latency table'}: holds no measured blocks ('entries' is empty), so no "
                     f"latency can be predicted from it; measure them on the device (python -m nas.profile{conf}), "
                     f"or give a table that holds them (conf.table=<file>)")


def default_table_out(target: Target, here: Callable[[], Mapping[str, Any]]) -> Path:
    """Where ``nas.profile`` writes the target's table: its ``table`` as ``resolve_table_path`` finds it;
    but for a target naming no device (any CPU) whose table found is a shipped one measured on another
    processor than this machine (``here()``, called only then), the user's tables folder, which is read
    before the shipped one: this machine's own table, never mixed with another processor's."""
    name = target.table or f"{target.name}.json"
    path = resolve_table_path(name, for_writing=True)
    if target.device.name is None and path.parent == TABLES_DIR and path.is_file():
        if LatencyTable.load(path).measured_elsewhere(here()):
            return user_tables_dir() / path.name
    return path


def profile_writer(out: Path) -> tuple[Path, str]:
    """What ``nas.profile``'s writer's lock guards for the table ``out`` on this host (one profile per
    table and machine: ``nas._io.exclusive``), and how its messages name that work."""
    host = socket.gethostname()
    return out.with_name(f"{out.name}@{host}"), f"profiling into {out} on {host}"


def check_target_table(target: Target) -> None:
    """Refuse the measured table ``target`` names when no predictor can use it (corrupt, an entry no
    measurement gives, no entries), reading only the file: so a command refuses it before the libraries
    that fit a predictor load.  A missing file is no error (the roofline estimate stands in).

    Raises:
        TableError: the file, what is wrong and the fix.
    """
    if target.table:
        path = resolve_table_path(target.table)
        if path.is_file():
            require_entries(LatencyTable.load(path), target=target)
