#!/usr/bin/env python
"""Benchmark the weight-sharing supernet as a ranking signal, against stand-alone training.

On Fashion-MNIST (the Debian package's files; a training subset, said so in the output) and the
``tiny`` space, on this machine's CPU:

1. train the supernet once (``nas.supernet.train.train_supernet``, the sandwich rule);
2. pick ``--archs`` architectures spread over the latency range of the space: 2000 random ones,
   their latency predicted by the ``cpu`` target's predictor, the ones at evenly spaced latency
   quantiles;
3. score each by (a) the supernet's inherited weights (``evaluator=supernet``), (b) short training
   (``evaluator=train`` at its default budget), (c) NASWOT and (d) synflow (``evaluator=zero_cost``),
   and train it stand-alone from scratch (``--standalone-epochs``, the reference accuracy), twice
   with two seeds: the agreement of the two runs is the ceiling the reference's noise leaves;
4. report Kendall's tau between the stand-alone accuracy and each score, and the cost of each
   (the supernet's training wall time; seconds per evaluated architecture).

    taskset -c 0 python scripts/bench_supernet.py              # the benchmark (about 20 minutes on one core)
    taskset -c 0 python scripts/bench_supernet.py --quick      # a minute or two: checks the pipeline only

Writes ``<out>/supernet.json`` and ``<out>/supernet.png`` (scatter plots; default out:
scripts/results/) and prints the table.  The supernet checkpoint and each architecture's scores
are cached under ``<out>/bench_supernet/``, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nas._io import atomic_write_json  # noqa: E402

METHODS = ("supernet", "train", "naswot", "synflow")


def add_subset_args(p: argparse.ArgumentParser) -> None:
    """The data options of the supernet benchmarks (this one and bench_supernet_search.py): one
    training subset, small enough for a run on one core."""
    p.add_argument("--data", default="fashion_mnist", help="dataset (fashion_mnist, or digits)")
    p.add_argument("--train-samples", type=int, default=2000, help="training subset (images)")
    p.add_argument("--val-samples", type=int, default=1000, help="validation images scored")
    p.add_argument("--resolution", type=int, default=16, help="input px of training and scoring (16 keeps a run short)")


def load_subset(a: argparse.Namespace) -> Any:
    """The dataset ``add_subset_args``'s options name, no augmentation; says what it loaded."""
    from nas.data import load_data

    data = load_data({"name": a.data, "resolution": a.resolution, "train_samples": a.train_samples,
                      "val_samples": a.val_samples, "augment": "none"})
    print(f"data: {data.describe()} (a training subset of {a.train_samples} images)", flush=True)
    return data


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    add_subset_args(p)
    p.add_argument("--archs", type=int, default=24, help="architectures spread over the latency range")
    p.add_argument("--supernet-epochs", type=int, default=20)
    p.add_argument("--standalone-epochs", type=int, default=6, help="the stand-alone (reference) training")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny settings: checks the pipeline, figures meaningless")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    a = p.parse_args(argv)
    if a.quick:
        a.train_samples, a.val_samples, a.archs, a.supernet_epochs, a.standalone_epochs = 256, 128, 4, 1, 1
    return a


def _pick_archs(space: Any, data: Any, n: int, seed: int) -> tuple[list[Any], list[float]]:
    """``n`` architectures at evenly spaced quantiles of the predicted latency of 2000 random ones."""
    import nas
    from nas.data import adapt_arch

    target = nas.load_target("cpu")
    model = nas.load_latency_model(target)
    res = target.resolution or space.resolution
    rng = np.random.default_rng(seed)
    pool = {a.digest(): a for a in (space.random(rng) for _ in range(2000))}
    archs = list(pool.values())
    ms = model.predict([adapt_arch(a, data, resolution=res) for a in archs])
    order = np.argsort(ms)
    idx = list(dict.fromkeys(int(order[int(round(q * (len(order) - 1)))]) for q in np.linspace(0, 1, n)))
    return [archs[i] for i in idx], [float(ms[i]) for i in idx]


def _score_all(arch: Any, data: Any, a: argparse.Namespace, ckpt: Path, have: dict[str, Any]) -> dict[str, Any]:
    """Every score of ``arch`` that ``have`` lacks.  ``standalone_repeat``: the stand-alone training again
    with another seed, whose agreement with the first bounds the Kendall tau any score can reach."""
    from nas.search.evaluate import SupernetEvaluator, TrainEvaluator, ZeroCostEvaluator

    evals = {"supernet": (SupernetEvaluator(checkpoint=str(ckpt), device="cpu"), a.seed),
             "train": (TrainEvaluator(device="cpu"), a.seed),
             "naswot": (ZeroCostEvaluator(proxy="naswot", device="cpu"), a.seed),
             "synflow": (ZeroCostEvaluator(proxy="synflow", device="cpu"), a.seed),
             "standalone": (TrainEvaluator(epochs=a.standalone_epochs, device="cpu"), a.seed),
             "standalone_repeat": (TrainEvaluator(epochs=a.standalone_epochs, device="cpu"), a.seed + 1)}
    out = dict(have)
    for name, (ev, seed) in evals.items():
        if name not in out:
            r = ev.evaluate(arch, data, seed=seed)
            out[name] = {"score": r.score, "seconds": r.seconds}
    return out


