"""The Arch spec: one immutable, hashable, JSON-round-trippable description of a network.

Everything in hwnas speaks ``Arch``: sampling, building, cost counting, latency-table keys,
pruning, export and reports.  An ``Arch`` is an input (channels, square resolution), a stem,
an ordered tuple of blocks and a head.  Channel counts are explicit everywhere (including the
expanded "mid" channels of inverted residuals and the reduced channels of squeeze-excite), so a
pruned network is again an exact ``Arch`` and a converted timm model is reproduced exactly.

Block string grammar (timm-like, for logs and reports)::

    conv_k3_s2_c16_hs          plain conv + BN + act              (kind ``conv``)
    ds_k3_s1_c16_se8_re        depthwise-separable                (kind ``ds``)
    ir_k5_s2_m72_c40_se24_hs   inverted residual / MBConv         (kind ``ir``; m = mid channels)
    fused_k3_s1_m64_c32_sw     fused-MBConv                       (kind ``fused``)
    attn_c128_h4_r2            self-attention, embed 128, 4 heads, MLP ratio 2   (kind ``attn``)
    head_pool_conv_f1024_c10   head: pooling style, hidden features, classes     (kind ``head``)

Activation codes: re=relu, r6=relu6, hs=hard_swish, sw=swish, ge=gelu.  ``_ns`` marks a block
whose residual is disabled, ``_pa`` a depthwise-separable block with an activation after its
point-wise conv.

The block kinds are defined in ``nas._blocks`` (import them from here).  A block's latency-table key is a
``BlockKey``: the block plus its input shape (C, H, W).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nas._blocks import (
    ACTIVATIONS,
    GATES,
    HEAD_STYLES,
    SE,
    AttentionBlock,
    Block,
    ConvBlock,
    DSConvBlock,
    FusedMBConvBlock,
    Head,
    MBConvBlock,
    _check_pos_int,
    block_class,
    block_from_dict,
    block_kinds,
    register_block,
)
from nas._io import atomic_write_text

__all__ = [
    "ACTIVATIONS",
    "CHANNEL_MULTIPLE",
    "GATES",
    "HEAD_STYLES",
    "Arch",
    "check_widths",
    "AttentionBlock",
    "Block",
    "BlockKey",
    "ConvBlock",
    "DSConvBlock",
    "FusedMBConvBlock",
    "Head",
    "MBConvBlock",
    "SE",
    "block_class",
    "block_from_dict",
    "block_kinds",
    "register_block",
]


def _digest(data: Any) -> str:
    return hashlib.sha1(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class BlockKey:
    """A block at its exact input shape: the latency-table key."""

    block: Block
    in_ch: int
    in_h: int
    in_w: int

    @property
    def in_shape(self) -> tuple[int, int, int]:
        return (self.in_ch, self.in_h, self.in_w)

    @property
    def out_shape(self) -> tuple[int, int, int]:
        return self.block.out_shape(self.in_shape)

    def to_dict(self) -> dict[str, Any]:
        return {"block": self.block.to_dict(), "in": [self.in_ch, self.in_h, self.in_w]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BlockKey:
        if not isinstance(data, dict) or set(data) != {"block", "in"}:
            raise ValueError(f"a block key must be a mapping with keys 'block' and 'in', got {data!r}")
        c, h, w = data["in"]
        return cls(block_from_dict(data["block"]), int(c), int(h), int(w))

    def digest(self) -> str:
        """Stable across processes and machines (unlike ``hash``): sha1 of the canonical JSON."""
        return _digest(self.to_dict())

    def __str__(self) -> str:
        return f"{self.block.label()}@{self.in_ch}x{self.in_h}x{self.in_w}"


@dataclass(frozen=True)
class Arch:
    """A whole network.  Immutable and hashable; ``to_json``/``from_json`` round-trip."""

    in_chans: int
    resolution: int
    stem: ConvBlock
    blocks: tuple[Block, ...]
    head: Head
    name: str = field(default="", compare=False)  # free-form label, not part of identity

    def __post_init__(self) -> None:
        _check_pos_int(self, "in_chans", self.in_chans)
        _check_pos_int(self, "resolution", self.resolution)
        if not isinstance(self.stem, ConvBlock):
            raise ValueError(f"Arch.stem must be a ConvBlock, got {type(self.stem).__name__}")
        if not isinstance(self.head, Head):
            raise ValueError(f"Arch.head must be a Head, got {type(self.head).__name__}")
        blocks = tuple(self.blocks)
        for i, b in enumerate(blocks):
            if not isinstance(b, Block) or isinstance(b, Head):
                raise ValueError(f"Arch.blocks[{i}] must be a body block, got {b!r}")
        object.__setattr__(self, "blocks", blocks)

    # -- shapes and keys ------------------------------------------------------------------
    def layers(self) -> tuple[Block, ...]:
        """Stem, body blocks and head, in order."""
        return (self.stem, *self.blocks, self.head)

    def keys(self, resolution: int | None = None) -> list[BlockKey]:
        """Each layer at its input shape (at ``resolution`` if given, else the Arch's own)."""
        if resolution is None or resolution == self.resolution:
            cached = self.__dict__.get("_keys")
            if cached is None:  # immutable, so computed once (predictors call this in hot loops)
                cached = self._compute_keys(self.resolution)
                object.__setattr__(self, "_keys", cached)
            return list(cached)
        return list(self._compute_keys(resolution))

    def _compute_keys(self, r: int) -> tuple[BlockKey, ...]:
        shape = (self.in_chans, r, r)
        out = []
        for b in self.layers():
            out.append(BlockKey(b, *shape))
            shape = b.out_shape(shape)
        return tuple(out)

    @property
    def feature_channels(self) -> int:
        """Channels entering the head."""
        return self.keys()[-1].in_ch

    def with_resolution(self, resolution: int) -> Arch:
        return dataclasses.replace(self, resolution=resolution)

    def with_head(self, *, num_classes: int | None = None, in_chans: int | None = None) -> Arch:
        head = self.head if num_classes is None else dataclasses.replace(self.head, num_classes=num_classes)
        return dataclasses.replace(self, head=head, in_chans=self.in_chans if in_chans is None else in_chans)

    # -- serialisation --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = {
            "in_chans": self.in_chans,
            "resolution": self.resolution,
            "stem": self.stem.to_dict(),
            "blocks": [b.to_dict() for b in self.blocks],
            "head": self.head.to_dict(),
        }
        if self.name:
            d["name"] = self.name
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Arch:
        if not isinstance(data, dict):
            raise ValueError(f"an Arch must be a mapping, got {type(data).__name__}")
        allowed = {"in_chans", "resolution", "stem", "blocks", "head", "name"}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ValueError(f"Arch: unknown key(s) {unknown}; valid keys: {sorted(allowed)}")
        missing = sorted({"in_chans", "resolution", "stem", "blocks", "head"} - set(data))
        if missing:
            raise ValueError(f"Arch: missing key(s) {missing}")
        stem = block_from_dict(data["stem"])
        head = block_from_dict(data["head"])
        return cls(
            in_chans=data["in_chans"],
            resolution=data["resolution"],
            stem=stem,  # type: ignore[arg-type]
            blocks=tuple(block_from_dict(b) for b in data["blocks"]),
            head=head,  # type: ignore[arg-type]
            name=data.get("name", ""),
        )

    def digest(self) -> str:
        """Stable identity across processes and machines (the name is not part of it)."""
        d = self.to_dict()
        d.pop("name", None)
        return _digest(d)

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_json(cls, text: str) -> Arch:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"Arch JSON is not valid JSON: {e}") from None
        return cls.from_dict(data)

    def save(self, path: str) -> None:
        atomic_write_text(path, self.to_json(indent=1) + "\n")

    @classmethod
    def load(cls, path: str) -> Arch:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"Arch file not found: {p}")
        try:
            return cls.from_json(p.read_text())
        except ValueError as e:
            raise ValueError(f"{p}: {e}") from None

    def label(self) -> str:
        return " ".join(b.label() for b in self.layers())

    def __str__(self) -> str:
        return f"Arch({self.in_chans}x{self.resolution}x{self.resolution}: {self.label()})"


#: The smallest ``channel_multiple`` a search space may set (8 or 16): every width (block output and
#: expanded channels) of an Arch from a space, or from a supported timm model, is a multiple of it.
CHANNEL_MULTIPLE = 8


def check_widths(arch: Arch, source: str, multiple: int = CHANNEL_MULTIPLE) -> None:
    """Refuse an Arch with a width that no search space yields, as a malformed space is refused:
    ``ValueError`` naming the block, its width and the multiple."""
    layers = [("stem", arch.stem), *((f"blocks[{i}]", b) for i, b in enumerate(arch.blocks))]
    for where, b in layers:
        for attr, what in (("out_ch", "width"), ("mid_ch", "expanded width")):
            w = getattr(b, attr, None)
            if isinstance(w, int) and w % multiple:
                raise ValueError(f"{source}: {where} ({b}): {what} {w} is not a multiple of "
                                 f"channel_multiple={multiple}")
