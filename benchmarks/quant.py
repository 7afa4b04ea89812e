"""Which int8 quantization settings are fastest on this CPU, against fp32, per network.

The pipeline quantizes with one set of settings (``nas.export.qdq.QDQ_SETTINGS``: QDQ, u8
activations, s8 per-channel weights, 7-bit reduce_range, MinMax).  Issue 6 asks for int8 at
<= 0.6x fp32; this script measures whether any onnxruntime static-quantization setting gets
there, for the networks a Fashion-MNIST search finds (the ``tiny`` space at 32x32, 1 channel,
10 classes) and for a few timm models for contrast.  Variants:

    default         the pipeline's settings
    no_reduce       8-bit weights (reduce_range=False)
    s8s8            s8 activations and weights (QDQ)
    per_tensor      per-tensor weights
    qoperator       QOperator format (QLinearConv nodes) instead of QDQ
    no_depthwise    the default, depthwise convolutions left in fp32
    pointwise_only  only the 1x1 convolutions and the classifier in int8 (stem, depthwise, and
                    every k>1 conv left in fp32)

Weights are random (latency does not depend on their values); calibration uses random inputs,
so no accuracy is measured here: a variant that is faster is only useful if QAT or PTQ keep its
accuracy (``python -m benchmarks train`` measures that for the default).  Every network and variant is
measured in interleaved rounds (fresh session each), median over rounds; ratios are int8 / fp32
of the same network in the same round order.

    taskset -c 1 python -m benchmarks quant                      # 12 tiny networks + 3 timm models
    taskset -c 1 python -m benchmarks quant --run <search run dir>   # that search's Pareto front

Writes benchmarks/results/quant_<target>.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import torch

from benchmarks.harness import RESULTS, command, machine, write_result
from nas.arch import Arch
from nas.builder import build
from nas.export.onnx import export_onnx
from nas.export.qdq import quantize_qdq
from nas.latency.runtimes.core import get_runtime
from nas.latency.runtimes.device import device_identity
from nas.latency.runtimes.loop import measure, summarize_times
from nas.space import load_space
from nas.target import load_target
from nas.timm_arch import from_timm

VARIANTS: dict[str, dict] = {
    "default": {},
    "no_reduce": {"reduce_range": False},
    "s8s8": {"activation_type": "QInt8", "reduce_range": False},
    "per_tensor": {"per_channel": False},
    "qoperator": {"quant_format": "QOperator"},
    "no_depthwise": {"exclude": "depthwise"},
    "pointwise_only": {"exclude": "spatial"},
}


def _excluded(model: bytes, which: str) -> list[str]:
    """Names of the Conv nodes to leave in fp32: depthwise ones, or every conv with a k>1 kernel."""
    g = onnx.load_from_string(model).graph
    out = []
    for n in g.node:
        if n.op_type != "Conv":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        depthwise = attrs.get("group", 1) > 1
        spatial = any(k > 1 for k in attrs.get("kernel_shape", [1]))
        if (which == "depthwise" and depthwise) or (which == "spatial" and (depthwise or spatial)):
            out.append(n.name)
    return out


def quantize(model: bytes, calib: list, variant: dict) -> bytes:
    kw = dict(variant)
    which = kw.pop("exclude", None)
    if which:
        kw["nodes_to_exclude"] = _excluded(model, which)
    return quantize_qdq(model, calib, **kw)


def networks(args) -> list[tuple[str, object]]:
    out = []
    if args.run:
        pareto = json.loads((Path(args.run) / "pareto.json").read_text())
        res = pareto["search"].get("deploy_resolution")
        for e in pareto["pareto"]:
            a = Arch.from_dict(e["arch"])
            out.append((f"front {e['trial']}", a.with_resolution(res) if res else a))
    else:
        space = load_space("tiny")
        for s in range(args.n):
            out.append((f"tiny {s}", space.random(50_000 + s).with_head(in_chans=1).with_resolution(32)))
    for m in args.timm:
        out.append((f"timm:{m}", from_timm(m)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="epyc_zen5", help="fp32 target measured on this machine (its runtime)")
    ap.add_argument("--run", help="a search run dir: its Pareto front instead of seeded tiny networks")
    ap.add_argument("--n", type=int, default=12, help="seeded tiny-space networks (without --run)")
    ap.add_argument("--timm", nargs="*", default=["mobilenetv2_100", "efficientnet_lite0", "mobilenetv3_large_100"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()

    target = load_target(args.target)
    if target.precision != "fp32":
        sys.exit(f"--target {args.target}: pick an fp32 target (the script quantizes itself)")
    table_dev = target.device.name
    rt = get_runtime(target.replace(precision="fp32"))
    torch.manual_seed(0)
    models: dict[str, dict[str, bytes]] = {}
    shapes: dict[str, tuple[int, int, int]] = {}
    t0 = time.time()
    for name, arch in networks(args):
        model = build(arch).eval()
        shape = (arch.in_chans, arch.resolution, arch.resolution)
        x0 = torch.randn(1, *shape)
        fp32 = export_onnx(model, x0, exporter="torchscript")
        calib = [torch.randn(1, *shape).numpy() for _ in range(8)]
        models[name] = {"fp32": fp32, **{v: quantize(fp32, calib, kw) for v, kw in VARIANTS.items()}}
        shapes[name] = shape
        print(f"quantized {name} ({len(VARIANTS)} variants)", flush=True)
    rounds: dict[str, dict[str, list[float]]] = {n: {v: [] for v in m} for n, m in models.items()}
    for r in range(args.rounds):
        for name, m in models.items():
            for v, data in m.items():
                run = rt.runner_for_onnx(data, shapes[name])
                rounds[name][v].append(summarize_times(measure(run, warmup=10, repeats=50, min_time_s=0.1))["median_ms"])
        print(f"round {r + 1}/{args.rounds} measured", flush=True)
    med = {n: {v: float(np.median(x)) for v, x in per.items()} for n, per in rounds.items()}
    ratio = {n: {v: per[v] / per["fp32"] for v in VARIANTS} for n, per in med.items()}
    groups = {"tiny / front": [n for n in med if not n.startswith("timm:")],
              "timm": [n for n in med if n.startswith("timm:")]}
    summary = {}
    for g, names in groups.items():
        if not names:
            continue
        summary[g] = {v: {"median_ratio": float(np.median([ratio[n][v] for n in names])),
                          "min_ratio": float(np.min([ratio[n][v] for n in names])),
                          "max_ratio": float(np.max([ratio[n][v] for n in names])),
                          "share_le_0.6": float(np.mean([ratio[n][v] <= 0.6 for n in names])),
                          "n": len(names)} for v in VARIANTS}
    report = {"target": args.target, "device": device_identity("cpu"), "table_device": table_dev,
              "runtime": rt.info(), "rounds": args.rounds, "variants": VARIANTS, "median_ms": med,
              "int8_over_fp32": ratio, "summary": summary, "seconds": time.time() - t0}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"quant_{args.target}.json"
    write_result(path, {"command": command("quant"), "machine": machine(), **report})
    print(f"\nint8 / fp32 measured latency, {rt.name} {rt.version()}, 1 thread, batch 1 ({args.rounds} rounds)")
    print(f"{'network':26s} {'fp32 ms':>8s} " + " ".join(f"{v:>14s}" for v in VARIANTS))
    for n in med:
        print(f"{n:26s} {med[n]['fp32']:8.4f} " + " ".join(f"{ratio[n][v]:13.2f}x" for v in VARIANTS))
    for g, per in summary.items():
        print(f"{'median ' + g:35s} " + " ".join(f"{per[v]['median_ratio']:13.2f}x" for v in VARIANTS))
        print(f"{'share <= 0.6x ' + g:35s} " + " ".join(f"{100 * per[v]['share_le_0.6']:13.0f}%" for v in VARIANTS))
    print(f"\n-> {path}")


if __name__ == "__main__":
    main()
