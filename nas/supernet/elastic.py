"""Where an Arch sits in its space, and which part of a shared weight each of its layers takes.

``locate(space, arch)`` maps every block of an ``Arch`` to its (stage, slot) in the space (slot j
of a stage is its j-th block), refusing an Arch the space cannot produce with the first block,
value and allowed choices that differ.  ``share(name, full, shape)`` cuts the weight a subnet's
layer uses out of the supernet's (largest) tensor:

* channels: the leading ones (output and input channels, BatchNorm statistics, expanded and
  squeeze-excite channels): a narrow subnet takes the first channels of every wider one;
* kernels: the centre of the largest kernel (a 3x3 depthwise conv is the middle of the 7x7);
* attention: the fused ``qkv`` projection is cut per third (query, key and value each keep their
  leading channels), so a narrower embed keeps its own query, key and value channels; the head
  count only regroups those channels and owns no weights.

Depth: a stage of depth d is the first d slots of the deepest one.
"""

from __future__ import annotations

from typing import Any

import torch

from nas.arch import Arch, Block
from nas.space import STAGE_KINDS, SearchSpace, StageSpec, make_divisible

__all__ = ["ArchOutsideSpace", "locate", "share"]


class ArchOutsideSpace(ValueError):
    """An Arch the supernet's space cannot produce: the message names the block, the value and the choices."""


def _options(space: SearchSpace, st: StageSpec, b: Block, in_ch: int) -> tuple[dict[str, Any] | None, str]:
    """The stage options that make block ``b`` from ``in_ch`` channels, or (None, why not)."""
    o: dict[str, Any] = {}
    for name in STAGE_KINDS[st.kind]:
        choices = st.options[name]
        if name == "kernel":
            v = b.kernel  # type: ignore[attr-defined]
        elif name == "se":
            v = b.se is not None  # type: ignore[attr-defined]
        elif name == "heads":
            v = b.heads  # type: ignore[attr-defined]
        elif name == "mlp_ratio":
            v = b.mlp_ratio  # type: ignore[attr-defined]
        else:  # expansion: the choice whose rounded expanded width is the block's
            mid = b.mid_ch  # type: ignore[attr-defined]
            v = next((e for e in choices if make_divisible(in_ch * e, space.channel_multiple) == mid), None)
            if v is None:
                made = sorted({make_divisible(in_ch * e, space.channel_multiple) for e in choices})
                return None, f"expanded width {mid} from {in_ch} channels is not one of {made}"
        if v not in choices:
            return None, f"{name} {v} is not one of {list(choices)}"
        o[name] = v
    return o, ""


def _match(space: SearchSpace, i: int, st: StageSpec, b: Block, in_ch: int, width: int, j: int
           ) -> tuple[dict[str, Any] | None, str]:
    if b.kind != st.kind:
        return None, f"a {b.kind!r} block where stage {i} has {st.kind!r} blocks"
    if b.out_ch not in st.width:  # type: ignore[attr-defined]
        return None, f"width {b.out_ch} is not one of stage {i}'s widths {list(st.width)}"  # type: ignore[attr-defined]
    if b.out_ch != width:  # type: ignore[attr-defined]
        return None, f"width {b.out_ch} differs from the width {width} of the stage's first block"  # type: ignore[attr-defined]
    o, why = _options(space, st, b, in_ch)
    if o is None:
        return None, f"{why} (stage {i})"
    want = space._make_block(st, in_ch, width, st.stride if j == 0 else 1, o)
    if want != b:
        return None, f"not the block stage {i} makes from these choices ({want.label()})"
    return o, ""


