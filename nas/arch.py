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
    block_class,
    block_from_dict,
    block_kinds,
    check_pos_int,
    register_block,
)
from nas._checks import check_resolution
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


def content_digest(data: Any) -> str:
    return hashlib.sha1(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class BlockKey:
    """A block at its exact input shape: the latency-table key.

    Frozen and hashable; equal keys have equal latency on a device.

    Attributes:
        block: The block (any body kind, the stem's ``ConvBlock`` or the ``Head``).
        in_ch: Input channels.
        in_h: Input height in pixels.
        in_w: Input width in pixels.
    """

    block: Block
    in_ch: int
    in_h: int
    in_w: int

    @property
    def in_shape(self) -> tuple[int, int, int]:
        """The input shape ``(C, H, W)``."""
        return (self.in_ch, self.in_h, self.in_w)

    @property
    def out_shape(self) -> tuple[int, int, int]:
        """The output shape ``(C, H, W)`` (``(num_classes, 1, 1)`` for a head)."""
        return self.block.out_shape(self.in_shape)

    def to_dict(self) -> dict[str, Any]:
        """The key as JSON-ready data: ``{"block": <block dict>, "in": [C, H, W]}``."""
        return {"block": self.block.to_dict(), "in": [self.in_ch, self.in_h, self.in_w]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BlockKey:
        """The key that :meth:`to_dict` wrote.

        Args:
            data: A mapping with exactly the keys ``block`` and ``in``.

        Returns:
            The key.

        Raises:
            ValueError: ``data`` is not such a mapping, or its block is malformed.
        """
        if not isinstance(data, dict) or set(data) != {"block", "in"}:
            raise ValueError(f"a block key must be a mapping with keys 'block' and 'in', got {data!r}")
        c, h, w = data["in"]
        return cls(block_from_dict(data["block"]), int(c), int(h), int(w))

    def digest(self) -> str:
        """A stable identity of the key.

        Returns:
            16 hex digits of the sha1 of the canonical JSON: the same in every process and on every
            machine (unlike ``hash``).
        """
        return content_digest(self.to_dict())

    def __str__(self) -> str:
        return f"{self.block.label()}@{self.in_ch}x{self.in_h}x{self.in_w}"


@dataclass(frozen=True)
class Arch:
    """A whole network: input, stem, body blocks and head, every width explicit.

    Immutable and hashable; :meth:`to_json` / :meth:`from_json` (and :meth:`to_dict` /
    :meth:`from_dict`) round-trip it exactly.  ``nas.build`` makes the ``nn.Module``,
    ``nas.arch_cost`` counts it, the latency models predict it from its :meth:`keys`.

    Attributes:
        in_chans: Input image channels.
        resolution: Input height and width in pixels (square).
        stem: The first layer: a ``ConvBlock``.
        blocks: The body blocks, in order (any body kind; a list is stored as a tuple).
        head: The classifier ``Head``.
        name: A free-form label; not part of equality, hashing or :meth:`digest`.

    Raises:
        ValueError: A field has the wrong type or a non-positive size (the message names it).

    Example:
        >>> from nas import Arch, load_space
        >>> arch = load_space("tiny").smallest()
        >>> Arch.from_json(arch.to_json()) == arch
        True
        >>> arch.keys()[0].in_shape == (arch.in_chans, arch.resolution, arch.resolution)
        True
    """

    in_chans: int
    resolution: int
    stem: ConvBlock
    blocks: tuple[Block, ...]
    head: Head
    name: str = field(default="", compare=False)  # free-form label, not part of identity

    def __post_init__(self) -> None:
        check_pos_int(self, "in_chans", self.in_chans)
        check_pos_int(self, "resolution", self.resolution)
        check_resolution("Arch.resolution", self.resolution)
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
        """Every layer of the network.

        Returns:
            The stem, the body blocks and the head, in order.
        """
        return (self.stem, *self.blocks, self.head)

    def keys(self, resolution: int | None = None) -> list[BlockKey]:
        """Each layer at its input shape: the latency-table keys of the network.

        Args:
            resolution: The input resolution to key at; None for the Arch's own.

        Returns:
            One ``BlockKey`` per layer (:meth:`layers`), in order.
        """
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
        """The number of channels entering the head."""
        return self.keys()[-1].in_ch

    def with_resolution(self, resolution: int) -> Arch:
        """The same network at another input resolution.

        Args:
            resolution: The new input height and width in pixels.

        Returns:
            A new ``Arch``; this one is unchanged.

        Raises:
            ValueError: ``resolution`` is not a positive integer.
        """
        return dataclasses.replace(self, resolution=resolution)

    def with_head(self, *, num_classes: int | None = None, in_chans: int | None = None) -> Arch:
        """The same network for another dataset's classes or input channels.

        Args:
            num_classes: The head's number of classes; None keeps it.
            in_chans: The input image channels; None keeps them.

        Returns:
            A new ``Arch``; this one is unchanged.

        Raises:
            ValueError: A given value is not a positive integer.
        """
        head = self.head if num_classes is None else dataclasses.replace(self.head, num_classes=num_classes)
        return dataclasses.replace(self, head=head, in_chans=self.in_chans if in_chans is None else in_chans)

    # -- serialisation --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The network as JSON-ready data (the ``name`` only when set); :meth:`from_dict` reads it."""
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
        """The network that :meth:`to_dict` wrote.

        Args:
            data: A mapping with the keys ``in_chans``, ``resolution``, ``stem``, ``blocks``,
                ``head`` and optionally ``name``.

        Returns:
            The ``Arch``.

        Raises:
            ValueError: ``data`` is not a mapping, has an unknown or a missing key, or holds a
                malformed block or field (the message names it).
        """
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
        """A stable identity of the network.

        Returns:
            16 hex digits of the sha1 of the canonical JSON without the ``name``: equal for equal
            networks in every process and on every machine.
        """
        d = self.to_dict()
        d.pop("name", None)
        return content_digest(d)

    def to_json(self, **kw: Any) -> str:
        """The network as JSON text.

        Args:
            **kw: Passed to ``json.dumps`` (``indent=1``, ...).

        Returns:
            The JSON of :meth:`to_dict`.
        """
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_json(cls, text: str) -> Arch:
        """The network that :meth:`to_json` wrote.

        Args:
            text: JSON text.

        Returns:
            The ``Arch``.

        Raises:
            ValueError: ``text`` is not valid JSON, or not a valid Arch (:meth:`from_dict`).
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"Arch JSON is not valid JSON: {e}") from None
        except RecursionError:  # brackets nested deeper than Python's JSON reader goes: no Arch is
            raise ValueError("Arch JSON is nested too deep to read (an Arch is a few levels deep)") from None
        return cls.from_dict(data)

    def save(self, path: str) -> None:
        """Write the network's JSON to ``path`` atomically (a reader never sees half a file).

        Args:
            path: The file to write; replaced if it exists.
        """
        atomic_write_text(path, self.to_json(indent=1) + "\n")

    @classmethod
    def load(cls, path: str) -> Arch:
        """Read a network that :meth:`save` (or ``nas.search``'s outputs) wrote.

        Args:
            path: A JSON file.

        Returns:
            The ``Arch``.

        Raises:
            FileNotFoundError: ``path`` is not a file.
            ValueError: The file is not a valid Arch (the message starts with the path).
        """
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"Arch file not found: {p}")
        try:
            return cls.from_json(p.read_text())
        except ValueError as e:
            raise ValueError(f"{p}: {e}") from None

    def label(self) -> str:
        """The layers' string forms, space-separated (the grammar in this module's docstring)."""
        return " ".join(b.label() for b in self.layers())

    def __str__(self) -> str:
        return f"Arch({self.in_chans}x{self.resolution}x{self.resolution}: {self.label()})"


#: The smallest ``channel_multiple`` a search space may set (8 or 16): every width (block output and
#: expanded channels) of an Arch from a space, or from a supported timm model, is a multiple of it.
CHANNEL_MULTIPLE = 8


def check_widths(arch: Arch, source: str, multiple: int = CHANNEL_MULTIPLE) -> None:
    """Refuse an Arch with a width that no search space yields, as a malformed space is refused.

    Args:
        arch: The network to check.
        source: Where it came from, for the message (a file name, a model name).
        multiple: The multiple every output and expanded width must be.

    Raises:
        ValueError: A block's width is not a multiple of ``multiple`` (the message names the
            block, its width and the multiple).
    """
    layers = [("stem", arch.stem), *((f"blocks[{i}]", b) for i, b in enumerate(arch.blocks))]
    for where, b in layers:
        for attr, what in (("out_ch", "width"), ("mid_ch", "expanded width")):
            w = getattr(b, attr, None)
            if isinstance(w, int) and w % multiple:
                raise ValueError(f"{source}: {where} ({b}): {what} {w} is not a multiple of "
                                 f"channel_multiple={multiple}")
