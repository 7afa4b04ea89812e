"""The one training loop: the search's short training and the pipeline's full training, pruning
fine-tune and QAT all run ``train_epochs``.

AdamW or SGD (``build_optimizer``: no weight decay on norms and biases), linear warm-up then cosine
decay to zero (``lr_factor``), label smoothing, gradient clipping, optional knowledge distillation,
on the CPU or CUDA (``resolve_device``) with mixed precision on CUDA (``amp_dtype``: bf16 where
supported, else fp16 with gradient scaling).  ``fit`` adds what a long run needs: BatchNorm
recalibration and validation after every epoch, an atomic checkpoint after every epoch and
resuming from it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nas.compress.qat import QATNet
from nas.data import Dataset
from nas.fit.checkpoint import (
    CKPT_FORMAT,
    CKPT_VERSION,
    arch_differences,
    dataset_record,
    diff_messages,
    load_checkpoint,
    load_state,
    resume_meta,
    save_checkpoint,
)
from nas.fit.settings import FitSettings

__all__ = ["Schedule", "TrainingDiverged", "accuracy", "amp_dtype", "build_optimizer", "fit", "lr_factor",
           "recalibrate_batchnorm", "resolve_device", "train_epochs"]

log = logging.getLogger(__name__)


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite: the trial fails with this message."""


def resolve_device(device: str) -> torch.device:
    """``auto`` (CUDA when torch sees one, else the CPU), ``cpu``, ``cuda`` or ``cuda:<i>``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"evaluator.device={device!r} but torch sees no CUDA device here; use device=cpu or auto")
    try:
        return torch.device(device)
    except RuntimeError:
        raise ValueError(f"evaluator.device must be auto, cpu, cuda or cuda:<i>, got {device!r}") from None


def amp_dtype(device: torch.device, amp: bool) -> torch.dtype | None:
    """The autocast dtype on CUDA with ``amp`` (bf16 where supported, else fp16); None: full precision."""
    if device.type != "cuda" or not amp:
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def _autocast(device: torch.device, dtype: torch.dtype | None):
    return torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None)


def lr_factor(step: int, total: int, warm: int) -> float:
    """Linear warm-up over ``warm`` steps, then cosine decay to zero at ``total``."""
    if step < warm:
        return (step + 1) / (warm + 1)
    return 0.5 * (1.0 + math.cos(math.pi * (step - warm) / max(1, total - warm)))


def build_optimizer(model: nn.Module, s: FitSettings, lr: float) -> torch.optim.Optimizer:
    """AdamW or SGD (Nesterov when momentum > 0); weight decay on weights, not on norms and biases."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    groups = [{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if s.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=s.momentum, nesterov=s.momentum > 0)
    return torch.optim.AdamW(groups, lr=lr)


