"""TensorRT int8: hwnas's QDQ export against NVIDIA Model Optimizer (ModelOpt), on this CPU.

For a TensorRT target (``conf=jetson_int8``, ``conf=gpu_int8``) hwnas writes symmetric int8 QDQ
ONNX: zero point 0, per-channel weights, float biases, Q/DQ on the inputs of Conv / Gemm / MatMul /
Add.  ModelOpt (``nvidia-modelopt``) is NVIDIA's own library for that form.  This script trains a
few networks of the ``tiny`` space briefly on the embedded digits data and quantizes each one five
ways, all calibrated on the same training images:

    hwnas_ptq        nas.export.qdq.quantize_qdq(target=jetson_int8): onnxruntime static QDQ
    hwnas_qat        nas.compress.qat with quant_settings_for(jetson_int8), fine-tuned, export_qdq
    modelopt_ptq     modelopt.torch.quantization, mtq.INT8_DEFAULT_CFG, max calibration, exported
                     as ModelOpt's TensorRT example does (get_onnx_bytes_and_metadata, fp32 weights)
    modelopt_qat     the same, fine-tuned with the same epochs / lr / batches as hwnas_qat
    modelopt_onnx    modelopt.onnx.quantization.quantize on the fp32 ONNX (int8, its default entropy
                     calibration on the CPU, fp32 kept as the high-precision type), in a child process:
                     it patches onnxruntime's calibrators for the rest of the process, and the child
                     records whether nas.export.qdq still works after it

and reports, per network and variant: (i) the format — every QuantizeLinear's zero point int8 and
0, per-channel int8 weights (stored as int8, or float behind a QuantizeLinear), which op types read
a dequantized activation, BatchNormalization nodes left, whether ``onnx.checker`` passes and
onnxruntime (CPU) runs it; (ii) top-1 on the digits validation split, agreement with the fp32
ONNX and the logits' relative error, all in onnxruntime CPU.  TensorRT engine speed is not
measured (no GPU here).

ModelOpt is optional: without it the ModelOpt variants are reported as "modelopt not installed"
(the import error in ``modelopt_import``).  Its torch exporter and its ONNX quantizer need
``nvidia-modelopt`` plus parts of its ``[onnx]`` extra (onnx-graphsurgeon, onnxconverter-common,
onnxslim, polygraphy, lief); without them the fake-quant model is exported with
``torch.onnx.export`` instead (each variant's ``how`` says which) and the ONNX variant fails with
the import error.

    taskset -c 0 python -m benchmarks modelopt            # 3 networks (about 5 min on one core)
    taskset -c 0 python -m benchmarks modelopt --quick    # 1 network, shorter training

Writes benchmarks/results/modelopt.json (``--out``) and prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from importlib import metadata
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import torch

import nas
from benchmarks._qdq import describe_format, ort_logits
from benchmarks.harness import RESULTS, command, cpu_model
from nas._io import atomic_write_text
from nas._optional import try_import
from nas.compress.qat import calibrate, export_qdq, prepare_qat, quant_settings_for, set_observers
from nas.data import DataSettings, adapt_arch, load_data
from nas.export.onnx import export_onnx
from nas.export.qdq import quantize_qdq
from nas.fit.loop import Schedule, build_optimizer, fit, train_epochs
from nas.fit.settings import FitSettings
from nas.target import load_target

VARIANTS = ("hwnas_ptq", "hwnas_qat", "modelopt_ptq", "modelopt_qat", "modelopt_onnx")
TARGET = "jetson_int8"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="one network, shorter training (about 1.5 min)")
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="tiny-space architectures (nas.load_space('tiny').random(seed)); default 1 2 3 (quick: 1)")
    p.add_argument("--epochs", type=int, default=None, help="fp32 training epochs (default 30, quick 15)")
    p.add_argument("--qat-epochs", type=int, default=None,
                   help="QAT fine-tuning epochs, both libraries (default 4, quick 2; the last with frozen ranges "
                        "for hwnas)")
    p.add_argument("--qat-lr", type=float, default=0.0005, help="QAT learning rate (hwnas's qat.lr default)")
    p.add_argument("--calib", type=int, default=512, help="calibration images (training split), every variant")
    p.add_argument("--target", default=TARGET, help="a TensorRT target (conf name)")
    p.add_argument("--out", type=Path, default=RESULTS / "modelopt.json")
    p.add_argument("--onnx-worker", type=Path, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.seeds = a.seeds or ([1] if a.quick else [1, 2, 3])
    a.epochs = a.epochs if a.epochs is not None else (15 if a.quick else 30)
    a.qat_epochs = a.qat_epochs if a.qat_epochs is not None else (2 if a.quick else 4)
    return a


# --------------------------------------------------------------------------------------------
# the variants


def _silenced():
    """ModelOpt prints and warns freely; keep the table readable (errors still raise)."""
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
    return stack


def modelopt_version() -> tuple[str | None, str, float]:
    """ModelOpt's version (None if it does not import), why not, and how long its import took (s)."""
    t = time.perf_counter()
    try:
        with _silenced():
            modelopt = try_import("modelopt")  # nvidia-modelopt may not be installed (the error is the finding)
            try_import("modelopt.torch.quantization")  # imported to see that it loads
        return modelopt.__version__, "ok", round(time.perf_counter() - t, 1)
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {e}", round(time.perf_counter() - t, 1)


