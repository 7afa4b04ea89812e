"""QAT: BN folding, fake quantization matching onnxruntime's QDQ scheme, and the QDQ ONNX export."""

from collections import Counter

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from nas.builder import build
from nas.compress.qat import ActQuant, QATNet, calibrate, export_qdq, fold_bn, prepare_qat, set_observers, weight_qmax
from nas.compress.quant_settings import QuantSettings
from nas.space import load_space

torch.set_num_threads(1)


def _trained_like(arch, seed=0):
    """A network with non-trivial BN statistics (a few forward passes in train mode)."""
    torch.manual_seed(seed)
    m = build(arch)
    m.train()
    with torch.no_grad():
        for _ in range(3):
            m(torch.randn(8, arch.in_chans, arch.resolution, arch.resolution))
    return m.eval()


def _archs():
    tiny = load_space("tiny").random(1).with_head(in_chans=1).with_resolution(16)
    mbv3 = load_space("mbv3").random(2).with_resolution(32)  # hard-swish, SE, pool_conv head
    hybrid = load_space("hybrid").random(3).with_resolution(32)  # fused, attention, conv_pool head
    return {"tiny": tiny, "mbv3": mbv3, "hybrid": hybrid}


ARCHS = _archs()


@pytest.mark.parametrize("name", list(ARCHS))
def test_fold_bn_is_exact(name):
    arch = ARCHS[name]
    m = _trained_like(arch)
    f = fold_bn(m)
    x = torch.randn(4, arch.in_chans, arch.resolution, arch.resolution)
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-4)
    bns = [n for n, mod in f.named_modules() if isinstance(mod, torch.nn.BatchNorm2d)]
    if name != "hybrid":  # only the attention layers' pre-norms remain (they follow no conv)
        assert bns == []
    assert all(p.requires_grad for p in f.parameters())


def test_activation_qparams_match_onnxruntime():
    from onnxruntime.quantization.quant_utils import compute_scale_zp

    q = ActQuant()
    q.mode = "minmax"
    q(torch.tensor([-0.7, 2.3, 1.0]))
    q(torch.tensor([0.1, 3.1]))
    scale, zp = q.qparams()
    ozp, oscale = compute_scale_zp(np.float32(-0.7), np.float32(3.1), np.uint8(0), np.uint8(255))
    assert float(scale) == pytest.approx(float(oscale), rel=1e-6) and int(zp) == int(ozp)
    # a post-ReLU range starts at 0, so its zero point is 0 (onnxruntime then drops the Relu into the conv)
    r = ActQuant()
    r.mode = "minmax"
    r(torch.relu(torch.randn(100)))
    assert int(r.qparams()[1]) == 0


def test_symmetric_activation_qparams_match_onnxruntime():
    from onnxruntime.quantization.quant_utils import compute_scale_zp

    q = ActQuant(symmetric=True)
    q.mode = "minmax"
    q(torch.tensor([-0.7, 2.3, 1.0]))
    scale, zp = q.qparams()
    ozp, oscale = compute_scale_zp(np.float32(-0.7), np.float32(2.3), np.int8(-127), np.int8(127), symmetric=True)
    assert float(scale) == pytest.approx(float(oscale), rel=1e-6) and int(zp) == int(ozp) == 0
    q.mode = "frozen"
    y = q(torch.tensor([-5.0, 5.0]))  # int8 range: saturates at -128 / 127 steps
    assert float(y[1]) == pytest.approx(127 * float(scale)) and float(y[0]) == pytest.approx(-128 * float(scale))


@pytest.mark.parametrize("name", list(ARCHS))
def test_qdq_export_matches_fake_quant_and_fuses(name, tmp_path):
    import onnxruntime as ort

    arch = ARCHS[name]
    m = _trained_like(arch)
    q = prepare_qat(m, QuantSettings(reduce_range=True))
    assert isinstance(q, QATNet)
    shape = (arch.in_chans, arch.resolution, arch.resolution)
    calibrate(q, [torch.randn(8, *shape) for _ in range(4)])
    q.eval()
    x = torch.randn(8, *shape)
    with torch.no_grad():
        yq = q(x).numpy()
        yf = m(x).numpy()
    # fake quantization stays close to float (a few quantization steps on the logits)
    assert np.abs(yq - yf).max() < 0.2 * np.abs(yf).max() + 1e-3
    data = export_qdq(q, shape)
    g = onnx.load_from_string(data).graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    # weights: int8, per output channel, within the 7-bit range onnxruntime's reduce_range uses
    dq_w = [n for n in g.node if n.op_type == "DequantizeLinear" and n.input[0].endswith("weight_q")]
    assert dq_w, "no int8 weights in the export"
    for n in dq_w:
        w, s = inits[n.input[0]], inits[n.input[1]]
        assert w.dtype == np.int8 and np.abs(w).max() <= weight_qmax(True) and s.shape == (w.shape[0],)
        assert np.all(inits[n.input[2]] == 0)
    assert any(v.dtype == np.int32 for v in inits.values())  # quantized biases
    assert not any(v.dtype == np.float32 and v.ndim == 4 for v in inits.values())  # no float conv weights
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    so.log_severity_level = 3
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    yo = np.concatenate([sess.run(None, {"input": x[i:i + 1].numpy()})[0] for i in range(len(x))])
    # onnxruntime computes the same integer network: within rounding of the torch simulation
    assert np.abs(yo - yq).max() < 0.05 * np.abs(yq).max() + 1e-3
    assert (yo.argmax(1) == yq.argmax(1)).mean() >= 0.875
    ops = Counter(n.op_type for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node)
    assert ops["QLinearConv"] > 0
    if name == "tiny":  # relu-only convs: every conv runs as an integer kernel
        assert ops["Conv"] == 0 and ops["FusedConv"] == 0 and ops["QLinearAdd"] > 0


