"""Training the supernet: the sandwich rule or progressive shrinking, with in-place distillation, on
one process or many.

Each step (``SandwichStep``) trains, on one batch, the largest subnet on the labels, then the
smallest and ``random_subnets`` uniformly sampled ones on the largest's soft outputs; the
gradients of all of them accumulate into one optimizer step of the shared weights.  With
``schedule=progressive`` the smallest and the sampled subnets vary only along the dimensions the
epoch's phase has unlocked (``nas.supernet.schedule``); in the first phase the largest trains alone.
The loop is ``nas.fit.loop.train_epochs`` (optimizer, warm-up + cosine schedule, clipping, mixed
precision on CUDA); the supernet contributes only the step.

Many processes (``torchrun --nproc_per_node=N -m nas.supernet ...``): every process holds the
whole supernet, trains on its own share of each epoch's batches (the same shuffle, every N-th
batch) and averages the gradients with the others (one all-reduce per step) before the optimizer
step, so the weights stay identical everywhere.  Every process samples the same subnets at a step
(the sample is seeded by the seed and the step number).  With ``sort_channels``, every epoch ends
with the channels internal to a block re-sorted by importance (``Supernet.sort_channels``), on every
process alike (the order depends on the shared parameters only).  Process 0 then validates and
writes the checkpoint; a re-run resumes from it.  Before training, the processes compare a
digest of their settings and refuse to start when one differs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as td
from torch import nn

from nas.data import Dataset
from nas.fit.checkpoint import diff_messages
from nas.fit.loop import (
    Schedule,
    accuracy,
    amp_dtype,
    build_optimizer,
    recalibrate_batchnorm,
    resolve_device,
    train_epochs,
)
from nas.space import SearchSpace
from nas.supernet.checkpoint import data_record, load_supernet, read_checkpoint, save_supernet
from nas.supernet.dist import Dist, allreduce_grads, check_same_settings
from nas.supernet.elastic import ArchOutsideSpace
from nas.supernet.model import Supernet
from nas.supernet.schedule import draw, phase_at, phases
from nas.supernet.settings import SupernetSettings

__all__ = ["CKPT_NAME", "SandwichStep", "train_supernet"]

log = logging.getLogger(__name__)

CKPT_NAME = "supernet.ckpt"
# settings added since checkpoints were first written, with the value an older checkpoint trained with
_ADDED_SETTINGS = {"schedule": "sandwich", "phase_starts": SupernetSettings().phase_starts}


class SandwichStep:
    """One training step (``nas.fit.loop.train_epochs``'s ``step_fn``): the largest subnet on the labels,
    the others distilled from it; which others depends on the schedule's phase at the step's epoch
    (an epoch is ``steps_per_epoch`` steps; progressive shrinking needs it)."""

    def __init__(self, supernet: Supernet, s: SupernetSettings, dist: Dist, *,
                 steps_per_epoch: int | None = None) -> None:
        if steps_per_epoch is None and s.schedule != "sandwich":
            raise ValueError(f"SandwichStep: schedule {s.schedule!r} changes phase by epoch; give steps_per_epoch")
        self.sn, self.s, self.dist, self.steps_per_epoch = supernet, s, dist, steps_per_epoch or 1
        self.phases = phases(s)
        self.ce = nn.CrossEntropyLoss(label_smoothing=s.label_smoothing)
        self.hard_ce = nn.CrossEntropyLoss()
        self.params = [p for p in supernet.parameters() if p.requires_grad]

    def archs(self, step: int) -> list[Any]:
        """The subnets of ``step``: the largest, the smallest, then the random ones, along the dimensions
        elastic in the step's phase (``nas.supernet.schedule.draw``; seeded by the step, so every
        process draws the same)."""
        rng = np.random.default_rng([self.s.seed, step])
        phase = phase_at(self.phases, step // self.steps_per_epoch)
        return draw(self.sn, rng, phase.elastic, self.s.random_subnets)

    def __call__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, step: int,
                 backward: Callable[[torch.Tensor], None]) -> torch.Tensor:
        s, T = self.s, self.s.temperature
        archs = self.archs(step)
        self.sn.set_arch(archs[0])
        out = self.sn(x)
        loss = self.ce(out, y)
        backward(loss)
        soft = nn.functional.log_softmax(out.detach().float() / T, dim=1)
        total = loss.detach().float()
        for a in archs[1:]:
            self.sn.set_arch(a)
            o = self.sn(x)
            kd = nn.functional.kl_div(nn.functional.log_softmax(o.float() / T, dim=1), soft,
                                      reduction="batchmean", log_target=True) * T**2
            small = s.distill * kd + (1.0 - s.distill) * self.hard_ce(o, y) if s.distill < 1 else kd
            backward(small)
            total = total + small.detach().float()
        self.sn.set_arch(self.sn.largest)
        if self.dist.active:
            allreduce_grads(self.params, self.dist.world)
        return total / len(archs)


class _Shard:
    """Process ``rank``'s share of ``data``'s training batches: every ``world``-th batch of the same
    shuffle, the same count on every process (an all-reduce per step must meet)."""

    def __init__(self, data: Dataset, dist: Dist, steps: int) -> None:
        self.data, self.dist, self.steps = data, dist, steps

    def batches(self, split: str, **kw: Any) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        it = self.data.batches(split, **kw)
        for i, b in enumerate(it):
            if i >= self.steps * self.dist.world:
                break
            if i % self.dist.world == self.dist.rank:
                yield b


def _resume(path: Path, record: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint in ``out`` when it is this run's; None when there is none."""
    if not path.is_file():
        return None
    c = read_checkpoint(path)
    have = {"space": c["space"]["digest"], "data": c["data"], "settings": {**_ADDED_SETTINGS, **c["settings"]}}

    def flat(r: dict[str, Any]) -> dict[str, Any]:  # one message per training setting that differs
        return {"space": r["space"], "data": r["data"], **{f"train.{k}": v for k, v in r["settings"].items()}}

    d = diff_messages(flat(have), flat(record))
    if d:
        raise ValueError(f"{path} holds another supernet ({'; '.join(d)}); use another out= or remove it to start over")
    return c


