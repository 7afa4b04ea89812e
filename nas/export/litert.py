"""LiteRT (formerly TensorFlow Lite) flatbuffers (``.tflite``) from a torch module, and the interpreter
that runs them: the converter the ``litert`` latency runtime times and ``nas.export format=tflite`` writes.

- ``tflite_bytes``: ``litert-torch`` converts the module with channels-last input (``to_channel_last_io``),
  and channels-last output where it is an image (4-D): a block's graph then starts and ends in NHWC,
  as it sits inside a converted network, with no transposes at its edges; a network takes an NHWC
  image and gives ``(1, classes)`` logits.  int8 is full-integer static quantization by
  ``ai-edge-quantizer`` (``INT8_SCHEME``), calibrated on a representative dataset: every quantizable
  op runs in int8, and the graph's input and output are int8 too, with their scale and zero point
  in the file (``io_spec``).
- ``interpreter``: ``ai_edge_litert``'s interpreter with ``threads`` threads and LiteRT's default CPU
  delegate, XNNPACK (``xnnpack_partitions`` counts the delegated partitions).
- ``run``: NCHW float inputs in, NCHW (or 2-D) float outputs back: transposed, quantized and
  dequantized as the file's input and output ask.

``write_tflite`` writes a file atomically.  The packages load only where a graph is converted or run
(``nas.latency.runtimes.edge.require("litert")`` checks them and names the extra that installs them).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from nas._io import atomic_write_bytes
from nas._optional import try_import

__all__ = ["INT8_SCHEME", "LAYOUT", "interpreter", "io_spec", "output", "run", "set_input", "tflite_bytes",
           "write_tflite", "xnnpack_partitions"]

#: how an int8 graph is quantized (the tables' metadata and the export records say it in these words)
INT8_SCHEME = ("ai-edge-quantizer static_wi8_ai8: int8 activations (asymmetric, per tensor), int8 weights "
               "(symmetric, per channel), int8 input and output (full integer)")
#: the layout of a 4-D input or output of every graph written here
LAYOUT = "NHWC"


class _QuietConverter(logging.Filter):
    """Drops litert-torch's and ai-edge-quantizer's INFO records on the root logger (``Use JAX lowering:
    aten.add.Tensor`` per op lowered, ``Serializing model...`` per graph quantized), which a command's
    logging (INFO on the root) would print for every block of a profile."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.INFO or not any(p in record.pathname for p in ("litert_torch", "ai_edge_quantizer"))


def _converter() -> Any:
    """``litert_torch``, quiet: no progress lines, no INFO lines from it, jax or its C++ converter."""
    # TF_CPP_MIN_LOG_LEVEL is read when the converter's C++ library loads: its INFO line per graph
    # ("Estimated count of arithmetic ops") would otherwise print for every block a profile converts
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    litert_torch = try_import("litert_torch")

    litert_torch.config.show_progress = False
    root = logging.getLogger()
    if not any(isinstance(f, _QuietConverter) for f in root.filters):
        root.addFilter(_QuietConverter())
    logging.getLogger("jax").setLevel(logging.WARNING)  # "Unable to initialize backend 'tpu'" on a CPU machine
    return litert_torch


def _nhwc(x: np.ndarray | torch.Tensor) -> np.ndarray:
    a = x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    a = a.astype(np.float32, copy=False)
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)) if a.ndim == 4 else a


def _quantize(data: bytes, calib: Sequence[np.ndarray | torch.Tensor]) -> bytes:
    """Full-integer int8 of a float graph by ai-edge-quantizer, calibrated on ``calib`` (NCHW batches)."""
    Interpreter = try_import("ai_edge_litert.interpreter").Interpreter
    aq = try_import("ai_edge_quantizer")
    quantizer, recipe = aq.quantizer, aq.recipe

    sig = Interpreter(model_content=data).get_signature_list()
    name, spec = next(iter(sig.items()))
    q = quantizer.Quantizer(data, recipe.static_wi8_ai8())
    # its interpreters keep every tensor and warn that this is for debugging; its calibrator draws a progress
    # bar on stderr with no switch to turn it off (quantize has one); a channel that calibration never moved
    # (an untrained network's ReLU that stays at 0) gets a zero scale, whose bias cast warns (verify_file
    # shows what that costs an export)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stderr(io.StringIO()):
            result = q.calibrate({name: [{spec["inputs"][0]: _nhwc(x)} for x in calib]}, num_threads=1)
        return bytes(q.quantize(result, enable_progress_bar=False, enable_progress_report=False).quantized_model)


