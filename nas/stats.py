"""Confidence intervals for accuracies counted on a finite set of images.

An accuracy scored on ``n`` images is a binomial proportion: ``wilson_interval`` gives its Wilson
score interval (Wilson 1927; method 3 of Newcombe, Statistics in Medicine 17:857-872, 1998), which
keeps its coverage near 0 and 1 and on small sets, where the normal (Wald) interval does not.
``accuracy_difference`` gives the interval of the difference of two such accuracies by Newcombe's
hybrid score method (method 10 of Newcombe, Statistics in Medicine 17:873-890, 1998), built from
the two Wilson intervals.  It treats the two accuracies as independent samples; two networks scored
on the same images usually err on many of the same ones, which makes the true interval of their
difference narrower, so "beyond noise" by this interval is a conservative verdict and "within
noise" a lenient one.  Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

__all__ = ["AccuracyInterval", "Difference", "accuracy_difference", "fmt_interval", "wilson_interval"]

LEVEL = 0.95


@dataclass(frozen=True)
class AccuracyInterval:
    """An accuracy (0..1) counted on ``n`` images and its ``level`` Wilson score interval."""

    accuracy: float
    low: float
    high: float
    n: int
    level: float = LEVEL

    def to_dict(self) -> dict[str, Any]:
        """The interval as stored in pareto.json and report.json."""
        return {"low": self.low, "high": self.high, "n": self.n, "level": self.level, "method": "wilson"}


@dataclass(frozen=True)
class Difference:
    """``a - b`` of two accuracies and its confidence interval ``[low, high]``."""

    value: float
    low: float
    high: float

    @property
    def within_noise(self) -> bool:
        """The interval holds 0: the two accuracies cannot be told apart on these images."""
        return self.low <= 0.0 <= self.high

    @property
    def verdict(self) -> str:
        """``beats`` (the interval is above 0), ``loses`` (below 0) or ``ties`` (it holds 0)."""
        return "beats" if self.low > 0 else "loses" if self.high < 0 else "ties"

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "low": self.low, "high": self.high, "verdict": self.verdict,
                "method": "newcombe"}


def _z(level: float) -> float:
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0.0 < level < 1.0:
        raise ValueError(f"level must be a number between 0 and 1 (0.95 for a 95% interval), got {level!r}")
    return NormalDist().inv_cdf(0.5 + level / 2)


def wilson_interval(accuracy: float, n: int, *, level: float = LEVEL) -> AccuracyInterval:
    """The Wilson score interval of an accuracy counted on ``n`` images.

    Args:
        accuracy: the fraction of the ``n`` images classified correctly, 0..1.
        n: how many images were scored.
        level: the interval's confidence level.

    Returns:
        The accuracy with its interval (``low`` and ``high`` within 0..1).

    Raises:
        ValueError: ``n`` is not a positive integer, ``accuracy`` is not within 0..1, or ``level``
            is not within (0, 1).

    Example:
        >>> iv = wilson_interval(81 / 263, 263)
        >>> round(iv.low, 4), round(iv.high, 4)
        (0.2553, 0.3662)
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer (the images scored), got {n!r}")
    if isinstance(accuracy, bool) or not isinstance(accuracy, (int, float)) or not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"accuracy must be a fraction within 0..1, got {accuracy!r}")
    z = _z(level)
    p, z2 = float(accuracy), z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return AccuracyInterval(p, max(0.0, centre - half), min(1.0, centre + half), n, float(level))


def accuracy_difference(a: AccuracyInterval, b: AccuracyInterval) -> Difference:
    """``a - b`` with Newcombe's hybrid score interval (from the two Wilson intervals).

    Args:
        a: one accuracy with its interval.
        b: the other, at the same level.

    Returns:
        The difference and its interval; ``verdict`` says whether ``a`` beats ``b`` beyond noise.

    Raises:
        ValueError: the two intervals are at different levels.

    Example:
        >>> d = accuracy_difference(wilson_interval(56 / 70, 70), wilson_interval(48 / 80, 80))
        >>> round(d.low, 4), round(d.high, 4), d.verdict
        (0.0524, 0.3339, 'beats')
    """
    if a.level != b.level:
        raise ValueError(f"the two intervals are at different levels ({a.level} and {b.level}): compare them at one")
    d = a.accuracy - b.accuracy
    below = math.hypot(a.accuracy - a.low, b.high - b.accuracy)
    above = math.hypot(a.high - a.accuracy, b.accuracy - b.low)
    return Difference(d, d - below, d + above)


def fmt_interval(iv: AccuracyInterval | None, digits: int = 1) -> str:
    """An interval in percent as tables show it, ``[93.9, 96.2]``; ``-`` for none."""
    if iv is None:
        return "-"
    return f"[{100 * iv.low:.{digits}f}, {100 * iv.high:.{digits}f}]"
