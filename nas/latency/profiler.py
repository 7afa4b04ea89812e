"""Measure every unique block of a space on the target runtime and write a latency table.

Each block is built as a standalone graph (``nas.builder.build_layer``) at its exact input shape
and timed (``nas.latency.measure``): warm-up, then repeated timed runs (at least ``repeats`` and
``min_time_s``), median with p10/p90.  An entry whose spread ((p90 - p10) / median) exceeds
``max_spread`` is measured again, up to ``remeasure`` times, keeping the steadiest round.
Entries are written to the table file as they are measured (atomically, at most every
``save_every_s`` seconds and on exit), so a re-run measures only what is missing and Ctrl-C
loses nothing already measured.

``measure_networks`` measures whole networks (the calibration set here, held-out networks in
``nas.latency.validate``); ``profile_target`` (``nas.latency.profile_workflow``) is the whole
``nas.profile`` workflow, which plans every round of every block and network as one list of
``Job``s (``plan_jobs``: each with its expected seconds) and runs it with ``run_jobs`` under one
progress bar and an optional time budget.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nas import __version__
from nas.arch import Arch, BlockKey
from nas.latency.device import device_identity
from nas.latency.measure import (
    ProfileReport,
    ProfileSettings,
    measure_arch,
    measure_items,
    measure_key,
    measure_overhead,
)
from nas.latency.runtimes import Runtime
from nas.latency.table import Entry, LatencyTable, Throttle, now_iso
from nas.target import Target

__all__ = [
    "CALIBRATION_SEED", "VALIDATION_SEED", "Job", "JobReport", "ProfileReport", "ProfileSettings", "anchor_archs",
    "block_frequency", "calibration_archs", "expected_seconds", "measure_arch", "measure_key", "measure_networks",
    "new_metadata", "plan_jobs", "profile_blocks", "profile_networks", "pruned_archs", "round_order", "run_jobs",
    "space_names",
]

# seeds of the calibration networks; validation draws from other seeds and skips these digests
CALIBRATION_SEED = 20_261_122
VALIDATION_SEED = 7_000_001

log = logging.getLogger(__name__)


def new_metadata(target: Target | dict[str, Any], runtime: Runtime, settings: ProfileSettings) -> dict[str, Any]:
    import torch

    target = Target.coerce(target)
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
        "measurement": {**asdict(settings), "statistic": "median", "timer": "perf_counter_ns", "unit": "ms",
                        "io": info.get("io") or "inputs and outputs bound once (onnxruntime IOBinding)"},
        "call_overhead_ms": None,
        "created": now_iso(),
        "updated": now_iso(),
        "tool": {"name": "hwnas", "version": __version__, "torch": torch.__version__, "onnx_opset": 17},
    }


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
    channel unit (``nas.narrow.channel_units``) cut with probability 3/4 to a random
    number of ``channel_multiple`` groups, keeping at least ``min_keep`` of it, as the pruner does.
    Every other network is cut deep, as pruning a fast network to 0.7x of its latency cuts it:
    every unit to at most 60% of its channels.  The structural steps of ``prune.criterion=loss``
    follow: each squeeze-excite is dropped with probability 1/3, each residual block with 1/4.
    ``nas.validate`` draws held-out ones with another ``seed``.
    """
    import numpy as np

    from nas.narrow import channel_units, drop_layers, droppable, resize_arch

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


