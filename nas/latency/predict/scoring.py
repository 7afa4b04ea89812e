"""Scores of predicted against measured latency, and the drift of a machine since its table.

Used by the validation (``nas.latency.profile.validate``) and by the profiler's refresh / recalibrate
(``nas.latency.profile.profiler``); kept below both so neither imports the other.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import kendalltau

__all__ = ["LATENCY_RANGES_MS", "MIN_DRIFT", "NOISE_WITHOUT_RECORD", "NOISY_SPREAD", "drift_ratios", "drift_verdict",
           "drift_warning", "score", "score_by_range", "table_noise"]

MIN_DRIFT = 0.02  # a median shift below 2% is never called drift, however quiet the table
NOISE_WITHOUT_RECORD = 0.02  # a table without a reproducibility record: its entries assumed to re-time within ±2%
NOISY_SPREAD = 0.03  # re-timed networks whose ratios scatter more than this (and twice the table's noise): noisy
# the measured latency ranges a validation reports apart (ms): small networks, mobile models, large ones
LATENCY_RANGES_MS = (0.0, 1.0, 3.0, 10.0, 30.0, float("inf"))


def score(pred: Sequence[float], meas: Sequence[float]) -> dict[str, float]:
    """within_5pct, within_10pct (fractions), mape (%), kendall_tau, n."""
    p, m = np.asarray(pred, float), np.asarray(meas, float)
    err = np.abs(p - m) / m
    tau = float(kendalltau(p, m).statistic) if len(m) > 1 else float("nan")
    return {
        "within_5pct": float(np.mean(err <= 0.05)),
        "within_10pct": float(np.mean(err <= 0.10)),
        "mape": float(100 * np.mean(err)),
        "kendall_tau": tau,
        "n": int(len(m)),
    }


def range_label(lo: float, hi: float) -> str:
    """``"1-3 ms"``, ``"< 1 ms"``, ``">= 30 ms"``: a range of ``LATENCY_RANGES_MS`` in words."""
    if lo <= 0:
        return f"< {hi:g} ms"
    return f">= {lo:g} ms" if math.isinf(hi) else f"{lo:g}-{hi:g} ms"


def score_by_range(pred: Sequence[float], meas: Sequence[float],
                   edges: Sequence[float] = LATENCY_RANGES_MS) -> dict[str, dict[str, float]]:
    """``score`` per range of the *measured* latency (``edges`` in ms, lower bound included).

    Args:
        pred: predicted ms.
        meas: measured ms, one per prediction.
        edges: the ranges' bounds, increasing.

    Returns:
        ``range_label(lo, hi) -> score(...)`` for each range that holds a measurement, in order, each with
        ``median_error_pct``: the signed median of (predicted - measured) / measured, in % (negative:
        predicted low).
    """
    p, m = np.asarray(pred, float), np.asarray(meas, float)
    out: dict[str, dict[str, float]] = {}
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = (m >= lo) & (m < hi)
        if sel.any():
            out[range_label(lo, hi)] = {**score(p[sel], m[sel]),
                                        "median_error_pct": float(100 * np.median((p[sel] - m[sel]) / m[sel]))}
    return out

def drift_ratios(anchors: dict[str, list[tuple[float, float]]]) -> tuple[float, dict[str, float], int]:
    """From ``ValidationSet.anchors`` (group -> (now, table) ms of re-measured calibration networks):
    the median now/table ratio over all of them, the median per group, and how many there are."""
    ratios = [now / then for pairs in anchors.values() for now, then in pairs]
    per = {g: float(np.median([now / then for now, then in pairs])) for g, pairs in anchors.items()}
    return float(np.median(ratios)), per, len(ratios)


def drift_verdict(anchors: dict[str, list[tuple[float, float]]], record: dict[str, Any] | None) -> dict[str, Any]:
    """Has the machine drifted since its table, or is it noisy now?  Judged on all re-measured calibration
    networks together, against the table's own reproducibility.

    The table's record (``metadata["reproducibility"]``, written by ``nas.profile``) gives the median
    deviation of one re-timed entry, ``noise``.  The median of ``n`` such ratios moves by chance about
    ``1.2533 * noise / 0.6745 / sqrt(n)`` (the standard error of a median of normal draws), so the median
    now/table ratio is called drift when it lies more than three of those, and at least ``MIN_DRIFT``,
    from 1.  The ratios' own spread (median deviation from their median) is called noise when it is
    more than twice the table's and above 3%.

    Args:
        anchors: group -> (now, table) ms of the re-measured calibration networks.
        record: the table's reproducibility record, or None (then ``NOISE_WITHOUT_RECORD``).

    Returns:
        ``{"median": ..., "spread": ..., "n": ..., "table_noise": ..., "threshold": ...,
        "drifted": bool, "noisy": bool}`` (fractions, not percent).
    """
    ratios = np.array([now / then for pairs in anchors.values() for now, then in pairs], float)
    med = float(np.median(ratios))
    spread = float(np.median(np.abs(ratios / med - 1)))
    noise = table_noise(record)
    threshold = max(MIN_DRIFT, 3 * 1.2533 * (noise / 0.6745) / math.sqrt(len(ratios)))
    noisy = spread > max(2 * noise, NOISY_SPREAD)
    return {"median": med, "spread": spread, "n": int(len(ratios)), "table_noise": noise, "threshold": threshold,
            "drifted": bool(abs(med - 1) > threshold and not noisy), "noisy": bool(noisy)}


def table_noise(record: dict[str, Any] | None) -> float:
    """How far one entry of a table moves when re-timed (a fraction): its reproducibility record's median
    deviation, ``NOISE_WITHOUT_RECORD`` without one."""
    return float(record["median_dev_pct"]) / 100 if record and "median_dev_pct" in record else NOISE_WITHOUT_RECORD


def drift_warning(verdict: dict[str, Any], target_name: str, *, refreshed: float | None = None) -> str | None:
    """The warning ``drift_verdict`` calls for, or None when the machine is as the predictions found it.

    Args:
        verdict: ``drift_verdict``'s record.
        target_name: the target the fix names (``conf=<target_name>``), where one is named.
        refreshed: the ratio the predictions were rescaled by on the fly (``nas.latency.profile.refresh``), when
            they were: the verdict is then judged against those rescaled figures, and the warning says what
            was done rather than what to run.

    Returns:
        The warning's text, or None.
    """
    med, n = verdict["median"], verdict["n"]
    spread, noise = 100 * verdict["spread"], 100 * verdict["table_noise"]
    if verdict["noisy"]:
        return (f"the {n} re-measured calibration networks scatter ±{spread:.1f}% (median deviation) around their "
                f"median, where the table's own entries re-timed within ±{noise:.1f}%: the machine is noisy now "
                f"(another process, a noisy neighbour). Validate again with the core quiet (e.g. taskset -c 1, "
                f"nothing else running); refreshing the table now would copy the noise into it.")
    if verdict["drifted"] and refreshed is not None:
        return (f"the table was refreshed on the fly before measuring (its calibration networks ran at "
                f"{refreshed:.3f}x their table figures; the predictions were rescaled by that), and while the "
                f"held-out networks were measured they ran at {med:.3f}x of those figures (median of {n}; beyond the "
                f"±{100 * verdict['threshold']:.1f}% the table's own reproducibility allows): the machine moved again "
                f"during the validation; 'predictor_rescaled' scores the predictions rescaled by the drift check instead.")
    if verdict["drifted"]:
        return (f"the table's calibration networks now run at {med:.3f}x their table latency (median of {n}; "
                f"beyond the ±{100 * verdict['threshold']:.1f}% the table's own reproducibility allows): the "
                f"machine has drifted since the table was measured, and predictions are off by about that much "
                f"('predictor_rescaled' scores them rescaled). "
                f"`python -m nas.profile conf={target_name} refresh=10` rescales the table to the machine as it is "
                f"now; `python -m nas.profile conf={target_name} recalibrate=true` re-measures every calibration "
                f"network.")
    return None
