"""timm EfficientNet-family models -> ``Arch`` (and their weights -> the built ``ArchNet``).

``from_timm`` reads a timm ``EfficientNet`` / ``MobileNetV3`` model (MobileNet-V2/V3, EfficientNet
B*/Lite, MnasNet, FBNet-C, SPNASNet, LCNet, TinyNet, ...) *from its modules*: conv shapes, kernel
sizes, strides, padding, activation and gate classes, squeeze-excite widths, residual flags.  No
model-name heuristics are used, so whatever a model is built with, the ``Arch`` describes exactly
that network, and ``nas.builder.build(arch)`` reproduces it parameter for parameter;
``load_timm_weights`` then copies the timm weights into it so the two compute the same function.

Anything the ``Arch`` spec (and ``nas.builder``) cannot reproduce raises ``UnsupportedModelError``
naming the model, the module and what is unsupported: other block classes (``CondConvResidual``,
``UniversalInvertedResidual``/MobileNetV4, ``MobileAttention``), TF "same" / dynamic padding
(``Conv2dSame``), dilation, grouped convs other than depthwise, mixed kernels (``MixedConv2d``),
anti-aliasing, space-to-depth, non-BatchNorm norms or a non-default BatchNorm eps, other SE
modules, activations outside ``nas.arch.ACTIVATIONS``, non-average global pooling, a normed
MobileNetV4-style head, and models that are not timm ``EfficientNet`` / ``MobileNetV3`` at all.

The module-by-module checks live in ``nas._timm_blocks``; this module creates the model, walks it
(stem, blocks, head) and copies weights.
"""

from __future__ import annotations

import difflib
import fnmatch
from typing import Any

import timm
import torch
from timm.models.efficientnet import EfficientNet
from timm.models.mobilenetv3 import MobileNetV3
from torch import nn

from nas._timm_blocks import SUPPORTED_BLOCKS, ModelReader, UnsupportedModelError
from nas.arch import (
    Arch,
    Block,
    ConvBlock,
    Head,
)
from nas.builder import state_dict_diff

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


def family_model_names(patterns: tuple[str, ...] | list[str] = SUPPORTED_FAMILIES) -> list[str]:
    """The timm model names of the families that convert.

    Args:
        patterns: fnmatch patterns over ``timm.list_models()`` (default: ``SUPPORTED_FAMILIES``).

    Returns:
        The matching names, ``tf_*`` (TF "same" padding) excluded, sorted.
    """
    names = timm.list_models()
    out = {n for n in names for p in patterns if fnmatch.fnmatchcase(n, p) and not n.startswith("tf_")}
    return sorted(out)


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

def _unknown_model(name: str) -> ValueError:
    """An unknown timm model name: the error names the closest converter-family (else timm) names."""
    close = difflib.get_close_matches(name, family_model_names(), n=3, cutoff=0.6)
    close = close or difflib.get_close_matches(name, timm.list_models(), n=3, cutoff=0.6)
    hint = f"; close names: {', '.join(close)}" if close else ""
    return ValueError(f"unknown timm model {name!r}{hint} (only EfficientNet / MobileNet-family timm models "
                      f"convert: {', '.join(SUPPORTED_FAMILIES)})")


def _create(name: str, num_classes: int | None, in_chans: int | None) -> nn.Module:
    """A timm model by name, built without weights (on the meta device when it can be)."""
    if ":" not in name and not timm.is_model(name):  # hf-hub: / local-dir: sources are timm's to resolve
        raise _unknown_model(name)
    kw: dict[str, Any] = {}
    if num_classes is not None:
        kw["num_classes"] = num_classes
    if in_chans is not None:
        kw["in_chans"] = in_chans
    try:  # structure only: build on the meta device (no init cost, no memory)
        with torch.device("meta"):
            return timm.create_model(name, pretrained=False, **kw)
    except Exception:  # retry on the CPU, where a real error surfaces as itself
        return timm.create_model(name, pretrained=False, **kw)


def _read_stem(rd: ModelReader, model: nn.Module) -> tuple[ConvBlock, int]:
    """The stem block and the model's input channels."""
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
    return stem, stem_conv.in_channels


def _read_head(rd: ModelReader, model: nn.Module, ch: int, *, stem_act: str, is_mnv3: bool) -> Head:
    """The head after ``ch`` body channels: MobileNetV3's pool -> conv + act, or EfficientNet's conv -> pool."""
    rd.pool(model.global_pool, "global_pool")
    if is_mnv3:
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
        return Head(num_classes=n_cls, hidden=hidden, style="pool_conv", act=act, bias=conv.bias is not None)
    if isinstance(model.conv_head, nn.Identity):
        if not isinstance(model.bn2, nn.Identity):
            raise rd.fail("bn2", "is a norm without a head conv, which is not supported")
        n_cls = rd.classifier(model.classifier, "classifier", ch)
        return Head(num_classes=n_cls, hidden=0, style="pool", act=stem_act)
    conv = rd.conv(model.conv_head, "conv_head", in_ch=ch, kernel=1)
    act = rd.bn(model.bn2, "bn2", conv.out_channels)
    if act is None:
        raise rd.fail("bn2", "has no activation, which is not supported")
    n_cls = rd.classifier(model.classifier, "classifier", conv.out_channels)
    return Head(num_classes=n_cls, hidden=conv.out_channels, style="conv_pool", act=act)


