"""The evaluators' settings: each ``evaluator=<name>`` group's names, types, defaults and checks.

The evaluators (``nas.search.evaluate``) are these dataclasses with their scoring added; the Hydra
schemas (``nas.config.search``) are generated from these, so a command's config is composed, and a
typo refused, without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from nas._checks import check_number
from nas.fit.settings import FitSettings, check_fit

__all__ = ["MAX_CONSECUTIVE_FAILURES", "SHORT_RUN", "SupernetEvaluatorSettings", "TrainEvaluatorSettings", "ZeroCostEvaluatorSettings"]

_FIT = FitSettings()  # the training loop's defaults (nas.fit): the one place the optimiser's defaults are written
#: ``evaluator=train`` trains each trial briefly: the training loop's schedule with these values changed (three
#: epochs, smaller batches for more steps, half an epoch of warm-up); everything else is the loop's (nas.train's too)
SHORT_RUN = {"epochs": 3, "batch_size": 64, "warmup_epochs": 0.5}
# failed evaluations in a row that stop a search (run_search, the search config; 0: never)
MAX_CONSECUTIVE_FAILURES = 10


def _check_pos(obj: object, name: str, v: Any, *, integer: bool = False, allow_zero: bool = False) -> None:
    check_number(f"evaluator {obj.name}: {name}", v, integer=integer, zero=allow_zero)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class TrainEvaluatorSettings:
    """The settings of ``evaluator=train`` (``TrainEvaluator``): the training loop's ``FitSettings`` with the
    ``SHORT_RUN`` budget, plus the device.

    Raises:
        ValueError: a value out of range (the same checks as the loop's own, ``check_fit``).
    """

    name: ClassVar[str] = "train"

    epochs: int = SHORT_RUN["epochs"]
    batch_size: int = SHORT_RUN["batch_size"]
    optimizer: str = _FIT.optimizer  # adamw | sgd (nesterov)
    lr: float = _FIT.lr
    weight_decay: float = _FIT.weight_decay  # not applied to norms and biases
    momentum: float = _FIT.momentum  # sgd only
    label_smoothing: float = _FIT.label_smoothing
    warmup_epochs: float = SHORT_RUN["warmup_epochs"]  # linear warm-up, then cosine decay to zero
    grad_clip: float | None = _FIT.grad_clip  # max gradient norm (None: no clipping)
    device: str = "auto"  # auto | cpu | cuda | cuda:<i>
    amp: bool = True  # mixed precision on CUDA (bf16 where supported, else fp16 + grad scaling)
    eval_batch_size: int = _FIT.eval_batch_size
    # re-estimate BatchNorm statistics on this many batches before scoring
    bn_recalibration_batches: int = _FIT.bn_recalibration_batches

    def __post_init__(self) -> None:
        check_fit(self, "evaluator train: ", epochs_zero=False)
        if not isinstance(self.device, str):
            raise ValueError(f"evaluator train: device must be a string, got {self.device!r}")


@dataclass(frozen=True)
class SupernetEvaluatorSettings:
    """The settings of ``evaluator=supernet`` (``SupernetEvaluator``): names, types, defaults and checks."""

    name: ClassVar[str] = "supernet"

    checkpoint: str | None = None  # the supernet.ckpt (the command line's supernet=<checkpoint>)
    bn_recalibration_batches: int = 16  # training batches re-estimating BatchNorm statistics before scoring
    batch_size: int = 64  # recalibration (and fine-tuning) batch size
    finetune_steps: int = 0  # training steps of each extracted subnet before scoring (0: its inherited weights as they are)
    finetune_lr: float = _FIT.lr / 10  # their peak learning rate (the training loop's optimiser, cosine decay to zero)
    eval_batch_size: int = _FIT.eval_batch_size
    device: str = "auto"  # auto | cpu | cuda | cuda:<i>
    amp: bool = True  # mixed precision on CUDA

    def __post_init__(self) -> None:
        if not isinstance(self.checkpoint, str) or not self.checkpoint:
            raise ValueError("evaluator supernet needs the supernet's checkpoint: add supernet=<path to supernet.ckpt> "
                             "(train one with python -m nas.supernet)")
        _check_pos(self, "bn_recalibration_batches", self.bn_recalibration_batches, integer=True)
        _check_pos(self, "batch_size", self.batch_size, integer=True)
        _check_pos(self, "eval_batch_size", self.eval_batch_size, integer=True)
        _check_pos(self, "finetune_steps", self.finetune_steps, integer=True, allow_zero=True)
        _check_pos(self, "finetune_lr", self.finetune_lr)
        if not isinstance(self.device, str):
            raise ValueError(f"evaluator supernet: device must be a string, got {self.device!r}")


@dataclass(frozen=True)
class ZeroCostEvaluatorSettings:
    """The settings of ``evaluator=zero_cost`` (``ZeroCostEvaluator``): names, types, defaults and checks."""

    name: ClassVar[str] = "zero_cost"

    proxy: str = "naswot"  # naswot | synflow
    batch_size: int = 64  # naswot: images in the batch (the kernel is batch x batch)
    device: str = "auto"

    PROXIES: ClassVar[tuple[str, ...]] = ("naswot", "synflow")

    def __post_init__(self) -> None:
        if self.proxy not in self.PROXIES:
            raise ValueError(f"evaluator zero_cost: proxy must be one of {', '.join(self.PROXIES)}, got {self.proxy!r}")
        _check_pos(self, "batch_size", self.batch_size, integer=True)
        if self.proxy == "naswot" and self.batch_size < 2:
            raise ValueError(f"evaluator zero_cost: naswot needs batch_size >= 2, got {self.batch_size}")
