"""Measure every unique block of a space on the target runtime and write a latency table.

Each block is built as a standalone graph (``nas.build.build_layer``) at its exact input shape
and timed: warm-up, then repeated timed runs (at least ``repeats`` and ``min_time_s``), median
with p10/p90.  An entry whose spread ((p90 - p10) / median) exceeds ``max_spread`` is measured
again, up to ``remeasure`` times, keeping the steadiest round.  Entries are written to the table
file as they are measured (atomically, at most every ``save_every_s`` seconds and on exit), so a
re-run measures only what is missing and Ctrl-C loses nothing already measured.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nas import __version__
from nas.arch import BlockKey
from nas.build import build_layer
from nas.latency.runtimes import Runtime, device_identity, measure, summarize_times
from nas.latency.table import Entry, LatencyTable, Throttle, now_iso

__all__ = ["ProfileReport", "ProfileSettings", "measure_key", "new_metadata", "profile_blocks"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProfileSettings:
    warmup: int = 10
    repeats: int = 50
    min_time_s: float = 0.1
    max_spread: float = 0.2
    remeasure: int = 2
    save_every_s: float = 2.0

    def __post_init__(self) -> None:
        for name in ("warmup", "repeats", "remeasure"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < (1 if name == "repeats" else 0):
                raise ValueError(f"profile.{name} must be a non-negative integer (repeats >= 1), got {v!r}")
        if self.max_spread <= 0:
            raise ValueError(f"profile.max_spread must be > 0, got {self.max_spread}")


@dataclass
class ProfileReport:
    requested: int
    already: int
    measured: int
    remeasured: int
    seconds: float
    interrupted: bool = False

    @property
    def entries_per_minute(self) -> float:
        return 60.0 * self.measured / self.seconds if self.seconds > 0 else 0.0


def new_metadata(target: dict[str, Any], runtime: Runtime, settings: ProfileSettings) -> dict[str, Any]:
    import torch

    kind = (target.get("device") or {}).get("kind", "cpu")
    return {
        "source": "measured",
        "target": target.get("name"),
        "device": device_identity(kind),
        "runtime": runtime.info(),
        "precision": runtime.precision,
        "batch": runtime.batch,
        "threads": runtime.threads,
        "measurement": {**asdict(settings), "statistic": "median", "timer": "perf_counter_ns", "unit": "ms"},
        "call_overhead_ms": None,
        "created": now_iso(),
        "updated": now_iso(),
        "tool": {"name": "hwnas", "version": __version__, "torch": torch.__version__, "onnx_opset": 17},
    }


def measure_key(key: BlockKey, runtime: Runtime, settings: ProfileSettings) -> Entry:
    """Build, prepare and time one block; re-measure while its spread is too high."""
    run = runtime.prepare(build_layer(key), key.in_shape)
    return _measure_runner(run, settings)


def _measure_runner(run: Callable[[], Any], settings: ProfileSettings) -> Entry:
    best: dict[str, float] | None = None
    rounds = 0
    for rounds in range(settings.remeasure + 1):  # noqa: B007 - used after the loop
        stats = summarize_times(
            measure(run, warmup=settings.warmup, repeats=settings.repeats, min_time_s=settings.min_time_s)
        )
        spread = (stats["p90_ms"] - stats["p10_ms"]) / stats["median_ms"]
        if best is None or spread < (best["p90_ms"] - best["p10_ms"]) / best["median_ms"]:
            best = stats
        if spread <= settings.max_spread:
            break
    assert best is not None
    return Entry(best["median_ms"], best["p10_ms"], best["p90_ms"], int(best["n"]), rounds, now_iso())


def measure_overhead(runtime: Runtime, settings: ProfileSettings) -> float:
    """The fixed cost of one runtime call (an almost empty graph), in ms."""
    return _measure_runner(runtime.overhead_runner(), settings).median_ms


def profile_blocks(
    keys: Iterable[BlockKey],
    runtime: Runtime,
    table: LatencyTable,
    *,
    settings: ProfileSettings | None = None,
    path: str | Path | None = None,
    progress: bool = True,
    limit: int | None = None,
) -> ProfileReport:
    """Measure the keys the table lacks, saving as it goes.  Ctrl-C saves, then re-raises."""
    settings = settings or ProfileSettings()
    keys = list(dict.fromkeys(keys))
    todo = table.missing(keys)
    if limit is not None:
        todo = todo[:limit]
    report = ProfileReport(len(keys), len(keys) - len(table.missing(keys)), 0, 0, 0.0)
    save = Throttle(lambda: table.save(path), settings.save_every_s)
    if table.metadata.get("call_overhead_ms") is None:
        table.metadata["call_overhead_ms"] = measure_overhead(runtime, settings)
        save()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc="profiling blocks", unit="block", dynamic_ncols=True)
    t0 = time.monotonic()
    try:
        for key in todo:
            if bar is not None:
                bar.set_postfix_str(str(key)[:48], refresh=False)
            entry = measure_key(key, runtime, settings)
            table.add(key, entry)
            report.measured += 1
            report.remeasured += entry.remeasured > 0
            save()
            if bar is not None:
                bar.update(1)
    except KeyboardInterrupt:
        report.interrupted = True
        log.warning("interrupted: %d entries measured this run are saved; re-run to continue", report.measured)
        raise
    finally:
        report.seconds = time.monotonic() - t0
        save.flush()
        if bar is not None:
            bar.close()
    return report
