"""ONNX export and onnxruntime sessions: the converter every runtime, the profiler and deployment share."""

from __future__ import annotations

import io
import logging
import warnings
from pathlib import Path

import torch
from torch import nn

from nas._io import atomic_write_bytes
from nas._optional import try_import

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
    """Export a torch module to ONNX at one static input shape.

    The module is put in eval mode; the graph's input is named ``input``, its output ``output``, and
    its shapes are static (latency is per shape).

    Args:
        module: the network or block.
        example: an input of the shape to export at.
        path: also write the model there (atomically).
        opset: the ONNX opset.
        exporter: ``"torchscript"``, ``"dynamo"`` (``torch.export`` based, slower) or ``"auto"``
            (TorchScript, falling back to dynamo when it fails).

    Returns:
        The serialized ONNX model.

    Raises:
        ValueError: an unknown ``exporter``.
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
    """An onnxruntime session with a fixed intra-op thread count, sequential execution and every graph
    optimisation.

    Args:
        model: the ONNX bytes or file.
        threads: intra-op threads.
        providers: execution providers (default: the CPU's).

    Returns:
        The ``onnxruntime.InferenceSession``.
    """
    ort = try_import("onnxruntime")

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    src = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(src, so, providers=providers or ["CPUExecutionProvider"])