def test_qat_step_trains_and_ranges_freeze():
    arch = ARCHS["tiny"]
    m = _trained_like(arch)
    q = prepare_qat(m)
    shape = (1, arch.resolution, arch.resolution)
    calibrate(q, [torch.randn(8, *shape)])
    q.train()
    opt = torch.optim.SGD(q.parameters(), lr=0.01)
    x, y = torch.randn(16, *shape), torch.randint(0, 10, (16,))
    w0 = q.stem.conv.conv.weight.detach().clone()
    loss = torch.nn.functional.cross_entropy(q(x), y)
    loss.backward()
    assert q.stem.conv.conv.weight.grad is not None and q.stem.conv.conv.weight.grad.abs().sum() > 0  # STE
    opt.step()
    assert not torch.equal(w0, q.stem.conv.conv.weight)
    lo = q.quant_in.lo.clone()
    set_observers(q, "frozen")
    q(x * 10)
    assert torch.equal(lo, q.quant_in.lo)
    set_observers(q, "ema")
    q(x * 10)
    assert not torch.equal(lo, q.quant_in.lo)
    # the QAT state round-trips through a state dict (as checkpoints do)
    q2 = prepare_qat(build(arch))
    q2.load_state_dict(q.state_dict())
    q.eval()
    q2.eval()
    set_observers(q, "frozen")
    set_observers(q2, "frozen")
    with torch.no_grad():
        torch.testing.assert_close(q2(x), q(x))


def test_export_needs_calibration_and_settings_are_checked():
    q = prepare_qat(_trained_like(ARCHS["tiny"]))
    with pytest.raises(ValueError, match="never saw data"):
        export_qdq(q, (1, 16, 16))
    with pytest.raises(ValueError, match="qat.ema must be in"):
        QuantSettings(ema=0.0)
    with pytest.raises(ValueError, match="observer mode must be"):
        set_observers(q, "sometimes")
    with pytest.raises(ValueError, match="needs a network built by nas.builder"):
        prepare_qat(torch.nn.Conv2d(1, 1, 1))


def test_quantize_overrides_and_bench_quant_variants():
    """quantize_qdq's overrides reach onnxruntime (QOperator nodes, excluded convs stay fp32), and
    python -m benchmarks quant's variants build the graphs they name."""

    import onnx

    from benchmarks import quant as bq
    from nas.builder import build
    from nas.export.onnx import export_onnx
    from nas.export.qdq import quantize_qdq
    from nas.space import load_space

    torch.manual_seed(0)
    arch = load_space("tiny").random(3).with_head(in_chans=1).with_resolution(16)
    x = torch.randn(1, 1, 16, 16)
    fp32 = export_onnx(build(arch).eval(), x, exporter="torchscript")
    calib = [torch.randn(1, 1, 16, 16).numpy() for _ in range(2)]

    def ops(data):
        return [n.op_type for n in onnx.load_from_string(data).graph.node]

    assert "QuantizeLinear" in ops(quantize_qdq(fp32, calib)) and "QLinearConv" not in ops(quantize_qdq(fp32, calib))
    assert "QLinearConv" in ops(quantize_qdq(fp32, calib, quant_format="QOperator"))
    dw = bq._excluded(fp32, "depthwise")
    spatial = bq._excluded(fp32, "spatial")
    assert dw and set(dw) < set(spatial)
    q = onnx.load_from_string(bq.quantize(fp32, calib, bq.VARIANTS["no_depthwise"]))
    conv_w = {n.name: n.input[1] for n in q.graph.node if n.op_type == "Conv"}
    dq_out = {n.output[0] for n in q.graph.node if n.op_type == "DequantizeLinear"}
    inits = {i.name for i in q.graph.initializer}
    for name in dw:  # an excluded depthwise conv reads its fp32 weight, not a dequantized one
        w = next(v for k, v in conv_w.items() if k.startswith(name) or k == name)
        assert w in inits and w not in dq_out
    with pytest.raises(KeyError):
        quantize_qdq(fp32, calib, activation_type="QInt3")
