"""Checking an exported QDQ ONNX model (for ``benchmarks/modelopt.py``).

``describe_format(bytes)``: what it looks like to TensorRT: zero points (int8 and 0), per-channel
int8 weights (stored as int8, or float behind a QuantizeLinear), the op types that read a
dequantized activation, the BatchNormalization nodes left, the bias type and whether
``onnx.checker`` passes.  ``ort_logits(bytes, x)``: its logits in onnxruntime CPU, or why not.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
from onnx import helper, numpy_helper

from nas.export.onnx import ort_session


def _constants(g) -> dict[str, np.ndarray]:
    """Constant tensors by name: initializers, Constant nodes, and Cast / Identity of those."""
    out = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    for n in g.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            out[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        elif n.op_type == "Identity" and n.input[0] in out:
            out[n.output[0]] = out[n.input[0]]
        elif n.op_type == "Cast" and n.input[0] in out:
            to = next(a.i for a in n.attribute if a.name == "to")
            out[n.output[0]] = out[n.input[0]].astype(helper.tensor_dtype_to_np_dtype(to))
    return out


def describe_format(data: bytes) -> dict:
    """What a QDQ model looks like to TensorRT (see the module docs)."""
    m = onnx.load_from_string(data)
    rec: dict = {"opset": next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)}
    try:
        onnx.checker.check_model(m)
        rec["checker"] = "ok"
    except Exception as e:  # noqa: BLE001 - reported, not raised
        rec["checker"] = f"fails: {str(e).splitlines()[0][:200]}"
    g = m.graph
    const = _constants(g)
    users: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    qs = [n for n in g.node if n.op_type == "QuantizeLinear"]
    dqs = [n for n in g.node if n.op_type == "DequantizeLinear"]

    def zp_of(n) -> np.ndarray | None:
        return const.get(n.input[2]) if len(n.input) > 2 and n.input[2] else None

    zps = [zp_of(n) for n in qs]
    rec["quantize_linear"] = len(qs)
    rec["zero_points_int8_0"] = bool(qs) and all(z is not None and z.dtype == np.int8 and not np.any(z) for z in zps)
    bad = Counter("missing (uint8)" if z is None else f"{z.dtype}{'' if not np.any(z) else ' nonzero'}"
                  for z in zps if z is None or z.dtype != np.int8 or np.any(z))
    if bad:
        rec["zero_points_other"] = dict(bad)

    # weights: int8 initializers behind a DequantizeLinear, or float constants behind a QuantizeLinear
    weights = []
    for n in dqs:
        w = const.get(n.input[0])
        if w is not None and w.ndim >= 2:
            weights.append(("int8" if w.dtype == np.int8 else str(w.dtype), const.get(n.input[1]), w.shape, n))
    for n in qs:
        w = const.get(n.input[0])
        if w is not None and w.ndim >= 2:
            weights.append((f"{w.dtype} via Q", const.get(n.input[1]), w.shape, n))
    rec["weights"] = dict(Counter(kind for kind, *_ in weights))
    per_ch = [s is not None and (s.size == shape[0] or s.size == shape[1]) and (s.size > 1 or shape[0] == 1)
              for _, s, shape, _ in weights]
    rec["weights_per_channel"] = bool(weights) and all(per_ch)
    weight_q = {n.output[0] for *_, n in weights}

    # activations: the op types that read a dequantized (non-constant) tensor
    act_dq = [n for n in dqs if n.input[0] not in const and n.input[0] not in weight_q]
    readers = Counter(u.op_type for n in act_dq for u in users.get(n.output[0], []))
    rec["activation_qdq_pairs"] = len(act_dq)
    rec["activation_qdq_feeds"] = dict(sorted(readers.items()))
    ops = Counter(n.op_type for n in g.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear", "Constant"))
    dq_out = {n.output[0] for n in dqs}
    quantized_in = Counter(n.op_type for n in g.node if n.input and n.input[0] in dq_out
                           and n.op_type not in ("QuantizeLinear", "DequantizeLinear"))
    rec["int8_inputs"] = {k: f"{quantized_in.get(k, 0)}/{ops[k]}" for k in ("Conv", "Gemm", "MatMul", "Add")
                          if ops.get(k)}
    add_both = sum(1 for n in g.node if n.op_type == "Add" and len(n.input) == 2 and all(i in dq_out for i in n.input))
    if ops.get("Add"):
        rec["int8_inputs"]["Add (both)"] = f"{add_both}/{ops['Add']}"
    rec["bias"] = "int32" if any(const.get(n.input[0]) is not None and const[n.input[0]].dtype == np.int32
                                 for n in dqs) else "float"
    rec["batchnorm_nodes"] = ops.get("BatchNormalization", 0)
    rec["float_ops"] = dict(sorted(ops.items()))
    return rec


def ort_logits(data: bytes, x: np.ndarray) -> tuple[np.ndarray | None, str]:
    """The logits of ``data`` (static batch 1) over ``x`` in onnxruntime CPU, or None and why."""
    try:
        sess = ort_session(data)
        name = sess.get_inputs()[0].name
        want = sess.get_inputs()[0].type
        xx = x.astype(np.float16) if "float16" in want else x
        return np.concatenate([sess.run(None, {name: xx[i:i + 1]})[0] for i in range(len(x))]).astype(np.float32), "ok"
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return None, f"fails: {str(e).splitlines()[0][:200]}"
