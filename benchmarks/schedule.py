"""Benchmark the supernet's schedules: the sandwich rule against progressive shrinking.

For each of ``--seeds``, trains the ``tiny`` supernet with the same settings and seed twice, once
``train.schedule=sandwich`` and once ``train.schedule=progressive`` (Once-for-All's phases,
``train.phase_starts``), for the same ``--epochs``.  When the progressive run's training took another
CPU time than the sandwich run's, it is trained again for as many epochs as fit the sandwich run's
CPU time (equal time).  Every supernet then scores the same ``--archs`` random architectures (drawn
once, from ``--arch-seed``), and the smallest and the largest, with the supernet evaluator
(``evaluator=supernet``: inherited weights, BatchNorm recalibrated on 16 training batches, top-1
accuracy on the validation split).

    taskset -c 0 python -m benchmarks schedule                            # digits, 3 seeds
    taskset -c 0 python -m benchmarks schedule --data fashion_mnist --seeds 0   # 2000 images at 16 px
    taskset -c 0 python -m benchmarks schedule --quick                    # checks the pipeline only

Times are CPU seconds of the process (``time.process_time``: the training, each epoch's validation
and checkpoint), which a busy machine inflates less than wall time; wall seconds are recorded beside.
Writes ``<out>/schedule_<data>.json`` and ``schedule_<data>.md`` (default out: benchmarks/results/) and
prints the table.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.harness import RESULTS, command, machine, pinned_cores, write_result
from nas.data import adapt_arch, load_data
from nas.search.evaluate import SupernetEvaluator
from nas.space import load_space
from nas.supernet.settings import SupernetSettings
from nas.supernet.train import train_supernet

SCHEDULES = ("sandwich", "progressive")


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="digits", help="digits, or fashion_mnist (a training subset at 16 px)")
    p.add_argument("--root", default=None, help="data.root (fashion_mnist: the folder of its four IDX files)")
    p.add_argument("--epochs", type=int, default=8, help="supernet training epochs (both schedules)")
    p.add_argument("--archs", type=int, default=20, help="random architectures scored")
    p.add_argument("--arch-seed", type=int, default=0, help="draws the architectures scored (the same for every run)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="one pair of trainings per seed")
    p.add_argument("--phase-starts", type=float, nargs=3, default=None, help="train.phase_starts (default: the library's)")
    p.add_argument("--quick", action="store_true", help="tiny settings: checks the pipeline, figures meaningless")
    p.add_argument("--out", default=str(RESULTS))
    a = p.parse_args(argv)
    if a.quick:
        a.epochs, a.archs, a.seeds = 4, 3, [0]
    return a


def _data(a: argparse.Namespace) -> Any:
    cfg: dict[str, Any] = {"name": a.data, "root": a.root}
    if a.data == "fashion_mnist":  # benchmarks/supernet.py's subset: minutes, not hours, on one core
        cfg.update(resolution=16, train_samples=2000, val_samples=1000, augment="none")
    if a.quick:
        cfg.update(train_samples=128, val_samples=64)
    return load_data(cfg)


def _train(schedule: str, epochs: int, seed: int, a: argparse.Namespace, data: Any, out: Path) -> dict[str, Any]:
    kw = {"phase_starts": tuple(a.phase_starts)} if a.phase_starts else {}
    s = SupernetSettings(epochs=epochs, seed=seed, schedule=schedule, device="cpu", **kw)
    wall, cpu = time.perf_counter(), time.process_time()
    rec = train_supernet(load_space("tiny"), data, s, out)
    return {"schedule": schedule, "seed": seed, "epochs": epochs, "phase_starts": list(s.phase_starts),
            "phases": rec["phases"], "train_cpu_s": round(time.process_time() - cpu, 1),
            "train_wall_s": round(time.perf_counter() - wall, 1), "history": rec["history"]}


def _score(run: dict[str, Any], ckpt: Path, archs: list[Any], data: Any) -> dict[str, Any]:
    ev = SupernetEvaluator(checkpoint=str(ckpt), device="cpu")
    seed, space = run["seed"], load_space("tiny")
    acc = [ev.evaluate(adapt_arch(x, data), data, seed=seed).score for x in archs]
    ends = {n: ev.evaluate(adapt_arch(x, data), data, seed=seed).score
            for n, x in (("smallest", space.smallest()), ("largest", space.largest()))}
    return {**run, "random_acc": acc, "mean": float(np.mean(acc)), "median": float(np.median(acc)),
            "min": float(np.min(acc)), **ends}


def _seed_runs(seed: int, a: argparse.Namespace, data: Any, archs: list[Any], tmp: Path) -> list[dict[str, Any]]:
    """Sandwich and progressive at ``--epochs``; progressive again at the sandwich run's CPU time when
    that buys another epoch count."""
    runs = []
    for schedule in SCHEDULES:
        out = tmp / f"{schedule}-{seed}"
        run = _train(schedule, a.epochs, seed, a, data, out)
        runs.append({**_score(run, out / "supernet.ckpt", archs, data), "budget": "equal epochs"})
        _print(runs[-1])
    same = max(1, round(a.epochs * runs[0]["train_cpu_s"] / runs[1]["train_cpu_s"]))
    if same != a.epochs:
        out = tmp / f"progressive-time-{seed}"
        run = _train("progressive", same, seed, a, data, out)
        runs.append({**_score(run, out / "supernet.ckpt", archs, data), "budget": "equal time"})
        _print(runs[-1])
    return runs


def _print(r: dict[str, Any]) -> None:
    print(f"seed {r['seed']} {r['schedule']:<11} {r['epochs']:>3} epochs ({r['budget']}): mean {100 * r['mean']:.1f}%  "
          f"median {100 * r['median']:.1f}%  smallest {100 * r['smallest']:.1f}%  largest {100 * r['largest']:.1f}%  "
          f"{r['train_cpu_s']:.0f} CPU s ({r['train_wall_s']:.0f} wall s)", flush=True)


def _table(result: dict[str, Any]) -> str:
    n = result["archs"]
    lines = [f"| seed | schedule | budget | epochs | mean of {n} | median of {n} | min of {n} | smallest | largest | "
             f"train CPU s | train wall s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["runs"]:
        lines.append(f"| {r['seed']} | {r['schedule']} | {r['budget']} | {r['epochs']} | {100 * r['mean']:.1f}% | "
                     f"{100 * r['median']:.1f}% | {100 * r['min']:.1f}% | {100 * r['smallest']:.1f}% | "
                     f"{100 * r['largest']:.1f}% | {r['train_cpu_s']:.0f} | {r['train_wall_s']:.0f} |")
    lines += ["", f"| seed | progressive - sandwich, mean over the {n} (equal epochs) | progressive better / worse |",
              "|---|---|---|"]
    for p in result["paired"]:
        lines.append(f"| {p['seed']} | {100 * p['diff_mean']:+.1f} points | {p['better']} / {p['worse']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    a = _args(argv)
    torch.set_num_threads(1)
    data = _data(a)
    print(f"data: {data.describe()}", flush=True)
    rng = np.random.default_rng(a.arch_seed)
    archs = [load_space("tiny").random(rng) for _ in range(a.archs)]
    with tempfile.TemporaryDirectory() as tmp:
        runs = [r for seed in a.seeds for r in _seed_runs(seed, a, data, archs, Path(tmp))]
    paired = []
    for seed in a.seeds:
        sw, pr = (next(r for r in runs if r["seed"] == seed and r["schedule"] == s and r["budget"] == "equal epochs")
                  for s in SCHEDULES)
        d = np.array(pr["random_acc"]) - np.array(sw["random_acc"])
        paired.append({"seed": seed, "diff_mean": float(d.mean()), "better": int((d > 0).sum()),
                       "worse": int((d < 0).sum())})
    result = {"command": command("schedule", argv, cores=pinned_cores()), "machine": machine(), "data": data.describe(), "space": "tiny", "epochs": a.epochs, "archs": a.archs,
              "arch_labels": [x.label() for x in archs], "seeds": a.seeds, "quick": a.quick, "runs": runs,
              "paired": paired}
    name = f"schedule_{a.data}{'_quick' if a.quick else ''}"
    table = _table(result)
    write_result(Path(a.out) / f"{name}.json", result, table=f"`{result['command']}`\n\n{result['data']}\n\n{table}")
    print("\n" + table + f"wrote {Path(a.out) / (name + '.json')} and {name}.md")
    return result


if __name__ == "__main__":
    main()