def space_names(spaces: str | Sequence[str] | None) -> list[str]:
    """``spaces`` as a list of names; None or empty: every shipped search space."""
    from nas.space import list_spaces

    return list_spaces() if not spaces else [str(spaces)] if isinstance(spaces, str) else [str(n) for n in spaces]


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
    and the held-out validation (``nas.latency.validate.measure_held_out``)."""
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
        return _stored_round(keys, table.entries, table, path, settings, lambda save: measure_items(
            todo, lambda k: measure_key(k, runtime, settings), _merge_into(table.entries), progress=progress,
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
        return _stored_round(archs, store, table, path, settings, lambda save: measure_networks(
            archs, runtime, settings, round_=r, have=lambda a: store[a].rounds if a in store else 0,
            record=_merge_into(store), save=save, progress=progress, desc="networks", unit="network",
            always_bar=True))

    return _rounds(one_round, settings, round_)


def _merge_into(store: dict) -> Callable[[Any, Entry], None]:
    def record(x: Any, entry: Entry) -> None:
        old = store.get(x)
        store[x] = entry if old is None else old.merged(entry)

    return record


def _rounds(one_round: Callable[[int], ProfileReport], settings: ProfileSettings, round_: int | None) -> ProfileReport:
    if round_ is not None:
        return one_round(round_)
    report = None
    for r in range(1, settings.rounds + 1):
        rep = one_round(r)
        report = rep if report is None else report.combine(rep)
    assert report is not None
    return report


def _stored_round(items: list, store: dict, table: LatencyTable, path, settings: ProfileSettings,
                  run: Callable[[Callable[[], None]], ProfileReport]) -> ProfileReport:
    """One round of measurements into the table's ``store``, saved (throttled) as it goes."""
    save = Throttle(lambda: table.save(path), settings.save_every_s)
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


# -- the whole job: every round of every block and network, in one planned list ---------------

# seconds per layer to build and export a graph (once per process: the runtime keeps the bytes for
# the later rounds) and to load it into a session (every round); first guesses only: run_jobs
# rescales each kind by what its measurements actually took
EXPORT_S_PER_LAYER = 0.025
PREPARE_S_PER_LAYER = 0.005
PREPARE_S = 0.01
# round 1 measures its networks over the first quarter of its blocks' time
NETWORK_LEAD = 4.0


@dataclass(frozen=True)
class Job:
    """One measurement of the plan: round ``round`` of a block (``kind="block"``, ``item`` a
    ``BlockKey``) or a network (``kind="network"``, ``item`` an ``Arch``), expected to take
    ``cost_s`` seconds."""

    item: Any
    kind: str
    round: int
    cost_s: float


@dataclass
class JobReport:
    """What ``run_jobs`` did: per kind a ``ProfileReport``; ``left`` jobs not run (budget spent)."""

    blocks: ProfileReport
    networks: ProfileReport
    planned: int
    left: int = 0
    seconds: float = 0.0
    planned_s: float = 0.0
    stopped_by_budget: bool = False
    done: list[Job] = field(default_factory=list)


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


def expected_seconds(item: Any, kind: str, settings: ProfileSettings, call_ms: float, *,
                     export: bool = True) -> float:
    """The seconds one measurement of ``item`` is expected to take: preparing it (``export``ing it
    first, loading it into a session) plus ``time_runner``'s warm-up and timed calls of ``call_ms``
    each (at least ``repeats`` and ``min_time_s``, at most 2000 calls)."""
    layers = len(item.keys()) if kind == "network" else 1
    t = max(call_ms, 1e-3) / 1e3
    timed = max(settings.repeats * t, min(settings.min_time_s, 2000 * t))
    prepare = PREPARE_S + (PREPARE_S_PER_LAYER + EXPORT_S_PER_LAYER * export) * layers
    return prepare + settings.warmup * t + timed


def _interleave(first: list, second: list, w_first: Sequence[float], w_second: Sequence[float], *,
                lead: float = 1.0) -> list:
    """``first`` and ``second`` merged, each keeping its order, so that every prefix holds ``lead``
    times as large a share of ``second``'s total weight as of ``first``'s (until ``second`` runs out)."""
    out, i, j = [], 0, 0
    tot_a, tot_b = sum(w_first) or 1.0, sum(w_second) or 1.0
    done_a = done_b = 0.0
    while i < len(first) or j < len(second):
        if j >= len(second) or (i < len(first) and done_b / tot_b >= lead * done_a / tot_a):
            out.append(first[i])
            done_a += w_first[i]
            i += 1
        else:
            out.append(second[j])
            done_b += w_second[j]
            j += 1
    return out