def from_timm(
    model_or_name: str | nn.Module,
    *,
    resolution: int | None = None,
    num_classes: int | None = None,
    in_chans: int | None = None,
) -> Arch:
    """The ``Arch`` of a timm EfficientNet-family model, read from its modules.

    Args:
        model_or_name: A timm model name (created without weights, so nothing is downloaded) or
            an instantiated timm ``EfficientNet`` / ``MobileNetV3``.
        resolution: The Arch's input resolution; None for the model's
            ``pretrained_cfg['input_size']``.
        num_classes: The head's classes; None keeps the model's.
        in_chans: The input channels; None keeps the model's.

    Returns:
        The ``Arch``, named after the timm architecture (without a pretrained tag);
        ``nas.build`` of it reproduces the model parameter for parameter.

    Raises:
        UnsupportedModelError: The model, or one of its modules, is something an ``Arch``
            cannot reproduce exactly (the message names the module and why).
        ValueError: The name is unknown to timm (close names suggested), or ``resolution`` is
            None and the model's input size is missing or not square.
        TypeError: ``model_or_name`` is neither a string nor a module.

    Example:
        >>> import nas
        >>> arch = nas.from_timm("mobilenetv2_100", num_classes=10)
        >>> arch.name, arch.resolution, arch.head.num_classes
        ('mobilenetv2_100', 224, 10)
    """
    if isinstance(model_or_name, str):
        model = _create(model_or_name, num_classes, in_chans)
        num_classes = in_chans = None  # already applied
    elif isinstance(model_or_name, nn.Module):
        model = model_or_name
    else:
        raise TypeError(f"from_timm expects a timm model name or nn.Module, got {type(model_or_name).__name__}")
    name = _model_name(model)  # the architecture name, without a pretrained tag

    families = _families()
    if type(model) not in families:
        raise UnsupportedModelError(
            f"{name}: is a {type(model).__name__} ({type(model).__module__}), not a timm EfficientNet-family "
            f"model; supported model classes: {', '.join(c.__name__ for c in families)}"
        )
    rd = ModelReader(model, name)
    stem, model_in_chans = _read_stem(rd, model)
    ch = stem.out_ch
    blocks: list[Block] = []
    for where, blk in _iter_blocks(model):
        b = rd.block(blk, where, ch)
        blocks.append(b)
        ch = b.out_channels(ch)
    head = _read_head(rd, model, ch, stem_act=stem.act, is_mnv3=type(model) is families[1])  # [1]: MobileNetV3

    res = resolution if resolution is not None else _default_resolution(model, name)
    arch = Arch(in_chans=model_in_chans, resolution=res, stem=stem, blocks=tuple(blocks), head=head, name=name)
    if num_classes is not None or in_chans is not None:
        arch = arch.with_head(num_classes=num_classes, in_chans=in_chans)
    return arch


# --------------------------------------------------------------------------------------------
# weights

_HEAD_PREFIXES = ("conv_head.", "bn2.", "norm_head.", "classifier.")


def timm_key_map(timm_model: nn.Module) -> dict[str, str]:
    """Where each of a timm model's weights goes in the ``ArchNet`` of its ``Arch``.

    ``conv_stem.*`` / ``bn1.*`` -> ``stem.conv.*`` / ``stem.bn1.*``; ``blocks.S.I.*`` ->
    ``blocks.N.*`` (N counting blocks in order); ``conv_head`` / ``bn2`` / ``norm_head`` /
    ``classifier`` -> ``head.*``.

    Args:
        timm_model: The timm model.

    Returns:
        ``{timm key: ArchNet key}`` for every key of its state dict.

    Raises:
        ValueError: A key has no place in an ``ArchNet`` (named).
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
    """Copy a timm model's weights (parameters and BatchNorm buffers) into its ``ArchNet``.

    Args:
        net: The ``ArchNet`` built from ``from_timm(timm_model)``; changed in place.
        timm_model: The timm model.

    Raises:
        ValueError: The two do not match (every missing, unexpected or shape-mismatched key is
            named); nothing is copied then.
    """
    mapping = timm_key_map(timm_model)
    src = timm_model.state_dict()
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
    """The ``Arch`` a command's ``model=`` / ``arch=`` names.

    Args:
        spec: ``timm:<name>`` for ``from_timm(name)``, else the path of an Arch JSON file.
        **kwargs: ``from_timm``'s options; of them an Arch file takes only ``resolution``.

    Returns:
        The ``Arch``.

    Raises:
        FileNotFoundError: The Arch file does not exist.
        ValueError: The file is not a valid Arch, or ``from_timm`` refuses the model.
    """
    if spec.startswith("timm:"):
        return from_timm(spec[len("timm:"):], **kwargs)
    arch = Arch.load(spec)
    if kwargs.get("resolution"):
        arch = arch.with_resolution(kwargs["resolution"])
    return arch
