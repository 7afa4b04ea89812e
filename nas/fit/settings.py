"""Settings of one training run (``FitSettings``): optimizer and schedule, shared by every training in hwnas.

The one source of these names, types and defaults: the pipeline's ``train.*`` (``nas.train.settings``),
the supernet's (``nas.supernet.settings``) and ``evaluator=train``'s (``nas.search.evaluator_settings``,
checked by ``check_fit``) take them from here, and the Hydra schemas are generated from them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from nas._checks import check_number

__all__ = ["OPTIMIZERS", "FitSettings", "check_fit"]


OPTIMIZERS = ("adamw", "sgd")


def check_fit(s: Any, prefix: str, *, epochs_zero: bool = True) -> None:
    """The checks of a training run's settings (``FitSettings``' fields) on ``s``, which may be another
    settings class with the same fields (``evaluator=train``'s); each error names ``prefix + field``."""
    check_number(f"{prefix}epochs", s.epochs, integer=True, zero=epochs_zero)
    check_number(f"{prefix}bn_recalibration_batches", s.bn_recalibration_batches, integer=True, zero=True)
    check_number(f"{prefix}batch_size", s.batch_size, integer=True)
    check_number(f"{prefix}eval_batch_size", s.eval_batch_size, integer=True)
    check_number(f"{prefix}lr", s.lr)
    check_number(f"{prefix}weight_decay", s.weight_decay, zero=True)
    check_number(f"{prefix}momentum", s.momentum, zero=True)
    check_number(f"{prefix}warmup_epochs", s.warmup_epochs, zero=True)
    if s.grad_clip is not None:
        check_number(f"{prefix}grad_clip", s.grad_clip)
    if s.optimizer not in OPTIMIZERS:
        raise ValueError(f"{prefix}optimizer must be one of {', '.join(OPTIMIZERS)}, got {s.optimizer!r}")
    if isinstance(s.label_smoothing, bool) or not isinstance(s.label_smoothing, (int, float)) \
            or not 0 <= s.label_smoothing < 1:
        raise ValueError(f"{prefix}label_smoothing must be in [0, 1), got {s.label_smoothing!r}")


@dataclass(frozen=True)
class FitSettings:
    """One training run (full training, pruning fine-tune or QAT): optimizer and schedule."""

    epochs: int = 30
    batch_size: int = 128
    optimizer: str = "adamw"  # adamw | sgd (nesterov)
    lr: float = 0.005
    weight_decay: float = 0.05  # not applied to norms and biases
    momentum: float = 0.9  # sgd only
    label_smoothing: float = 0.1
    warmup_epochs: float = 1.0  # linear warm-up, then cosine decay to zero
    grad_clip: float | None = 5.0  # max gradient norm (None: no clipping)
    eval_batch_size: int = 512
    bn_recalibration_batches: int = 8  # BN statistics re-estimated with the final weights of each epoch

    def __post_init__(self) -> None:
        check_fit(self, "train.")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
