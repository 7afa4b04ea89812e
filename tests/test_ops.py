"""nas.latency.predict.ops: per-kind-of-kernel work of a layer, and the learned block model built on it."""

from __future__ import annotations

import numpy as np
import pytest

from nas.arch import SE, BlockKey, ConvBlock, DSConvBlock, MBConvBlock
from nas.cost import block_cost
from nas.latency.predict.ops import OP_FEATURES, op_features, padding_elems, trailing_act_elems
from nas.space import list_spaces, load_space
from nas.timm_arch import from_timm

IDX = {n: i for i, n in enumerate(OP_FEATURES)}
MACS = ("dense_macs", "pw_macs", "dw_macs", "fc_macs", "attn_macs")


def _keys():
    keys = []
    for name in list_spaces():
        keys += load_space(name).unique_blocks()[::19]
    keys += from_timm("lcnet_050").keys() + from_timm("mobilenetv2_050").keys()
    return keys


@pytest.mark.parametrize("key", _keys(), ids=str)
def test_op_macs_add_up_to_the_layer_macs(key):
    f = op_features(key)
    assert sum(f[IDX[m]] for m in MACS) * 1e6 == pytest.approx(block_cost(key).macs, rel=1e-9)
    assert (f >= 0).all() and f[IDX["const"]] == 1.0 and f[IDX["kernels"]] >= 1


def test_trailing_activation_only_where_a_multi_op_activation_ends_the_layer():
    stem_hs = BlockKey(ConvBlock(16, 3, 2, "hard_swish"), 3, 32, 32)
    stem_re = BlockKey(ConvBlock(16, 3, 2, "relu"), 3, 32, 32)
    ds_pa = BlockKey(DSConvBlock(32, 3, 1, "swish", pw_act=True), 16, 8, 8)
    ds = BlockKey(DSConvBlock(32, 3, 1, "swish"), 16, 8, 8)
    ir = BlockKey(MBConvBlock(16, 64, 3, 1, "hard_swish"), 16, 8, 8)
    assert trailing_act_elems(stem_hs) == pytest.approx(16 * 16 * 16 / 1e6)
    assert trailing_act_elems(ds_pa) == pytest.approx(32 * 8 * 8 / 1e6)
    assert trailing_act_elems(stem_re) == trailing_act_elems(ds) == trailing_act_elems(ir) == 0.0


def test_padding_counts_channels_rounded_up_to_the_simd_block():
    aligned = BlockKey(MBConvBlock(16, 64, 3, 1, "relu"), 16, 8, 8)
    ragged = BlockKey(MBConvBlock(16, 72, 3, 1, "relu", SE(24)), 16, 8, 8)
    assert padding_elems(aligned) == 0.0
    # 72 channels pad to 80: 8 extra channels read (8x8) and written (8x8)
    assert padding_elems(ragged) == pytest.approx(8 * (64 + 64) / 1e6)


def test_learned_model_extrapolates_to_widths_the_table_lacks():
    """Fit on a synthetic additive 'device' at some widths; predict widths it never saw."""
    from nas.latency.predict.predictor import make_block_model

    rng = np.random.default_rng(0)
    cost = rng.uniform(0.5, 2.0, len(OP_FEATURES)) * 1e-2

    def device_ms(k):  # a device whose kernels cost exactly a linear combination of the work
        return float(op_features(k) @ cost) + 0.002

    def key(c, m, h, k=3, s=1):
        return BlockKey(MBConvBlock(c, m, k, s, "relu"), c, h, h)

    train = [key(c, c * e, h, k, s) for c in (16, 32, 64) for e in (3, 6) for h in (8, 16, 32)
             for k in (3, 5) for s in (1, 2)]
    test = [key(48, 48 * e, h, k, 1) for e in (3, 6) for h in (8, 16, 32) for k in (3, 5)]
    model = make_block_model().fit(train, np.array([device_ms(k) for k in train]))
    pred = model.predict(test)
    true = np.array([device_ms(k) for k in test])
    assert np.max(np.abs(pred / true - 1)) < 0.10
