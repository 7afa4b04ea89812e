"""Reading timm's EfficientNet-family modules into ``Arch`` parts (used by ``nas.timm_arch``).

``ModelReader`` checks each module (conv, BatchNorm, activation, gate, squeeze-excite, block, pooling,
classifier) against what ``nas.builder`` reproduces exactly, and raises ``UnsupportedModelError``
naming the model, the module and what is unsupported.
"""

from __future__ import annotations

import math

from timm.layers import BatchNormAct2d, CondConv2d, MixedConv2d, SelectAdaptivePool2d
from timm.layers import activations as ta
from timm.layers.adaptive_avgmax_pool import FastAdaptiveAvgPool
from timm.models import _efficientnet_blocks as eb
from torch import nn

from nas.arch import (
    SE,
    Block,
    ConvBlock,
    DSConvBlock,
    FusedMBConvBlock,
    MBConvBlock,
)

#: timm block classes ``from_timm`` converts (and the ``Arch`` block kind each becomes).
SUPPORTED_BLOCKS: dict[str, str] = {
    "ConvBnAct": "conv",
    "DepthwiseSeparableConv": "ds",
    "InvertedResidual": "ir",
    "EdgeResidual": "fused",
}

try:  # the memory-efficient activations; a timm release without the module has none of them to read
    from timm.layers import activations_me as tme
except ImportError:  # pragma: no cover - older/newer timm layouts
    tme = None

_BN_EPS = 1e-5  # nn.BatchNorm2d / timm BatchNormAct2d default, what nas.builder uses


class UnsupportedModelError(ValueError):
    """A timm model (or one of its modules) that an ``Arch`` cannot represent exactly."""


# --------------------------------------------------------------------------------------------
# activation / gate classes -> Arch names


def _act_types() -> dict[type, str]:
    table: dict[type, str] = {
        nn.ReLU: "relu",
        nn.ReLU6: "relu6",
        nn.Hardswish: "hard_swish",
        nn.SiLU: "swish",
        nn.GELU: "gelu",
        ta.Swish: "swish",
        ta.HardSwish: "hard_swish",
        ta.GELU: "gelu",
    }
    if tme is not None:
        table[tme.SwishMe] = "swish"
        table[tme.HardSwishMe] = "hard_swish"
    return table


def _gate_types() -> dict[type, str]:
    table: dict[type, str] = {
        nn.Sigmoid: "sigmoid",
        nn.Hardsigmoid: "hard_sigmoid",
        ta.Sigmoid: "sigmoid",
        ta.HardSigmoid: "hard_sigmoid",
    }
    if tme is not None:
        table[tme.HardSigmoidMe] = "hard_sigmoid"
    return table


# --------------------------------------------------------------------------------------------


