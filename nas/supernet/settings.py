"""Settings of ``python -m nas.supernet``: the one source of names, types and defaults (the Hydra
schema ``nas.config.supernet`` is generated from ``SupernetSettings``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from nas._checks import check_number
from nas.fit.settings import FitSettings

_FIT = FitSettings()  # the training loop's defaults (nas.fit), shared: the supernet changes only its epochs and batch

__all__ = ["SCHEDULES", "SupernetSettings"]

SCHEDULES = ("sandwich", "progressive")  # nas.supernet.schedule: which subnets train when


@dataclass(frozen=True)
class SupernetSettings:
    """Training the supernet: the sandwich rule (or progressive shrinking) with in-place distillation.

    Each step trains the largest subnet on the labels, then the smallest and ``random_subnets``
    uniformly sampled ones on the largest's soft outputs (``(1 - distill) * CE + distill * T^2 *
    KL`` at temperature ``T``); their gradients accumulate into one optimizer step.  With
    ``schedule="progressive"`` the smallest and the sampled subnets vary only along the dimensions
    unlocked so far (``nas.supernet.schedule``): none before ``phase_starts[0]`` of the epochs (the
    largest trains alone), then kernels, from ``phase_starts[1]`` depths too, from ``phase_starts[2]``
    every dimension.  With ``sort_channels``, every epoch ends by re-sorting the channels internal to
    a block by importance (``Supernet.sort_channels``), before the validation and the checkpoint.
    """

    epochs: int = 20
    batch_size: int = 64  # per process (torchrun: the global batch is this x the process count)
    optimizer: str = _FIT.optimizer  # adamw | sgd (nesterov)
    lr: float = _FIT.lr
    weight_decay: float = _FIT.weight_decay  # not applied to norms and biases
    momentum: float = _FIT.momentum  # sgd only
    label_smoothing: float = _FIT.label_smoothing  # the largest subnet's loss on the labels
    warmup_epochs: float = _FIT.warmup_epochs  # linear warm-up, then cosine decay to zero
    grad_clip: float | None = _FIT.grad_clip  # max gradient norm (None: no clipping)
    random_subnets: int = 2  # uniformly sampled subnets per step, beside the largest and the smallest
    distill: float = 1.0  # the smaller subnets' weight on the largest's soft outputs (0: labels only)
    temperature: float = 1.0  # distillation temperature
    seed: int = 0  # weight init, shuffling and the subnets sampled at each step
    device: str = "auto"  # auto | cpu | cuda | cuda:<i> (torchrun on GPUs: each process its LOCAL_RANK's GPU)
    amp: bool = True  # mixed precision on CUDA (bf16 where supported, else fp16 + grad scaling)
    eval_batch_size: int = _FIT.eval_batch_size
    bn_recalibration_batches: int = _FIT.bn_recalibration_batches  # before the per-epoch validation of the largest and the smallest subnet
    sort_channels: bool = True  # after every epoch, re-sort the channels internal to a block by importance
    schedule: str = "sandwich"  # sandwich (every dimension elastic throughout) | progressive (progressive shrinking)
    # progressive: the fractions of the epochs at which kernel, depth and width become elastic (Once-for-All's
    # proportions: 180 epochs of the largest, 120 of kernels, 25+120 of depths, 25+120 of widths)
    phase_starts: tuple[float, ...] = (0.3, 0.5, 0.75)

    def __post_init__(self) -> None:
        self.fit_settings()  # validates the shared training settings
        check_number("supernet.epochs", self.epochs, integer=True)  # a supernet of no epochs writes no checkpoint
        check_number("supernet.random_subnets", self.random_subnets, integer=True, zero=True)
        if isinstance(self.distill, bool) or not isinstance(self.distill, (int, float)) or not 0 <= self.distill <= 1:
            raise ValueError(f"supernet.distill must be a weight in [0, 1] (0: labels only), got {self.distill!r}")
        check_number("supernet.temperature", self.temperature)
        check_number("supernet.seed", self.seed, integer=True, zero=True)
        if not isinstance(self.sort_channels, bool):
            raise ValueError(f"supernet.sort_channels must be true or false, got {self.sort_channels!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"supernet.schedule must be sandwich or progressive, got {self.schedule!r}")
        self._check_phase_starts()
        if not isinstance(self.amp, bool):
            raise ValueError(f"supernet.amp must be true or false, got {self.amp!r}")
        if not isinstance(self.device, str):
            raise ValueError(f"supernet.device must be auto, cpu, cuda or cuda:<i>, got {self.device!r}")

    def _check_phase_starts(self) -> None:
        f = self.phase_starts
        ok = isinstance(f, (tuple, list)) and len(f) == 3 and all(
            not isinstance(v, bool) and isinstance(v, (int, float)) and 0 <= v <= 1 for v in f)
        if not ok or list(f) != sorted(f):
            raise ValueError(f"supernet.phase_starts must be 3 fractions of the epochs, 0 <= kernel <= depth <= "
                             f"width <= 1 (when each dimension becomes elastic), got {f!r}")
        object.__setattr__(self, "phase_starts", tuple(float(v) for v in f))  # Hydra gives a list

    def fit_settings(self) -> FitSettings:
        """The training loop's settings (``nas.fit.settings.FitSettings``) these name."""
        names = {f.name for f in dataclasses.fields(FitSettings)}
        return FitSettings(**{k: v for k, v in self.to_dict().items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SupernetSettings:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"supernet: unknown setting(s) {unknown}; valid settings: {sorted(known)}")
        return cls(**d)
