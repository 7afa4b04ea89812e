"""A trained network deployed as an ExecuTorch program (``.pte``), an OpenVINO IR or a LiteRT flatbuffer
(``.tflite``): converted (``nas.export.edge``, ``nas.export.litert``), written, run against torch,
predicted, (on this CPU) measured, and given its deployment card (with the file's own input: a
``.tflite`` takes NHWC, an int8 one int8 with its scale and zero point).

``export_edge`` is behind ``python -m nas.export format=pte|openvino|tflite``; ``export_model`` takes the
network already loaded (``nas.train.pipeline`` calls it for ExecuTorch, OpenVINO and LiteRT targets).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from nas._checks import check_number
from nas._io import atomic_write_json
from nas.arch import Arch
from nas.compress.qat import QATNet, export_qdq
from nas.cost import arch_cost
from nas.data import Dataset, DataSettings, load_data
from nas.export import EDGE_FORMATS, check_format, litert
from nas.export.edge import SUFFIXES, openvino_model, pte_bytes, verify_file, write_file
from nas.export.verify import calibration_inputs, eval_split, split_note
from nas.fit.checkpoint import checkpoint_data_settings, dataset_record, load_checkpoint, model_from_checkpoint
from nas.latency.predict import load_latency_model, resolve_target
from nas.latency.runtimes import (
    ExecuTorchRuntime,
    LiteRTRuntime,
    OpenVINORuntime,
    device_identity,
    measure,
    require,
    summarize_times,
)
from nas.latency.tables import how_measured
from nas.machine import device_mismatch
from nas.target import PRECISIONS, Target, precision_targets
from nas.train.card import card_path, deployment_card, write_card
from nas.train.settings import ExportSettings

__all__ = ["edge_summary", "export_edge", "export_model", "report_path"]


def report_path(path: Path) -> Path:
    """The export record beside ``path``: ``<file>.pte.json`` / ``<file>.xml.json`` / ``<file>.tflite.json``.

    Never the ONNX export's ``<file>.json``, so every format of one checkpoint can sit side by side.
    """
    return path.with_name(path.name + ".json")


def _out_path(fmt: str, weights: str | Path, precision: str, out: str | Path | None, overwrite: bool) -> Path:
    suffix = SUFFIXES[fmt]
    path = Path(out) if out else Path(weights).with_suffix(f".{precision}{suffix}")
    if path.suffix != suffix:
        raise ValueError(f"format={fmt} writes a {suffix} file, got out={str(path)!r}: name it <file>{suffix}")
    written = [path, report_path(path), card_path(path)] + ([path.with_suffix(".bin")] if fmt == "openvino" else [])
    for p in written:
        if p.exists() and not overwrite:
            raise ValueError(f"{p} exists; pass overwrite=true or another out=")
    return path


def _convert(fmt: str, model: nn.Module, in_shape: tuple[int, int, int], precision: str, *, is_qat: bool,
             calib: list[np.ndarray]) -> tuple[Any, str]:
    """The ExecuTorch program or ``.tflite`` bytes, or the OpenVINO model, and how it was made."""
    x0 = torch.zeros(1, *in_shape)
    if fmt == "tflite":
        if is_qat:
            raise ValueError("a QAT checkpoint's int8 is its QDQ ONNX graph, which litert-torch does not convert: "
                             "export the float checkpoint (fp32.ckpt or pruned.ckpt) with format=tflite "
                             "precision=int8 (ai-edge-quantizer), or this one with format=openvino or format=onnx")
        how = "fp32" if precision == "fp32" else f"ai-edge-quantizer full-integer int8 ({len(calib)} training images)"
        return litert.tflite_bytes(model, x0, precision=precision, calib=calib), how
    if fmt == "pte":
        if is_qat:
            raise ValueError("a QAT checkpoint's int8 is its QDQ ONNX graph, which ExecuTorch does not read: export "
                             "the float checkpoint (fp32.ckpt or pruned.ckpt) with format=pte precision=int8 "
                             "(PT2E quantization), or this one with format=openvino or format=onnx")
        how = "fp32" if precision == "fp32" else f"PT2E int8 for XNNPACK ({len(calib)} training images)"
        return pte_bytes(model, x0, precision=precision, calib=[torch.from_numpy(c) for c in calib]), how
    if is_qat:
        return openvino_model(None, x0, precision="int8", onnx=export_qdq(model, in_shape)), "QAT QDQ read by OpenVINO"
    how = "fp32" if precision == "fp32" else f"NNCF post-training int8 ({len(calib)} training images)"
    return openvino_model(model, x0, precision=precision, calib=calib), how


def _latency(fmt: str, path: Path, arch: Arch, precision: str, target: Target, export: ExportSettings,
             allow_mismatch: bool) -> tuple[dict[str, Any] | None, dict[str, float] | None]:
    """The prediction by the target for this format's runtime and ``precision`` (None when the target
    is another runtime's) and, when that target's device is this CPU, the written file measured by
    the one measuring loop (median of ``export.rounds`` rounds, a fresh load each)."""
    runtime = EDGE_FORMATS[fmt]
    if target.runtime != runtime:
        return None, None
    t = target if target.precision == precision else precision_targets(target).get(precision)
    if t is None:
        return None, None
    p = load_latency_model(t, allow_mismatch=allow_mismatch).explain(arch)
    pred = p.record(t.name)
    if not export.measure or t.device.kind != "cpu" or device_mismatch(t.to_dict()["device"], device_identity("cpu")):
        return pred, None
    in_shape = (arch.in_chans, arch.resolution, arch.resolution)
    cls = {"pte": ExecuTorchRuntime, "openvino": OpenVINORuntime, "tflite": LiteRTRuntime}[fmt]
    rt = cls(provider=t.provider, precision="fp32", threads=t.threads)  # the file decides the precision
    runner = {"pte": lambda: rt.runner_for_pte(path.read_bytes(), in_shape),
              "openvino": lambda: rt.runner_for_model(path, in_shape),
              "tflite": lambda: rt.runner_for_tflite(str(path), in_shape)}[fmt]
    rounds = []
    for _ in range(export.rounds):
        run = runner()
        rounds.append(summarize_times(measure(run, warmup=export.warmup, repeats=export.repeats,
                                              min_time_s=export.min_time_s)))
    meas = {k: float(np.median([r[k] for r in rounds])) for k in ("median_ms", "p10_ms", "p90_ms")}
    return pred, {**meas, "rounds": export.rounds, "how": how_measured(device_identity("cpu")["name"])}


def export_edge(*, fmt: str, arch_path: str | Path, weights: str | Path, precision: str, target: Target | str | Mapping[str, Any],
                out: str | Path | None = None, data: dict[str, Any] | None = None, verify_samples: int = 500,
                overwrite: bool = False, allow_mismatch: bool = False, export: ExportSettings | None = None,
                data_root: str | None = None) -> dict[str, Any]:
    """Export a checkpoint as an ExecuTorch program, an OpenVINO IR or a LiteRT ``.tflite``, verified and timed.

    The written file is run against torch, its latency predicted by the target (when it is this
    format's runtime) and measured when that target's device is this CPU; its record
    (``report_path``) and, with data, its deployment card (``card_path``) are written beside it.

    Args:
        fmt: ``"pte"`` (ExecuTorch, XNNPACK), ``"openvino"`` (an IR: ``.xml`` + ``.bin``) or ``"tflite"``
            (LiteRT, XNNPACK; NHWC input).
        arch_path: the Arch file.
        weights: the checkpoint.
        precision: ``"fp32"`` or ``"int8"`` (int8 of a float checkpoint is calibrated on
            ``export.calib_samples`` training images of ``data``: PT2E for ExecuTorch, NNCF for OpenVINO,
            ai-edge-quantizer's full-integer int8 for LiteRT).
        target: the deployment target: a ``Target``, a target name (read with ``nas.load_target``) or a dict of its fields.
        out: the file; default ``<weights>.<precision>.pte`` / ``.xml`` / ``.tflite``.
        data: a ``data`` group replacing the checkpoint's dataset.
        verify_samples: images (batch 1) the file is checked on.
        overwrite: replace existing outputs.
        allow_mismatch: predict with a table measured on another device.
        export: calibration and timing settings (``ExportSettings``).
        data_root: the folder of the checkpoint's image dataset, when it moved.

    Returns:
        The record: ``arch``, ``weights``, ``format``, ``runtime``, ``precision``, ``how``, ``file``,
        ``file_bytes``, ``params``, ``verify``, ``predicted``, ``measured``, ``input_shape``, ``io`` (a
        ``.tflite``'s input and output), ``card`` (with data).

    Raises:
        TypeError: ``target`` is none of those.
        ValueError: an unknown format or precision, fp32 of a QAT checkpoint, a QAT checkpoint as
            ``.pte`` or ``.tflite``, an existing output without ``overwrite``, int8 of a float checkpoint
            without data.
        RuntimeUnavailable: the format's runtime is not installed (the message names the extra).
    """
    if fmt not in EDGE_FORMATS:
        check_format(fmt)
        raise ValueError("format=onnx is nas.train.deploy's export_checkpoint, not an edge format")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    check_number("verify_samples", verify_samples, integer=True)
    export, target = export or ExportSettings(), resolve_target(target)
    require(EDGE_FORMATS[fmt] + ("-int8" if fmt in ("openvino", "tflite") and precision == "int8" else ""))
    arch = Arch.load(str(arch_path))
    ckpt = load_checkpoint(weights)
    model = model_from_checkpoint(ckpt, arch, where=str(weights)).eval()
    is_qat = isinstance(model, QATNet)
    if is_qat and precision == "fp32":
        raise ValueError(f"{weights} is a QAT (int8) checkpoint: export it with precision=int8, or give the float "
                         f"checkpoint (fp32.ckpt or pruned.ckpt) for precision=fp32")
    path = _out_path(fmt, weights, precision, out, overwrite)
    dsettings = checkpoint_data_settings(ckpt, arch, data=data, data_root=data_root)
    ds = load_data(DataSettings.from_dict(dsettings)) if dsettings else None
    in_shape = (arch.in_chans, arch.resolution, arch.resolution)
    if ds is not None and (ds.in_chans, ds.resolution) != in_shape[:2]:
        raise ValueError(f"data {ds.name!r} gives {ds.in_chans}x{ds.resolution}px images but the Arch takes "
                         f"{arch.in_chans}x{arch.resolution}px")
    if precision == "int8" and not is_qat and ds is None:
        raise ValueError("int8 export of a float checkpoint calibrates on training images: give "
                         "data=<dataset> (the checkpoint records none)")
    calib = calibration_inputs(ds, export.calib_samples, seed=0) if precision == "int8" and not is_qat else []
    rec = export_model(fmt, model, arch, path, precision, is_qat=is_qat, calib=calib, data=ds,
                       verify_samples=verify_samples, target=target, export=export, allow_mismatch=allow_mismatch,
                       variant=Path(weights).stem)
    rec = {"arch": str(arch_path), "weights": str(weights), **rec}
    atomic_write_json(report_path(path), rec)
    return rec


def export_model(fmt: str, model: nn.Module, arch: Arch, path: Path, precision: str, *, is_qat: bool,
                 calib: list[np.ndarray], data: Dataset | None, verify_samples: int | None, target: Target, export: ExportSettings,
                 allow_mismatch: bool = False, variant: str | None = None) -> dict[str, Any]:
    """Convert a loaded network to ``fmt``, write it, verify the written file, predict and measure it,
    and (with ``data``) write its deployment card beside it.

    Args:
        fmt: ``"pte"``, ``"openvino"`` or ``"tflite"``.
        model: an Arch's network (a ``QATNet`` with ``is_qat``: OpenVINO reads its QDQ graph).
        arch: its Arch.
        path: the file to write.
        precision: ``"fp32"`` or ``"int8"``.
        is_qat: whether ``model`` is a QAT network.
        calib: numpy input batches calibrating int8 of a float model.
        data: images to verify on; None: random inputs.
        verify_samples: how many.
        target: predicts the latency when it is this format's runtime; measured when its device is this CPU.
        export: timing settings.
        allow_mismatch: predict with a table measured on another device.
        variant: the card's name for it (default the file's stem).

    Returns:
        The file's record (not written: the caller writes it, ``report_path``); ``card``: the card's path.
    """
    in_shape = (arch.in_chans, arch.resolution, arch.resolution)
    converted, how = _convert(fmt, model, in_shape, precision, is_qat=is_qat, calib=calib)
    size = write_file(fmt, converted, path)
    verify = verify_file(fmt, path, model, in_shape, data=data, samples=verify_samples, is_qat=is_qat)
    pred, meas = _latency(fmt, path, arch, precision, target, export, allow_mismatch)
    io = litert.io_spec(litert.interpreter(path)) if fmt == "tflite" else None
    rec = {"format": fmt, "runtime": EDGE_FORMATS[fmt], "precision": precision, "how": how, "file": str(path),
           "file_bytes": size, "params": arch_cost(arch).params, "verify": verify, "predicted": pred,
           "measured": meas, "input_shape": io["input"]["shape"] if io else [1, *in_shape], **({"io": io} if io else {})}
    if pred and meas:
        rec["error_pct"] = 100.0 * (pred["ms"] - meas["median_ms"]) / meas["median_ms"]
    if data is not None:
        write_card(deployment_card(
            file=path, variant=variant or path.stem, precision=precision, arch=arch, data=dataset_record(data),
            accuracy=verify.get("accuracy"), split=eval_split(data), split_note=split_note(data), predicted=pred,
            measured=meas, target=target, io=io), path)
        rec["card"] = str(card_path(path))
    return rec


def edge_summary(rec: dict[str, Any]) -> list[str]:
    """The lines ``python -m nas.export`` prints for an export record.

    Args:
        rec: what ``export_edge`` returned.

    Returns:
        The file, its verification, prediction, measurement and record, one line each.
    """
    v = rec["verify"]
    check = (f"max |{rec['runtime']} - torch| = {v['max_abs_diff']:.3g}" if rec["precision"] == "fp32"
             else f"top-1 agreement with {v['against']}: {100 * v['top1_agreement']:.2f}%")
    acc = f"; accuracy {100 * v['accuracy']:.2f}%" if "accuracy" in v else ""
    lines = [f"exported {rec['precision']} {rec['format']} ({rec['how']}): {rec['file']} "
             f"({rec['file_bytes'] / 1024:.1f} KiB, {rec['params']:,} params)",
             f"verified on {v['samples']} {v['inputs']} with {rec['runtime']}: {check}{acc}"]
    p, m = rec["predicted"], rec["measured"]
    lines.append(f"predicted: {p['label']} [target {p['target']}]" if p else
                 f"predicted: no {rec['runtime']} {rec['precision']} target to predict with (conf=<a {rec['runtime']} target>)")
    lines.append(f"measured:  {m['median_ms']:.4f} ms on this machine (p10 {m['p10_ms']:.4f}, p90 {m['p90_ms']:.4f}); "
                 f"prediction error {rec['error_pct']:+.1f}%" if m else
                 "measured:  not measured (the target is not this machine's CPU with this runtime)")
    if rec.get("io"):
        i = rec["io"]["input"]
        q = f", quantized: scale {i['quantization']['scale']:.6g}, zero point {i['quantization']['zero_point']}" \
            if i.get("quantization") else ""
        lines.append(f"input:     {'x'.join(map(str, i['shape']))} {i['layout']} {i['dtype']}{q}")
    lines.append(f"report:    {report_path(Path(rec['file']))}")
    if rec.get("card"):
        lines.append(f"card:      {rec['card']} (input, preprocessing, classes, accuracy, latency: docs/train.md)")
    return lines
