"""The latency budget a search runs under, and how it relates to the space being searched.

A target's latency budget (``latency_budget_ms`` in its file) describes the device, not the space:
the ``cpu`` target's 15 ms lies above every network of the ``tiny`` space, so as a constraint it
would do nothing.  Before a study starts, ``N_SAMPLED`` networks of the space (``space.random(i)``
for ``i`` in ``0 .. N_SAMPLED - 1``, deployed as the search deploys them) are predicted in one
batch, and the budget is set or described from their spread:

- a budget the user gave (``latency_budget_ms=``; ``Budgets.latency_budget_given``, the default) is
  kept as given; when it binds none of the sampled networks (it lies above all of them: the
  constraint is inactive; or below all of them: none of them is feasible) the one-line
  ``LatencyBudget.note`` says so;
- the target's own budget (no ``latency_budget_ms=``; ``Budgets(latency_budget_given=False)``) is
  kept when it binds (at least one sampled network meets it and at least one does not) or lies
  below them all (a device's requirement is never relaxed silently); when it lies above them all,
  the search uses the median latency of the sampled networks, rounded up to three significant
  digits, instead;
- a resumed study keeps the budget it started with (``kept``).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from nas.latency.tables import LatencyModel
from nas.space import SearchSpace

__all__ = ["BUDGET_ATTR", "Budgets", "N_SAMPLED", "LatencyBudget", "LatencySpread", "choose_latency_budget", "kept",
           "sampled_latencies"]


_OLD_BUDGET_NAMES = {"latency_ms": "latency_budget_ms", "memory_kb": "memory_budget_kb"}


@dataclass(frozen=True, init=False)
class Budgets:
    """A search's budgets, named as in its config and its results.

    Args:
        latency_budget_ms: the latency (ms, predicted on the target) a network may take; None: no limit.
        memory_budget_kb: the peak activation memory (KiB) a network may hold; None: no limit.
        latency_budget_given: ``latency_budget_ms`` is the user's, kept as given (the default); False: it is
            the target's own, which a new search replaces by the median of the space's sampled networks when
            it binds none of them and which a resumed search replaces by the study's own
            (``choose_latency_budget``).  How a budget was chosen is no part of the study's record
            (``to_dict``).

    Raises:
        ValueError: a budget that is not a positive number or None.
        TypeError: ``latency_budget_given`` is not a bool.

    Example:
        >>> Budgets(latency_budget_ms=15.0).constraints(latency_ms=12.0, peak_bytes=0)
        {'latency': -0.2}
    """

    latency_budget_ms: float | None = None
    memory_budget_kb: float | None = None
    latency_budget_given: bool = True

    def __init__(self, latency_budget_ms: float | None = None, memory_budget_kb: float | None = None, *,
                 latency_budget_given: bool = True, **old: float | None) -> None:
        for k, v in old.items():  # the names before the budgets took their config's names
            if k not in _OLD_BUDGET_NAMES:
                raise TypeError(f"Budgets() got an unexpected keyword argument {k!r}")
            warnings.warn(f"Budgets({k}=) is now Budgets({_OLD_BUDGET_NAMES[k]}=)", DeprecationWarning, stacklevel=2)
            latency_budget_ms = v if k == "latency_ms" else latency_budget_ms
            memory_budget_kb = v if k == "memory_kb" else memory_budget_kb
        object.__setattr__(self, "latency_budget_ms", latency_budget_ms)
        object.__setattr__(self, "memory_budget_kb", memory_budget_kb)
        if not isinstance(latency_budget_given, bool):
            raise TypeError(f"latency_budget_given must be True or False, got {latency_budget_given!r}")
        object.__setattr__(self, "latency_budget_given", latency_budget_given)
        for name, v in (("latency_budget_ms", self.latency_budget_ms), ("memory_budget_kb", self.memory_budget_kb)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0
                                  or not math.isfinite(v)):
                raise ValueError(f"{name} must be a positive number or null (no budget), got {v!r}")

    def constraints(self, *, latency_ms: float, peak_bytes: int) -> dict[str, float]:
        """Relative excess over each budget (``<= 0`` feasible), as Optuna constraints."""
        out = {}
        if self.latency_budget_ms is not None:
            out["latency"] = latency_ms / self.latency_budget_ms - 1.0
        if self.memory_budget_kb is not None:
            out["memory"] = peak_bytes / 1024.0 / self.memory_budget_kb - 1.0
        return out

    def to_dict(self) -> dict[str, float | None]:
        """The budgets as the study's record and pareto.json hold them."""
        return {"latency_budget_ms": self.latency_budget_ms, "memory_budget_kb": self.memory_budget_kb}

    @staticmethod
    def from_record(d: dict[str, Any]) -> Budgets:
        """The budgets of a study's record, one written before the budgets took their config's names included."""
        d = {_OLD_BUDGET_NAMES.get(k, k): v for k, v in d.items()}
        return Budgets(latency_budget_ms=d.get("latency_budget_ms"), memory_budget_kb=d.get("memory_budget_kb"))

N_SAMPLED = 200  # networks of the space sampled to place a latency budget
BUDGET_ATTR = "hwnas_latency_budget"  # study user attribute: how the study's latency budget was chosen


@dataclass(frozen=True)
class LatencySpread:
    """The spread of ``n`` sampled networks' latencies (ms) on the target."""

    n: int
    min_ms: float
    median_ms: float
    max_ms: float

    @classmethod
    def of(cls, ms: np.ndarray) -> LatencySpread:
        """The spread of ``ms``.

        Raises:
            ValueError: ``ms`` is empty.
        """
        ms = np.asarray(ms, dtype=np.float64)
        if ms.size == 0:
            raise ValueError("no sampled latencies to place a budget among")
        return cls(int(ms.size), float(ms.min()), float(np.median(ms)), float(ms.max()))

    def binds(self, budget_ms: float) -> bool:
        """Whether ``budget_ms`` separates the sampled networks: some meet it, some do not."""
        return self.min_ms <= budget_ms < self.max_ms

    def span(self) -> str:
        return f"{self.min_ms:.3g}-{self.max_ms:.3g} ms"


