"""The pruning stage of ``nas.train``: a plan toward the target's latency (or MACs), checked against
measurements where the target is this machine, fine-tuning, and the rule that decides whether the
pruned network is kept.

What pruning may cost (``prune.*``, ``nas.train.settings.PruneSettings``):

- **Toward what.** ``prune.by=latency`` (default) plans against the target's latency model.  On a
  target whose latency is a roofline ESTIMATE (no measured table) or a REHEARSAL (a table a device
  bundle's rehearsal measured on another machine) that would trade accuracy for a number the device
  never gave, so pruning is skipped, and says so, unless ``prune.on_estimate=true``;
  ``prune.by=macs`` prunes toward ``prune.ratio`` x the network's MACs instead, labelled as such.
- **Each step.** The planner stops before a step that saves less than ``prune.min_gain`` (0.1%) of the
  unpruned network's latency: such a gain is below what the model can tell apart.
- **The result.** After fine-tuning, the pruned network is kept only if its accuracy on the
  validation split is at most ``prune.max_drop`` points (1) below the unpruned one's; otherwise the
  unpruned network is what ships, and the int8 variants are built from it.  The validation split
  decides (the test split stays unseen until the report).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from nas._io import atomic_write_json, atomic_write_text
from nas.arch import Arch
from nas.builder import build
from nas.compress.prune import apply_plan, channel_importance
from nas.compress.prune_plan import LossProbe, PrunePlan, plan_pruning
from nas.cost import arch_cost
from nas.data import Dataset
from nas.export.onnx import export_onnx
from nas.export.verify import eval_split
from nas.fit.loop import accuracy, fit
from nas.latency.runtimes import measure_onnx
from nas.latency.tables import on_device
from nas.narrow import channel_units
from nas.train.context import PipelineContext
from nas.train.records import ModelResult, PruneDecision, PruneRecord
from nas.train.settings import SEED_OFFSETS

__all__ = ["prune_guide", "stage_prune", "train_batches"]

log = logging.getLogger(__name__)


def train_batches(data: Dataset, n: int, batch_size: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The first ``n`` shuffled (not augmented) training batches of a generator seeded with ``seed``."""
    it = data.batches("train", batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed))
    return [b for _, b in zip(range(n), it)]


def _measure_arch_ms(ctx: PipelineContext, arch: Arch) -> float:
    """``arch``'s fp32 latency measured here (random weights: the latency does not depend on them)."""
    g = torch.Generator().manual_seed(0)
    shape = (arch.in_chans, arch.resolution, arch.resolution)
    data = export_onnx(build(arch).eval(), torch.randn(1, *shape, generator=g), exporter="torchscript")
    return measure_onnx(data, shape, ctx.targets["fp32"], ctx.s.export)["median_ms"]


def _measured_pruning(ctx: PipelineContext, arch0: Arch, plan: PrunePlan, make_plan: Callable[[float], PrunePlan],
                      ratio: float, steps: int) -> tuple[PrunePlan, dict[str, Any]]:
    """When the target is this machine: measure the planned network against the unpruned one (same
    session, as a ratio) and, while it misses ``ratio``, re-plan, at most ``steps`` times.  The
    next predicted target comes from the secant through the last two (predicted ratio, measured
    ratio) points, the unpruned network (1, 1) first: exact when the predictor misses by a scale
    or an offset.  The prediction guides the plan; the measurement decides when it is done."""
    base = _measure_arch_ms(ctx, arch0)
    before = plan.predicted_ms_before
    pts = [(1.0, 1.0)]
    tries = []
    for i in range(steps + 1):
        got = _measure_arch_ms(ctx, plan.arch) / base
        pr = plan.predicted_ms_after / before
        pts.append((pr, got))
        tries.append({"target_ms": plan.target_ms, "predicted_ms": plan.predicted_ms_after,
                      "predicted_ratio": pr, "measured_ratio": got})
        log.info("pruning: predicted %.3fx, measured %.3fx of the unpruned network (want <= %.2fx)", pr, got, ratio)
        if got <= ratio or not plan.reached or i == steps:
            break
        (p0, m0), (p1, m1) = pts[-2], pts[-1]
        nxt_pr = p1 + (ratio - m1) * (p1 - p0) / (m1 - m0) if m1 < m0 and p1 < p0 else p1 * ratio / m1
        nxt = make_plan(before * min(max(nxt_pr, 0.05), 0.995 * p1))
        if nxt.arch == plan.arch:
            break
        plan = nxt
    if tries[-1]["measured_ratio"] > ratio:
        log.warning("pruning: the measured latency is %.3fx the unpruned network's, above %.2fx",
                    tries[-1]["measured_ratio"], ratio)
    return plan, {"unpruned_ms": base, "ratio": ratio, "tries": tries,
                  "reached": tries[-1]["measured_ratio"] <= ratio}


def _macs(archs) -> np.ndarray:
    """MMACs of each Arch: the guide of ``prune.by=macs``."""
    return np.array([arch_cost(a).macs / 1e6 for a in archs], dtype=np.float64)


