"""The one measuring loop: every block, network and exported ONNX file is timed here.

``measure(run)`` times a zero-argument callable (warm-up, then at least ``repeats`` timed calls
and ``min_time_s``); ``summarize_times`` gives its median and p10/p90.  ``time_runner`` adds the
re-measuring of a noisy round (spread above ``max_spread``) and returns a table ``Entry``;
``measure_items`` is the loop over many blocks or networks, one round at a time, with a progress bar
and Ctrl-C handling.  What builds a block or a network (or loads exported bytes) and times it on a
runtime: ``nas.latency.runtimes.measure_model``.

``nas/latency/bundle/measure_bundle.py`` keeps its own copy of the timing loop: it runs on devices
without torch or this package.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from tqdm.auto import tqdm

from nas.latency.tables import Entry, now_iso

__all__ = [
    "Interrupted", "MeasureSettings", "ProfileReport", "ProfileSettings", "measure", "measure_items", "summarize_times",
    "time_runner",
]

log = logging.getLogger(__name__)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a measuring workflow; the message says what was kept and how to continue."""


@dataclass(frozen=True)
class ProfileSettings:
    """The measuring loop's settings (``nas.profile``'s ``profile`` group); the source of the timing
    defaults that ``nas.train.settings.ExportSettings`` shares."""

    warmup: int = 10  # untimed calls first
    repeats: int = 50  # at least this many timed calls ...
    min_time_s: float = 0.1  # ... and at least this long
    max_spread: float = 0.2  # a round whose (p90 - p10) / median is above this is re-measured
    remeasure: int = 2  # at most this many times
    rounds: int = 3  # interleaved passes, each in a fresh session; an entry is the median of its rounds
    save_every_s: float = 2.0  # the table is saved this often while measuring
    watch: bool = True  # nas.profile: keep out what the machine misled (nas.latency.profile.watch); false saves all

    def __post_init__(self) -> None:
        for name in ("warmup", "repeats", "remeasure", "rounds"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < (1 if name in ("repeats", "rounds") else 0):
                raise ValueError(f"profile.{name} must be a non-negative integer (repeats, rounds >= 1), got {v!r}")
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

    def combine(self, other: ProfileReport) -> ProfileReport:
        """Two rounds' reports as one (measured counts measurements, not distinct entries)."""
        return ProfileReport(self.requested, self.already, self.measured + other.measured,
                             self.remeasured + other.remeasured, self.seconds + other.seconds,
                             self.interrupted or other.interrupted)


def measure(run: Callable[[], Any], *, warmup: int = 10, repeats: int = 50, min_time_s: float = 0.05,
            max_repeats: int = 2000) -> np.ndarray:
    """Time ``run``: ``warmup`` calls, then at least ``repeats`` timed calls and ``min_time_s``.

    A runner with a ``timed(k)`` method (``nas.latency.runtimes.cuda_graph.GraphRunner``) times itself: ``k``
    replays at a time, each measured by CUDA events instead of the host's clock.

    Returns the per-call times in milliseconds.
    """
    for _ in range(warmup):
        run()
    timed = getattr(run, "timed", None)
    if timed is not None:
        return _measure_timed(timed, repeats=repeats, min_time_s=min_time_s, max_repeats=max_repeats)
    times = []
    t_end = time.perf_counter() + min_time_s
    while len(times) < repeats or (time.perf_counter() < t_end and len(times) < max_repeats):
        t0 = time.perf_counter_ns()
        run()
        times.append(time.perf_counter_ns() - t0)
    return np.asarray(times, dtype=np.float64) / 1e6


def _measure_timed(timed: Callable[[int], np.ndarray], *, repeats: int, min_time_s: float,
                   max_repeats: int) -> np.ndarray:
    """``measure`` for a self-timing runner: batches of replays until ``repeats`` and ``min_time_s``."""
    chunks: list[np.ndarray] = []
    n, t_end = 0, time.perf_counter() + min_time_s
    while n < repeats or (time.perf_counter() < t_end and n < max_repeats):
        k = max(1, min(50, (repeats - n) if n < repeats else max_repeats - n))
        chunks.append(np.asarray(timed(k), dtype=np.float64))
        n += k
    return np.concatenate(chunks)


def summarize_times(ms: np.ndarray) -> dict[str, float]:
    return {
        "median_ms": float(statistics.median(ms)),
        "p10_ms": float(np.percentile(ms, 10)),
        "p90_ms": float(np.percentile(ms, 90)),
        "n": int(len(ms)),
    }


def time_runner(run: Callable[[], Any], settings: ProfileSettings) -> Entry:
    """Time ``run``; re-measure (up to ``settings.remeasure`` times) while its spread
    ((p90 - p10) / median) exceeds ``settings.max_spread``, keeping the steadiest round."""
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
    return Entry(best["median_ms"], best["p10_ms"], best["p90_ms"], int(best["n"]), rounds, now_iso(),
                 (best["median_ms"],))


class MeasureSettings(Protocol):
    """How exported models are timed (``nas.train.settings.ExportSettings`` is one)."""

    rounds: int
    warmup: int
    repeats: int
    min_time_s: float


def measure_items(todo: Sequence[Any], measure_one: Callable[[Any], Entry], record: Callable[[Any, Entry], None],
                  *, progress: bool, desc: str, unit: str, save: Callable[[], None] | None = None,
                  label: Callable[[Any], str] | None = None, always_bar: bool = True) -> ProfileReport:
    """Measure each of ``todo`` with ``measure_one`` and hand it to ``record``, calling ``save``
    after each and once more at the end (also on Ctrl-C, which is re-raised)."""
    report = ProfileReport(len(todo), 0, 0, 0, 0.0)
    bar = None
    if progress and (todo or always_bar):
        bar = tqdm(total=len(todo), desc=desc, unit=unit, dynamic_ncols=True)
    t0 = time.monotonic()
    try:
        for x in todo:
            if bar is not None and label is not None:
                bar.set_postfix_str(label(x), refresh=False)
            entry = measure_one(x)
            record(x, entry)
            report.measured += 1
            report.remeasured += entry.remeasured > 0
            if save is not None:
                save()
            if bar is not None:
                bar.update(1)
    except KeyboardInterrupt:
        report.interrupted = True
        raise
    finally:
        report.seconds = time.monotonic() - t0
        if save is not None:
            save()
        if bar is not None:
            bar.close()
    return report

