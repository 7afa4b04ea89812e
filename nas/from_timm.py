"""timm EfficientNet-family models -> ``Arch`` (and their weights -> the built ``ArchNet``).

``from_timm`` reads a timm ``EfficientNet`` / ``MobileNetV3`` model (MobileNet-V2/V3, EfficientNet
B*/Lite, MnasNet, FBNet-C, SPNASNet, LCNet, TinyNet, ...) *from its modules*: conv shapes, kernel
sizes, strides, padding, activation and gate classes, squeeze-excite widths, residual flags.  No
model-name heuristics are used, so whatever a model is built with, the ``Arch`` describes exactly
that network, and ``nas.build.build(arch)`` reproduces it parameter for parameter;
``load_timm_weights`` then copies the timm weights into it so the two compute the same function.

Anything the ``Arch`` spec (and ``nas.build``) cannot reproduce raises ``UnsupportedModelError``
naming the model, the module and what is unsupported: other block classes (``CondConvResidual``,
``UniversalInvertedResidual``/MobileNetV4, ``MobileAttention``), TF "same" / dynamic padding
(``Conv2dSame``), dilation, grouped convs other than depthwise, mixed kernels (``MixedConv2d``),
anti-aliasing, space-to-depth, non-BatchNorm norms or a non-default BatchNorm eps, other SE
modules, activations outside ``nas.arch.ACTIVATIONS``, non-average global pooling, a normed
MobileNetV4-style head, and models that are not timm ``EfficientNet`` / ``MobileNetV3`` at all.
"""

from __future__ import annotations

import fnmatch
import math
from typing import Any

import torch
from torch import nn

from nas.arch import (
    SE,
    Arch,
    Block,
    ConvBlock,
    DSConvBlock,
    FusedMBConvBlock,
    Head,
    MBConvBlock,
)

__all__ = [
    "arch_from_spec",
    "SUPPORTED_BLOCKS",
    "SUPPORTED_FAMILIES",
    "UnsupportedModelError",
    "family_model_names",
    "from_timm",
    "load_timm_weights",
    "timm_key_map",
]

#: timm block classes ``from_timm`` converts (and the ``Arch`` block kind each becomes).
SUPPORTED_BLOCKS: dict[str, str] = {
    "ConvBnAct": "conv",
    "DepthwiseSeparableConv": "ds",
    "InvertedResidual": "ir",
    "EdgeResidual": "fused",
}

#: timm model-name patterns of the families this converter targets (``tf_*`` excluded: they use
#: TF "same" padding and TF BatchNorm eps).  Some members are still refused (e.g. the GroupNorm /
#: EvoNorm / blur-pool EfficientNets); ``from_timm`` decides from the modules, not these names.
SUPPORTED_FAMILIES: tuple[str, ...] = (
    "mobilenetv2_*",
    "mobilenetv3_*",
    "efficientnet_b*",
    "efficientnet_lite*",
    "mnasnet_*",
    "fbnetc_*",
    "spnasnet_*",
    "lcnet_*",
    "tinynet_*",
)

_BN_EPS = 1e-5  # nn.BatchNorm2d / timm BatchNormAct2d default, what nas.build uses


class UnsupportedModelError(ValueError):
    """A timm model (or one of its modules) that an ``Arch`` cannot represent exactly."""


def family_model_names(patterns: tuple[str, ...] | list[str] = SUPPORTED_FAMILIES) -> list[str]:
    """Every ``timm.list_models()`` name matching ``patterns`` (fnmatch), ``tf_*`` excluded, sorted."""
    import timm

    names = timm.list_models()
    out = {n for n in names for p in patterns if fnmatch.fnmatchcase(n, p) and not n.startswith("tf_")}
    return sorted(out)


# --------------------------------------------------------------------------------------------
# activation / gate classes -> Arch names


def _act_types() -> dict[type, str]:
    from timm.layers import activations as ta

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
    try:
        from timm.layers import activations_me as tme

        table[tme.SwishMe] = "swish"
        table[tme.HardSwishMe] = "hard_swish"
    except ImportError:  # pragma: no cover - older/newer timm layouts
        pass
    return table


def _gate_types() -> dict[type, str]:
    from timm.layers import activations as ta

    table: dict[type, str] = {
        nn.Sigmoid: "sigmoid",
        nn.Hardsigmoid: "hard_sigmoid",
        ta.Sigmoid: "sigmoid",
        ta.HardSigmoid: "hard_sigmoid",
    }
    try:
        from timm.layers import activations_me as tme

        table[tme.HardSigmoidMe] = "hard_sigmoid"
    except ImportError:  # pragma: no cover
        pass
    return table


# --------------------------------------------------------------------------------------------


