"""Roofline latency ESTIMATE from a target's published peak compute and memory bandwidth.

For targets without a measured table (a Jetson before anyone profiled it, or this machine before
``nas.profile conf=here``).  Each layer costs

    max(2 * MACs / peak_flops, bytes_moved / bandwidth) + ops * overhead

with MACs, bytes moved and the primitive-op count from ``nas.cost`` (bytes per element set by
the precision).  Everything it produces is labelled ``estimated``.

``measure_peaks()`` measures the three figures on the machine it runs on (onnxruntime, one
thread, like the tables): a large MatMul for peak compute, a large array copy for memory
bandwidth, and a chain of tiny ops for the per-op overhead; about a second in all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from nas._optional import try_import
from nas.arch import Arch, BlockKey
from nas.cost import arch_cost, block_cost
from nas.target import Target, require_target

__all__ = ["BYTES_PER_ELEMENT", "Roofline", "measure_peaks"]

BYTES_PER_ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}


class Roofline:
    """Analytical estimate; ``predict_key`` / ``predict_arch`` return milliseconds."""

    def __init__(self, *, peak_gflops: float, mem_bandwidth_gbs: float, overhead_us: float = 5.0,
                 precision: str = "fp32", device: str = "", spec_source: str = "") -> None:
        if peak_gflops <= 0 or mem_bandwidth_gbs <= 0 or overhead_us < 0:
            raise ValueError(
                f"roofline needs peak_gflops > 0, mem_bandwidth_gbs > 0, overhead_us >= 0; got "
                f"{peak_gflops}, {mem_bandwidth_gbs}, {overhead_us}"
            )
        if precision not in BYTES_PER_ELEMENT:
            raise ValueError(f"unknown precision {precision!r}; valid: {', '.join(BYTES_PER_ELEMENT)}")
        self.peak_gflops, self.bw, self.overhead_us = float(peak_gflops), float(mem_bandwidth_gbs), float(overhead_us)
        self.precision, self.device, self.spec_source = precision, device, spec_source
        self.bytes = BYTES_PER_ELEMENT[precision]

    @classmethod
    def from_target(cls, target: Target) -> Roofline:
        """The target's device figures (``Target`` validates that both peak figures are given)."""
        t = require_target(target)
        d = t.device
        return cls(peak_gflops=d.peak_gflops, mem_bandwidth_gbs=d.mem_bandwidth_gbs, overhead_us=d.overhead_us,
                   precision=t.precision, device=d.name or "this machine", spec_source=d.spec_source)

    def _ms(self, macs: int, moved: int, ops: int) -> float:
        compute = 2.0 * macs / (self.peak_gflops * 1e9)
        memory = moved / (self.bw * 1e9)
        return 1e3 * max(compute, memory) + ops * self.overhead_us * 1e-3

    def predict_key(self, key: BlockKey) -> float:
        c = block_cost(key, bytes_per_param=self.bytes, bytes_per_act=self.bytes)
        return self._ms(c.macs, c.bytes_moved, c.ops)

    def predict_arch(self, arch: Arch, resolution: int | None = None) -> float:
        cost = arch_cost(arch, resolution=resolution, bytes_per_param=self.bytes, bytes_per_act=self.bytes)
        return sum(self._ms(c.macs, c.bytes_moved, c.ops) for _, c in cost.layers)

    def describe(self) -> str:
        return (f"roofline ESTIMATE for {self.device or 'the target'} ({self.peak_gflops:g} GFLOP/s, "
                f"{self.bw:g} GB/s, {self.overhead_us:g} us/op, {self.precision})")


def _best_ms(run: Callable[[], Any], *, repeats: int, min_time_s: float) -> float:
    """The fastest of ``repeats`` (or more, until ``min_time_s`` has passed) calls of ``run``, in ms:
    the machine's capability, not its noise."""
    run()  # warm-up
    best, start, n = float("inf"), time.perf_counter(), 0
    while n < repeats or time.perf_counter() - start < min_time_s:
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
        n += 1
    return best * 1e3


def _ort_ms(nodes: list, inputs: dict[str, np.ndarray], output: tuple[str, list[int]], *, threads: int,
            inits: tuple = (), repeats: int = 5, min_time_s: float = 0.2) -> float:
    ort = try_import("onnxruntime")

    graph = helper.make_graph(
        nodes, "peaks", [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in inputs.items()],
        [helper.make_tensor_value_info(output[0], TensorProto.FLOAT, output[1])],
        initializer=[onnx.numpy_helper.from_array(a, n) for n, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return _best_ms(lambda: sess.run(None, inputs), repeats=repeats, min_time_s=min_time_s)


def measure_peaks(*, threads: int = 1, matmul_n: int = 1024, copy_mb: int = 256, chain_ops: int = 200) -> dict[str, Any]:
    """This machine's fp32 roofline figures: ``peak_gflops`` (an n x n MatMul in onnxruntime),
    ``mem_bandwidth_gbs`` (a copy of ``copy_mb`` MB, read + write) and ``overhead_us`` (per op of a
    chain of tiny Relu ops), with a ``spec_source`` sentence saying how they were measured."""
    rng = np.random.default_rng(0)
    n = matmul_n
    x, w = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    ms = _ort_ms([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x}, ("y", [n, n]), threads=threads,
                 inits=(("w", w),))
    peak = 2 * n**3 / (ms * 1e-3) / 1e9
    a = np.ones(copy_mb * 2**20 // 4, dtype=np.float32)
    b = np.empty_like(a)
    bw = 2 * a.nbytes / (_best_ms(lambda: np.copyto(b, a), repeats=5, min_time_s=0.2) * 1e-3) / 1e9

    def chain(k: int) -> float:
        nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(k)]
        return _ort_ms(nodes, {"t0": np.ones((1, 8), np.float32)}, (f"t{k}", [1, 8]), threads=threads, repeats=20)

    overhead = max((chain(chain_ops) - chain(1)) / (chain_ops - 1) * 1e3, 0.01)
    return {"peak_gflops": round(peak, 1), "mem_bandwidth_gbs": round(bw, 1), "overhead_us": round(overhead, 3),
            "spec_source": f"measured on this machine by nas.latency.predict.roofline.measure_peaks ({threads} thread"
                           f"{'s' if threads > 1 else ''}): MatMul {n}^3 {peak:.0f} GFLOP/s, {copy_mb} MB copy "
                           f"{bw:.1f} GB/s, {overhead:.2f} us per graph op"}
