"""Block specs for ``nas.arch`` (import them from there): the block kinds, their registry, validation.

Each kind is a frozen dataclass registered under its short name (``conv``, ``ds``, ``ir``, ``fused``,
``attn``, ``head``); the string grammar of ``Block.label`` is in ``nas.arch``'s module docs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from nas.registry import Registry

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

    return _BLOCKS.register(kind, tag="kind")


def block_kinds() -> list[str]:
    """The registered block kinds, sorted."""
    return _BLOCKS.names()


def block_class(kind: str) -> type[Block]:
    return _BLOCKS[kind]


# --------------------------------------------------------------------------------------------
# validation helpers: raise ValueError naming the field, the value and what is allowed


def check_pos_int(obj: object, name: str, value: Any, *, allow_zero: bool = False) -> None:
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
        check_pos_int(self, "channels", self.channels)
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
    check_pos_int(b, "out_ch", b.out_ch)
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
        check_pos_int(self, "mid_ch", self.mid_ch)
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
        check_pos_int(self, "out_ch", self.out_ch)
        check_pos_int(self, "heads", self.heads)
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
        check_pos_int(self, "num_classes", self.num_classes)
        check_pos_int(self, "hidden", self.hidden, allow_zero=True)
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
