"""Benchmark the search on Fashion-MNIST for the ``cpu`` target (this machine, onnxruntime, 1 thread).

(a) Samplers: the hypervolume of NSGA-II's and TPE's fronts against random search's, at equal
    trial counts, over several seeds.  Objectives as in the search: validation accuracy of the
    short-training evaluator (maximise) and predicted latency (minimise).  The hypervolume is
    measured in (accuracy, latency) against the reference point (chance accuracy, the largest
    predicted latency of 2000 random architectures of the space), and normalised by the area of
    that box, so 1.0 would be a 100%-accurate network at zero latency.
(b) Found networks against timm's hand-designed mobile networks (mobilenetv3_small_050/075/100,
    lcnet_050/075, mobilenetv2_035/050, converted with ``nas.timm_arch.from_timm`` to one input
    channel and 10 classes at the same 32 px input): the Pareto front of (a)'s NSGA-II and TPE
    searches and every baseline are trained from scratch with the same final recipe, scored on the
    official test split, and their latency is *measured* on this CPU with onnxruntime (same
    runtime as the ``cpu`` table, batch 1, 1 thread).  Target: every baseline is dominated, i.e. a
    found network is more accurate at equal or lower measured latency.

    python -m benchmarks search                       # the full benchmark (hours on one core)
    python -m benchmarks search --smoke               # a few minutes: checks the pipeline only
    python -m benchmarks search --part a --seeds 0 1 2 3 4 --trials 60
    python -m benchmarks search --part b --final-epochs 10

Writes ``<out>/a_hypervolume.{json,png}``, ``<out>/b_baselines.{json,png}``, ``<out>/summary.md``
(default out: benchmarks/results/bench_search/) and prints the tables.  The studies are journal
files under ``<out>/studies`` and the final trainings are cached in ``<out>/b_cache.json``: an
interrupted run resumes where it stopped.  Run pinned to one core (taskset -c 0); measure
latency on an idle machine for clean numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from nas._io import atomic_write_json, atomic_write_text
from nas.arch import Arch
from nas.target import Target

BASELINES = ("mobilenetv3_small_050", "mobilenetv3_small_075", "mobilenetv3_small_100", "lcnet_050", "lcnet_075",
             "mobilenetv2_035", "mobilenetv2_050")
SAMPLERS = ("nsga2", "tpe", "random")


def _compose(target: str, data: str) -> Any:
    from nas.config import compose_app

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
    from omegaconf import OmegaConf

    from nas.data import load_data
    from nas.latency import load_latency_model
    from nas.search.study import Budgets, prepare_search, run_search
    from nas.space import load_space

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
            s = prepare_search(target=target, search_space=space, data=data, evaluator=ev, sampler=sampler,
                               budgets=Budgets(), seed=seed, run_dir=out / "studies" / f"{smp}-s{seed}",
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
        summary[s] = {"mean": float(final.mean()), "std": float(final.std(ddof=1)) if len(final) > 1 else 0.0,
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


# --------------------------------------------------------------------------------------------


def part_b(args, cfg, out: Path, a_res: dict[str, Any] | None) -> dict[str, Any]:
    import torch
    from omegaconf import OmegaConf

    from nas.builder import build
    from nas.data import adapt_arch, load_data
    from nas.latency import load_latency_model
    from nas.latency.measure import measure, summarize_times
    from nas.latency.runtimes import get_runtime
    from nas.search.evaluate import TrainEvaluator
    from nas.timm_arch import from_timm

    target = Target.coerce(cfg.target)
    data_cfg = {**OmegaConf.to_container(cfg.data, resolve=True), **_data_overrides(args),
                "train_samples": args.final_train_samples, "val_samples": 10}
    ds = load_data(data_cfg)
    if ds.test is None:
        raise SystemExit(f"dataset {ds.name} has no test split for part (b)")
    final = dataclasses.replace(ds, val=ds.test)  # score the final trainings on the official test split
    recipe = TrainEvaluator(epochs=args.final_epochs, batch_size=64, device="cpu")
    latency = load_latency_model(target)
    runtime = get_runtime(target)
    res = ds.resolution

    front = _found_front(out, args.max_front)
    cands: list[tuple[str, str, Arch]] = [("found", f"{r['study']} #{r['number']} ({r['arch']})",
                                           Arch.from_dict(r["_arch"])) for r in front]
    for name in args.baselines:
        a = from_timm(name, num_classes=ds.num_classes, in_chans=ds.in_chans, resolution=res)
        cands.append(("timm", name, a))

    cache_path = out / "b_cache.json"
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    key_recipe = json.dumps({"recipe": dataclasses.asdict(recipe), "data": data_cfg}, sort_keys=True)
    rows = []
    for kind, label, arch in cands:
        dep = adapt_arch(arch, ds, resolution=res)
        key = f"{dep.digest()}|{key_recipe}"
        hit = cache.get(key)
        if hit is None:
            t0 = time.perf_counter()
            r = recipe.evaluate(adapt_arch(arch, ds), final, seed=0)
            with torch.no_grad():
                runner = runtime.prepare(build(dep).eval(), (dep.in_chans, res, res))
                t = summarize_times(measure(runner, warmup=20, repeats=args.repeats, min_time_s=0.3))
            hit = {"test_accuracy": r.score, "measured_ms": t["median_ms"], "p10_ms": t["p10_ms"],
                   "p90_ms": t["p90_ms"], "train_seconds": r.seconds}
            cache[key] = hit
            atomic_write_json(cache_path, cache)
            print(f"(b) {kind:5s} {label}: test {100 * r.score:.2f}%, {t['median_ms']:.3f} ms measured "
                  f"({time.perf_counter() - t0:.0f}s)", flush=True)
        from nas.cost import arch_cost

        c = arch_cost(dep)
        rows.append({"kind": kind, "name": label, "predicted_ms": float(latency.predict([dep])[0]),
                     "params": c.params, "macs": c.macs, **hit, "arch": dep.to_dict()})
    found = [r for r in rows if r["kind"] == "found"]
    for r in rows:
        if r["kind"] != "timm":
            continue
        dom = [f for f in found if f["measured_ms"] <= r["measured_ms"] and f["test_accuracy"] > r["test_accuracy"]]
        r["dominated_by"] = [f["name"] for f in dom]
    n_base = sum(r["kind"] == "timm" for r in rows)
    n_dom = sum(bool(r.get("dominated_by")) for r in rows if r["kind"] == "timm")
    result = {"data": ds.describe(), "recipe": dataclasses.asdict(recipe), "runtime": runtime.info(),
              "target": target.name, "resolution": res, "rows": rows, "baselines_dominated": n_dom,
              "baselines": n_base, "target_met": n_dom == n_base}
    atomic_write_json(out / "b_baselines.json", result)
    _plot_b(rows, out / "b_baselines.png", title=f"{ds.name} test accuracy vs latency measured on this CPU "
            f"(onnxruntime, 1 thread, {res}px); same recipe ({args.final_epochs} epochs)")
    return result


def _found_front(out: Path, max_front: int) -> list[dict[str, Any]]:
    """The found front: the union of the (a) searches (not the random ones), by validation accuracy and
    predicted latency; at most ``max_front`` of it."""
    import optuna

    from nas.search.results import pareto_front, trial_records
    from nas.search.storage import make_storage

    records = []
    for j in sorted((out / "studies").glob("*.journal")):
        if j.stem.startswith("random"):
            continue
        st, _ = make_storage(str(j), run_dir=out)
        for summ in optuna.get_all_study_summaries(st, include_best_trial=False):
            recs = trial_records(optuna.load_study(study_name=summ.study_name, storage=st))
            records += [{**r, "study": summ.study_name} for r in recs]
    front = pareto_front(records)
    if not front:
        raise SystemExit("part (b) needs the searches of part (a): run --part a first")
    if len(front) > max_front:  # keep the ends and an even spread by latency
        idx = np.unique(np.round(np.linspace(0, len(front) - 1, max_front)).astype(int))
        front = [front[i] for i in idx]
    return front


def _plot_b(rows, path: Path, *, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=150)
    f = sorted((r for r in rows if r["kind"] == "found"), key=lambda r: r["measured_ms"])
    b = [r for r in rows if r["kind"] == "timm"]
    ax.plot([r["measured_ms"] for r in f], [100 * r["test_accuracy"] for r in f], "o-", color="tab:blue",
            label="found (Pareto front of the search)")
    for r in b:
        ok = bool(r.get("dominated_by"))
        ax.errorbar(r["measured_ms"], 100 * r["test_accuracy"], xerr=[[r["measured_ms"] - r["p10_ms"]],
                    [r["p90_ms"] - r["measured_ms"]]], fmt="s", color="tab:orange" if ok else "tab:red", ms=6)
        ax.annotate(r["name"] + ("" if ok else " (not dominated)"), (r["measured_ms"], 100 * r["test_accuracy"]),
                    textcoords="offset points", xytext=(5, 4), fontsize=7)
    ax.plot([], [], "s", color="tab:orange", label="timm baselines (p10..p90 bars)")
    ax.set_xlabel("measured latency (ms, median)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title, fontsize=8)
    ax.grid(alpha=0.25)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _table(rows: list[list[Any]], header: list[str]) -> str:
    from nas.cli._common import fmt_table

    return fmt_table(rows, header)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--part", nargs="+", choices=["a", "b"], default=["a", "b"])
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
    ap.add_argument("--final-epochs", type=int, default=8, help="(b) the same recipe for found and baselines")
    ap.add_argument("--final-train-samples", type=int, default=20000)
    ap.add_argument("--max-front", type=int, default=6, help="(b) at most this many found networks retrained")
    ap.add_argument("--baselines", nargs="+", default=list(BASELINES))
    ap.add_argument("--repeats", type=int, default=200, help="(b) timed runs per network")
    ap.add_argument("--out", default="benchmarks/results/bench_search")
    ap.add_argument("--smoke", action="store_true", help="tiny settings: checks the pipeline in minutes")
    args = ap.parse_args()
    if args.smoke:
        args.seeds, args.trials, args.population = args.seeds[:2], min(args.trials, 6), 4
        args.train_samples, args.val_samples, args.epochs = 600, 300, 1
        args.final_epochs, args.final_train_samples, args.max_front = 1, 1000, 2
        args.baselines, args.repeats = args.baselines[:2], 30
        if args.out == "benchmarks/results/bench_search":
            args.out = "benchmarks/results/bench_search_smoke"
    import torch

    torch.set_num_threads(1)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = _compose(args.target, args.data)
    md = [f"# bench_search ({time.strftime('%Y-%m-%d %H:%M')})\n", f"`{' '.join(sys.argv)}`\n"]
    a_res = None
    if "a" in args.part:
        a_res = part_a(args, cfg, out)
        hv = a_res["hypervolume"]
        rows = [[s, f"{v['mean']:.4f}", f"{v['std']:.4f}", f"{v.get('ratio_vs_random', 1.0):.3f}",
                 f"{v['wins_vs_random']}/{len(args.seeds)}" if "wins_vs_random" in v else "-"] for s, v in hv.items()]
        t = _table(rows, ["sampler", "hypervolume", "std", "vs random", "seeds won vs random"])
        print(f"\n(a) hypervolume after {args.trials} trials, {len(args.seeds)} seeds "
              f"(reference: {'accuracy' if args.evaluator == 'train' else 'proxy score'} "
              f"{a_res['reference']['accuracy']:.3g}, latency "
              f"{a_res['reference']['latency_ms']:.3f} ms)\n{t}")
        md += [f"## (a) hypervolume after {args.trials} trials, seeds {args.seeds}\n", "```", t, "```",
               "![](a_hypervolume.png)\n"]
    if "b" in args.part:
        b = part_b(args, cfg, out, a_res)
        rows = [[r["kind"], r["name"][:48], f"{100 * r['test_accuracy']:.2f}%", f"{r['measured_ms']:.3f}",
                 f"{r['predicted_ms']:.3f}", f"{r['params'] / 1e3:.0f}K", f"{r['macs'] / 1e6:.1f}M",
                 ", ".join(x.split(" (")[0] for x in r.get("dominated_by", [])) or ("-" if r["kind"] == "found"
                                                                                   else "NOT DOMINATED")]
                for r in sorted(b["rows"], key=lambda r: r["measured_ms"])]
        t = _table(rows, ["kind", "network", "test acc", "measured ms", "predicted ms", "params", "MACs",
                          "dominated by"])
        verdict = (f"{b['baselines_dominated']}/{b['baselines']} baselines dominated by the found front: target "
                   f"{'MET' if b['target_met'] else 'NOT met'}")
        print(f"\n(b) same recipe ({args.final_epochs} epochs, {args.final_train_samples} images), test split, "
              f"latency measured with {b['runtime']['name']} {b['runtime']['version']}\n{t}\n{verdict}")
        md += ["## (b) found front vs timm baselines\n", "```", t, "```", verdict + "\n", "![](b_baselines.png)\n"]
    atomic_write_text(out / "summary.md", "\n".join(md) + "\n")
    print(f"\nresults in {out}/ (summary.md, *.json, *.png)")


if __name__ == "__main__":
    main()
