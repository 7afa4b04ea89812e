"""What a budgeted (or partial) table reached, and what more measuring would buy.

``nas.profile budget_min=M`` stops measuring when the minutes are spent (the blocks the spaces'
networks use most and the calibration networks first); the learned block model predicts the
blocks it did not reach.  ``nas.validate`` then answers two questions with ``budget_report``:

* what the table covers: the share of the spaces' blocks measured, and the share of the held-out
  networks' time (by the predictor's per-layer figures) that falls in measured blocks;
* what the minutes bought: the predictor refitted on what the first k minutes of measuring gave,
  for several k up to what was measured, each scored on the same held-out networks.  The trend
  of that curve, against the share of the networks' time measured, estimates what measuring the
  rest would give; it is stated as an estimate, and not at all when the curve shows no steady
  trend.

The order and timing of the measurements come from the table's ``metadata["profile_log"]``
(written by ``nas.latency.profile.jobs.run_jobs``: each run's budget and every measurement with the
seconds since that run started; runs follow each other on the minutes axis).  A table without
one (built before the log, imported from a bundle) is ordered by its entries' ``measured_at``,
the time of each entry's last round, with pauses over ``GAP_S`` left out: an approximation the
report names.  Entries the log does not hold count as measured before the logged runs.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from sklearn.base import clone

from nas.arch import Arch, BlockKey
from nas.latency.predict import score
from nas.latency.profile.jobs import job_id
from nas.latency.tables import Entry, LatencyTable

__all__ = ["GAP_S", "MIN_ENTRIES", "Order", "budget_plot", "budget_report", "layer_times", "measuring_order",
           "table_at", "time_covered"]

GAP_S = 600.0  # without a profile log: a pause longer than this between entries is not measuring time
MIN_ENTRIES = 10  # a curve point needs this many block entries for the learned model to fit
FRACTIONS = (0.1, 0.2, 0.35, 0.5, 0.75, 1.0)  # the curve's points, as shares of the minutes measured
MIN_R2 = 0.5  # the trend's fit must explain this share of the curve's variance to be extrapolated


@dataclass
class Order:
    """When each round of each item of a table was measured: ``events`` of
    ``(seconds of measuring, kind, item, round)`` in order; ``source`` says from what."""

    events: list[tuple[float, str, Any, int]]
    source: str  # "profile log" or "measured_at"
    seconds: float  # measuring time in all
    unlogged: int = 0  # items the profile log does not hold (placed at the start)
    runs: list[dict[str, Any]] = field(default_factory=list)  # the log's runs, without their jobs
    block_round_s: float | None = None  # mean seconds of one block measurement


def measuring_order(table: LatencyTable) -> Order:
    """The table's measurements in the order they were made (see the module docs)."""
    log = table.metadata.get("profile_log") or []
    if not log:
        return _order_by_measured_at(table)
    items = {job_id(k, "block"): ("block", k) for k in table.entries}
    items.update({job_id(a, "network"): ("network", a) for a in table.networks})
    events, offset, seen, block_s = [], 0.0, set(), []
    for run in log:
        last = 0.0
        for ident, rnd, t in run.get("jobs", []):
            if ident in items:
                kind, item = items[ident]
                events.append((offset + float(t), kind, item, int(rnd)))
                seen.add(ident)
                if kind == "block":
                    block_s.append(float(t) - last)
            last = float(t)
        offset += float(run.get("seconds") or last)
    early = [(0.0, kind, item, _rounds(table, kind, item)) for ident, (kind, item) in items.items() if ident not in seen]
    runs = [{k: v for k, v in run.items() if k != "jobs"} for run in log]
    return Order(early + events, "profile log", offset, len(early), runs,
                 float(np.mean(block_s)) if block_s else None)


def _rounds(table: LatencyTable, kind: str, item: Any) -> int:
    return (table.entries if kind == "block" else table.networks)[item].rounds


def _order_by_measured_at(table: LatencyTable) -> Order:
    stamped = [(e.measured_at, "block", k, e.rounds) for k, e in table.entries.items()]
    stamped += [(e.measured_at, "network", a, e.rounds) for a, e in table.networks.items()]
    stamped.sort(key=lambda s: s[0])
    events, clock, prev = [], 0.0, None
    for at, kind, item, rnd in stamped:
        t = _parse(at)
        if prev is not None and t is not None:
            step = t - prev
            clock += step if 0 <= step <= GAP_S else 0.0
        prev = t if t is not None else prev
        events.append((clock, kind, item, rnd))
    n_blocks = sum(s[1] == "block" for s in stamped)
    return Order(events, "measured_at", clock, block_round_s=clock / n_blocks if n_blocks and clock else None)


