"""One trained network -> ONNX (fp32, its own QAT QDQ, or onnxruntime PTQ int8), verified against
torch with onnxruntime, its latency predicted and (when the target is this machine) measured.

``export_model`` takes the network already loaded; ``nas.train.checkpoint.export_checkpoint``
(behind ``python -m nas.export``) reads a checkpoint and calls it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from nas._io import atomic_write_bytes, atomic_write_json
from nas.arch import Arch
from nas.cost import arch_cost
from nas.data import Dataset
from nas.export.verify import MeasureSettings, batch1, calibration_inputs, eval_split, measure_onnx
from nas.target import Target, precision_targets, runs_here

__all__ = ["ExportOptions", "export_model", "onnx_bytes", "verify_onnx"]


class ExportOptions(MeasureSettings, Protocol):
    """What ``export_model`` reads of ``nas.train.settings.ExportSettings``."""

    calib_samples: int
    measure: bool


def onnx_bytes(model: nn.Module, arch: Arch, precision: str, *, is_qat: bool, data: Dataset | None,
               calib_samples: int, target: Target | None = None) -> tuple[bytes, str]:
    """The ONNX model and how it was made: fp32, the QAT network's own QDQ, or onnxruntime's static PTQ
    calibrated on ``calib_samples`` training images of ``data`` with the settings for ``target``'s
    runtime (``nas.compress.ptq.qdq_settings_for``: symmetric int8 for TensorRT)."""
    from nas.compress.ptq import quantize_qdq
    from nas.compress.qat import export_qdq
    from nas.export.onnx import export_onnx

    in_shape = (arch.in_chans, arch.resolution, arch.resolution)
    x0 = torch.zeros(1, *in_shape)
    if precision == "fp32":
        return export_onnx(model, x0, exporter="torchscript"), "fp32"
    if is_qat:
        acts = ("int8 symmetric per-tensor activations, float biases" if model.settings.symmetric else
                "uint8 per-tensor activations")
        return export_qdq(model, in_shape), f"QAT QDQ (int8 per-channel symmetric weights, {acts}, BN folded)"
    trt = target is not None and target.runtime == "tensorrt"
    return (quantize_qdq(export_onnx(model, x0, exporter="torchscript"),
                         calibration_inputs(data, calib_samples, seed=0), target=target),
            f"onnxruntime static PTQ ({calib_samples} training images"
            + ("; TensorRT form: symmetric int8, zero point 0)" if trt else ")"))


def verify_onnx(onnx: bytes, model: nn.Module, in_shape: tuple[int, int, int], *, data: Dataset | None,
                samples: int, is_qat: bool) -> dict[str, Any]:
    """onnxruntime against torch on ``samples`` images of ``data``'s evaluation split (random inputs
    without data): max abs difference, top-1 agreement, and accuracy when there are labels."""
    from nas.export.onnx import ort_session

    if data is not None:
        xs = [x for x, _ in batch1(data, eval_split(data), samples)]
        labels = [y for _, y in batch1(data, eval_split(data), samples)]
    else:
        g = torch.Generator().manual_seed(0)
        xs = [torch.randn(1, *in_shape, generator=g).numpy() for _ in range(samples)]
        labels = None
    sess = ort_session(onnx, threads=1)
    name = sess.get_inputs()[0].name
    with torch.no_grad():
        ref = np.concatenate([model(torch.from_numpy(x)).numpy() for x in xs])
    got = np.concatenate([sess.run(None, {name: x})[0] for x in xs])
    verify: dict[str, Any] = {"samples": len(xs),
                              "inputs": f"{eval_split(data)} images" if data is not None else "random inputs",
                              "max_abs_diff": float(np.abs(ref - got).max()),
                              "top1_agreement": float((ref.argmax(1) == got.argmax(1)).mean()),
                              "against": "the float torch model" if not is_qat else "the fake-quant torch model"}
    if labels is not None:
        verify["onnx_accuracy"] = float((got.argmax(1) == np.asarray(labels)).mean())
    return verify


def _latency(onnx: bytes, arch: Arch, precision: str, target: Target, export: ExportOptions,
             allow_mismatch: bool) -> tuple[dict[str, Any] | None, dict[str, float] | None]:
    """The prediction by the target for ``precision`` (None without one) and, when that target is
    this machine, the measurement."""
    from nas.latency import load_latency_model

    t = target if target.precision == precision else precision_targets(target).get(precision)
    if t is None:
        return None, None
    p = load_latency_model(t, allow_mismatch=allow_mismatch).explain(arch)
    pred = p.record(t.name)
    meas = None
    if export.measure and runs_here(t):
        meas = measure_onnx(onnx, (arch.in_chans, arch.resolution, arch.resolution), t, export)
    return pred, meas


def export_model(model: nn.Module, arch: Arch, *, precision: str, is_qat: bool, target: Target, out_path: Path,
                 data: Dataset | None, verify_samples: int, export: ExportOptions, allow_mismatch: bool = False,
                 source: dict[str, Any] | None = None) -> dict[str, Any]:
    """Export, verify, predict and measure; write ``out_path`` and its ``.json`` record; return the record
    (``source``: what it was exported from, first in the record)."""
    in_shape = (arch.in_chans, arch.resolution, arch.resolution)
    onnx, how = onnx_bytes(model, arch, precision, is_qat=is_qat, data=data, calib_samples=export.calib_samples,
                           target=target)
    verify = verify_onnx(onnx, model, in_shape, data=data, samples=verify_samples, is_qat=is_qat)
    pred, meas = _latency(onnx, arch, precision, target, export, allow_mismatch)
    rec = {**(source or {}), "precision": precision, "how": how, "onnx": str(out_path), "file_bytes": len(onnx),
           "params": arch_cost(arch).params, "verify": verify, "predicted": pred, "measured": meas,
           "input_shape": [1, *in_shape]}
    if pred and meas:
        rec["error_pct"] = 100.0 * (pred["ms"] - meas["median_ms"]) / meas["median_ms"]
    atomic_write_bytes(out_path, onnx)
    atomic_write_json(out_path.with_suffix(".json"), rec)
    return rec
