"""The front's uncertainty: each accuracy's interval, neighbours within noise, the baseline to beat.

Every ``val_accuracy`` is counted on the validation images its evaluator scored, so it carries its
Wilson 95% interval (``nas.stats``).  Front neighbours whose accuracies cannot be told apart are
marked (``noise_neighbours``), and the front's most accurate network is set against the
largest-MACs network that fits the budgets among the study's evaluated trials
(``baseline_to_beat``).  The records are ``nas.search.results.trial_records``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nas.stats import AccuracyInterval, Difference, accuracy_difference, wilson_interval

__all__ = ["Baseline", "add_intervals", "baseline_to_beat", "feasible_candidates", "largest_within_noise",
           "noise_neighbours", "uncertainty_record"]

# pareto.json's words for the intervals
_NOTE = ("Wilson 95% interval of each accuracy on the validation images it was scored on (one evaluation per "
         "network: no seeds to spread); neighbours within noise: the 95% interval of their difference (Newcombe's "
         "hybrid score) holds 0; it treats the two as independent, which makes 'beyond noise' a safe verdict")


def add_intervals(rows: list[dict[str, Any]], *, accuracy: bool, images: int | None) -> None:
    """Give each record (``nas.search.results.trial_records``) its score's Wilson 95% interval, in place.

    Args:
        rows: the trial records, each with its ``score`` and ``_metrics``.
        accuracy: the score is an accuracy counted on images (``val_accuracy``); otherwise no interval.
        images: the images scored, for records whose metrics do not say (``val_images``).
    """
    for r in rows:
        n = (r["_metrics"] or {}).get("val_images") or images
        ci = wilson_interval(min(1.0, max(0.0, r["score"])), int(n)) if accuracy and r["score"] is not None and n else None
        r.update({"ci95_low": ci.low if ci else None, "ci95_high": ci.high if ci else None,
                  "scored_images": ci.n if ci else None, "_ci": ci})


def noise_neighbours(front: Sequence[dict[str, Any]]) -> dict[int, list[int]]:
    """The front's neighbours (by latency) whose accuracies are within noise of each other.

    Args:
        front: ``pareto_front``'s records, by latency.

    Returns:
        Trial number -> the numbers of its faster and slower neighbours whose difference's 95% interval
        (Newcombe's, ``nas.stats.accuracy_difference``) holds 0; trials without one are left out.
    """
    out: dict[int, list[int]] = {}
    for a, b in zip(front, front[1:]):
        if a.get("_ci") and b.get("_ci") and accuracy_difference(b["_ci"], a["_ci"]).within_noise:
            out.setdefault(a["number"], []).append(b["number"])
            out.setdefault(b["number"], []).append(a["number"])
    return out


@dataclass(frozen=True)
class Baseline:
    """The network to beat: the largest-MACs evaluated trial within the budgets, against the search's pick
    (the front's most accurate trial), scored by the same evaluator."""

    trial: int
    macs: int
    latency_ms: float
    score: float
    interval: AccuracyInterval | None
    candidates: int  # the feasible evaluated trials (one per architecture) it is the largest of
    pick: int
    pick_score: float
    pick_interval: AccuracyInterval | None
    difference: Difference | None  # pick - baseline; None for a proxy score

    @property
    def verdict(self) -> str:
        """``same`` (the pick is this network), ``beats`` / ``ties`` / ``loses`` beyond noise, or ``higher`` /
        ``lower`` / ``equal`` for a proxy score (no interval)."""
        if self.pick == self.trial:
            return "same"
        if self.difference is not None:
            return self.difference.verdict
        return "higher" if self.pick_score > self.score else "lower" if self.pick_score < self.score else "equal"

    def to_dict(self) -> dict[str, Any]:
        """As pareto.json's ``baseline``."""
        return {"trial": self.trial, "macs": self.macs, "latency_ms": self.latency_ms, "score": self.score,
                "ci95": self.interval.to_dict() if self.interval else None, "among": self.candidates,
                "chosen_from": "the study's evaluated trials within the budgets (no extra evaluation)",
                "pick": {"trial": self.pick, "score": self.pick_score,
                         "ci95": self.pick_interval.to_dict() if self.pick_interval else None},
                "difference": self.difference.to_dict() if self.difference else None, "verdict": self.verdict}


def feasible_candidates(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The study's evaluated trials within the budgets, one per architecture (its first trial)."""
    cands: dict[str, dict[str, Any]] = {}
    for r in records:
        if r["state"] == "COMPLETE" and r["score"] is not None and r["feasible"] and r["macs"] is not None:
            cands.setdefault(r["digest"] or str(r["number"]), r)
    return list(cands.values())


def baseline_to_beat(records: Sequence[dict[str, Any]], front: Sequence[dict[str, Any]]) -> Baseline | None:
    """The largest-MACs network that fits the budgets among the study's evaluated trials, and whether the
    front's most accurate network beats it beyond noise.

    Args:
        records: ``trial_records``.
        front: ``pareto_front(records)``.

    Returns:
        The comparison; None while no feasible trial has a score.
    """
    cands = feasible_candidates(records)
    if not cands or not front:
        return None
    big = max(cands, key=lambda r: (r["macs"], -r["latency_ms"], -r["number"]))
    pick = max(front, key=lambda r: (r["score"], -r["latency_ms"]))
    diff = accuracy_difference(pick["_ci"], big["_ci"]) if pick.get("_ci") and big.get("_ci") else None
    return Baseline(big["number"], int(big["macs"]), float(big["latency_ms"]), float(big["score"]), big.get("_ci"),
                    len(cands), pick["number"], float(pick["score"]), pick.get("_ci"), diff)


def largest_within_noise(candidates: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Of the networks that fit a budget, the largest (MACs) whose accuracy lies within the 95% interval
    of the most accurate one's: where the evaluator cannot tell the best few apart, the one with the most
    capacity, which a longer training on more images tends to reward.

    Args:
        candidates: evaluated trial records that fit the budget (``trial_records``), each with its
            ``score``, ``macs`` and, from ``add_intervals``, its interval (``_ci``).

    Returns:
        The pick (the most accurate one where it has no interval: a proxy score); None for no candidate.
        Ties go to the earlier trial.
    """
    rows = [r for r in candidates if r["score"] is not None]
    if not rows:
        return None
    best = max(rows, key=lambda r: (r["score"], -r["number"]))
    ci = best.get("_ci")
    if ci is None:
        return best
    return max((r for r in rows if r["score"] >= ci.low), key=lambda r: (r["macs"], -r["number"]))


def uncertainty_record(metric: str, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """pareto.json's ``accuracy_uncertainty``: how the front's intervals were obtained."""
    if metric != "val_accuracy":
        return {"method": None, "note": f"{metric} is a proxy score, not an accuracy counted on images: no interval"}
    ns = sorted({r["scored_images"] for r in records if r["scored_images"]})
    return {"method": "wilson", "level": 0.95, "split": "val", "images": ns[0] if len(ns) == 1 else ns,
            "neighbours": "newcombe", "note": _NOTE}
