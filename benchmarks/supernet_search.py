"""A search with the weight-sharing supernet against one with short training, at equal compute.

On Fashion-MNIST (the Debian package's files; a training subset, said so in the output), the
``tiny`` space and the ``cpu`` target (latency predicted by its shipped table: an estimate for
this machine, not measured here), on this machine's CPU, side by side in one run:

* **Cost**: the supernet's training (once, ``nas.supernet.train.train_supernet``; or
  ``--supernet <ckpt>``), then three searches through the project's search API
  (``nas.search.prepare_search`` / ``run_search``), each ``--trials`` trials with the same sampler
  (the default NSGA-II) and seed: ``evaluator=supernet``, ``evaluator=zero_cost`` and
  ``evaluator=train`` at its default budget.  Each search's wall time and seconds per trial.
* **Outcome at equal compute**: the supernet path costs its supernet's training, its search and
  fine-tuning its front from inherited weights (``--finetune-epochs``, the ``nas.train
  supernet=<ckpt>`` path: ``Supernet.subnet`` weights, then ``nas.fit.loop.fit``).  The train path
  gets the same seconds: its front is the Pareto front of its first K trials, K = as many trials (in
  order, by their recorded durations) as fit in that total.  Both fronts are scored on the **test
  split**: the supernet front fine-tuned, the train front trained again exactly as its search trained
  it (``TrainEvaluator``, the same seed) and scored on test instead of val (this re-run only measures
  the search's networks; it is not counted as compute).  Hypervolume of each in (test accuracy,
  predicted latency), against (chance accuracy, 1.05 x the largest predicted latency of 2000 random
  architectures), as a fraction of the box to (100%, 0 ms).
* **Fine-tuned vs from scratch**: the supernet front's architectures (or ``--archs`` spread ones)
  fine-tuned from inherited weights for E epochs against trained from scratch for E epochs, the same
  recipe (the train evaluator's: AdamW, batch 64, warm-up then cosine) and seed; test accuracy.

    taskset -c 0 python -m benchmarks supernet_search             # the benchmark (about 20 minutes on one core)
    taskset -c 0 python -m benchmarks supernet_search --quick     # two or three minutes: the pipeline only
    taskset -c 0 python -m benchmarks supernet_search --train-trials 60   # cap the slow train search

Writes ``<out>/supernet_search.json``, ``<out>/supernet_search.md`` (the tables, also printed) and
``<out>/supernet_search.png`` (the two fronts; default out: benchmarks/results/).  The supernet, the
three studies (journals) and every score are kept under ``<out>/bench_supernet_search/``, so an
interrupted run resumes where it stopped: a study that has its trials is not run again, and its
recorded wall time is kept.  Not done: measuring the fronts with the ``cpu`` runtime.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import optuna
import torch
from omegaconf import OmegaConf

from benchmarks._inputs import add_subset_args, load_subset
from benchmarks.harness import RESULTS, command
from benchmarks.search import hypervolume_2d, latency_reference
from nas._io import atomic_write_json, atomic_write_text
from nas.arch import Arch
from nas.builder import build
from nas.config import compose_app
from nas.fit.loop import accuracy, fit
from nas.latency import load_latency_model
from nas.search.budget import Budgets
from nas.search.evaluate import SupernetEvaluator, TrainEvaluator, make_evaluator
from nas.search.results import pareto_front, trial_records, write_outputs
from nas.search.samplers import sampler_settings
from nas.search.study import count_trials, prepare_search, run_search
from nas.space import load_space
from nas.supernet.checkpoint import check_matches, load_supernet
from nas.supernet.settings import SupernetSettings
from nas.supernet.train import train_supernet
from nas.target import load_target

matplotlib.use("Agg")  # headless: the backend is set before pyplot is imported
import matplotlib.pyplot as plt  # noqa: E402

EVALUATORS = ("supernet", "zero_cost", "train")


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    add_subset_args(p)
    p.add_argument("--trials", type=int, default=200, help="trials per search")
    p.add_argument("--train-trials", type=int, default=None, help="cap on the train search's trials (default: --trials)")
    p.add_argument("--supernet-epochs", type=int, default=20)
    p.add_argument("--supernet", default=None, help="a trained supernet.ckpt to reuse (its recorded training time counts)")
    p.add_argument("--finetune-epochs", type=int, default=2, help="fine-tuning from inherited weights (and from scratch)")
    p.add_argument("--archs", type=int, default=0, help="fine-tuned vs scratch on this many spread front archs (0: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny settings: checks the pipeline, figures meaningless")
    p.add_argument("--out", default=str(RESULTS))
    a = p.parse_args(argv)
    if a.quick:
        a.train_samples, a.val_samples, a.trials, a.supernet_epochs, a.finetune_epochs = 256, 128, 8, 1, 1
        a.train_trials = min(a.train_trials or 4, 4)
    a.train_trials = min(a.train_trials or a.trials, a.trials)
    return a


# --------------------------------------------------------------------------------------------
# equal compute, hypervolume


def prefix_within(records: Sequence[dict[str, Any]], budget_s: float) -> tuple[list[dict[str, Any]], float]:
    """The trials (records in trial order) whose cumulative ``duration_s`` stays within ``budget_s``,
    and the seconds they took."""
    out, used = [], 0.0
    for r in sorted(records, key=lambda r: r["number"]):
        d = float(r.get("duration_s") or 0.0)
        if used + d > budget_s:
            break
        out.append(r)
        used += d
    return out, used


def hv_share(points: Sequence[tuple[float, float]], ref: tuple[float, float]) -> float:
    """Hypervolume of (accuracy, ms) points as a fraction of the box from ``ref`` to (1, 0)."""
    return hypervolume_2d(list(points), ref) / ((1.0 - ref[0]) * ref[1])


def _reference(problem: Any) -> tuple[float, float]:
    """(chance accuracy, 1.05 x the largest predicted latency of 2000 seeded random deployed networks)."""
    return 1.0 / problem.data.num_classes, latency_reference(problem.space, problem.deployed, [problem.latency])[0]


# --------------------------------------------------------------------------------------------
# the supernet and the searches


class State:
    """``<work>/state.json``: wall times and scores kept across runs (written after every change)."""

    def __init__(self, path: Path, context: dict[str, Any]) -> None:
        self.path = path
        self.d: dict[str, Any] = {"context": context, "searches": {}, "scores": {}}
        if path.is_file():
            old = json.loads(path.read_text())
            if old.get("context") == context:
                self.d = old
            else:
                print(f"ignoring {path}: made with other settings", file=sys.stderr)

    def save(self) -> None:
        atomic_write_json(self.path, self.d)


def _supernet(a: argparse.Namespace, space: Any, data: Any, work: Path) -> tuple[Path, float, int]:
    """The checkpoint, its training seconds (the sum of its epochs') and epochs: ``--supernet``, else trained
    into ``work`` (resumed when there)."""
    if a.supernet:
        ckpt = Path(a.supernet)
        _, meta = load_supernet(ckpt)
        check_matches(meta, ckpt, space=space, data=data)
        hist = meta["history"]
    else:
        t0 = time.perf_counter()
        print(f"supernet: {a.supernet_epochs} epochs into {work} (resumed if there) ...", flush=True)
        hist = train_supernet(space, data, SupernetSettings(epochs=a.supernet_epochs, seed=a.seed, device="cpu"),
                              work)["history"]
        ckpt = work / "supernet.ckpt"
        print(f"supernet: done ({time.perf_counter() - t0:.0f} s this run)", flush=True)
    return ckpt, float(sum(h["seconds"] for h in hist)), len(hist)


def _configs(ckpt: Path) -> dict[str, Any]:
    """The search command's defaults (``conf=cpu``): each evaluator's settings and the sampler's."""
    out: dict[str, Any] = {}
    for name in EVALUATORS:
        cfg = compose_app("search", ["conf=cpu", f"evaluator={name}", f"supernet={ckpt}"])
        out[name] = {**OmegaConf.to_container(cfg.evaluator, resolve=True), "device": "cpu"}
        out["sampler"] = OmegaConf.to_container(cfg.sampler, resolve=True)
        out["latency_budget_ms"] = cfg.latency_budget_ms
    return out


def _search(name: str, n_trials: int, env: dict[str, Any], state: State) -> Any:
    """One study in ``<work>/studies/<name>`` (resumed when there), run to ``n_trials``; its wall time
    accumulated in the state."""
    s = prepare_search(target=env["target"], search_space=env["space"], data=env["data"],
                       evaluator=make_evaluator(env["cfg"][name]), sampler=sampler_settings(env["cfg"]["sampler"]),
                       budgets=Budgets(latency_budget_ms=env["cfg"]["latency_budget_ms"]), seed=env["seed"],
                       run_dir=env["work"] / "studies" / name, latency=env["latency"])
    rec = state.d["searches"].setdefault(name, {"seconds": 0.0})
    have = count_trials(s.study)
    if have < n_trials:
        t0 = time.perf_counter()
        every = max(1, n_trials // 10)

        def progress(out: Any) -> None:
            n = count_trials(s.study)
            if out.status not in ("duplicate", "surplus") and (n % every == 0 or n == n_trials):
                print(f"  {name}: {n}/{n_trials} trials, {time.perf_counter() - t0:.0f} s", flush=True)

        print(f"search evaluator={name}: {n_trials - have} trials to run ({have} done)", flush=True)
        try:  # an interrupted run's seconds count too (its unfinished trial runs again on resume)
            run_search(s.study, s.problem, n_trials=n_trials, storage=s.storage, callback=progress)
        finally:
            rec["seconds"] += time.perf_counter() - t0
            state.save()
        write_outputs(s.study, s.run_dir, info=s.info())
    rec["trials"] = count_trials(s.study)
    return s


def _search_cost(name: str, s: Any, state: State, n_trials: int) -> dict[str, Any]:
    recs = trial_records(s.study)
    done = [r for r in recs if r["status"] == "evaluated"]
    wall = state.d["searches"][name]["seconds"]
    n = state.d["searches"][name]["trials"]
    return {"evaluator": s.problem.evaluator.describe(), "trials": n, "evaluated": len(done), "wall_s": wall,
            "s_per_trial": wall / max(1, n),
            "s_per_evaluated_arch": float(np.mean([r["eval_seconds"] for r in done])) if done else None,
            f"wall_s_for_{n_trials}_trials": wall / max(1, n) * n_trials, "extrapolated": n < n_trials,
            "front_size": len(pareto_front(recs))}


# --------------------------------------------------------------------------------------------
# training the fronts' networks, scored on the test split


def _test_view(data: Any) -> Any:
    """The dataset with its test split in the place of the validation split, so an evaluator's score is
    test accuracy."""
    if data.test is None:
        raise SystemExit(f"{data.name} has no test split: this benchmark scores the fronts on it")
    return dataclasses.replace(data, val=data.test)


def _fit(arch: Any, data: Any, env: dict[str, Any], *, epochs: int, init: str, digest: str) -> dict[str, Any]:
    """``arch`` trained ``epochs`` with the train evaluator's recipe (``nas.fit.loop.fit``), from its
    supernet weights (``init="supernet"``, as ``nas.train supernet=`` starts) or from scratch; test accuracy."""
    fs = dataclasses.replace(env["recipe"], epochs=epochs)
    torch.manual_seed(env["seed"])
    model = build(arch)
    if init == "supernet":
        if "supernet" not in env:  # loaded once for every network fine-tuned
            env["supernet"] = load_supernet(env["ckpt"])[0]
        model.load_state_dict(env["supernet"].subnet(arch).state_dict())
    t0 = time.perf_counter()
    hist = fit(model, data, settings=fs, epochs=epochs, lr=fs.lr, seed=env["seed"],
               ckpt=env["work"] / "fit" / f"{digest[:16]}_{init}_{epochs}.ckpt",
               meta={"arch": arch.digest(), "init": init}, stage=f"{init} {digest[:8]}")
    return {"test_accuracy": accuracy(model, data, "test"), "val_accuracy": hist[-1]["val_accuracy"] if hist else None,
            "seconds": float(sum(h["seconds"] for h in hist)), "wall_this_run_s": time.perf_counter() - t0}


def _score(state: State, key: str, make: Any, *args: Any, **kw: Any) -> dict[str, Any]:
    """``make(*args, **kw)``, kept in the state under ``key`` (not computed again on a re-run)."""
    if key not in state.d["scores"]:
        state.d["scores"][key] = make(*args, **kw)
        state.save()
    return state.d["scores"][key]


def _evaluate(ev: Any, arch: Any, data: Any, seed: int) -> dict[str, Any]:
    return ev.evaluate(arch, data, seed=seed).to_dict()


def _front_rows(s: Any, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"number": r["number"], "digest": r["digest"], "summary": r["arch"], "val_score": r["score"],
             "predicted_ms": r["latency_ms"], "arch": s.problem.trained(Arch.from_dict(r["_arch"]))}
            for r in pareto_front(records)]


def _supernet_front(s: Any, env: dict[str, Any], state: State) -> list[dict[str, Any]]:
    """The supernet search's front: inherited weights on test, then fine-tuned ``finetune_epochs`` (test)."""
    rows = _front_rows(s, trial_records(s.study))
    test = _test_view(env["data"])
    ev = SupernetEvaluator(checkpoint=str(env["ckpt"]), device="cpu")
    e = env["finetune_epochs"]
    for i, r in enumerate(rows):
        d, arch = r["digest"], r["arch"]
        r["inherited"] = _score(state, f"inherited:{d}", _evaluate, ev, arch, test, env["seed"])
        r["finetuned"] = _score(state, f"finetune{e}:{d}", _fit, arch, env["data"], env, epochs=e, init="supernet",
                                digest=d)
        print(f"  supernet front [{i + 1}/{len(rows)}] {r['predicted_ms']:.3f} ms: inherited "
              f"{100 * r['inherited']['score']:.1f}%, fine-tuned {100 * r['finetuned']['test_accuracy']:.1f}% (test)",
              flush=True)
    return rows


def _train_front(s: Any, budget_s: float, env: dict[str, Any], state: State) -> dict[str, Any]:
    """The train search's first trials that fit ``budget_s``, their front, each trained again as the
    search trained it (its evaluator, its seed) and scored on test."""
    recs = trial_records(s.study)
    prefix, used = prefix_within(recs, budget_s)
    counted = [r for r in prefix if r["status"] not in ("duplicate", "surplus")]
    rows = _front_rows(s, prefix)
    ev, test = make_evaluator(env["cfg"]["train"]), _test_view(env["data"])
    for i, r in enumerate(rows):
        seed = s.problem.eval_seed(r["digest"])
        r["test"] = _score(state, f"train_test:{r['digest']}:{seed}", _evaluate, ev, r["arch"], test, seed)
        print(f"  train front [{i + 1}/{len(rows)}] {r['predicted_ms']:.3f} ms: val {100 * r['val_score']:.1f}%, "
              f"test {100 * r['test']['score']:.1f}%", flush=True)
    return {"k_trials": len(counted), "k_seconds": used, "of_trials": sum(
        r["status"] not in ("duplicate", "surplus") for r in recs),
        "budget_reached": used + 1e-9 >= budget_s or len(prefix) < len(recs), "front": rows}


def _spread(rows: Sequence[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` rows at evenly spaced positions of the front (by latency); all when ``n`` is 0 or larger."""
    if not n or n >= len(rows):
        return list(rows)
    return [rows[i] for i in dict.fromkeys(int(round(q)) for q in np.linspace(0, len(rows) - 1, n))]


def _scratch(rows: Sequence[dict[str, Any]], env: dict[str, Any], state: State, n: int) -> list[dict[str, Any]]:
    """Fine-tuned from inherited weights against from scratch, ``finetune_epochs`` each, test accuracy."""
    e, out = env["finetune_epochs"], []
    for r in _spread(rows, n):
        d = r["digest"]
        sc = _score(state, f"scratch{e}:{d}", _fit, r["arch"], env["data"], env, epochs=e, init="scratch", digest=d)
        out.append({"digest": d, "summary": r["summary"], "predicted_ms": r["predicted_ms"],
                    "finetuned": r["finetuned"]["test_accuracy"], "scratch": sc["test_accuracy"],
                    "finetune_s": r["finetuned"]["seconds"], "scratch_s": sc["seconds"]})
        print(f"  {r['predicted_ms']:.3f} ms: fine-tuned {100 * out[-1]['finetuned']:.1f}%, from scratch "
              f"{100 * out[-1]['scratch']:.1f}% (test, {e} epoch(s))", flush=True)
    return out


# --------------------------------------------------------------------------------------------
# the report


def _outcome(sn_rows: list[dict[str, Any]], train: dict[str, Any], ref: tuple[float, float]) -> dict[str, Any]:
    sn_pts = [(r["finetuned"]["test_accuracy"], r["predicted_ms"]) for r in sn_rows]
    tr_pts = [(r["test"]["score"], r["predicted_ms"]) for r in train["front"]]
    inh = [(r["inherited"]["score"], r["predicted_ms"]) for r in sn_rows]
    return {"reference": {"accuracy": ref[0], "latency_ms": ref[1]},
            "hypervolume_test": {"supernet_finetuned": hv_share(sn_pts, ref), "train": hv_share(tr_pts, ref),
                                 "supernet_inherited": hv_share(inh, ref)},
            "supernet_front": [_row(r, ("inherited", "finetuned")) for r in sn_rows],
            "train_front": [_row(r, ("test",)) for r in train["front"]],
            **{k: v for k, v in train.items() if k != "front"}}


def _row(r: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    return {**{k: r[k] for k in ("number", "digest", "summary", "val_score", "predicted_ms")},
            **{k: r[k] for k in keys}, "arch": r["arch"].to_dict()}


def _tables(res: dict[str, Any]) -> str:
    c, o, sc = res["cost"], res["outcome"], res["scratch"]
    n = res["settings"]["trials"]
    lines = [f"# Supernet search vs train search ({'QUICK: figures meaningless, ' if res['quick'] else ''}"
             f"{res['settings']['data']}, a training subset of {res['settings']['train_samples']} images)", "",
             f"Latency: predicted by the `cpu` table at {res['settings']['deploy_resolution']} px (an estimate for "
             f"this machine, not measured); accuracy on the test split.", "", "## Cost", "",
             f"| step | trials | wall s | s / trial | s / evaluated arch | wall s for {n} trials |",
             "|---|---|---|---|---|---|",
             f"| supernet training ({res['supernet']['epochs']} epoch(s), once) | | {res['supernet']['seconds']:.0f} | | | |"]
    for name in EVALUATORS:
        x = c[name]
        per = "" if x["s_per_evaluated_arch"] is None else f"{x['s_per_evaluated_arch']:.2f}"
        ext = " (extrapolated)" if x["extrapolated"] else ""
        lines.append(f"| search, evaluator={name} | {x['trials']} | {x['wall_s']:.0f} | {x['s_per_trial']:.2f} | "
                     f"{per} | {x[f'wall_s_for_{n}_trials']:.0f}{ext} |")
    lines.append(f"| fine-tuning the supernet front ({len(o['supernet_front'])} archs, {res['settings']['finetune_epochs']}"
                 f" epoch(s)) | | {res['equal_compute']['finetune_s']:.0f} | | | |")
    e = res["equal_compute"]
    hv = o["hypervolume_test"]
    lines += ["", "## Outcome at equal compute", "",
              f"Supernet path: {e['supernet_training_s']:.0f} s training + {e['supernet_search_s']:.0f} s search + "
              f"{e['finetune_s']:.0f} s fine-tuning = {e['total_s']:.0f} s.  Train path: the first {o['k_trials']} of "
              f"its {o['of_trials']} trials ({o['k_seconds']:.0f} s)"
              + ("" if o["budget_reached"] else " — all it ran: a SHORTER budget than the supernet path's") + ".",
              "", "| front | archs | test accuracy | predicted ms | hypervolume (test) |", "|---|---|---|---|---|"]
    for label, rows, key, h in (("supernet, fine-tuned", o["supernet_front"], lambda r: r["finetuned"]["test_accuracy"],
                                 hv["supernet_finetuned"]),
                                ("supernet, inherited weights only", o["supernet_front"],
                                 lambda r: r["inherited"]["score"], hv["supernet_inherited"]),
                                ("train (first K trials)", o["train_front"], lambda r: r["test"]["score"], hv["train"])):
        acc = [100 * key(r) for r in rows]
        ms = [r["predicted_ms"] for r in rows]
        lines.append(f"| {label} | {len(rows)} | {min(acc):.1f}-{max(acc):.1f}% | {min(ms):.3f}-{max(ms):.3f} | "
                     f"{h:.3f} |")
    lines += ["", f"Reference point: ({100 * o['reference']['accuracy']:.0f}% accuracy, "
                  f"{o['reference']['latency_ms']:.3f} ms); hypervolume as a fraction of the box to (100%, 0 ms).",
              "", f"## Fine-tuned from inherited weights vs from scratch ({res['settings']['finetune_epochs']} epoch(s), "
                  "test accuracy)", "", "| arch | predicted ms | fine-tuned | from scratch | difference |",
              "|---|---|---|---|---|"]
    for r in sc["rows"]:
        lines.append(f"| {r['summary']} | {r['predicted_ms']:.3f} | {100 * r['finetuned']:.1f}% | "
                     f"{100 * r['scratch']:.1f}% | {100 * (r['finetuned'] - r['scratch']):+.1f} |")
    lines.append(f"| **mean of {len(sc['rows'])}** | | **{100 * sc['mean_finetuned']:.1f}%** | "
                 f"**{100 * sc['mean_scratch']:.1f}%** | **{100 * (sc['mean_finetuned'] - sc['mean_scratch']):+.1f}** |")
    return "\n".join(lines) + "\n"


def _plot(res: dict[str, Any], path: Path) -> None:
    o = res["outcome"]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for label, rows, key, style in (
            ("supernet front, fine-tuned", o["supernet_front"], lambda r: r["finetuned"]["test_accuracy"], "o-"),
            ("supernet front, inherited", o["supernet_front"], lambda r: r["inherited"]["score"], "x:"),
            (f"train front (first {o['k_trials']} trials)", o["train_front"], lambda r: r["test"]["score"], "s-")):
        pts = sorted((r["predicted_ms"], 100 * key(r)) for r in rows)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label, ms=5)
    ax.set_xlabel("latency, predicted by the cpu table (ms)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"equal compute ({res['equal_compute']['total_s']:.0f} s each)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _setup(a: argparse.Namespace, work: Path) -> dict[str, Any]:
    data = load_subset(a)
    space = load_space("tiny")
    ckpt, sn_s, sn_epochs = _supernet(a, space, data, work)
    cfg = _configs(ckpt.resolve())
    target = load_target("cpu")
    return {"data": data, "space": space, "ckpt": ckpt, "supernet_s": sn_s, "supernet_epochs": sn_epochs, "cfg": cfg,
            "target": target, "latency": load_latency_model(target), "seed": a.seed, "work": work,
            "finetune_epochs": a.finetune_epochs,
            "recipe": TrainEvaluator(**{k: v for k, v in cfg["train"].items() if k != "name"}).fit_settings()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    a = _args(argv)
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = Path(a.out)
    work = out / "bench_supernet_search" / ("quick" if a.quick else "full")
    work.mkdir(parents=True, exist_ok=True)
    env = _setup(a, work)
    keep = ("data", "train_samples", "val_samples", "resolution", "supernet_epochs", "supernet", "seed")
    state = State(work / "state.json", {k: getattr(a, k) for k in keep})
    s = {name: _search(name, a.train_trials if name == "train" else a.trials, env, state) for name in EVALUATORS}
    cost = {name: _search_cost(name, s[name], state, a.trials) for name in EVALUATORS}
    print("fine-tuning the supernet front on the test split ...", flush=True)
    sn_rows = _supernet_front(s["supernet"], env, state)
    ft_s = float(sum(r["finetuned"]["seconds"] for r in sn_rows))
    eq = {"supernet_training_s": env["supernet_s"], "supernet_search_s": cost["supernet"]["wall_s"], "finetune_s": ft_s}
    eq["total_s"] = sum(eq.values())
    print(f"equal compute: {eq['total_s']:.0f} s; the train front of the trials that fit ...", flush=True)
    train = _train_front(s["train"], eq["total_s"], env, state)
    print("fine-tuned vs from scratch ...", flush=True)
    sc_rows = _scratch(sn_rows, env, state, a.archs)
    res = {"command": command("supernet_search"), "cpus": sorted(os.sched_getaffinity(0)),
           "quick": a.quick, "settings": {**{k: v for k, v in vars(a).items() if k != "out"},
                                          "data": env["data"].describe(), "space": "tiny", "target": "cpu",
                                          "latency": env["latency"].describe(),
                                          "deploy_resolution": s["supernet"].problem.deploy_resolution,
                                          "evaluators": {n: env["cfg"][n] for n in EVALUATORS},
                                          "sampler": env["cfg"]["sampler"], "recipe": dataclasses.asdict(env["recipe"])},
           "supernet": {"checkpoint": str(env["ckpt"]), "seconds": env["supernet_s"], "epochs": env["supernet_epochs"]},
           "cost": cost, "equal_compute": eq,
           "outcome": _outcome(sn_rows, train, _reference(s["supernet"].problem)),
           "scratch": {"epochs": a.finetune_epochs, "rows": sc_rows,
                       "mean_finetuned": float(np.mean([r["finetuned"] for r in sc_rows])),
                       "mean_scratch": float(np.mean([r["scratch"] for r in sc_rows]))}}
    name = "supernet_search_quick" if a.quick else "supernet_search"
    atomic_write_json(out / f"{name}.json", res)
    md = _tables(res)
    atomic_write_text(out / f"{name}.md", md)
    _plot(res, out / f"{name}.png")
    print("\n" + md + f"\nwrote {out / (name + '.json')}, {out / (name + '.md')} and {out / (name + '.png')}")
    return res


if __name__ == "__main__":
    main()
