"""Validate the roofline estimate on this CPU, next to the measured table.

1. Microbenchmarks (1 thread, onnxruntime like the tables): peak fp32 compute (a large MatMul),
   memory bandwidth (a large copy), and the per-op overhead (a chain of tiny ops).
2. With those figures, the roofline estimates every block of the measured table and every
   whole network the table holds (its calibration set); it reports the error of the roofline
   and, next to it, of the raw table sum on the same networks.

    python -m benchmarks roofline [--table latency_tables/cpu.json] [--out benchmarks/results/roofline.json]

Writes JSON and prints a table.  Run it pinned to an idle core (taskset -c 1) for clean numbers.
"""

from __future__ import annotations

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper

from benchmarks.harness import command, machine, write_result
from nas.export.onnx import ort_session
from nas.latency.predict.predictor import LatencyPredictor, table_networks
from nas.latency.predict.roofline import Roofline
from nas.latency.predict.scoring import score
from nas.latency.runtimes.loop import measure, summarize_times
from nas.latency.tables.table import LatencyTable


def _model(nodes, inputs, outputs, inits=()) -> bytes:
    g = helper.make_graph(nodes, "bench", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _time(data: bytes, feed: dict) -> float:
    sess = ort_session(data, threads=1)
    return summarize_times(measure(lambda: sess.run(None, feed), warmup=5, repeats=30, min_time_s=0.5))["median_ms"]


def peak_gflops(n: int = 1024) -> float:
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((n, n)).astype(np.float32), "w")
    data = _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])], [w])
    ms = _time(data, {"x": rng.standard_normal((n, n)).astype(np.float32)})
    return 2 * n**3 / (ms * 1e-3) / 1e9


def bandwidth_gbs(mb: int = 256) -> float:
    a = np.ones(mb * 2**20 // 4, dtype=np.float32)
    b = np.empty_like(a)
    ms = summarize_times(measure(lambda: np.copyto(b, a), warmup=2, repeats=10, min_time_s=1.0))["median_ms"]
    return 2 * a.nbytes / (ms * 1e-3) / 1e9  # read + write


def op_overhead_us(n_ops: int = 200) -> float:
    def chain(k: int) -> bytes:
        nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(k)]
        return _model(nodes, [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1, 8])],
                      [helper.make_tensor_value_info(f"t{k}", TensorProto.FLOAT, [1, 8])])

    x = {"t0": np.ones((1, 8), np.float32)}
    return (_time(chain(n_ops), x) - _time(chain(1), x)) / (n_ops - 1) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", default="latency_tables/cpu.json")
    ap.add_argument("--out", default="benchmarks/results/roofline.json")
    args = ap.parse_args()

    peak, bw, ovh = peak_gflops(), bandwidth_gbs(), op_overhead_us()
    print(f"microbenchmarks (1 thread): peak {peak:.1f} GFLOP/s, bandwidth {bw:.1f} GB/s, {ovh:.2f} us/op")
    table = LatencyTable.load(args.table)
    prec = table.metadata["precision"]
    roof = Roofline(peak_gflops=peak * (2 if prec == "int8" else 1), mem_bandwidth_gbs=bw, overhead_us=ovh,
                    precision=prec, device="this CPU (microbenchmarked)")
    keys = list(table.entries)
    meas_b = np.array([table.entries[k].median_ms for k in keys])
    roof_b = np.array([roof.predict_key(k) for k in keys])
    pred = LatencyPredictor(calibrate=False).fit(table)
    nets = table_networks(table)
    meas_n = np.array([ms for _, ms in nets])
    rows = {
        "blocks: roofline": score(roof_b, meas_b),
        "networks: roofline": score([roof.predict_arch(a) for a, _ in nets], meas_n),
        "networks: table sum": score([pred.raw_sum(a) for a, _ in nets], meas_n),
    }
    result = {"table": args.table, "precision": prec, "peak_gflops": peak, "mem_bandwidth_gbs": bw,
              "overhead_us": ovh, "n_blocks": len(keys), "n_networks": len(nets), "scores": rows}
    write_result(args.out, {"command": command("roofline"), "machine": machine(), **result})
    print(f"{'method':24s} {'within ±5%':>11s} {'within ±10%':>12s} {'MAPE':>8s} {'Kendall τ':>10s} {'n':>5s}")
    for name, s in rows.items():
        print(f"{name:24s} {100 * s['within_5pct']:10.1f}% {100 * s['within_10pct']:11.1f}% {s['mape']:7.1f}% "
              f"{s['kendall_tau']:10.3f} {s['n']:5d}")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
