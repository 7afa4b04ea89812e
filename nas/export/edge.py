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

``export_edge`` (behind ``python -m nas.export format=pte|openvino``) writes a checkpoint as a
``.pte`` program or an OpenVINO IR (``.xml`` + ``.bin``), verified against torch by running the
written file.  A missing package raises ``RuntimeUnavailable`` naming the extra that installs it.
"""

from __future__ import annotations

import io
import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["EDGE_FORMATS", "edge_summary", "export_edge", "export_model", "openvino_compile", "openvino_model", "pte_bytes",
           "pte_method", "report_path", "require", "write_openvino"]

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
    program = ETRuntime.get().load_program(data)
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


#: the CPU plugin's settings: float layers in f32 (on CPUs with AMX or AVX-512 BF16 OpenVINO would
#: otherwise run them in bf16, so an "fp32" table would time bf16), the latency hint
OPENVINO_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}


def openvino_compile(model: Any, *, threads: int = 1) -> Any:
    """``model`` compiled for OpenVINO's CPU plugin with ``threads`` inference threads, float layers in
    f32 and the latency hint (``OPENVINO_CONFIG``)."""
    import openvino as ov

    return ov.Core().compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads, **OPENVINO_CONFIG})


# --------------------------------------------------------------------------------------------
# checkpoint export


def report_path(path: Path) -> Path:
    """The export record beside ``path``: ``<file>.pte.json`` / ``<file>.xml.json``, never the ONNX
    export's ``<file>.json``, so every format of one checkpoint can sit side by side."""
    return path.with_name(path.name + ".json")


def _out_path(fmt: str, weights: str | Path, precision: str, out: str | Path | None, overwrite: bool) -> Path:
    suffix = ".pte" if fmt == "pte" else ".xml"
    path = Path(out) if out else Path(weights).with_suffix(f".{precision}{suffix}")
    if path.suffix != suffix:
        raise ValueError(f"format={fmt} writes a {suffix} file, got out={str(path)!r}: name it <file>{suffix}")
    written = [path, report_path(path)] + ([path.with_suffix(".bin")] if fmt == "openvino" else [])
    for p in written:
        if p.exists() and not overwrite:
            raise ValueError(f"{p} exists; pass overwrite=true or another out=")
    return path


def _convert(fmt: str, model: nn.Module, in_shape: tuple[int, int, int], precision: str, *, is_qat: bool,
             calib: list[np.ndarray]) -> tuple[Any, str]:
    """The ExecuTorch program bytes or OpenVINO model, and how it was made."""
    x0 = torch.zeros(1, *in_shape)
    if fmt == "pte":
        if is_qat:
            raise ValueError("a QAT checkpoint's int8 is its QDQ ONNX graph, which ExecuTorch does not read: export "
                             "the float checkpoint (fp32.ckpt or pruned.ckpt) with format=pte precision=int8 "
                             "(PT2E quantization), or this one with format=openvino or format=onnx")
        how = "fp32" if precision == "fp32" else f"PT2E int8 for XNNPACK ({len(calib)} training images)"
        return pte_bytes(model, x0, precision=precision, calib=[torch.from_numpy(c) for c in calib]), how
    if is_qat:
        from nas.compress.qat import export_qdq

        return openvino_model(None, x0, precision="int8", onnx=export_qdq(model, in_shape)), "QAT QDQ read by OpenVINO"
    how = "fp32" if precision == "fp32" else f"NNCF post-training int8 ({len(calib)} training images)"
    return openvino_model(model, x0, precision=precision, calib=calib), how


