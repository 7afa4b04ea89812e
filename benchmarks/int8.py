"""Where int8 pays on this CPU: int8 / fp32 latency, from the two measured tables.

The ``cpu`` (fp32) and ``cpu_int8`` tables hold the same blocks and the same calibration
networks, measured by the profiler with the same runtime and settings; the held-out
measurements of ``benchmarks/predictor.py`` hold the same timm models in both precisions.  This
script measures nothing: it divides.

  * per block: int8 / fp32 by kind of layer and by MACs;
  * per whole network: the calibration networks of each space, and the timm models;
  * the share of each that meets the issue's bar (int8 <= 0.6x fp32).

    python -m benchmarks int8                              # conf=cpu / conf=cpu_int8 (the Xeon)
    python -m benchmarks int8 --targets epyc_zen5 epyc_zen5_int8    # the EPYC Zen 5's pair of tables
    python -m benchmarks int8 --targets executorch_cpu executorch_cpu_int8  # any runtime's pair
    python -m benchmarks int8 --runtimes --targets cpu openvino_cpu  # two runtimes, one precision

``--reports A.json B.json`` adds the networks two ``nas.validate`` reports both measured (held-out
networks and timm models, matched by Arch digest), divided the same way (``validated``).

With ``--runtimes`` the two tables are of the same precision and the ratio is the second runtime's
latency over the first's (``runtimes_<first>_<second>.json``); the bar is then only a reference line.

Writes ``benchmarks/results/int8.json`` and ``int8.png`` (ratio against MACs) for the default pair,
``int8_<fp32 target>.json`` / ``.png`` for another, and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from benchmarks.harness import RESULTS, command, write_result
from benchmarks.predictor import TIMM_MODELS
from nas.cost import arch_cost, block_cost
from nas.latency.predict.ops import MULTI_OP_ACTS
from nas.latency.predict.predictor import table_networks
from nas.latency.tables.table import LatencyTable, resolve_table_path
from nas.target import load_target
from nas.timm_arch import from_timm

BAR = 0.6
MAC_BINS = [0, 1e6, 1e7, 1e8, np.inf]
MAC_LABELS = ["< 1M", "1M-10M", "10M-100M", ">= 100M"]


def _kind(key) -> str:
    b = key.block
    act = getattr(b, "act", None)
    tag = "multi-op act" if act in MULTI_OP_ACTS else "relu-like act"
    if b.kind == "conv":
        return f"stem ({tag})"
    if b.kind == "head":
        return "head"
    se = "+SE" if getattr(b, "se", None) is not None else ""
    return f"{b.kind}{se} ({tag})"


def _summary(ratios: np.ndarray) -> dict:
    return {"n": int(len(ratios)), "median": float(np.median(ratios)), "p10": float(np.percentile(ratios, 10)),
            "p90": float(np.percentile(ratios, 90)), "share_le_bar": float(np.mean(ratios <= BAR))}


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", nargs=2, default=["cpu", "cpu_int8"], metavar=("FP32", "INT8"),
                    help="the fp32 and int8 targets whose tables are divided (default: cpu cpu_int8)")
    ap.add_argument("--runtimes", action="store_true",
                    help="compare two runtimes' tables of one precision (second / first) instead of int8 / fp32")
    ap.add_argument("--reports", nargs=2, default=None, metavar=("A", "B"),
                    help="two nas.validate reports (JSON) of the two targets: their common networks divided too")
    ap.add_argument("--out", default=str(RESULTS))
    return ap.parse_args()


def main() -> None:
    args = _parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t32, t8 = args.targets
    args.fp32, args.int8 = (resolve_table_path(load_target(t).table) for t in args.targets)
    stem = f"runtimes_{t32}_{t8}" if args.runtimes else "int8" if t32 == "cpu" else f"int8_{t32}"
    f32, i8 = LatencyTable.load(args.fp32), LatencyTable.load(args.int8)
    for t, want in ((f32, "fp32"), (i8, "int8")) if not args.runtimes else ():
        got = t.metadata.get("precision")
        if got != want:
            sys.exit(f"{t.path}: precision {got!r}, expected {want!r}")
    if args.runtimes and f32.metadata.get("precision") != i8.metadata.get("precision"):
        sys.exit(f"--runtimes compares one precision: {args.fp32} is {f32.metadata.get('precision')!r}, "
                 f"{args.int8} {i8.metadata.get('precision')!r}")

    # blocks
    keys = [k for k in f32.entries if k in i8.entries]
    r_blocks = np.array([i8.entries[k].median_ms / f32.entries[k].median_ms for k in keys])
    macs = np.array([block_cost(k).macs for k in keys], float)
    kinds = np.array([_kind(k) for k in keys])
    by_kind = {k: _summary(r_blocks[kinds == k]) for k in sorted(set(kinds))}
    bins = np.digitize(macs, MAC_BINS[1:-1])
    by_macs = {MAC_LABELS[i]: _summary(r_blocks[bins == i]) for i in range(len(MAC_LABELS)) if (bins == i).any()}

    # whole networks: the calibration networks both tables measured
    nets32 = _networks(f32)
    nets8 = _networks(i8)
    common = [d for d in nets32 if d in nets8]
    r_nets = np.array([nets8[d][1] / nets32[d][1] for d in common])
    net_macs = np.array([arch_cost(nets32[d][0]).macs for d in common], float)
    spaces = np.array([nets32[d][0].name or "?" for d in common])
    by_space = {s: _summary(r_nets[spaces == s]) for s in sorted(set(spaces))}

    timm_rows = _timm_rows(t32, t8)

    report = {
        "bar": BAR,
        "tables": {"fp32": str(args.fp32), "int8": str(args.int8),
                   "device": f32.metadata.get("device", {}).get("name"),
                   "devices": [t.metadata.get("device", {}) for t in (f32, i8)],
                   "runtimes": [t.metadata.get("runtime", {}) for t in (f32, i8)],
                   "measured": [t.metadata.get("updated") for t in (f32, i8)],
                   "ratio": f"{t8} / {t32}",
                   "int8_settings": _int8_settings(i8)},
        "blocks": {"all": _summary(r_blocks), "by_kind": by_kind, "by_macs": by_macs},
        "networks": {"all": _summary(r_nets) if len(r_nets) else None, "by_space": by_space,
                     "macs_median": {s: float(np.median(net_macs[spaces == s])) for s in set(spaces)}},
        "timm": timm_rows,
        "validated": _validated(args.reports) if args.reports else None,
    }
    write_result(out / f"{stem}.json", {"command": command("int8"), **report})
    _plot(out / f"{stem}.png", macs, r_blocks, net_macs, r_nets, spaces, timm_rows)
    _print_report(report, t32, t8)
    print(f"\n-> {out / (stem + '.json')}, {out / (stem + '.png')}")


def _timm_rows(t32: str, t8: str) -> list[dict]:
    """The timm models both of ``bench_predictor``'s held-out measurement caches hold (this machine's
    results for the two targets): MACs, fp32 and int8 medians and their ratio."""
    timm_rows = []
    res = RESULTS
    caches = [res / f"predictor_{t32}.measurements.json", res / f"predictor_{t8}.measurements.json"]
    if all(c.is_file() for c in caches):
        c32, c8 = (json.loads(c.read_text())["rounds_ms"] for c in caches)
        for name in TIMM_MODELS:
            a = from_timm(name)
            d = a.digest()
            if d in c32 and d in c8:
                timm_rows.append({"model": name, "macs": arch_cost(a).macs, "fp32_ms": float(np.median(c32[d])),
                                  "int8_ms": float(np.median(c8[d]))})
        for r in timm_rows:
            r["ratio"] = r["int8_ms"] / r["fp32_ms"]
    return timm_rows


def _print_report(report: dict, t32: str, t8: str) -> None:
    print(f"{t8} / {t32} latency on {report['tables']['device']} (medians; share at or under {BAR}x)")
    print(f"{'':28s} {'n':>5s} {'median':>7s} {'p10':>6s} {'p90':>6s} {'<=0.6x':>7s}")
    rows = [("blocks, all", report["blocks"]["all"])]
    rows += [(f"  MACs {k}", v) for k, v in report["blocks"]["by_macs"].items()]
    rows += [(f"  {k}", v) for k, v in report["blocks"]["by_kind"].items()]
    rows += [(f"networks: {k}", v) for k, v in report["networks"]["by_space"].items()]
    for label, s in rows:
        print(f"{label:28s} {s['n']:5d} {s['median']:6.2f}x {s['p10']:5.2f}x {s['p90']:5.2f}x "
              f"{100 * s['share_le_bar']:6.1f}%")
    for r in report["timm"]:
        print(f"timm {r['model']:23s} {r['macs'] / 1e6:7.0f} MMACs  fp32 {r['fp32_ms']:.3f} ms  "
              f"int8 {r['int8_ms']:.3f} ms  {r['ratio']:.2f}x")
    for group, v in (report["validated"] or {}).items():
        print(f"validated {group:18s} {v['n']:5d} {v['median']:6.2f}x {v['p10']:5.2f}x {v['p90']:5.2f}x")
        for r in v.get("rows", []):
            print(f"  {r['model']:28s} {r['a_ms']:.3f} ms -> {r['b_ms']:.3f} ms  {r['ratio']:.2f}x")


def _validated(paths: list[str]) -> dict:
    """Per group (space, timm), the second report's measured latency over the first's for the networks
    both measured; the timm models one by one."""
    a, b = ({p["digest"]: p for p in json.loads(Path(x).read_text())["points"]} for x in paths)
    common = [d for d in a if d in b]
    out = {}
    for g in sorted({a[d]["group"] for d in common}):
        ds = [d for d in common if a[d]["group"] == g]
        ratios = np.array([b[d]["measured_ms"] / a[d]["measured_ms"] for d in ds])
        out[g] = {"n": len(ds), "median": float(np.median(ratios)), "p10": float(np.percentile(ratios, 10)),
                  "p90": float(np.percentile(ratios, 90)), "reports": list(paths)}
        if g == "timm":
            out[g]["rows"] = [{"model": a[d]["arch"], "a_ms": a[d]["measured_ms"], "b_ms": b[d]["measured_ms"],
                               "ratio": b[d]["measured_ms"] / a[d]["measured_ms"]} for d in ds]
    return out


def _int8_settings(table: LatencyTable) -> str:
    """How the (second) table's int8 graphs were made, by its runtime."""
    rt = (table.metadata.get("runtime") or {}).get("name")
    if table.metadata.get("precision") != "int8":
        return "none (fp32)"
    return {"onnxruntime": "QDQ, u8 activations per-tensor, s8 weights per-channel, reduce_range, MinMax",
            "executorch": "PT2E XNNPACKQuantizer: symmetric int8 activations, per-channel int8 weights",
            "openvino": "NNCF post-training quantization (default preset)",
            "litert": "ai-edge-quantizer static_wi8_ai8: int8 activations per tensor, int8 weights per channel, "
                      "int8 input and output"}.get(rt, str(rt))


def _networks(table: LatencyTable) -> dict:
    return {a.digest(): (a, ms) for a, ms in table_networks(table)}


def _plot(path: Path, macs, r_blocks, net_macs, r_nets, spaces, timm_rows) -> None:
    fig = Figure(figsize=(11, 4.2))
    ax = fig.subplots(1, 2)
    ax[0].scatter(macs / 1e6, r_blocks, s=6, alpha=0.5)
    ax[0].set(xscale="log", xlabel="block MACs (M)", ylabel="int8 / fp32 latency", title="blocks")
    for s in sorted(set(spaces)):
        sel = spaces == s
        ax[1].scatter(net_macs[sel] / 1e6, r_nets[sel], s=10, label=s)
    if timm_rows:
        ax[1].scatter([r["macs"] / 1e6 for r in timm_rows], [r["ratio"] for r in timm_rows], marker="x", c="k",
                      label="timm")
    ax[1].set(xscale="log", xlabel="network MACs (M)", title="whole networks")
    ax[1].legend(fontsize=8)
    for a in ax:
        a.axhline(1.0, c="gray", lw=0.8)
        a.axhline(BAR, c="red", lw=0.8, ls="--")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
