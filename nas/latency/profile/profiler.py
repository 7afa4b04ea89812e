"""Measure every unique block of a space on the target runtime and write a latency table.

Each block is built as a standalone graph (``nas.builder.build_layer``) at its exact input shape
and timed (``nas.latency.runtimes.loop``): warm-up, then repeated timed runs (at least ``repeats`` and
``min_time_s``), median with p10/p90.  An entry whose spread ((p90 - p10) / median) exceeds
``max_spread`` is measured again, up to ``remeasure`` times, keeping the steadiest round.
Entries are written to the table file as they are measured (atomically, at most every
``save_every_s`` seconds and on exit), so a re-run measures only what is missing and Ctrl-C
loses nothing already measured.

``measure_networks`` measures whole networks (the calibration set here, held-out networks in
``nas.latency.profile.validate``); ``calibration_archs`` / ``pruned_archs`` are the seeded networks of the
calibration and ``block_frequency`` ranks the blocks a search meets most.  ``profile_target``
(``nas.latency.profile.workflow``) is the whole ``nas.profile`` workflow, which plans every round of
every block and network as one list of ``Job``s (``plan_jobs``: each with its expected seconds) and
runs it with ``run_jobs`` under one progress bar and an optional time budget; those live in
``nas.latency.profile.jobs`` and are importable from here too.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nas._version import __version__
from nas.arch import Arch, BlockKey
from nas.cost import arch_cost
from nas.latency.profile.jobs import job_id as job_id  # importable from here too, like the names above
from nas.latency.profile.options import VALIDATION_SEED
from nas.latency.runtimes import (
    ProfileReport,
    ProfileSettings,
    Runtime,
    device_identity,
    measure_arch,
    measure_items,
    measure_key,
    measure_overhead,
)
from nas.latency.tables import Entry, LatencyTable, Throttle, merge_into, now_iso
from nas.narrow import channel_units, drop_layers, droppable, resize_arch
from nas.space import space_names as space_names  # importable from here too
from nas.target import Target, require_target

__all__ = ["CALIBRATION_SEED", "anchor_archs", "block_frequency", "calibration_archs", "calibration_order", "measure_networks", "new_metadata", "profile_blocks", "profile_networks", "pruned_archs", "round_order", "spread_order"]

# seeds of the calibration networks; validation draws from other seeds and skips these digests
CALIBRATION_SEED = 20_261_122

log = logging.getLogger(__name__)


def new_metadata(target: Target, runtime: Runtime, settings: ProfileSettings) -> dict[str, Any]:
    target = require_target(target)
    name, kind = target.name, target.device.kind
    info = runtime.info()
    return {
        "source": "measured",
        "target": name,
        "device": device_identity(kind),
        "runtime": info,
        "precision": runtime.precision,
        "batch": runtime.batch,
        "threads": runtime.threads,
        "measurement": {**asdict(settings), "statistic": "median", "timer": runtime.timer, "unit": "ms",
                        "io": info.get("io") or "inputs and outputs bound once (onnxruntime IOBinding)"},
        "call_overhead_ms": None,
        "created": now_iso(),
        "updated": now_iso(),
        "tool": {"name": "hwnas", "version": __version__, "torch": torch.__version__, "onnx_opset": 17},
    }


def calibration_archs(space, n: int, *, resolution: int | None = None) -> list[Arch]:
    """The ``n`` seeded networks of ``space`` measured for the predictor's calibration."""
    rng = np.random.default_rng([CALIBRATION_SEED, sum(map(ord, space.name))])
    archs = [space.random(rng) for _ in range(n)]
    return [a.with_resolution(resolution) for a in archs] if resolution else archs


