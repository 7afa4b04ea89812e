"""Scores of predicted against measured latency, and the drift of a machine since its table.

Used by the validation (``nas.latency.validate``) and by the profiler's refresh / recalibrate
(``nas.latency.profiler``); kept below both so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import kendalltau

__all__ = ["drift_ratios", "score"]


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


def drift_ratios(anchors: dict[str, list[tuple[float, float]]]) -> tuple[float, dict[str, float], int]:
    """From ``ValidationSet.anchors`` (group -> (now, table) ms of re-measured calibration networks):
    the median now/table ratio over all of them, the median per group, and how many there are."""
    ratios = [now / then for pairs in anchors.values() for now, then in pairs]
    per = {g: float(np.median([now / then for now, then in pairs])) for g, pairs in anchors.items()}
    return float(np.median(ratios)), per, len(ratios)
