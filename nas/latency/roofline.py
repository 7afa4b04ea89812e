"""Roofline latency ESTIMATE from a target's published peak compute and memory bandwidth.

For targets without a measured table (a Jetson before anyone profiled it).  Each layer costs

    max(2 * MACs / peak_flops, bytes_moved / bandwidth) + ops * overhead

with MACs, bytes moved and the primitive-op count from ``nas.cost`` (bytes per element set by
the precision).  Everything it produces is labelled ``estimated``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nas.arch import Arch, BlockKey
from nas.cost import arch_cost, block_cost
from nas.target import Target

__all__ = ["BYTES_PER_ELEMENT", "Roofline"]

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
    def from_target(cls, target: Target | Mapping[str, Any]) -> Roofline:
        """The target's device figures (``Target`` validates that both peak figures are given)."""
        t = Target.coerce(target)
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
