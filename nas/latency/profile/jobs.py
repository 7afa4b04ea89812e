"""The whole ``nas.profile`` measuring job: every round of every block and network, in one planned list.

``plan_jobs`` lists every measurement still missing from a table as ``Job``s, each with its
expected seconds (``expected_seconds``): round by round, within a round the blocks a search meets
most first and the networks spread among them.  ``run_jobs`` measures them in order into the table
(saved as it goes) under one progress bar whose total is re-estimated after each job, optionally
within a time budget, and logs the run in the table's ``profile_log`` (``job_id`` names each
measurement there).  Runs sharing a table file claim each measurement first (``nas.latency.profile.claims``),
so two never time the same item at once, and skip what another run has saved.  ``profile_target`` (``nas.latency.profile.workflow``) plans and runs it; the
items come from ``nas.latency.profile.profiler`` (which re-exports these names).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from nas.arch import Arch, BlockKey
from nas.latency.profile.claims import STALE_S, Claims
from nas.latency.profile.watch import Unwatched, Watch
from nas.latency.runtimes import ProfileReport, ProfileSettings, Runtime, measure_arch, measure_key, measure_overhead
from nas.latency.tables import Entry, LatencyTable, Throttle, merge_into, now_iso

__all__ = ["Job", "JobReport", "expected_seconds", "job_id", "plan_jobs", "run_jobs"]

log = logging.getLogger(__name__)

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
    done: list[Job] = field(default_factory=list)  # saved (settled), in order
    by_others: int = 0  # jobs another run sharing the table measured meanwhile
    watch: dict[str, Any] | None = None  # what the watch saw (``nas.latency.profile.watch.Watch.record``)


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

    def skipped(self, job: Job) -> None:
        self.left[job.kind] -= job.cost_s

    def put_back(self, jobs: Sequence[Job]) -> Sequence[Job]:
        for j in jobs:
            self.left[j.kind] += j.cost_s
        return jobs

    def cost(self, job: Job) -> float:
        return job.cost_s * self.ratio(job.kind)

    def remaining(self) -> float:
        return sum(max(v, 0.0) * self.ratio(k) for k, v in self.left.items())


class _Shared:
    """The jobs of a run that shares its table file with other runs: each is claimed before it is
    measured, skipped when another run's save holds it already, and put off to the end while another
    run holds its claim (then waited for, polling every ``poll_s`` seconds)."""

    def __init__(self, table: LatencyTable, path: Path, stores: dict, *, stale_s: float, poll_s: float = 1.0) -> None:
        self.table, self.path, self.stores, self.poll_s = table, path, stores, poll_s
        self.claims = Claims(path, stale_s=stale_s)
        self.seen: tuple | None = self._stat()
        self.by_others = 0  # jobs skipped: another run saved them

    def _stat(self) -> tuple | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size

    def saved(self, keep: Sequence[str] = ()) -> None:
        """This run saved the table: its claims go (but those in ``keep``: measured, not saved yet),
        and the file as it is now is known."""
        self.claims.release(keep)
        self.seen = self._stat()

    def _done(self, job: Job) -> bool:
        """Whether another run's save holds this job's round already (taken in when the file changed;
        this run's claims stay until its own next save, which knows which of them are saved)."""
        if self._stat() != self.seen:
            self.table.save(self.path)  # merges what the others saved
            self.seen = self._stat()
        e = self.stores[job.kind].get(job.item)
        return e is not None and e.rounds >= job.round

    def schedule(self, jobs: Sequence[Job], skip: Callable[[Job], None]) -> Any:
        """The jobs this run measures, claimed, in order; those another run measured go to ``skip``."""
        later, told = jobs if isinstance(jobs, list) else list(jobs), False  # a list: jobs put back follow
        while later:
            still = []
            for job in later:
                jid = job_id(job.item, job.kind)
                if self._done(job):
                    self.by_others += 1
                    skip(job)
                elif not self.claims.take(jid):
                    still.append(job)
                elif self._done(job):  # the other run saved it and let its claim go after the first look
                    self.claims.drop(jid)
                    self.by_others += 1
                    skip(job)
                else:
                    yield job
            if still and not told:  # once this run has measured all it could
                told = True
                log.warning("waiting for %d measurement(s) that another run sharing %s is taking (%s); they are "
                            "not timed twice at once", len(still), self.path,
                            self.claims.holder(job_id(still[0].item, still[0].kind)))
            later = still
            if later:
                time.sleep(self.poll_s)


def run_jobs(jobs: Sequence[Job], runtime: Runtime, table: LatencyTable, settings: ProfileSettings, *,
             path: str | Path | None = None, progress: bool = True, budget_s: float | None = None,
             clock: Callable[[], float] = time.monotonic, on_step: Callable[[float, float], None] | None = None,
             claim_stale_s: float = STALE_S, watch: Watch | None = None) -> JobReport:
    """Measure ``jobs`` in order into ``table`` (saved as it goes, throttled, and on exit) under one
    progress bar whose total is the whole plan's expected time, re-estimated after each job; with
    ``budget_s``, stop before a job that would end past it.  ``on_step(elapsed, left)`` is called
    after each job.  Ctrl-C saves, then re-raises.  With ``watch`` (``nas.latency.profile.watch``), a
    measurement the machine misled is not saved.

    With ``path``, each job is claimed first (``nas.latency.profile.claims``; another host's claim is
    abandoned after ``claim_stale_s`` seconds): a job another run sharing the file is taking waits
    until the end of this run, and one that run has saved meanwhile is skipped (``by_others``)."""
    if jobs and table.metadata.get("call_overhead_ms") is None:
        table.metadata["call_overhead_ms"] = measure_overhead(runtime, settings)
    stores = {"block": table.entries, "network": table.networks}
    reps = {k: ProfileReport(sum(j.kind == k for j in jobs), 0, 0, 0, 0.0) for k in stores}
    eta, queue, watch = _Eta(jobs), list(jobs), watch if watch is not None else Unwatched()
    report = JobReport(reps["block"], reps["network"], len(jobs), planned_s=eta.remaining())
    bar = _bar(eta) if progress and jobs else None
    shared = _Shared(table, Path(path), stores, stale_s=claim_stale_s) if path is not None and jobs else None

    def save_now() -> None:
        table.save(path, runtime=runtime)
        if shared is not None:  # the claims of measurements held back stay
            shared.saved(keep=[job_id(d[0].item, d[0].kind) for d in watch.pending])

    def keep(settled: Sequence[tuple[Job, Entry, float]]) -> None:  # measurements to save: into the table and log
        for job, entry, elapsed in settled:
            merge_into(stores[job.kind])(job.item, entry)
            report.done.append(job)
            if run_log is not None:
                run_log["jobs"].append([job_id(job.item, job.kind), job.round, round(elapsed, 2)])
                run_log["seconds"] = round(elapsed, 2)

    save = Throttle(save_now, settings.save_every_s)
    run_log = _log_run(table, jobs, budget_s)
    save()
    t0 = clock()
    watch.start(jobs, partial(_item_ms, runtime=runtime, settings=settings), job_id)
    try:
        for job in shared.schedule(queue, eta.skipped) if shared is not None else queue:
            if budget_s is not None and clock() - t0 + eta.cost(job) > budget_s:
                report.stopped_by_budget = True
                break
            t = clock()
            entry, bad = watch.measure(_measure_job, job, runtime, settings)
            took, elapsed = clock() - t, clock() - t0
            _count(reps[job.kind], entry, took)
            eta.done(job, took)
            settled, redo = watch.add((job, entry, elapsed), bad)
            keep(settled)
            queue.extend(eta.put_back(redo))
            save()
            if on_step is not None:
                on_step(elapsed, eta.remaining())
            _show(bar, elapsed, eta, f"round {job.round}/{settings.rounds}, " + ", ".join(
                f"{k}s {r.measured}/{r.requested}" for k, r in reps.items()))
            if watch.stopped:
                break
        keep(watch.finish())
    except KeyboardInterrupt:
        for rep in reps.values():
            rep.interrupted = True
        log.warning("interrupted: this run's measurements are saved; re-run to continue")
        raise
    finally:
        keep(watch.unsettled())  # interrupted: kept unchecked, as without the watch
        report.by_others = shared.by_others if shared is not None else 0
        _close(report, jobs, clock() - t0, run_log, watch)
        if run_log is not None:
            save()
        save.flush()
        if shared is not None:
            shared.claims.release()  # a save that failed leaves its items to the next run
        if bar is not None:
            bar.close()
    return report


def _item_ms(item: Any, kind: str, *, runtime: Runtime, settings: ProfileSettings) -> float:
    """One measurement's median, in ms (an anchor's timing: never saved)."""
    return _measure_job(Job(item, kind, 0, 0.0), runtime, settings).median_ms


def _count(rep: ProfileReport, entry: Entry, took: float) -> None:
    rep.measured += 1
    rep.remeasured += entry.remeasured > 0
    rep.seconds += took


def _close(report: JobReport, jobs: Sequence[Job], seconds: float, run_log: dict[str, Any] | None,
           watch: Watch | Unwatched) -> None:
    """The report's and the run record's last figures: time, jobs left, counts, what the watch saw."""
    report.seconds = seconds
    report.left = len(jobs) - len(report.done) - report.by_others
    report.watch = watch.record()
    if run_log is not None:
        run_log.update(seconds=round(seconds, 2), left=report.left, stopped_by_budget=report.stopped_by_budget,
                       measured=report.blocks.measured + report.networks.measured,
                       remeasured=report.blocks.remeasured + report.networks.remeasured)
        if report.watch is not None:
            run_log["watch"] = report.watch


def _show(bar: Any, elapsed: float, eta: _Eta, postfix: str) -> None:
    if bar is None:
        return
    bar.total = round(elapsed + eta.remaining(), 1)
    bar.n = round(elapsed, 1)
    bar.set_postfix_str(postfix)


def _bar(eta: _Eta) -> Any:
    return tqdm(total=round(eta.remaining(), 1), unit="s", dynamic_ncols=True, smoothing=0,
                desc="profile", bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}")


def job_id(item: Any, kind: str) -> str:
    """A measurement's item in the table's ``profile_log``: ``b``/``n`` and 16 hex digits of the
    block's / network's digest."""
    return ("b" if kind == "block" else "n") + item.digest()[:16]


def _log_run(table: LatencyTable, jobs: Sequence[Job], budget_s: float | None) -> dict[str, Any] | None:
    """Append this run's record to the table's ``metadata["profile_log"]`` (None when nothing is
    planned): its budget and, as it goes, every measurement in order with the seconds since the run
    started, so ``nas.validate`` can refit on what the first k minutes of measuring gave
    (``nas.latency.profile.budget_curve``).  Entries keep only their last round's ``measured_at``, which
    says neither the order of first measurements nor the time a run spent."""
    if not jobs:
        return None
    run = {"started": now_iso(), "budget_min": budget_s / 60 if budget_s else None, "planned": len(jobs),
           "left": len(jobs), "stopped_by_budget": False, "seconds": 0.0, "jobs": []}
    table.metadata.setdefault("profile_log", []).append(run)
    return run