def write_openvino(model: Any, path: Path) -> int:
    """Write an ``openvino.Model`` as an IR at ``path`` (``.xml``, its ``.bin`` beside it), fp32
    weights kept fp32, atomically: the ``.bin`` first, then the ``.xml`` naming it.  The size in bytes."""
    import os
    import tempfile

    import openvino as ov

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".ov-") as tmp:
        tmp_xml = Path(tmp) / path.name
        ov.save_model(model, str(tmp_xml), compress_to_fp16=False)  # fp32 weights stay fp32
        os.replace(tmp_xml.with_suffix(".bin"), path.with_suffix(".bin"))
        os.replace(tmp_xml, path)
    return path.stat().st_size + path.with_suffix(".bin").stat().st_size


def _write(fmt: str, converted: Any, path: Path) -> int:
    """Write the file(s) atomically; their size in bytes."""
    from nas._io import atomic_write_bytes

    if fmt == "pte":
        atomic_write_bytes(path, converted)
        return len(converted)
    return write_openvino(converted, path)


def _outputs(fmt: str, path: Path, xs: list[np.ndarray]) -> np.ndarray:
    """The written file run by its runtime (one thread) on each of ``xs``, outputs concatenated."""
    if fmt == "pte":
        method = pte_method(path.read_bytes())
        return np.concatenate([method.execute((torch.from_numpy(x),))[0].numpy() for x in xs])
    import openvino as ov

    request = openvino_compile(ov.Core().read_model(str(path))).create_infer_request()
    return np.concatenate([np.array(request.infer({0: x})[0]) for x in xs])


def _verify(fmt: str, path: Path, model: nn.Module, in_shape: tuple[int, int, int], *, data: Any, samples: int, is_qat: bool) -> dict[str, Any]:
    """The written file against torch on ``samples`` images (random inputs without data): max abs
    difference, top-1 agreement, and accuracy when there are labels."""
    from nas.export.verify import batch1, eval_split

    if data is not None:
        pairs = list(batch1(data, eval_split(data), samples))
        xs, labels = [x for x, _ in pairs], np.asarray([y for _, y in pairs])
    else:
        g = torch.Generator().manual_seed(0)
        xs, labels = [torch.randn(1, *in_shape, generator=g).numpy() for _ in range(samples)], None
    out = _outputs(fmt, path, xs)
    with torch.no_grad():
        ref = np.concatenate([model(torch.from_numpy(x)).numpy() for x in xs])
    rec: dict[str, Any] = {"samples": len(xs), "inputs": f"{eval_split(data)} images" if data is not None else
                           "random inputs", "max_abs_diff": float(np.abs(ref - out).max()),
                           "top1_agreement": float((ref.argmax(1) == out.argmax(1)).mean()),
                           "against": "the fake-quant torch model" if is_qat else "the float torch model"}
    if labels is not None:
        rec["accuracy"] = float((out.argmax(1) == labels).mean())
    return rec


def _latency(fmt: str, path: Path, arch: Any, precision: str, target: Any, export: Any,
             allow_mismatch: bool) -> tuple[dict[str, Any] | None, dict[str, float] | None]:
    """The prediction by the target for this format's runtime and ``precision`` (None when the target
    is another runtime's) and, when that target's device is this CPU, the written file measured by
    the one measuring loop (median of ``export.rounds`` rounds, a fresh load each)."""
    from nas.latency import load_latency_model  # nas.latency sits above nas.export: read where a file is timed
    from nas.latency.base import how_measured
    from nas.latency.measure import measure, summarize_times
    from nas.latency.runtimes import device_identity, device_mismatch
    from nas.latency.runtimes_edge import ExecuTorchRuntime, OpenVINORuntime
    from nas.target import precision_targets

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
    cls = ExecuTorchRuntime if fmt == "pte" else OpenVINORuntime
    rt = cls(provider=t.provider, precision="fp32", threads=t.threads)  # the file decides the precision
    rounds = []
    for _ in range(export.rounds):
        run = rt.runner_for_pte(path.read_bytes(), in_shape) if fmt == "pte" else rt.runner_for_model(path, in_shape)
        rounds.append(summarize_times(measure(run, warmup=export.warmup, repeats=export.repeats,
                                              min_time_s=export.min_time_s)))
    meas = {k: float(np.median([r[k] for r in rounds])) for k in ("median_ms", "p10_ms", "p90_ms")}
    return pred, {**meas, "rounds": export.rounds, "how": how_measured(device_identity("cpu")["name"])}


