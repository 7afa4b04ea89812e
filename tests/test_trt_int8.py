"""int8 QDQ exports follow the target's runtime: TensorRT's symmetric int8, onnxruntime's u8/s8."""

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from nas.builder import build
from nas.compress.qat import calibrate, export_qdq, prepare_qat, quant_settings_for
from nas.export.onnx import export_onnx, ort_session
from nas.export.qdq import QDQ_SETTINGS, qdq_settings_for, quantize_qdq
from nas.space import load_space
from nas.target import load_target

torch.set_num_threads(1)

ARCH = load_space("tiny").random(1).with_head(in_chans=1).with_resolution(16)
SHAPE = (ARCH.in_chans, ARCH.resolution, ARCH.resolution)


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    m = build(ARCH).train()
    with torch.no_grad():
        for _ in range(3):
            m(torch.randn(8, *SHAPE))
    return m.eval()


def _calib(n=4, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, *SHAPE)).astype(np.float32) for _ in range(n)]


def _inits(m):
    """Constant tensors by name: initializers and Constant nodes."""
    out = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    out.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in m.graph.node
                if n.op_type == "Constant" and n.attribute[0].name == "value"})
    return out


def _check_tensorrt_form(data, placement=True):
    m = onnx.load_from_string(data)
    onnx.checker.check_model(m)
    inits = _inits(m)
    qs = [n for n in m.graph.node if n.op_type == "QuantizeLinear"]
    assert qs
    for n in qs:  # every activation: int8, zero point 0
        zp = inits[n.input[2]]
        assert zp.dtype == np.int8 and np.all(zp == 0), n.name
    dqs = [n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits
           and inits[n.input[0]].ndim >= 1]
    weights = [n for n in dqs if inits[n.input[0]].ndim >= 2]
    assert weights
    for n in weights:  # int8 per output channel, symmetric, full range
        w, s, zp = (inits[i] for i in n.input[:3])
        assert w.dtype == np.int8 and zp.dtype == np.int8 and np.all(zp == 0)
        assert s.ndim == 1 and s.size > 1 or w.shape[0] == 1
    assert not any(inits[n.input[0]].dtype == np.int32 for n in dqs)  # float biases
    if placement:  # every activation Q/DQ feeds a layer TensorRT runs in int8 (or a residual sum)
        users: dict = {}
        for n in m.graph.node:
            for i in n.input:
                users.setdefault(i, set()).add(n.op_type)
        dq_of = {n.input[0]: n for n in m.graph.node if n.op_type == "DequantizeLinear"}
        ops = {u for q in qs for u in users[dq_of[q.output[0]].output[0]]}
        assert ops <= {"Conv", "Gemm", "MatMul", "Add"}, ops
    return m


def _close_to_fp32(net, data):
    x = np.random.default_rng(1).standard_normal((4, *SHAPE)).astype(np.float32)
    sess = ort_session(data)
    y = np.concatenate([sess.run(None, {"input": x[i:i + 1]})[0] for i in range(len(x))])
    with torch.no_grad():
        yf = net(torch.from_numpy(x)).numpy()
    assert np.abs(y - yf).max() < 0.25 * np.abs(yf).max() + 1e-3


def test_settings_follow_the_runtime():
    assert qdq_settings_for(load_target("cpu")) == QDQ_SETTINGS == qdq_settings_for(None)
    trt = qdq_settings_for(load_target("jetson"))
    assert trt["activation_type"] == trt["weight_type"] == "QInt8" and trt["per_channel"]
    assert not trt["reduce_range"]
    assert trt["extra_options"]["ActivationSymmetric"] and trt["extra_options"]["WeightSymmetric"]
    trt["extra_options"]["ActivationSymmetric"] = False  # a copy: the shipped settings are not changed
    assert qdq_settings_for(load_target("jetson"))["extra_options"]["ActivationSymmetric"]
    q = quant_settings_for(load_target("jetson"))
    assert q.symmetric and not q.reduce_range
    assert quant_settings_for(load_target("cpu")) == quant_settings_for(None)


def test_ptq_for_tensorrt_is_symmetric_int8(net):
    fp32 = export_onnx(net, torch.zeros(1, *SHAPE), exporter="torchscript")
    data = quantize_qdq(fp32, _calib(), target=load_target("jetson"))
    _check_tensorrt_form(data)
    _close_to_fp32(net, data)


def test_ptq_for_onnxruntime_cpu_keeps_u8_activations(net):
    fp32 = export_onnx(net, torch.zeros(1, *SHAPE), exporter="torchscript")
    m = onnx.load_from_string(quantize_qdq(fp32, _calib(), target=load_target("cpu")))
    onnx.checker.check_model(m)
    inits = _inits(m)
    zps = [inits[n.input[2]] for n in m.graph.node if n.op_type == "QuantizeLinear"]
    assert zps and all(z.dtype == np.uint8 for z in zps)


def test_qat_for_tensorrt_is_symmetric_int8(net):
    q = prepare_qat(net, quant_settings_for(load_target("jetson")))
    calibrate(q, [torch.from_numpy(x) for x in _calib(4)])
    q.eval()
    data = export_qdq(q, SHAPE)
    _check_tensorrt_form(data, placement=False)
    _close_to_fp32(net, data)