def calibration_order(spaces, n: int, resolution: int | None,
                      seconds: Callable[[Arch], float | None] | None = None, pruned: Sequence[Arch] = ()) -> list[Arch]:
    """The calibration networks of every space, each space's in ``spread_order``, taken in turn from
    the space that has had the least of the measuring time so far, a network counting at least the
    median network's time (``seconds``: a network's expected seconds, or None to leave it out;
    without it, one network each in turn).  A budget that stops early has calibrated on every
    space, from its smallest networks to its largest; a space of large networks (``effnetlike``: 3x
    the seconds of the others' a network) does not take the budget from the rest, and a space of
    small ones (``tiny``) gets no more turns than the others (in the offline simulation of four
    shipped tables, ``python -m benchmarks onboard``, extra turns for the cheap spaces cost
    1.3-2.9 points within ±10% at 0.5-1 minute).  The whole set is the same at any budget.

    ``pruned`` (``pruned_archs`` of the spaces) join their space's networks (by ``Arch.name``) before
    the spread, so a short budget reaches the small end that a space's pruned networks span:
    unpruned ``effnetlike`` networks start at 9 ms on an AMD EPYC Zen 5 core, its pruned ones at
    1.6 ms.  Measured after every calibration network instead, they were beyond a 2-minute profile,
    which then extrapolated small squeeze-excite swish networks (TinyNet-C, 2.3 ms) 9-12% low in
    measured 2-minute onboardings (CHANGELOG.md)."""
    extra: dict[str, list[Arch]] = {}
    for a in pruned:
        extra.setdefault(a.name, []).append(a)
    per = [spread_order(calibration_archs(sp, n, resolution=resolution) + extra.pop(sp.name, [])) for sp in spaces]
    if extra:
        raise ValueError(f"calibration_order: pruned networks of spaces not given: {sorted(extra)}")
    timed = [[(a, 1.0 if seconds is None else seconds(a)) for a in p] for p in per]
    timed = [[(a, c) for a, c in p if c is not None] for p in timed]  # None: left out (a replayed table lacks it)
    per, cost = [[a for a, _ in p] for p in timed], [[c for _, c in p] for p in timed]
    floor = float(np.median([c for p in cost for c in p])) if any(cost) else 0.0
    out, spent, at = [], [0.0] * len(per), [0] * len(per)
    while live := [i for i in range(len(per)) if at[i] < len(per[i])]:
        i = min(live, key=lambda i: (spent[i], i))
        out.append(per[i][at[i]])
        spent[i] += max(cost[i][at[i]], floor)
        at[i] += 1
    return out


def spread_order(archs: Sequence[Arch]) -> list[Arch]:
    """``archs`` reordered so that every prefix spans their range of MACs: the smallest, the largest,
    then the median, the quartiles, the octiles... (ranks by binary subdivision).  The set is
    unchanged, so a table measured in another order holds the same networks."""
    ranked = sorted(range(len(archs)), key=lambda i: (arch_cost(archs[i]).macs, i))
    if len(ranked) < 3:
        return [archs[i] for i in ranked]
    order, spans = [0, len(ranked) - 1], deque([(0, len(ranked) - 1)])
    while spans:
        lo, hi = spans.popleft()
        mid = (lo + hi) // 2
        if lo < mid < hi:
            order.append(mid)
            spans += [(lo, mid), (mid, hi)]
    return [archs[ranked[r]] for r in order]


def pruned_archs(space, n: int, *, resolution: int | None = None, min_keep: float = 0.25,
                 seed: int = CALIBRATION_SEED) -> list[Arch]:
    """``n`` seeded networks of ``space`` narrowed the way ``nas.train``'s structured pruning
    narrows them, measured beside ``calibration_archs`` (blocks and whole networks).

    Pruning leaves the space: it cuts expansion channels below the smallest expansion, residual
    chains below the stage widths, squeeze-excite below its ratio of the original.  Without
    such blocks in the table the learned model extrapolates to them and the calibration never
    sees a network of that kind (it under-predicted pruned Fashion-MNIST networks by 10-19%).
    Each network is a space sample (other seeds than the calibration's) with every prunable
    channel unit (``nas.narrow.channel_units``) cut with probability 3/4 to a random
    number of ``channel_multiple`` groups, keeping at least ``min_keep`` of it, as the pruner does.
    Every other network is cut deep, as pruning a fast network to 0.7x of its latency cuts it:
    every unit to at most 60% of its channels.  The structural steps of ``prune.criterion=loss``
    follow: each squeeze-excite is dropped with probability 1/3, each residual block with 1/4.
    ``nas.validate`` draws held-out ones with another ``seed``.
    """
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


