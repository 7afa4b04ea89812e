"""Benchmark importance-sorted channels against index order in the weight-sharing supernet.

For each of ``--seeds``, trains the ``tiny`` supernet twice on digits with the same settings and
seed, once with ``sort_channels=false`` and once with ``true``, then scores the same ``--archs``
random architectures (and the smallest and the largest) by their inherited weights: BatchNorm
recalibrated on 16 training batches, top-1 accuracy on the validation split.

    taskset -c 0 python -m benchmarks sort_channels       # about a minute per seed on one core

Writes ``<out>/sort_channels.json`` (default out: benchmarks/results/) and prints the table.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import RESULTS, command, machine, pinned_cores, write_result
from nas.data import load_data
from nas.fit.loop import accuracy
from nas.space import load_space
from nas.supernet.checkpoint import load_supernet
from nas.supernet.settings import SupernetSettings
from nas.supernet.train import train_supernet


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=5, help="supernet training epochs (both runs)")
    p.add_argument("--archs", type=int, default=20, help="random architectures scored")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="one pair of trainings per seed")
    p.add_argument("--out", default=str(RESULTS))
    return p.parse_args(argv)


def _run(sort: bool, seed: int, a: argparse.Namespace, data: Any, tmp: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    out = tmp / f"{'sorted' if sort else 'index'}-{seed}"
    train_supernet(load_space("tiny"), data, SupernetSettings(epochs=a.epochs, seed=seed, sort_channels=sort), out)
    seconds = time.perf_counter() - t0
    sn, _ = load_supernet(out / "supernet.ckpt")
    rng = np.random.default_rng(seed)
    archs = [sn.sample(rng) for _ in range(a.archs)]
    acc = [accuracy(sn.subnet(x, data, seed=seed), data, "val") for x in archs]
    ends = {n: accuracy(sn.subnet(x, data, seed=seed), data, "val")
            for n, x in (("smallest", sn.smallest), ("largest", sn.largest))}
    return {"sort_channels": sort, "seed": seed, "train_seconds": round(seconds, 1), "random_acc": acc,
            "mean": float(np.mean(acc)), "min": float(np.min(acc)), **ends}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    a = _args(argv)
    data = load_data({"name": "digits"})
    with tempfile.TemporaryDirectory() as tmp:
        runs = [_run(sort, seed, a, data, Path(tmp)) for seed in a.seeds for sort in (False, True)]
    pairs = list(zip(runs[::2], runs[1::2]))
    diffs = [np.array(s["random_acc"]) - np.array(i["random_acc"]) for i, s in pairs]
    result = {"command": command("sort_channels", argv, cores=pinned_cores()), "machine": machine(), "data": "digits", "space": "tiny", "epochs": a.epochs, "archs": a.archs, "seeds": a.seeds, "runs": runs,
              "paired_diff_mean": [float(d.mean()) for d in diffs],
              "sorted_better": [int((d > 0).sum()) for d in diffs], "sorted_worse": [int((d < 0).sum()) for d in diffs]}
    write_result(Path(a.out) / "sort_channels.json", result)
    print(f"{'seed':>4} {'channels':<9} {'mean of ' + str(a.archs):>11} {'min':>7} {'smallest':>9} {'largest':>8} "
          f"{'train s':>8}")
    for r in runs:
        print(f"{r['seed']:>4} {'sorted' if r['sort_channels'] else 'index':<9} {r['mean']:>11.4f} {r['min']:>7.4f} "
              f"{r['smallest']:>9.4f} {r['largest']:>8.4f} {r['train_seconds']:>8.1f}")
    for seed, d in zip(a.seeds, diffs):
        print(f"seed {seed}: paired difference (sorted - index) {d.mean():+.4f}; sorted better on {int((d > 0).sum())}, "
              f"worse on {int((d < 0).sum())} of {a.archs}")
    return result


if __name__ == "__main__":
    main()
