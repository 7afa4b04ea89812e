"""The validation report's scatter plot: predicted against measured latency for every method."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

__all__ = ["scatter_plot"]


def scatter_plot(report: dict[str, Any], path: str | Path, *, title: str = "") -> Path:
    """Predicted vs measured for every method, with the ±10% band (a ``Figure`` of its own, no pyplot)."""
    pts = report["points"]
    methods = list(report["methods"])
    meas = np.array([p["measured_ms"] for p in pts])
    cols = min(len(methods), 4)  # up to 4 per row: 7 methods side by side are too thin to read
    rows = -(-len(methods) // cols)
    fig = Figure(figsize=(4.2 * cols, 4.4 * rows))
    grid = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)
    axes = grid.ravel()
    for ax in axes[len(methods):]:
        ax.set_visible(False)
    lo, hi = meas.min() * 0.7, meas.max() * 1.3
    for m in methods:
        hi = max(hi, float(np.nanmax([p[m] for p in pts])) * 1.05)
    xs = np.array([lo, hi])
    for ax, m in zip(axes, methods):
        pred = np.array([p[m] for p in pts])
        s = report["methods"][m]
        ax.fill_between(xs, xs * 0.9, xs * 1.1, color="tab:green", alpha=0.12, label="±10%")
        ax.plot(xs, xs, color="k", lw=0.8)
        for g in sorted({p["group"] for p in pts}):
            sel = np.array([p["group"] == g for p in pts])
            ax.scatter(meas[sel], pred[sel], s=12, alpha=0.7, label=g)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_title(f"{m}\n±10%: {100 * s['within_10pct']:.0f}%  ±5%: {100 * s['within_5pct']:.0f}%  "
                     f"τ={s['kendall_tau']:.3f}", fontsize=9)
        ax.set_xlabel("measured ms")
        ax.tick_params(labelbottom=True)
    for r in range(rows):
        grid[r, 0].set_ylabel("predicted ms")
    axes[0].legend(fontsize=7, loc="upper left")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=110)
    return p
