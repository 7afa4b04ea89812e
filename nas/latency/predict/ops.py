"""What a layer runs, by kind of kernel: the physical basis of the learned per-block model.

``op_features(key)`` breaks one layer (a ``BlockKey``) into the kernels a runtime launches for
it and sums, per kind of kernel, the work and the memory traffic (``OP_FEATURES`` names the
columns).  A block's latency is close to a non-negative combination of these columns (each
kind of kernel has its own throughput and launch cost), so a linear fit on the table's entries
extrapolates to widths, resolutions and channel counts the table never measured; the gradient
boosting in ``nas.latency.predict.predictor`` only corrects what is left (kernel efficiency that
varies with shape).

``op_features(key, pad=16)`` counts the same work with every channel count rounded up to a
multiple of 16: SIMD kernels work on blocks of channels (onnxruntime's NCHWc layout holds 16
floats a block with AVX-512, 8 with AVX2), so 8 channels can cost as much as 16.  The learned
model sees both and its fit decides how much padding costs on the device.

Multi-op activations (hard-swish, swish, GELU) that end a layer are counted apart
(``trailing_act_elems``): inside a network onnxruntime fuses them into the producing
convolution, but when the layer is measured on its own its output is the graph output and the
activation runs unfused.
"""

from __future__ import annotations

import numpy as np

from nas.arch import BlockKey

__all__ = ["MULTI_OP_ACTS", "OP_FEATURES", "SIMD_CHANNELS", "op_features", "padding_elems", "trailing_act_elems"]

# activations that export as more than one elementwise op when not fused into a convolution
MULTI_OP_ACTS = frozenset({"hard_swish", "swish", "gelu"})

# channels per SIMD block of onnxruntime's NCHWc layout with AVX-512 (16 floats)
SIMD_CHANNELS = 16

OP_FEATURES = (
    "dense_macs",  # k x k convolutions over all input channels (stems, fused-MBConv expansions)
    "dense_out",  # their output elements
    "pw_macs",  # 1x1 convolutions
    "pw_io",  # their input + output elements
    "pw_weights",  # their weights
    "dw_macs",  # depthwise convolutions
    "dw_io",  # their input + output elements
    "multi_act",  # elements through a fused multi-op activation (hard-swish, swish, GELU)
    "eltwise",  # elements of unfused elementwise ops: residual adds, SE scaling
    "pool",  # elements read by global average pools (SE, head)
    "fc_macs",  # fully connected layers (SE excitation, classifier)
    "attn_macs",  # attention matmuls (Q K^T and attention @ V)
    "attn_scores",  # attention score elements (softmax)
    "norm",  # elements through unfused normalisation (attention blocks' BN)
    "trailing_act",  # elements of a multi-op activation that ends the layer (see module docs)
    "boundary",  # elements entering + leaving the layer
    "kernels",  # kernel launches
    "const",  # 1
)
_IDX = {n: i for i, n in enumerate(OP_FEATURES)}
N_OPS = len(OP_FEATURES)


def _out_hw(h: int, k: int, s: int) -> int:
    pad = ((s - 1) + (k - 1)) // 2
    return (h + 2 * pad - k) // s + 1


def _trailing_act(key: BlockKey) -> str | None:
    b = key.block
    if b.kind == "conv" or (b.kind == "ds" and getattr(b, "pw_act", False)):
        return b.act if b.act in MULTI_OP_ACTS else None
    return None


def trailing_act_elems(key: BlockKey) -> float:
    """Millions of output elements of a multi-op activation that ends the layer (else 0)."""
    if _trailing_act(key) is None:
        return 0.0
    c, h, w = key.out_shape
    return c * h * w / 1e6


def padding_elems(key: BlockKey) -> float:
    """Millions of padding elements the layer's depthwise convolutions read and write when its
    channels are rounded up to ``SIMD_CHANNELS`` (0 when they are multiples)."""
    i = _IDX["dw_io"]
    return float(op_features(key, pad=SIMD_CHANNELS)[i] - op_features(key)[i])


