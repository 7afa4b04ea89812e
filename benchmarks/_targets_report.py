"""The report of ``python -m benchmarks targets``: its markdown tables and its plots (a module of its own
so that the benchmark stays under the size rule).  Run ``python -m benchmarks targets``, not this."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from benchmarks.harness import markdown_table
from nas._io import atomic_write_json, atomic_write_text

COLORS = {"cpu": "tab:blue", "cpu_int8": "tab:cyan", "executorch_cpu": "tab:red", "executorch_cpu_int8": "tab:orange",
          "openvino_cpu": "tab:purple", "openvino_cpu_int8": "tab:pink"}
MARKERS = ("o", "s", "^", "D", "v", "P")
BEST = "best known"  # the row of the front of every network trained by any of the searches


def jaccard(a: set[str], b: set[str]) -> float:
    """|a & b| / |a | b| (1.0 for two empty sets)."""
    return len(a & b) / len(a | b) if a | b else 1.0


def _short(t: str) -> str:
    return t.replace("executorch", "et").replace("openvino", "ov")


def front_rows(res: Mapping[str, Any]) -> tuple[list[list[Any]], list[str]]:
    rows = []
    for t, v in res["targets"].items():
        c = v["coverage_front"]
        rows.append([f"`{t}`", v["size"], *_ranges(v),
                     f"{c['in_table']}/{c['layers']}" + (f" ({c['learned']} learned)" if c["learned"] else ""),
                     v["coverage_trained"]["learned"], v["coverage_trained"]["table_entries"]])
    return rows, ["target", "front", "val accuracy", "predicted ms (own table)", "front's layers in the table",
                  "learned layers, all trained nets", "table entries"]


def matrix_rows(m: Mapping[str, Mapping[str, Any]], fmt, *, cols: Sequence[str],
                corner: str = "front of \\ judged on") -> tuple[list[list[Any]], list[str]]:
    rows = [[f"`{a}`" if a != BEST else f"*{a}*"] + [fmt(a, b) for b in cols] for a in m]
    return rows, [corner] + [f"`{_short(b)}`" for b in cols]


def comparison_tables(cmp: Mapping[str, Any], cols: Sequence[str], *, pool: str,
                      overlap: bool = True) -> list[tuple[str, str]]:
    """(title, markdown) for the rank agreement, overlap, cross hypervolume and still-optimal matrices;
    ``pool`` names the networks the best known front is drawn from."""
    sizes = {a: cmp["common"][a][a] for a in cmp["common"]}
    ov = matrix_rows(cmp["common"], lambda a, b: f"{cmp['common'][a][b]} ({cmp['jaccard'][a][b]:.2f})", cols=cols,
                     corner="front of \\ front of")
    hv = matrix_rows(cmp["hypervolume"], lambda a, b: f"{cmp['hypervolume'][a][b]:.4f}"
                     + ("" if a == BEST else f" ({100 * cmp['hypervolume_share_of_best'][a][b]:.1f}%)"), cols=cols)
    so = matrix_rows(cmp["still_optimal"], lambda a, b: f"{cmp['still_optimal'][a][b]}/{sizes[a]}", cols=cols)
    tau = matrix_rows(cmp["kendall_tau"], lambda a, b: f"{cmp['kendall_tau'][a][b]:.2f}", cols=cols,
                      corner="latency on \\ on")
    return [(f"how alike the targets rank the {cmp['networks']} networks' latency (Kendall τ)", markdown_table(*tau)),
            *([("networks in common (Jaccard)", markdown_table(*ov))] if overlap else []),
            (f"hypervolume (share of the best known front's, of {pool})", markdown_table(*hv)),
            (f"networks still Pareto-optimal among {pool}", markdown_table(*so))]


def _ranges(v: Mapping[str, Any]) -> list[str]:
    return [f"{100 * v['accuracy'][0]:.1f}-{100 * v['accuracy'][1]:.1f}%",
            f"{v['predicted_ms'][0]:.3f}-{v['predicted_ms'][1]:.3f}"]


def control_rows(res: Mapping[str, Any]) -> tuple[list[list[Any]], list[str]]:
    rows = []
    for c in res["controls"].values():
        t = c["target"]
        others = {u: j for u, j in c["jaccard"].items() if u != t}
        u = max(others, key=others.get) if others else None
        hv0 = res["compare_predicted"]["hypervolume"][t][t]
        rows.append([f"`{t}` seed {res['settings']['seed']}", res["targets"][t]["size"], *_ranges(res["targets"][t]),
                     "-", "-", f"{hv0:.4f}"])
        rows.append([f"`{t}` seed {c['seed']}", c["size"], *_ranges(c), f"{c['common'][t]} ({c['jaccard'][t]:.2f})",
                     f"`{u}`: {c['common'][u]} ({others[u]:.2f})" if u else "-", f"{c['hypervolume_on_target']:.4f}"])
    return rows, ["search", "front", "val accuracy", "predicted ms", "in common with the first seed's front (Jaccard)",
                  "most in common with another target's front", "hypervolume on its target"]


def measured_rows(meas: Mapping[str, Any], res: Mapping[str, Any]) -> tuple[list[list[Any]], list[str]]:
    rows = []
    for t, v in meas["per_target"].items():
        s = v["predictor_on_fronts"]
        pred = [n["predicted_ms"][t] for n in res["networks"].values()]
        dr, sr = v["drift_now_over_table"], v.get("predictor_rescaled_on_fronts")
        rows.append([f"`{t}`", f"{v['runtime']['name']} {v['runtime']['version']}",
                     f"{min(pred):.3f}-{max(pred):.3f}", f"{v['range_ms'][0]:.3f}-{v['range_ms'][1]:.3f}",
                     f"{s['mape']:.1f}%", f"{100 * s['within_10pct']:.0f}%", f"{s['kendall_tau']:.2f}",
                     "-" if dr is None else f"{dr:.3f}", "-" if not sr else f"{sr['mape']:.1f}%"])
    return rows, ["target", "runtime", "predicted ms", "measured ms", "MAPE", "within ±10%", "Kendall τ",
                  "drift (now / table)", "MAPE × drift"]


def _draw_front(ax, pts: Sequence[tuple[float, float]], *, own: bool, color: str, marker: str) -> None:
    """A front's networks on one target's latency: markers (hollow for another target's search); the
    target's own front filled, with the staircase of those that stay non-dominated on it."""
    pts = sorted(pts)
    x, y = [p[0] for p in pts], [100 * p[1] for p in pts]
    if own:  # the staircase of those still non-dominated on this latency
        nd = [(m, a) for m, a in pts if not any(a2 >= a and m2 <= m and (a2, m2) != (a, m) for m2, a2 in pts)]
        ax.step([m for m, _ in nd], [100 * a for _, a in nd], where="post", color=color, lw=2.0, zorder=3)
    if own:
        ax.scatter(x, y, s=26, marker=marker, color=color, edgecolors="white", linewidths=0.5, zorder=4)
    else:  # hollow and larger: a network in several fronts shows every front's outline
        ax.scatter(x, y, s=58, marker=marker, facecolors="none", edgecolors=color, linewidths=1.0, zorder=2)


def plot_fronts(res: Mapping[str, Any], lat: Mapping[str, Mapping[str, float]], path: Path, *,
                what: str) -> None:
    """One panel per target's latency (predicted or measured), every search's front drawn on it."""
    p = res["_pool"]
    cols = list(lat)
    n = len(cols)
    nc = min(3, n)
    nr = (n + nc - 1) // nc
    fig = Figure(figsize=(5.2 * nc, 3.9 * nr), dpi=130)
    axes = fig.subplots(nr, nc, squeeze=False)
    for ax, b in zip(axes.flat, cols):
        for i, (a, f) in enumerate(p["fronts"].items()):
            pts = [(lat[b][d], p["scores"][d]) for d in f if d in lat[b]]
            _draw_front(ax, pts, own=a == b, color=COLORS.get(a, "0.3"), marker=MARKERS[i % len(MARKERS)])
        for c in res.get("controls", {}).values() if what == "predicted" else ():
            if c["target"] == b:
                pts = sorted((f["predicted_ms"], f["score"]) for f in c["front"])
                ax.step([x for x, _ in pts], [100 * y for _, y in pts], where="post", color="0.35", lw=1.0, ls="--")
                ax.scatter([x for x, _ in pts], [100 * y for _, y in pts], s=30, marker="x", color="0.35", zorder=3)
        ax.set_title(f"latency {what} on {b}", fontsize=9)
        ax.set_xlabel(f"{what} latency (ms), {b}", fontsize=8)
        ax.set_ylabel("validation accuracy (%)", fontsize=8)
        ax.grid(alpha=0.25)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    handles = [Line2D([], [], ls="", marker=MARKERS[i % len(MARKERS)], mfc="none", color=COLORS.get(a, "0.3"),
                      label=a) for i, a in enumerate(p["fronts"])]
    handles.append(Line2D([], [], color="0.3", lw=2.0, marker="o", label="filled: the panel's own search (line: its non-dominated ones)"))
    for label in res.get("controls", {}) if what == "predicted" else ():
        handles.append(Line2D([], [], color="0.35", lw=1.0, ls="--", marker="x", label=label.replace("@", ", ")))
    fig.legend(handles=handles, loc="lower center", ncol=min(8, len(handles)), fontsize=8,
               title="networks of the front found by the search for", title_fontsize=8)
    s = res["settings"]
    fig.suptitle(f"The same search ({s['space']}, digits, {s['trials']} trials, seed {s['seed']}) for each target: "
                 f"every front on every target's {what} latency", fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 0.96))
    fig.savefig(path)