@dataclass(frozen=True)
class LatencyBudget:
    """The latency budget a study runs under and why.

    ``rule``: ``given`` (the user's ``latency_budget_ms=``), ``none`` (``latency_budget_ms=null``),
    ``target`` (the target's own), ``median`` (the median of the sampled networks, the target's
    binding none) or ``kept`` (a resumed study's own).  ``why``: the reason in words; ``note``: the
    line the search prints at its start.
    """

    ms: float | None
    rule: str
    why: str
    spread: LatencySpread | None = None

    @property
    def note(self) -> str:
        head = "no latency budget" if self.ms is None else f"latency budget {self.ms:g} ms"
        tail = "; latency_budget_ms= to set it" if self.rule in ("target", "median") else ""
        return f"{head}: {self.why}{tail}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["sampled"] = d.pop("spread")
        d["note"] = self.note
        return d


def sampled_latencies(space: SearchSpace, latency: LatencyModel, deploy: Any, n: int = N_SAMPLED) -> np.ndarray:
    """The latencies (ms) of networks ``0 .. n - 1`` of ``space`` (``space.random(i)``), deployed.

    Args:
        space: the space searched.
        latency: the target's latency model; its batched ``predict`` is called once.
        deploy: ``Arch -> Arch``, the network as the search deploys it (``SearchProblem.deployed``).
        n: how many networks.

    Returns:
        An array of ``n`` latencies, the same for the same space, model and ``n``.

    Raises:
        ValueError: ``n`` is not a positive integer.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    return np.asarray(latency.predict([deploy(space.random(i)) for i in range(n)]), dtype=np.float64)


def _words(source: str) -> str:
    return {"measured": "predicted", "rehearsal": "REHEARSAL-predicted"}.get(source, "roofline-estimated")


def _against(budget: float, ms: np.ndarray, spread: LatencySpread, where: str, source: str) -> str:
    """What ``budget`` does to the sampled networks ``ms``, in words."""
    if budget >= spread.max_ms:
        return (f"it binds none of {spread.n} sampled networks of {where} ({_words(source)} {spread.span()}): "
                f"the latency constraint is inactive")
    if budget < spread.min_ms:
        return (f"none of {spread.n} sampled networks of {where} meets it ({_words(source)} {spread.span()}): "
                f"only networks faster than all of them are feasible")
    k = int((ms <= budget).sum())
    return f"{k} of {spread.n} sampled networks of {where} {'meets' if k == 1 else 'meet'} it ({spread.span()})"


def _ceil3(v: float) -> float:
    """``v`` rounded up to three significant digits (so the median network still meets it)."""
    if not v > 0:
        return v
    e = math.floor(math.log10(v)) - 2
    return float(f"{math.ceil(v / 10.0**e) * 10.0**e:.{max(0, -e)}f}")


def choose_latency_budget(latency_budget_ms: float | None, *, given: bool, latencies: np.ndarray, where: str,
                          source: str) -> LatencyBudget:
    """The budget a new study runs under (see the module docs).

    Args:
        latency_budget_ms: the user's budget (``given``) or the target's; None: no latency constraint.
        given: whether the user set ``latency_budget_ms`` rather than the target.
        latencies: the sampled networks' latencies (``sampled_latencies``).
        where: the space and target, for the note (``"tiny on cpu"``).
        source: the latency model's source (``nas.latency.SOURCES``), for the note's words.

    Returns:
        The ``LatencyBudget``: the budget, its rule and the line to print.

    Raises:
        ValueError: ``latencies`` is empty.
    """
    ms = np.asarray(latencies, dtype=np.float64)
    spread = LatencySpread.of(ms)
    if latency_budget_ms is None:
        return LatencyBudget(None, "none", "latency_budget_ms=null", spread)
    if given:
        return LatencyBudget(latency_budget_ms, "given", f"latency_budget_ms={latency_budget_ms:g}; "
                             f"{_against(latency_budget_ms, ms, spread, where, source)}", spread)
    if latency_budget_ms >= spread.max_ms:
        median = _ceil3(spread.median_ms)
        return LatencyBudget(median, "median", f"the median {_words(source)} latency of {spread.n} sampled networks "
                             f"of {where} (the target's own {latency_budget_ms:g} ms would bind no network)", spread)
    return LatencyBudget(latency_budget_ms, "target", f"the target's; {_against(latency_budget_ms, ms, spread, where, source)}",
                         spread)


def kept(budget_ms: float | None, start: dict[str, Any] | None) -> LatencyBudget:
    """The budget of a resumed study.

    Args:
        budget_ms: the budget the study's record holds.
        start: how it was chosen at the study's start (the study's ``BUDGET_ATTR``; None in studies
            from before it existed).

    Returns:
        The ``LatencyBudget`` with rule ``kept``.

    Raises:
        ValueError: ``budget_ms`` is neither None nor a finite number.
    """
    if budget_ms is not None and (isinstance(budget_ms, bool) or not isinstance(budget_ms, (int, float))
                                  or not math.isfinite(budget_ms)):
        raise ValueError(f"the study records a latency budget of {budget_ms!r}, not a number")
    why = "the study's own, kept from its start"
    if isinstance(start, dict) and start.get("ms") == budget_ms and start.get("why"):
        why += f" ({start['why']})"
    return LatencyBudget(None if budget_ms is None else float(budget_ms), "kept", why)
