"""The training pipeline on Fashion-MNIST: train the Pareto front, prune, QAT, export, measure.

1. A search run: ``--run <dir>`` (an existing ``python -m nas.search`` run dir), or, without it,
   a small search made here through the CLI (``nas.search conf=<fp32 target> data=fashion_mnist``).
2. The pipeline (``nas.train.pipeline.train_front``): full training, pruning to ``--ratio`` x the
   predicted latency on the fp32 target's table, QAT, ONNX fp32 / PTQ-int8 / QAT-int8 exports, each
   scored by onnxruntime on the 10k test images and measured on this CPU (onnxruntime, 1 thread,
   batch 1) where the targets are this machine, predicted by the fp32 and int8 targets' tables
   (``--targets``, default ``epyc_zen5 epyc_zen5_int8``).
3. The issue's checks, per model, from those figures (nothing here is tuned to pass):
   QAT-int8 accuracy within 1 point of fp32 and above PTQ-int8; int8 measured latency <= 0.6x fp32
   (same architecture); pruning to 0.7x measured latency costs <= 1 point; every exported model's
   measured latency within +-10% of its prediction.

    python -m benchmarks train                         # full: search + 30 epochs (hours on 1 core)
    python -m benchmarks train --smoke                 # minutes: small search, 2 epochs, 3k images
    python -m benchmarks train --run runs/search/X --select 0 2 --epochs 30
    python -m benchmarks train --targets cpu cpu_int8  # the Xeon's tables (nothing measured elsewhere)

Writes ``<out>/bench_train.json`` (figures, checks, settings, machine), ``bench_train.png``
(predicted vs measured latency; accuracy vs measured latency per variant) and prints a table.
The pipeline's own outputs (checkpoints, ONNX files, report.md) are in ``<run>/train``; a re-run
resumes.  Latency figures are clean only on an idle core: pin the run (``taskset -c 1``) and
keep other work off that core while it measures.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import subprocess
import sys
import time
from pathlib import Path

from matplotlib.figure import Figure

from benchmarks.harness import command, pinned_cores, text_table, write_result
from nas.fit.settings import FitSettings
from nas.latency.runtimes.device import device_identity
from nas.target import load_target
from nas.train.pipeline import train_front
from nas.train.settings import ExportSettings, PipelineSettings


def _search(out: Path, *, trials: int, epochs: int, train_samples: int, evaluator: str, target: str) -> Path:
    run = out / "search"
    if (run / "pareto.json").is_file():
        return run
    cmd = [sys.executable, "-m", "nas.search", f"conf={target}", "data=fashion_mnist", f"n_trials={trials}",
           f"out={run}", "progress=false", f"evaluator={evaluator}", f"data.train_samples={train_samples}"]
    if evaluator == "train":
        cmd.append(f"evaluator.epochs={epochs}")
    print("search:", " ".join(cmd[1:]), flush=True)
    r = subprocess.run(cmd, text=True)
    if r.returncode != 0:
        sys.exit(f"the search failed (exit {r.returncode})")
    return run


def _checks(m: dict) -> dict:
    v = {x["variant"]: x for x in m["variants"]}
    acc = {k: 100 * x["accuracy"] for k, x in v.items()}
    ms = {k: (x["measured"] or {}).get("median_ms") for k, x in v.items()}
    float_final = "pruned" if "pruned" in v else "fp32"
    out: dict = {"accuracy_pct": acc, "measured_ms": ms,
                 "predicted_ms": {k: (x["predicted"] or {}).get("ms") for k, x in v.items()},
                 "prediction_source": {k: (x["predicted"] or {}).get("source") for k, x in v.items()},
                 "error_pct": {k: x.get("error_pct") for k, x in v.items()}}
    if "qat_int8" in v:
        out["qat_minus_fp32_points"] = acc["qat_int8"] - acc["fp32"]
        out["qat_minus_float_final_points"] = acc["qat_int8"] - acc[float_final]
        out["qat_minus_ptq_points"] = acc["qat_int8"] - acc["ptq_int8"]
        out["qat_within_1pt_of_fp32"] = acc["qat_int8"] >= acc["fp32"] - 1.0
        out["qat_above_ptq"] = acc["qat_int8"] > acc["ptq_int8"]
    for q in ("qat_int8", "ptq_int8"):
        if q in v and ms.get(q) and ms.get(float_final):
            out[f"{q}_over_fp32_latency"] = ms[q] / ms[float_final]
    if out.get("qat_int8_over_fp32_latency") is not None:
        out["int8_le_0.6x_fp32"] = out["qat_int8_over_fp32_latency"] <= 0.6
    if "pruned" in v and ms.get("pruned") and ms.get("fp32"):
        out["pruned_over_fp32_latency"] = ms["pruned"] / ms["fp32"]
        out["pruning_cost_points"] = acc["fp32"] - acc["pruned"]
        out["pruning_le_1pt"] = out["pruning_cost_points"] <= 1.0
    errs = [e for e in out["error_pct"].values() if e is not None]
    if errs:
        out["all_within_10pct_of_prediction"] = all(abs(e) <= 10 for e in errs)
    return out


def _plot(models: list[dict], path: Path) -> None:
    fig = Figure(figsize=(11, 4.5))
    a1, a2 = fig.subplots(1, 2)
    colors = {"fp32": "C0", "pruned": "C1", "ptq_int8": "C2", "qat_int8": "C3"}  # colour: variant
    markers = "osD^vP*X"  # marker: model
    lim = 0.0
    for i, m in enumerate(models):
        mk = markers[i % len(markers)]
        for x in m["variants"]:
            c = colors.get(x["variant"], "k")
            if x["measured"] and x["predicted"]:
                mx, px = x["measured"]["median_ms"], x["predicted"]["ms"]
                a1.scatter(mx, px, marker=mk, color=c)
                lim = max(lim, mx, px)
            if x["measured"]:
                a2.scatter(x["measured"]["median_ms"], 100 * x["accuracy"], marker=mk, color=c)
    for a in (a1, a2):
        for v, c in colors.items():
            a.scatter([], [], color=c, marker="o", label=v)
        for i, m in enumerate(models):
            a.scatter([], [], color="gray", marker=markers[i % len(markers)], label=m["id"])
    if lim:
        a1.plot([0, lim * 1.1], [0, lim * 1.1], "k-", lw=0.8)
        a1.fill_between([0, lim * 1.1], [0, lim * 0.99], [0, lim * 1.21], color="g", alpha=0.1, label="±10%")
    a1.set(xlabel="measured ms (this CPU)", ylabel="predicted ms", title="prediction vs measurement")
    a2.set(xlabel="measured ms (this CPU)", ylabel="test accuracy %", title="accuracy vs latency")
    for a in (a1, a2):
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--run", help="an existing search run dir (default: a small search made here)")
    ap.add_argument("--out", default="runs/bench_train", help="where the search (if made) and the JSON go")
    ap.add_argument("--train-dir", help="where the pipeline writes (default: <run>/train)")
    ap.add_argument("--smoke", action="store_true", help="minutes, not hours: 3k images, 2 epochs, 2 models")
    ap.add_argument("--select", type=int, nargs="*", help="Pareto indices to train (default: all)")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--prune-epochs", type=int, default=10)
    ap.add_argument("--qat-epochs", type=int, default=4)
    ap.add_argument("--ratio", type=float, default=0.7, help="prune to this x the predicted latency")
    ap.add_argument("--criterion", default="loss", choices=["loss", "l1", "bn", "taylor"])
    ap.add_argument("--distill", type=float, default=0.0,
                    help="knowledge-distillation weight for pruning's fine-tuning and QAT (teacher: the fp32 network)")
    ap.add_argument("--train-samples", type=int, default=None, help="training images (default: all 54k)")
    ap.add_argument("--search-trials", type=int, default=24)
    ap.add_argument("--search-epochs", type=int, default=2)
    ap.add_argument("--search-samples", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--targets", nargs=2, default=["epyc_zen5", "epyc_zen5_int8"], metavar=("FP32", "INT8"),
                    help="the fp32 and int8 targets (conf/target/<name>.yaml) that guide pruning and predict "
                         "the exports; measured only when they name this machine's CPU")
    a = ap.parse_args()
    if a.smoke:
        a.epochs, a.prune_epochs, a.qat_epochs = 2, 1, 1
        a.train_samples = a.train_samples or 3000
        a.search_trials, a.search_samples = 6, 2000
        a.select = a.select if a.select is not None else [0, -1]
    return a


def main() -> None:
    a = _parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    run = Path(a.run) if a.run else _search(out, trials=a.search_trials, epochs=a.search_epochs,
                                            train_samples=a.search_samples,
                                            evaluator="zero_cost" if a.smoke else "train", target=a.targets[0])
    s = PipelineSettings(
        run=str(run), target=load_target(a.targets[0]), out=a.train_dir, select=a.select if a.select else "all",
        train_samples=a.train_samples, seed=a.seed, train=FitSettings(epochs=a.epochs),
        prune={"enabled": True, "ratio": a.ratio, "criterion": a.criterion, "epochs": a.prune_epochs,
               "distill": a.distill},
        qat={"enabled": True, "epochs": a.qat_epochs, "distill": a.distill}, export=ExportSettings(),
        targets={"fp32": a.targets[0], "int8": a.targets[1]},
    )
    report = train_front(s)
    models = [{"id": m["id"], "arch": m["arch"], "prune": m.get("prune"), "variants": m["variants"],
               "checks": _checks(m)} for m in report["models"]]
    res = {
        "benchmark": "bench_train", "command": command("train", cores=pinned_cores()), "smoke": a.smoke,
        "run": str(run), "seconds": time.perf_counter() - t0,
        "machine": {**device_identity("cpu"), "python": platform.python_version()},
        "settings": {**vars(a), **report["settings"]}, "quantization": report["quantization"],
        "latency_targets": report["latency_targets"], "data": report["data"], "models": models,
    }
    write_result(out / "bench_train.json", res, plot=lambda png: _plot(report["models"], png))
    _print_tables(models)
    print(f"\nbench: {out / 'bench_train.json'}\nplot:  {out / 'bench_train.png'}\nreport: {Path(a.train_dir or run / 'train') / 'report.md'}")
    print(json.dumps({"quantization": res["quantization"]}, indent=1))


def _print_tables(models: list[dict]) -> None:
    """Per model and variant: accuracy, measured and predicted ms; then per model the checks."""
    rows = []
    for m in models:
        c = m["checks"]
        for k, acc in c["accuracy_pct"].items():
            e = c["error_pct"].get(k)
            rows.append([m["id"], k, f"{acc:.2f}", f"{c['measured_ms'].get(k) or float('nan'):.4f}",
                         f"{c['predicted_ms'].get(k) or float('nan'):.4f}" +
                         (" est." if c["prediction_source"].get(k) == "estimated" else ""),
                         "—" if e is None else f"{e:+.1f}%"])
    print(text_table(rows, ["model", "variant", "acc %", "measured ms", "predicted ms", "pred. error"]))
    print()
    def fmt_check(c: dict, k: str, fmt: str = "{:+.2f}") -> str:
        v = c.get(k)
        return "—" if v is None else (("yes" if v else "NO") if isinstance(v, bool) else fmt.format(v))

    crow = []
    for m in models:
        c = m["checks"]

        def f(k, fmt="{:+.2f}", c=c):
            return fmt_check(c, k, fmt)

        crow.append([m["id"], f("qat_minus_fp32_points"), f("qat_minus_ptq_points"),
                     f("qat_int8_over_fp32_latency", "{:.2f}x"), f("pruned_over_fp32_latency", "{:.2f}x"),
                     f("pruning_cost_points"), f("all_within_10pct_of_prediction")])
    print(text_table(crow, ["model", "QAT-fp32 pts", "QAT-PTQ pts", "int8/fp32 ms", "pruned/fp32 ms",
                           "prune cost pts", "all ±10%"]))


if __name__ == "__main__":
    main()
