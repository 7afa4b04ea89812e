"""Latency-aware structured pruning in spec space: an ``Arch`` in, a smaller ``Arch`` out.

Because every channel count of an ``Arch`` is explicit, pruning is done on the spec, not on a
traced graph: the prunable channel sets ("units") follow from the block kinds, a plan changes
their sizes, and the weights of the kept channels are copied into ``build(plan.arch)``.  The
result is exact (a removed channel whose weights are zero leaves the output unchanged; see
``tests/test_prune.py``) and is again an ``Arch`` that the latency predictor scores.

Units (``channel_units``)
    ``mid``    the expansion channels of an inverted residual (``ir``) or fused-MBConv block:
               free to shrink, nothing outside the block sees them.
    ``chain``  a block output together with every residual block that adds into it: a
               producer (the stem, or a block without a residual) and the following blocks
               whose residual keeps the same channels share one channel set, so it shrinks
               jointly (writers: each member's last conv; readers: each member's and the next
               layer's input).  A chain containing an attention block is left alone (its embed
               dim is tied to the head count).
    ``hidden`` the hidden layer of a ``conv_pool`` / ``pool_conv`` head.
    Squeeze-excite channels are not searched: they follow their block's channels by the
    space's rule ``make_divisible(channels * se_ratio, multiple)`` (or, without a space,
    proportionally), keeping the SE channels of largest L1 norm.

Sizes move in groups of the space's ``channel_multiple`` (8 or 16): a unit shrinks to the
next lower multiple, so the result stays aligned to hardware tiles.  A step that would change
which blocks have a residual (a producer whose input and output widths become equal) is not
taken.

Importance (per channel, ``channel_importance``), normalised per tensor by its mean and summed
over every tensor of the unit (writers and readers, as torch-pruning's group importance):
``l1`` the L1 norm of the conv/linear weight slices, ``bn`` the BatchNorm scale |gamma|,
``taylor`` first-order Taylor (Molchanov et al. 2019): per batch, (sum of weight x gradient
over the channel's parameters) squared, averaged over the batches.

``loss`` (``LossProbe``, sensitivity analysis as in Distiller or AMC's layer probing): channels go
in L1 order, but what a step costs is measured: the increase of the cross-entropy on a fixed set
of training images when the step is applied to the network as pruned so far, before any
fine-tuning.  A removed channel is masked exactly (every tensor of its unit zeroed at that index,
which is what slicing it out does), so the probe sees the network ``apply_plan`` will build.
Because a measured loss compares any two changes, this criterion also offers whole-structure
steps (``structural=True``), which pay off where fixed per-operator costs dominate (a 50 us
network on a CPU: an SE module is five small operators, ~8% of it here):

``se:<block>``    drop a block's squeeze-excite; its gate becomes its mean over the probe images,
                  a per-channel constant folded into the next 1x1 convolution's weights.
``block:<block>`` drop a residual block (its branch becomes zero, the block an identity); the
                  stage gets one block shallower.

Planning (``plan_pruning``): greedily, among the units that can still shrink by one group,
take the step with the largest predicted latency saving per unit of importance removed (the
candidates are scored by the target's latency model, which fills block shapes its table lacks
with its learned model), until the prediction reaches ``target_ms``.  A step may remove up to
``lookahead`` groups from one unit: where the kernels work in tiles wider than the group
(AVX-512 pads channels to 16, a GPU to 32 or 64), one group less is often no faster and the
greedy would stop early (it stopped at 0.77x on small Fashion-MNIST networks before).

Why not torch-pruning: it traces the module graph to find the same coupled groups that the
explicit-channel ``Arch`` already names, and its output is a modified ``nn.Module``, not an
``Arch``; here the spec is the source of truth and the weight copy is a few index selects.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from nas.arch import Arch
from nas.builder import build
from nas.compress.criteria import CRITERIA
from nas.compress.prune_plan import LossProbe, PrunePlan, plan_pruning
from nas.narrow import (  # the narrowing of an Arch lives below both pruning and the profiler
    ChannelUnit,
    after_se_conv,
    channel_units,
    layer_prefix,
)

__all__ = ["apply_plan", "channel_importance", "prune_model"]

log = logging.getLogger(__name__)


def _per_channel(t: torch.Tensor, dim: int, reduce: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    t = t.detach().float().movedim(dim, 0)
    return reduce(t.reshape(t.shape[0], -1))


def _normalised_sum(parts: list[torch.Tensor], size: int) -> np.ndarray:
    total = torch.zeros(size, dtype=torch.float64)
    for v in parts:
        v = v.double()
        m = v.mean()
        total += v / m if m > 0 else v
    return total.numpy()


def _is_bn_weight(key: str, state: Mapping[str, torch.Tensor]) -> bool:
    return key.endswith(".weight") and key[: -len("weight")] + "running_var" in state


def channel_importance(
    model: nn.Module,
    units: Sequence[ChannelUnit],
    criterion: str = "l1",
    *,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]] | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> dict[str, np.ndarray]:
    """Per-channel importance of every unit (higher = keep).  ``taylor`` needs ``batches``;
    ``loss`` orders channels as ``l1`` does (its step costs come from a ``LossProbe``)."""
    if criterion not in CRITERIA:
        raise ValueError(f"prune.criterion must be one of {', '.join(CRITERIA)}, got {criterion!r}")
    if criterion == "loss":
        criterion = "l1"
    state = dict(model.state_dict())
    for u in units:
        for key, _ in u.tensors:
            if key not in state:
                raise ValueError(f"unit {u.name}: tensor {key!r} is not in the model; does the model match the Arch?")
    out: dict[str, np.ndarray] = {}
    if criterion == "taylor":
        if batches is None:
            raise ValueError("prune.criterion=taylor needs training batches (the gradient of the loss)")
        params = dict(model.named_parameters())
        loss_fn = loss_fn or nn.functional.cross_entropy
        acc = {u.name: torch.zeros(u.size, dtype=torch.float64) for u in units}
        was_training = model.training
        model.eval()  # BN statistics stay as trained; deterministic
        n = 0
        for x, y in batches:
            model.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            for u in units:
                s = torch.zeros(u.size, dtype=torch.float64)
                for key, dim in u.tensors:
                    p = params.get(key)
                    if p is None or p.grad is None:
                        continue
                    s += _per_channel(p * p.grad, dim, lambda t: t.sum(1)).double()
                acc[u.name] += s**2
            n += 1
        model.zero_grad(set_to_none=True)
        model.train(was_training)
        if n == 0:
            raise ValueError("prune.criterion=taylor got no batches")
        return {name: (v / n).numpy() for name, v in acc.items()}
    for u in units:
        parts = []
        for key, dim in u.tensors:
            t = state[key]
            if criterion == "l1" and t.ndim >= 2:
                parts.append(_per_channel(t, dim, lambda t: t.abs().sum(1)))
            elif criterion == "bn" and _is_bn_weight(key, state):
                parts.append(t.detach().abs().float())
        if not parts:  # e.g. a pool_conv head's hidden layer has no BN: its weights' L1 norm stands in
            parts = [_per_channel(state[k], d, lambda t: t.abs().sum(1)) for k, d in u.tensors if state[k].ndim >= 2]
        out[u.name] = _normalised_sum(parts, u.size)
    return out


def _se_keep(old: nn.Module | None, new_channels: int, kept_in: torch.Tensor | None) -> torch.Tensor | None:
    """The SE channels (of ``old``'s reduce conv) to keep: largest L1 norm."""
    if old is None:
        return None
    wr = old.conv_reduce.weight.detach()
    we = old.conv_expand.weight.detach()
    if kept_in is not None:
        wr, we = wr[:, kept_in], we[kept_in]
    score = wr.abs().flatten(1).sum(1) + we.abs().sum((0, 2, 3))
    top = torch.topk(score, new_channels).indices
    return torch.sort(top).values


def apply_plan(model: nn.Module, plan: PrunePlan) -> nn.Module:
    """``build(plan.arch)`` carrying ``model``'s weights for the kept channels (eval mode).

    A dropped squeeze-excite's mean gate is folded into the 1x1 convolution after it; a dropped
    residual block's tensors are left out and the blocks after it move up one index."""
    if getattr(model, "arch", plan.original) != plan.original:
        raise ValueError("the model's Arch is not the plan's original Arch")
    units = {u.name: u for u in channel_units(plan.original)}
    index: dict[str, dict[int, torch.Tensor]] = {}
    for name, kept in plan.keep:
        u = units.get(name)
        if u is None:
            raise ValueError(f"plan names unit {name!r}, which the original Arch does not have")
        idx = torch.tensor(kept, dtype=torch.long)
        for key, dim in u.tensors:
            index.setdefault(key, {})[dim] = idx
    old_layers = plan.original.layers()
    n = len(old_layers)
    dropped_se = dict(plan.dropped_se)
    survivors = [i for i in range(n) if i not in plan.dropped_blocks]
    new_of = {i: j for j, i in enumerate(survivors)}  # old layer index -> new
    new_layers = plan.arch.layers()
    if len(new_layers) != len(survivors):
        raise ValueError("the plan's Arch does not have the layers its dropped blocks leave")
    # squeeze-excite channels
    for i, ob in enumerate(old_layers):
        if i not in new_of:
            continue
        nb = new_layers[new_of[i]]
        ose, nse = getattr(ob, "se", None), getattr(nb, "se", None)
        if ose is None or nse is None or ose.channels == nse.channels:
            continue
        p = layer_prefix(i, n)
        se_mod = model.get_submodule(f"{p}.se")
        base_key = f"{p}.se.conv_reduce.weight"
        kept_in = index.get(base_key, {}).get(1)
        sel = _se_keep(se_mod, nse.channels, kept_in)
        for key, dim in ((f"{p}.se.conv_reduce.weight", 0), (f"{p}.se.conv_reduce.bias", 0),
                         (f"{p}.se.conv_expand.weight", 1)):
            index.setdefault(key, {})[dim] = sel
    state = dict(model.state_dict())
    for i, gate in dropped_se.items():  # x * gate -> the next 1x1 conv's input channels scaled by the gate
        key = after_se_conv(old_layers[i], layer_prefix(i, n))
        g = torch.as_tensor(gate, dtype=state[key].dtype)
        if g.numel() != state[key].shape[1]:
            raise ValueError(f"plan's mean gate for layer {i} has {g.numel()} channels, {key} reads "
                             f"{state[key].shape[1]}")
        state[key] = state[key] * g.view(1, -1, 1, 1)
    gone = tuple(f"{layer_prefix(i, n)}.se." for i in dropped_se) + tuple(f"{layer_prefix(i, n)}." for i in plan.dropped_blocks)
    rename = {f"{layer_prefix(i, n)}.": f"{layer_prefix(new_of[i], len(survivors))}." for i in survivors
              if layer_prefix(i, n) != layer_prefix(new_of[i], len(survivors))}
    new = build(plan.arch)
    target = new.state_dict()
    out = {}
    for key, t in state.items():
        if key.startswith(gone):
            continue
        for dim, idx in index.get(key, {}).items():
            t = t.index_select(dim, idx)
        head, _, rest = key.partition(".")
        if head == "blocks":
            blk, _, rest = rest.partition(".")
            pre = f"blocks.{blk}."
            key = rename.get(pre, pre) + rest
        if key in target and t.shape != target[key].shape:
            raise ValueError(f"pruned tensor {key} has shape {tuple(t.shape)}, the pruned Arch wants "
                             f"{tuple(target[key].shape)}")
        out[key] = t
    new.load_state_dict(out, strict=True)
    return new.eval()


def prune_model(
    model: nn.Module,
    latency: Callable[[Sequence[Arch]], np.ndarray],
    *,
    target_ms: float,
    multiple: int,
    criterion: str = "l1",
    se_ratio: float | None = None,
    min_keep: float = 0.25,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> tuple[nn.Module, PrunePlan]:
    """Importance -> plan -> sliced model, in one call.  ``model`` must have an ``arch``."""
    arch = getattr(model, "arch", None)
    if not isinstance(arch, Arch):
        raise ValueError("prune_model needs a model built by nas.builder.build (with an .arch)")
    units = channel_units(arch)
    batches = list(batches) if batches is not None else None
    imp = channel_importance(model, units, criterion, batches=batches)
    probe = LossProbe(model, batches or []) if criterion == "loss" else None
    plan = plan_pruning(arch, imp, latency, target_ms=target_ms, multiple=multiple, se_ratio=se_ratio,
                        criterion=criterion, min_keep=min_keep, probe=probe)
    return apply_plan(model, plan), plan