def locate(space: SearchSpace, arch: Arch) -> tuple[dict[str, Any], list[tuple[int, int]]]:
    """``arch``'s parameters (``space.decode`` takes them) and each block's (stage, slot).

    The input channels, class count and resolution are not checked (a supernet takes the dataset's);
    anything else the space cannot produce raises ``ArchOutsideSpace``."""
    where = f"the Arch is not in space {space.name!r}"
    if arch.stem.out_ch not in space.stem_widths:
        raise ArchOutsideSpace(f"{where}: stem width {arch.stem.out_ch} is not one of {list(space.stem_widths)}")
    if arch.head.hidden not in space.head_hidden:
        raise ArchOutsideSpace(f"{where}: head hidden width {arch.head.hidden} is not one of {list(space.head_hidden)}")
    blocks = arch.blocks
    worst: list[Any] = [(-1, 0), "more blocks than the space's stages hold"]

    def fail(k: int, why: str, specific: bool = True) -> None:
        # the mismatch furthest into the Arch; at one block, what is wrong with it beats where it is
        if (k, specific) > worst[0]:
            worst[:] = [(k, specific), why]

    def walk(i: int, k: int, in_ch: int) -> tuple[dict[str, Any], list[tuple[int, int]]] | None:
        if i == len(space.stages):
            if k == len(blocks):
                return {}, []
            fail(k, f"beyond the last stage (the space holds at most "
                    f"{sum(s.max_depth for s in space.stages)} blocks)", False)
            return None
        st = space.stages[i]
        for d in sorted(st.depth):
            if k + d > len(blocks):
                fail(len(blocks), f"the Arch ends inside stage {i} (depth choices {list(st.depth)})", False)
                break
            width = getattr(blocks[k], "out_ch", None)
            params: dict[str, Any] = {f"s{i}_depth": d, f"s{i}_width": width}
            for j in range(d):
                o, why = _match(space, i, st, blocks[k + j], in_ch if j == 0 else width, width, j)
                if o is None:
                    fail(k + j, why)
                    break
                params.update({f"s{i}_b{j}_{n}": v for n, v in o.items()})
            else:
                rest = walk(i + 1, k + d, width)
                if rest is not None:
                    return {**params, **rest[0]}, [(i, j) for j in range(d)] + rest[1]
        return None

    found = walk(0, 0, arch.stem.out_ch)
    if found is None:
        (k, _), why = worst
        label = f"blocks[{k}] ({blocks[k].label()})" if 0 <= k < len(blocks) else f"block {k}"
        raise ArchOutsideSpace(f"{where}: {label}: {why}")
    params, slots = found
    params.update(stem_width=arch.stem.out_ch, head_hidden=arch.head.hidden)
    made = space.decode(params)
    mine = arch.with_head(num_classes=made.head.num_classes, in_chans=made.in_chans).with_resolution(made.resolution)
    if made.stem != mine.stem or made.head != mine.head:
        raise ArchOutsideSpace(f"{where}: its stem or head ({mine.stem.label()}, {mine.head.label()}) is not the "
                               f"space's ({made.stem.label()}, {made.head.label()})")
    return params, slots


def share(name: str, full: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """The part of the shared tensor ``full`` a layer of ``shape`` uses (a view where possible, so
    gradients and BatchNorm statistics flow back into ``full``)."""
    if tuple(full.shape) == tuple(shape):
        return full
    if full.ndim != len(shape) or any(s > f for s, f in zip(shape, full.shape)):
        raise ValueError(f"supernet weight {name}: a subnet needs shape {tuple(shape)}, the supernet holds "
                         f"{tuple(full.shape)}")
    if name.endswith(("qkv.weight", "qkv.bias")):
        e_full, e = full.shape[0] // 3, shape[0] // 3
        thirds = full.reshape(3, e_full, *full.shape[1:])
        idx = (slice(None), slice(0, e), *(slice(0, s) for s in shape[1:]))
        return thirds[idx].reshape(shape)
    idx = []
    for d, (f, s) in enumerate(zip(full.shape, shape)):
        off = (f - s) // 2 if full.ndim == 4 and d >= 2 else 0  # kernels: the centre
        idx.append(slice(off, off + s))
    return full[tuple(idx)]

