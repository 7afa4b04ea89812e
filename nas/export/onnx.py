"""ONNX export and onnxruntime sessions, shared by the builder tests, the profiler and export."""

from __future__ import annotations

import io
import logging
import warnings
from pathlib import Path

import torch
from torch import nn

from nas._io import atomic_write_bytes

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
        atomic_write_bytes(path, data)
    return data


def ort_session(model: bytes | str | Path, *, threads: int = 1, providers: list | None = None):
    """An onnxruntime session with a fixed intra-op thread count and sequential execution."""
    import onnxruntime as ort  # optional heavy runtime: loads only where an ONNX file is run

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    src = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(src, so, providers=providers or ["CPUExecutionProvider"])