def _inherit(sn: Supernet, init: str | Path) -> None:
    """``sn``'s weights (its largest architecture's) from the supernet checkpoint ``init``."""
    parent, _ = load_supernet(init)
    try:
        sn.net.load_state_dict(parent.subnet(sn.largest).state_dict())
    except (ArchOutsideSpace, RuntimeError) as e:
        raise ValueError(f"init={init}: that supernet does not hold this space's largest architecture, so it "
                         f"cannot initialise it ({str(e).splitlines()[0]})") from None
    log.info("supernet: initialised from %s", init)


def _validate(sn: Supernet, data: Dataset, s: SupernetSettings, device: torch.device, seed: int) -> dict[str, float]:
    """Validation accuracy of the largest and the smallest subnet, BatchNorm recalibrated."""
    out = {}
    dtype = amp_dtype(device, s.amp)
    for name, arch in (("largest", sn.largest), ("smallest", sn.smallest)):
        m = sn.subnet(arch)
        recalibrate_batchnorm(m, data, batches=s.bn_recalibration_batches, batch_size=min(s.batch_size, len(data.train)),
                              generator=torch.Generator().manual_seed(seed), device=device, amp_dtype=dtype)
        out[f"val_accuracy_{name}"] = accuracy(m.eval(), _OnDevice(data, device), "val", batch_size=s.eval_batch_size)
    return out


class _OnDevice:
    """``data`` whose batches are on ``device`` (for ``accuracy``)."""

    def __init__(self, data: Dataset, device: torch.device) -> None:
        self.data, self.device = data, device

    def batches(self, split: str, **kw: Any) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self.data.batches(split, device=self.device, **kw)