def write_report(args, res: dict[str, Any], out: Path) -> None:
    """targets.json, summary.md, fronts.png (and measured.png); print the tables."""
    p = res["_pool"]
    cols = list(args.targets)
    plot_fronts(res, p["lat"], out / "fronts.png", what="predicted")
    s = res["settings"]
    md = [f"# bench_targets ({time.strftime('%Y-%m-%d %H:%M %Z')})\n", f"`{' '.join(sys.argv)}`\n",
          f"Space `{s['space']}`; {s['data']}; {s['evaluator']}; NSGA-II (population "
          f"{s['sampler'].get('population_size')}), seed {s['seed']}, {s['trials']} trials per target, no budget; "
          f"latency predicted at {s['deploy_resolution']} px by each target's own table. "
          f"{res['trained_networks']} distinct networks trained over the {len(cols)} searches.\n",
          "## The fronts\n", markdown_table(*front_rows(res)), ""]
    md += [f"Networks in every front: {len(res['compare_predicted']['in_every_front'])}.\n"]
    if res.get("controls"):
        md += [f"## Control: the `{cols[0]}` search with another seed (sampler and training)\n",
               markdown_table(*control_rows(res)), ""]
    for title, table in comparison_tables(res["compare_predicted"], cols, pool="every network trained"):
        md += [f"## Predicted latency: {title}\n", table, ""]
    md += ["![](fronts.png)\n"]
    if "measured" in res:
        m = res["measured"]
        lat_m = {t: v["measured_ms"] for t, v in m["per_target"].items()}
        plot_fronts(res, lat_m, out / "measured.png", what="measured")
        when = sorted({v["measured_at"] for v in m["per_target"].values()})
        md += [f"## Measured on this CPU ({', '.join(when)}): the {len(res['networks'])} networks of the "
               f"fronts\n", markdown_table(*measured_rows(m, res)), ""]
        for title, table in comparison_tables(m["compare_measured"], list(lat_m), pool="the fronts' networks",
                                          overlap=False):
            md += [f"## Measured latency: {title}\n", table, ""]
        md += ["![](measured.png)\n"]
    text = "\n".join(md) + "\n"
    atomic_write_text(out / "summary.md", text)
    atomic_write_json(out / "targets.json", {k: v for k, v in res.items() if not k.startswith("_")})
    print("\n" + text)