def plan_jobs(keys: Sequence[BlockKey], nets: Sequence[Arch], table: LatencyTable, settings: ProfileSettings, *,
              call_ms: Callable[[Any, str], float], freq: Counter | None = None,
              limit: int | None = None) -> list[Job]:
    """Every measurement still missing from ``table``, round by round (rounds spread over the run,
    so slow drifts of the machine average out).  Within a round, blocks go most frequent first
    (``freq``; ties keep the given order) and the networks (in the given order: calibration, then
    pruned) are spread among them by expected time; in round 1 over the first ``1/NETWORK_LEAD`` of
    its blocks' time.  A run stopped early (a time budget) then holds the blocks a search meets most
    and enough networks for the calibration, and the ETA learns both kinds' cost from the start.
    ``limit``: at most this many blocks per round.  ``call_ms(item, kind)``: an item's expected
    time per call."""
    keys = list(dict.fromkeys(keys))
    nets = list(dict.fromkeys(nets))
    if freq:
        rank = {k: i for i, k in enumerate(keys)}
        keys.sort(key=lambda k: (-freq.get(k, 0), rank[k]))
    stores = {"block": table.entries, "network": table.networks}

    def ms(item, kind):  # a measured item's own figure, else the guess
        e = stores[kind].get(item)
        return e.median_ms if e is not None else call_ms(item, kind)

    jobs: list[Job] = []
    seen: set = set()  # exported already in this run

    def job(item, kind, r):
        first = item not in seen
        seen.add(item)
        return Job(item, kind, r, expected_seconds(item, kind, settings, ms(item, kind), export=first))

    for r in range(1, settings.rounds + 1):
        b = [k for k in keys if k not in table.entries or table.entries[k].rounds < r]
        b = b[:limit] if limit is not None else b
        n = [a for a in nets if a not in table.networks or table.networks[a].rounds < r]
        bj = [job(k, "block", r) for k in b]
        nj = [job(a, "network", r) for a in n]
        jobs += _interleave(bj, nj, [j.cost_s for j in bj], [j.cost_s for j in nj], lead=NETWORK_LEAD if r == 1 else 1.0)
    return jobs


def _measure_job(job: Job, runtime: Runtime, settings: ProfileSettings) -> Entry:
    if job.kind == "block":
        return measure_key(job.item, runtime, settings)
    return measure_arch(job.item, runtime, settings)


class _Eta:
    """The expected seconds left of a plan: each kind's planned seconds scaled by how long that
    kind's measurements took against their plan (the other kind's ratio until one ran), weighing
    the last ``memory_s`` seconds of them most, so a machine that gets busier or quieter is followed."""

    def __init__(self, jobs: Sequence[Job], memory_s: float = 60.0) -> None:
        self.memory_s = memory_s
        self.left = {"block": 0.0, "network": 0.0}
        for j in jobs:
            self.left[j.kind] += j.cost_s
        self.plan = {"block": 0.0, "network": 0.0}
        self.took = {"block": 0.0, "network": 0.0}

    def ratio(self, kind: str) -> float:
        if self.plan[kind] > 0:
            return self.took[kind] / self.plan[kind]
        other = "network" if kind == "block" else "block"
        return self.took[other] / self.plan[other] if self.plan[other] > 0 else 1.0

    def done(self, job: Job, seconds: float) -> None:
        k = job.kind
        keep = float(np.exp(-seconds / self.memory_s))
        self.left[k] -= job.cost_s
        self.plan[k] = keep * self.plan[k] + job.cost_s
        self.took[k] = keep * self.took[k] + seconds

    def cost(self, job: Job) -> float:
        return job.cost_s * self.ratio(job.kind)

    def remaining(self) -> float:
        return sum(max(v, 0.0) * self.ratio(k) for k, v in self.left.items())


