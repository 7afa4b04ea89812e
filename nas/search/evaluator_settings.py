"""The evaluators' settings: each ``evaluator=<name>`` group's names, types, defaults and checks.

The evaluators (``nas.search.evaluate``) are these dataclasses with their scoring added; the Hydra
schemas (``nas.config.search``) are generated from these, so a command's config is composed, and a
typo refused, without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from nas._checks import check_number
from nas.train.settings import check_fit

__all__ = ["SupernetEvaluatorSettings", "TrainEvaluatorSettings", "ZeroCostEvaluatorSettings"]


def _check_pos(obj: object, name: str, v: Any, *, integer: bool = False, allow_zero: bool = False) -> None:
    check_number(f"evaluator {obj.name}: {name}", v, integer=integer, zero=allow_zero)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class TrainEvaluatorSettings:
    """The settings of ``evaluator=train`` (``TrainEvaluator``): names, types, defaults and checks."""

    name: ClassVar[str] = "train"

    epochs: int = 3
    batch_size: int = 64
    optimizer: str = "adamw"  # adamw | sgd (nesterov)
    lr: float = 0.005
    weight_decay: float = 0.05  # not applied to norms and biases
    momentum: float = 0.9  # sgd only
    label_smoothing: float = 0.1
    warmup_epochs: float = 0.5  # linear warm-up, then cosine decay to zero
    grad_clip: float | None = 5.0  # max gradient norm (None: no clipping)
    device: str = "auto"  # auto | cpu | cuda | cuda:<i>
    amp: bool = True  # mixed precision on CUDA (bf16 where supported, else fp16 + grad scaling)
    eval_batch_size: int = 512
    bn_recalibration_batches: int = 8  # re-estimate BatchNorm statistics on this many batches before scoring

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
    batch_size: int = 64  # recalibration batch size
    eval_batch_size: int = 512
    device: str = "auto"  # auto | cpu | cuda | cuda:<i>
    amp: bool = True  # mixed precision on CUDA

    def __post_init__(self) -> None:
        if not isinstance(self.checkpoint, str) or not self.checkpoint:
            raise ValueError("evaluator supernet needs the supernet's checkpoint: add supernet=<path to supernet.ckpt> "
                             "(train one with python -m nas.supernet)")
        _check_pos(self, "bn_recalibration_batches", self.bn_recalibration_batches, integer=True)
        _check_pos(self, "batch_size", self.batch_size, integer=True)
        _check_pos(self, "eval_batch_size", self.eval_batch_size, integer=True)
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
