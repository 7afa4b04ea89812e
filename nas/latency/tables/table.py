"""Latency lookup tables: a versioned JSON schema with truthful metadata.

One table per (device, runtime, provider, precision, batch, threads).  A table file::

    {
      "schema": "hwnas.latency_table",
      "schema_version": 1,
      "metadata": {
        "source": "measured",                 # only the profiler writes tables; never by hand
        "target": "cpu",                      # the conf target it was measured for
        "device": {"name": ..., "kind": "cpu", "cpu_flags": [...], "gpu": ..., "driver": ..., "jetpack": ...},
        "runtime": {"name": "onnxruntime", "version": "1.31.1", "provider": "CPUExecutionProvider",
                    "timing": "eager",            # or "cuda_graph": GPU graph replays (target.cuda_graph)
                    "graph_fallbacks": {...}},    # blocks that could not be captured, timed eager: label -> why
        "precision": "fp32", "batch": 1, "threads": 1,
        "measurement": {"warmup": ..., "repeats": ..., "min_time_s": ..., "max_spread": ..., ...},
        "call_overhead_ms": ...,              # cost of one runtime call on an empty graph
        "created": ..., "updated": ..., "tool": {"name": "hwnas", "version": ...}, "host": {...},
        "reproducibility": {"entries": N, "within_5pct": ..., "within_10pct": ..., ...},  # re-timed at the end
        "spaces": ["tiny", ...],              # the search spaces it was measured (or its bundle written) for
        "refresh": {"now_over_table": ..., "networks": N, "measured_at": ..., ...},   # nas.profile refresh=N
        "recalibration": {"network_ms": {digest: ms, ...}, "measured_at": ..., ...}  # nas.profile recalibrate=true
      },
      "entries": [
        {"key": {"block": {...}, "in": [C, H, W]}, "label": "ir_k3_s1_m96_c32_re@32x28x28",
         "median_ms": ..., "p10_ms": ..., "p90_ms": ..., "n": ..., "remeasured": 0, "measured_at": ...},
        ...
      ],
      "networks": [                           # whole networks measured end to end (calibration)
        {"arch": {...Arch JSON...}, "digest": ..., "median_ms": ..., "p10_ms": ..., ...},
        ...
      ]
    }

Loading validates the schema and raises ``TableError`` (a ``ValueError``) for a corrupt file, a
wrong schema version or entries that do not parse.  ``check_target`` compares the metadata with
a target and raises ``TableMismatchError`` unless explicitly allowed.

Saving merges: under a lock on the file (``nas._io.file_lock``) it re-reads the table on disk
and keeps what other processes saved there since this object last read or wrote it, so several
``nas.profile`` runs (processes or machines sharing the folder) can measure into one table.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import os
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nas._io import atomic_write_json, file_lock
from nas.arch import Arch, BlockKey
from nas.latency.tables.provenance import timing_label
from nas.machine import device_mismatch
from nas.resources import tables_dir, user_tables_dir, writable_tables_dir
from nas.target import Target, require_target

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "TABLES_DIR",
    "Entry",
    "LatencyTable",
    "TableError",
    "TableMismatchError",
    "resolve_table_path",
]

log = logging.getLogger(__name__)

SCHEMA = "hwnas.latency_table"
SCHEMA_VERSION = 1
TABLES_DIR = tables_dir()
_REQUIRED_META = ("source", "device", "runtime", "precision", "batch", "threads", "measurement")
# metadata fields that must agree with the target for a table to be used for it
MATCH_FIELDS = ("runtime.name", "runtime.provider", "runtime.timing", "precision", "batch", "threads", "device.name")
# what a field reads as where the metadata lacks it (tables written before it was recorded)
_FIELD_DEFAULTS = {"runtime.timing": "eager"}


class TableError(ValueError):
    """A table file that cannot be used: corrupt, wrong schema, malformed entries."""


class TableMismatchError(TableError):
    """A valid table whose metadata does not match the requested target."""


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


@dataclass(frozen=True)
class Entry:
    """One measured block or network: latency statistics in milliseconds.

    The profiler measures in ``rounds`` (each a fresh session, rounds spread over the whole
    run); ``rounds_ms`` holds each round's median, ``median_ms`` is their median, ``p10_ms`` /
    ``p90_ms`` the mean of the rounds' p10 / p90, ``n`` all timed runs.
    """

    median_ms: float
    p10_ms: float
    p90_ms: float
    n: int
    remeasured: int = 0
    measured_at: str = ""
    rounds_ms: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not self.rounds_ms:
            object.__setattr__(self, "rounds_ms", (self.median_ms,))
        else:
            object.__setattr__(self, "rounds_ms", tuple(float(v) for v in self.rounds_ms))

    @property
    def rounds(self) -> int:
        return len(self.rounds_ms)

    def merged(self, new: Entry) -> Entry:
        """This entry plus another round."""
        k, j = self.rounds, new.rounds
        rounds = self.rounds_ms + new.rounds_ms
        return Entry(
            float(statistics.median(rounds)),
            (self.p10_ms * k + new.p10_ms * j) / (k + j),
            (self.p90_ms * k + new.p90_ms * j) / (k + j),
            self.n + new.n,
            self.remeasured + new.remeasured,
            new.measured_at,
            rounds,
        )

    def extends(self, old: Entry) -> bool:
        """Whether this entry is ``old`` plus more rounds (``old.merged(...)``...)."""
        return self.rounds > old.rounds and self.rounds_ms[:old.rounds] == old.rounds_ms

    def since(self, old: Entry) -> Entry:
        """The rounds this entry added to ``old`` (which it ``extends``), as one entry: the inverse
        of ``merged``, so ``old.merged(self.since(old))`` is this entry again."""
        k, j = self.rounds, old.rounds
        rounds = self.rounds_ms[j:]
        return Entry(
            float(statistics.median(rounds)),
            (self.p10_ms * k - old.p10_ms * j) / (k - j),
            (self.p90_ms * k - old.p90_ms * j) / (k - j),
            max(self.n - old.n, 0),
            max(self.remeasured - old.remeasured, 0),
            self.measured_at,
            rounds,
        )

    @property
    def spread(self) -> float:
        return (self.p90_ms - self.p10_ms) / self.median_ms if self.median_ms > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "median_ms": self.median_ms, "p10_ms": self.p10_ms, "p90_ms": self.p90_ms, "n": self.n,
            "remeasured": self.remeasured, "measured_at": self.measured_at, "rounds_ms": list(self.rounds_ms),
        }


def _check_measured(entry: Entry, where: str) -> None:
    """Refuse an entry whose figures no measurement gives (infinite, not a number, 0 or less): a
    ``TableError`` that starts with ``where`` and says how to get a sound table."""
    figures = {"median_ms": entry.median_ms, "p10_ms": entry.p10_ms, "p90_ms": entry.p90_ms,
               **{f"rounds_ms[{j}]": v for j, v in enumerate(entry.rounds_ms)}}
    for name, v in figures.items():
        if not math.isfinite(v) or (v <= 0 and not name.startswith(("p10", "p90"))):
            raise TableError(f"{where} has {name}={v}, which no measurement gives (a latency is a finite number of "
                             f"milliseconds above 0); restore the file as it was written, or move it away and "
                             f"measure the table again (python -m nas.profile)")


@dataclass
class LatencyTable:
    """Block key -> measured latency, with the metadata that says where it was measured."""

    metadata: dict[str, Any]
    entries: dict[BlockKey, Entry] = field(default_factory=dict)
    path: Path | None = None
    # whole networks measured end to end on the same runtime (the predictor's calibration set)
    networks: dict[Arch, Entry] = field(default_factory=dict)
    # block entries that other processes saved to the file and this object took in when saving
    others_added: int = field(default=0, init=False, compare=False)
    # what this object last read from or wrote to which file: the common base of a merge on save
    _synced: tuple[Path | None, dict, dict] = field(default=(None, {}, {}), init=False, repr=False, compare=False)

    # ------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, key: object) -> bool:
        return key in self.entries

    def __iter__(self) -> Iterator[BlockKey]:
        return iter(self.entries)

    def get(self, key: BlockKey) -> Entry | None:
        return self.entries.get(key)

    def missing(self, keys: Iterable[BlockKey], rounds: int = 1) -> list[BlockKey]:
        """The keys with fewer than ``rounds`` measured rounds (absent keys included)."""
        ents = self.entries
        return [k for k in keys if k not in ents or ents[k].rounds < rounds]

    @property
    def source(self) -> str:
        """Where the figures come from (``nas.latency.tables.provenance.SOURCES``): ``rehearsal`` for a table a
        device bundle's rehearsal measured on another machine, else the metadata's (``measured``)."""
        return "rehearsal" if self.metadata.get("rehearsal") else str(self.metadata.get("source", "unknown"))

    @property
    def timing_label(self) -> str:
        """``CUDA graph`` / ``eager (host-bound)`` for a GPU table (with the blocks that fell back to
        eager, if any), empty for a CPU one."""
        kind = str((self.metadata.get("device") or {}).get("kind", "cpu"))
        label = timing_label(_field(self.metadata, "runtime.timing"), kind)
        fell = (self.metadata.get("runtime") or {}).get("graph_fallbacks") or {}
        return f"{label}, {len(fell)} block(s) eager" if label and fell else label

    @property
    def spaces(self) -> list[str] | None:
        """The search spaces the table was measured for (``nas.profile`` and a bundle's import record
        them: ``add_spaces``), or None for a table that does not say."""
        return [str(n) for n in self.metadata["spaces"]] if self.metadata.get("spaces") else None

    def add_spaces(self, names: Iterable[str]) -> None:
        """Record that the table was measured for the search spaces ``names`` too (``spaces``)."""
        self.metadata["spaces"] = sorted({*(self.spaces or ()), *(str(n) for n in names)})

    @property
    def rehearsal_of(self) -> str:
        """``<target> (<runtime>, <precision>)``: what a rehearsal table stands in for, else empty."""
        r = self.metadata.get("rehearsal")
        return f"{r.get('target')} ({r.get('runtime')}, {r.get('precision')})" if r else ""

    @property
    def rehearsal_label(self) -> str:
        """``REHEARSAL of <target> (<runtime>, <precision>) on <machine> (<its runtime>)`` for a table
        measured by a bundle's rehearsal, else empty: the words every output carries for its figures."""
        rt, dev = self.metadata.get("runtime") or {}, (self.metadata.get("device") or {}).get("name", "?")
        runtime = " ".join(x for x in (rt.get("name"), rt.get("provider")) if x)
        return f"REHEARSAL of {self.rehearsal_of} on {dev} ({runtime})" if self.rehearsal_of else ""

    def describe(self) -> str:
        m = self.metadata
        rt, dev = m.get("runtime", {}), m.get("device", {}).get("name", "?")
        how = f", {self.timing_label}" if self.timing_label else ""
        head = f"REHEARSAL of {self.rehearsal_of}, measured on {dev}" if self.rehearsal_of else f"{m.get('source', '?')} on {dev}"
        return (
            f"{head} ({rt.get('name', '?')} {rt.get('version', '')} {rt.get('provider', '')}{how}, {m.get('precision')}, "
            f"batch {m.get('batch')}, {m.get('threads')} thread(s)), {len(self)} entries, "
            + (f"{len(self.networks)} calibration networks" if self.networks
               else "uncalibrated (no whole networks measured)")
        )

    # ------------------------------------------------------------------------------------
    def add(self, key: BlockKey, entry: Entry) -> None:
        self.entries[key] = entry

    def to_dict(self) -> dict[str, Any]:
        ents = []
        for k, e in self.entries.items():
            ents.append({"key": k.to_dict(), "label": str(k), **e.to_dict()})
        nets = [{"arch": a.to_dict(), "digest": a.digest(), **e.to_dict()} for a, e in self.networks.items()]
        return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "metadata": self.metadata, "entries": ents,
                "networks": nets}

    def save(self, path: str | Path | None = None, *, runtime: Any = None) -> Path:
        """Write the table atomically (a crash or Ctrl-C mid-write leaves the previous file intact),
        merged with the file: under a lock on it, what other processes saved there since this
        object last read or wrote it is taken in (here too), so concurrent runs lose nothing.
        ``runtime``: the runtime measuring into it, whose blocks that fell back from CUDA-graph to
        eager timing (``graph_fallbacks``) are recorded in the metadata.

        An existing file that is corrupt or holds another target's table is not overwritten: this
        table goes to ``<name>.<pid>.json`` beside it and ``TableError`` says so."""
        p = Path(path) if path is not None else self.path
        if p is None:
            raise ValueError("LatencyTable.save needs a path")
        fell = getattr(runtime, "graph_fallbacks", None)
        if fell:
            rt = self.metadata.setdefault("runtime", {})
            rt["graph_fallbacks"] = {**(rt.get("graph_fallbacks") or {}), **fell}
        with file_lock(p, what=f"latency table {p}"):
            if p.is_file():
                try:
                    self._merge_from(LatencyTable.load(p), p)
                except TableError as e:
                    aside = p.with_name(f"{p.stem}.{os.getpid()}{p.suffix}")
                    self.metadata["updated"] = now_iso()
                    atomic_write_json(aside, self.to_dict(), indent=None)
                    raise type(e)(f"{e}; not overwriting it: this table was saved to {aside} instead") from None
            self.metadata["updated"] = now_iso()
            atomic_write_json(p, self.to_dict(), indent=None)
        self.path = p
        self._synced = (p, dict(self.entries), dict(self.networks))
        return p

    def _merge_from(self, disk: LatencyTable, p: Path) -> None:
        """Take in ``disk`` (the file at ``p``): its entries, networks and newer metadata records.
        Updates this object's dicts in place (the profiler holds references to them)."""
        diffs = [f"{f}: file has {_field(disk.metadata, f)!r}, this table {_field(self.metadata, f)!r}"
                 for f in ("target", *MATCH_FIELDS) if _field(disk.metadata, f) != _field(self.metadata, f)]
        if diffs:
            raise TableMismatchError(f"{p} holds the latency table of another target ({'; '.join(diffs)})")
        synced_path, base_entries, base_nets = self._synced
        if synced_path is None or synced_path.resolve() != p.resolve():
            base_entries, base_nets = {}, {}
        before = len(self.entries)
        _merge_store(self.entries, disk.entries, base_entries)
        self.others_added += len(self.entries) - before
        _merge_store(self.networks, disk.networks, base_nets)
        mine, theirs = self.metadata, disk.metadata
        for k, v in theirs.items():
            if k not in mine or (mine[k] is None and v is not None):
                mine[k] = v
        if theirs.get("created") and mine.get("created"):
            mine["created"] = min(str(theirs["created"]), str(mine["created"]))
        for k in ("refresh", "recalibration", "reproducibility"):  # the latest re-measurement of each kind
            a, b = mine.get(k), theirs.get(k)
            if isinstance(a, dict) and isinstance(b, dict) and str(b.get("measured_at", "")) > str(a.get("measured_at", "")):
                mine[k] = b

    @classmethod
    def load(cls, path: str | Path) -> LatencyTable:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"latency table not found: {p}")
        try:
            data = json.loads(p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise TableError(f"{p}: corrupt latency table (not valid JSON: {e})") from None
        except RecursionError:  # brackets nested deeper than Python's JSON reader goes
            raise TableError(f"{p}: corrupt latency table (not valid JSON: nested too deep to read)") from None
        table = cls.from_dict(data, source=str(p), path=p)
        table._synced = (p, dict(table.entries), dict(table.networks))
        return table

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<dict>", path: Path | None = None) -> LatencyTable:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise TableError(f"{source}: not a hwnas latency table (missing \"schema\": \"{SCHEMA}\")")
        ver = data.get("schema_version")
        if ver != SCHEMA_VERSION:
            raise TableError(
                f"{source}: latency table schema version {ver!r} is not supported (this hwnas reads "
                f"version {SCHEMA_VERSION}); re-measure it with `python -m nas.profile`"
            )
        meta = data.get("metadata")
        if not isinstance(meta, dict):
            raise TableError(f"{source}: corrupt latency table: 'metadata' is missing or not a mapping")
        missing = [k for k in _REQUIRED_META if k not in meta]
        if missing:
            raise TableError(f"{source}: corrupt latency table: metadata lacks {missing}")
        ents = data.get("entries")
        if not isinstance(ents, list):
            raise TableError(f"{source}: corrupt latency table: 'entries' is missing or not a list")
        table = cls(metadata=meta, path=path)
        for i, e in enumerate(ents):
            try:
                key = BlockKey.from_dict(e["key"])
                entry = Entry(
                    median_ms=float(e["median_ms"]), p10_ms=float(e["p10_ms"]), p90_ms=float(e["p90_ms"]),
                    n=int(e["n"]), remeasured=int(e.get("remeasured", 0)), measured_at=str(e.get("measured_at", "")),
                    rounds_ms=tuple(float(v) for v in e.get("rounds_ms", ())),
                )
            except (KeyError, TypeError, ValueError) as err:
                raise TableError(f"{source}: corrupt latency table: entry {i} is malformed ({err})") from None
            _check_measured(entry, f"{source}: corrupt latency table: entry {i} ({e.get('label') or key})")
            table.entries[key] = entry
        nets = data.get("networks", [])
        if not isinstance(nets, list):
            raise TableError(f"{source}: corrupt latency table: 'networks' is not a list")
        for i, e in enumerate(nets):
            try:
                arch = Arch.from_dict(e["arch"])
                entry = Entry(float(e["median_ms"]), float(e["p10_ms"]), float(e["p90_ms"]), int(e["n"]),
                              int(e.get("remeasured", 0)), str(e.get("measured_at", "")),
                              tuple(float(v) for v in e.get("rounds_ms", ())))
            except (KeyError, TypeError, ValueError) as err:
                raise TableError(f"{source}: corrupt latency table: network {i} is malformed ({err})") from None
            _check_measured(entry, f"{source}: corrupt latency table: network {i} ({arch.name or e.get('digest')})")
            table.networks[arch] = entry
        return table

    # ------------------------------------------------------------------------------------
    def measured_elsewhere(self, here: Mapping[str, Any]) -> str | None:
        """Why the machine ``here`` describes is not the processor the table was measured on, or None.

        Args:
            here: the machine's identity (``nas.latency.runtimes.device.device_identity(kind)`` of the table's
                device kind).

        Returns:
            None when name, ISA flags and CPU family/model are all the same; else the difference, in words.
        """
        dev = self.metadata.get("device") or {}
        dev = {**dev, "name": str(dev.get("name", "?"))}
        return device_mismatch(dev, dict(here), exact=True)

    def check_target(self, target: Target, *, allow_mismatch: bool = False) -> list[str]:
        """Compare metadata with a ``Target``; raise ``TableMismatchError`` on a difference.

        With ``allow_mismatch=True`` the differences are logged and returned instead.
        """
        target = require_target(target)
        want = {
            "runtime.name": target.runtime,
            "runtime.provider": target.provider,
            "runtime.timing": target.timing,
            "precision": target.precision,
            "batch": target.batch,
            "threads": target.threads,
            "device.name": target.device.name,
        }
        diffs = []
        for f in MATCH_FIELDS:
            got = _field(self.metadata, f)
            if f == "device.name" and target.device.kind != "cpu" and want[f] is not None:
                # a board or GPU by the words of its name
                if not device_mismatch({"name": want[f]}, {"kind": target.device.kind, "name": got}):
                    continue
            if want[f] is not None and got != want[f]:
                diffs.append(f"{f}: table has {got!r}, target {target.name!r} wants {want[f]!r}")
        if diffs and not allow_mismatch:
            raise TableMismatchError(
                f"{self.path or 'latency table'} does not match target {target.name!r}: "
                + "; ".join(diffs)
                + ". Measure a table for this target with `python -m nas.profile conf=<target>`, "
                "or pass allow_mismatch=true to use it anyway (predictions will be marked mismatched)."
            )
        for d in diffs:
            log.warning("latency table mismatch (allowed): %s", d)
        return diffs


def _field(meta: Mapping[str, Any], dotted: str) -> Any:
    got: Any = meta
    for part in dotted.split("."):
        got = got.get(part) if isinstance(got, Mapping) else None
    return _FIELD_DEFAULTS.get(dotted) if got is None else got


def _merge_store(mine: dict, disk: Mapping, base: Mapping) -> None:
    """Merge a file's entries (``disk``) into ``mine``, in place; ``base`` is what both started
    from (this object's last read or write of the file).  No key of either side is dropped."""
    for key, theirs in disk.items():
        ours = mine.get(key)
        mine[key] = theirs if ours is None else _combine(ours, theirs, base.get(key))


def _combine(ours: Entry, theirs: Entry, base: Entry | None) -> Entry:
    """One entry measured here (``ours``) and in the file (``theirs``)."""
    if theirs == ours or ours == base:
        return theirs
    if theirs == base or ours.extends(theirs):  # only this side measured more
        return ours
    if theirs.extends(ours):
        return theirs
    if base is not None and ours.extends(base) and theirs.extends(base):  # both added rounds to the base
        return theirs.merged(ours.since(base))
    if base is None:  # measured independently here and there: all the rounds of both
        return theirs.merged(ours)
    return max(ours, theirs, key=lambda e: (e.rounds, e.measured_at))  # replaced: the fuller, else the newer


class Throttle:
    """Calls ``fn`` at most every ``seconds`` (and always on ``flush``)."""

    def __init__(self, fn, seconds: float = 2.0) -> None:
        self.fn, self.seconds, self._last, self._dirty = fn, seconds, 0.0, False

    def __call__(self) -> None:
        self._dirty = True
        if time.monotonic() - self._last >= self.seconds:
            self.flush()

    def flush(self) -> None:
        if self._dirty:
            self.fn()
            self._last, self._dirty = time.monotonic(), False


def merge_into(store: dict) -> Callable[[Any, Entry], None]:
    """A ``record(item, entry)`` that adds each measured round to ``store`` (a table's ``entries`` or
    ``networks``): the item's entry merged with the new one (``Entry.merged``), else the new one."""

    def record(x: Any, entry: Entry) -> None:
        old = store.get(x)
        store[x] = entry if old is None else old.merged(entry)

    return record


def resolve_table_path(name: str | Path, *, for_writing: bool = False) -> Path:
    """A bare file name is looked up in the user's tables (``$HWNAS_HOME/latency_tables``), then in
    the shipped ones; anything else is a path.  ``for_writing``: where a new table of that name goes
    when none exists yet (``nas.resources.writable_tables_dir``)."""
    p = Path(name)
    if p.parent != Path(".") or p.exists():
        return p
    for d in (user_tables_dir(), TABLES_DIR):
        if (d / p.name).is_file():
            return d / p.name
    return (writable_tables_dir(p.name) if for_writing else TABLES_DIR) / p.name
