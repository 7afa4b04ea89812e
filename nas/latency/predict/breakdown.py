"""Where a network's time goes, layer by layer, with the roofline's verdict on each layer.

``layer_breakdown(arch, model, target)`` puts every layer's latency (from the target's measured table,
its learned block model, or the roofline estimate when there is no table: ``source`` says which) beside
what the layer asks of the device (``nas.cost``: FLOPs = 2 x MACs, bytes moved at the precision's
element size):

- arithmetic intensity, FLOP per byte moved, against the device's ridge point (peak GFLOP/s divided
  by peak GB/s): above it the layer is compute-bound, below it memory-bound (the roofline's verdict);
- the GFLOP/s and GB/s the layer achieves at its latency, each as a share of the device's peak
  (``target.device.peak_gflops`` / ``mem_bandwidth_gbs``, whose ``spec_source`` says where they come from);
- its share of the network's summed per-layer time.

A layer far below both roofs is neither: fixed costs (dispatch, small tensors) dominate it.  A layer
above 100% of the memory peak moves data that stays in the caches, whose bandwidth is above DRAM's.
``breakdown_chart`` draws the layers as bars (Qualcomm AI Hub's per-layer view), coloured by verdict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from nas.arch import Arch
from nas.cost import block_cost
from nas.latency.predict.roofline import BYTES_PER_ELEMENT, Roofline
from nas.latency.tables import LatencyModel
from nas.target import Target, require_target

__all__ = ["LayerBreakdown", "breakdown_chart", "layer_breakdown", "ridge_point"]

BOUND_COLOURS = {"compute-bound": "tab:orange", "memory-bound": "tab:blue"}


@dataclass(frozen=True)
class LayerBreakdown:
    """One layer's time and what the roofline says of it.

    Args:
        layer: the layer's key (``ir_k3_s2_m72_c24_re@16x56x56``).
        ms: its latency, before the network calibration.
        source: ``table`` (measured), ``learned`` (the block model) or ``estimated`` (roofline).
        flops: floating-point (or integer) operations: 2 x MACs.
        bytes: bytes moved (weights and the activations its ops read and write).
        intensity: ``flops / bytes``.
        bound: ``compute-bound`` (intensity at or above the ridge point) or ``memory-bound``.
        gflops: GFLOP/s achieved at ``ms``.
        gbs: GB/s achieved at ``ms``.
        compute_pct: ``gflops`` as a percentage of the device's peak GFLOP/s.
        memory_pct: ``gbs`` as a percentage of the device's peak GB/s.
        share: the layer's share of the network's summed per-layer time (0..1).
    """

    layer: str
    ms: float
    source: str
    flops: int
    bytes: int
    intensity: float
    bound: str
    gflops: float
    gbs: float
    compute_pct: float
    memory_pct: float
    share: float

    @property
    def roof_pct(self) -> float:
        """The achieved share of the roof that bounds the layer: ``compute_pct`` or ``memory_pct``."""
        return self.compute_pct if self.bound == "compute-bound" else self.memory_pct

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ridge_point(target: Target) -> float:
    """The device's ridge point in FLOP/byte: peak GFLOP/s over peak GB/s."""
    d = require_target(target).device
    return d.peak_gflops / d.mem_bandwidth_gbs


def _layer_ms(arch: Arch, model: LatencyModel) -> list[tuple[str, float, str]]:
    """(layer, ms, source) per layer: the predictor's own per-layer figures, or the roofline's."""
    if hasattr(model, "breakdown"):
        return [(r["layer"], float(r["ms"]), r["source"]) for r in model.breakdown(arch)]
    roof: Roofline = model.roofline
    return [(str(k), roof.predict_key(k), "estimated") for k in arch.keys()]


def layer_breakdown(arch: Arch, model: LatencyModel, target: Target) -> list[LayerBreakdown]:
    """Every layer of ``arch``: its latency by ``model`` and the roofline's verdict on ``target``'s device.

    Args:
        arch: the network (at the resolution predicted).
        model: the target's latency model (``nas.latency.load_latency_model``): a fitted predictor
            (per-layer figures from its table and block model) or the roofline estimate.
        target: the target whose device's peak figures and precision (bytes per element) apply.

    Returns:
        One ``LayerBreakdown`` per layer, in the network's order.
    """
    t = require_target(target)
    size = BYTES_PER_ELEMENT[t.precision]
    peak, bw, ridge = t.device.peak_gflops, t.device.mem_bandwidth_gbs, ridge_point(t)
    rows = _layer_ms(arch, model)
    total = sum(ms for _, ms, _ in rows) or 1.0
    out = []
    for key, (layer, ms, source) in zip(arch.keys(), rows):
        c = block_cost(key, bytes_per_param=size, bytes_per_act=size)
        flops, moved = 2 * c.macs, max(c.bytes_moved, 1)
        seconds = max(ms, 1e-9) * 1e-3
        gflops, gbs = flops / seconds / 1e9, moved / seconds / 1e9
        out.append(LayerBreakdown(layer, ms, source, flops, moved, flops / moved,
                                  "compute-bound" if flops / moved >= ridge else "memory-bound",
                                  gflops, gbs, 100 * gflops / peak, 100 * gbs / bw, ms / total))
    return out


def breakdown_chart(rows: list[LayerBreakdown], path: str | Path, *, title: str, ridge: float) -> str:
    """A bar per layer (its latency), coloured by the roofline's verdict and labelled with its share of
    the network and the share of its roof it achieves; the path written.  A ``Figure`` of its own: no
    pyplot state, no backend chosen for the process."""
    fig = Figure(figsize=(8.0, 1.6 + 0.24 * len(rows)))
    ax = fig.subplots()
    y = list(range(len(rows)))[::-1]
    ax.barh(y, [r.ms for r in rows], color=[BOUND_COLOURS[r.bound] for r in rows], height=0.75)
    ax.set_yticks(y, [r.layer for r in rows], fontsize=6.5)
    top = max((r.ms for r in rows), default=1.0)
    for yi, r in zip(y, rows):
        ax.text(r.ms + 0.01 * top, yi, f"{100 * r.share:.1f}%  ({r.roof_pct:.0f}% of its roof)", va="center",
                fontsize=6)
    ax.set_xlim(0, top * 1.35)
    ax.set_xlabel("ms per layer (before the network calibration)")
    handles = [Patch(color=c, label=f"{b} (FLOP/byte {'≥' if b == 'compute-bound' else '<'} {ridge:.1f})")
               for b, c in BOUND_COLOURS.items()]
    ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.06 - 2.0 / fig.get_figheight()
                                                                               / 10), ncol=2, frameon=False)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=110, bbox_inches="tight")
    return str(p)
