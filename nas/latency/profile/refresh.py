"""Refresh on the fly: re-time a few of a table's calibration networks now and rescale its predictions.

A machine's speed moves within minutes (another process on a sibling core, a clock frequency, a
noisy cloud neighbour): a 2-minute profile validated right after it can find the machine a few
percent slower or faster, enough to push networks predicted at the edge past ±10%.  On the machine
a table was measured on, ``nas.search``, ``nas.predict`` and ``nas.validate`` therefore start by
re-timing a few of the table's own calibration networks (the anchors: each space's networks
nearest its median figure, taken in turn from every space asked for, as many as
``REFRESH.budget_s`` seconds allow by the profiler's cost model), one round each with the table's
own measuring settings, and rescale:

* each space with at least ``SPACE_MIN`` anchors by the median of its anchors' ratios (now over
  the figure the calibration was fitted on): a machine that moved unevenly (small networks less
  than large ones) moves each space by its own factor;
* everything else (timm models, networks of other spaces) by the median over all anchors.

Nothing is re-timed on another machine than the table's (another CPU, a device measured through a
bundle, a rehearsal), for a table without calibration networks, or where the anchors would take
longer than the budget.  A re-timing the machine misled is measured but not applied: one that
waited for the CPU (``nas.latency.profile.watch.Contention``), or whose ratios scatter as
``nas.latency.predict.scoring.drift_verdict`` would call noisy (around each
space's own factor).  Every figure rescaled this way says so
(``Prediction.rescaled_by``), and ``Refresh.line`` is the sentence the commands print.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from nas.arch import Arch
from nas.latency.predict import NOISY_SPREAD, LatencyPredictor, table_noise
from nas.latency.profile.jobs import expected_seconds
from nas.latency.profile.options import REFRESH
from nas.latency.profile.watch import Contention, contended
from nas.latency.runtimes import ProfileSettings, device_identity, get_runtime, measure_arch
from nas.latency.tables import LatencyTable, now_iso
from nas.machine import RuntimeUnavailable
from nas.target import Target

__all__ = ["MIN_ANCHORS", "SPACE_MIN", "Refresh", "pick_anchors", "refresh_model", "retime", "why_not_retimed"]

log = logging.getLogger(__name__)

MIN_ANCHORS = 3  # fewer anchors fit the budget: nothing is re-timed (one network would set the scale)
SPACE_MIN = 2  # a space needs this many anchors for a factor of its own; else the median over all


@dataclass(frozen=True)
class Refresh:
    """What a refresh on the fly measured and did.

    Attributes:
        ratio: the median, over every anchor, of its latency now over the figure the calibration was
            fitted on; what networks of no space in ``per_space`` are scaled by.
        per_space: each space's own median ratio (spaces with at least ``SPACE_MIN`` anchors).
        anchors: ``(space, ms now, ms the calibration was fitted on)`` per re-timed network.
        seconds: how long the re-timing took.
        measured_at: when (ISO, UTC).
        applied: whether the predictions were rescaled (False: the machine misled the re-timing).
        note: why it was not applied, when it was not.
    """

    ratio: float
    per_space: dict[str, float]
    anchors: tuple[tuple[str, float, float], ...]
    seconds: float
    measured_at: str
    applied: bool = True
    note: str = ""
    verdict: dict[str, Any] = field(default_factory=dict)

    def ratio_for(self, name: str | None) -> float:
        """The factor a network of space ``name`` (its ``Arch.name``) is scaled by: 1 when not applied."""
        if not self.applied:
            return 1.0
        return self.per_space.get(name or "", self.ratio)

    @property
    def how(self) -> str:
        """The words a rescaled figure carries (``Prediction.rescaled_by``)."""
        return f"re-timing {len(self.anchors)} of its calibration networks now (refresh on the fly, {self.measured_at})"

    def line(self) -> str:
        """The sentence the commands print."""
        if not self.anchors:
            return f"table not refreshed on the fly: {self.note}; predictions are as the table was measured"
        spaces = ", ".join(f"{g} {v:.3f}x" for g, v in self.per_space.items())
        what = (f"its calibration networks run at {self.ratio:.3f}x their table figures now (median of "
                f"{len(self.anchors)} re-timed in {self.seconds:.1f} s{'; ' + spaces if spaces else ''})")
        if not self.applied:
            return f"table not refreshed: {what}, but {self.note}, so predictions are as the table was measured"
        pct = 100 * (self.ratio - 1)
        return f"table refreshed on the fly: {what}; predictions rescaled by {pct:+.1f}%"

    def to_dict(self) -> dict[str, Any]:
        """The record a report stores."""
        return {**asdict(self), "anchors": [list(a) for a in self.anchors], "how": self.how}


def why_not_retimed(table: LatencyTable, target: Target, here: dict[str, Any] | None = None) -> str | None:
    """Why ``table`` cannot be re-timed on this machine for ``target``, or None when it can.

    Args:
        table: the target's measured table.
        target: the target.
        here: this machine's identity (default: ``device_identity`` of the target's device kind).

    Returns:
        None on the machine the table was measured on, in process (not through a device bundle, not
        a rehearsal), with calibration networks to re-time; else the reason, in words.
    """
    meta = table.metadata
    if not table.networks:
        return "the table holds no calibration networks"
    if table.rehearsal_label:
        return f"the table is a {table.rehearsal_label}"
    if meta.get("bundle") or (meta.get("measurement") or {}).get("via") == "device bundle":
        return "the table was measured through a device bundle"
    here = here if here is not None else device_identity(target.device.kind)
    if (meta.get("device") or {}).get("machine") not in (None, here.get("machine")):
        return "the table was measured on another kind of machine"
    return table.measured_elsewhere(here)


def pick_anchors(table: LatencyTable, figures: dict[Arch, float], settings: ProfileSettings, *,
                 spaces: Sequence[str] | None = None, budget_s: float = REFRESH.budget_s) -> tuple[list[Arch], float]:
    """The anchors to re-time and their expected seconds (the profiler's cost model, export included).

    Each space's calibration networks nearest its median figure come first; the spaces take turns,
    and a network that would take the total past ``budget_s`` is passed over.

    Args:
        table: the table (its calibration networks, grouped by ``Arch.name``).
        figures: each calibration network's figure (what the calibration was fitted on).
        settings: how each is timed.
        spaces: the spaces whose networks are re-timed (None or none of the table's: all of them).
        budget_s: the expected seconds at most.

    Returns:
        The anchors in the order taken, and their expected seconds.
    """
    by: dict[str, list[Arch]] = {}
    for a in table.networks:
        if a in figures:
            by.setdefault(a.name or "?", []).append(a)
    wanted = [s for s in dict.fromkeys(spaces or ()) if s in by] or sorted(by)
    queues = []
    for s in wanted:
        med = float(np.median([figures[a] for a in by[s]]))
        queues.append(sorted(by[s], key=lambda a: (abs(math.log(figures[a] / med)), a.digest())))
    taken, spent = [], 0.0
    for i in range(max((len(q) for q in queues), default=0)):
        for q in queues:
            if i < len(q):
                cost = expected_seconds(q[i], "network", settings, figures[q[i]])
                if spent + cost <= budget_s:
                    taken.append(q[i])
                    spent += cost
    return taken, spent


def retime(anchors: Sequence[Arch], figures: dict[Arch, float], measure: Callable[[Arch], float], *,
           record: dict[str, Any] | None = None, contention: Contention | None = None,
           clock: Callable[[], float] = time.monotonic) -> Refresh:
    """Time each anchor now (``measure``: ms) and compare with its calibration figure.

    Args:
        anchors: the networks (``pick_anchors``).
        figures: their figures the calibration was fitted on.
        measure: times one network now, in ms.
        record: the table's reproducibility record (how far one entry moves when re-timed), for the
            noise check (as ``drift_verdict``'s, around each space's own factor).
        contention: reads this process's run-queue wait (default: from ``/proc``).
        clock: the wall clock.

    Returns:
        The ``Refresh``; not applied when the re-timing waited for the CPU or its ratios are noisy.
    """
    contention = contention or Contention()
    t0 = clock()
    contention.start()
    rows = tuple((a.name or "?", float(measure(a)), float(figures[a])) for a in anchors)
    busy = contended(*contention.since())
    seconds = clock() - t0
    ratios: dict[str, list[float]] = {}
    for g, now, then in rows:
        ratios.setdefault(g, []).append(now / then)
    overall = float(np.median([r for rs in ratios.values() for r in rs]))
    per = {g: float(np.median(rs)) for g, rs in ratios.items() if len(rs) >= SPACE_MIN}
    # noise is judged around each space's own factor: a machine that moved unevenly is not noisy
    spread = float(np.median([abs(r / per.get(g, overall) - 1) for g, rs in ratios.items() for r in rs]))
    noise = table_noise(record)
    verdict = {"median": overall, "spread": spread, "n": len(rows), "table_noise": noise,
               "noisy": bool(spread > max(2 * noise, NOISY_SPREAD))}
    note = ("another process shared the CPU while it re-timed them" if busy else
            f"their ratios scatter ±{100 * spread:.1f}% (the machine is noisy now)" if verdict["noisy"] else "")
    return Refresh(overall, per, rows, seconds, now_iso(), applied=not note, note=note, verdict=verdict)


def refresh_model(model, target: Target, *, spaces: Sequence[str] | None = None, budget_s: float = REFRESH.budget_s,
                  measure: Callable[[Arch], float] | None = None, settings: ProfileSettings | None = None,
                  here: dict[str, Any] | None = None, apply: bool = True,
                  contention: Contention | None = None) -> Refresh | None:
    """Re-time a few of the model's calibration networks on this machine now and rescale the model by
    their median ratio (``LatencyPredictor.rescale_now``), when this machine is the table's.

    Args:
        model: a fitted ``LatencyPredictor`` (anything else is left alone).
        target: its target (its runtime times the anchors).
        spaces: the spaces the predictions are for (a search's space, an Arch's); their anchors are
            re-timed and the model is scaled by their median.  None: every space of the table.
        budget_s: the re-timing's expected seconds at most (``pick_anchors``).
        measure: times one network now, in ms (default: ``measure_arch`` with the target's runtime and
            the table's measuring settings, one round).
        settings: how each anchor is timed (default: the table's own settings, one round).
        here: this machine's identity (default: ``device_identity``).
        apply: rescale ``model`` (False: only measure; ``nas.validate`` applies each space's factor itself).
        contention: reads this process's run-queue wait while re-timing (default: from ``/proc``).

    Returns:
        The ``Refresh``; ``applied=False`` with its ``note`` where the anchors would take longer than
        ``budget_s``, the runtime is not available or the machine misled the re-timing; None where
        nothing was re-timed because the table is not this machine's (or the model is not a predictor).
    """
    if not isinstance(model, LatencyPredictor) or model.mismatched_:
        return None
    table = model.table_
    why = why_not_retimed(table, target, here)
    if why is not None:
        log.info("not refreshed on the fly: %s", why)
        return None
    settings = settings or table_settings(table)
    figures = model.calibration_figures()
    anchors, cost = pick_anchors(table, figures, settings, spaces=spaces, budget_s=budget_s)
    if len(anchors) < MIN_ANCHORS:
        return _skipped(f"re-timing {MIN_ANCHORS} of its calibration networks would take longer than {budget_s:g} s")
    if measure is None:
        try:
            runtime = get_runtime(target)
            runtime.check()
        except RuntimeUnavailable as e:
            return _skipped(f"its runtime is not available here ({e})")

        def measure(a: Arch) -> float:
            return measure_arch(a, runtime, settings).median_ms

    ref = retime(anchors, figures, measure, record=table.metadata.get("reproducibility"), contention=contention)
    if ref.applied and apply:
        model.rescale_now(ref.ratio, ref.how)
    return ref


def table_settings(table: LatencyTable) -> ProfileSettings:
    """The table's own measuring settings (``metadata.measurement``), one round: how an anchor is re-timed."""
    m = table.metadata.get("measurement") or {}
    base = ProfileSettings()
    return ProfileSettings(warmup=int(m.get("warmup", base.warmup)), repeats=int(m.get("repeats", base.repeats)),
                           min_time_s=float(m.get("min_time_s", base.min_time_s)),
                           max_spread=float(m.get("max_spread", base.max_spread)),
                           remeasure=int(m.get("remeasure", base.remeasure)), rounds=1)


def _skipped(note: str) -> Refresh:
    return Refresh(1.0, {}, (), 0.0, now_iso(), applied=False, note=note)
