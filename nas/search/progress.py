"""The search's progress bar: one line that counts the trials of a ``run_search`` call, with the
last trial's status and the best feasible score so far (``run_search(progress=True)``, the default)."""

from __future__ import annotations

import sys
from typing import Any

from tqdm.auto import tqdm

from nas.search.objective import TrialOutcome

__all__ = ["TrialProgress", "fmt_score"]


def fmt_score(metric: str, v: float | None) -> str:
    """A score as shown to users: accuracy in percent, anything else with two decimals, ``-`` for none."""
    if v is None:
        return "-"
    return f"{100 * v:.2f}%" if metric == "val_accuracy" else f"{v:.2f}"


class TrialProgress:
    """A ``run_search`` callback drawing a bar over ``total`` trials (repeats and surplus trials, which
    run nothing, are counted beside it, not on it); without a bar (``bar=False``) a failed trial's
    reason is printed on standard error instead, one line each.

    Args:
        total: the trials this call runs.
        metric: the evaluator's metric, for the best score's format.
        bar: draw the bar.
    """

    def __init__(self, total: int, metric: str, *, bar: bool = True) -> None:
        self.metric, self.best, self.repeats = metric, None, 0
        self.bar: Any = tqdm(total=total, desc="search", unit="trial", dynamic_ncols=True) if bar and total else None

    def __call__(self, o: TrialOutcome) -> None:
        if o.status == "surplus":  # another worker took the last slot: nothing ran
            return
        if o.status == "duplicate":
            self.repeats += 1
        elif o.feasible and o.score is not None:
            self.best = o.score if self.best is None else max(self.best, o.score)
        if self.bar is None:
            if o.status == "error":
                print(f"trial {o.number} failed: {o.error}", file=sys.stderr)
            return
        if o.status != "duplicate":
            self.bar.update(1)
        skipped = f", {self.repeats} repeats skipped" if self.repeats else ""
        self.bar.set_postfix_str(f"#{o.number} {o.status} best {fmt_score(self.metric, self.best)}{skipped}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