class ModelReader:
    """Reads one timm model's modules; every refusal names the model and the module."""

    def __init__(self, model: nn.Module, name: str) -> None:
        self.model = model
        self.name = name
        self.acts = _act_types()
        self.gates = _gate_types()

    def fail(self, where: str, what: str) -> UnsupportedModelError:
        return UnsupportedModelError(f"{self.name}: {where} {what}")

    # -- leaf modules -----------------------------------------------------------------------
    def act(self, m: nn.Module, where: str, *, allow_none: bool = False) -> str | None:
        if isinstance(m, nn.Identity) or m is None:
            if allow_none:
                return None
            raise self.fail(where, "has no activation; supported: " + ", ".join(sorted(set(self.acts.values()))))
        name = self.acts.get(type(m))
        if name == "gelu" and getattr(m, "approximate", "none") != "none":
            name = None
        if name is None:
            raise self.fail(
                where,
                f"is activation {type(m).__name__}; supported: {_names(self.acts)}",
            )
        return name

    def gate(self, m: nn.Module, where: str) -> str:
        name = self.gates.get(type(m))
        if name is None:
            raise self.fail(where, f"is gate {type(m).__name__}; supported: {_names(self.gates)}")
        return name

    def conv(
        self,
        m: nn.Module,
        where: str,
        *,
        in_ch: int | None = None,
        depthwise: bool = False,
        bias: bool | None = False,
        kernel: int | None = None,
    ) -> nn.Conv2d:
        """Check ``m`` is a plain ``nn.Conv2d`` with timm's symmetric static padding."""
        if isinstance(m, MixedConv2d):
            raise self.fail(where, "is MixedConv2d (mixed kernel sizes); only single-kernel convs are supported")
        if isinstance(m, CondConv2d):
            raise self.fail(where, "is CondConv2d (conditional conv); only plain nn.Conv2d is supported")
        if type(m) is not nn.Conv2d:
            cls = type(m).__name__
            why = " (TF 'same' / dynamic padding)" if "same" in cls.lower() else ""
            raise self.fail(where, f"is {cls}{why}; only plain nn.Conv2d with static symmetric padding is supported")
        kh, kw = m.kernel_size
        sh, sw = m.stride
        if kh != kw or kh % 2 == 0:
            raise self.fail(where, f"has kernel {m.kernel_size}; only square odd kernels are supported")
        if sh != sw or sh not in (1, 2):
            raise self.fail(where, f"has stride {m.stride}; only stride 1 or 2 is supported")
        if tuple(m.dilation) != (1, 1):
            raise self.fail(where, f"has dilation {m.dilation}; dilated convs are not supported")
        pad = ((sh - 1) + (kh - 1)) // 2
        if isinstance(m.padding, str) or tuple(m.padding) != (pad, pad):
            raise self.fail(
                where,
                f"has padding {m.padding!r}; only timm's static symmetric padding ({pad}, {pad}) is supported "
                f"('same' / asymmetric padding is not)",
            )
        if m.padding_mode != "zeros":
            raise self.fail(where, f"has padding_mode {m.padding_mode!r}; only 'zeros' is supported")
        if in_ch is not None and m.in_channels != in_ch:
            raise self.fail(where, f"has {m.in_channels} input channels where {in_ch} arrive")
        if depthwise:
            if not (m.groups == m.in_channels == m.out_channels):
                raise self.fail(
                    where,
                    f"has groups={m.groups} ({m.in_channels}->{m.out_channels}); only a depthwise conv "
                    f"(groups = channels) is supported here",
                )
        elif m.groups != 1:
            raise self.fail(where, f"is a group conv (groups={m.groups}); only dense and depthwise convs are supported")
        if kernel is not None and kh != kernel:
            raise self.fail(where, f"has kernel {kh}; only a {kernel}x{kernel} conv is supported here")
        if bias is not None and (m.bias is not None) != bias:
            raise self.fail(where, f"{'has' if m.bias is not None else 'lacks'} a bias, which is not supported here")
        return m

    def bn(self, m: nn.Module, where: str, channels: int) -> str | None:
        """Check ``m`` is a default timm ``BatchNormAct2d`` over ``channels``; return its act (or None)."""
        if type(m) is not BatchNormAct2d:
            raise self.fail(where, f"is {type(m).__name__}; only BatchNorm (timm BatchNormAct2d) is supported")
        if m.num_features != channels:
            raise self.fail(where, f"normalises {m.num_features} channels, expected {channels}")
        if not m.affine or not m.track_running_stats:
            raise self.fail(where, "is a BatchNorm without affine params / running stats, which is not supported")
        if not math.isclose(m.eps, _BN_EPS, rel_tol=0, abs_tol=1e-12):
            raise self.fail(where, f"has BatchNorm eps={m.eps:g}; only the default {_BN_EPS:g} is supported")
        if not isinstance(getattr(m, "drop", nn.Identity()), nn.Identity):
            raise self.fail(where, f"has a {type(m.drop).__name__} inside the norm, which is not supported")
        return self.act(m.act, f"{where}.act", allow_none=True)

    def no_aa(self, block: nn.Module, where: str) -> None:
        aa = getattr(block, "aa", None)
        if aa is not None and not isinstance(aa, nn.Identity):
            raise self.fail(
                f"{where}.aa", f"is {type(aa).__name__} (anti-aliased downsampling), which is not supported"
            )

    def no_s2d(self, block: nn.Module, where: str) -> None:
        if getattr(block, "conv_s2d", None) is not None:
            raise self.fail(where, "uses space-to-depth (s2d), which is not supported")

    def children_known(self, block: nn.Module, where: str, known: set[str]) -> None:
        extra = sorted(n for n, _ in block.named_children() if n not in known)
        if extra:
            raise self.fail(where, f"has unexpected submodule(s) {extra}; the converter knows {sorted(known)}")

    def se(self, m: nn.Module, where: str, channels: int, block_act: str) -> SE | None:
        if isinstance(m, nn.Identity):
            return None
        if type(m) is not eb.SqueezeExcite:
            raise self.fail(
                where,
                f"is {type(m).__name__}; only timm's EfficientNet SqueezeExcite is supported as attention",
            )
        self.children_known(m, where, {"conv_reduce", "act1", "conv_expand", "gate"})
        red = self.conv(m.conv_reduce, f"{where}.conv_reduce", in_ch=channels, bias=True, kernel=1)
        self.conv(m.conv_expand, f"{where}.conv_expand", in_ch=red.out_channels, bias=True, kernel=1)
        if m.conv_expand.out_channels != channels:
            raise self.fail(where, f"expands to {m.conv_expand.out_channels} channels, expected {channels}")
        act = self.act(m.act1, f"{where}.act1")
        gate = self.gate(m.gate, f"{where}.gate")
        return SE(channels=red.out_channels, gate=gate, act=None if act == block_act else act)

    # -- blocks -----------------------------------------------------------------------------
    def block(self, m: nn.Module, where: str, in_ch: int) -> Block:
        cls = type(m)
        if cls is eb.DepthwiseSeparableConv:
            return self._ds(m, where, in_ch)
        if cls is eb.InvertedResidual:
            return self._ir(m, where, in_ch)
        if cls is eb.EdgeResidual:
            return self._er(m, where, in_ch)
        if cls is eb.ConvBnAct:
            return self._cba(m, where, in_ch)
        raise self.fail(
            f"block {where}",
            f"is {cls.__name__}; supported: {', '.join(SUPPORTED_BLOCKS)}",
        )

    def _skip_flags(self, m: nn.Module, stride: int, in_ch: int, out_ch: int) -> bool:
        """The ``noskip`` value reproducing ``m.has_skip`` (canonical: False when no skip is possible)."""
        possible = stride == 1 and in_ch == out_ch
        return possible and not bool(m.has_skip)

    def _ds(self, m: nn.Module, where: str, in_ch: int) -> DSConvBlock:
        self.no_s2d(m, f"block {where}")
        self.no_aa(m, where)
        self.children_known(m, f"block {where}", {"conv_dw", "bn1", "aa", "se", "conv_pw", "bn2", "drop_path"})
        dw = self.conv(m.conv_dw, f"{where}.conv_dw", in_ch=in_ch, depthwise=True)
        act = self.bn(m.bn1, f"{where}.bn1", in_ch)
        if act is None:
            raise self.fail(f"{where}.bn1", "has no activation, which is not supported")
        se = self.se(m.se, f"{where}.se", in_ch, act)
        pw = self.conv(m.conv_pw, f"{where}.conv_pw", in_ch=in_ch, kernel=1)
        pw_act = self.bn(m.bn2, f"{where}.bn2", pw.out_channels)
        if bool(m.has_pw_act) != (pw_act is not None):
            raise self.fail(f"{where}.bn2", f"activation {pw_act} does not match has_pw_act={m.has_pw_act}")
        if pw_act is not None and pw_act != act:
            raise self.fail(
                f"{where}.bn2.act", f"is {pw_act} but the block's activation is {act}; they must be the same"
            )
        stride = dw.stride[0]
        return DSConvBlock(
            out_ch=pw.out_channels,
            kernel=dw.kernel_size[0],
            stride=stride,
            act=act,
            se=se,
            pw_act=pw_act is not None,
            noskip=self._skip_flags(m, stride, in_ch, pw.out_channels),
        )

    def _ir(self, m: nn.Module, where: str, in_ch: int) -> MBConvBlock:
        self.no_s2d(m, f"block {where}")
        self.no_aa(m, where)
        self.children_known(
            m, f"block {where}", {"conv_pw", "bn1", "conv_dw", "bn2", "aa", "se", "conv_pwl", "bn3", "drop_path"}
        )
        pw = self.conv(m.conv_pw, f"{where}.conv_pw", in_ch=in_ch, kernel=1)
        mid = pw.out_channels
        act = self.bn(m.bn1, f"{where}.bn1", mid)
        if act is None:
            raise self.fail(f"{where}.bn1", "has no activation, which is not supported")
        dw = self.conv(m.conv_dw, f"{where}.conv_dw", in_ch=mid, depthwise=True)
        act2 = self.bn(m.bn2, f"{where}.bn2", mid)
        if act2 != act:
            raise self.fail(f"{where}.bn2.act", f"is {act2} but bn1's is {act}; they must be the same")
        return self._project(MBConvBlock, m, where, in_ch, mid, act, dw, "bn3")

    def _er(self, m: nn.Module, where: str, in_ch: int) -> FusedMBConvBlock:
        self.no_aa(m, where)
        self.children_known(m, f"block {where}", {"conv_exp", "bn1", "aa", "se", "conv_pwl", "bn2", "drop_path"})
        exp = self.conv(m.conv_exp, f"{where}.conv_exp", in_ch=in_ch)
        mid = exp.out_channels
        act = self.bn(m.bn1, f"{where}.bn1", mid)
        if act is None:
            raise self.fail(f"{where}.bn1", "has no activation, which is not supported")
        return self._project(FusedMBConvBlock, m, where, in_ch, mid, act, exp, "bn2")

    def _project(self, cls: type, m: nn.Module, where: str, in_ch: int, mid: int, act: str, spatial: nn.Module,
                 bn: str):
        """The end ``ir`` and ``er`` share: SE, a 1x1 projection without activation, the skip.
        ``spatial`` is the block's strided KxK conv, ``bn`` the projection's norm."""
        se = self.se(m.se, f"{where}.se", mid, act)
        pwl = self.conv(m.conv_pwl, f"{where}.conv_pwl", in_ch=mid, kernel=1)
        if self.bn(getattr(m, bn), f"{where}.{bn}", pwl.out_channels) is not None:
            raise self.fail(f"{where}.{bn}", "has an activation after the projection, which is not supported")
        stride = spatial.stride[0]
        self._mid_check(where, mid)
        return cls(out_ch=pwl.out_channels, mid_ch=mid, kernel=spatial.kernel_size[0], stride=stride, act=act,
                   se=se, noskip=self._skip_flags(m, stride, in_ch, pwl.out_channels))

    def _cba(self, m: nn.Module, where: str, in_ch: int) -> ConvBlock:
        self.no_aa(m, where)
        self.children_known(m, f"block {where}", {"conv", "bn1", "aa", "drop_path"})
        conv = self.conv(m.conv, f"{where}.conv", in_ch=in_ch)
        act = self.bn(m.bn1, f"{where}.bn1", conv.out_channels)
        if act is None:
            raise self.fail(f"{where}.bn1", "has no activation, which is not supported")
        return ConvBlock(
            out_ch=conv.out_channels,
            kernel=conv.kernel_size[0],
            stride=conv.stride[0],
            act=act,
            skip=bool(m.has_skip),
        )

    def _mid_check(self, where: str, mid: int) -> None:
        # nas.builder hands timm exp_ratio = mid / in; timm rounds the expansion to a multiple of 8
        if mid % 8:
            raise self.fail(
                f"block {where}",
                f"has {mid} expansion channels, not a multiple of 8, which nas.builder cannot reproduce",
            )

    # -- head -------------------------------------------------------------------------------
    def pool(self, m: nn.Module, where: str) -> None:
        if type(m) is not SelectAdaptivePool2d:
            raise self.fail(
                where, f"is {type(m).__name__}; only timm SelectAdaptivePool2d average pooling is supported"
            )
        p = m.pool
        ok = (type(p) is nn.AdaptiveAvgPool2d and p.output_size in (1, (1, 1))) or (
            type(p) is FastAdaptiveAvgPool and tuple(p.dim) == (2, 3)
        )
        if not ok:
            raise self.fail(where, f"is {m.pool_type!r} pooling; only global average pooling is supported")

    def classifier(self, m: nn.Module, where: str, in_features: int) -> int:
        if isinstance(m, nn.Identity):
            raise self.fail(where, "is absent (num_classes=0); a classifier is required")
        if not isinstance(m, nn.Linear) or m.bias is None:
            raise self.fail(where, f"is {type(m).__name__}; only a Linear classifier with bias is supported")
        if m.in_features != in_features:
            raise self.fail(where, f"takes {m.in_features} features, expected {in_features}")
        return m.out_features


def _names(table: dict[type, str]) -> str:
    return ", ".join(sorted(set(table.values())))
