"""ONNX export and onnxruntime sessions, shared by the builder tests, the profiler and export."""

from __future__ import annotations

import io
import logging
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["export_onnx", "ort_session", "DEFAULT_OPSET"]

log = logging.getLogger(__name__)
DEFAULT_OPSET = 17


def export_onnx(
    module: nn.Module,
    example: torch.Tensor,
    path: str | Path | None = None,
    *,
    opset: int = DEFAULT_OPSET,
    exporter: str = "auto",
) -> bytes:
    """Export ``module`` (in eval mode) at ``example``'s shape; return the model bytes.

    ``exporter``: ``"torchscript"`` (fast: ~0.1 s for a block), ``"dynamo"`` (torch.export
    based, ~10x slower here) or ``"auto"`` (TorchScript, falling back to dynamo if it fails).
    Input is named ``input``, output ``output``; shapes are static (latency is per shape).
    """
    if exporter not in ("auto", "torchscript", "dynamo"):
        raise ValueError(f"exporter must be 'auto', 'torchscript' or 'dynamo', got {exporter!r}")
    module = module.eval()
    data: bytes | None = None
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter in ("auto", "torchscript"):
            buf = io.BytesIO()
            try:
                torch.onnx.export(
                    module,
                    (example,),
                    buf,
                    dynamo=False,
                    opset_version=opset,
                    input_names=["input"],
                    output_names=["output"],
                    do_constant_folding=True,
                )
                data = buf.getvalue()
            except Exception as e:  # pragma: no cover - depends on the torch version
                if exporter == "torchscript":
                    raise
                log.info("TorchScript ONNX export failed (%s); falling back to dynamo", e)
        if data is None:
            prog = torch.onnx.export(
                module,
                (example,),
                dynamo=True,
                opset_version=opset,
                input_names=["input"],
                output_names=["output"],
                verbose=False,
            )
            data = prog.model_proto.SerializeToString()
    if path is not None:
        from nas._io import atomic_write_bytes

        atomic_write_bytes(path, data)
    return data


def ort_session(model: bytes | str | Path, *, threads: int = 1, providers: list | None = None):
    """An onnxruntime session with a fixed intra-op thread count and sequential execution."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    src = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(src, so, providers=providers or ["CPUExecutionProvider"])


# int8 settings used everywhere (tables, export): QDQ, u8 activations, s8 per-channel weights
QDQ_SETTINGS = {
    "quant_format": "QDQ",
    "activation_type": "QUInt8",
    "weight_type": "QInt8",
    "per_channel": True,
    "reduce_range": True,
    "calibrate_method": "MinMax",
}


def quantize_qdq(model: bytes, calib: list, *, input_name: str = "input", **overrides: Any) -> bytes:
    """Static post-training quantization to QDQ ONNX (the form onnxruntime and TensorRT consume).

    ``calib``: a list of numpy input batches for calibration.  Settings: ``QDQ_SETTINGS``;
    ``overrides`` replace any of them (by the same names, values as strings: ``quant_format="QOperator"``,
    ``activation_type="QInt8"``) or add other ``quantize_static`` arguments (``nodes_to_exclude``,
    ``op_types_to_quantize``, ``extra_options``); ``scripts/bench_quant.py`` compares them.
    """
    import tempfile

    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

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
                **{k: enums.get(k, lambda v: v)(v) for k, v in {**QDQ_SETTINGS, **overrides}.items()},
            )
        finally:
            root.setLevel(level)
        return dst.read_bytes()