def modelopt_export(model, shape: tuple[int, ...]) -> tuple[bytes, str]:
    """A ModelOpt-quantized model as ONNX: ModelOpt's exporter if its ONNX extras are there (what its
    TensorRT example uses), else ``torch.onnx.export`` of the fake-quant model (opset 17)."""
    x = torch.zeros(1, *shape)
    model = model.eval()
    try:
        with _silenced():
            deploy = try_import("modelopt.torch._deploy.utils")  # ModelOpt's exporter needs its [onnx] extra
    except ImportError:
        deploy = None
    if deploy is not None:
        with _silenced():
            packed, _ = deploy.get_onnx_bytes_and_metadata(model, (x,), model_name="net", weights_dtype="fp32",
                                                           onnx_opset=20)
        m = onnx.load_from_string(deploy.OnnxBytes.from_bytes(packed).get_onnx_model_file_bytes())
        return _rename_io(m), "modelopt get_onnx_bytes_and_metadata (opset 20, fp32)"
    buf = io.BytesIO()
    with _silenced(), torch.no_grad():
        torch.onnx.export(model, (x,), buf, dynamo=False, opset_version=17, input_names=["input"],
                          output_names=["output"])
    return buf.getvalue(), "torch.onnx.export (TorchScript, opset 17)"


def _rename_io(m) -> bytes:
    """Input named ``input`` (as every other variant), so one feed serves all."""
    old = m.graph.input[0].name
    if old != "input":
        for n in m.graph.node:
            for j, i in enumerate(n.input):
                if i == old:
                    n.input[j] = "input"
        m.graph.input[0].name = "input"
    return m.SerializeToString()


def modelopt_onnx_quantize(fp32: bytes, calib: np.ndarray, target_name: str) -> tuple[bytes, str]:
    """``modelopt.onnx.quantization.quantize`` (int8) on the fp32 ONNX, calibrated on the CPU, in a child
    process: it patches onnxruntime's calibrators for the rest of the process (``patch_ort_modules``),
    after which onnxruntime's own ``quantize_static`` (``nas.export.qdq``) fails.  The child checks
    that: it runs ``quantize_qdq`` on the same model afterwards and says what happened."""
    with tempfile.TemporaryDirectory() as d:
        Path(d, "fp32.onnx").write_bytes(fp32)
        np.save(Path(d, "calib.npy"), calib)
        r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--onnx-worker", d, "--target", target_name],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}")
        after = json.loads(Path(d, "after.json").read_text())["hwnas_ptq_after"]
        return Path(d, "int8.onnx").read_bytes(), after


def onnx_worker(d: Path, target_name: str) -> int:
    """The child of ``modelopt_onnx_quantize``."""
    fp32, calib = Path(d, "fp32.onnx").read_bytes(), np.load(Path(d, "calib.npy"))
    with _silenced():
        # optional: nvidia-modelopt and its [onnx] extra; the ImportError naming the missing module is the finding
        from modelopt.onnx.quantization import quantize

        root = logging.getLogger()
        level = root.level
        try:
            quantize(str(Path(d, "fp32.onnx")), quantize_mode="int8", calibration_data=calib, calibration_eps=["cpu"],
                     high_precision_dtype="fp32", output_path=str(Path(d, "int8.onnx")), log_level="ERROR")
        finally:
            root.setLevel(level)
    try:
        quantize_qdq(fp32, [calib[i:i + 1] for i in range(min(len(calib), 32))], target=load_target(target_name))
        after = "ok"
    except Exception as e:  # noqa: BLE001 - the finding
        after = f"fails: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    Path(d, "after.json").write_text(json.dumps({"hwnas_ptq_after": after}))
    return 0


