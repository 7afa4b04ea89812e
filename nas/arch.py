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

A block's latency-table key is a ``BlockKey``: the block plus its input shape (C, H, W).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from nas.registry import Registry

__all__ = [
    "ACTIVATIONS",
    "GATES",
    "Arch",
    "AttentionBlock",
    "Block",
    "BlockKey",
    "ConvBlock",
    "DSConvBlock",
    "FusedMBConvBlock",
    "Head",
    "MBConvBlock",
    "SE",
    "block_from_dict",
    "block_kinds",
    "register_block",
]

ACTIVATIONS: dict[str, str] = {
    "relu": "re",
    "relu6": "r6",
    "hard_swish": "hs",
    "swish": "sw",
    "gelu": "ge",
}
GATES: tuple[str, ...] = ("sigmoid", "hard_sigmoid")
HEAD_STYLES: tuple[str, ...] = ("conv_pool", "pool_conv", "pool")

_BLOCKS: Registry[type[Block]] = Registry("block kind", plural="kinds")


def register_block(kind: str):
    """Class decorator registering a block kind under ``kind`` (used in JSON and YAML)."""

    def deco(cls: type[Block]) -> type[Block]:
        _BLOCKS.add(kind, cls)
        cls.kind = kind
        return cls

    return deco


def block_kinds() -> list[str]:
    """The registered block kinds, sorted."""
    return _BLOCKS.names()


def block_class(kind: str) -> type[Block]:
    return _BLOCKS[kind]


# --------------------------------------------------------------------------------------------
# validation helpers: raise ValueError naming the field, the value and what is allowed


def _check_pos_int(obj: object, name: str, value: Any, *, allow_zero: bool = False) -> None:
    lo = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        what = "a non-negative integer" if allow_zero else "a positive integer"
        raise ValueError(f"{type(obj).__name__}.{name} must be {what}, got {value!r}")


