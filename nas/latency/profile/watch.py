"""Whether the machine misled a profile: each measurement's contention, and anchors re-timed through the run.

Two checks, both cheap:

* **Contention** (``Contention``): the time this process's threads spent runnable but waiting for
  a CPU (run-queue wait: the second field of ``/proc/self/task/<tid>/schedstat``, in nanoseconds;
  the kernel's Documentation/scheduler/sched-stats.rst, "/proc/<pid>/schedstat") plus the steal
  time of the CPUs it may run on (``/proc/stat``: the hypervisor running something else;
  Documentation/filesystems/proc.rst), as a share of a measurement's wall time.  Another process
  on the pinned core shows as about 50% wait.  Where ``/proc`` is absent (macOS) the share is
  unknown and no measurement is judged by it.
* **Anchors** (``Anchors``): a few blocks of the plan, of spread sizes, timed at the start and
  re-timed every ``ANCHOR_EVERY_S`` seconds of measuring.  When their median ratio to the first
  timing moves beyond their own repeat noise (and at least ``ANCHOR_MIN_MOVE``), the machine
  changed under the profile (a busy hyperthread sibling, a clock frequency, thermal limits) even
  where no wait shows.

``Watch`` ties both to ``nas.latency.profile.jobs.run_jobs``: a contended measurement is retried
once, and still contended it is affected; the measurements since the last good anchor check are
held back and saved only once a check confirms them, so a moved check makes them affected too.
An affected measurement is never saved: it is measured again at the end of the plan (once), or
left for the next run.  A machine that stays contended (``STOP_AFTER`` affected measurements in a
row, or ``STOP_CHECKS`` moved checks in a row) stops the run with a message, rather than spend its
budget.  What happened goes to the run's ``profile_log`` record (``Watch.record``).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

__all__ = ["ANCHOR_EVERY_S", "Anchors", "Contention", "Unwatched", "Watch", "noise_note", "read_steal_s", "read_wait_s"]

#: a measurement is contended when its run-queue wait + steal exceed this share of its wall time ...
CONTENDED_SHARE = 0.05
#: ... and this many seconds (a few scheduler ticks: a short measurement is not judged by one preemption)
CONTENDED_MIN_S = 0.002
#: seconds of measuring between two anchor checks
ANCHOR_EVERY_S = 30.0
#: anchor blocks timed at each check
ANCHORS = 4
#: an anchor check has moved when the anchors' median ratio to their first timing is off by more than
#: this, or by three times their repeat noise at the start when that is more
ANCHOR_MIN_MOVE = 0.05
#: the run stops after this many affected measurements in a row ...
STOP_AFTER = 5
#: ... or this many moved anchor checks in a row
STOP_CHECKS = 3
#: with no earlier run in the table to compare with, a share re-measured for noise above this is noted
NOISY_SHARE = 1 / 3
#: a run says so when at least this share of its measurements (and 3) waited for the CPU, even where
#: every retry was quiet: the core was shared, though the table holds only quiet figures
RETRIED_SHARE = 0.1


def read_wait_s(task_dir: str | Path = "/proc/self/task") -> float | None:
    """Seconds this process's threads have waited on a run queue (summed), or None where unreadable."""
    total, found = 0, False
    try:
        tasks = list(Path(task_dir).iterdir())
    except OSError:
        return None
    for t in tasks:
        try:
            total += int((t / "schedstat").read_text().split()[1])
            found = True
        except (OSError, IndexError, ValueError):  # a thread gone meanwhile, or no schedstats
            continue
    return total / 1e9 if found else None


def read_steal_s(cpus: Iterable[int] | None = None, stat: str | Path = "/proc/stat") -> float | None:
    """Steal seconds of ``cpus`` (default: the CPUs this process may run on), averaged over them; None
    where unreadable."""
    try:
        cpus = set(os.sched_getaffinity(0) if cpus is None else cpus)
        lines = Path(stat).read_text().splitlines()
        tick = os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, ValueError):
        return None
    steal = [int(f[8]) for f in (line.split() for line in lines)
             if len(f) > 8 and f[0].startswith("cpu") and f[0][3:].isdigit() and int(f[0][3:]) in cpus]
    return sum(steal) / tick / len(steal) if steal else None