def _parse(at: str) -> float | None:
    try:
        return _dt.datetime.fromisoformat(at).timestamp()
    except (TypeError, ValueError):
        return None


def table_at(table: LatencyTable, order: Order, seconds: float) -> LatencyTable:
    """The table as the first ``seconds`` of measuring left it: the items measured by then, each
    with the rounds it had by then (its first rounds' median)."""
    done: dict[tuple[str, Any], int] = {}
    for t, kind, item, rnd in order.events:
        if t <= seconds:
            done[(kind, item)] = max(done.get((kind, item), 0), rnd)
    sub = LatencyTable(metadata=dict(table.metadata))
    for (kind, item), r in done.items():
        e = (table.entries if kind == "block" else table.networks)[item]
        (sub.entries if kind == "block" else sub.networks)[item] = _first_rounds(e, r)
    return sub


def _first_rounds(e: Entry, r: int) -> Entry:
    if r >= e.rounds:
        return e
    return Entry(float(statistics.median(e.rounds_ms[:r])), e.p10_ms, e.p90_ms, e.n, e.remeasured, e.measured_at,
                 e.rounds_ms[:r])


def layer_times(predictor, archs: Sequence[Arch]) -> dict[BlockKey, float]:
    """Each block's summed per-layer time (``predictor``'s figures) over ``archs``."""
    out: dict[BlockKey, float] = {}
    for a in archs:
        for k, row in zip(a.keys(), predictor.breakdown(a)):
            out[k] = out.get(k, 0.0) + row["ms"]
    return out


def time_covered(times: dict[BlockKey, float], measured: set | dict) -> float:
    """The share of the time in ``times`` (``layer_times``) that falls in blocks ``measured``."""
    tot = sum(times.values())
    return sum(v for k, v in times.items() if k in measured) / tot if tot > 0 else 1.0


def budget_report(predictor, vs, *, space_keys: Sequence[BlockKey], reached: dict[str, float],
                  always: bool = False) -> dict[str, Any] | None:
    """The budget section of the ``nas.validate`` report (see the module docs), or None when the
    table holds every block of the spaces and was not built under a budget (unless ``always``).

    ``predictor``: the fitted ``LatencyPredictor`` (its parameters are reused for every refit);
    ``vs``: the held-out ``ValidationSet``; ``space_keys``: the spaces' blocks at the validated
    resolution; ``reached``: the full predictor's held-out score."""
    table = predictor.table_
    keys = set(space_keys)
    measured = sum(k in table.entries for k in keys)
    order = measuring_order(table)
    budgets = [r.get("budget_min") for r in order.runs if r.get("budget_min")]
    if not always and measured == len(keys) and not budgets:
        return None
    times = layer_times(predictor, vs.archs)
    out: dict[str, Any] = {
        "blocks": {"measured": measured, "of": len(keys), "share": measured / len(keys) if keys else 1.0},
        "time_covered": time_covered(times, table.entries),
        "networks": len(table.networks), "reached": reached, "budget_min": budgets,
        "stopped_by_budget": any(r.get("stopped_by_budget") for r in order.runs),
        "order_source": order.source, "unlogged": order.unlogged, "minutes_measured": order.seconds / 60,
    }
    out["curve"] = _curve(predictor, vs, order, times)
    rounds = int((table.metadata.get("measurement") or {}).get("rounds") or 1)
    left = len(keys) - measured
    mins = left * rounds * order.block_round_s / 60 if order.block_round_s else None
    out["remaining"] = {"blocks": left, "rounds": rounds, "minutes": mins,
                        "seconds_per_block_round": order.block_round_s}
    out["extrapolation"] = _extrapolate(out["curve"], out["time_covered"]) if left else None
    out["sentence"] = _sentence(out)
    return out