def run_network(seed: int, a: argparse.Namespace, data, target, x_val: np.ndarray, y_val: np.ndarray,
                mo_ok: bool) -> dict:
    arch = adapt_arch(nas.load_space("tiny").random(seed), data)
    shape = (arch.in_chans, arch.resolution, arch.resolution)
    rec: dict = {"seed": seed, "arch": str(arch), "variants": {}}
    t0 = time.perf_counter()
    net = train_fp32(arch, data, a.epochs, seed)
    rec["train_s"] = round(time.perf_counter() - t0, 1)
    fp32 = export_onnx(net, torch.zeros(1, *shape), exporter="torchscript")
    y32, ok = ort_logits(fp32, x_val)
    if y32 is None:
        raise RuntimeError(f"fp32 ONNX does not run in onnxruntime: {ok}")
    pred32 = y32.argmax(1)
    rec["fp32_top1"] = float(np.mean(pred32 == y_val))

    makers = variant_makers(seed, a, data, target, net, fp32, shape, rec)
    for name in VARIANTS:
        v: dict = {}
        rec["variants"][name] = v
        if name.startswith("modelopt") and not mo_ok:
            v["status"] = "modelopt not installed"
            continue
        score_variant(v, makers[name], x_val, y_val, y32, pred32)
    return rec


def train_fp32(arch, data, epochs: int, seed: int):
    """The network of ``arch``, trained for ``epochs`` (seeded), in eval mode."""
    torch.manual_seed(seed)
    net = nas.build(arch)
    fs = FitSettings(epochs=epochs)
    with tempfile.TemporaryDirectory() as d:
        fit(net, data, settings=fs, epochs=epochs, lr=fs.lr, ckpt=Path(d, "fp32.ckpt"), seed=seed,
            meta={"bench": "modelopt"})
    net.eval()
    return net


def variant_makers(seed: int, a: argparse.Namespace, data, target, net, fp32: bytes, shape: tuple[int, ...],
                   rec: dict) -> dict:
    """Each variant's maker: a call that returns its QDQ ONNX and how it was made, every one calibrated
    on the same training images (``modelopt_onnx`` also notes in ``rec`` what it did to ``nas.export.qdq``)."""
    # the same calibration images for every variant
    g = torch.Generator().manual_seed(seed + 29)
    idx = torch.randperm(len(data.train), generator=g)[: a.calib]
    calib_t = data.images("train", idx)
    calib_np = calib_t.numpy().astype(np.float32)
    calib_batches = list(calib_t.split(128))
    qat_s = FitSettings(epochs=a.qat_epochs)
    sched = Schedule.of(len(data.train), qat_s, a.qat_epochs)

    def qat_train(model, on_epoch_start=None) -> None:
        opt = build_optimizer(model, qat_s, a.qat_lr)
        train_epochs(model, data, opt, settings=qat_s, schedule=sched, lr=a.qat_lr, epochs=range(a.qat_epochs),
                     generator=lambda e: torch.Generator().manual_seed(seed * 1_000_003 + 101 + e),
                     device=torch.device("cpu"), stage="qat", on_epoch_start=on_epoch_start)
        model.eval()

    def hwnas_ptq():
        return quantize_qdq(fp32, [calib_np[i:i + 1] for i in range(len(calib_np))], target=target), "nas.export.qdq"

    def hwnas_qat():
        q = prepare_qat(net, quant_settings_for(target))
        calibrate(q, calib_batches)
        freeze_from = max(0, a.qat_epochs - 1)
        qat_train(q, lambda m, e: set_observers(m, "frozen" if e >= freeze_from else "ema"))
        set_observers(q, "frozen")
        return export_qdq(q, shape), "nas.compress.qat.export_qdq"

    def mo_quantized():
        with _silenced():
            mtq = try_import("modelopt.torch.quantization")  # nvidia-modelopt may not be installed

            def loop(model):
                for x in calib_batches:
                    model(x)

            q = copy.deepcopy(net).eval()
            return mtq.quantize(q, mtq.INT8_DEFAULT_CFG, forward_loop=loop)

    def modelopt_ptq():
        return modelopt_export(mo_quantized(), shape)

    def modelopt_qat():
        q = mo_quantized()
        with _silenced():
            qat_train(q)
        return modelopt_export(q, shape)

    def modelopt_onnx():
        model, after = modelopt_onnx_quantize(fp32, calib_np, a.target)
        rec["hwnas_ptq_after_modelopt_onnx_in_process"] = after
        return model, "modelopt.onnx.quantization.quantize (child process)"

    return {"hwnas_ptq": hwnas_ptq, "hwnas_qat": hwnas_qat, "modelopt_ptq": modelopt_ptq,
            "modelopt_qat": modelopt_qat, "modelopt_onnx": modelopt_onnx}