def train_supernet(space: SearchSpace, data: Dataset, s: SupernetSettings, out: str | Path, *,
                   extra: dict[str, Any] | None = None, init: str | Path | None = None,
                   on_epoch: Callable[[dict[str, float]], None] | None = None) -> dict[str, Any]:
    """Train the supernet of ``space`` on ``data`` into ``out``/supernet.ckpt (after every epoch; a re-run
    resumes, a checkpoint of another supernet there is refused).  Under ``torchrun`` (the process group
    initialised) every process calls this.  Returns the checkpoint's record (space, data, settings,
    history; no weights).

    ``init``: a trained supernet checkpoint of a space that holds every architecture of ``space`` (one
    it restricts): a new run starts from the weights that supernet gives ``space``'s largest
    architecture instead of a random initialisation (few-shot NAS, Zhao et al. 2021: sub-supernets
    split from a trained one); a resumed run continues from its own checkpoint."""
    dist = Dist.current()
    path = Path(out) / CKPT_NAME
    record = {"space": space.digest(), "data": data_record(data), "settings": s.to_dict()}
    check_same_settings({**record, **(extra or {})}, dist)
    device = resolve_device(s.device)
    if device.type == "cuda" and dist.active:
        device = torch.device("cuda", dist.local_rank)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(s.seed)
        sn = Supernet(space, in_chans=data.in_chans, num_classes=data.num_classes)
    ckpt = _resume(path, record)
    if ckpt is None and init is not None:
        _inherit(sn, init)
    fs = s.fit_settings()
    opt = build_optimizer(sn, fs, s.lr)
    start, history = 0, []
    if ckpt is not None:
        sn.net.load_state_dict(ckpt["model"])
        start, history = int(ckpt["epoch"]), list(ckpt["history"])
    sn.to(device)
    if ckpt is not None:
        opt.load_state_dict(ckpt["opt"])
        log.info("supernet: resuming at epoch %d/%d from %s", start + 1, s.epochs, path)
    bs = min(s.batch_size, len(data.train))
    steps = max(1, len(data.train) // bs // dist.world)
    total = max(1, steps * s.epochs)
    sched = Schedule(bs, steps, total, min(total - 1, int(round(s.warmup_epochs * steps))))
    step_fn = SandwichStep(sn, s, dist, steps_per_epoch=steps)
    table = step_fn.phases
    t0 = [time.perf_counter()]

    def epoch_start(_m: nn.Module, _epoch: int) -> None:
        t0[0] = time.perf_counter()

    def epoch_end(_m: nn.Module, epoch: int, loss: float) -> None:
        if s.sort_channels:  # every process, before the checkpoint: a resumed run continues from sorted weights
            sn.sort_channels(opt)
        if dist.rank == 0:
            rec = {"epoch": epoch + 1, "phase": phase_at(table, epoch).name, "train_loss": loss,
                   "seconds": time.perf_counter() - t0[0], **_validate(sn, data, s, device, s.seed * 1_000_003 + epoch + 7)}
            history.append(rec)
            save_supernet(path, supernet=sn, data=record["data"], settings=s.to_dict(), epoch=epoch + 1,
                          opt=opt.state_dict(), history=history, phases=[p.to_dict() for p in table])
            log.info("supernet epoch %d/%d (%s): loss %.4f, val accuracy largest %.4f smallest %.4f (%.1f s)",
                     epoch + 1, s.epochs, rec["phase"], loss, rec["val_accuracy_largest"], rec["val_accuracy_smallest"],
                     rec["seconds"])
            if on_epoch is not None:
                on_epoch(rec)
        if dist.active:
            td.barrier()

    if start < s.epochs:
        train_epochs(sn, _Shard(data, dist, steps), opt, settings=fs, schedule=sched, lr=s.lr,
                     epochs=range(start, s.epochs), generator=lambda e: torch.Generator().manual_seed(s.seed * 1_000_003 + e),
                     device=device, amp=amp_dtype(device, s.amp), stage="supernet",
                     hint="lower lr or set grad_clip", on_epoch_start=epoch_start, on_epoch_end=epoch_end,
                     step_fn=step_fn)
    return {"path": str(path), "space": {"name": space.name, "digest": space.digest()}, "data": record["data"],
            "settings": s.to_dict(), "phases": [p.to_dict() for p in table], "epochs": s.epochs, "history": history,
            "world_size": dist.world, "params": sn.describe()["params"]}
