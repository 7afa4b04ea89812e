"""Accuracy estimates for the search: short training, or a training-free (zero-cost) proxy.

Evaluators are registered by name (``evaluator=<name>`` on the command line):

    train      a few epochs from scratch (AdamW or SGD, linear warm-up then cosine decay, label
               smoothing, AMP on a GPU), scored by top-1 accuracy on the held-out validation split.
    supernet   the network's weights inherited from a trained weight-sharing supernet
               (``nas.supernet``; ``supernet=<checkpoint>``), BatchNorm recalibrated on a few
               training batches, scored by top-1 accuracy on the validation split: seconds per
               architecture, after training the supernet once.
    zero_cost  a score of the untrained network on one batch: ``naswot`` (Mellor et al. 2021: the
               log-determinant of the kernel of binary activation codes; higher separates inputs
               better) or ``synflow`` (Tanaka et al. 2020 / Abdelfattah et al. 2021: log of the
               summed synaptic saliency).  Seconds per architecture instead of minutes; a ranking
               signal, not an accuracy.

Every evaluator is a frozen dataclass of its settings (validated in ``__post_init__``) with
``evaluate(arch, data, seed=...) -> EvalResult``.  An evaluator with ``epochs`` (``fidelity``
true: ``train``) also takes ``on_epoch(epochs_trained, val_accuracy)``, called after every epoch
but the last, so a pruner (``nas.search.pruners``) can stop a hopeless trial early by raising from
it; scoring those epochs never changes the training run or its final score.  The Arch must already match the data (its
classes, input channels and resolution: ``nas.data.adapt_arch``).  Randomness (weight init,
shuffling, augmentation, the proxy batch) comes from ``seed`` alone; the global torch RNG state
is restored afterwards, so evaluating is reproducible and leaves no trace.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from timm.layers import activations as ta
from torch import nn

from nas.arch import Arch
from nas.builder import build
from nas.data import Dataset
from nas.fit.loop import (
    Schedule,
    amp_dtype,
    build_optimizer,
    recalibrate_batchnorm,
    resolve_device,
    train_epochs,
)
from nas.fit.settings import FitSettings
from nas.registry import Registry
from nas.search.evaluator_settings import (
    SupernetEvaluatorSettings,
    TrainEvaluatorSettings,
    ZeroCostEvaluatorSettings,
)
from nas.supernet.checkpoint import check_matches, load_supernet

__all__ = ["EVALUATORS", "EvalResult", "Evaluator", "SupernetEvaluator", "TrainEvaluator", "ZeroCostEvaluator", "evaluator_names", "make_evaluator", "register_evaluator"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalResult:
    """One evaluation: ``score`` (higher is better) named by ``metric``, and extra figures."""

    score: float
    metric: str
    seconds: float
    metrics: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


EVALUATORS: Registry[type[Evaluator]] = Registry("evaluator")


def register_evaluator(name: str) -> Callable[[type[Evaluator]], type[Evaluator]]:
    """Class decorator: register an evaluator under ``name`` (``evaluator=<name>``)."""

    return EVALUATORS.register(name, tag="name")


def evaluator_names() -> list[str]:
    return EVALUATORS.names()


def make_evaluator(cfg: dict[str, Any]) -> Evaluator:
    """``{"name": "train", "epochs": 3, ...}`` -> the registered evaluator with those settings."""
    d = dict(cfg)
    name = d.pop("name", None)
    try:
        cls = EVALUATORS[name]
    except ValueError as e:
        raise ValueError(f"evaluator.name: {e}") from None
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - fields)
    if unknown:
        raise ValueError(f"evaluator {name!r}: unknown setting(s) {unknown}; valid settings: {sorted(fields)}")
    return cls(**d)


@contextlib.contextmanager
def _seeded_build(arch: Arch, data: Dataset, device_spec: str, seed: int) -> Iterator[tuple[nn.Module, torch.device]]:
    """Check that ``arch`` fits ``data``, then build it on the device inside a forked RNG seeded
    with ``seed`` (so an evaluation is reproducible and leaves the caller's RNG alone)."""
    _check_fit(arch, data)
    device = resolve_device(device_spec)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield build(arch).to(device), device


def _check_fit(arch: Arch, data: Dataset) -> None:
    if (arch.in_chans, arch.head.num_classes, arch.resolution) != (data.in_chans, data.num_classes, data.resolution):
        raise ValueError(
            f"the Arch ({arch.in_chans} channels, {arch.head.num_classes} classes, {arch.resolution}px) does not "
            f"match dataset {data.name!r} ({data.in_chans} channels, {data.num_classes} classes, "
            f"{data.resolution}px): adapt it with nas.data.adapt_arch(arch, data)"
        )


class Evaluator(ABC):
    """Scores an Arch on a dataset; ``metric`` names the score (higher is better)."""

    name: ClassVar[str] = ""
    fidelity: ClassVar[bool] = False  # evaluate() takes on_epoch: it can be stopped after any epoch

    @property
    @abstractmethod
    def metric(self) -> str: ...

    @abstractmethod
    def evaluate(self, arch: Arch, data: Dataset, *, seed: int) -> EvalResult: ...

    def check(self, space: Any, data: Dataset) -> None:
        """Refuse, before the search writes anything, a space and dataset this evaluator cannot score
        (a ``ValueError`` naming the mismatch and the fix); most evaluators score any."""
        return None

    def settings(self) -> dict[str, Any]:
        """Everything that changes the score (for the study's record)."""
        return {"name": self.name, **dataclasses.asdict(self)}  # type: ignore[call-overload]

    def describe(self) -> str:
        s = ", ".join(f"{k}={v}" for k, v in self.settings().items() if k != "name")
        return f"{self.name} ({s})"


# --------------------------------------------------------------------------------------------


@register_evaluator("train")
@dataclass(frozen=True)
class TrainEvaluator(TrainEvaluatorSettings, Evaluator):
    """Short training from scratch, scored on the validation split (top-1 accuracy, 0..1)."""

    fidelity: ClassVar[bool] = True

    @property
    def metric(self) -> str:
        return "val_accuracy"

    def fit_settings(self) -> FitSettings:
        """The training loop's settings (``nas.fit.settings.FitSettings``) these evaluator settings name."""
        return FitSettings(**{f.name: getattr(self, f.name) for f in dataclasses.fields(FitSettings)})

    def evaluate(self, arch: Arch, data: Dataset, *, seed: int,
                 on_epoch: Callable[[int, float], None] | None = None) -> EvalResult:
        """Train, recalibrate BatchNorm, score.  ``on_epoch(epochs_trained, val_accuracy)`` after every
        epoch but the last (whose accuracy is the score); an exception it raises ends the evaluation."""
        t0 = time.perf_counter()
        fs = self.fit_settings()
        with _seeded_build(arch, data, self.device, seed) as (model, device):
            if device.type == "cuda":
                model = model.to(memory_format=torch.channels_last)
            gen = torch.Generator().manual_seed(seed)  # one generator: every epoch's batches, then BN recalibration
            dtype = amp_dtype(device, self.amp)
            epoch_end = None
            if on_epoch is not None:
                def epoch_end(m: nn.Module, epoch: int, _loss: float) -> None:
                    if epoch + 1 < self.epochs:
                        on_epoch(epoch + 1, self._score_between_epochs(m, data, device, dtype, seed, epoch))
            train_loss, steps = train_epochs(
                model, data, build_optimizer(model, fs, self.lr), settings=fs,
                schedule=Schedule.of(len(data.train), fs, self.epochs), lr=self.lr, epochs=range(self.epochs),
                generator=lambda _epoch: gen, device=device, amp=dtype, stage="evaluator train",
                hint="lower evaluator.lr or set evaluator.grad_clip", on_epoch_end=epoch_end)
            train_s = time.perf_counter() - t0
            recalibrate_batchnorm(model, data, batches=self.bn_recalibration_batches, batch_size=self.batch_size,
                                  generator=gen, device=device, amp_dtype=dtype)
            acc, val_loss, n = _val_score(model, data, device, dtype, self.eval_batch_size)
        secs = time.perf_counter() - t0
        return EvalResult(acc, self.metric, secs, {
            "val_loss": val_loss, "train_loss": train_loss, "train_seconds": train_s, "steps": float(steps),
            "epochs": float(self.epochs), "val_images": float(n),
        })

    def _score_between_epochs(self, model: nn.Module, data: Dataset, device: torch.device, dtype, seed: int,
                              epoch: int) -> float:
        """Validation accuracy after ``epoch`` (BatchNorm recalibrated first), leaving the run as it was:
        its own batch generator and a forked RNG, so training goes on exactly as without it (the next
        epoch's forward in train mode uses batch statistics, not the recalibrated running ones)."""
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            recalibrate_batchnorm(model, data, batches=self.bn_recalibration_batches, batch_size=self.batch_size,
                                  generator=torch.Generator().manual_seed(seed * 7919 + epoch + 1), device=device,
                                  amp_dtype=dtype)
            acc, _, _ = _val_score(model, data, device, dtype, self.eval_batch_size)
        return acc


@torch.no_grad()
def _val_score(model: nn.Module, data: Dataset, device: torch.device, amp_dtype,
               batch_size: int) -> tuple[float, float, int]:
    """(top-1 accuracy, mean cross-entropy, images scored) on the validation split, in eval mode."""
    model.eval()
    correct, loss_sum, n = 0, 0.0, 0
    for x, y in data.batches("val", batch_size=batch_size, device=device):
        with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            out = model(x)
        out = out.float()
        loss_sum += float(nn.functional.cross_entropy(out, y, reduction="sum"))
        correct += int((out.argmax(1) == y).sum())
        n += len(y)
    return correct / n, loss_sum / n, n


# --------------------------------------------------------------------------------------------


@register_evaluator("supernet")
@dataclass(frozen=True)
class SupernetEvaluator(SupernetEvaluatorSettings, Evaluator):
    """Inherited weights from a trained supernet (``python -m nas.supernet``), BatchNorm recalibrated,
    scored on the validation split (top-1 accuracy, 0..1).  The checkpoint is loaded once per process."""

    @property
    def metric(self) -> str:
        return "val_accuracy"

    def check(self, space: Any, data: Dataset) -> None:
        _, meta = load_supernet(self.checkpoint)
        check_matches(meta, self.checkpoint, space=space, data=data)

    def evaluate(self, arch: Arch, data: Dataset, *, seed: int) -> EvalResult:
        t0 = time.perf_counter()
        _check_fit(arch, data)
        sn, _ = load_supernet(self.checkpoint)
        device = resolve_device(self.device)
        dtype = amp_dtype(device, self.amp)
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            model = sn.subnet(arch).to(device)
            gen = torch.Generator().manual_seed(seed)
            if self.finetune_steps:
                self._finetune(model, data, device, dtype, gen)
            recalibrate_batchnorm(model, data, batches=self.bn_recalibration_batches, batch_size=self.batch_size,
                                  generator=gen, device=device, amp_dtype=dtype)
            acc, val_loss, n = _val_score(model, data, device, dtype, self.eval_batch_size)
        return EvalResult(acc, self.metric, time.perf_counter() - t0, {"val_loss": val_loss, "val_images": float(n)})

    def _finetune(self, model: nn.Module, data: Dataset, device: torch.device, dtype: torch.dtype | None,
                  gen: torch.Generator) -> None:
        """``finetune_steps`` steps of the training loop (``nas.fit``) on the subnet (a copy of the inherited weights: the
        supernet is untouched), peak rate ``finetune_lr`` decaying to zero, no warm-up."""
        fs = FitSettings(batch_size=self.batch_size, lr=self.finetune_lr, warmup_epochs=0.0)
        sched = dataclasses.replace(Schedule.of(len(data.train), fs, 1), total=self.finetune_steps)  # no warm-up
        train_epochs(model, data, build_optimizer(model, fs, fs.lr), settings=fs, schedule=sched, lr=fs.lr,
                     epochs=range(-(-self.finetune_steps // sched.steps_per_epoch)), generator=lambda _epoch: gen, device=device,
                     amp=dtype, stage="supernet fine-tune", hint="lower evaluator.finetune_lr",
                     max_steps=self.finetune_steps)


# --------------------------------------------------------------------------------------------

# activations whose sign pattern NASWOT reads (gates such as sigmoid / hard-sigmoid are not codes)
_ACT_TYPES: tuple[type[nn.Module], ...] = (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.SiLU, nn.GELU, nn.Mish,
                                           nn.LeakyReLU, nn.ELU)


def _act_types() -> tuple[type[nn.Module], ...]:
    return _ACT_TYPES + (ta.GELU, ta.Swish, ta.HardSwish, ta.Mish, ta.GELUTanh, ta.QuickGELU, ta.HardMish)


def naswot_score(model: nn.Module, x: torch.Tensor) -> float:
    """NASWOT: log|K|, K[i, j] = number of activation units where inputs i and j have the same sign."""
    acts = [m for m in model.modules() if isinstance(m, _act_types())]
    if not acts:
        raise ValueError("naswot: the network has no activation layers to read codes from")
    n = len(x)
    k = torch.zeros(n, n, dtype=torch.float64, device=x.device)

    def hook(_m: nn.Module, _inp: Any, out: torch.Tensor) -> None:
        c = (out.detach().reshape(n, -1) > 0).to(torch.float64)
        k.add_(c @ c.T).add_((1.0 - c) @ (1.0 - c).T)

    handles = [m.register_forward_hook(hook) for m in acts]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    sign, logdet = torch.linalg.slogdet(k)
    if sign <= 0:  # identical codes for two inputs: a singular kernel; fall back to a tiny ridge
        sign, logdet = torch.linalg.slogdet(k + 1e-6 * torch.eye(n, dtype=k.dtype, device=k.device))
    return float(logdet)


def synflow_score(model: nn.Module, in_shape: tuple[int, int, int], device: torch.device) -> float:
    """SynFlow: log sum |theta * dR/dtheta| with R = sum(f(1)) on |theta|, in float64, BN as identity."""
    model = model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.abs_()
    x = torch.ones((1, *in_shape), dtype=torch.float64, device=device)
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()
    total = sum(float((p.detach() * p.grad).abs().sum()) for p in model.parameters() if p.grad is not None)
    return math.log(total) if total > 0 else float("-inf")


@register_evaluator("zero_cost")
@dataclass(frozen=True)
class ZeroCostEvaluator(ZeroCostEvaluatorSettings, Evaluator):
    """A training-free proxy of the untrained network (higher is better)."""

    @property
    def metric(self) -> str:
        return self.proxy

    def evaluate(self, arch: Arch, data: Dataset, *, seed: int) -> EvalResult:
        t0 = time.perf_counter()
        with _seeded_build(arch, data, self.device, seed) as (model, device):
            if self.proxy == "naswot":
                gen = torch.Generator().manual_seed(seed)
                x, _ = next(data.batches("train", batch_size=min(self.batch_size, len(data.train)), shuffle=True,
                                         generator=gen, device=device))
                model.train()
                score = naswot_score(model, x)
            else:
                score = synflow_score(model, (arch.in_chans, arch.resolution, arch.resolution), device)
        if not math.isfinite(score):
            raise ValueError(f"zero_cost {self.proxy}: the score is not finite ({score}) for this network")
        return EvalResult(score, self.metric, time.perf_counter() - t0, {})
