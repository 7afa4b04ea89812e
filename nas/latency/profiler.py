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
from nas.arch import Arch, BlockKey
from nas.build import build, build_layer
from nas.latency.runtimes import Runtime, device_identity, measure, summarize_times
from nas.latency.table import Entry, LatencyTable, Throttle, now_iso

__all__ = [
    "ProfileReport", "ProfileSettings", "calibration_archs", "measure_arch", "measure_key", "new_metadata",
    "profile_blocks", "profile_networks", "pruned_archs",
]

# seeds of the calibration networks; validation draws from other seeds and skips these digests
CALIBRATION_SEED = 20_261_122

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProfileSettings:
    warmup: int = 10
    repeats: int = 50
    min_time_s: float = 0.1
    max_spread: float = 0.2
    remeasure: int = 2
    rounds: int = 3
    save_every_s: float = 2.0

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
        "measurement": {**asdict(settings), "statistic": "median", "timer": "perf_counter_ns", "unit": "ms",
                        "io": "inputs and outputs bound once (onnxruntime IOBinding)"},
        "call_overhead_ms": None,
        "created": now_iso(),
        "updated": now_iso(),
        "tool": {"name": "hwnas", "version": __version__, "torch": torch.__version__, "onnx_opset": 17},
    }


def measure_key(key: BlockKey, runtime: Runtime, settings: ProfileSettings) -> Entry:
    """Build, prepare and time one block; re-measure while its spread is too high."""
    run = runtime.prepare(build_layer(key), key.in_shape, key=key)
    return _measure_runner(run, settings)


def measure_arch(arch: Arch, runtime: Runtime, settings: ProfileSettings | None = None) -> Entry:
    """Measure a whole network end to end (same runtime and settings as the blocks)."""
    import torch

    settings = settings or ProfileSettings()
    torch.manual_seed(0)
    run = runtime.prepare(build(arch), (arch.in_chans, arch.resolution, arch.resolution), key=arch)
    return _measure_runner(run, settings)


def calibration_archs(space, n: int, *, resolution: int | None = None) -> list[Arch]:
    """The ``n`` seeded networks of ``space`` measured for the predictor's calibration."""
    import numpy as np

    rng = np.random.default_rng([CALIBRATION_SEED, sum(map(ord, space.name))])
    archs = [space.random(rng) for _ in range(n)]
    return [a.with_resolution(resolution) for a in archs] if resolution else archs