def prune_guide(ctx: PipelineContext) -> tuple[Callable | None, str, str]:
    """``(predict, unit, why_not)``: what the plan is scored by (``ctx.guide.predict`` or MACs), its
    unit, and, when pruning is skipped, why (one line)."""
    p = ctx.s.prune
    if p.by == "macs":
        return _macs, "MMACs", ""
    if ctx.guide.source == "estimated" and not p.on_estimate:
        return None, "ms", (f"pruning skipped: target {ctx.s.target.name!r} has no measured latency table, and pruning "
                            "toward a roofline estimate trades accuracy for a number nobody measured; prune.by=macs "
                            "prunes toward prune.ratio of the MACs, prune.on_estimate=true toward the estimate")
    if not on_device(ctx.guide.source) and not p.on_estimate:
        return None, "ms", (f"pruning skipped: the latency table of target {ctx.s.target.name!r} is a {ctx.guide.how}, "
                            "not the device's, and pruning toward it trades accuracy for a number the device never "
                            "gave; prune.by=macs prunes toward prune.ratio of the MACs, prune.on_estimate=true "
                            "toward the rehearsal's figures")
    return ctx.guide.predict, "ms", ""


def _prune_plan(ctx: PipelineContext, model: nn.Module, arch0: Arch, mdir: Path, predict: Callable) -> PrunePlan:
    """The pruning plan (``prune_plan.json``, re-used when there), measured and re-planned when the
    target is this machine and it prunes by latency (``prune_measured.json``)."""
    s, data, p = ctx.s, ctx.data, ctx.s.prune
    plan_path = mdir / "prune_plan.json"
    if plan_path.is_file():
        plan = PrunePlan.from_dict(json.loads(plan_path.read_text()))
        if plan.original != arch0:
            raise ValueError(f"{plan_path} is for another Arch; remove it or use another out dir")
        return plan
    before = float(predict([arch0])[0])
    target_ms = p.target_ms if p.target_ms is not None and p.by == "latency" else p.ratio * before
    batches = None
    if p.criterion == "taylor":
        batches = train_batches(data, p.taylor_batches, s.train.batch_size, s.seed + SEED_OFFSETS["taylor_batches"])
    imp = channel_importance(model, channel_units(arch0), p.criterion, batches=batches)
    probe = None
    if p.criterion == "loss":
        bs = min(s.train.eval_batch_size, p.loss_samples)
        probe = LossProbe(model, train_batches(data, -(-p.loss_samples // bs), bs, s.seed + SEED_OFFSETS["loss_probe"]))

    def make_plan(ms: float) -> PrunePlan:
        return plan_pruning(arch0, imp, predict, target_ms=ms, multiple=ctx.multiple, se_ratio=ctx.se_ratio,
                            criterion=p.criterion, min_keep=p.min_keep, lookahead=p.lookahead, probe=probe,
                            structural=p.structural, min_gain_ms=p.min_gain * before)

    plan = make_plan(target_ms)
    if (p.by == "latency" and p.measure_steps and p.target_ms is None and s.export.measure
            and ctx.measure_here.get("fp32")):
        plan, loop = _measured_pruning(ctx, arch0, plan, make_plan, p.ratio, p.measure_steps)
        atomic_write_json(mdir / "prune_measured.json", loop)
    atomic_write_json(plan_path, plan.to_dict())
    return plan


def stage_prune(ctx: PipelineContext, model: nn.Module, arch0: Arch, mdir: Path, base_meta: dict[str, Any],
                res: ModelResult) -> tuple[nn.Module, Arch] | None:
    """2. Pruning, then fine-tuning (``pruned.ckpt``): the pruned model and its Arch when it is kept,
    else None (skipped, nothing to prune, or it cost more than ``prune.max_drop``); ``res.prune``
    says which, and why."""
    s, p = ctx.s, ctx.s.prune
    predict, unit, why_not = prune_guide(ctx)
    if predict is None:
        log.warning("%s: %s", mdir.name, why_not)
        res.prune = PruneRecord(by=p.by, skipped=why_not)
        return None
    plan = _prune_plan(ctx, model, arch0, mdir, predict)
    rec = res.prune = PruneRecord(by=p.by, plan=plan, unit=unit, source=ctx.guide.source if p.by == "latency" else None)
    if not plan.steps:
        rec.skipped = "no pruning step paid for itself (prune.min_gain)"
        log.info("%s: %s", mdir.name, rec.skipped)
        return None
    pruned = apply_plan(model, plan)
    atomic_write_text(mdir / "pruned_arch.json", plan.arch.to_json(indent=1) + "\n")  # for nas.export
    hist = fit(pruned, ctx.data, settings=s.train, epochs=p.epochs, lr=p.lr, ckpt=mdir / "pruned.ckpt",
               seed=s.seed + SEED_OFFSETS["prune_finetune"], meta={**base_meta, "stage": "pruned", "plan": plan.arch.digest()},
               stage=f"{mdir.name} pruned", teacher=model, distill=p.distill, temperature=p.temperature,
               target=s.target)
    loop_path = mdir / "prune_measured.json"
    if loop_path.is_file():
        rec.measured = json.loads(loop_path.read_text())
    res.history.pruned = hist
    before, after = accuracy(model, ctx.data, "val"), accuracy(pruned, ctx.data, "val")
    drop = 100 * (before - after)
    rec.decision = PruneDecision(split="val", unpruned=before, pruned=after, drop_points=drop, max_drop=p.max_drop)
    split = eval_split(ctx.data)
    pruned_acc = accuracy(pruned, ctx.data, split)
    rec.pruned_accuracy = {split: pruned_acc}
    if drop > p.max_drop:
        rec.rejected = (f"fine-tuned, it scored {100 * after:.2f}% on val against {100 * before:.2f}% "
                        f"unpruned: {drop:.2f} points lost, more than prune.max_drop={p.max_drop:g}; "
                        "the unpruned network ships")
        log.warning("%s: pruning rejected: %s", mdir.name, rec.rejected)
        return None
    rec.kept = True
    res.torch_accuracy.pruned = pruned_acc
    return pruned, plan.arch
