"""Analytic costs of an ``Arch``: parameters, MACs, weight bytes and peak activation memory.

Everything here is computed from the spec alone (pure Python integers, no torch, no forward
pass), so it is cheap enough to call for thousands of sampled architectures.  The numbers are
exact for the modules ``nas.builder`` makes from timm's blocks; ``tests/test_cost.py`` checks them
against the built modules.

Parameters
    Every ``nn.Parameter`` of the built module: conv and linear weights, biases where timm
    creates them (SqueezeExcite convs, ``ConvMlp`` convs, the ``pool_conv`` head conv when
    ``Head.bias``, the classifier ``Linear``; ``create_conv2d`` convs and timm's ``Attention2d``
    as built by ``MobileAttention`` have none) and the BatchNorm affine weight and bias.
    BatchNorm running statistics are buffers and are not counted.

MACs (multiply-accumulates, batch 1)
    Convolutions (``C_out * C_in / groups * K * K * H_out * W_out``, bias adds not counted),
    linear layers (``in * out``), the squeeze-excite 1x1 convs on the pooled 1x1 map
    (``2 * C * C_se``), and the two matmuls of self-attention, ``Q @ K^T`` and ``attn @ V``,
    ``N * N * E`` each for ``N = H * W`` tokens and embed dim ``E``.  Not counted: BatchNorm,
    activations, pooling, residual adds, softmax, the attention scale and the SE gating
    multiply.  This is exactly ``torch.utils.flop_counter.FlopCounterMode`` total flops / 2 on
    the built module in eval mode, which counts ``aten.convolution``, ``aten.mm/addmm/bmm`` and
    the CUDA scaled-dot-product-attention kernels as ``2 * MACs``.  One caveat: on CPU,
    ``F.scaled_dot_product_attention`` (timm's fused-attention path) runs
    ``aten._scaled_dot_product_flash_attention_for_cpu``, which the stock counter has no formula
    for and counts as zero; register ``torch.utils.flop_counter.sdpa_flop`` for it
    (``custom_mapping``) or set ``Attention2d.fused_attn = False`` (explicit ``bmm``) to see the
    attention matmuls counted.

Weight bytes
    ``params * bytes_per_param``.

Bytes moved (batch 1; the memory side of the roofline estimate)
    Weight bytes + the activation bytes every primitive op reads and writes: each conv (with
    its BN and activation) reads its input and writes its output, the SE branch reads and
    writes its tensor, a residual add reads two tensors and writes one, attention moves its
    qkv tensor, the score matrix (written, then read by softmax and the second matmul) and its
    output, a pool reads the map and writes the vector.  ``ops`` counts those primitive ops
    (the per-op overhead term of the roofline).

Peak activation bytes (batch 1, ``bytes_per_act`` bytes per element)
    A layer is executed as a sequence of primitive ops; each op's live set is

    * its input tensor + its output tensor, plus
    * the residual shortcut, when the enclosing block has a residual and the shortcut is not
      the op's own input (it must stay alive until the add).

    The ops are: every convolution together with its BatchNorm and activation (one op), the
    squeeze-excite branch as one op (input + gated output; its pooled C-vectors are ignored),
    the attention core (the ``qkv`` tensor ``3 E N`` + the attention-score matrix
    ``heads * N * N`` + its ``E N`` output, i.e. the explicit, non-flash formulation), the
    global average pool, and the classifier ``Linear``.  BatchNorms that are not fused into a
    conv (the pre-norms of the attention layer), activations, dropout and residual adds are
    treated as in place and are not ops of their own.  A layer's peak is the maximum over its
    ops; the network's peak is the maximum over its layers (only one layer runs at a time and
    its input is the previous layer's output).

    Per kind (element counts; ``X`` block input, ``Y`` block output, ``s = X`` when the block
    has a residual, else 0)::

        conv  : X + Y                                    (the shortcut is the conv input)
        ds    : X + D,  [SE: 2D + s],  D + Y + s          D = C_in  x H_out x W_out
        ir    : X + M1,  M1 + M2 + s,  [SE: 2 M2 + s],  M2 + Y + s
                                                          M1 = mid x H x W, M2 = mid x H_out x W_out
        fused : X + M,  [SE: 2M + s],  M + Y + s           M = mid x H_out x W_out
        attn  : [proj: X + A],  qkv: A + 3A + A,  core: 3A + heads*N*N + A + A,
                out-proj: A + A + A,  fc1: A + Hd + A,  fc2: Hd + A + A
                                                          A = E x N, Hd = mlp_hidden x N
        head  : conv_pool: X + F*HW, pool: F*HW + F, linear: F + classes
                pool_conv: pool: X + C, conv: C + F, linear: F + classes
                pool:      pool: X + C, linear: C + classes

    ``tests/test_cost.py`` reproduces this from forward hooks on the built network (recorded
    tensor sizes, explicit attention path).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nas.arch import (
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
from nas.registry import Registry

__all__ = [
    "ArchCost",
    "Cost",
    "arch_cost",
    "block_cost",
    "register_cost",
]


@dataclass(frozen=True)
class Cost:
    """Costs of one layer, or of several layers combined with ``+``.

    ``a + b`` sums every field but ``peak_activation_bytes``, of which it takes the maximum
    (layers run one after another), so ``sum(costs)`` gives a network's totals.

    Attributes:
        params: Parameters (the module docs say which).
        macs: Multiply-accumulates at batch 1.
        weight_bytes: ``params * bytes_per_param``.
        peak_activation_bytes: The largest live activation set at batch 1.
        bytes_moved: Weight bytes + the activation bytes the primitive ops read and write.
        ops: Primitive ops (the roofline's per-op overhead term).
    """

    params: int
    macs: int
    weight_bytes: int
    peak_activation_bytes: int
    bytes_moved: int = 0
    ops: int = 0

    @classmethod
    def zero(cls) -> Cost:
        """The cost of nothing: the start of a sum."""
        return cls(0, 0, 0, 0)

    def __add__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(
            self.params + other.params,
            self.macs + other.macs,
            self.weight_bytes + other.weight_bytes,
            max(self.peak_activation_bytes, other.peak_activation_bytes),
            self.bytes_moved + other.bytes_moved,
            self.ops + other.ops,
        )

    def __radd__(self, other: Any) -> Cost:
        if other == 0:  # sum() starts from 0
            return self
        if not isinstance(other, Cost):
            return NotImplemented
        return other.__add__(self)

    def to_dict(self) -> dict[str, int]:
        """Every field by name, as JSON-ready integers."""
        return {
            "params": self.params,
            "macs": self.macs,
            "weight_bytes": self.weight_bytes,
            "peak_activation_bytes": self.peak_activation_bytes,
            "bytes_moved": self.bytes_moved,
            "ops": self.ops,
        }


# --------------------------------------------------------------------------------------------
# per-kind counting.  Each counter returns (params, macs, peak activation *elements*,
# activation elements moved, primitive ops).

_Counts = tuple[int, int, int, int, int]
_COUNTERS: Registry[Callable[[Any, int, int, int], _Counts]] = Registry("cost model")  # by block kind


def register_cost(cls: type[Block]):
    """Register the cost counter of a block class (a decorator).

    The counter is ``fn(block, in_ch, in_h, in_w) -> (params, macs, peak, moved, ops)``; ``peak``
    and ``moved`` are activation element counts (see the module docs).  Subclasses of ``cls`` use
    it too unless they register their own.

    Args:
        cls: The block class; the counter is registered under its ``kind``.

    Returns:
        The decorator, which returns the counter unchanged.

    Raises:
        ValueError: The kind has a counter already (when the decorator is applied).
    """

    def deco(fn: Callable[[Any, int, int, int], _Counts]) -> Callable[[Any, int, int, int], _Counts]:
        _COUNTERS.add(cls.kind, fn)
        return fn

    return deco


def _out_hw(h: int, w: int, k: int, s: int) -> tuple[int, int]:
    pad = ((s - 1) + (k - 1)) // 2  # timm's symmetric static padding (as Block.out_shape)
    return (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1


def _se(se, ch: int) -> tuple[int, int]:
    """SqueezeExcite on ``ch`` channels: (params, macs); both 1x1 convs have a bias."""
    if se is None:
        return 0, 0
    r = se.channels
    return 2 * ch * r + r + ch, 2 * ch * r


@register_cost(ConvBlock)
def _conv_cost(b: ConvBlock, c: int, h: int, w: int) -> _Counts:
    ho, wo = _out_hw(h, w, b.kernel, b.stride)
    k2 = b.kernel * b.kernel
    params = c * b.out_ch * k2 + 2 * b.out_ch
    macs = c * b.out_ch * k2 * ho * wo
    x, y = c * h * w, b.out_ch * ho * wo
    res = b.has_skip(c)
    return params, macs, x + y, x + y + (x + 2 * y if res else 0), 1 + res


@register_cost(DSConvBlock)
def _ds_cost(b: DSConvBlock, c: int, h: int, w: int) -> _Counts:
    ho, wo = _out_hw(h, w, b.kernel, b.stride)
    k2 = b.kernel * b.kernel
    se_p, se_m = _se(b.se, c)
    params = c * k2 + 2 * c + se_p + c * b.out_ch + 2 * b.out_ch
    macs = c * k2 * ho * wo + se_m + c * b.out_ch * ho * wo
    x, d, y = c * h * w, c * ho * wo, b.out_ch * ho * wo
    s = x if b.has_skip(c) else 0
    peak = max(x + d, d + y + s)
    moved, ops = (x + d) + (d + y) + (x + 2 * y if s else 0), 2 + bool(s)
    if b.se is not None:
        peak = max(peak, 2 * d + s)
        moved, ops = moved + 3 * d, ops + 1
    return params, macs, peak, moved, ops


@register_cost(MBConvBlock)
def _ir_cost(b: MBConvBlock, c: int, h: int, w: int) -> _Counts:
    ho, wo = _out_hw(h, w, b.kernel, b.stride)
    m, k2 = b.mid_ch, b.kernel * b.kernel
    se_p, se_m = _se(b.se, m)
    params = c * m + 2 * m + m * k2 + 2 * m + se_p + m * b.out_ch + 2 * b.out_ch
    macs = c * m * h * w + m * k2 * ho * wo + se_m + m * b.out_ch * ho * wo
    x, m1, m2, y = c * h * w, m * h * w, m * ho * wo, b.out_ch * ho * wo
    s = x if b.has_skip(c) else 0
    peak = max(x + m1, m1 + m2 + s, m2 + y + s)
    moved, ops = (x + m1) + (m1 + m2) + (m2 + y) + (x + 2 * y if s else 0), 3 + bool(s)
    if b.se is not None:
        peak = max(peak, 2 * m2 + s)
        moved, ops = moved + 3 * m2, ops + 1
    return params, macs, peak, moved, ops


@register_cost(FusedMBConvBlock)
def _fused_cost(b: FusedMBConvBlock, c: int, h: int, w: int) -> _Counts:
    ho, wo = _out_hw(h, w, b.kernel, b.stride)
    m, k2 = b.mid_ch, b.kernel * b.kernel
    se_p, se_m = _se(b.se, m)
    params = c * m * k2 + 2 * m + se_p + m * b.out_ch + 2 * b.out_ch
    macs = c * m * k2 * ho * wo + se_m + m * b.out_ch * ho * wo
    x, mm, y = c * h * w, m * ho * wo, b.out_ch * ho * wo
    s = x if b.has_skip(c) else 0
    peak = max(x + mm, mm + y + s)
    moved, ops = (x + mm) + (mm + y) + (x + 2 * y if s else 0), 2 + bool(s)
    if b.se is not None:
        peak = max(peak, 2 * mm + s)
        moved, ops = moved + 3 * mm, ops + 1
    return params, macs, peak, moved, ops


@register_cost(AttentionBlock)
def _attn_cost(b: AttentionBlock, c: int, h: int, w: int) -> _Counts:
    e, hid = b.out_ch, b.mlp_hidden
    _, ho, wo = b.out_shape((c, h, w))
    n = ho * wo
    params = macs = peak = moved = ops = 0
    a = e * n
    if b.needs_proj(c):  # ConvNormAct: conv (no bias) + BN
        k2 = b.proj_kernel * b.proj_kernel
        params += c * e * k2 + 2 * e
        macs += c * e * k2 * n
        peak = c * h * w + a
        moved, ops = c * h * w + a, 1
    # MobileAttention: BN, Attention2d (qkv + proj 1x1 convs, no bias), residual
    params += 2 * e + 3 * e * e + e * e
    macs += 3 * e * e * n + 2 * n * n * e + e * e * n
    # BN + ConvMlp (1x1 convs with bias), residual
    params += 2 * e + e * hid + hid + hid * e + e
    macs += 2 * e * hid * n
    peak = max(
        peak,
        5 * a,  # qkv conv: normed input + qkv + shortcut
        5 * a + b.heads * n * n,  # attention core: qkv + scores + output + shortcut
        2 * a + hid * n,  # fc1 / fc2: A + hidden + shortcut
    )
    scores = b.heads * n * n
    # norm, qkv, QK^T (+ scores), softmax, attn@V, out-proj, add, norm2, fc1, fc2, add
    moved += 2 * a + 4 * a + (2 * a + scores) + 2 * scores + (scores + 2 * a) + 2 * a + 3 * a
    moved += 2 * a + (a + hid * n) + (hid * n + a) + 3 * a
    return params, macs, peak, moved, ops + 11


@register_cost(Head)
def _head_cost(b: Head, c: int, h: int, w: int) -> _Counts:
    hw, nc, f = h * w, b.num_classes, b.hidden
    x = c * hw
    if b.style == "conv_pool":  # conv (no bias) + BN + act, pool, linear
        params = c * f + 2 * f + f * nc + nc
        macs = c * f * hw + f * nc
        peak = max(x + f * hw, f * hw + f, f + nc)
        moved = (x + f * hw) + (f * hw + f) + (f + nc)
    elif b.style == "pool_conv":  # pool, conv (+bias) + act, linear
        params = c * f + (f if b.bias else 0) + f * nc + nc
        macs = c * f + f * nc
        peak = max(x + c, c + f, f + nc)
        moved = (x + c) + (c + f) + (f + nc)
    else:  # pool, linear
        params = c * nc + nc
        macs = c * nc
        peak = max(x + c, c + nc)
        moved = (x + c) + (c + nc)
        return params, macs, peak, moved, 2
    return params, macs, peak, moved, 3


def _counter(block: Block) -> Callable[[Any, int, int, int], _Counts]:
    for cls in type(block).__mro__:  # the class's own kind first, then its bases' (a subclass reuses a counter)
        kind = cls.__dict__.get("kind")
        if isinstance(kind, str) and kind in _COUNTERS:
            return _COUNTERS[kind]
    raise ValueError(
        f"no cost model for block kind {block.kind!r} ({type(block).__name__}); known: {', '.join(_COUNTERS.names())}"
    )


def block_cost(key: BlockKey, *, bytes_per_param: int = 4, bytes_per_act: int = 4) -> Cost:
    """The cost of one layer (stem, body block or head) at its input shape.

    Args:
        key: The layer and its input shape.
        bytes_per_param: Bytes of one weight (4: fp32, 1: int8).
        bytes_per_act: Bytes of one activation element.

    Returns:
        Its ``Cost`` (the module docs say what each field counts).

    Raises:
        ValueError: No cost model knows the block's kind (the known ones are listed).
    """
    params, macs, peak, moved, ops = _counter(key.block)(key.block, key.in_ch, key.in_h, key.in_w)
    wb = params * bytes_per_param
    return Cost(params, macs, wb, peak * bytes_per_act, wb + moved * bytes_per_act, ops)


# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArchCost:
    """Per-layer costs of an ``Arch`` and their totals; :func:`arch_cost` makes it.

    The totals' fields are properties of their own (``cost.params``, ``cost.macs``, ...).

    Attributes:
        layers: ``(key, cost)`` of the stem, each block and the head, in order.
        total: The network's ``Cost``: sums, and the maximum of ``peak_activation_bytes``.
    """

    layers: tuple[tuple[BlockKey, Cost], ...]
    total: Cost

    @property
    def params(self) -> int:
        return self.total.params

    @property
    def macs(self) -> int:
        return self.total.macs

    @property
    def weight_bytes(self) -> int:
        return self.total.weight_bytes

    @property
    def peak_activation_bytes(self) -> int:
        return self.total.peak_activation_bytes

    @property
    def bytes_moved(self) -> int:
        return self.total.bytes_moved

    @property
    def ops(self) -> int:
        return self.total.ops

    @property
    def peak_layer(self) -> int:
        """Index (into ``layers``) of the first layer reaching the peak activation memory."""
        peaks = [c.peak_activation_bytes for _, c in self.layers]
        return peaks.index(max(peaks))

    def to_dict(self, *, layers: bool = False) -> dict[str, Any]:
        """The totals as JSON-ready data.

        Args:
            layers: Also list every layer's costs under ``layers`` (with its key as a string).

        Returns:
            The totals' fields by name, and ``layers`` when asked for.
        """
        d: dict[str, Any] = self.total.to_dict()
        if layers:
            d["layers"] = [{"key": str(k), **c.to_dict()} for k, c in self.layers]
        return d

    def summary(self) -> str:
        """One line: params, MACs, weight MiB and peak activation MiB, with the layer at the peak."""
        key = self.layers[self.peak_layer][0]
        return (
            f"params {self.params / 1e6:.3f}M, MACs {self.macs / 1e6:.1f}M, "
            f"weights {self.weight_bytes / 2**20:.2f} MiB, peak activations "
            f"{self.peak_activation_bytes / 2**20:.3f} MiB (at {key})"
        )

    def __str__(self) -> str:
        return self.summary()


def arch_cost(
    arch: Arch, *, resolution: int | None = None, bytes_per_param: int = 4, bytes_per_act: int = 4
) -> ArchCost:
    """Count a network's costs from its spec alone (no torch, no forward pass).

    Args:
        arch: The network.
        resolution: The input resolution to count at; None for the Arch's own.
        bytes_per_param: Bytes of one weight (4: fp32, 1: int8).
        bytes_per_act: Bytes of one activation element.

    Returns:
        The ``ArchCost``: every layer's ``Cost``, and totals (params, MACs, weight bytes, bytes
        moved and ops summed over layers; peak activation bytes the maximum over them).

    Raises:
        ValueError: No cost model knows one of the blocks' kinds.

    Example:
        >>> from nas import arch_cost, load_space
        >>> cost = arch_cost(load_space("tiny").smallest())
        >>> cost.params == sum(c.params for _, c in cost.layers)
        True
    """
    layers = []
    params = macs = peak = moved = ops = 0
    for key in arch.keys(resolution):
        b = key.block
        p, m, a, mv, o = _counter(b)(b, key.in_ch, key.in_h, key.in_w)
        wb = p * bytes_per_param
        layers.append((key, Cost(p, m, wb, a * bytes_per_act, wb + mv * bytes_per_act, o)))
        params, macs, peak = params + p, macs + m, max(peak, a)
        moved, ops = moved + wb + mv * bytes_per_act, ops + o
    total = Cost(params, macs, params * bytes_per_param, peak * bytes_per_act, moved, ops)
    return ArchCost(tuple(layers), total)
