"""Narrowing an ``Arch``: its prunable channel sets (``channel_units`` / ``ChannelUnit``), resizing
them (``resize_arch``) and dropping squeeze-excites or residual blocks (``droppable``,
``drop_layers``).  Spec-space only (no weights): structured pruning (``nas.compress.prune``)
and the profiler's pruned calibration networks (``nas.latency.profile.profiler.pruned_archs``) both
narrow through here; see ``nas.compress.prune`` for what the units are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from nas.arch import (
    SE,
    Arch,
    AttentionBlock,
    Block,
    ConvBlock,
    DSConvBlock,
    FusedMBConvBlock,
    Head,
    MBConvBlock,
)
from nas.space import make_divisible

__all__ = ["ChannelUnit", "channel_units", "drop_layers", "droppable", "resize_arch"]

_BN_SUFFIXES = ("weight", "bias", "running_mean", "running_var")


def _bn(prefix: str) -> list[tuple[str, int]]:
    return [(f"{prefix}.{s}", 0) for s in _BN_SUFFIXES]


@dataclass(frozen=True)
class ChannelUnit:
    """One set of channels that shrinks together.

    Attributes:
        name: A unique name (``chain<c>:<layer>[..<layer>]``, ``mid:<layer>``, ``hidden:head``);
            the key of ``resize_arch``'s ``sizes``.
        kind: ``chain`` (a block output and the residual chain that keeps it), ``mid`` (the
            expanded channels of an inverted residual) or ``hidden`` (the head's hidden features).
        size: The number of channels now.
        layers: Indices into ``Arch.layers()`` whose spec field ``field_name`` holds the size.
        field_name: ``out_ch``, ``mid_ch`` or ``hidden``.
        tensors: The ``(state-dict key, dim)`` pairs of the built ``ArchNet`` these channels index.
        prunable: False where the channels cannot shrink.
        reason: Why not, when not prunable.
    """

    name: str
    kind: str  # mid | chain | hidden
    size: int
    layers: tuple[int, ...]
    field_name: str  # out_ch | mid_ch | hidden
    tensors: tuple[tuple[str, int], ...]
    prunable: bool = True
    reason: str = ""  # why not prunable


def layer_prefix(i: int, n_layers: int) -> str:
    if i == 0:
        return "stem"
    if i == n_layers - 1:
        return "head"
    return f"blocks.{i - 1}"


def _out_tensors(block: Block, p: str) -> list[tuple[str, int]]:
    """Tensors indexed by a layer's output channels (it writes them)."""
    if isinstance(block, ConvBlock):
        return [(f"{p}.conv.weight", 0), *_bn(f"{p}.bn1")]
    if isinstance(block, DSConvBlock):
        return [(f"{p}.conv_pw.weight", 0), *_bn(f"{p}.bn2")]
    if isinstance(block, MBConvBlock):
        return [(f"{p}.conv_pwl.weight", 0), *_bn(f"{p}.bn3")]
    if isinstance(block, FusedMBConvBlock):
        return [(f"{p}.conv_pwl.weight", 0), *_bn(f"{p}.bn2")]
    raise ValueError(f"no output-channel rule for block kind {block.kind!r}")


def _se_in_tensors(p: str) -> list[tuple[str, int]]:
    """An SE module's tensors indexed by the channels it gates."""
    return [(f"{p}.se.conv_reduce.weight", 1), (f"{p}.se.conv_expand.weight", 0), (f"{p}.se.conv_expand.bias", 0)]


def _in_tensors(block: Block, p: str, in_ch: int) -> list[tuple[str, int]]:
    """Tensors indexed by a layer's input channels (it reads them)."""
    if isinstance(block, ConvBlock):
        return [(f"{p}.conv.weight", 1)]
    if isinstance(block, DSConvBlock):
        t = [(f"{p}.conv_dw.weight", 0), *_bn(f"{p}.bn1"), (f"{p}.conv_pw.weight", 1)]
        return t + (_se_in_tensors(p) if block.se is not None else [])
    if isinstance(block, MBConvBlock):
        return [(f"{p}.conv_pw.weight", 1)]
    if isinstance(block, FusedMBConvBlock):
        return [(f"{p}.conv_exp.weight", 1)]
    if isinstance(block, AttentionBlock):
        if not block.needs_proj(in_ch):
            raise ValueError("an attention block without input projection is part of its input's chain")
        return [(f"{p}.proj.conv.weight", 1)]
    if isinstance(block, Head):
        if block.style == "pool":
            return [(f"{p}.classifier.weight", 1)]
        return [(f"{p}.conv_head.weight", 1)]
    raise ValueError(f"no input-channel rule for block kind {block.kind!r}")


def _mid_tensors(block: MBConvBlock | FusedMBConvBlock, p: str) -> list[tuple[str, int]]:
    if isinstance(block, MBConvBlock):
        t = [(f"{p}.conv_pw.weight", 0), *_bn(f"{p}.bn1"), (f"{p}.conv_dw.weight", 0), *_bn(f"{p}.bn2"),
             (f"{p}.conv_pwl.weight", 1)]
    else:
        t = [(f"{p}.conv_exp.weight", 0), *_bn(f"{p}.bn1"), (f"{p}.conv_pwl.weight", 1)]
    return t + (_se_in_tensors(p) if block.se is not None else [])


def _hidden_tensors(head: Head) -> list[tuple[str, int]]:
    t = [("head.conv_head.weight", 0), ("head.classifier.weight", 1)]
    if head.style == "conv_pool":
        t += _bn("head.bn2")
    elif head.bias:
        t.append(("head.conv_head.bias", 0))
    return t


def channel_units(arch: Arch) -> list[ChannelUnit]:
    """The channel sets of a network, each to be shrunk as one.

    Args:
        arch: The network.

    Returns:
        Its ``ChannelUnit`` s in network order: every residual chain's output channels, every
        inverted residual's expanded channels, the head's hidden features (when it has them).
        A chain holding an attention block is listed as not prunable.
    """
    layers = arch.layers()
    keys = arch.keys()
    n = len(layers)
    units: list[ChannelUnit] = []

    # residual chains: a producer and the members whose residual keeps its channels
    chains: list[list[int]] = [[0]]
    for i in range(1, n - 1):
        if layers[i].has_skip(keys[i].in_ch) or (
            isinstance(layers[i], AttentionBlock) and not layers[i].needs_proj(keys[i].in_ch)
        ):
            chains[-1].append(i)
        else:
            chains.append([i])
    for c, members in enumerate(chains):
        consumer = members[-1] + 1
        producer = members[0]
        tensors: list[tuple[str, int]] = []
        frozen = ""
        for i in members:
            b = layers[i]
            if isinstance(b, AttentionBlock):
                frozen = "contains an attention block (embed dim tied to heads)"
                continue
            tensors += _out_tensors(b, layer_prefix(i, n))
            if i != producer:
                tensors += _in_tensors(b, layer_prefix(i, n), keys[i].in_ch)
        tensors += _in_tensors(layers[consumer], layer_prefix(consumer, n), keys[consumer].in_ch)
        units.append(ChannelUnit(
            f"chain{c}:{layer_prefix(producer, n)}" + (f"..{layer_prefix(members[-1], n)}" if len(members) > 1 else ""),
            "chain", keys[consumer].in_ch, tuple(members), "out_ch", tuple(dict.fromkeys(tensors)),
            prunable=not frozen, reason=frozen,
        ))
    for i in range(1, n - 1):
        b = layers[i]
        if isinstance(b, (MBConvBlock, FusedMBConvBlock)):
            p = layer_prefix(i, n)
            units.append(ChannelUnit(f"mid:{p}", "mid", b.mid_ch, (i,), "mid_ch", tuple(_mid_tensors(b, p))))
    if arch.head.hidden:
        units.append(ChannelUnit("hidden:head", "hidden", arch.head.hidden, (n - 1,), "hidden",
                                 tuple(_hidden_tensors(arch.head))))
    return units


# --------------------------------------------------------------------------------------------
# resizing the spec


def _se_channels(se: SE, old_base: int, new_base: int, *, multiple: int, se_ratio: float | None) -> int:
    if new_base == old_base:
        return se.channels
    if se_ratio is not None:
        ch = make_divisible(new_base * se_ratio, multiple)
    else:
        ch = make_divisible(se.channels * new_base / old_base, multiple)
    return min(ch, se.channels)


def resize_arch(arch: Arch, units: Sequence[ChannelUnit], sizes: Mapping[str, int], *, multiple: int,
                se_ratio: float | None = None) -> Arch:
    """The network with some of its channel units at new sizes.

    Args:
        arch: The network.
        units: Its ``channel_units(arch)``.
        sizes: ``{unit name: new size}``; units not named keep their size.
        multiple: The multiple squeeze-excite widths are rounded to.
        se_ratio: The squeeze-excite ratio to its gated channels; None scales each SE width by
            the ratio its gated channels shrank by.

    Returns:
        A new ``Arch``; squeeze-excite widths follow the channels they gate (never growing).

    Raises:
        ValueError: A unit name is unknown (the units are listed), or a size is not in
            ``[1, unit.size]``.
    """
    layers = list(arch.layers())
    by_name = {u.name: u for u in units}
    for name, size in sizes.items():
        u = by_name.get(name)
        if u is None:
            raise ValueError(f"unknown pruning unit {name!r}; units: {', '.join(by_name)}")
        if not 1 <= size <= u.size:
            raise ValueError(f"unit {name}: size {size} must be in [1, {u.size}]")
        for i in u.layers:
            layers[i] = dataclasses.replace(layers[i], **{u.field_name: size})
    new = dataclasses.replace(arch, stem=layers[0], blocks=tuple(layers[1:-1]), head=layers[-1])
    # squeeze-excite follows the channels it gates
    old_keys, new_keys = arch.keys(), new.keys()
    changed = False
    for i in range(1, len(layers) - 1):
        b = layers[i]
        se = getattr(b, "se", None)
        if se is None:
            continue
        if isinstance(b, DSConvBlock):
            old_base, new_base = old_keys[i].in_ch, new_keys[i].in_ch
        else:
            old_base, new_base = arch.layers()[i].mid_ch, b.mid_ch
        ch = _se_channels(se, old_base, new_base, multiple=multiple, se_ratio=se_ratio)
        if ch != se.channels:
            layers[i] = dataclasses.replace(b, se=dataclasses.replace(se, channels=ch))
            changed = True
    if changed:
        new = dataclasses.replace(new, blocks=tuple(layers[1:-1]))
    return new


def skip_pattern(arch: Arch) -> tuple[bool, ...]:
    return tuple(k.block.has_skip(k.in_ch) for k in arch.keys())


def next_size(size: int, multiple: int) -> int:
    """The next lower multiple of ``multiple`` (one channel group less)."""
    return (size - 1) // multiple * multiple


STRUCTURAL_KINDS = (DSConvBlock, MBConvBlock, FusedMBConvBlock)


def branch_bn(block: Block, p: str) -> str:
    """The BatchNorm that ends a block's residual branch (zeroing it makes the block an identity)."""
    return f"{p}.bn3" if isinstance(block, MBConvBlock) else f"{p}.bn2"


def after_se_conv(block: Block, p: str) -> str:
    """The 1x1 convolution that reads what a block's squeeze-excite gates."""
    return f"{p}.conv_pw.weight" if isinstance(block, DSConvBlock) else f"{p}.conv_pwl.weight"


def droppable(arch: Arch) -> tuple[list[int], list[int]]:
    """What ``drop_layers`` may drop from a network.

    Args:
        arch: The network.

    Returns:
        ``(se, blocks)``: the indices (into ``arch.layers()``) of the depthwise-separable and
        inverted-residual blocks with a squeeze-excite, and of those with a residual (dropping
        one leaves the shapes unchanged).
    """
    keys = arch.keys()
    se, blocks = [], []
    for i, b in enumerate(arch.layers()[1:-1], start=1):
        if not isinstance(b, STRUCTURAL_KINDS):
            continue
        if b.se is not None:
            se.append(i)
        if b.has_skip(keys[i].in_ch):
            blocks.append(i)
    return se, blocks


def drop_layers(arch: Arch, *, se: Iterable[int] = (), blocks: Iterable[int] = ()) -> Arch:
    """The network without some squeeze-excites and residual blocks.

    Args:
        arch: The network.
        se: Layer indices whose squeeze-excite to drop (from ``droppable(arch)[0]``).
        blocks: Layer indices of residual blocks to drop (from ``droppable(arch)[1]``).

    Returns:
        A new ``Arch`` (``arch`` itself when both are empty).

    Raises:
        ValueError: An index is not one ``droppable`` gives (the indices are named).
    """
    se, blocks = set(se), set(blocks)
    if not se and not blocks:
        return arch
    ok_se, ok_blocks = droppable(arch)
    bad = sorted((se - set(ok_se)) | (blocks - set(ok_blocks)))
    if bad:
        raise ValueError(f"layers {bad} have no squeeze-excite / are not residual blocks that can be dropped")
    layers = list(arch.layers())
    kept = []
    for i in range(1, len(layers) - 1):
        if i in blocks:
            continue
        kept.append(dataclasses.replace(layers[i], se=None) if i in se else layers[i])
    return dataclasses.replace(arch, blocks=tuple(kept))


# --------------------------------------------------------------------------------------------
# importance


