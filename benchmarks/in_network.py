"""What a layer costs inside a network against what it costs alone, from onnxruntime's profiler.

The latency table times every block as a standalone graph; the predictor's calibration maps
their sum to whole networks.  This benchmark looks underneath: it runs a network with
onnxruntime's per-node profiler, sums the kernel time of each layer's nodes (stem, each block,
the head), does the same for each of its layers built alone (as the profiler builds them), and
prints both, their ratio, and the table's figure.  Nodes onnxruntime inserts into the whole
network (NCHWc layout reorders, renamed fused activations) carry no module path; their time is
reported apart.  Where the ratio departs from 1 is what the
calibration has to absorb: a standalone block converts its input between layouts (onnxruntime's
NCHWc) that a block inside a network does not, and keeps its weights in cache, which a network
streaming all its weights cannot.

    taskset -c 1 python -m benchmarks in_network --target epyc_zen5 --models timm:mobilenetv2_100 calib:mbv3:0
    python -m benchmarks in_network --models timm:mobilenetv3_small_100 --runs 100      # a quick look

A model is ``timm:<name>`` (converted with ``nas.timm_arch``) or ``calib:<space>:<i>`` (the table's
i-th calibration network of that space).  Profiling adds a little per node, the same to both
sides.  Writes benchmarks/results/in_network_<target>.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

from benchmarks.harness import RESULTS, command, composed_target, machine, write_result
from nas.builder import build, build_layer
from nas.latency.predict.predictor import table_networks
from nas.latency.runtimes.core import get_runtime
from nas.latency.tables.table import LatencyTable, resolve_table_path
from nas.timm_arch import from_timm


def node_times(data: bytes, shape: tuple[int, int, int], runs: int, threads: int) -> tuple[dict[str, float], float]:
    """Median kernel time (us) of every node over ``runs`` profiled runs (the first 20 dropped),
    and the median whole-run time."""
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as d:
        so.profile_file_prefix = os.path.join(d, "p")
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        x = np.random.default_rng(0).standard_normal((1, *shape)).astype(np.float32)
        name = sess.get_inputs()[0].name
        for _ in range(runs + 20):
            sess.run(None, {name: x})
        events = json.loads(Path(sess.end_profiling()).read_text())
    node: dict[str, list[float]] = collections.defaultdict(list)
    total: list[float] = []
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            node[e["name"][: -len("_kernel_time")]].append(e["dur"])
        elif e.get("cat") == "Session" and e["name"] == "model_run":
            total.append(e["dur"])
    return {k: float(np.median(v[20:] or v)) for k, v in node.items()}, float(np.median(total[20:] or total))


def layer_of(node: str, n_layers: int) -> int | None:
    """The layer a node of a whole network belongs to: 0 the stem, i + 1 block i, last the head;
    ``None`` for a node onnxruntime inserted or renamed (``ReorderInput_token_29``, ``Gelu``): its
    names carry no module path, so its layer is unknown."""
    if not node.startswith("/"):
        return None
    m = re.search(r"blocks\.(\d+)", node)
    if m:
        return int(m.group(1)) + 1
    return 0 if "stem" in node else n_layers - 1


def study(arch, runtime, table, runs: int) -> dict:
    keys = arch.keys()
    shape = (arch.in_chans, arch.resolution, arch.resolution)
    med, total = node_times(runtime.onnx_bytes(build(arch), shape), shape, runs, runtime.threads)
    inside = [0.0] * len(keys)
    inserted = 0.0
    for node, us in med.items():
        i = layer_of(node, len(keys))
        if i is None:
            inserted += us
        else:
            inside[i] += us
    layers = []
    for i, k in enumerate(keys):
        alone, _ = node_times(runtime.onnx_bytes(build_layer(k), k.in_shape), k.in_shape, runs, runtime.threads)
        e = table.entries.get(k)
        layers.append({"layer": i, "key": str(k), "in_network_us": inside[i], "alone_us": sum(alone.values()),
                       "table_us": 1000 * e.median_ms if e else None})
    return {"model_run_us": total, "in_network_us": sum(inside) + inserted, "inserted_us": inserted,
            "alone_us": sum(r["alone_us"] for r in layers), "layers": layers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="epyc_zen5", help="an onnxruntime CPU target (conf/target/<name>.yaml)")
    ap.add_argument("--models", nargs="+", default=["timm:mobilenetv2_100", "calib:mbv3:0"],
                    help="timm:<name> or calib:<space>:<i> (the table's i-th calibration network of that space)")
    ap.add_argument("--runs", type=int, default=300, help="profiled runs per graph (after 20 warm-up runs)")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    target = composed_target(args.target)
    if target.runtime != "onnxruntime" or target.provider != "CPUExecutionProvider":
        sys.exit(f"{args.target}: this benchmark profiles onnxruntime's CPU execution provider only")
    table = LatencyTable.load(resolve_table_path(target.table))
    runtime = get_runtime(target)
    results = {}
    for spec in args.models:
        kind, _, rest = spec.partition(":")
        if kind == "timm":
            arch = from_timm(rest)
        elif kind == "calib":
            space, _, i = rest.partition(":")
            nets = [a for a, _ in table_networks(table) if a.name == space]
            if not nets or not i.isdigit() or int(i) >= len(nets):
                sys.exit(f"{spec}: the table has {len(nets)} calibration networks of space {space!r}")
            arch = nets[int(i)]
        else:
            sys.exit(f"{spec}: a model is timm:<name> or calib:<space>:<i>")
        r = results[spec] = study(arch, runtime, table, args.runs)
        print(f"\n== {spec}: whole run {r['model_run_us']:.0f} us; kernels in the network {r['in_network_us']:.0f} us, "
              f"its layers alone {r['alone_us']:.0f} us ({r['in_network_us'] / r['alone_us']:.3f}x); "
              f"{r['inserted_us']:.0f} us of the network's are in nodes onnxruntime inserted or renamed (layout "
              "reorders, fused activations), in no layer's column")
        print(f"{'':3s} {'layer':58s} {'in-net us':>9s} {'alone us':>9s} {'ratio':>6s} {'table us':>9s}")
        for x in r["layers"]:
            tab = f"{x['table_us']:9.1f}" if x["table_us"] is not None else f"{'-':>9s}"
            print(f"{x['layer']:3d} {x['key'][:58]:58s} {x['in_network_us']:9.1f} {x['alone_us']:9.1f} "
                  f"{x['in_network_us'] / max(x['alone_us'], 1e-9):6.3f} {tab}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"in_network_{args.target}.json"
    write_result(path, {"command": command("in_network"), "machine": machine(), "target": args.target,
                        "runs": args.runs, "models": results})
    print(f"\n-> {path}")


if __name__ == "__main__":
    main()