@dataclass(frozen=True)
class Schedule:
    """Batch size and step counts of a run of ``epochs`` over ``n`` training images."""

    batch_size: int
    steps_per_epoch: int
    total: int
    warm: int

    @classmethod
    def of(cls, n: int, s: FitSettings, epochs: int) -> Schedule:
        bs = min(s.batch_size, n)
        steps = max(1, n // bs)
        total = max(1, steps * epochs)
        return cls(bs, steps, total, min(total - 1, int(round(s.warmup_epochs * steps))))


@torch.no_grad()
def recalibrate_batchnorm(
    model: nn.Module,
    data: Dataset,
    *,
    batches: int,
    batch_size: int,
    generator: torch.Generator,
    device: str | torch.device = "cpu",
    amp_dtype: torch.dtype | None = None,
) -> None:
    """Re-estimate BatchNorm running statistics with the current weights (cumulative average).

    After a few hundred steps the exponential running averages still mix statistics of early
    weights, and a short-trained network can score at chance level in eval mode although it has
    learned; recomputing them on ``batches`` training batches is what makes short-training scores
    rank architectures.  Leaves the model in train mode.
    """
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns or not batches:
        return
    device = torch.device(device)
    saved = [m.momentum for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative moving average over the recalibration batches
    model.train()
    it = data.batches("train", batch_size=min(batch_size, len(data.train)), shuffle=True, generator=generator,
                      drop_last=True, device=device)
    try:
        for _, (x, _y) in zip(range(batches), it):
            with _autocast(device, amp_dtype):
                model(x)
    finally:
        for m, mom in zip(bns, saved):
            m.momentum = mom


def _distill_loss(loss: torch.Tensor, out: torch.Tensor, teacher: nn.Module, x: torch.Tensor, distill: float,
                  temperature: float) -> torch.Tensor:
    """Hinton et al. 2015: ``(1 - distill) * CE + distill * T^2 * KL(teacher || student)`` at temperature T."""
    with torch.no_grad():
        soft = nn.functional.log_softmax(teacher(x) / temperature, dim=1)
    kl = nn.functional.kl_div(nn.functional.log_softmax(out / temperature, dim=1), soft,
                              reduction="batchmean", log_target=True)
    return (1.0 - distill) * loss + distill * temperature**2 * kl


def _check_finite(loss: torch.Tensor, stage: str, epoch: int, step: int, lr: float, hint: str) -> None:
    if not torch.isfinite(loss):
        raise TrainingDiverged(f"{stage}: training diverged: loss {loss.item()} at epoch {epoch + 1} step "
                               f"{step + 1} (lr {lr:.3g}); {hint}")


def train_epochs(
    model: nn.Module,
    data: Dataset,
    opt: torch.optim.Optimizer,
    *,
    settings: FitSettings,
    schedule: Schedule,
    lr: float,
    epochs: range,
    generator: Callable[[int], torch.Generator],
    device: torch.device,
    amp: torch.dtype | None = None,
    stage: str = "train",
    hint: str = "lower the learning rate",
    teacher: nn.Module | None = None,
    distill: float = 0.0,
    temperature: float = 4.0,
    on_epoch_start: Callable[[nn.Module, int], None] | None = None,
    on_epoch_end: Callable[[nn.Module, int, float], None] | None = None,
    step_fn: Callable[[nn.Module, torch.Tensor, torch.Tensor, int, Callable[[torch.Tensor], None]], torch.Tensor]
    | None = None,
    max_steps: int | None = None,
) -> tuple[float, int]:
    """The training loop over ``epochs`` (a range: a resumed run starts late); returns the last
    epoch's mean training loss and the step count.  ``generator(epoch)`` shuffles and augments that
    epoch's batches; the learning rate of step k is ``lr * lr_factor(k, ...)``.

    ``step_fn(model, x, y, step, backward)`` replaces the step's forward pass and loss (the weight-sharing
    supernet trains several subnets per batch): it calls ``backward(loss)`` for each of its losses
    (gradients accumulate; mixed-precision scaling included) and returns the loss to report; the
    optimizer step, clipping and the divergence check stay here.  ``max_steps`` ends the run after that
    many steps in all (a fine-tune of a few steps: ``evaluator.finetune_steps``)."""
    loss_fn = nn.CrossEntropyLoss(label_smoothing=settings.label_smoothing)
    scaler = torch.amp.GradScaler("cuda", enabled=amp == torch.float16)
    if teacher is not None:
        teacher.eval()
    step, train_loss = epochs.start * schedule.steps_per_epoch, float("nan")
    for epoch in epochs:
        if on_epoch_start is not None:
            on_epoch_start(model, epoch)
        model.train()
        running, count = 0.0, 0
        for x, y in data.batches("train", batch_size=schedule.batch_size, shuffle=True, generator=generator(epoch),
                                 augment=True, drop_last=True, device=device):
            if max_steps is not None and step >= max_steps:
                break
            f = lr_factor(step, schedule.total, schedule.warm)
            for g in opt.param_groups:
                g["lr"] = lr * f
            if step_fn is not None:
                opt.zero_grad(set_to_none=True)
                with _autocast(device, amp):
                    loss = step_fn(model, x, y, step, lambda t: scaler.scale(t).backward())
                _check_finite(loss, stage, epoch, step, lr * f, hint)
            else:
                with _autocast(device, amp):
                    out = model(x)
                    loss = loss_fn(out, y)
                    if distill:
                        loss = _distill_loss(loss, out, teacher, x, distill, temperature)
                _check_finite(loss, stage, epoch, step, lr * f, hint)
                opt.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
            if settings.grad_clip is not None:
                scaler.unscale_(opt)
                nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
            scaler.step(opt)
            scaler.update()
            step += 1
            running += float(loss.detach()) * len(y)
            count += len(y)
        train_loss = running / max(1, count)
        if on_epoch_end is not None:
            on_epoch_end(model, epoch, train_loss)
    return train_loss, step


@torch.no_grad()
def accuracy(model: nn.Module, data: Dataset, split: str = "val", *, batch_size: int = 512,
             limit: int | None = None) -> float:
    """Top-1 accuracy (0..1) of a torch model on ``split``."""
    was = model.training
    model.eval()
    correct = n = 0
    for x, y in data.batches(split, batch_size=batch_size):
        if limit is not None and n >= limit:
            break
        if limit is not None:
            x, y = x[: limit - n], y[: limit - n]
        correct += int((model(x).argmax(1) == y).sum())
        n += len(y)
    model.train(was)
    return correct / max(n, 1)


def _resume(path: Path, model: nn.Module, opt: torch.optim.Optimizer, meta: Mapping[str, Any]) -> tuple[int, list]:
    """The finished epoch count and history of the checkpoint at ``path`` (loaded into ``model`` and
    ``opt``), refusing one for another Arch or other settings; (0, []) when there is none."""
    if not path.is_file():
        return 0, []
    c = load_checkpoint(path)
    if c.get("arch") != model.arch.to_dict():
        raise ValueError(f"{path}: the checkpoint is for another Arch "
                         f"({arch_differences(c['arch'], model.arch.to_dict())}); use another out dir or remove it")
    d = diff_messages(resume_meta(c.get("meta", {})), resume_meta(meta))
    if d:
        raise ValueError(f"{path}: resuming with other settings than the checkpoint's ({'; '.join(d)}); "
                         f"use the same settings, another out dir, or remove the checkpoint to start over")
    load_state(model, c["model"], str(path))
    opt.load_state_dict(c["opt"])
    return int(c["epoch"]), list(c.get("history", []))


def fit(
    model: nn.Module,
    data: Dataset,
    *,
    settings: FitSettings,
    epochs: int,
    lr: float,
    ckpt: str | Path,
    seed: int,
    meta: Mapping[str, Any],
    on_epoch_start: Callable[[nn.Module, int], None] | None = None,
    stage: str = "train",
    teacher: nn.Module | None = None,
    distill: float = 0.0,
    temperature: float = 4.0,
    target: Any = None,
) -> list[dict[str, float]]:
    """Train ``model`` in place (on the CPU) for ``epochs``, checkpointing after every epoch; resume from ``ckpt``.

    ``meta``: what defines this run (checked on resume).  Batches are shuffled by a generator
    seeded per epoch, so a resumed run sees exactly the batches an uninterrupted one would.
    With a ``teacher`` and ``distill`` > 0, the loss is knowledge distillation (Hinton et al.
    2015): ``(1 - distill) * cross-entropy + distill * T^2 * KL(teacher || student)`` at
    temperature ``T``, the teacher (eval mode, frozen) seeing the same augmented batch.
    ``target``: the ``Target`` the network is made for, recorded in the checkpoint (``target``) as
    its data is (``dataset``), so ``nas.export`` exports for it by default.
    Returns the per-epoch history (train loss, val accuracy, seconds).
    """
    path = Path(ckpt)
    fit_s = {k: v for k, v in settings.to_dict().items() if k != "epochs"}  # epochs and lr are per stage
    if not 0.0 <= distill <= 1.0:
        raise ValueError(f"distill must be in [0, 1], got {distill}")
    if distill and teacher is None:
        raise ValueError("distill > 0 needs a teacher network")
    kd = {"distill": distill, "temperature": temperature} if distill else {}
    meta = json.loads(json.dumps({**meta, "epochs": epochs, "lr": lr, "seed": seed, "fit": fit_s, **kd}))
    opt = build_optimizer(model, settings, lr)
    start, history = _resume(path, model, opt, meta)
    if start >= epochs:
        model.eval()
        return history
    if start:
        log.info("%s: resuming at epoch %d/%d from %s", stage, start + 1, epochs, path)
    t0 = [time.perf_counter()]

    def epoch_start(m: nn.Module, epoch: int) -> None:
        t0[0] = time.perf_counter()
        if on_epoch_start is not None:
            on_epoch_start(m, epoch)

    def epoch_end(m: nn.Module, epoch: int, train_loss: float) -> None:
        if not isinstance(m, QATNet):  # (QAT: BN is folded, and a pass in train mode would move the ranges)
            recalibrate_batchnorm(m, data, batches=settings.bn_recalibration_batches,
                                  batch_size=min(settings.batch_size, len(data.train)),
                                  generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch + 7))
            m.eval()
        val = accuracy(m, data, "val", batch_size=settings.eval_batch_size)
        rec = {"epoch": epoch + 1, "train_loss": train_loss, "val_accuracy": val, "seconds": time.perf_counter() - t0[0]}
        history.append(rec)
        save_checkpoint(path, {"format": CKPT_FORMAT, "version": CKPT_VERSION, "stage": stage,
                               "arch": m.arch.to_dict(),
                               "qat": dataclasses.asdict(m.settings) if isinstance(m, QATNet) else None,
                               "epoch": epoch + 1, "meta": meta, "model": m.state_dict(), "opt": opt.state_dict(),
                               "history": history, "dataset": dataset_record(data),
                               "target": target.to_dict() if target is not None else None})
        log.info("%s epoch %d/%d: loss %.4f, val accuracy %.4f (%.1f s)", stage, epoch + 1, epochs, train_loss, val,
                 rec["seconds"])

    train_epochs(model, data, opt, settings=settings, schedule=Schedule.of(len(data.train), settings, epochs), lr=lr,
                 epochs=range(start, epochs), generator=lambda e: torch.Generator().manual_seed(seed * 1_000_003 + e),
                 device=torch.device("cpu"), stage=stage, teacher=teacher, distill=distill, temperature=temperature,
                 on_epoch_start=epoch_start, on_epoch_end=epoch_end)
    model.eval()
    return history