class _Counter:
    """Adds one layer's work into its ``OP_FEATURES`` row, operator by operator."""

    def __init__(self, key: BlockKey, pad: int) -> None:
        self.f = np.zeros(N_OPS)
        self.key, self.b, self.pad = key, key.block, pad
        self.multi = getattr(self.b, "act", None) in MULTI_OP_ACTS
        self.c, self.h, self.w = self.P(key.in_ch), key.in_h, key.in_w
        self.out_c = self.P(key.out_shape[0])

    def P(self, ch: int) -> int:
        return -(-ch // self.pad) * self.pad

    def add(self, name: str, v: float) -> None:
        self.f[_IDX[name]] += v

    def conv(self, cin: int, cout: int, k: int, s: int, hh: int, ww: int, *, dw: bool = False,
             fused_act: bool = False) -> tuple[int, int]:
        add = self.add
        ho, wo = _out_hw(hh, k, s), _out_hw(ww, k, s)
        out = cout * ho * wo
        if dw:
            add("dw_macs", cin * k * k * ho * wo)
            add("dw_io", cin * hh * ww + out)
        elif k == 1 and s == 1:
            add("pw_macs", cin * cout * ho * wo)
            add("pw_io", cin * hh * ww + out)
            add("pw_weights", cin * cout)
        else:
            add("dense_macs", cin * cout * k * k * ho * wo)
            add("dense_out", out)
        if fused_act and self.multi:
            add("multi_act", out)
        add("kernels", 1)
        return ho, wo

    def se(self, ch: int, sp: int) -> None:
        if getattr(self.b, "se", None) is None:
            return
        self.add("pool", ch * sp)
        self.add("fc_macs", 2 * ch * self.b.se.channels)
        self.add("eltwise", ch * sp)
        self.add("kernels", 4)

    def skip(self, ho: int, wo: int) -> None:
        if self.b.has_skip(self.key.in_ch):
            self.add("eltwise", self.out_c * ho * wo)
            self.add("kernels", 1)


def _conv_ops(o: _Counter) -> None:
    b, key = o.b, o.key
    # the stem reads the image as it is (no SIMD padding of 1 or 3 input channels)
    ho, wo = o.conv(key.in_ch if key.in_ch <= 4 else o.c, o.out_c, b.kernel, b.stride, o.h, o.w, fused_act=True)
    o.skip(ho, wo)


def _ds_ops(o: _Counter) -> None:
    b, c = o.b, o.c
    ho, wo = o.conv(c, c, b.kernel, b.stride, o.h, o.w, dw=True, fused_act=True)
    o.se(c, ho * wo)
    o.conv(c, o.out_c, 1, 1, ho, wo, fused_act=bool(getattr(b, "pw_act", False)))
    o.skip(ho, wo)


def _mbconv_ops(o: _Counter) -> None:  # ir and fused
    b, c, h, w = o.b, o.c, o.h, o.w
    m = o.P(b.mid_ch)
    if b.kind == "ir":
        o.conv(c, m, 1, 1, h, w, fused_act=True)
        ho, wo = o.conv(m, m, b.kernel, b.stride, h, w, dw=True, fused_act=True)
    else:
        ho, wo = o.conv(c, m, b.kernel, b.stride, h, w, fused_act=True)
    o.se(m, ho * wo)
    o.conv(m, o.out_c, 1, 1, ho, wo)
    o.skip(ho, wo)


def _attn_ops(o: _Counter) -> None:
    b, key, add, conv = o.b, o.key, o.add, o.conv
    e, hid = o.out_c, o.P(b.mlp_hidden)
    _, ho, wo = b.out_shape((key.in_ch, o.h, o.w))
    n = ho * wo
    if b.needs_proj(key.in_ch):
        conv(o.c, e, b.proj_kernel, b.stride, o.h, o.w)
        if b.proj_act in MULTI_OP_ACTS:
            add("multi_act", e * n)
    add("norm", 2 * e * n)
    conv(e, 3 * e, 1, 1, ho, wo)
    add("attn_macs", 2 * n * n * e)
    add("attn_scores", b.heads * n * n)
    conv(e, e, 1, 1, ho, wo)
    conv(e, hid, 1, 1, ho, wo)
    if b.act in MULTI_OP_ACTS:
        add("multi_act", hid * n)
    conv(hid, e, 1, 1, ho, wo)
    add("eltwise", 2 * e * n)
    add("kernels", 8)


def _head_ops(o: _Counter) -> None:
    b, c, h, w, add = o.b, o.c, o.h, o.w, o.add
    nc, hid = b.num_classes, o.P(b.hidden) if b.hidden else 0
    if b.style == "conv_pool":
        o.conv(c, hid, 1, 1, h, w, fused_act=True)
        add("pool", hid * h * w)
        add("fc_macs", hid * nc)
    elif b.style == "pool_conv":
        add("pool", c * h * w)
        add("fc_macs", c * hid + hid * nc)
        if o.multi:
            add("multi_act", hid)
        add("kernels", 1)
    else:
        add("pool", c * h * w)
        add("fc_macs", c * nc)
    add("kernels", 2)


_KIND_OPS = {"conv": _conv_ops, "ds": _ds_ops, "ir": _mbconv_ops, "fused": _mbconv_ops, "attn": _attn_ops,
             "head": _head_ops}


def op_features(key: BlockKey, *, pad: int = 1) -> np.ndarray:
    """One layer's per-kind-of-kernel work (``OP_FEATURES``), with every channel count rounded
    up to a multiple of ``pad``.  Elements, MACs and weights in millions."""
    o = _Counter(key, pad)
    kind = o.b.kind
    if kind in _KIND_OPS:
        _KIND_OPS[kind](o)
    _, ho, wo = key.out_shape
    if _trailing_act(key) is not None:
        o.add("trailing_act", o.out_c * ho * wo)
    o.add("boundary", (key.in_ch if kind == "conv" and key.in_ch <= 4 else o.c) * o.h * o.w + o.out_c * ho * wo)
    f = o.f
    f /= 1e6
    f[_IDX["kernels"]] *= 1e6
    f[_IDX["const"]] = 1.0
    return f
