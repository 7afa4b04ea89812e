"""Does a table reproduce itself?  ``nas.profile`` re-times a seeded sample of the entries it holds
(blocks and calibration networks) at the end of a run and records how often the new figure lies
within ±5% / ±10% of the table's: the ceiling of any prediction read from that table, since a
predictor built on figures that move by 20% between two timings cannot be expected to land within
10% of a third.  ``nas.validate`` reports the record beside the predictor and warns when it is below
``SUPPORTS_10PCT`` within ±10%.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nas.arch import Arch
from nas.latency.predict import score
from nas.latency.runtimes import ProfileSettings, measure_arch, measure_items, measure_key
from nas.latency.tables import LatencyTable, now_iso

__all__ = ["CEILING_OF", "SUPPORTS_10PCT", "record", "reproducibility", "reproducibility_lines", "reproducibility_warning",
           "retime_sample", "summary_line", "table_ceiling"]

log = logging.getLogger(__name__)

SUPPORTS_10PCT = 0.95  # a table re-timed within ±10% this often can support ±10% predictions
# what each reproducibility figure bounds: a method reading those figures cannot agree with now more often
CEILING_OF = {"as_built": "predictor", "rescaled": "predictor_rescaled", "recalibration": "predictor_stored"}


def retime_sample(table: LatencyTable, runtime, settings: ProfileSettings, *, blocks: int = 16, networks: int = 8,
                  seed: int = 0, progress: bool = True) -> dict[str, Any] | None:
    """Re-time up to ``blocks`` block entries and ``networks`` calibration networks of ``table`` (a
    seeded sample; one round each, as ``nas.profile`` measures) and return the record stored as
    ``metadata["reproducibility"]``, or None when the table holds nothing to re-time.

    Args:
        table: the table just measured.
        runtime: the runtime it was measured with (``nas.latency.runtimes.get_runtime``).
        settings: the profile's settings (warm-up, repeats, ``min_time_s``, re-measures of a noisy round).
        blocks, networks: how many of each to re-time.
        seed: the sample's seed.
        progress: show a progress bar.

    Returns:
        ``{"entries", "blocks", "networks", "within_5pct", "within_10pct", "median_dev_pct", "worst",
        "timing", "measured_at"}``; the shares are fractions of all re-timed entries.
    """
    rng = np.random.default_rng(seed)
    keys = _sample(sorted(table.entries, key=str), blocks, rng)
    nets = _sample(sorted(table.networks, key=lambda a: a.digest()), networks, rng)
    items = [("block", k) for k in keys] + [("network", a) for a in nets]
    if not items:
        return None
    now: dict[int, float] = {}

    def one(item):
        kind, x = item
        return measure_key(x, runtime, settings) if kind == "block" else measure_arch(x, runtime, settings)

    measure_items(items, one, lambda item, e: now.__setitem__(id(item), e.median_ms), progress=progress,
                  desc="re-timing a sample", unit="entry")
    then = [(table.entries[x] if kind == "block" else table.networks[x]).median_ms for kind, x in items]
    got = [now[id(item)] for item in items]
    s = score(got, then)
    dev = np.abs(np.asarray(got) / np.asarray(then) - 1)
    worst = items[int(np.argmax(dev))]
    return {"entries": len(items), "blocks": len(keys), "networks": len(nets),
            "within_5pct": s["within_5pct"], "within_10pct": s["within_10pct"],
            "median_dev_pct": float(100 * np.median(dev)),
            "worst": {"what": _label(worst), "dev_pct": float(100 * dev.max())},
            "timing": runtime.timing, "measured_at": now_iso()}


def _sample(xs: list, n: int, rng: np.random.Generator) -> list:
    if len(xs) <= n:
        return list(xs)
    return [xs[i] for i in sorted(rng.choice(len(xs), n, replace=False))]


def _label(item) -> str:
    kind, x = item
    return str(x) if kind == "block" else f"network {x.name or x.digest()[:8]}"


def summary_line(rec: dict[str, Any]) -> str:
    """The record as one sentence."""
    return (f"re-timed {rec['blocks']} blocks and {rec['networks']} networks of the table at the end of its profile "
            f"({rec['measured_at']}): {100 * rec['within_10pct']:.1f}% within ±10% of their table figure, "
            f"{100 * rec['within_5pct']:.1f}% within ±5% (median deviation {rec['median_dev_pct']:.1f}%, worst "
            f"{rec['worst']['dev_pct']:.1f}%: {rec['worst']['what']})")


def reproducibility_warning(rec: dict[str, Any] | None, *, kind: str = "cpu", timing: str = "eager",
                            threshold: float = SUPPORTS_10PCT) -> str | None:
    """Why this table cannot support ±10% predictions (its re-timing agreed within ±10% less often
    than ``threshold``), with what to do about it; None when it can or was never re-timed."""
    if not rec or rec["within_10pct"] >= threshold:
        return None
    fix = ("time it as CUDA-graph replays (target cuda_graph=true): at batch 1 eager GPU timing measures the "
           "host's dispatch" if kind != "cpu" and timing != "cuda_graph" else
           "measure on a quiet machine (pin with taskset -c N, nothing else running) with more repeats "
           "(profile.min_time_s) and rounds (profile.rounds)")
    return (f"the table reproduced itself within ±10% for only {100 * rec['within_10pct']:.0f}% of "
            f"{rec['entries']} re-timed entries (below {100 * threshold:.0f}%), so no predictor read from it can "
            f"support ±10%: {fix}")


def record(table: LatencyTable, runtime, settings: ProfileSettings, *, progress: bool,
           say: Callable[[str], None]) -> dict[str, Any] | None:
    """Re-time a sample (``retime_sample``), store it in ``table.metadata["reproducibility"]`` and say
    it, with the warning when the table cannot support ±10%."""
    rec = retime_sample(table, runtime, settings, progress=progress)
    if rec is None:
        return None
    table.metadata["reproducibility"] = rec
    say(f"reproducibility: {summary_line(rec)}")
    kind = str((table.metadata.get("device") or {}).get("kind", "cpu"))
    warn = reproducibility_warning(rec, kind=kind, timing=rec["timing"])
    if warn:
        say(f"WARNING: {warn}")
    return rec


def table_ceiling(table, report: dict[str, Any]) -> None:
    """The table's own reproducibility beside the predictor: ``nas.profile``'s re-timing record
    (``report["table_reproducibility"]``) and, when it or this run's re-measured calibration networks
    agree within ±10% less often than ``SUPPORTS_10PCT``, ``report["reproducibility_warning"]``."""
    meta = table.metadata
    rec = meta.get("reproducibility")
    kind = str((meta.get("device") or {}).get("kind", "cpu"))
    timing = str((meta.get("runtime") or {}).get("timing") or "eager")
    report["timing"] = table.timing_label or "eager"
    if rec:
        report["table_reproducibility"] = rec
    warn = reproducibility_warning(rec, kind=kind, timing=timing)
    built = (report.get("reproducibility") or {}).get("as_built")
    if warn is None and built and built["n"] >= 5 and built["within_10pct"] < SUPPORTS_10PCT:
        warn = reproducibility_warning({"within_10pct": built["within_10pct"], "entries": built["n"]},
                                       kind=kind, timing=timing)
        warn = warn and warn.replace("re-timed entries", "calibration networks re-measured now")
    if warn:
        report["reproducibility_warning"] = warn
        log.warning(warn)


def reproducibility(anchors: dict[str, list[tuple[float, float]]], scale: float,
                    remeasured: Sequence[tuple[Arch, float]] = (), record: dict | None = None) -> dict[str, dict[str, float]]:
    """The table's own figure of each re-measured calibration network as its "prediction" of
    the measurement now: ``as_built`` and ``rescaled`` (times the drift ``scale``, the median over
    these same networks): the ceilings of ``predictor`` and ``predictor_rescaled``.  With a
    recalibration ``record``, also ``recalibration``: its figure of each of the ``remeasured``
    networks it holds, the ceiling of ``predictor_stored`` (keys: ``CEILING_OF``)."""
    now = np.array([n for pairs in anchors.values() for n, _ in pairs])
    then = np.array([t for pairs in anchors.values() for _, t in pairs])
    out = {"as_built": score(then, now), "rescaled": score(then * scale, now)}
    figs = (record or {}).get("network_ms") or {}
    pairs = [(figs[a.digest()], ms) for a, ms in remeasured if a.digest() in figs]
    if pairs:
        out["recalibration"] = score([t for t, _ in pairs], [n for _, n in pairs])
    return out


def reproducibility_lines(report: dict[str, Any]) -> list[str]:
    """The report's reproducibility figures as sentences (``nas.validate`` and bench_predictor)."""
    return [f"reproducibility ({how}): the {'recalibration' if how == 'recalibration' else 'table'}'s own figure of "
            f"the {s['n']} re-measured calibration networks is within ±5% of the new measurement for "
            f"{100 * s['within_5pct']:.1f}%, ±10% for {100 * s['within_10pct']:.1f}% (the ceiling of {CEILING_OF[how]})"
            for how, s in report.get("reproducibility", {}).items()]
