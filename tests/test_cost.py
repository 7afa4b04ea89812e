"""nas.cost against counted forward passes of the modules nas.builder makes.

Parameters: ``sum(p.numel() for p in module.parameters())``.  MACs: ``FlopCounterMode`` total
flops / 2.  Peak activations: the definition in nas/cost.py, rebuilt from tensor sizes recorded
by forward hooks on the built network.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from timm.layers import Attention2d, SelectAdaptivePool2d
from timm.models._efficientnet_blocks import MobileAttention, SqueezeExcite
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from nas.arch import (
    SE,
    Arch,
    AttentionBlock,
    Block,
    BlockKey,
    ConvBlock,
    DSConvBlock,
    FusedMBConvBlock,
    Head,
    MBConvBlock,
)
from nas.builder import AttentionLayer, build, build_layer
from nas.cost import ArchCost, Cost, arch_cost, block_cost
from nas.space import list_spaces, load_space

torch.set_num_threads(1)

# --------------------------------------------------------------------------------------------
# architectures


def _conv_arch(head: Head | None = None, resolution: int = 33) -> Arch:
    """Every conv-type block kind: SE on/off, ds pw_act / noskip, conv skip, fused, strides."""
    blocks = (
        DSConvBlock(16, 3, 1, "relu", se=SE(8), pw_act=True),  # residual + SE
        DSConvBlock(24, 5, 2, "relu6"),
        DSConvBlock(24, 3, 1, "relu", se=SE(8, "hard_sigmoid", "relu"), noskip=True, pw_act=True),
        ConvBlock(24, 3, 1, "swish", skip=True),
        MBConvBlock(24, 72, 3, 1, "relu", se=SE(24, "hard_sigmoid", "relu")),  # residual + SE
        MBConvBlock(40, 96, 5, 2, "hard_swish"),
        MBConvBlock(40, 120, 3, 1, "swish", se=SE(32), noskip=True),
        FusedMBConvBlock(40, 80, 3, 1, "swish", se=SE(16)),  # residual + SE
        FusedMBConvBlock(48, 160, 3, 2, "relu"),
        FusedMBConvBlock(48, 96, 5, 1, "gelu"),  # residual, no SE
        ConvBlock(64, 1, 1, "gelu"),
    )
    head = head or Head(10, 64, "conv_pool", "swish")
    return Arch(3, resolution, ConvBlock(16, 3, 2, "hard_swish"), blocks, head, name="conv_kinds")


def _attn_arch(head: Head | None = None, resolution: int = 30) -> Arch:
    """Attention with and without input projection (1x1 for in != out, 3x3 for stride 2)."""
    blocks = (
        MBConvBlock(32, 64, 3, 2, "swish"),
        AttentionBlock(32, heads=2, mlp_ratio=2.0),  # no projection
        AttentionBlock(48, heads=3, mlp_ratio=1.5, proj_act="hard_swish"),  # 1x1 projection
        AttentionBlock(64, heads=4, mlp_ratio=3.0, stride=2, act="swish"),  # 3x3 s2 projection
        AttentionBlock(64, heads=8, mlp_ratio=0.5, stride=2),  # in == out, stride 2: projection
    )
    head = head or Head(7, 96, "pool_conv", "hard_swish", bias=False)
    return Arch(3, resolution, ConvBlock(16, 3, 2, "swish"), blocks, head, name="attn_kinds")


def _small_arch() -> Arch:
    blocks = (ConvBlock(8, 3, 1, "relu", skip=True), AttentionBlock(16, heads=2, mlp_ratio=4.0))
    return Arch(1, 12, ConvBlock(8, 5, 1, "relu", skip=True), blocks, Head(5), name="small")


HEADS = {
    "conv_pool": Head(10, 64, "conv_pool", "swish"),
    "pool_conv": Head(10, 96, "pool_conv", "hard_swish"),
    "pool_conv_nobias": Head(10, 96, "pool_conv", "relu", bias=False),
    "pool": Head(10),
}


def _space_archs() -> list[tuple[str, Arch]]:
    out = []
    for name in list_spaces():
        space = load_space(name)
        for seed in range(3):
            arch = space.random(seed)
            if arch.resolution > 64:
                arch = arch.with_resolution(64)
            out.append((f"{name}-{seed}", arch))
    return out


HAND_ARCHS = [
    *[(f"conv-{h}", _conv_arch(head)) for h, head in HEADS.items()],
    *[(f"attn-{h}", _attn_arch(head)) for h, head in HEADS.items()],
    ("attn-even", _attn_arch(resolution=32)),
    ("small", _small_arch()),
]
ALL_ARCHS = HAND_ARCHS + _space_archs()
IDS = [n for n, _ in ALL_ARCHS]

# --------------------------------------------------------------------------------------------
# counted forward pass


def _cpu_sdpa_flops(q_shape, k_shape, v_shape, *args, out_shape=None, **kwargs) -> int:
    """FlopCounterMode has no formula for the CPU flash-attention op: Q@K^T and attn@V."""
    b, h, n, d = q_shape
    return 2 * b * h * n * k_shape[2] * d + 2 * b * h * n * k_shape[2] * v_shape[3]


CPU_SDPA = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flops}


def _set_fused_attn(model: nn.Module, fused: bool) -> None:
    for m in model.modules():
        if isinstance(m, Attention2d):
            m.fused_attn = fused


def _flops(module: nn.Module, x: torch.Tensor, **kw) -> tuple[int, torch.Tensor]:
    with torch.no_grad(), FlopCounterMode(display=False, **kw) as fc:
        y = module(x)
    total = fc.get_total_flops()
    assert total % 2 == 0
    return total // 2, y


class PeakRecorder:
    """Live bytes of each primitive op (nas.cost's definition), from forward hooks.

    An op's live set is its input + its output + every residual shortcut currently held that is
    not the op's own input.  Ops: convs outside squeeze-excite, the SqueezeExcite module, global
    pooling, Linear, and the attention core (qkv tensor + score matrix + its output, recorded on
    the explicit, non-fused attention path).
    """

    def __init__(self, model: nn.Module) -> None:
        self.ops: list[int] = []
        self.shortcuts: list[torch.Tensor] = []
        self.handles = []
        self._qkv = self._scores = 0
        se_convs = {id(c) for m in model.modules() if isinstance(m, SqueezeExcite) for c in m.modules()}
        for m in model.modules():
            if isinstance(m, Attention2d):
                self._hook(m.qkv, post=self._on_qkv)
                self._hook(m.attn_drop, post=self._on_scores)
                self._hook(m.proj, pre=self._on_core)
            if isinstance(m, (SqueezeExcite, SelectAdaptivePool2d, nn.Linear)) or (
                isinstance(m, nn.Conv2d) and id(m) not in se_convs
            ):
                self._hook(m, post=self._on_op)
            if getattr(m, "has_skip", False) is True:  # timm blocks, MobileAttention
                self._hook(m, pre=self._push, post=self._pop)
            if isinstance(m, AttentionLayer):  # x + mlp(norm2(x))
                self._hook(m.norm2, pre=self._push)
                self._hook(m.mlp, post=self._pop)

    def _hook(self, m: nn.Module, pre=None, post=None) -> None:
        if pre is not None:
            self.handles.append(m.register_forward_pre_hook(pre))
        if post is not None:
            self.handles.append(m.register_forward_hook(post))

    @staticmethod
    def _bytes(t: torch.Tensor) -> int:
        return t.numel() * t.element_size()

    def _held(self, inp: torch.Tensor) -> int:
        return sum(self._bytes(s) for s in self.shortcuts if s is not inp)

    def _push(self, m, args) -> None:
        self.shortcuts.append(args[0])

    def _pop(self, m, args, out) -> None:
        self.shortcuts.pop()

    def _on_op(self, m, args, out) -> None:
        self.ops.append(self._bytes(args[0]) + self._bytes(out) + self._held(args[0]))

    def _on_qkv(self, m, args, out) -> None:
        self._qkv = self._bytes(out)

    def _on_scores(self, m, args, out) -> None:
        self._scores = self._bytes(out)

    def _on_core(self, m, args) -> None:
        assert self._qkv and self._scores, "attention must run on the explicit (non-fused) path"
        self.ops.append(self._qkv + self._scores + self._bytes(args[0]) + self._held(args[0]))
        self._qkv = self._scores = 0

    def take(self) -> int:
        assert not self.shortcuts
        peak, self.ops = max(self.ops), []
        return peak

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def _n_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


# --------------------------------------------------------------------------------------------
# per-layer and per-network agreement


@pytest.mark.parametrize("arch", [a for _, a in ALL_ARCHS], ids=IDS)
def test_layers_match_counted_forward(arch: Arch) -> None:
    torch.manual_seed(0)
    model = build(arch).eval()
    _set_fused_attn(model, False)  # explicit matmuls: the score matrix is a real tensor
    rec = PeakRecorder(model)
    cost = arch_cost(arch)
    keys = arch.keys()
    layers = [model.stem, *model.blocks, model.head]
    assert [k for k, _ in cost.layers] == keys and len(layers) == len(keys)
    x = torch.randn(1, arch.in_chans, arch.resolution, arch.resolution)
    try:
        for key, (_, c), layer in zip(keys, cost.layers, layers):
            assert x.shape[1:] == key.in_shape
            macs, y = _flops(layer, x)
            got = (_n_params(layer), macs, rec.take())
            want = (c.params, c.macs, c.peak_activation_bytes)
            assert got == want, f"{key}: counted (params, macs, peak bytes) {got}, analytic {want}"
            assert block_cost(key) == c
            if key.block is not arch.head:
                assert y.shape[1:] == key.out_shape
            x = y
    finally:
        rec.close()
    assert y.shape == (1, arch.head.num_classes)

    # whole network, timm's default fused attention; the CPU SDPA kernel needs a formula
    _set_fused_attn(model, True)
    x = torch.randn(1, arch.in_chans, arch.resolution, arch.resolution)
    macs, _ = _flops(model, x, custom_mapping=CPU_SDPA)
    assert (_n_params(model), macs) == (cost.params, cost.macs)
    assert cost.peak_activation_bytes == max(c.peak_activation_bytes for _, c in cost.layers)


@pytest.mark.parametrize("name", list_spaces())
def test_unique_blocks_params_and_macs(name: str) -> None:
    """Every block a space can produce, built standalone (params exact; MACs on a sample)."""
    space = load_space(name)
    r = min(space.resolution, 64)
    keys = space.unique_blocks(r)
    for i, key in enumerate(keys):
        m = build_layer(key).eval()
        c = block_cost(key)
        assert _n_params(m) == c.params, str(key)
        if i % 7 == 0 or isinstance(key.block, (AttentionBlock, Head)):
            macs, _ = _flops(m, torch.randn(1, *key.in_shape), custom_mapping=CPU_SDPA)
            assert macs == c.macs, str(key)


def test_attention_macs_formula() -> None:
    """The attention matmuls are N*N*E each; the fused and explicit paths agree."""
    b = AttentionBlock(64, heads=4, mlp_ratio=2.0)
    key = BlockKey(b, 64, 5, 7)
    n, e = 35, 64
    c = block_cost(key)
    assert c.macs == 4 * e * e * n + 2 * n * n * e + 2 * e * 128 * n
    m = build_layer(key).eval()
    assert isinstance(m.attn, MobileAttention) and isinstance(m.proj, nn.Identity)
    x = torch.randn(1, 64, 5, 7)
    fused, _ = _flops(m, x, custom_mapping=CPU_SDPA)
    _set_fused_attn(m, False)
    explicit, _ = _flops(m, x)
    assert fused == explicit == c.macs


# --------------------------------------------------------------------------------------------
# hand-checked numbers and API


def test_hand_counted_ir_block() -> None:
    # 1x1 16->64 (+BN), 3x3 dw s1 (+BN), SE 64->16->64 (biases), 1x1 64->16 (+BN); residual
    b = MBConvBlock(16, 64, 3, 1, "relu", se=SE(16))
    c = block_cost(BlockKey(b, 16, 8, 8), bytes_per_param=1, bytes_per_act=2)
    params = 16 * 64 + 128 + 64 * 9 + 128 + (64 * 16 + 16 + 16 * 64 + 64) + 64 * 16 + 32
    macs = 16 * 64 * 64 + 64 * 9 * 64 + 2 * 64 * 16 + 64 * 16 * 64
    x, m = 16 * 64, 64 * 64
    peak = 2 * max(x + m, m + m + x, 2 * m + x, m + x + x)
    # expand (x -> m), dw (m -> m), SE (read m, write m, + pooled-gate read m), project (m -> x), add
    moved = params + 2 * ((x + m) + (m + m) + 3 * m + (m + x) + (x + 2 * x))
    assert c == Cost(params, macs, params, peak, moved, 5)


def test_cost_addition_and_dict() -> None:
    a, b = Cost(1, 2, 4, 10, 20, 1), Cost(3, 5, 12, 7, 30, 2)
    assert a + b == Cost(4, 7, 16, 10, 50, 3)
    assert sum([a, b]) == a + b
    assert sum([a, b], Cost.zero()) == a + b
    assert a.to_dict() == {
        "params": 1, "macs": 2, "weight_bytes": 4, "peak_activation_bytes": 10, "bytes_moved": 20, "ops": 1,
    }


def test_arch_cost_totals_and_options() -> None:
    arch = _attn_arch()
    cost = arch_cost(arch)
    assert isinstance(cost, ArchCost)
    assert cost.total == sum(c for _, c in cost.layers)
    assert cost.weight_bytes == 4 * cost.params
    half = arch_cost(arch, bytes_per_param=2, bytes_per_act=1)
    assert (half.params, half.macs) == (cost.params, cost.macs)
    assert half.weight_bytes == 2 * cost.params and 4 * half.peak_activation_bytes == cost.peak_activation_bytes
    assert arch_cost(arch, resolution=64) == arch_cost(arch.with_resolution(64))
    assert arch_cost(arch, resolution=64).macs > cost.macs
    d = cost.to_dict(layers=True)
    assert d["params"] == cost.params and len(d["layers"]) == len(arch.keys())
    assert str(arch.keys()[cost.peak_layer]) in cost.summary()
    assert set(cost.to_dict()) == {"params", "macs", "weight_bytes", "peak_activation_bytes", "bytes_moved", "ops"}
    # bytes moved: weights plus activation traffic, which scales with the bytes per element
    assert cost.bytes_moved > cost.weight_bytes
    assert half.bytes_moved - half.weight_bytes == (cost.bytes_moved - cost.weight_bytes) // 4


def test_unknown_block_kind_raises() -> None:
    @dataclasses.dataclass(frozen=True)
    class Mystery(Block):
        out_ch: int = 4
        kind = "mystery"

    with pytest.raises(ValueError, match="mystery"):
        block_cost(BlockKey(Mystery(), 3, 8, 8))