def pruned_archs(space, n: int, *, resolution: int | None = None, min_keep: float = 0.25,
                 seed: int = CALIBRATION_SEED) -> list[Arch]:
    """``n`` seeded networks of ``space`` narrowed the way ``nas.train``'s structured pruning
    narrows them, measured beside ``calibration_archs`` (blocks and whole networks).

    Pruning leaves the space: it cuts expansion channels below the smallest expansion, residual
    chains below the stage widths, squeeze-excite below its ratio of the original.  Without
    such blocks in the table the learned model extrapolates to them and the calibration never
    sees a network of that kind (it under-predicted pruned Fashion-MNIST networks by 10-19%).
    Each network is a space sample (other seeds than the calibration's) with every prunable
    channel unit (``nas.compress.prune.channel_units``) cut with probability 3/4 to a random
    number of ``channel_multiple`` groups, keeping at least ``min_keep`` of it, as the pruner does.
    Every other network is cut deep, as pruning a fast network to 0.7x of its latency cuts it:
    every unit to at most 60% of its channels.  The structural steps of ``prune.criterion=loss``
    follow: each squeeze-excite is dropped with probability 1/3, each residual block with 1/4.
    ``nas.validate`` draws held-out ones with another ``seed``.
    """
    import numpy as np

    from nas.compress.prune import channel_units, drop_layers, droppable, resize_arch

    m = space.channel_multiple
    rng = np.random.default_rng([seed, sum(map(ord, space.name)), 1])
    out: list[Arch] = []
    for j in range(n):
        a = space.random(rng)
        if resolution:
            a = a.with_resolution(resolution)
        deep = j % 2 == 1
        units = [u for u in channel_units(a) if u.prunable]
        sizes = {}
        for u in units:
            floor = max(m, -(-int(np.ceil(min_keep * u.size)) // m) * m)
            top = max(floor, int(0.6 * u.size) // m * m) if deep else u.size - 1
            choices = list(range(floor, min(top, u.size - 1) + 1, m))
            if choices and (deep or rng.random() < 0.75):
                sizes[u.name] = int(rng.choice(choices))
        b = resize_arch(a, units, sizes, multiple=m, se_ratio=space.se_ratio)
        se_ok, blocks_ok = droppable(b)
        blocks = [i for i in blocks_ok if rng.random() < 0.25]
        se = [i for i in se_ok if rng.random() < 1 / 3 and i not in blocks]
        out.append(drop_layers(b, se=se, blocks=blocks))
    return out


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
    return Entry(best["median_ms"], best["p10_ms"], best["p90_ms"], int(best["n"]), rounds, now_iso(),
                 (best["median_ms"],))


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
    round_: int | None = None,
) -> ProfileReport:
    """Measure round ``round_`` (default: every round up to ``settings.rounds``) of the keys
    that lack it, saving as it goes.  Ctrl-C saves, then re-raises."""
    settings = settings or ProfileSettings()
    if table.metadata.get("call_overhead_ms") is None:
        table.metadata["call_overhead_ms"] = measure_overhead(runtime, settings)
    return _measure_rounds(keys, table.entries, lambda k: measure_key(k, runtime, settings), table,
                           settings=settings, path=path, progress=progress, limit=limit, round_=round_,
                           unit="block", label=lambda k: str(k)[:48])


def profile_networks(
    archs: Iterable[Arch],
    runtime: Runtime,
    table: LatencyTable,
    *,
    settings: ProfileSettings | None = None,
    path: str | Path | None = None,
    progress: bool = True,
    round_: int | None = None,
) -> ProfileReport:
    """Measure round ``round_`` (default: all rounds) of the networks that lack it (the
    table's calibration set), saving as it goes.  Ctrl-C saves, then re-raises."""
    settings = settings or ProfileSettings()
    return _measure_rounds(archs, table.networks, lambda a: measure_arch(a, runtime, settings), table,
                           settings=settings, path=path, progress=progress, round_=round_, unit="network")


def _measure_rounds(items, store: dict, measure_one: Callable[[Any], Entry], table: LatencyTable, *,
                    settings: ProfileSettings, path, progress: bool, round_: int | None, unit: str,
                    limit: int | None = None, label: Callable[[Any], str] | None = None) -> ProfileReport:
    """The measuring loop shared by blocks and networks: one round (or all), saved as it goes."""
    if round_ is None:
        report = None
        for r in range(1, settings.rounds + 1):
            rep = _measure_rounds(items, store, measure_one, table, settings=settings, path=path,
                                  progress=progress, round_=r, unit=unit, limit=limit, label=label)
            report = rep if report is None else report.combine(rep)
        assert report is not None
        return report
    items = list(dict.fromkeys(items))
    todo = [x for x in items if x not in store or store[x].rounds < round_]
    if limit is not None:
        todo = todo[:limit]
    report = ProfileReport(len(items), sum(x in store for x in items), 0, 0, 0.0)
    save = Throttle(lambda: table.save(path), settings.save_every_s)
    save()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc=f"round {round_}/{settings.rounds}: {unit}s", unit=unit,
                   dynamic_ncols=True)
    t0 = time.monotonic()
    try:
        for x in todo:
            if bar is not None and label is not None:
                bar.set_postfix_str(label(x), refresh=False)
            entry = measure_one(x)
            old = store.get(x)
            store[x] = entry if old is None else old.merged(entry)
            report.measured += 1
            report.remeasured += entry.remeasured > 0
            save()
            if bar is not None:
                bar.update(1)
    except KeyboardInterrupt:
        report.interrupted = True
        log.warning("interrupted: %d %s measurements of this run are saved; re-run to continue", report.measured, unit)
        raise
    finally:
        report.seconds = time.monotonic() - t0
        save.flush()
        if bar is not None:
            bar.close()
    return report
