"""Importance ordering of the supernet's channels that no residual touches (as Once-for-All does).

A narrow subnet takes the leading channels of every shared weight (``nas.supernet.elastic.share``).
Re-sorting a channel dimension by importance, most important first, makes the leading channels the
ones the widest network relies on most.  Only dimensions internal to one block are sorted
(``internal_dims``):

* ``mid``: the expanded channels of an inverted-residual or fused-MBConv block (expand conv, its
  BatchNorm, depthwise conv and its BatchNorm, the squeeze-excite that gates them, projection conv);
* ``se``: the reduced channels of a squeeze-excite;
* ``mlp``: the hidden channels of an attention block's MLP;
* ``hidden``: the head's hidden layer (``conv_pool`` and ``pool_conv`` heads).

A channel's importance is the L1 norm of the weights that consume it: its slice of the projection
conv (``mid``), of the squeeze-excite's expand conv (``se``), of the MLP's second layer (``mlp``) or
of the classifier (``hidden``).  A channel whose outgoing weights are small contributes little to the
block's output, whatever its activation.  The importance reads parameters only (never BatchNorm
running statistics, which differ between ``torchrun`` processes), so every process sorts alike.

Sorting permutes every tensor carrying the dimension by the same permutation, so the widest network
computes the same function before and after (up to floating-point summation order).  Block outputs,
stage widths and the stem stay in index order: they feed residual connections, and a permutation
there would have to move together every weight of the residual chain and of each block that reads
it, for every narrower width the chain can take.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from nas.arch import Arch
from nas.narrow import channel_units

__all__ = ["ChannelDim", "internal_dims", "sort_dims"]


@dataclass(frozen=True)
class ChannelDim:
    """One channel dimension sorted as a whole: ``tensors`` are the (state-dict key, dim) pairs it
    indexes; ``consumer`` the weight whose input slices (dim 1) give each channel's importance."""

    name: str
    tensors: tuple[tuple[str, int], ...]
    consumer: str


def internal_dims(arch: Arch, keys: list[str]) -> list[ChannelDim]:
    """The dimensions of ``nas.build(arch)`` internal to one block, in network order (``keys``: the
    network's state-dict keys)."""
    dims = []
    for u in channel_units(arch):
        if u.kind in ("mid", "hidden"):
            consumer = next(k for k, d in u.tensors if d == 1 and ".se." not in k)
            dims.append(ChannelDim(u.name, u.tensors, consumer))
    for k in keys:
        if k.endswith(".se.conv_reduce.weight"):
            p = k[: -len("conv_reduce.weight")]
            dims.append(ChannelDim(f"se:{p[:-4]}", ((f"{p}conv_reduce.weight", 0), (f"{p}conv_reduce.bias", 0),
                                                     (f"{p}conv_expand.weight", 1)), f"{p}conv_expand.weight"))
        elif k.endswith(".mlp.fc1.weight"):
            p = k[: -len("fc1.weight")]
            dims.append(ChannelDim(f"mlp:{p[:-5]}", ((f"{p}fc1.weight", 0), (f"{p}fc1.bias", 0), (f"{p}fc2.weight", 1)),
                                   f"{p}fc2.weight"))
    known = set(keys)
    for dim in dims:
        missing = [k for k, _ in dim.tensors if k not in known]
        if missing:
            raise ValueError(f"channel dimension {dim.name}: the network has no tensor {missing[0]}")
    return dims


def importance(weight: torch.Tensor) -> torch.Tensor:
    """Per input channel (dim 1) of a consuming weight: the L1 norm of its slice."""
    return weight.detach().abs().transpose(0, 1).reshape(weight.shape[1], -1).sum(1)


@torch.no_grad()
def sort_dims(net: nn.Module, dims: list[ChannelDim], optimizer: torch.optim.Optimizer | None = None
              ) -> dict[str, torch.Tensor]:
    """Sort each of ``dims`` in place, most important channel first (ties keep their order), with the
    gradients and ``optimizer``'s per-parameter state (momentum, Adam moments) of every permuted
    parameter; returns each dimension's permutation (new position -> old channel)."""
    tensors = dict(net.named_parameters()) | dict(net.named_buffers())
    state = optimizer.state if optimizer is not None else {}
    perms = {}
    for dim in dims:
        order = torch.sort(importance(tensors[dim.consumer]), descending=True, stable=True).indices
        perms[dim.name] = order
        if torch.equal(order, torch.arange(len(order), device=order.device)):
            continue
        for key, d in dim.tensors:
            t = tensors[key]
            moved = [t, *([t.grad] if t.grad is not None else [])]
            moved += [v for v in state.get(t, {}).values() if torch.is_tensor(v) and v.shape == t.shape]
            for x in moved:
                x.copy_(x.index_select(d, order.to(x.device)))
    return perms