def tflite_bytes(module: nn.Module, example: torch.Tensor, *, precision: str = "fp32",
                 calib: Sequence[np.ndarray | torch.Tensor] = ()) -> bytes:
    """The ``.tflite`` flatbuffer of ``module`` at ``example``'s (NCHW) shape, NHWC at its edges.

    Args:
        module: the network or block.
        example: an NCHW input of the batch and shape to convert at.
        precision: ``"fp32"`` or ``"int8"`` (full-integer, ``INT8_SCHEME``).
        calib: NCHW input batches calibrating int8 (the representative dataset); at least one.

    Returns:
        The flatbuffer's bytes.

    Raises:
        ValueError: an unknown precision, or int8 without calibration inputs.
    """
    if precision not in ("fp32", "int8"):
        raise ValueError(f"LiteRT export supports precision fp32 or int8, got {precision!r}")
    if precision == "int8" and not calib:
        raise ValueError("LiteRT int8 needs calibration inputs (calib=[...]): ai-edge-quantizer sets its scales "
                         "from them")
    litert_torch = _converter()
    module = module.eval()
    with torch.no_grad():
        image_out = module(example).dim() == 4
    wrapped = litert_torch.to_channel_last_io(module, args=[0], outputs=[0] if image_out else []).eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        data = bytes(litert_torch.convert(wrapped, (torch.from_numpy(_nhwc(example)),)).model_content())
    return _quantize(data, calib) if precision == "int8" else data


def write_tflite(data: bytes, path: str | Path) -> int:
    """Write a ``.tflite`` flatbuffer atomically; its size in bytes."""
    atomic_write_bytes(path, data)
    return len(data)


def interpreter(model: bytes | str | Path, *, threads: int = 1) -> Any:
    """An allocated ``ai_edge_litert`` interpreter of ``model`` (bytes or a file) on ``threads`` threads,
    with LiteRT's default CPU delegate, XNNPACK, applied (the ``AUTO`` op resolver)."""
    lite = try_import("ai_edge_litert.interpreter")
    Interpreter, OpResolverType = lite.Interpreter, lite.OpResolverType

    kw = {"model_content": model} if isinstance(model, (bytes, bytearray)) else {"model_path": str(model)}
    interp = Interpreter(**kw, num_threads=threads, experimental_op_resolver_type=OpResolverType.AUTO)
    interp.allocate_tensors()
    return interp


def xnnpack_partitions(interp: Any) -> int:
    """How many delegate partitions (XNNPACK's) the interpreter's graph was cut into: 1 when every op
    runs in XNNPACK, more when some run on LiteRT's own kernels between them, 0 when none is delegated."""
    return sum(d["op_name"] == "DELEGATE" for d in interp._get_ops_details())


def _tensor(d: dict[str, Any]) -> dict[str, Any]:
    shape = [int(s) for s in d["shape"]]
    out: dict[str, Any] = {"name": d["name"], "shape": shape, "dtype": np.dtype(d["dtype"]).name,
                           "layout": LAYOUT if len(shape) == 4 else None}
    scale, zero = d["quantization"]
    if np.dtype(d["dtype"]) in (np.int8, np.uint8, np.int16):
        out["quantization"] = {"scale": float(scale), "zero_point": int(zero),
                               "real_value": "scale * (q - zero_point)"}
    return out


def io_spec(interp: Any) -> dict[str, Any]:
    """The graph's first input and output: name, shape, layout (``NHWC`` for 4-D), dtype, and for an
    integer tensor its quantization (``real = scale * (q - zero_point)``)."""
    return {"input": _tensor(interp.get_input_details()[0]), "output": _tensor(interp.get_output_details()[0])}


def set_input(interp: Any, x: np.ndarray | torch.Tensor) -> np.ndarray:
    """Put an NCHW float batch into the interpreter's input (NHWC, quantized for an int8 input); the
    array it copied in."""
    d = interp.get_input_details()[0]
    a = _nhwc(x)
    if np.dtype(d["dtype"]) != np.float32:
        scale, zero = d["quantization"]
        info = np.iinfo(d["dtype"])
        a = np.clip(np.round(a / scale) + zero, info.min, info.max).astype(d["dtype"])
    interp.set_tensor(d["index"], a)
    return a


def output(interp: Any) -> np.ndarray:
    """The interpreter's first output as float32, dequantized, a 4-D one back in NCHW."""
    d = interp.get_output_details()[0]
    y = interp.get_tensor(d["index"])
    if np.dtype(d["dtype"]) != np.float32:
        scale, zero = d["quantization"]
        y = (y.astype(np.float32) - zero) * scale
    return np.ascontiguousarray(y.transpose(0, 3, 1, 2)) if y.ndim == 4 else y


def run(interp: Any, xs: Sequence[np.ndarray | torch.Tensor]) -> np.ndarray:
    """Each NCHW batch of ``xs`` through the interpreter; the float outputs concatenated."""
    outs = []
    for x in xs:
        set_input(interp, x)
        interp.invoke()
        outs.append(output(interp))
    return np.concatenate(outs)
