"""ExecuTorch programs (``.pte``) and OpenVINO models from a torch module: the converters the
``executorch`` and ``openvino`` latency runtimes time, and that ``nas.export format=pte|openvino`` writes;
``.tflite`` graphs for LiteRT come from ``nas.export.litert`` (``format=tflite``), written and verified here
as the other two are.

- ``pte_bytes``: ``torch.export`` -> (int8: PT2E quantization with ``XNNPACKQuantizer``, symmetric
  per-channel int8 weights and int8 activations, calibrated on the given inputs) -> XNNPACK delegate ->
  ExecuTorch program.
- ``openvino_model``: the project's ONNX export read by OpenVINO (the same graph onnxruntime runs);
  int8 by NNCF post-training quantization (``nncf.quantize``) of that model, or from a QDQ ONNX
  graph (a QAT network's own), which OpenVINO runs as int8.

NNCF rather than the onnxruntime QDQ graph for float networks: docs/runtimes.md has the comparison.

``write_file`` writes a converted network (``.pte``, ``.tflite``, or an OpenVINO IR: ``.xml`` + ``.bin``) atomically;
``verify_file`` runs the written file against the torch module it came from.  The runtimes'
packages load only when a converter runs (``nas.latency.runtimes.edge.require`` checks them).
"""

from __future__ import annotations

import io
import logging
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from nas._io import atomic_write_bytes
from nas._optional import try_import
from nas.data import Dataset
from nas.export import litert
from nas.export.onnx import export_onnx
from nas.export.verify import batch1, check_finite_outputs, eval_split

__all__ = ["OPENVINO_CONFIG", "SUFFIXES", "openvino_compile", "openvino_model", "pte_bytes", "pte_method",
           "verify_file", "write_file", "write_openvino"]

log = logging.getLogger(__name__)

SUFFIXES = {"pte": ".pte", "openvino": ".xml", "tflite": ".tflite"}  # export format -> the file it writes

# --------------------------------------------------------------------------------------------
# ExecuTorch


def _pt2e_int8(exported: Any, calib: Sequence[torch.Tensor]) -> nn.Module:
    """PT2E static quantization for XNNPACK: symmetric int8, per-channel weights, calibrated on ``calib``."""
    xq = try_import("executorch.backends.xnnpack.quantizer.xnnpack_quantizer")
    pt2e = try_import("torchao.quantization.pt2e.quantize_pt2e")
    quantizer = xq.XNNPACKQuantizer().set_global(xq.get_symmetric_quantization_config(is_per_channel=True))
    prepared = pt2e.prepare_pt2e(exported.module(), quantizer)
    with torch.no_grad():
        for x in calib:
            prepared(x)
    return pt2e.convert_pt2e(prepared)


def pte_bytes(module: nn.Module, example: torch.Tensor, *, precision: str = "fp32",
              calib: Sequence[torch.Tensor] = ()) -> bytes:
    """The ExecuTorch program (``.pte`` bytes) of ``module`` at ``example``'s shape, its supported
    operators delegated to XNNPACK; int8 quantized by PT2E on ``calib`` (at least one input)."""
    partitioner = try_import("executorch.backends.xnnpack.partition.xnnpack_partitioner").XnnpackPartitioner
    lower = try_import("executorch.exir").to_edge_transform_and_lower

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
        program = lower(exported, partitioner=[partitioner()]).to_executorch()
    return bytes(program.buffer)


def pte_method(data: bytes, *, threads: int | None = None) -> Any:
    """The ``forward`` method of an ExecuTorch program, loaded by the ExecuTorch Python runtime.
    ``threads``: the size of the runtime's (process-wide) CPU thread pool XNNPACK runs on."""
    runtime = try_import("executorch.runtime").Runtime
    if threads is not None:
        pool = try_import("executorch.extension.pybindings.portable_lib")
        if pool._threadpool_get_thread_count() != threads:
            pool._unsafe_reset_threadpool(threads)
    program = runtime.get().load_program(data)
    method = program.load_method("forward")
    method.program = program  # the program (and the bytes it runs from) lives as long as its method
    return method


# --------------------------------------------------------------------------------------------
# OpenVINO


def openvino_model(module: nn.Module | None, example: torch.Tensor, *, precision: str = "fp32",
                   calib: Sequence[np.ndarray] = (), onnx: bytes | None = None) -> Any:
    """An ``openvino.Model`` of ``module`` at ``example``'s shape (or of the ``onnx`` bytes given):
    fp32 as exported, int8 by NNCF post-training quantization on ``calib`` (numpy input batches).
    A QDQ ``onnx`` graph is read as it is: OpenVINO runs its Q/DQ pairs as int8."""
    ov = try_import("openvino")

    if precision not in ("fp32", "int8"):
        raise ValueError(f"OpenVINO export supports precision fp32 or int8, got {precision!r}")
    data = onnx if onnx is not None else export_onnx(module, example, exporter="torchscript")
    model = ov.convert_model(io.BytesIO(data))
    if precision == "int8" and onnx is None:
        if not calib:
            raise ValueError("OpenVINO int8 needs calibration inputs (calib=[...]): NNCF sets its scales from them")
        nncf = try_import("nncf")

        logging.getLogger("nncf").setLevel(logging.ERROR)  # its progress bars and INFO lines per block
        model = nncf.quantize(model, nncf.Dataset(list(calib)), subset_size=len(calib))
    return model