def _curve(predictor, vs, order: Order, times: dict[BlockKey, float]) -> list[dict[str, Any]]:
    """The predictor refitted on the first k minutes' table, for k at ``FRACTIONS`` of the
    minutes measured, scored on the held-out networks."""
    meas = np.asarray(vs.measured_ms, float)
    points, seen = [], set()
    for f in FRACTIONS:
        s = f * order.seconds
        sub = table_at(predictor.table_, order, s)
        sig = (len(sub.entries), len(sub.networks))
        if len(sub.entries) < MIN_ENTRIES or sig in seen:
            continue
        seen.add(sig)
        with _quiet("nas.latency.predict.predictor"):  # "too few networks to calibrate": the point says so itself
            model = clone(predictor).set_params(refresh=False).fit(sub, mismatched=predictor.mismatched_)
        pred = model.predict(vs.archs)
        points.append({"minutes": s / 60, "blocks": len(sub.entries), "networks": len(sub.networks),
                       "calibrated": model.calibration_ is not None,
                       "time_covered": time_covered(times, sub.entries), **score(pred, meas)})
    return points


@contextlib.contextmanager
def _quiet(name: str):
    """The logger ``name`` without its warnings for a while."""
    lg = logging.getLogger(name)
    level = lg.level
    lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        lg.setLevel(level)


def _extrapolate(curve: list[dict[str, Any]], covered: float) -> dict[str, Any] | None:
    """A straight line of ±10% share against the share of the networks' time measured, over the
    curve's calibrated points, read at 1.0; None without at least 3 such points at distinct shares,
    a rising trend and a fit explaining ``MIN_R2`` of the variance."""
    pts = [(p["time_covered"], p["within_10pct"]) for p in curve if p["calibrated"]]
    x, y = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    if len(pts) < 3 or np.ptp(x) < 0.05:
        return None
    b, a = np.polyfit(x, y, 1)
    resid = y - (a + b * x)
    r2 = 1 - float(resid @ resid) / float(((y - y.mean()) ** 2).sum()) if np.ptp(y) > 0 else 0.0
    if b <= 0 or r2 < MIN_R2:
        return None
    at = float(np.clip(a + b, y[-1], 1.0))
    return {"within_10pct": at, "slope": float(b), "r2": r2, "points": len(pts), "from_time_covered": covered}


def _sentence(b: dict[str, Any]) -> str:
    rem, ex, reached = b["remaining"], b["extrapolation"], b["reached"]
    if not rem["blocks"]:
        return ("every block of the spaces is measured: more minutes would add rounds (steadier figures), "
                "not coverage")
    m = rem["minutes"]
    mins = f"~{m:.{0 if m >= 10 else 1}f} min at the measured rate" if m is not None else "time unknown"
    head = f"measuring the remaining {rem['blocks']} blocks ({mins}, {rem['rounds']} round(s) each)"
    if ex is None:
        return (f"{head}: the curve shows no steady trend to extrapolate (see its measured points); the table "
                f"reaches {100 * reached['within_10pct']:.1f}% within ±10% as it is")
    return (f"{head} would bring the held-out share within ±10% from {100 * reached['within_10pct']:.1f}% to about "
            f"{100 * ex['within_10pct']:.0f}%: an estimate from the curve's trend (a line through "
            f"{ex['points']} points against the measured share of the networks' time, R² {ex['r2']:.2f}), "
            "not a measurement")


def budget_plot(b: dict[str, Any], path, *, title: str = "") -> str | None:
    """Held-out ±5% / ±10% shares and the measured share of the networks' time against minutes of
    measuring; the path written.  A ``Figure`` of its own: no pyplot state, no backend chosen for the process."""
    c = b["curve"]
    x = [p["minutes"] for p in c]
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.subplots()
    ax.plot(x, [100 * p["within_10pct"] for p in c], "o-", label="within ±10%")
    ax.plot(x, [100 * p["within_5pct"] for p in c], "s-", label="within ±5%")
    ax.plot(x, [100 * p["time_covered"] for p in c], "--", color="grey", label="networks' time in measured blocks")
    ex, rem = b.get("extrapolation"), b["remaining"]
    if ex and rem.get("minutes") and x:
        ax.plot([x[-1], x[-1] + rem["minutes"]], [100 * c[-1]["within_10pct"], 100 * ex["within_10pct"]], ":",
                color="tab:blue", label="±10% (trend estimate)")
    ax.set_xlabel("minutes of measuring")
    ax.set_ylabel("%")
    ax.set_ylim(0, 102)
    ax.legend(fontsize=8, loc="best")
    ax.set_title(title or "held-out accuracy against minutes of measuring", fontsize=10)
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=110)
    return str(p)
