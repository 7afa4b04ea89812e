"""ExecuTorch programs (``.pte``) and OpenVINO models from a torch module: the converters the
``executorch`` and ``openvino`` latency runtimes time, and that ``nas.export format=pte|openvino`` writes.

- ``pte_bytes``: ``torch.export`` -> (int8: PT2E quantization with ``XNNPACKQuantizer``, symmetric
  per-channel int8 weights and int8 activations, calibrated on the given inputs) -> XNNPACK delegate ->
  ExecuTorch program.
- ``openvino_model``: the project's ONNX export read by OpenVINO (the same graph onnxruntime runs);
  int8 by NNCF post-training quantization (``nncf.quantize``) of that model, or from a QDQ ONNX
  graph (a QAT network's own), which OpenVINO runs as int8.

NNCF rather than the onnxruntime QDQ graph for float networks: on the blocks measured on this
project's x86 machine (OpenVINO 2026.4, one thread) the QDQ graph, whose Q/DQ pairs wrap every
activation, made swish and hard-swish MBConv blocks slower than fp32 (0.48 vs 0.33 ms, 1.20 vs
0.84 ms), while NNCF's int8 was never slower than fp32 and as accurate (mean relative error 1-6%
for both; timings on a shared machine, so approximate).  docs/runtimes.md has the comparison.

A missing package raises ``RuntimeUnavailable`` naming the extra that installs it.
"""

from __future__ import annotations

import io
import logging
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["EDGE_FORMATS", "openvino_model", "openvino_compile", "pte_bytes", "require"]

log = logging.getLogger(__name__)

EDGE_FORMATS = {"pte": "executorch", "openvino": "openvino"}  # export format -> runtime

# what each runtime needs, and the extra that installs it
_NEEDS = {
    "executorch": ("executorch.runtime", "executorch.exir", "executorch.backends.xnnpack.partition.xnnpack_partitioner"),
    "openvino": ("openvino",),
    "openvino-int8": ("openvino", "nncf"),
}


def require(what: str) -> None:
    """Raise ``RuntimeUnavailable`` (one line: the missing module and the install command) unless the
    modules ``what`` (``executorch``, ``openvino`` or ``openvino-int8``) needs import."""
    import importlib

    from nas.latency.runtimes import RuntimeUnavailable

    extra = what.split("-")[0]
    for mod in _NEEDS[what]:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                importlib.import_module(mod)
        except ImportError as e:
            raise RuntimeUnavailable(
                f"{extra} runtime: {e.name or mod} is not installed: pip install \"hwnas[{extra}]\"") from None


# --------------------------------------------------------------------------------------------
# ExecuTorch


def _pt2e_int8(exported: Any, calib: Sequence[torch.Tensor]) -> nn.Module:
    """PT2E static quantization for XNNPACK: symmetric int8, per-channel weights, calibrated on ``calib``."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(exported.module(), quantizer)
    with torch.no_grad():
        for x in calib:
            prepared(x)
    return convert_pt2e(prepared)


def pte_bytes(module: nn.Module, example: torch.Tensor, *, precision: str = "fp32",
              calib: Sequence[torch.Tensor] = ()) -> bytes:
    """The ExecuTorch program (``.pte`` bytes) of ``module`` at ``example``'s shape, its supported
    operators delegated to XNNPACK; int8 quantized by PT2E on ``calib`` (at least one input)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    if precision not in ("fp32", "int8"):
        raise ValueError(f"ExecuTorch export supports precision fp32 or int8, got {precision!r}")
    if precision == "int8" and not calib:
        raise ValueError("ExecuTorch int8 needs calibration inputs (calib=[...]): PT2E sets its scales from them")
    module = module.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        exported = torch.export.export(module, (example,))
        if precision == "int8":
            exported = torch.export.export(_pt2e_int8(exported, calib), (example,))
        program = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]).to_executorch()
    return bytes(program.buffer)


def pte_method(data: bytes, *, threads: int | None = None) -> Any:
    """The ``forward`` method of an ExecuTorch program, loaded by the ExecuTorch Python runtime.
    ``threads``: the size of the runtime's (process-wide) CPU thread pool XNNPACK runs on."""
    from executorch.runtime import Runtime as ETRuntime

    if threads is not None:
        from executorch.extension.pybindings.portable_lib import _threadpool_get_thread_count, _unsafe_reset_threadpool

        if _threadpool_get_thread_count() != threads:
            _unsafe_reset_threadpool(threads)
    return ETRuntime.get().load_program(data).load_method("forward")


# --------------------------------------------------------------------------------------------
# OpenVINO


def openvino_model(module: nn.Module | None, example: torch.Tensor, *, precision: str = "fp32",
                   calib: Sequence[np.ndarray] = (), onnx: bytes | None = None) -> Any:
    """An ``openvino.Model`` of ``module`` at ``example``'s shape (or of the ``onnx`` bytes given):
    fp32 as exported, int8 by NNCF post-training quantization on ``calib`` (numpy input batches).
    A QDQ ``onnx`` graph is read as it is: OpenVINO runs its Q/DQ pairs as int8."""
    import openvino as ov

    from nas.export.onnx import export_onnx

    if precision not in ("fp32", "int8"):
        raise ValueError(f"OpenVINO export supports precision fp32 or int8, got {precision!r}")
    data = onnx if onnx is not None else export_onnx(module, example, exporter="torchscript")
    model = ov.convert_model(io.BytesIO(data))
    if precision == "int8" and onnx is None:
        if not calib:
            raise ValueError("OpenVINO int8 needs calibration inputs (calib=[...]): NNCF sets its scales from them")
        import nncf

        logging.getLogger("nncf").setLevel(logging.ERROR)  # its progress bars and INFO lines per block
        model = nncf.quantize(model, nncf.Dataset(list(calib)), subset_size=len(calib))
    return model


def openvino_compile(model: Any, *, threads: int = 1) -> Any:
    """``model`` compiled for OpenVINO's CPU plugin with ``threads`` inference threads and the latency hint."""
    import openvino as ov

    return ov.Core().compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"})