def score_variant(v: dict, make, x_val: np.ndarray, y_val: np.ndarray, y32: np.ndarray, pred32: np.ndarray) -> None:
    """Make one variant and record in ``v`` its format and, in onnxruntime CPU, its top-1 and how far it is
    from the fp32 network; a variant that cannot be made is recorded as failing."""
    t = time.perf_counter()
    try:
        model, how = make()
    except Exception as e:  # noqa: BLE001 - one variant failing is a result, not the end of the run
        v["status"] = f"fails: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        v["seconds"] = round(time.perf_counter() - t, 1)
        return
    v["how"] = how
    v["seconds"] = round(time.perf_counter() - t, 1)
    v["bytes"] = len(model)
    v["format"] = describe_format(model)
    y, ok = ort_logits(model, x_val)
    v["onnxruntime_cpu"] = ok
    if y is not None:
        v["top1"] = float(np.mean(y.argmax(1) == y_val))
        v["agree_fp32"] = float(np.mean(y.argmax(1) == pred32))
        # how far the int8 logits are from the fp32 network's (QAT: after fine-tuning, so not only rounding)
        v["logit_rel_err"] = float(np.linalg.norm(y - y32) / np.linalg.norm(y32))
    v["status"] = "ok"


# --------------------------------------------------------------------------------------------
# report


def _dist_size(names: tuple[str, ...]) -> dict[str, float]:
    """Installed size (MB) of the distributions ``names`` that are installed."""
    out = {}
    for n in names:
        try:
            files = metadata.distribution(n).files or []
        except metadata.PackageNotFoundError:
            continue
        total = 0
        for f in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(f.locate())
        out[n] = round(total / 1e6, 1)
    return out


def summarize(nets: list[dict]) -> dict:
    out = {}
    for v in VARIANTS:
        rs = [n["variants"][v] for n in nets if n["variants"][v].get("status") == "ok" and "top1" in n["variants"][v]]
        if not rs:
            continue
        out[v] = {
            "networks": len(rs),
            "top1_mean": float(np.mean([r["top1"] for r in rs])),
            "drop_vs_fp32_mean": float(np.mean([n["fp32_top1"] - n["variants"][v]["top1"] for n in nets
                                                if "top1" in n["variants"][v]])),
            "agree_fp32_mean": float(np.mean([r["agree_fp32"] for r in rs])),
            "logit_rel_err_mean": float(np.mean([r["logit_rel_err"] for r in rs])),
            "all_zero_points_int8_0": all(r["format"]["zero_points_int8_0"] for r in rs),
            "all_weights_per_channel": all(r["format"]["weights_per_channel"] for r in rs),
            "checker_ok": all(r["format"]["checker"] == "ok" for r in rs),
        }
    return out


