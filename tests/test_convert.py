"""timm EfficientNet-family models -> Arch (nas.timm_arch): exact structure, weights and refusals."""

from __future__ import annotations

import re

import pytest
import timm
import torch
from torch import nn

from nas.arch import Arch, ConvBlock, DSConvBlock, FusedMBConvBlock, MBConvBlock
from nas.builder import build
from nas.timm_arch import (
    SUPPORTED_FAMILIES,
    UnsupportedModelError,
    family_model_names,
    from_timm,
    load_timm_weights,
    timm_key_map,
)

EXACT = [
    "mobilenetv2_100",
    "mobilenetv2_035",
    "mobilenetv3_large_100",
    "mobilenetv3_small_050",
    "efficientnet_b0",
    "efficientnet_lite0",
    "mnasnet_100",
    "fbnetc_100",
    "spnasnet_100",
    "lcnet_050",
    "tinynet_e",
    # beyond the brief's list: fused (EdgeResidual) and ConvBnAct blocks, DS blocks with pw act
    "efficientnet_es",
    "efficientnetv2_rw_t",
    "mobilenetv1_100",
]


def _n_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def _randomise_bn(model: nn.Module, seed: int = 0) -> None:
    """Give every BatchNorm non-trivial stats/affine params, so a wrong mapping shows in eval()."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
                m.weight.copy_(torch.rand(n, generator=g) + 0.5)
                m.bias.copy_(torch.randn(n, generator=g) * 0.1)


@pytest.mark.parametrize("name", EXACT)
def test_converted_model_is_exact(name: str) -> None:
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False).eval()
    _randomise_bn(model)
    arch = from_timm(model)
    assert arch.name == name
    assert arch.resolution == model.pretrained_cfg["input_size"][-1]
    assert Arch.from_json(arch.to_json()) == arch
    assert Arch.from_json(arch.to_json()).name == name

    net = build(arch).eval()
    assert _n_params(net) == _n_params(model)
    load_timm_weights(net, model)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        want, got = model(x), net(x)
    assert got.shape == want.shape == (1, 1000)
    assert (got - want).abs().max().item() <= 1e-4


def test_name_and_module_give_the_same_arch() -> None:
    by_name = from_timm("mobilenetv3_small_050")
    by_module = from_timm(timm.create_model("mobilenetv3_small_050"))
    assert by_name == by_module and by_name.name == by_module.name == "mobilenetv3_small_050"
    assert from_timm("efficientnet_b0.ra_in1k").name == "efficientnet_b0"  # tag dropped


def test_structure_details() -> None:
    a = from_timm("mobilenetv3_large_100")
    assert a.stem == ConvBlock(out_ch=16, kernel=3, stride=2, act="hard_swish")
    assert isinstance(a.blocks[0], DSConvBlock) and a.blocks[0].act == "relu"
    se_blocks = [b for b in a.blocks if isinstance(b, MBConvBlock) and b.se is not None]
    assert se_blocks and all(b.se.gate == "hard_sigmoid" for b in se_blocks)
    # SE act is ReLU inside hard-swish blocks: recorded explicitly; inside ReLU blocks it is implicit
    assert {(b.act, b.se.act) for b in se_blocks} == {("relu", None), ("hard_swish", "relu")}
    assert a.blocks[-1] == ConvBlock(out_ch=960, kernel=1, stride=1, act="hard_swish")
    assert (a.head.style, a.head.hidden, a.head.act, a.head.bias) == ("pool_conv", 1280, "hard_swish", True)

    b0 = from_timm("efficientnet_b0")
    assert (b0.head.style, b0.head.hidden, b0.head.act) == ("conv_pool", 1280, "swish")
    assert all(b.se.gate == "sigmoid" and b.se.act is None for b in b0.blocks if b.se is not None)

    lc = from_timm("lcnet_050")  # DS blocks with an act after the pw conv, no residual
    assert all(isinstance(b, DSConvBlock) and b.pw_act for b in lc.blocks)
    assert any(b.noskip for b in lc.blocks)

    es = from_timm("efficientnet_es")
    assert any(isinstance(b, FusedMBConvBlock) for b in es.blocks)


def test_overrides() -> None:
    a = from_timm("efficientnet_lite0", resolution=96, num_classes=10, in_chans=1)
    assert (a.resolution, a.head.num_classes, a.in_chans) == (96, 10, 1)
    assert from_timm("tinynet_e").resolution == 106  # pretrained_cfg input_size
    m = timm.create_model("mnasnet_100", num_classes=7)
    assert from_timm(m).head.num_classes == 7
    assert from_timm(m, num_classes=3, resolution=128).head.num_classes == 3


def test_minimal_variant_converts_with_pytorch_padding() -> None:
    # timm only registers the *_minimal MobileNetV3s as tf_* (TF 'same' padding, TF BN eps);
    # built with PyTorch padding and BN eps they are representable.
    with pytest.raises(UnsupportedModelError, match="Conv2dSame"):
        from_timm("tf_mobilenetv3_small_minimal_100")
    model = timm.create_model("tf_mobilenetv3_small_minimal_100", pad_type="", bn_eps=1e-5).eval()
    _randomise_bn(model)
    arch = from_timm(model, resolution=64)
    assert all(b.se is None for b in arch.blocks if isinstance(b, (DSConvBlock, MBConvBlock)))
    net = build(arch).eval()
    load_timm_weights(net, model)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert (net(x) - model(x)).abs().max().item() <= 1e-4


def test_load_weights_refuses_a_mismatch() -> None:
    model = timm.create_model("mobilenetv2_035")
    net10 = build(from_timm(model, num_classes=10))
    with pytest.raises(ValueError, match=r"shape mismatch.*classifier\.weight"):
        load_timm_weights(net10, model)
    other = build(from_timm("mobilenetv2_050"))
    with pytest.raises(ValueError, match="shape mismatch"):
        load_timm_weights(other, model)
    deeper = build(from_timm("mobilenetv3_large_100"))
    with pytest.raises(ValueError, match="missing in the timm model|not in the ArchNet"):
        load_timm_weights(deeper, timm.create_model("mobilenetv3_small_050"))


def test_key_map() -> None:
    model = timm.create_model("mobilenetv3_small_050")
    km = timm_key_map(model)
    assert km["conv_stem.weight"] == "stem.conv.weight"
    assert km["bn1.running_var"] == "stem.bn1.running_var"
    assert km["blocks.0.0.conv_dw.weight"] == "blocks.0.conv_dw.weight"
    assert km["blocks.1.1.conv_pw.weight"] == "blocks.2.conv_pw.weight"
    assert km["conv_head.bias"] == "head.conv_head.bias"
    assert km["classifier.weight"] == "head.classifier.weight"


@pytest.mark.parametrize(
    ("name", "kwargs", "pattern"),
    [
        ("resnet18", {}, r"resnet18: is a ResNet .*not a timm EfficientNet-family model"),
        (
            "efficientnet_cc_b0_4e",
            {},
            r"efficientnet_cc_b0_4e: block blocks\.\d+\.\d+ is CondConvResidual; supported: ",
        ),
        ("mixnet_s", {}, r"mixnet_s: blocks\.\d+\.\d+\.conv_\w+ is MixedConv2d \(mixed kernel sizes\)"),
        ("mobilenetv4_conv_small", {}, r"block blocks\.\d+\.\d+ is UniversalInvertedResidual"),
        ("efficientnet_b0_gn", {}, r"bn1 is GroupNormAct; only BatchNorm"),
        ("efficientnet_blur_b0", {}, r"\.aa is BlurPool2d \(anti-aliased downsampling\)"),
        ("efficientnet_x_b3", {}, r"space-to-depth"),
        ("tf_efficientnet_b0", {}, r"conv_stem is Conv2dSame \(TF 'same' / dynamic padding\)"),
        ("mobilenetv3_rw", {}, r"BatchNorm eps=0\.001"),
        ("efficientnet_b0", {"output_stride": 16}, r"conv_dw has dilation \(2, 2\)"),
        ("efficientnet_b0", {"global_pool": "max"}, r"global_pool is 'max' pooling; only global average"),
        ("mobilenetv3_small_050", {"num_classes": 0}, r"classifier is absent \(num_classes=0\)"),
    ],
)
def test_unsupported(name: str, kwargs: dict, pattern: str) -> None:
    with torch.device("meta"):
        model = timm.create_model(name, **kwargs)
    with pytest.raises(UnsupportedModelError, match=pattern) as info:
        from_timm(model)
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith(name.split(".")[0])


def test_unsupported_by_name() -> None:
    with pytest.raises(UnsupportedModelError, match="resnet18: is a ResNet"):
        from_timm("resnet18")
    with pytest.raises(UnsupportedModelError, match="CondConvResidual"):
        from_timm("efficientnet_cc_b0_4e")


# --------------------------------------------------------------------------------------------
# sweep: every non-tf_ model of timm's EfficientNet / MobileNetV3 modules (a superset of
# SUPPORTED_FAMILIES) either converts exactly (same state-dict keys and shapes, hence the same
# parameter count) or raises UnsupportedModelError.  Models are created on the meta device
# (structure only), which keeps the ~110 models to a few seconds.

_SWEEP = sorted(
    n
    for n in set(timm.list_models(module="efficientnet")) | set(timm.list_models(module="mobilenetv3"))
    if not n.startswith("tf_")
)
_FAMILY = set(family_model_names())

# members of the families that are refused, with why (anything else in the families must convert)
_FAMILY_REFUSED = {
    r"efficientnet_b\d_g\d+_gn|efficientnet_b\d_gn": "GroupNormAct",
    r"efficientnet_b\d_g16_evos": "groups=",
    r"efficientnet_b\d_pruned": "Conv2dSame",
    r"efficientnet_blur_b\d": "BlurPool2d",
    r"mobilenetv3_rw": "eps=0.001",
}


def test_family_names_cover_the_brief() -> None:
    assert not any(n.startswith("tf_") for n in _FAMILY)
    for pat in SUPPORTED_FAMILIES:
        assert any(re.fullmatch(pat.replace("*", ".*"), n) for n in _FAMILY), pat
    assert _FAMILY <= set(_SWEEP)


@pytest.mark.slow
@pytest.mark.parametrize("name", _SWEEP)
def test_sweep_converts_or_refuses(name: str) -> None:
    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False)
    refused = next((why for pat, why in _FAMILY_REFUSED.items() if re.fullmatch(pat, name)), None)
    try:
        arch = from_timm(model)
    except UnsupportedModelError as e:
        assert str(e).startswith(f"{name}: ")
        if name in _FAMILY:
            assert refused is not None and refused in str(e), f"family member refused: {e}"
        return
    assert refused is None, f"{name} was expected to be refused ({refused})"
    assert Arch.from_json(arch.to_json()) == arch
    with torch.device("meta"):
        net = build(arch)
    km = timm_key_map(model)
    src = {km[k]: tuple(v.shape) for k, v in model.state_dict().items()}
    dst = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    assert src == dst
    assert _n_params(net) == _n_params(model)


def test_directly_built_model_without_cfg_and_head_conv() -> None:
    from timm.models._efficientnet_builder import decode_arch_def
    from timm.models.efficientnet import EfficientNet

    arch_def = [["ds_r1_k3_s1_e1_c16_se0.25"], ["ir_r2_k3_s2_e6_c24_se0.25"], ["er_r1_k3_s2_e4_c32"]]
    model = EfficientNet(decode_arch_def(arch_def), num_features=0, act_layer=nn.SiLU, num_classes=5).eval()
    _randomise_bn(model)
    with pytest.raises(ValueError, match="no pretrained_cfg input_size; pass resolution="):
        from_timm(model)
    arch = from_timm(model, resolution=64)
    assert (arch.head.style, arch.head.hidden, arch.head.num_classes) == ("pool", 0, 5)
    net = build(arch).eval()
    load_timm_weights(net, model)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert (net(x) - model(x)).abs().max().item() <= 1e-4