#: the CPU plugin's settings: float layers in f32 (on CPUs with AMX or AVX-512 BF16 OpenVINO would
#: otherwise run them in bf16, so an "fp32" table would time bf16), the latency hint
OPENVINO_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}


def openvino_compile(model: Any, *, threads: int = 1) -> Any:
    """``model`` compiled for OpenVINO's CPU plugin with ``threads`` inference threads, float layers in
    f32 and the latency hint (``OPENVINO_CONFIG``)."""
    ov = try_import("openvino")

    return ov.Core().compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads, **OPENVINO_CONFIG})


# --------------------------------------------------------------------------------------------
# files


def write_openvino(model: Any, path: Path) -> int:
    """Write an ``openvino.Model`` as an IR, fp32 weights kept fp32, atomically.

    Args:
        model: the ``openvino.Model``.
        path: the ``.xml`` file; its ``.bin`` is written beside it first, then the ``.xml`` naming it.

    Returns:
        The size of both files in bytes.
    """
    ov = try_import("openvino")

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".ov-") as tmp:
        tmp_xml = Path(tmp) / path.name
        ov.save_model(model, str(tmp_xml), compress_to_fp16=False)  # fp32 weights stay fp32
        os.replace(tmp_xml.with_suffix(".bin"), path.with_suffix(".bin"))
        os.replace(tmp_xml, path)
    return path.stat().st_size + path.with_suffix(".bin").stat().st_size


def write_file(fmt: str, converted: Any, path: Path) -> int:
    """Write a converted network atomically.

    Args:
        fmt: ``"pte"`` or ``"tflite"`` (``converted``: the file's bytes) or ``"openvino"`` (an ``openvino.Model``).
        converted: what ``pte_bytes``, ``nas.export.litert.tflite_bytes`` or ``openvino_model`` returned.
        path: the ``.pte``, ``.tflite`` or ``.xml`` file.

    Returns:
        The size written in bytes.
    """
    if fmt in ("pte", "tflite"):
        atomic_write_bytes(path, converted)
        return len(converted)
    return write_openvino(converted, path)


def _outputs(fmt: str, path: Path, xs: list[np.ndarray]) -> np.ndarray:
    """The written file run by its runtime (one thread) on each of ``xs``, outputs concatenated."""
    if fmt == "pte":
        method = pte_method(path.read_bytes())
        return np.concatenate([method.execute((torch.from_numpy(x),))[0].numpy() for x in xs])
    if fmt == "tflite":  # NHWC (int8: quantized) at the file's edges; litert.run converts both ways
        return litert.run(litert.interpreter(path), xs)
    ov = try_import("openvino")

    request = openvino_compile(ov.Core().read_model(str(path))).create_infer_request()
    return np.concatenate([np.array(request.infer({0: x})[0]) for x in xs])


def verify_file(fmt: str, path: Path, model: nn.Module, in_shape: tuple[int, int, int], *, data: Dataset | None,
                samples: int, is_qat: bool) -> dict[str, Any]:
    """Run a written ``.pte``, ``.tflite`` or OpenVINO IR against the torch module it was converted from.

    Args:
        fmt: ``"pte"``, ``"tflite"`` or ``"openvino"``.
        path: the written file.
        model: the torch module (the fake-quant network for a QAT export).
        in_shape: ``(channels, height, width)`` of one input.
        data: images to compare on (its evaluation split); None: seeded random inputs.
        samples: how many inputs, each at batch 1.
        is_qat: whether ``model`` is a QAT network (recorded under ``against``).

    Returns:
        ``samples``, ``inputs``, ``max_abs_diff``, ``top1_agreement``, ``against``, and ``accuracy``
        when ``data`` has labels.

    Raises:
        ValueError: outputs that are not all finite (``nas.export.verify.check_finite_outputs``).
    """
    if data is not None:
        pairs = list(batch1(data, eval_split(data), samples))
        xs, labels = [x for x, _ in pairs], np.asarray([y for _, y in pairs])
    else:
        g = torch.Generator().manual_seed(0)
        xs, labels = [torch.randn(1, *in_shape, generator=g).numpy() for _ in range(samples)], None
    out = _outputs(fmt, path, xs)
    with torch.no_grad():
        ref = np.concatenate([model(torch.from_numpy(x)).numpy() for x in xs])
    check_finite_outputs(ref, out, runtime=fmt)
    rec: dict[str, Any] = {"samples": len(xs), "inputs": f"{eval_split(data)} images" if data is not None else
                           "random inputs", "max_abs_diff": float(np.abs(ref - out).max()),
                           "top1_agreement": float((ref.argmax(1) == out.argmax(1)).mean()),
                           "against": "the fake-quant torch model" if is_qat else "the float torch model"}
    if labels is not None:
        rec["accuracy"] = float((out.argmax(1) == labels).mean())
    return rec
