"""Int8 QDQ ONNX graphs in each runtime's form.

``quantize_qdq``: onnxruntime's static post-training QDQ quantization of an fp32 ONNX model,
calibrated on a few input batches (the baseline QAT is compared with, and how int8 latency tables
quantize their blocks).  ``qdq_settings_for(target)``: the settings that suit the target's runtime
(``QDQ_SETTINGS`` for onnxruntime, ``TENSORRT_QDQ_SETTINGS`` for TensorRT).  ``finalize_qdq``: the last step of a QAT export (``nas.compress.qat``):
float weights already on the int8 grid stored as int8 per channel, biases as int32.
"""

from __future__ import annotations

import copy
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from nas._optional import try_import

__all__ = ["QDQ_SETTINGS", "TENSORRT_QDQ_SETTINGS", "finalize_qdq", "qdq_settings_for", "quantize_qdq"]


# int8 settings used everywhere (tables, export): QDQ, u8 activations, s8 per-channel weights
QDQ_SETTINGS = {
    "quant_format": "QDQ",
    "activation_type": "QUInt8",
    "weight_type": "QInt8",
    "per_channel": True,
    "reduce_range": True,
    "calibrate_method": "MinMax",
}

# TensorRT's explicit quantization: symmetric int8 activations and weights (zero point 0), full-range
# per-channel weights, Q/DQ on the inputs of Conv / Gemm / MatMul (and of residual Adds, so TensorRT can
# fuse the sum into the conv), not on their outputs; activations such as Relu stay in the graph (TensorRT
# fuses them) and biases stay float (TensorRT folds them into the int8 kernel)
TENSORRT_QDQ_SETTINGS = {
    "quant_format": "QDQ",
    "activation_type": "QInt8",
    "weight_type": "QInt8",
    "per_channel": True,
    "reduce_range": False,
    "calibrate_method": "MinMax",
    "op_types_to_quantize": ["Conv", "Gemm", "MatMul", "Add"],
    "extra_options": {
        "ActivationSymmetric": True,
        "WeightSymmetric": True,
        "QDQKeepRemovableActivations": True,
        "OpTypesToExcludeOutputQuantization": ["Conv", "Gemm", "MatMul"],
        "QuantizeBias": False,
    },
}


def qdq_settings_for(target: Any | None) -> dict[str, Any]:
    """The int8 QDQ settings for ``target`` (a ``nas.target.Target``; None: onnxruntime's):
    ``TENSORRT_QDQ_SETTINGS`` when its runtime is TensorRT, else ``QDQ_SETTINGS`` (u8 activations,
    s8 per-channel weights, reduce_range: what onnxruntime's CPU kernels run fastest)."""
    base = TENSORRT_QDQ_SETTINGS if target is not None and target.runtime == "tensorrt" else QDQ_SETTINGS
    return copy.deepcopy(base)


def quantize_qdq(model: bytes, calib: list, *, input_name: str = "input", target: Any | None = None,
                 **overrides: Any) -> bytes:
    """Quantize an fp32 ONNX model to int8 QDQ ONNX by onnxruntime's static post-training quantization,
    in the form the target's runtime consumes (onnxruntime's u8/s8, or TensorRT's symmetric int8).

    Args:
        model: the fp32 ONNX model.
        calib: numpy input batches to calibrate on.
        input_name: the graph's input.
        target: the target whose runtime's settings apply (``qdq_settings_for``; None: onnxruntime's).
        **overrides: replace any of those settings by name (values as strings: ``quant_format="QOperator"``,
            ``activation_type="QInt8"``) or add other ``quantize_static`` arguments (``nodes_to_exclude``,
            ``op_types_to_quantize``, ``extra_options``).

    Returns:
        The QDQ ONNX model.
    """
    oq = try_import("onnxruntime.quantization")
    CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType = (
        oq.CalibrationDataReader, oq.CalibrationMethod, oq.QuantFormat, oq.QuantType)
    quantize_static = oq.quantize_static
    quant_pre_process = try_import("onnxruntime.quantization.shape_inference").quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(calib)

        def get_next(self):
            x = next(self._it, None)
            return None if x is None else {input_name: x}

    enums = {"quant_format": lambda v: QuantFormat[v], "activation_type": lambda v: QuantType[v],
             "weight_type": lambda v: QuantType[v], "calibrate_method": lambda v: CalibrationMethod[v]}
    root = logging.getLogger()
    level = root.level
    with tempfile.TemporaryDirectory() as d:
        src, pre, dst = Path(d, "f.onnx"), Path(d, "p.onnx"), Path(d, "q.onnx")
        src.write_bytes(model)
        try:
            quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        except Exception:  # pre-processing is an optimisation; quantize the raw graph if it fails
            pre = src
        # the quantizer logs on the root logger: every bias copy (INFO) and every 1-D norm weight it
        # quantizes per tensor instead of per channel (WARNING, once a node); neither needs the user
        root.setLevel(max(level, logging.ERROR))
        try:
            quantize_static(
                str(pre),
                str(dst),
                Reader(),
                **{k: enums.get(k, lambda v: v)(v) for k, v in {**qdq_settings_for(target), **overrides}.items()},
            )
        finally:
            root.setLevel(level)
        return dst.read_bytes()


