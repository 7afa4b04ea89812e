"""Which subnets the supernet trains when: the sandwich rule, or progressive shrinking.

Every parameter of a space (``SearchSpace.param_choices``) belongs to one elastic dimension:

* ``kernel``: the block kernels (``s{i}_b{j}_kernel``);
* ``depth``: the stage depths (``s{i}_depth``);
* ``width``: everything else that makes channels or weights narrower: stage, stem and head widths,
  expansions, squeeze-excite on/off, attention heads and MLP ratios.

``schedule=sandwich`` makes every dimension elastic from the first step.  ``schedule=progressive``
(Once-for-All's progressive shrinking, Cai et al. 2020) unlocks them in phases over the epochs: the
largest network alone, then elastic kernels, then depths, then widths.  A phase draws its subnets
only along the dimensions unlocked so far; every other choice stays at its largest (``restrict``).
The phases begin at fractions of the epochs (``SupernetSettings.phase_starts``), so the phase of an
epoch follows from the settings alone and a resumed run continues in the phase it left.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from nas.arch import Arch
from nas.space import SearchSpace
from nas.supernet.settings import SCHEDULES  # noqa: F401  # re-exported

if TYPE_CHECKING:
    from nas.supernet.model import Supernet
    from nas.supernet.settings import SupernetSettings

__all__ = ["DIMENSIONS", "Phase", "dimension", "draw", "phase_at", "phases", "restrict"]

DIMENSIONS = ("kernel", "depth", "width")  # progressive shrinking unlocks them in this order
# a parameter's option name (its name without the s{i}_ / s{i}_b{j}_ prefix) -> its dimension
_DIMENSION_OF = {"kernel": "kernel", "depth": "depth", "width": "width", "expansion": "width", "se": "width",
                 "heads": "width", "mlp_ratio": "width", "stem_width": "width", "head_hidden": "width"}
_PREFIX = re.compile(r"^s\d+_(?:b\d+_)?")


@dataclass(frozen=True)
class Phase:
    """A stretch of training from epoch ``start`` on in which the ``elastic`` dimensions are sampled."""

    name: str
    start: int
    elastic: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "start": self.start, "elastic": list(self.elastic)}


def dimension(param: str) -> str:
    """The elastic dimension of a space parameter (``s2_b1_kernel`` -> ``kernel``)."""
    option = _PREFIX.sub("", param)
    if option not in _DIMENSION_OF:
        raise ValueError(f"space parameter {param!r}: no elastic dimension is known for option {option!r}; "
                         f"known options: {sorted(_DIMENSION_OF)}")
    return _DIMENSION_OF[option]


def phases(s: SupernetSettings) -> list[Phase]:
    """The phases of a run with settings ``s``, in order.  Sandwich: one, every dimension elastic.
    Progressive: ``largest`` (none elastic), ``kernel``, ``depth`` and ``width`` (all elastic), each
    beginning at epoch ``floor(fraction * epochs)`` (so a fraction below 1 begins before the last epoch);
    a phase with no epoch is left out."""
    if s.schedule == "sandwich":
        return [Phase("sandwich", 0, DIMENSIONS)]
    starts = [0, *(math.floor(f * s.epochs + 1e-9) for f in s.phase_starts)]
    ends = [*starts[1:], s.epochs]
    names = ("largest", *DIMENSIONS)
    return [Phase(names[k], starts[k], DIMENSIONS[:k]) for k in range(len(names)) if starts[k] < ends[k]]


def phase_at(table: list[Phase], epoch: int) -> Phase:
    """The phase ``epoch`` (0-based) falls in."""
    return [p for p in table if p.start <= epoch][-1]


def restrict(space: SearchSpace, params: dict[str, Any], elastic: tuple[str, ...]) -> dict[str, Any]:
    """``params`` with every choice outside the ``elastic`` dimensions set to its largest."""
    if set(elastic) >= set(DIMENSIONS):
        return params
    choices = space.param_choices()
    return {n: v if dimension(n) in elastic else max(choices[n]) for n, v in params.items()}


def draw(sn: Supernet, rng: np.random.Generator, elastic: tuple[str, ...], random: int) -> list[Arch]:
    """A step's subnets: the largest, the smallest and ``random`` uniformly sampled ones, all along the
    ``elastic`` dimensions only (the rest at their largest).  A draw that is the largest is left out:
    the largest already trains on the labels, so with nothing elastic only the largest remains."""
    space = sn.space
    if set(elastic) >= set(DIMENSIONS):
        archs = [sn.smallest, *(sn.sample(rng) for _ in range(random))]
    else:
        low = {n: min(c) for n, c in space.param_choices().items()}
        picks = [low, *(space.sample_params(rng) for _ in range(random))]
        archs = [sn.adapt(space.decode(restrict(space, p, elastic))) for p in picks]
    return [sn.largest, *(a for a in archs if a != sn.largest)]