def export_edge(*, fmt: str, arch_path: str | Path, weights: str | Path, precision: str, target: Any,
                out: str | Path | None = None, data: dict[str, Any] | None = None, verify_samples: int = 500,
                overwrite: bool = False, allow_mismatch: bool = False, export: Any = None,
                data_root: str | None = None) -> dict[str, Any]:
    """Export a checkpoint as an ExecuTorch program (``fmt="pte"``) or an OpenVINO IR (``"openvino"``),
    run the written file against torch, predict (and, on this CPU, measure) its latency; write
    its record (``report_path``) beside it and return the record.  Int8 of a float checkpoint is calibrated on
    ``export.calib_samples`` training images of ``data`` (default: the checkpoint's dataset)."""
    from nas._checks import check_number
    from nas._io import atomic_write_json
    from nas.arch import Arch
    from nas.compress.qat import QATNet
    from nas.data import DataSettings, load_data
    from nas.export.verify import calibration_inputs
    from nas.target import PRECISIONS, Target
    from nas.train.checkpoint import checkpoint_data_settings, load_checkpoint, model_from_checkpoint
    from nas.train.settings import ExportSettings

    if fmt not in EDGE_FORMATS:
        raise ValueError(f"format must be onnx, {' or '.join(EDGE_FORMATS)}, got {fmt!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    check_number("verify_samples", verify_samples, integer=True)
    export, target = export or ExportSettings(), Target.coerce(target)
    require(EDGE_FORMATS[fmt] + ("-int8" if fmt == "openvino" and precision == "int8" else ""))
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
                       verify_samples=verify_samples, target=target, export=export, allow_mismatch=allow_mismatch)
    rec = {"arch": str(arch_path), "weights": str(weights), **rec}
    atomic_write_json(report_path(path), rec)
    return rec


def export_model(fmt: str, model: nn.Module, arch: Any, path: Path, precision: str, *, is_qat: bool,
                 calib: list[np.ndarray], data: Any, verify_samples: int | None, target: Any, export: Any,
                 allow_mismatch: bool = False) -> dict[str, Any]:
    """Convert ``model`` (an Arch's network) to ``fmt``, write it to ``path``, run the written file
    against torch on ``verify_samples`` images of ``data`` (random inputs without data), predict its
    latency with ``target`` (when it is this format's runtime) and measure it when that target's device
    is this CPU.  Int8 of a float model is calibrated on ``calib``.  Returns the file's record."""
    from nas.cost import arch_cost

    in_shape = (arch.in_chans, arch.resolution, arch.resolution)
    converted, how = _convert(fmt, model, in_shape, precision, is_qat=is_qat, calib=calib)
    size = _write(fmt, converted, path)
    verify = _verify(fmt, path, model, in_shape, data=data, samples=verify_samples, is_qat=is_qat)
    pred, meas = _latency(fmt, path, arch, precision, target, export, allow_mismatch)
    rec = {"format": fmt, "runtime": EDGE_FORMATS[fmt], "precision": precision, "how": how, "file": str(path),
           "file_bytes": size, "params": arch_cost(arch).params, "verify": verify, "predicted": pred,
           "measured": meas, "input_shape": [1, *in_shape]}
    if pred and meas:
        rec["error_pct"] = 100.0 * (pred["ms"] - meas["median_ms"]) / meas["median_ms"]
    return rec


def edge_summary(rec: dict[str, Any]) -> list[str]:
    """The lines ``nas.export`` prints for an ``export_edge`` record."""
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
    lines.append(f"report:    {report_path(Path(rec['file']))}")
    return lines