def block_frequency(spaces: Sequence, *, samples: int = 200, resolution: int | None = None,
                    seed: int = CALIBRATION_SEED) -> Counter:
    """How often each block occurs in ``samples`` seeded networks of each space: the blocks a
    search meets most, measured first under a time budget."""
    freq: Counter = Counter()
    for sp in spaces:
        rng = np.random.default_rng([seed, sum(map(ord, sp.name)), 2])
        for _ in range(samples):
            a = sp.random(rng)
            freq.update((a.with_resolution(resolution) if resolution else a).keys())
    return freq


def round_order(n: int, round_: int) -> list[int]:
    """The order in which round ``round_`` (from 1) measures ``n`` networks: a permutation seeded
    by the round, so an interrupted validation resumes in the same order."""
    return np.random.default_rng([VALIDATION_SEED, round_]).permutation(n).tolist()


def anchor_archs(table: LatencyTable, per_group: int | None = 10) -> list[Arch]:
    """A few of the table's calibration networks per space (``None``: all of them), re-measured
    to detect drift."""
    by: dict[str, list[Arch]] = {}
    for a in table.networks:
        by.setdefault(a.name or "?", []).append(a)
    return [a for g in sorted(by) for a in by[g][:per_group]]


def measure_networks(archs: Sequence[Arch], runtime: Runtime, settings: ProfileSettings, *, round_: int,
                     have: Callable[[Arch], int], record: Callable[[Arch, Entry], None], shuffle: bool = False,
                     save: Callable[[], None] | None = None, progress: bool = True, desc: str = "networks",
                     unit: str = "net", always_bar: bool = False) -> ProfileReport:
    """Round ``round_`` of every network of ``archs`` that has fewer than ``round_`` rounds
    (``have``), measured end to end and handed to ``record``; ``shuffle``: in the round's own
    seeded order (``round_order``), else in the given order.  The one network loop of the
    calibration set (``profile_networks``), its refresh and recalibration (``profile_target``)
    and the held-out validation (``nas.latency.profile.validate.measure_held_out``)."""
    order = round_order(len(archs), round_) if shuffle else range(len(archs))
    todo = [archs[i] for i in order if have(archs[i]) < round_]
    return measure_items(todo, lambda a: measure_arch(a, runtime, settings), record, progress=progress,
                         desc=f"round {round_}/{settings.rounds}: {desc}", unit=unit, save=save,
                         always_bar=always_bar)


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
    keys = list(dict.fromkeys(keys))

    def one_round(r: int) -> ProfileReport:
        todo = [k for k in keys if k not in table.entries or table.entries[k].rounds < r]
        todo = todo[:limit] if limit is not None else todo
        return _stored_round(keys, table.entries, table, path, settings, runtime, lambda save: measure_items(
            todo, lambda k: measure_key(k, runtime, settings), merge_into(table.entries), progress=progress,
            desc=f"round {r}/{settings.rounds}: blocks", unit="block", save=save, label=lambda k: str(k)[:48]))

    return _rounds(one_round, settings, round_)


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
    archs = list(dict.fromkeys(archs))
    store = table.networks

    def one_round(r: int) -> ProfileReport:
        return _stored_round(archs, store, table, path, settings, runtime, lambda save: measure_networks(
            archs, runtime, settings, round_=r, have=lambda a: store[a].rounds if a in store else 0,
            record=merge_into(store), save=save, progress=progress, desc="networks", unit="network",
            always_bar=True))

    return _rounds(one_round, settings, round_)


def _rounds(one_round: Callable[[int], ProfileReport], settings: ProfileSettings, round_: int | None) -> ProfileReport:
    if round_ is not None:
        return one_round(round_)
    report = None
    for r in range(1, settings.rounds + 1):
        rep = one_round(r)
        report = rep if report is None else report.combine(rep)
    assert report is not None
    return report


def _stored_round(items: list, store: dict, table: LatencyTable, path, settings: ProfileSettings, runtime: Runtime,
                  run: Callable[[Callable[[], None]], ProfileReport]) -> ProfileReport:
    """One round of measurements into the table's ``store``, saved (throttled) as it goes."""
    save = Throttle(lambda: table.save(path, runtime=runtime), settings.save_every_s)
    save()
    already = sum(x in store for x in items)
    try:
        rep = run(save)
    except KeyboardInterrupt:
        log.warning("interrupted: this run's measurements are saved; re-run to continue")
        raise
    finally:
        save.flush()
    rep.requested, rep.already = len(items), already
    return rep