class _Reader:
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
        from timm.layers import CondConv2d, MixedConv2d

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
        from timm.layers import BatchNormAct2d

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
        from timm.models._efficientnet_blocks import SqueezeExcite

        if isinstance(m, nn.Identity):
            return None
        if type(m) is not SqueezeExcite:
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
        from timm.models import _efficientnet_blocks as eb

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
        # nas.build hands timm exp_ratio = mid / in; timm rounds the expansion to a multiple of 8
        if mid % 8:
            raise self.fail(
                f"block {where}",
                f"has {mid} expansion channels, not a multiple of 8, which nas.build cannot reproduce",
            )

    # -- head -------------------------------------------------------------------------------
    def pool(self, m: nn.Module, where: str) -> None:
        from timm.layers import SelectAdaptivePool2d
        from timm.layers.adaptive_avgmax_pool import FastAdaptiveAvgPool

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


def _model_name(model: nn.Module) -> str:
    cfg = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", None) or {}
    return str(cfg.get("architecture") or type(model).__name__)


def _default_resolution(model: nn.Module, name: str) -> int:
    cfg = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", None) or {}
    size = cfg.get("input_size")
    if not size or len(size) != 3:
        raise ValueError(f"{name}: the model has no pretrained_cfg input_size; pass resolution=")
    h, w = int(size[1]), int(size[2])
    if h != w:
        raise ValueError(f"{name}: pretrained_cfg input_size {tuple(size)} is not square; pass resolution=")
    return h


def _families() -> tuple[type, ...]:
    from timm.models.efficientnet import EfficientNet
    from timm.models.mobilenetv3 import MobileNetV3

    return (EfficientNet, MobileNetV3)


