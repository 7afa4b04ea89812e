"""Does a network's measurement repeat?  Each validation round times every network in a fresh session;
where one network's rounds disagree by more than ``REPEAT_TOLERANCE``, no prediction can be judged
against its figure to ±10%.

Each round's common factor (the median, over its networks, of each one's ratio to its geometric mean
over the rounds: the machine's speed in that round) is taken out first, so a round the whole machine ran slower in does not count against
every network.  A network is *unrepeatable* when one of its rounds then lies more than
``REPEAT_TOLERANCE`` from the median of its rounds: a fresh session of the very same network gave a
figure that far from the one it is scored against.  ``nas.validate`` names and counts such networks
and leaves them out of its scores; each network's spread (``spread_pct``: the largest deviation of a
round from the median, in %) goes into the report's points.  With one round nothing can be judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["MIN_ROUNDS", "REPEAT_TOLERANCE", "Repeatability", "repeatability"]

REPEAT_TOLERANCE = 0.10  # a round this far from the network's median (after the round's own factor): unrepeatable
MIN_ROUNDS = 2  # fewer rounds: nothing is judged
MIN_NETWORKS_FOR_FACTORS = 5  # fewer networks in a round: its common factor is not taken out


@dataclass(frozen=True)
class Repeatability:
    """Per network: its spread over the rounds and whether it repeats.

    Attributes:
        spread_pct: the largest deviation of one round from the network's median, in % (NaN: one round).
        repeatable: False where that deviation exceeds ``tolerance``.
        round_factors: each round's common factor (1 where not taken out).
        rounds: the rounds judged (fewest any network has).
        tolerance: the deviation allowed.
    """

    spread_pct: tuple[float, ...]
    repeatable: tuple[bool, ...]
    round_factors: tuple[float, ...]
    rounds: int
    tolerance: float

    @property
    def judged(self) -> bool:
        """Whether there were enough rounds to judge."""
        return self.rounds >= MIN_ROUNDS

    def left_out(self) -> list[int]:
        """The indices of the unrepeatable networks."""
        return [i for i, ok in enumerate(self.repeatable) if not ok]


def repeatability(rounds_ms: Sequence[Sequence[float]], *, tolerance: float = REPEAT_TOLERANCE) -> Repeatability:
    """Judge each network's rounds (each a fresh session).

    Args:
        rounds_ms: per network, its figure in each round (ms), in the rounds' order.
        tolerance: how far a round may lie from the network's median (a fraction).

    Returns:
        The ``Repeatability``; every network repeatable where a network has fewer than ``MIN_ROUNDS``.
    """
    n = len(rounds_ms)
    r = min((len(x) for x in rounds_ms), default=0)
    if r < MIN_ROUNDS:
        return Repeatability(tuple([float("nan")] * n), tuple([True] * n), tuple([1.0] * r), r, tolerance)
    R = np.array([list(x[:r]) for x in rounds_ms], float)
    # each round against the network's geometric mean (its median would sit at exactly 1 in one round of
    # every network, and pin every round's median there); the factors' own geometric mean is 1
    logs = np.log(R) - np.log(R).mean(axis=1, keepdims=True)
    factors = np.exp(np.median(logs, axis=0)) if n >= MIN_NETWORKS_FOR_FACTORS else np.ones(r)
    factors = factors / np.exp(np.log(factors).mean())
    rel = R / factors
    dev = np.abs(rel / np.median(rel, axis=1, keepdims=True) - 1).max(axis=1)
    return Repeatability(tuple(float(100 * d) for d in dev), tuple(bool(d <= tolerance) for d in dev),
                         tuple(float(f) for f in factors), r, tolerance)
