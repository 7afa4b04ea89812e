"""A trained network deployed: checkpoint -> ONNX -> verified against torch -> timed on the target -> card.

``export_checkpoint`` (behind ``python -m nas.export``) reads a checkpoint and calls ``export_model``,
which takes the network already loaded (``nas.train.pipeline`` calls it too).  The converters are
``nas.export``'s; the prediction and measurement ``nas.latency``'s.  The ExecuTorch and OpenVINO
formats: ``nas.train.deploy_edge``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from nas._checks import check_number
from nas._io import atomic_write_bytes, atomic_write_json
from nas.arch import Arch
from nas.compress.qat import QATNet, export_qdq, quant_settings_for
from nas.cost import arch_cost
from nas.data import Dataset, DataSettings, load_data
from nas.export.onnx import export_onnx
from nas.export.qdq import quantize_qdq
from nas.export.verify import calibration_inputs, eval_split, split_note, verify_onnx
from nas.fit.checkpoint import (
    ARCH_FILES,
    checkpoint_data_settings,
    checkpoint_target,
    dataset_record,
    load_arch_file,
    load_checkpoint,
    model_from_checkpoint,
)
from nas.latency.predict import load_latency_model, resolve_target
from nas.latency.runtimes import MeasureSettings, measure_onnx
from nas.target import PRECISIONS, Target, load_target, precision_targets, runs_here
from nas.train.card import card_path, deployment_card, write_card, write_test_files
from nas.train.settings import VERIFY_SAMPLES, ExportSettings

__all__ = ["ExportOptions", "export_checkpoint", "export_model", "int8_form_mismatch", "made_for", "onnx_bytes"]


class ExportOptions(MeasureSettings, Protocol):
    """What ``export_model`` reads of ``nas.train.settings.ExportSettings``."""

    calib_samples: int
    measure: bool


def onnx_bytes(model: nn.Module, arch: Arch, precision: str, *, is_qat: bool, data: Dataset | None,
               calib_samples: int, target: Target | None = None) -> tuple[bytes, str]:
    """Convert a network to the ONNX graph deployed for ``precision``.

    Args:
        model: the float network, or a ``QATNet`` (``is_qat``).
        arch: its Arch (input channels and resolution).
        precision: ``"fp32"`` or ``"int8"``.
        is_qat: int8 is then the QAT network's own QDQ graph (``nas.compress.qat.export_qdq``).
        data: training images calibrating onnxruntime's static PTQ (int8 of a float network).
        calib_samples: how many of them.
        target: whose runtime's QDQ form PTQ writes (``nas.export.qdq.qdq_settings_for``).

    Returns:
        The ONNX bytes and how they were made, in words.
    """
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


def made_for(target: Target, precision: str) -> Target | None:
    """The target a ``precision`` file is made for and predicted by: ``target`` when it serves that
    precision (an fp16 target the fp32 file), else its sibling (``nas.target.precision_targets``:
    jetson -> jetson_int8), None without one.  ``nas.train`` and ``nas.export`` name the same one."""
    return target if target.precision == precision else precision_targets(target).get(precision)


def int8_form_mismatch(model: nn.Module, target: Target, where: str) -> str | None:
    """Why a QAT network's int8 graph is not the form ``target``'s runtime runs (TensorRT's symmetric
    int8 predicted or measured as onnxruntime's u8/s8, or the reverse), in one line; None when it is
    (or the network is not a QAT one)."""
    if not isinstance(model, QATNet):
        return None
    want = quant_settings_for(target)
    if model.settings.symmetric == want.symmetric:
        return None
    return (f"{where} was quantized in {model.settings.form}, but target {target.name!r} ({target.runtime}) runs "
            f"{want.form}: its latency there would not be this graph's")


def _latency(onnx: bytes, arch: Arch, precision: str, target: Target, export: ExportOptions,
             allow_mismatch: bool) -> tuple[dict[str, Any] | None, dict[str, float] | None]:
    """The prediction by the target for ``precision`` (None without one) and, when that target is
    this machine, the measurement."""
    t = made_for(target, precision)
    if t is None:
        return None, None
    pred = load_latency_model(t, allow_mismatch=allow_mismatch).explain(arch).record(t.name)
    meas = None
    if export.measure and runs_here(t):
        meas = measure_onnx(onnx, (arch.in_chans, arch.resolution, arch.resolution), t, export)
    return pred, meas


def export_model(model: nn.Module, arch: Arch, *, precision: str, is_qat: bool, target: Target, out_path: Path,
                 data: Dataset | None, verify_samples: int, export: ExportOptions, allow_mismatch: bool = False,
                 source: dict[str, Any] | None = None) -> dict[str, Any]:
    """Convert a loaded network to ONNX, verify it, predict and measure it, and write it.

    Args:
        model, arch, precision, is_qat, target: as for ``onnx_bytes``.
        out_path: the ONNX file; its record is written beside it as ``.json``.
        data: images to verify on (and calibrate PTQ with); None: random inputs, no PTQ.
        verify_samples: how many.
        export: calibration and timing settings.
        allow_mismatch: predict with a table measured on another device.
        source: what it was exported from, first in the record.

    Returns:
        The record written beside ``out_path``.
    """
    in_shape = (arch.in_chans, arch.resolution, arch.resolution)
    onnx, how = onnx_bytes(model, arch, precision, is_qat=is_qat, data=data, calib_samples=export.calib_samples,
                           target=made_for(target, precision) or target)
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


def _load(weights: str | Path, arch_path: str | Path | None) -> tuple[dict[str, Any], Arch, nn.Module]:
    """The checkpoint, its Arch (``arch_path``'s, else the one it records) and its network."""
    ckpt = load_checkpoint(weights)
    if arch_path is not None:
        arch = load_arch_file(arch_path)
    elif isinstance(ckpt.get("arch"), Mapping):
        arch = Arch.from_dict(dict(ckpt["arch"]))
    else:
        raise ValueError(f"weights={weights} is a bare state dict that records no Arch: give arch=<file> "
                         f"(one of {ARCH_FILES})")
    return ckpt, arch, model_from_checkpoint(ckpt, arch, where=str(weights))


def export_checkpoint(
    *,
    arch_path: str | Path | None = None,
    weights: str | Path,
    precision: str,
    target: Target | str | Mapping[str, Any] | None = None,
    out: str | Path | None = None,
    data: Mapping[str, Any] | None = None,
    verify_samples: int = VERIFY_SAMPLES,
    overwrite: bool = False,
    allow_mismatch: bool = False,
    export: ExportSettings | None = None,
    data_root: str | None = None,
) -> dict[str, Any]:
    """Export a training checkpoint to ONNX, verify it, time it and write its deployment card.

    The ONNX file (fp32, the QAT network's own QDQ graph, or static PTQ int8 in the target runtime's
    form) is checked against torch, predicted by the target for its precision (``made_for``; measured
    when that is this machine), and its record (``<out>.json``), card and test file list written
    beside it.  Every input, and a QAT graph's int8 form (``int8_form_mismatch``), is checked first.

    Args:
        arch_path: an Arch file (``load_arch_file``: an Arch, or a ``nas.train`` record holding one);
            None: the Arch the checkpoint records (every ``nas.train`` checkpoint does).
        weights: the checkpoint (``fp32.ckpt``, ``pruned.ckpt``, ``qat.ckpt``) or a bare state dict.
        precision: ``"fp32"`` or ``"int8"`` (a QAT checkpoint exports only as int8).
        target: the deployment target: a ``Target``, a target name (read with ``nas.load_target``) or a
            dict of its fields; None: the one the checkpoint records (``nas.train``'s), else ``cpu``.
        out: the ONNX file; default ``<weights>.<precision>.onnx``.
        data: a ``data`` group replacing the checkpoint's dataset (verification and calibration images).
        verify_samples: images (batch 1) the export is checked on.
        overwrite: replace existing outputs.
        allow_mismatch: predict with a table of another device, or a QAT graph of another int8 form.
        export: calibration and timing settings (``ExportSettings``; default its defaults).
        data_root: the folder of the checkpoint's image dataset, when it moved.

    Returns:
        The export record: ``target`` (name, where it came from), ``precision``, ``how``, ``onnx``,
        ``file_bytes``, ``params``, ``verify``, ``predicted``, ``measured``, ``input_shape``
        (``error_pct`` with both, ``card`` with data, ``int8_form_mismatch`` when allowed).

    Raises:
        TypeError: ``target`` is none of those.
        ValueError: an unknown precision, fp32 of a QAT checkpoint, a checkpoint that does not match the
            Arch, an existing output without ``overwrite``, int8 of a float checkpoint without data, a QAT
            graph of another int8 form than the target's (without ``allow_mismatch``).
        FileNotFoundError: a missing checkpoint or Arch file.

    Example::

        rec = nas.export_checkpoint(weights="runs/train/m0/qat.ckpt", precision="int8")  # its own target
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    check_number("verify_samples", verify_samples, integer=True)
    ckpt, arch, model = _load(weights, arch_path)
    is_qat = isinstance(model, QATNet)
    if is_qat and precision == "fp32":
        raise ValueError(f"{weights} is a QAT (int8) checkpoint: export it with precision=int8, or give the float "
                         f"checkpoint (fp32.ckpt or pruned.ckpt) for precision=fp32")
    target, made, told = _export_target(target, ckpt, model, str(weights), precision, allow_mismatch)
    out_path = Path(out) if out else Path(weights).with_suffix(f".{precision}.onnx")
    for p in (out_path, out_path.with_suffix(".json")):
        if p.exists() and not overwrite:
            raise ValueError(f"{p} exists; pass overwrite=true or another out=")
    dsettings = checkpoint_data_settings(ckpt, arch, data=data, data_root=data_root)
    ds = load_data(DataSettings.from_dict(dsettings)) if dsettings else None
    if ds is not None and (ds.in_chans, ds.resolution) != (arch.in_chans, arch.resolution):
        raise ValueError(f"data {ds.name!r} gives {ds.in_chans}x{ds.resolution}px images but the Arch takes "
                         f"{arch.in_chans}x{arch.resolution}px")
    if precision == "int8" and not is_qat and ds is None:
        raise ValueError("int8 export of a float checkpoint calibrates onnxruntime's PTQ on training images: "
                         "give data=<dataset> (the checkpoint records none)")
    rec = export_model(model, arch, precision=precision, is_qat=is_qat, target=target, out_path=out_path, data=ds,
                       verify_samples=verify_samples, export=export or ExportSettings(), allow_mismatch=allow_mismatch,
                       source={"arch": str(arch_path) if arch_path is not None else f"{weights} (its own)",
                               "weights": str(weights), **told})
    if ds is not None:
        rec["card"] = _card(rec, Path(weights).stem, arch, ds, made)
    return rec


def _export_target(given: Target | str | Mapping[str, Any] | None, ckpt: Mapping[str, Any], model: nn.Module,
                   weights: str, precision: str, allow_mismatch: bool) -> tuple[Target, Target, dict[str, Any]]:
    """``(target, made, record)`` of an export: the target given, else the checkpoint's, else cpu; the
    one its precision is made for (``made_for``); what the export record says of them (``target``,
    and ``int8_form_mismatch`` when allowed).  A QAT graph of another int8 form than ``made``'s
    runtime runs raises ``ValueError`` unless ``allow_mismatch``."""
    given = resolve_target(given) if given is not None else None
    recorded = checkpoint_target(ckpt, weights)
    target = given or recorded or load_target("cpu")
    origin = "given" if given else "the checkpoint's" if recorded else "cpu: the checkpoint records no target"
    made = made_for(target, precision) or target
    form = int8_form_mismatch(model, made, weights) if precision == "int8" else None
    if form and not allow_mismatch:
        fix = (f"conf={recorded.name}, the target it was trained for" if recorded and recorded.name != made.name
               else "a target whose runtime runs that form")
        raise ValueError(f"{form}; export it for {fix}, or run QAT for {made.name} (nas.train conf={made.name}); "
                         "allow_mismatch=true exports it anyway")
    told = {"target": {"name": made.name, "from": origin, "of": target.name}}
    return target, made, {**told, "int8_form_mismatch": form} if form else told


def _card(rec: dict[str, Any], variant: str, arch: Arch, ds: Dataset, target: Target) -> str:
    """Write the deployment card of an export record beside its file; the card's path."""
    files = write_test_files(ds, rec["onnx"], limit=rec["verify"]["samples"])
    write_card(deployment_card(
        file=rec["onnx"], variant=variant, precision=rec["precision"], arch=arch, data=dataset_record(ds),
        accuracy=rec["verify"].get("onnx_accuracy"), split=eval_split(ds), split_note=split_note(ds),
        predicted=rec["predicted"], measured=rec["measured"], target=target, files=files), rec["onnx"])
    return str(card_path(rec["onnx"]))