def _iter_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(dotted name, block)`` for every block of ``model.blocks`` (stages of blocks), in order."""
    out: list[tuple[str, nn.Module]] = []
    for si, stage in model.blocks.named_children():
        if isinstance(stage, nn.Sequential):
            for bi, blk in stage.named_children():
                out.append((f"blocks.{si}.{bi}", blk))
        else:  # a block directly in model.blocks
            out.append((f"blocks.{si}", stage))
    return out


def from_timm(
    model_or_name: str | nn.Module,
    *,
    resolution: int | None = None,
    num_classes: int | None = None,
    in_chans: int | None = None,
) -> Arch:
    """The ``Arch`` of a timm EfficientNet-family model, read from its modules.

    ``model_or_name``: a timm model name (created with ``pretrained=False``, so nothing is
    downloaded, with ``num_classes`` / ``in_chans`` when given) or an instantiated timm
    ``EfficientNet`` / ``MobileNetV3`` (``num_classes`` / ``in_chans`` then override what the model
    has).  ``resolution`` defaults to the model's ``pretrained_cfg['input_size']``.  The Arch's
    ``name`` is the timm model (architecture) name, without a pretrained tag.  Raises
    ``UnsupportedModelError`` for anything an ``Arch`` cannot reproduce exactly.
    """
    if isinstance(model_or_name, str):
        import timm

        name = model_or_name
        kw: dict[str, Any] = {}
        if num_classes is not None:
            kw["num_classes"] = num_classes
        if in_chans is not None:
            kw["in_chans"] = in_chans
        try:  # structure only: build on the meta device (no init cost, no memory)
            with torch.device("meta"):
                model = timm.create_model(name, pretrained=False, **kw)
        except Exception:  # retry on the CPU, where a real error surfaces as itself
            model = timm.create_model(name, pretrained=False, **kw)
        num_classes = in_chans = None  # already applied
        name = _model_name(model)  # the architecture name, without a pretrained tag
    elif isinstance(model_or_name, nn.Module):
        model = model_or_name
        name = _model_name(model)
    else:
        raise TypeError(f"from_timm expects a timm model name or nn.Module, got {type(model_or_name).__name__}")

    families = _families()
    if type(model) not in families:
        raise UnsupportedModelError(
            f"{name}: is a {type(model).__name__} ({type(model).__module__}), not a timm EfficientNet-family "
            f"model; supported model classes: {', '.join(c.__name__ for c in families)}"
        )
    rd = _Reader(model, name)
    is_mnv3 = type(model) is families[1]  # MobileNetV3

    # stem
    stem_conv = rd.conv(model.conv_stem, "conv_stem")
    stem_act = rd.bn(model.bn1, "bn1", stem_conv.out_channels)
    if stem_act is None:
        raise rd.fail("bn1", "has no activation, which is not supported")
    stem = ConvBlock(
        out_ch=stem_conv.out_channels,
        kernel=stem_conv.kernel_size[0],
        stride=stem_conv.stride[0],
        act=stem_act,
    )

    # body
    ch = stem.out_ch
    blocks: list[Block] = []
    for where, blk in _iter_blocks(model):
        b = rd.block(blk, where, ch)
        blocks.append(b)
        ch = b.out_channels(ch)

    # head
    if is_mnv3:
        rd.pool(model.global_pool, "global_pool")
        if not isinstance(model.norm_head, nn.Identity):
            raise rd.fail(
                "norm_head",
                f"is {type(model.norm_head).__name__} (MobileNetV4-style normed head); only the MobileNetV3 head "
                f"(pool -> conv + act) is supported",
            )
        conv = rd.conv(model.conv_head, "conv_head", in_ch=ch, bias=None, kernel=1)
        act = rd.act(model.act2, "act2")
        if not isinstance(model.flatten, nn.Flatten):
            raise rd.fail("flatten", f"is {type(model.flatten).__name__}; expected nn.Flatten")
        hidden = conv.out_channels
        n_cls = rd.classifier(model.classifier, "classifier", hidden)
        head = Head(num_classes=n_cls, hidden=hidden, style="pool_conv", act=act, bias=conv.bias is not None)
    else:
        rd.pool(model.global_pool, "global_pool")
        if isinstance(model.conv_head, nn.Identity):
            if not isinstance(model.bn2, nn.Identity):
                raise rd.fail("bn2", "is a norm without a head conv, which is not supported")
            n_cls = rd.classifier(model.classifier, "classifier", ch)
            head = Head(num_classes=n_cls, hidden=0, style="pool", act=stem_act)
        else:
            conv = rd.conv(model.conv_head, "conv_head", in_ch=ch, kernel=1)
            act = rd.bn(model.bn2, "bn2", conv.out_channels)
            if act is None:
                raise rd.fail("bn2", "has no activation, which is not supported")
            n_cls = rd.classifier(model.classifier, "classifier", conv.out_channels)
            head = Head(num_classes=n_cls, hidden=conv.out_channels, style="conv_pool", act=act)

    res = resolution if resolution is not None else _default_resolution(model, name)
    arch = Arch(
        in_chans=stem_conv.in_channels,
        resolution=res,
        stem=stem,
        blocks=tuple(blocks),
        head=head,
        name=name,
    )
    if num_classes is not None or in_chans is not None:
        arch = arch.with_head(num_classes=num_classes, in_chans=in_chans)
    return arch


# --------------------------------------------------------------------------------------------
# weights

_HEAD_PREFIXES = ("conv_head.", "bn2.", "norm_head.", "classifier.")


def timm_key_map(timm_model: nn.Module) -> dict[str, str]:
    """timm state-dict key -> ``ArchNet`` state-dict key, for every key of ``timm_model``.

    ``conv_stem.*``/``bn1.*`` -> ``stem.conv.*``/``stem.bn1.*``; ``blocks.S.I.*`` -> ``blocks.N.*``
    (N counting blocks in order); ``conv_head``/``bn2``/``norm_head``/``classifier`` -> ``head.*``.
    Raises ``ValueError`` on a key it cannot place.
    """
    flat: dict[str, int] = {}
    if isinstance(getattr(timm_model, "blocks", None), nn.Module):
        flat = {where: i for i, (where, _) in enumerate(_iter_blocks(timm_model))}
    by_len = sorted(flat, key=len, reverse=True)
    out: dict[str, str] = {}
    bad: list[str] = []
    for key in timm_model.state_dict():
        if key.startswith("conv_stem."):
            out[key] = "stem.conv." + key[len("conv_stem.") :]
        elif key.startswith("bn1."):
            out[key] = "stem.bn1." + key[len("bn1.") :]
        elif key.startswith(_HEAD_PREFIXES):
            out[key] = "head." + key
        else:
            where = next((w for w in by_len if key.startswith(w + ".")), None)
            if where is None:
                bad.append(key)
            else:
                out[key] = f"blocks.{flat[where]}.{key[len(where) + 1 :]}"
    if bad:
        raise ValueError(f"timm state-dict key(s) with no place in an ArchNet: {_short(bad)}")
    return out


def _short(items: list[str], n: int = 8) -> str:
    s = ", ".join(items[:n])
    return s + (f", ... ({len(items)} in all)" if len(items) > n else "")


def load_timm_weights(net: nn.Module, timm_model: nn.Module) -> None:
    """Copy ``timm_model``'s weights (params and BN buffers) into ``net``, the ``ArchNet`` built
    from ``from_timm(timm_model)``.  Raises ``ValueError`` naming every missing, unexpected or
    shape-mismatched key; nothing is copied unless everything matches.
    """
    mapping = timm_key_map(timm_model)
    src = timm_model.state_dict()
    from nas.build import state_dict_diff

    mapped = {mapping[k]: v for k, v in src.items()}
    missing, unexpected, mismatched = (sorted(x) for x in state_dict_diff(net.state_dict(), mapped))
    problems = []
    if missing:
        problems.append(f"missing in the timm model: {_short(missing)}")
    if unexpected:
        problems.append(f"not in the ArchNet: {_short(unexpected)}")
    if mismatched:
        problems.append(f"shape mismatch (timm vs ArchNet): {_short(mismatched)}")
    if problems:
        raise ValueError("load_timm_weights: the models do not match; " + "; ".join(problems))
    with torch.no_grad():
        net.load_state_dict(mapped, strict=True)


def arch_from_spec(spec: str, **kwargs) -> Arch:
    """``timm:<name>`` -> ``from_timm(name)``; anything else is an Arch JSON file path."""
    if spec.startswith("timm:"):
        return from_timm(spec[len("timm:"):], **kwargs)
    arch = Arch.load(spec)
    if kwargs.get("resolution"):
        arch = arch.with_resolution(kwargs["resolution"])
    return arch
