"""Arch -> torch ``nn.Module``, made from timm's layers and blocks.

Each layer of an ``Arch`` (stem, body blocks, head) becomes one module built by
``build_layer``; the same function builds the standalone graphs the profiler measures, so a
table entry and the block inside a whole network are the same module.

timm provides the blocks (``ConvBnAct``, ``DepthwiseSeparableConv``, ``InvertedResidual``,
``EdgeResidual``, ``SqueezeExcite``, ``MobileAttention``) and layers (``create_conv2d``,
``BatchNormAct2d``, ``ConvMlp``, ``ConvNormAct``, activation factories); this module only wires
them to the spec and checks that timm produced exactly the channels the spec names.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import torch
from timm.layers import (
    BatchNormAct2d,
    ConvMlp,
    ConvNormAct,
    SelectAdaptivePool2d,
    create_conv2d,
    get_act_layer,
)
from timm.models._efficientnet_blocks import (
    ConvBnAct,
    DepthwiseSeparableConv,
    EdgeResidual,
    InvertedResidual,
    MobileAttention,
    SqueezeExcite,
)
from torch import nn

from nas.arch import (
    SE,
    Arch,
    AttentionBlock,
    BlockKey,
    ConvBlock,
    DSConvBlock,
    FusedMBConvBlock,
    Head,
    MBConvBlock,
)

__all__ = ["ArchNet", "AttentionLayer", "HeadLayer", "build", "build_layer", "state_dict_diff"]


def _act(name: str) -> type[nn.Module]:
    return get_act_layer(name)


def _se_layer(se: SE | None):
    if se is None:
        return None
    return partial(
        SqueezeExcite,
        rd_channels=se.channels,
        gate_layer=se.gate,
        force_act_layer=_act(se.act) if se.act else None,
    )


class AttentionLayer(nn.Module):
    """An ``AttentionBlock`` as a module: input projection (when needed), timm ``MobileAttention``,
    pre-norm ``ConvMlp``.

    Args:
        in_ch: Input channels.
        block: The block spec.
    """

    def __init__(self, in_ch: int, block: AttentionBlock) -> None:
        super().__init__()
        e = block.out_ch
        if block.needs_proj(in_ch):
            self.proj = ConvNormAct(
                in_ch, e, block.proj_kernel, stride=block.stride, act_layer=_act(block.proj_act)
            )
        else:
            self.proj = nn.Identity()
        self.attn = MobileAttention(
            e, e, num_heads=block.heads, layer_scale_init_value=None, act_layer=_act(block.act)
        )
        self.norm2 = nn.BatchNorm2d(e)
        self.mlp = ConvMlp(e, block.mlp_hidden, act_layer=_act(block.act))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, in_ch, H, W)`` -> ``(N, out_ch, H / stride, W / stride)``."""
        x = self.proj(x)
        x = self.attn(x)  # norm -> attention -> residual
        return x + self.mlp(self.norm2(x))