def print_table(rep: dict) -> None:
    print(f"\nTensorRT int8 ({rep['target']}): hwnas vs ModelOpt {rep['modelopt'] or '(not installed)'}; "
          f"onnxruntime {rep['onnxruntime']} CPU, digits val ({rep['val_images']} images)")
    hdr = f"{'net':>4} {'variant':<14} {'top1':>6} {'fp32':>6} {'agree':>6} {'l.err':>6} {'zp=0':>5} {'w/ch':>5} {'weights':<34} " \
          f"{'BN':>3} {'checker':<7} int8 inputs"
    print(hdr)
    print("-" * len(hdr))
    for n in rep["networks"]:
        for v, r in n["variants"].items():
            if r.get("status") != "ok":
                print(f"{n['seed']:>4} {v:<14} {r.get('status')}")
                continue
            f = r["format"]
            w = ", ".join(f"{c} {k}" for k, c in f["weights"].items())
            ins = " ".join(f"{k} {c}" for k, c in f["int8_inputs"].items())
            top = f"{r['top1']:.3f}" if "top1" in r else "  -  "
            agr = f"{r['agree_fp32']:.3f}" if "agree_fp32" in r else "  -  "
            err = f"{r['logit_rel_err']:.3f}" if "logit_rel_err" in r else "  -  "
            print(f"{n['seed']:>4} {v:<14} {top:>6} {n['fp32_top1']:>6.3f} {agr:>6} {err:>6} "
                  f"{'yes' if f['zero_points_int8_0'] else 'NO':>5} {'yes' if f['weights_per_channel'] else 'NO':>5} "
                  f"{w:<34} {f['batchnorm_nodes']:>3} {'ok' if f['checker'] == 'ok' else 'FAILS':<7} {ins}")
    print("\nmean over networks:")
    for v, s in rep["summary"].items():
        print(f"  {v:<14} top1 {s['top1_mean']:.3f}  drop vs fp32 {s['drop_vs_fp32_mean']:+.3f}  "
              f"agreement {s['agree_fp32_mean']:.3f}  logit error {s['logit_rel_err_mean']:.3f}  "
              f"({s['networks']} networks)")
    after = {n["seed"]: n["hwnas_ptq_after_modelopt_onnx_in_process"] for n in rep["networks"]
             if "hwnas_ptq_after_modelopt_onnx_in_process" in n}
    if after:
        print("\nnas.export.qdq in the process that ran modelopt.onnx.quantization: "
              + "; ".join(f"network {k}: {v}" for k, v in after.items()))
    if rep["modelopt_install"]:
        print(f"\nModelOpt install (MB): {rep['modelopt_install']}; import {rep['modelopt_import_s']} s")


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if a.onnx_worker is not None:
        return onnx_worker(a.onnx_worker, a.target)
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.WARNING)
    target = load_target(a.target)
    if target.runtime != "tensorrt":
        raise SystemExit(f"--target {a.target}: runtime is {target.runtime!r}; this compares TensorRT int8 "
                         f"(e.g. jetson_int8, gpu_int8)")
    t0 = time.perf_counter()
    version, why, import_s = modelopt_version()
    if version is None:
        print(f"ModelOpt unavailable ({why}); only the hwnas variants run", file=sys.stderr)
    data = load_data(DataSettings())
    x_val = torch.cat([x for x, _ in data.batches("val", batch_size=512)]).numpy().astype(np.float32)
    y_val = data.val.labels.numpy()
    nets = []
    for seed in a.seeds:
        print(f"network {seed}: training and quantizing ...", file=sys.stderr, flush=True)
        nets.append(run_network(seed, a, data, target, x_val, y_val, version is not None))
    rep = {
        "what": "TensorRT int8 QDQ: hwnas (nas.compress.qat / ptq) vs NVIDIA Model Optimizer, on CPU",
        "command": command("modelopt", argv),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": platform.processor() or platform.machine(),
        "cpu": cpu_model(),
        "target": a.target,
        "modelopt": version,
        "modelopt_import": why,
        "modelopt_import_s": import_s,
        "modelopt_install": _dist_size(("nvidia-modelopt", "pulp", "nvidia-ml-py", "onnx-graphsurgeon",
                                        "onnxconverter-common", "onnxslim", "lief", "polygraphy")),
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "settings": {"epochs": a.epochs, "qat_epochs": a.qat_epochs, "qat_lr": a.qat_lr, "calib": a.calib,
                     "seeds": a.seeds, "quick": a.quick},
        "val_images": int(len(y_val)),
        "tensorrt_speed": "not measured: no GPU on this machine",
        "networks": nets,
        "summary": summarize(nets),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(a.out, json.dumps(rep, indent=1) + "\n")
    print_table(rep)
    print(f"\n{rep['seconds']:.0f} s; wrote {a.out}")
    return 0



if __name__ == "__main__":
    sys.exit(main())