def _plot(rows: list[dict[str, Any]], taus: dict[str, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(METHODS), figsize=(4 * len(METHODS), 3.6))
    ref = [r["scores"]["standalone"]["score"] * 100 for r in rows]
    for ax, m in zip(axes, METHODS):
        v = [r["scores"][m]["score"] * (100 if m in ("supernet", "train") else 1) for r in rows]
        ax.scatter(v, ref, s=14)
        ax.set_xlabel(f"{m} {'accuracy %' if m in ('supernet', 'train') else 'score'}")
        ax.set_title(f"{m}: Kendall tau {taus[m]:.2f}")
    axes[0].set_ylabel("stand-alone accuracy %")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import torch
    from scipy.stats import kendalltau

    from nas.data import adapt_arch
    from nas.space import load_space
    from nas.supernet.settings import SupernetSettings
    from nas.supernet.train import train_supernet

    a = _args(argv)
    torch.set_num_threads(1)
    out = Path(a.out)
    work = out / "bench_supernet" / ("quick" if a.quick else "full")
    data = load_subset(a)
    space = load_space("tiny")
    t0 = time.perf_counter()
    settings = SupernetSettings(epochs=a.supernet_epochs, seed=a.seed, device="cpu")
    rec = train_supernet(space, data, settings, work)
    sn_train_s = sum(h["seconds"] for h in rec["history"])
    print(f"supernet: {a.supernet_epochs} epochs, {sn_train_s:.0f} s of training "
          f"(this run {time.perf_counter() - t0:.0f} s)", flush=True)
    archs, ms = _pick_archs(space, data, a.archs, a.seed)
    cache_path = work / "scores.json"
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    rows = []
    for i, (arch, lat) in enumerate(zip(archs, ms)):
        key = arch.digest()
        if len(cache.get(key, {})) < len(METHODS) + 2:
            cache[key] = _score_all(adapt_arch(arch, data), data, a, work / "supernet.ckpt", cache.get(key, {}))
            atomic_write_json(cache_path, cache)
        rows.append({"arch": arch.label(), "digest": key, "predicted_ms": lat, "scores": cache[key]})
        s = cache[key]
        print(f"[{i + 1}/{len(archs)}] {lat:.3f} ms  stand-alone {100 * s['standalone']['score']:.1f}%  supernet "
              f"{100 * s['supernet']['score']:.1f}%  train {100 * s['train']['score']:.1f}%", flush=True)
    ref = [r["scores"]["standalone"]["score"] for r in rows]
    taus = {m: float(kendalltau(ref, [r["scores"][m]["score"] for r in rows]).statistic) for m in METHODS}
    repeat = [r["scores"]["standalone_repeat"]["score"] for r in rows]
    taus["standalone_repeat"] = float(kendalltau(ref, repeat).statistic)  # the noise ceiling of the reference
    mean_ref = [(x + y) / 2 for x, y in zip(ref, repeat)]
    taus_mean = {m: float(kendalltau(mean_ref, [r["scores"][m]["score"] for r in rows]).statistic) for m in METHODS}
    secs = {m: float(np.mean([r["scores"][m]["seconds"] for r in rows])) for m in (*METHODS, "standalone")}
    spread = {"min": float(min(ref)), "max": float(max(ref)), "std": float(np.std(ref))}
    result = {
        "command": "taskset -c 0 python scripts/bench_supernet.py" + (" --quick" if a.quick else ""),
        "data": data.describe(), "train_subset": a.train_samples, "resolution": a.resolution, "space": "tiny",
        "archs": len(rows), "supernet_epochs": a.supernet_epochs, "standalone_epochs": a.standalone_epochs,
        "supernet_train_seconds": sn_train_s, "supernet_history": rec["history"],
        "kendall_tau_vs_standalone": taus, "kendall_tau_vs_standalone_mean_of_two": taus_mean,
        "standalone_accuracy": spread, "seconds_per_arch": secs, "rows": rows, "quick": a.quick,
    }
    name = "supernet_quick" if a.quick else "supernet"
    atomic_write_json(out / f"{name}.json", result)
    _plot(rows, taus, out / f"{name}.png")
    print(f"\n{'method':<10} {'Kendall tau':>11} {'tau (mean of 2)':>15} {'s / arch':>9}")
    for m in METHODS:
        print(f"{m:<10} {taus[m]:>11.3f} {taus_mean[m]:>15.3f} {secs[m]:>9.2f}")
    print(f"{'standalone':<10} {'(reference)':>11} {'':>15} {secs['standalone']:>9.2f}")
    print(f"stand-alone again with another seed: Kendall tau {taus['standalone_repeat']:.3f} (the ceiling the noise of "
          f"the reference leaves); stand-alone accuracies {100 * spread['min']:.1f}-{100 * spread['max']:.1f}% "
          f"(std {100 * spread['std']:.2f} points)")
    print(f"supernet training: {sn_train_s:.0f} s once ({sn_train_s / max(1, len(rows)):.1f} s per arch over "
          f"{len(rows)} archs)\nwrote {out / (name + '.json')} and {out / (name + '.png')}")
    return result


if __name__ == "__main__":
    main()