def _check_kernel(obj: object, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value % 2 == 0:
        raise ValueError(f"{type(obj).__name__}.kernel must be a positive odd integer, got {value!r}")


def _check_stride(obj: object, value: Any) -> None:
    if value not in (1, 2) or isinstance(value, bool):
        raise ValueError(f"{type(obj).__name__}.stride must be 1 or 2, got {value!r}")


def _check_act(obj: object, name: str, value: Any) -> None:
    if value not in ACTIVATIONS:
        raise ValueError(
            f"{type(obj).__name__}.{name} must be one of {', '.join(ACTIVATIONS)}, got {value!r}"
        )


def _check_bool(obj: object, name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{type(obj).__name__}.{name} must be true or false, got {value!r}")


def _from_fields(cls: type, data: dict[str, Any], where: str) -> Any:
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; valid keys: {sorted(names)}")
    return cls(**data)


# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SE:
    """Squeeze-excite: global pool -> 1x1 conv to ``channels`` -> act -> 1x1 conv back -> gate."""

    channels: int
    gate: str = "sigmoid"
    act: str | None = None  # None: the containing block's activation

    def __post_init__(self) -> None:
        _check_pos_int(self, "channels", self.channels)
        if self.gate not in GATES:
            raise ValueError(f"SE.gate must be one of {', '.join(GATES)}, got {self.gate!r}")
        if self.act is not None:
            _check_act(self, "act", self.act)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SE:
        return _from_fields(cls, dict(data), "SE")


@dataclass(frozen=True)
class Block:
    """Base of every block kind.  Subclasses are frozen dataclasses registered by kind."""

    kind: ClassVar[str] = ""

    # -- shape ----------------------------------------------------------------------------
    def out_channels(self, in_ch: int) -> int:
        return self.out_ch  # type: ignore[attr-defined]

    def out_shape(self, in_shape: tuple[int, int, int]) -> tuple[int, int, int]:
        c, h, w = in_shape
        s = getattr(self, "stride", 1)
        k = getattr(self, "kernel", 1)
        pad = ((s - 1) + (k - 1)) // 2  # timm's symmetric static padding
        return (self.out_channels(c), (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1)

    def has_skip(self, in_ch: int) -> bool:
        return False

    # -- serialisation --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            d[f.name] = v.to_dict() if isinstance(v, SE) else v
        return d

    def label(self) -> str:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    def __str__(self) -> str:
        return self.label()


def _check_conv_fields(b: Block) -> None:
    """The fields every convolutional block has: ``out_ch``, ``kernel``, ``stride``, ``act``."""
    _check_pos_int(b, "out_ch", b.out_ch)
    _check_kernel(b, b.kernel)
    _check_stride(b, b.stride)
    _check_act(b, "act", b.act)


def _se_str(se: SE | None) -> str:
    return f"_se{se.channels}" if se is not None else ""


@register_block("conv")
@dataclass(frozen=True)
class ConvBlock(Block):
    """Plain KxK conv + BN + activation (timm ``ConvBnAct``).  Also used for the stem."""

    out_ch: int
    kernel: int = 3
    stride: int = 1
    act: str = "relu"
    skip: bool = False  # residual when stride 1 and in == out

    def __post_init__(self) -> None:
        _check_conv_fields(self)
        _check_bool(self, "skip", self.skip)

    def has_skip(self, in_ch: int) -> bool:
        return self.skip and self.stride == 1 and in_ch == self.out_ch

    def label(self) -> str:
        sk = "_sk" if self.skip else ""
        return f"conv_k{self.kernel}_s{self.stride}_c{self.out_ch}_{ACTIVATIONS[self.act]}{sk}"


@register_block("ds")
@dataclass(frozen=True)
class DSConvBlock(Block):
    """Depthwise-separable: KxK depthwise + BN + act [+ SE] -> 1x1 conv + BN [+ act]."""

    out_ch: int
    kernel: int = 3
    stride: int = 1
    act: str = "relu"
    se: SE | None = None
    pw_act: bool = False
    noskip: bool = False

    def __post_init__(self) -> None:
        _check_conv_fields(self)
        _check_bool(self, "pw_act", self.pw_act)
        _check_bool(self, "noskip", self.noskip)
        if isinstance(self.se, dict):
            object.__setattr__(self, "se", SE.from_dict(self.se))

    def has_skip(self, in_ch: int) -> bool:
        return self.stride == 1 and in_ch == self.out_ch and not self.noskip

    def label(self) -> str:
        extra = ("_pa" if self.pw_act else "") + ("_ns" if self.noskip else "")
        return (
            f"ds_k{self.kernel}_s{self.stride}_c{self.out_ch}{_se_str(self.se)}"
            f"_{ACTIVATIONS[self.act]}{extra}"
        )


@dataclass(frozen=True)
class _ExpandedBlock(Block):
    """Shared spec of the two expand-then-project blocks (``ir`` and ``fused``)."""

    out_ch: int
    mid_ch: int
    kernel: int = 3
    stride: int = 1
    act: str = "relu"
    se: SE | None = None
    noskip: bool = False

    def __post_init__(self) -> None:
        _check_conv_fields(self)
        _check_pos_int(self, "mid_ch", self.mid_ch)
        _check_bool(self, "noskip", self.noskip)
        if isinstance(self.se, dict):
            object.__setattr__(self, "se", SE.from_dict(self.se))

    def has_skip(self, in_ch: int) -> bool:
        return self.stride == 1 and in_ch == self.out_ch and not self.noskip

    def label(self) -> str:
        ns = "_ns" if self.noskip else ""
        return (
            f"{self.kind}_k{self.kernel}_s{self.stride}_m{self.mid_ch}_c{self.out_ch}{_se_str(self.se)}"
            f"_{ACTIVATIONS[self.act]}{ns}"
        )


@register_block("ir")
@dataclass(frozen=True)
class MBConvBlock(_ExpandedBlock):
    """Inverted residual (MBConv): 1x1 expand -> KxK depthwise [-> SE] -> 1x1 project."""


@register_block("fused")
@dataclass(frozen=True)
class FusedMBConvBlock(_ExpandedBlock):
    """Fused-MBConv (timm ``EdgeResidual``): KxK expand conv [-> SE] -> 1x1 project."""


@register_block("attn")
@dataclass(frozen=True)
class AttentionBlock(Block):
    """Multi-head self-attention over the feature map (MobileViT / MobileNetV4-hybrid style).

    ``out_ch`` is the embed dim.  When the input has other channels, or ``stride`` is 2, a
    conv + BN + act projection (3x3 when strided, else 1x1) brings the input to the embed dim
    first.  Then one pre-norm transformer layer on the NCHW map: BN -> timm ``Attention2d``
    (``heads`` heads) -> residual, BN -> timm ``ConvMlp`` (hidden = ``mlp_ratio`` x embed) ->
    residual.
    """

    out_ch: int
    heads: int = 4
    mlp_ratio: float = 2.0
    stride: int = 1
    act: str = "gelu"  # MLP activation
    proj_act: str = "swish"  # activation of the input projection (when present)

    def __post_init__(self) -> None:
        _check_pos_int(self, "out_ch", self.out_ch)
        _check_pos_int(self, "heads", self.heads)
        if self.out_ch % self.heads:
            raise ValueError(
                f"AttentionBlock.heads={self.heads} must divide the embed dim out_ch={self.out_ch}"
            )
        if isinstance(self.mlp_ratio, bool) or not isinstance(self.mlp_ratio, (int, float)) or self.mlp_ratio <= 0:
            raise ValueError(f"AttentionBlock.mlp_ratio must be a positive number, got {self.mlp_ratio!r}")
        object.__setattr__(self, "mlp_ratio", float(self.mlp_ratio))
        _check_stride(self, self.stride)
        _check_act(self, "act", self.act)
        _check_act(self, "proj_act", self.proj_act)
        if self.mlp_hidden < 1:
            raise ValueError(f"AttentionBlock.mlp_ratio={self.mlp_ratio} gives an empty MLP")

    @property
    def head_dim(self) -> int:
        return self.out_ch // self.heads

    @property
    def mlp_hidden(self) -> int:
        return int(round(self.out_ch * self.mlp_ratio))

    def needs_proj(self, in_ch: int) -> bool:
        return in_ch != self.out_ch or self.stride != 1

    @property
    def proj_kernel(self) -> int:
        return 3 if self.stride == 2 else 1

    def out_shape(self, in_shape: tuple[int, int, int]) -> tuple[int, int, int]:
        c, h, w = in_shape
        if self.stride == 1:
            return (self.out_ch, h, w)
        return (self.out_ch, (h - 1) // 2 + 1, (w - 1) // 2 + 1)

    def label(self) -> str:
        r = f"{self.mlp_ratio:g}"
        s = f"_s{self.stride}" if self.stride != 1 else ""
        return f"attn_c{self.out_ch}_h{self.heads}_r{r}{s}_{ACTIVATIONS[self.act]}"


@register_block("head")
@dataclass(frozen=True)
class Head(Block):
    """Classifier head.

    ``conv_pool`` (EfficientNet): 1x1 conv to ``hidden`` + BN + act, global pool, linear.
    ``pool_conv`` (MobileNetV3): global pool, 1x1 conv to ``hidden`` (+bias) + act, linear.
    ``pool``: global pool, linear (``hidden`` must be 0).
    """

    num_classes: int
    hidden: int = 0
    style: str = "pool"
    act: str = "relu"
    bias: bool = True  # bias of the pool_conv 1x1 conv

    def __post_init__(self) -> None:
        _check_pos_int(self, "num_classes", self.num_classes)
        _check_pos_int(self, "hidden", self.hidden, allow_zero=True)
        if self.style not in HEAD_STYLES:
            raise ValueError(f"Head.style must be one of {', '.join(HEAD_STYLES)}, got {self.style!r}")
        if (self.style == "pool") != (self.hidden == 0):
            raise ValueError(
                f"Head.hidden must be 0 exactly when style is 'pool', got style={self.style!r} "
                f"hidden={self.hidden}"
            )
        _check_act(self, "act", self.act)
        _check_bool(self, "bias", self.bias)

    def out_channels(self, in_ch: int) -> int:
        return self.num_classes

    def out_shape(self, in_shape: tuple[int, int, int]) -> tuple[int, int, int]:
        return (self.num_classes, 1, 1)

    def label(self) -> str:
        f = f"_f{self.hidden}" if self.hidden else ""
        return f"head_{self.style}{f}_c{self.num_classes}_{ACTIVATIONS[self.act]}"


def block_from_dict(data: dict[str, Any]) -> Block:
    """Inverse of ``Block.to_dict``: ``{"kind": "ir", ...}`` -> ``MBConvBlock``."""
    if not isinstance(data, dict) or "kind" not in data:
        raise ValueError(f"a block must be a mapping with a 'kind' key, got {data!r}")
    d = dict(data)
    cls = block_class(d.pop("kind"))
    if d.get("se") is not None:
        d["se"] = SE.from_dict(d["se"])
    return _from_fields(cls, d, f"block kind {cls.kind!r}")




# --------------------------------------------------------------------------------------------


def _digest(data: Any) -> str:
    import hashlib

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
        from nas._io import atomic_write_text

        atomic_write_text(path, self.to_json(indent=1) + "\n")

    @classmethod
    def load(cls, path: str) -> Arch:
        from pathlib import Path

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
