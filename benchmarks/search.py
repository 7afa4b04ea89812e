"""Benchmark the samplers: the hypervolume of NSGA-II's and TPE's fronts against random search's.

On Fashion-MNIST for a target (default ``cpu``), at equal trial counts, over several seeds.  Objectives
as in the search: the evaluator's score (maximise) and predicted latency (minimise).  The hypervolume
is measured in (score, latency) against the reference point (chance accuracy, or the worst proxy
score seen; the largest predicted latency of 2000 random architectures of the space), and normalised
by the area of that box for accuracies, so 1.0 would be a 100%-accurate network at zero latency.
Each sampler's hypervolume is reported as the mean over seeds with its 95% confidence interval.

Whether the picks of a search are better networks than random picks or the largest network that
fits, once trained and measured, is ``python -m benchmarks search_value``.

    python -m benchmarks search                       # the full benchmark (hours on one core)
    python -m benchmarks search --smoke               # a few minutes: checks the pipeline only
    python -m benchmarks search --seeds 0 1 2 3 4 --trials 60

Writes ``<out>/a_hypervolume.{json,png}`` and ``<out>/summary.md`` (default out:
benchmarks/results/bench_search/) and prints the table.  The studies are journal files under
``<out>/studies``: an interrupted run resumes where it stopped.  Run pinned to one core (taskset -c 0).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import optuna
import torch
from omegaconf import OmegaConf

from benchmarks.harness import markdown_table, mean_ci
from nas._io import atomic_write_json, atomic_write_text
from nas.config import compose_app
from nas.data import load_data
from nas.latency import load_latency_model
from nas.search.budget import Budgets
from nas.search.evaluate import make_evaluator
from nas.search.samplers import sampler_settings
from nas.search.study import prepare_search, run_search
from nas.space import load_space
from nas.target import Target

matplotlib.use("Agg")  # headless: the backend is set before pyplot is imported
import matplotlib.pyplot as plt  # noqa: E402

SAMPLERS = ("nsga2", "tpe", "random")


def _compose(target: str, data: str) -> Any:
    return compose_app("search", [f"conf={target}", f"data={data}"])


def hypervolume_2d(points: list[tuple[float, float]], ref: tuple[float, float]) -> float:
    """Area dominated by ``points`` (accuracy up, latency down) inside the box to ``ref`` (acc_min, lat_max)."""
    pts = sorted((lat, acc) for acc, lat in points if acc > ref[0] and lat < ref[1])
    area, best = 0.0, ref[0]
    for i, (lat, acc) in enumerate(pts):
        best = max(best, acc)
        nxt = pts[i + 1][0] if i + 1 < len(pts) else ref[1]
        area += (nxt - lat) * (best - ref[0])
    return area


def latency_reference(space: Any, deploy: Any, models: list[Any], n: int = 2000) -> list[float]:
    """The hypervolume reference point's latency, per latency model: 1.05 x the largest latency it
    predicts for ``n`` seeded random networks of ``space`` (each passed through ``deploy``: the
    network as deployed, with the dataset's head and the deployment resolution)."""
    rng = np.random.default_rng(12345)
    sample = [deploy(space.random(rng)) for _ in range(n)]
    return [1.05 * float(np.max(m.predict(sample))) for m in models]


def _pts(study) -> list[tuple[int, float, float]]:
    """(trial number, accuracy, latency) of feasible evaluated trials, in trial order."""
    out = []
    for t in study.get_trials(deepcopy=False):
        if t.state.name == "COMPLETE" and t.user_attrs.get("status") in ("evaluated", "cached"):
            out.append((t.number, t.values[0], t.values[1]))
    return out


def part_a(args, cfg, out: Path) -> dict[str, Any]:
    target = Target.coerce(cfg.target)
    data_cfg = {**OmegaConf.to_container(cfg.data, resolve=True), **_data_overrides(args)}
    data = load_data(data_cfg)
    space = load_space(args.space)
    latency = load_latency_model(target)
    ev = {**OmegaConf.to_container(cfg.evaluator, resolve=True), "epochs": args.epochs, "device": "cpu"}
    if args.evaluator == "zero_cost":
        ev = {"name": "zero_cost", "proxy": "naswot", "device": "cpu"}
    res = target.resolution or space.resolution
    lat_ref = latency_reference(space, lambda a: a.with_head(num_classes=data.num_classes, in_chans=data.in_chans)
                                .with_resolution(res), [latency])[0]
    acc_ref = 1.0 / data.num_classes if args.evaluator == "train" else None
    runs: dict[str, dict[int, list[tuple[int, float, float]]]] = {s: {} for s in args.samplers}
    (out / "studies").mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        for smp in args.samplers:
            sampler = {"name": smp}
            if smp == "nsga2":
                sampler["population_size"] = args.population
            if smp == "tpe":
                sampler["n_startup_trials"] = max(2, min(10, args.trials // 4))
            t0 = time.perf_counter()
            s = prepare_search(target=target, search_space=space, data=data, evaluator=make_evaluator(ev),
                               sampler=sampler_settings(sampler), budgets=Budgets(), seed=seed,
                               run_dir=out / "studies" / f"{smp}-s{seed}",
                               storage=str(out / "studies" / f"{smp}-s{seed}.journal"), study_name=f"{smp}-s{seed}",
                               latency=latency)
            rep = run_search(s.study, s.problem, n_trials=args.trials, storage=s.storage)
            runs[smp][seed] = _pts(s.study)
            print(f"(a) {smp:6s} seed {seed}: {rep.ran} new trials ({s.problem.evaluations} trained) in "
                  f"{time.perf_counter() - t0:.0f}s", flush=True)
    if acc_ref is None:  # proxy scores: the worst score seen is the reference
        acc_ref = min(a for r in runs.values() for pts in r.values() for _, a, _ in pts)
    box = (1.0 - acc_ref) * lat_ref if args.evaluator == "train" else None

    def hv_curve(pts: list[tuple[int, float, float]]) -> list[float]:
        curve = []
        for k in range(1, args.trials + 1):
            hv = hypervolume_2d([(a, lat) for n, a, lat in pts if n < k], (acc_ref, lat_ref))
            curve.append(hv / box if box else hv)
        return curve

    curves = {s: {seed: hv_curve(p) for seed, p in r.items()} for s, r in runs.items()}
    summary = {}
    for s in args.samplers:
        final = np.array([c[-1] for c in curves[s].values()])
        mean, ci95 = mean_ci(final)
        summary[s] = {"mean": mean, "ci95": ci95, "std": float(final.std(ddof=1)) if len(final) > 1 else 0.0,
                      "per_seed": {str(k): c[-1] for k, c in curves[s].items()}}
    if "random" in summary:
        rnd = summary["random"]["per_seed"]
        for s in args.samplers:
            if s != "random":
                per = summary[s]["per_seed"]
                summary[s]["wins_vs_random"] = sum(per[k] > rnd[k] for k in per if k in rnd)
                summary[s]["ratio_vs_random"] = summary[s]["mean"] / summary["random"]["mean"]
    res = {"trials": args.trials, "seeds": args.seeds, "evaluator": ev, "data": data.describe(),
           "reference": {"accuracy": acc_ref, "latency_ms": lat_ref}, "normalised": bool(box),
           "latency": latency.describe(), "hypervolume": summary, "curves": curves}
    atomic_write_json(out / "a_hypervolume.json", res)
    _plot_a(curves, out / "a_hypervolume.png", title=f"{args.space} on {data.name}, {target.name} target: "
            f"hypervolume vs trials ({len(args.seeds)} seeds)", normalised=bool(box))
    return res


def _data_overrides(args) -> dict[str, Any]:
    d: dict[str, Any] = {"train_samples": args.train_samples, "val_samples": args.val_samples}
    if args.data_root:
        d["root"] = args.data_root
    return d


def _plot_a(curves, path: Path, *, title: str, normalised: bool) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=150)
    colors = {"nsga2": "tab:blue", "tpe": "tab:green", "random": "0.4"}
    for s, per in curves.items():
        c = np.array(list(per.values()))
        x = np.arange(1, c.shape[1] + 1)
        m = c.mean(0)
        ax.plot(x, m, color=colors.get(s), lw=1.8, label=f"{s} (final {m[-1]:.4f})")
        if len(c) > 1:
            ax.fill_between(x, c.min(0), c.max(0), color=colors.get(s), alpha=0.15, lw=0)
    ax.set_xlabel("trials")
    ax.set_ylabel("hypervolume" + (" (fraction of the reference box)" if normalised else ""))
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.25)
    ax.legend(fontsize=8, title="mean over seeds; band = min..max", title_fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--trials", type=int, default=40, help="trials per search (equal for every sampler)")
    ap.add_argument("--samplers", nargs="+", choices=SAMPLERS, default=list(SAMPLERS))
    ap.add_argument("--population", type=int, default=12, help="NSGA-II population size")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--data", default="fashion_mnist")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--space", default="tiny")
    ap.add_argument("--evaluator", choices=["train", "zero_cost"], default="train")
    ap.add_argument("--epochs", type=int, default=2, help="search evaluator epochs")
    ap.add_argument("--train-samples", type=int, default=5000)
    ap.add_argument("--val-samples", type=int, default=1000)
    ap.add_argument("--out", default="benchmarks/results/bench_search")
    ap.add_argument("--smoke", action="store_true", help="tiny settings: checks the pipeline in minutes")
    args = ap.parse_args()
    if args.smoke:
        args.seeds, args.trials, args.population = args.seeds[:2], min(args.trials, 6), 4
        args.train_samples, args.val_samples, args.epochs = 600, 300, 1
        if args.out == "benchmarks/results/bench_search":
            args.out = "benchmarks/results/bench_search_smoke"
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = _compose(args.target, args.data)
    md = [f"# bench_search ({time.strftime('%Y-%m-%d %H:%M')})\n", f"`python -m benchmarks search {' '.join(sys.argv[1:])}`\n"]
    a_res = part_a(args, cfg, out)
    hv = a_res["hypervolume"]
    rows = [[s, f"{v['mean']:.4f} ± {v['ci95']:.4f}", f"{v['std']:.4f}", f"{v.get('ratio_vs_random', 1.0):.3f}",
             f"{v['wins_vs_random']}/{len(args.seeds)}" if "wins_vs_random" in v else "-"] for s, v in hv.items()]
    t = markdown_table(rows, ["sampler", "hypervolume (mean ± 95% CI)", "std", "vs random", "seeds won vs random"])
    print(f"\nhypervolume after {args.trials} trials, {len(args.seeds)} seeds "
          f"(reference: {'accuracy' if args.evaluator == 'train' else 'proxy score'} "
          f"{a_res['reference']['accuracy']:.3g}, latency "
          f"{a_res['reference']['latency_ms']:.3f} ms)\n{t}")
    md += [f"## hypervolume after {args.trials} trials, seeds {args.seeds}\n", t, "", "![](a_hypervolume.png)\n"]
    atomic_write_text(out / "summary.md", "\n".join(md) + "\n")
    print(f"\nresults in {out}/ (summary.md, a_hypervolume.json, a_hypervolume.png)")


if __name__ == "__main__":
    main()