def run_jobs(jobs: Sequence[Job], runtime: Runtime, table: LatencyTable, settings: ProfileSettings, *,
             path: str | Path | None = None, progress: bool = True, budget_s: float | None = None,
             clock: Callable[[], float] = time.monotonic,
             on_step: Callable[[float, float], None] | None = None) -> JobReport:
    """Measure ``jobs`` in order into ``table`` (saved as it goes, throttled, and on exit) under
    one progress bar whose total is the whole plan's expected time, re-estimated after each job;
    with ``budget_s``, stop before a job that would end past it.  ``on_step(elapsed, left)``
    is called after each job.  Ctrl-C saves, then re-raises."""
    if jobs and table.metadata.get("call_overhead_ms") is None:
        table.metadata["call_overhead_ms"] = measure_overhead(runtime, settings)
    stores = {"block": table.entries, "network": table.networks}
    reps = {k: ProfileReport(sum(j.kind == k for j in jobs), 0, 0, 0, 0.0) for k in stores}
    eta = _Eta(jobs)
    report = JobReport(reps["block"], reps["network"], len(jobs), planned_s=eta.remaining())
    counts = {k: reps[k].requested for k in stores}
    bar = None
    if progress and jobs:
        from tqdm.auto import tqdm

        bar = tqdm(total=round(eta.remaining(), 1), unit="s", dynamic_ncols=True, smoothing=0,
                   desc="profile", bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}")
    save = Throttle(lambda: table.save(path), settings.save_every_s)
    run_log = _log_run(table, jobs, budget_s)
    save()
    t0 = clock()
    try:
        for i, job in enumerate(jobs):
            if budget_s is not None and clock() - t0 + eta.cost(job) > budget_s:
                report.left, report.stopped_by_budget = len(jobs) - i, True
                break
            t = clock()
            entry = _measure_job(job, runtime, settings)
            took = clock() - t
            _merge_into(stores[job.kind])(job.item, entry)
            rep = reps[job.kind]
            rep.measured += 1
            rep.remeasured += entry.remeasured > 0
            rep.seconds += took
            eta.done(job, took)
            report.done.append(job)
            elapsed = clock() - t0
            if run_log is not None:
                run_log["jobs"].append([job_id(job.item, job.kind), job.round, round(elapsed, 2)])
                run_log["seconds"] = round(elapsed, 2)
            save()
            if on_step is not None:
                on_step(elapsed, eta.remaining())
            if bar is not None:
                bar.total = round(elapsed + eta.remaining(), 1)
                bar.n = round(elapsed, 1)
                bar.set_postfix_str(f"round {job.round}/{settings.rounds}, blocks {reps['block'].measured}/"
                                    f"{counts['block']}, networks {reps['network'].measured}/{counts['network']}")
    except KeyboardInterrupt:
        for rep in reps.values():
            rep.interrupted = True
        log.warning("interrupted: this run's measurements are saved; re-run to continue")
        raise
    finally:
        report.seconds = clock() - t0
        if run_log is not None:
            run_log.update(seconds=round(report.seconds, 2), left=report.left or len(jobs) - len(report.done),
                           stopped_by_budget=report.stopped_by_budget)
            save()
        save.flush()
        if bar is not None:
            bar.close()
    return report


def job_id(item: Any, kind: str) -> str:
    """A measurement's item in the table's ``profile_log``: ``b``/``n`` and 16 hex digits of the
    block's / network's digest."""
    return ("b" if kind == "block" else "n") + item.digest()[:16]


def _log_run(table: LatencyTable, jobs: Sequence[Job], budget_s: float | None) -> dict[str, Any] | None:
    """Append this run's record to the table's ``metadata["profile_log"]`` (None when nothing is
    planned): its budget and, as it goes, every measurement in order with the seconds since the run
    started, so ``nas.validate`` can refit on what the first k minutes of measuring gave
    (``nas.latency.budget_curve``).  Entries keep only their last round's ``measured_at``, which
    says neither the order of first measurements nor the time a run spent."""
    if not jobs:
        return None
    run = {"started": now_iso(), "budget_min": budget_s / 60 if budget_s else None, "planned": len(jobs),
           "left": len(jobs), "stopped_by_budget": False, "seconds": 0.0, "jobs": []}
    table.metadata.setdefault("profile_log", []).append(run)
    return run