def _dq(name: str, axis: int):
    """A DequantizeLinear node reading ``name`` (+ ``_scale``, ``_zero_point``) into ``name_dq``."""
    return helper.make_node("DequantizeLinear", [name, f"{name}_scale", f"{name}_zero_point"], [f"{name}_dq"],
                            name=f"{name}_DequantizeLinear", axis=axis)


def _without_identities(g) -> tuple[list, Callable[[str], np.ndarray | None]]:
    """The graph's nodes with Identity nodes resolved (kept where they give a graph output), and a
    lookup of constant values (initializers and Constant nodes) by tensor name."""
    inits = {i.name: i for i in g.initializer}
    alias = {n.output[0]: n.input[0] for n in g.node if n.op_type == "Identity"}
    outputs = {o.name for o in g.output}

    def resolve(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in g.node
              if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"}

    def value(name: str) -> np.ndarray | None:
        name = resolve(name)
        if name in inits:
            return numpy_helper.to_array(inits[name])
        return consts.get(name)

    nodes = []
    for n in g.node:
        if n.op_type == "Identity" and n.output[0] not in outputs:
            continue
        for j, inp in enumerate(n.input):
            if inp:
                n.input[j] = resolve(inp)
        nodes.append(n)
    return nodes, value


def _quantize_weight(n, w: np.ndarray, weight_qmax: int) -> tuple[np.ndarray, list, Any]:
    """Node ``n``'s float weight as int8 per output channel: (scale, initializers, DequantizeLinear)."""
    axis = 0
    if n.op_type == "Gemm":
        trans_b = next((a.i for a in n.attribute if a.name == "transB"), 0)
        axis = 0 if trans_b else 1
    red = tuple(d for d in range(w.ndim) if d != axis)
    absmax = np.abs(w).max(axis=red)
    scale = np.where(absmax > 0, absmax / weight_qmax, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.round(w / scale.reshape(shape)), -weight_qmax, weight_qmax).astype(np.int8)
    base = f"{n.input[1]}_q"
    inits = [numpy_helper.from_array(q, base), numpy_helper.from_array(scale, f"{base}_scale"),
             numpy_helper.from_array(np.zeros_like(scale, dtype=np.int8), f"{base}_zero_point")]
    return scale, inits, _dq(base, axis)


def _quantize_bias(bname: str, b: np.ndarray, sx: np.ndarray, scale: np.ndarray) -> tuple[list, Any]:
    """A bias as int32 at scale input scale x weight scale: (initializers, DequantizeLinear)."""
    bscale = (np.float32(np.asarray(sx).reshape(())) * scale).astype(np.float32)
    qb = np.round(b.astype(np.float64) / bscale.astype(np.float64)).clip(-(2**31), 2**31 - 1).astype(np.int32)
    bb = f"{bname}_q"
    inits = [numpy_helper.from_array(qb, bb), numpy_helper.from_array(bscale, f"{bb}_scale"),
             numpy_helper.from_array(np.zeros(qb.shape, np.int32), f"{bb}_zero_point")]
    return inits, _dq(bb, 0)


def finalize_qdq(data: bytes, *, weight_qmax: int, quantize_bias: bool = True) -> bytes:
    """Float conv / linear weights -> int8 per-channel behind DequantizeLinear; with ``quantize_bias``,
    biases of convs whose input is dequantized -> int32 (scale = input scale x weight scale), else
    they stay float (TensorRT's form).  Identity nodes are resolved.  Weights must already be on the quantization grid (``_materialize``)."""
    m = onnx.load_from_string(data)
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    nodes, value = _without_identities(g)
    producer = {o: n for n in nodes for o in n.output}
    new_nodes, new_inits, used_float = [], [], set()
    for n in nodes:
        if n.op_type in ("Conv", "Gemm") and len(n.input) >= 2 and n.input[1] in inits \
                and inits[n.input[1]].data_type == TensorProto.FLOAT:
            wname = n.input[1]
            scale, w_inits, w_dq = _quantize_weight(n, numpy_helper.to_array(inits[wname]).astype(np.float32),
                                                    weight_qmax)
            new_inits += w_inits
            new_nodes.append(w_dq)
            n.input[1] = w_dq.output[0]
            used_float.add(wname)
            p = producer.get(n.input[0])
            if quantize_bias and len(n.input) >= 3 and n.input[2] in inits and p is not None and p.op_type == "DequantizeLinear":
                sx = value(p.input[1])
                if sx is not None and np.asarray(sx).size == 1:
                    bname = n.input[2]
                    b_inits, b_dq = _quantize_bias(bname, numpy_helper.to_array(inits[bname]), sx, scale)
                    new_inits += b_inits
                    new_nodes.append(b_dq)
                    n.input[2] = b_dq.output[0]
                    used_float.add(bname)
        new_nodes.append(n)
    still_used = {i for n in new_nodes for i in n.input}
    keep = [i for i in g.initializer if i.name not in used_float or i.name in still_used]
    del g.initializer[:]
    g.initializer.extend(keep + new_inits)
    del g.node[:]
    g.node.extend(new_nodes)
    onnx.checker.check_model(m)
    return m.SerializeToString()