class Contention:
    """Run-queue wait and steal of this process over an interval, against the interval's wall time.

    Args:
        wait: seconds waited so far (``read_wait_s``), or None when unknown.
        steal: steal seconds so far (``read_steal_s``), or None when unknown.
        clock: the wall clock.
    """

    def __init__(self, *, wait: Callable[[], float | None] = read_wait_s,
                 steal: Callable[[], float | None] = read_steal_s,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.wait, self.steal, self.clock = wait, steal, clock
        self._at: tuple[float, float | None, float | None] | None = None

    def start(self) -> None:
        """Mark the start of an interval."""
        self._at = (self.clock(), self.wait(), self.steal())

    def since(self) -> tuple[float, float | None]:
        """Wall seconds since ``start`` and the seconds waited (run-queue wait + steal) in them; None
        when neither is known."""
        if self._at is None:
            raise RuntimeError("Contention.since() before start()")
        t0, w0, s0 = self._at
        w1, s1 = self.wait(), self.steal()
        parts = [b - a for a, b in ((w0, w1), (s0, s1)) if a is not None and b is not None]
        return self.clock() - t0, (max(sum(parts), 0.0) if parts else None)


def contended(wall: float, waited: float | None) -> bool:
    """Whether an interval of ``wall`` seconds that waited ``waited`` seconds was contended."""
    return waited is not None and waited > max(CONTENDED_SHARE * wall, CONTENDED_MIN_S)


class Anchors:
    """A few items timed at the start and again at each check (``time_one(item, kind)``: ms).

    ``move`` is the threshold of a check: three times the anchors' repeat noise at the start (the
    median of each anchor's two first timings' relative difference), at least ``ANCHOR_MIN_MOVE``.
    """

    def __init__(self, items: Sequence[tuple[Any, str]], time_one: Callable[[Any, str], float]) -> None:
        self.items, self.time_one = list(items), time_one
        self.base: list[float] = []
        self.move = ANCHOR_MIN_MOVE

    def start(self) -> None:
        """Time each anchor twice: its base figure and the threshold."""
        first = [self.time_one(*it) for it in self.items]
        second = [self.time_one(*it) for it in self.items]
        self.base = [(a + b) / 2 for a, b in zip(first, second)]
        noise = statistics.median(abs(a - b) / ((a + b) / 2) for a, b in zip(first, second)) if first else 0.0
        self.move = max(ANCHOR_MIN_MOVE, 3 * noise)

    def now(self) -> list[float]:
        """Each anchor timed now."""
        return [self.time_one(*it) for it in self.items]

    def ratio(self, figures: Sequence[float]) -> float:
        """The anchors' median ratio of ``figures`` (``now``) to their base figures."""
        return float(statistics.median(f / b for f, b in zip(figures, self.base)))


def pick_anchors(jobs: Sequence[Any], n: int = ANCHORS) -> list[tuple[Any, str]]:
    """``n`` blocks of the plan spread over the lower three quarters of its expected costs: cheap to
    re-time, and of every size; where the plan has no block, its two cheapest networks."""
    blocks = sorted({j.item: j for j in jobs if j.kind == "block"}.values(), key=lambda j: j.cost_s)
    if blocks:
        at = sorted({round(0.75 * i * (len(blocks) - 1) / max(n - 1, 1)) for i in range(n)})
        return [(blocks[i].item, "block") for i in at]
    nets = sorted({j.item: j for j in jobs if j.kind == "network"}.values(), key=lambda j: j.cost_s)
    return [(j.item, "network") for j in nets[:min(n, 2)]]


class Watch:
    """The checks of one ``run_jobs`` run (the module's docstring says what they do).

    Args:
        contention: reads this process's wait (default: from ``/proc``).
        clock: the clock that spaces the anchor checks.
        every_s: seconds of measuring between two anchor checks.
        anchors: how many anchor blocks.
    """

    def __init__(self, *, contention: Contention | None = None, clock: Callable[[], float] = time.monotonic,
                 every_s: float = ANCHOR_EVERY_S, anchors: int = ANCHORS) -> None:
        self.contention = contention or Contention()
        self.clock, self.every_s, self.n_anchors = clock, every_s, anchors
        self.anchors: Anchors | None = None
        self.names: list[str] = []
        self.pending: list[tuple] = []  # (job, entry, ...) measured since the last good check: held back
        self.redone: set = set()  # jobs put back once already
        self.missing: set = set()  # affected jobs not measured well since
        self.checks: list[dict[str, Any]] = []
        self.counts = {"contended": 0, "retried": 0, "affected": 0, "requeued": 0}
        self.wall = self.waited = 0.0  # over every measurement
        self.measured = 0  # measurements taken (not counting retries)
        self.row: list[tuple[float, float]] = []  # (wall, waited) of the affected measurements in a row
        self.moved_row = 0
        self.stopped: str | None = None
        self.t0 = self.last = 0.0
        self.rebase = False

    def start(self, jobs: Sequence[Any], time_one: Callable[[Any, str], float], name: Callable[[Any, str], str]) -> None:
        """Pick the anchors among ``jobs`` and time them (``time_one(item, kind)``: ms; ``name``: an
        item's name in the record)."""
        self.t0 = self.last = self.clock()
        items = pick_anchors(jobs, self.n_anchors)
        if not items:
            return
        self.anchors, self.names = Anchors(items, time_one), [name(*it) for it in items]
        self.contention.start()
        self.anchors.start()
        self.rebase = contended(*self.contention.since())  # a contended first timing is taken again
        self.last = self.clock()

    def measure(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, bool]:
        """``fn(*args)`` (a measurement) and whether it was contended: retried once if it was."""
        self.measured += 1
        for attempt in range(2):
            self.contention.start()
            entry = fn(*args)
            wall, waited = self.contention.since()
            self.wall += wall
            self.waited += waited or 0.0
            if not contended(wall, waited):
                return entry, False
            self.counts["retried"] += attempt == 0
        self.counts["contended"] += 1
        self.row.append((wall, waited or 0.0))
        return entry, True

    def add(self, done: tuple, bad: bool) -> tuple[list[tuple], list]:
        """A measurement ``done`` (``(job, entry, ...)``), ``bad`` if contended: the measurements to
        save now (settled) and the jobs to measure again."""
        if bad:
            redo = self._affected([done])
            if len(self.row) >= STOP_AFTER:
                self._stop(self._contended_message)
            return [], redo
        self.row = []
        self.pending.append(done)
        if self.anchors is None:
            return self._settle(), []
        if self.clock() - self.last < self.every_s:
            return [], []
        return self.check()

    def check(self, last: bool = False) -> tuple[list[tuple], list]:
        """Re-time the anchors: the held-back measurements settled (to save) or affected (to measure
        again, unless ``last``: then left for the next run).  A check that waited for the CPU itself
        confirms nothing."""
        if self.anchors is None:
            return self._settle(), []
        self.contention.start()
        figures = self.anchors.now()
        wall, waited = self.contention.since()
        busy, ratio = contended(wall, waited), self.anchors.ratio(figures)
        self.last = self.clock()
        if self.rebase and not busy:  # the first timing was contended: this one is the base
            self.anchors.base, self.rebase = figures, False
            ratio = 1.0
        moved = abs(ratio - 1) > self.anchors.move
        self.checks.append({"s": round(self.last - self.t0, 1), "ratio": round(ratio, 3), "moved": moved,
                            "busy": busy, "wait": round(waited / wall, 3) if waited is not None and wall > 0 else None})
        if not (moved or busy):
            self.moved_row = 0
            return self._settle(), []
        self.moved_row += 1
        redo = self._affected(self.pending, again=not last)
        self.pending = []
        if self.moved_row >= STOP_CHECKS:
            self._stop(partial(self._moved_message, ratio) if moved else partial(self._contended_message, checks=True))
        return [], redo

    def finish(self) -> list[tuple]:
        """At the end of the run: the held-back measurements a last check settles (none if it moved:
        they are left for the next run)."""
        if self.stopped or not self.pending or self.anchors is None:
            return self._settle() if not self.stopped else []
        return self.check(last=True)[0]

    def unsettled(self) -> list[tuple]:
        """The held-back measurements, unchecked (an interrupted run keeps them, as it always did)."""
        out, self.pending = self.pending, []
        return out

    def _settle(self) -> list[tuple]:
        out, self.pending = self.pending, []
        self.missing -= {d[0] for d in out}
        return out

    def _affected(self, done: Sequence[tuple], again: bool = True) -> list:
        self.counts["affected"] += len(done)
        redo = [d[0] for d in done if again and d[0] not in self.redone]
        self.redone.update(redo)
        self.missing.update(d[0] for d in done)
        self.counts["requeued"] += len(redo)
        return redo

    def _stop(self, message: Callable[[], str]) -> None:
        self._affected(self.pending, again=False)
        self.pending = []
        self.stopped = message()

    def share(self, parts: Sequence[tuple[float, float]] | None = None) -> float:
        """The share of the measuring time (of ``parts``: (wall, waited) pairs) spent waiting."""
        wall, waited = (sum(p[0] for p in parts), sum(p[1] for p in parts)) if parts else (self.wall, self.waited)
        return waited / wall if wall > 0 else 0.0

    def _contended_message(self, checks: bool = False) -> str:
        what = (f"its last {STOP_CHECKS} anchor checks waited for the core" if checks else
                f"{self.share(self.row):.0%} of the last {len(self.row)} measurements' time was spent waiting for "
                "the core")
        return (f"another process shared this CPU: {what} (run-queue wait and steal), so the profile "
                f"stopped rather than spend its budget on timings it would not keep; "
                f"{self.counts['affected']} measurements the machine misled were not saved. Run on a quiet core "
                f"(taskset -c <core>, with other work kept off it), then the same command again: it continues "
                f"where this stopped")

    def _moved_message(self, ratio: float) -> str:
        return (f"the machine changed under the profile: its anchors ran at {ratio:.2f}x their first timing "
                f"at {STOP_CHECKS} checks in a row, so the profile stopped; {self.counts['affected']} "
                f"measurements the machine misled were not saved. Something else is using this CPU "
                f"(another process on it or its hyperthread sibling, a lower clock frequency, thermal limits): "
                f"run when it is quiet, then the same command again: it continues where this stopped")

    def record(self) -> dict[str, Any]:
        """What happened, for the run's ``profile_log`` record and the report."""
        return {"anchors": self.names, "move": round(self.anchors.move, 3) if self.anchors else None,
                "checks": self.checks, "measured": self.measured, **self.counts, "left": len(self.missing),
                "wait_share": round(self.share(), 4), "stopped": self.stopped}

    def summary(self) -> str | None:
        """One line for the user when the machine misled the run (None when all was fine)."""
        retried = self.counts["retried"]
        if not (self.counts["affected"] or self.counts["contended"] or retried >= max(3, RETRIED_SHARE * self.measured)):
            return None  # a few retried, quiet the second time: a preemption, and the table holds only quiet figures
        moved = [c for c in self.checks if c["moved"]]
        worst = max(moved, key=lambda c: abs(c["ratio"] - 1), default=None)
        parts = [f"anchors moved to {worst['ratio']:.2f}x their first timing at {worst['s']:.0f}s ({len(moved)} of "
                 f"{len(self.checks)} checks)"] if worst else []
        busy = sum(c["busy"] for c in self.checks)
        if busy:
            parts.append(f"{busy} of {len(self.checks)} anchor checks waited for the CPU")
        if self.counts["retried"]:
            parts.append(f"{self.counts['retried']} measurements waited for the CPU and were retried, "
                         f"{self.counts['contended']} of them again (run-queue wait {self.share():.0%} of the "
                         "measuring time)")
        if self.counts["affected"]:
            left = (f"{len(self.missing)} of them not measured well since: left for the next run" if self.missing
                    else "each measured again since")
            parts.append(f"{self.counts['affected']} measurements not saved ({self.counts['requeued']} put back in "
                         f"the plan), {left}")
        return "the machine misled the profile: " + "; ".join(parts)


class Unwatched:
    """A run without the checks: every measurement is saved as it comes (``Watch``'s interface)."""

    stopped: str | None = None
    pending: list[tuple] = []

    def start(self, jobs: Sequence[Any], time_one: Callable[[Any, str], float], name: Callable[[Any, str], str]) -> None:
        """Nothing to time."""

    def measure(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, bool]:
        """``fn(*args)``, never judged contended."""
        return fn(*args), False

    def add(self, done: tuple, bad: bool) -> tuple[list[tuple], list]:
        """``done``, to save now."""
        return [done], []

    def finish(self) -> list[tuple]:
        """Nothing held back."""
        return []

    unsettled = finish

    def record(self) -> None:
        """No record."""
        return None

    summary = record


def noise_note(earlier: Sequence[dict[str, Any]], measured: int, remeasured: int) -> str | None:
    """A line when this run's share of measurements re-measured for noise rose: above twice (and 10
    points above) the median of the ``earlier`` runs' (``profile_log`` records), or without them
    above ``NOISY_SHARE``.  None when it did not, or for fewer than 10 measurements."""
    if measured < 10:
        return None
    share = remeasured / measured
    before = [r["remeasured"] / r["measured"] for r in earlier if r.get("measured") and "remeasured" in r]
    usual = statistics.median(before) if before else None
    if share <= (NOISY_SHARE if usual is None else max(2 * usual, usual + 0.1)):
        return None
    against = f"against {usual:.0%} in earlier runs into this table" if usual is not None else "a noisy machine"
    return (f"noise: {remeasured} of {measured} measurements ({share:.0%}) were re-measured for noise, {against}; "
            "nas.validate shows whether the table holds up, and a quiet machine gives steadier figures")