class HeadLayer(nn.Module):
    """A ``Head`` as a module, in one of its three styles (``nas.arch.Head``).

    Args:
        in_ch: Channels entering the head.
        head: The head spec.
        drop_rate: Dropout before the classifier (0: none).
    """

    def __init__(self, in_ch: int, head: Head, drop_rate: float = 0.0) -> None:
        super().__init__()
        self.style = head.style
        act = _act(head.act)
        if head.style == "conv_pool":  # EfficientNet
            self.conv_head = create_conv2d(in_ch, head.hidden, 1)
            self.bn2 = BatchNormAct2d(head.hidden, act_layer=act)
            self.global_pool = SelectAdaptivePool2d(pool_type="avg", flatten=True)
            feats = head.hidden
        elif head.style == "pool_conv":  # MobileNetV3
            self.global_pool = SelectAdaptivePool2d(pool_type="avg")
            self.conv_head = create_conv2d(in_ch, head.hidden, 1, bias=head.bias)
            self.act2 = act(inplace=True)
            self.flatten = nn.Flatten(1)
            feats = head.hidden
        else:
            self.global_pool = SelectAdaptivePool2d(pool_type="avg", flatten=True)
            feats = in_ch
        self.drop = nn.Dropout(drop_rate) if drop_rate else nn.Identity()
        self.classifier = nn.Linear(feats, head.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Features ``(N, in_ch, H, W)`` -> logits ``(N, num_classes)``."""
        if self.style == "conv_pool":
            x = self.global_pool(self.bn2(self.conv_head(x)))
        elif self.style == "pool_conv":
            x = self.flatten(self.act2(self.conv_head(self.global_pool(x))))
        else:
            x = self.global_pool(x)
        return self.classifier(self.drop(x))


def _exp_ratio(in_ch: int, mid_ch: int, block) -> float:
    if mid_ch % 8:
        raise ValueError(
            f"{block.label()}: mid_ch={mid_ch} is not a multiple of 8; timm's blocks round "
            f"expansion channels to multiples of 8"
        )
    return mid_ch / in_ch


def build_layer(key: BlockKey, *, drop_path_rate: float = 0.0, drop_rate: float = 0.0) -> nn.Module:
    """Build the module of one layer (stem, body block or head) at its input shape.

    Args:
        key: The layer and its input shape.
        drop_path_rate: Stochastic-depth rate of a residual block (0: none).
        drop_rate: Dropout before a head's classifier (0: none).

    Returns:
        The module, from timm's EfficientNet blocks where the kind has one; weights freshly
        initialised.

    Raises:
        ValueError: The block has no builder, or its expanded channels are not a multiple of 8
            (timm rounds them so).
    """
    b, in_ch = key.block, key.in_ch
    dp = {"drop_path_rate": drop_path_rate} if drop_path_rate else {}
    if isinstance(b, ConvBlock):
        m = ConvBnAct(in_ch, b.out_ch, b.kernel, stride=b.stride, skip=b.skip, act_layer=_act(b.act), **dp)
    elif isinstance(b, DSConvBlock):
        m = DepthwiseSeparableConv(
            in_ch, b.out_ch, dw_kernel_size=b.kernel, stride=b.stride, noskip=b.noskip,
            pw_act=b.pw_act, act_layer=_act(b.act), se_layer=_se_layer(b.se), **dp,
        )
    elif isinstance(b, MBConvBlock):
        m = InvertedResidual(
            in_ch, b.out_ch, dw_kernel_size=b.kernel, stride=b.stride, noskip=b.noskip,
            exp_ratio=_exp_ratio(in_ch, b.mid_ch, b), act_layer=_act(b.act), se_layer=_se_layer(b.se), **dp,
        )
        _check_channels(b, m.conv_pw.out_channels, b.mid_ch)
    elif isinstance(b, FusedMBConvBlock):
        m = EdgeResidual(
            in_ch, b.out_ch, exp_kernel_size=b.kernel, stride=b.stride, noskip=b.noskip,
            exp_ratio=_exp_ratio(in_ch, b.mid_ch, b), act_layer=_act(b.act), se_layer=_se_layer(b.se), **dp,
        )
        _check_channels(b, m.conv_exp.out_channels, b.mid_ch)
    elif isinstance(b, AttentionBlock):
        m = AttentionLayer(in_ch, b)
    elif isinstance(b, Head):
        m = HeadLayer(in_ch, b, drop_rate=drop_rate)
    else:
        raise ValueError(f"no builder for block kind {b.kind!r} ({type(b).__name__})")
    return m


def _check_channels(block, got: int, want: int) -> None:
    if got != want:
        raise ValueError(f"{block.label()}: timm built {got} mid channels, the spec says {want}")


class ArchNet(nn.Module):
    """The network an ``Arch`` describes: ``stem`` -> ``blocks`` -> ``head``.

    Module names and state-dict keys follow timm's EfficientNet (``blocks.<i>...``), so
    ``nas.timm_arch.load_timm_weights`` can copy a timm model's weights in.

    Args:
        arch: The network.
        drop_rate: Dropout before the classifier (0: none).
        drop_path_rate: The last block's stochastic-depth rate; earlier blocks' rise linearly
            from 0 to it.
    """

    def __init__(self, arch: Arch, *, drop_rate: float = 0.0, drop_path_rate: float = 0.0) -> None:
        super().__init__()
        self.arch = arch
        keys = arch.keys()
        n = max(len(keys) - 2, 1)
        self.stem = build_layer(keys[0])
        self.blocks = nn.Sequential(
            *[
                build_layer(k, drop_path_rate=drop_path_rate * i / n)
                for i, k in enumerate(keys[1:-1])
            ]
        )
        self.head = build_layer(keys[-1], drop_rate=drop_rate)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Images ``(N, in_chans, H, W)`` -> the features entering the head."""
        return self.blocks(self.stem(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images ``(N, in_chans, H, W)`` -> logits ``(N, num_classes)``."""
        return self.head(self.forward_features(x))


def build(arch: Arch, *, drop_rate: float = 0.0, drop_path_rate: float = 0.0) -> ArchNet:
    """Build an ``Arch`` as a torch module.

    Args:
        arch: The network.
        drop_rate: Dropout before the classifier (0: none).
        drop_path_rate: The last block's stochastic-depth rate (0: none); see ``ArchNet``.

    Returns:
        The ``ArchNet``, weights freshly initialised, in training mode.

    Raises:
        ValueError: A block cannot be built (``build_layer``).

    Example:
        >>> import torch
        >>> from nas import build, load_space
        >>> arch = load_space("tiny").smallest()
        >>> net = build(arch).eval()
        >>> net(torch.zeros(1, arch.in_chans, arch.resolution, arch.resolution)).shape[1] == arch.head.num_classes
        True
    """
    return ArchNet(arch, drop_rate=drop_rate, drop_path_rate=drop_path_rate)


def state_dict_diff(own: Mapping[str, Any], other: Mapping[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """What keeps one state dict from loading into a module with another.

    Args:
        own: The module's state dict.
        other: The state dict to load.

    Returns:
        ``(missing, unexpected, mismatched)``: the keys ``other`` lacks, the keys ``own`` lacks,
        and ``"<key> <other shape> vs <own shape>"`` for each key whose shapes differ; all empty
        when it loads.
    """
    missing = [k for k in own if k not in other]
    extra = [k for k in other if k not in own]
    shapes = [f"{k} {tuple(other[k].shape)} vs {tuple(own[k].shape)}" for k in own
              if k in other and tuple(other[k].shape) != tuple(own[k].shape)]
    return missing, extra, shapes
