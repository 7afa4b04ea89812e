"""The search's worth: does it pick better networks than random picks or the largest one that fits?

On the full Fashion-MNIST at 28x28 (Debian's ``dataset-fashion-mnist``), the ``tiny`` space, and a
target whose latency table was measured on the machine the benchmark runs on (``--target here``: the
benchmark profiles this machine's table for the space at 28 px itself, into ``<out>/home``):

* three latency budgets, at the 25th, 50th and 75th percentile of the predicted latency of 2000
  random networks of the space (and three MACs budgets at the same percentiles of their MACs);
* five methods, each picking one network per budget, at equal search compute (CPU seconds, recorded):

  (a) ``nsga2``: the default search (NSGA-II, ``evaluator=train`` on the search split: 10k training
      images, 3 epochs, scored on 2000 validation images), accuracy against predicted latency;
  (b) ``supernet``: the supernet path: a weight-sharing supernet trained on the same split for as
      many epochs as (a)'s compute pays for (a one-epoch pilot measures an epoch's and a score's cost),
      then NSGA-II with ``evaluator=supernet`` for ``--supernet-trials`` trials;
  (b2) ``progressive``: the same with the supernet trained by progressive shrinking
      (``supernet.schedule=progressive``), for the epochs (a)'s compute pays for by a pilot of one
      epoch of each of its four phases (their epochs cost unlike amounts);
  (c) ``random``: random search with (a)'s evaluator and trial count;
  (d) ``largest``: of (c)'s random networks (the same number of samples), the one with the largest
      MACs whose predicted latency fits the budget (no training at all);
  (e) ``macs``: a hardware-unaware search: NSGA-II with (a)'s evaluator, accuracy against MACs, each
      pick the most accurate network under the MACs budget matched to the latency budget; its latency
      is then measured, and its picks counted where they break the latency budget.

  Each of (a), (b), (c), (e) searches once, without a budget: one front serves every budget (a
  network's pick is the most accurate feasible trial).
* every pick trained from scratch on the 54k training images (``--final-epochs`` epochs, the
  training recipe of ``nas.train``), with ``--final-seeds`` seeds (``--final-methods``: only these
  methods' picks; ``<out>/final_seeds.json`` keeps the most seeds any run asked of each method, which the
  report holds each method to; it reads every seed trained), and scored on the 10k test images, which
  nothing was chosen on: mean +- 95% CI (Student's t over the seeds);
* every pick's latency *measured* on this machine with the target's runtime (onnxruntime, 1 thread,
  batch 1; ``--measure-rounds`` rounds in fresh sessions, interleaved, the median of the rounds);
* per budget: each hwnas method against (c) and (d), the difference of test accuracy with its 95% CI
  (Welch): beats (the CI above 0), loses (below 0) or ties.

    python -m benchmarks search_value --jobs 2           # the benchmark (hours on two cores; resumable)
    python -m benchmarks search_value --quick            # minutes: checks the pipeline only
    python -m benchmarks search_value --parts search:nsga2 search:random     # some parts, in this process

Its parts (``--parts`` names them; ``--jobs N`` runs them as processes, each on a core of its own):
``table``, ``search:nsga2``, ``search:random``, ``search:macs``, ``search:supernet``, ``final@k`` (the
final trainings, shared out among ``--jobs`` parts), ``measure`` and ``report`` (the report of what is done
so far, its missing trainings named).  Everything a part computes is
kept under ``<out>`` (studies, the supernet, one file per final training), so an interrupted run
resumes where it stopped; a run with other settings is refused, each difference named.  Writes
``<out>/search_value.json``, ``.md`` and ``.png`` (test accuracy against measured latency, one marker
per method, 95% CIs) and prints the table (default out: benchmarks/results/search_value/).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import optuna
import torch
from filelock import FileLock, Timeout

import nas
from benchmarks._jobs import Part, job_cores, run_parts
from benchmarks.harness import RESULTS, diff_ci, machine, markdown_table, mean_ci, usable_device, write_result
from benchmarks.harness import command as harness_command
from nas._io import atomic_write_json
from nas.arch import Arch
from nas.builder import build
from nas.cost import arch_cost
from nas.data import DataSettings, adapt_arch, load_data
from nas.latency.runtimes.core import get_runtime
from nas.latency.runtimes.loop import measure, summarize_times
from nas.latency.tables.provenance import Prediction
from nas.search.budget import Budgets
from nas.search.evaluate import SupernetEvaluator, TrainEvaluator
from nas.search.results import trial_records
from nas.search.samplers import sampler_settings
from nas.search.storage import make_storage
from nas.search.study import prepare_search, run_search
from nas.search.uncertainty import largest_within_noise
from nas.supernet.settings import SupernetSettings
from nas.supernet.train import train_supernet

matplotlib.use("Agg")  # headless: the backend is set before pyplot is imported
import matplotlib.pyplot as plt  # noqa: E402

# the methods that search (d: largest reads random's samples)
SEARCHES = ("nsga2", "random", "macs", "supernet", "progressive")
METHODS = ("nsga2", "supernet", "random", "largest", "macs", "nsga2_noise", "supernet_noise", "progressive",
           "progressive_noise")
LABELS = {"nsga2": "(a) NSGA-II, evaluator=train", "supernet": "(b) supernet path", "random": "(c) random search",
          "largest": "(d) largest MACs that fits", "macs": "(e) hardware-unaware (MACs)",
          "nsga2_noise": "(a') (a), largest within noise of its best", "supernet_noise": "(b') (b), largest within noise of its best",
          "progressive": "(b2) supernet path, progressive shrinking",
          "progressive_noise": "(b2') (b2), largest within noise of its best"}
SUPERNET_PATHS = {"supernet": "sandwich", "progressive": "progressive"}  # the supernet searches, their schedule
PILOT_EPOCHS = {"sandwich": 1, "progressive": 4}  # a plan's pilot training: progressive's, one epoch of each phase
# (a'), (b') and (b2') read (a)'s, (b)'s and (b2)'s studies (no search of their own) and pick by another rule
STUDY_OF = {"largest": "random", "nsga2_noise": "nsga2", "supernet_noise": "supernet",
            "progressive_noise": "progressive"}
# hwnas's own methods; the rest are baselines to beat
HWNAS = ("nsga2", "supernet", "nsga2_noise", "supernet_noise", "progressive", "progressive_noise")
BASELINES = ("random", "largest")
COMPARED = (*BASELINES, "macs")  # what hwnas's picks are compared with: the baselines, and (e) at equal budgets
QUANTILES = (25, 50, 75)
POOL = 2000  # random networks whose predicted latency and MACs place the budgets
# what the run's files were computed with: a run with other values of these is refused
_SETTINGS = ("space", "target", "resolution", "trials", "supernet_trials", "population", "search_epochs",
             "search_train_samples", "search_val_samples", "final_epochs", "search_seed", "quick")


# ------------------------------------------------------------------------------------------------
# settings and inputs


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--space", default="tiny", help="the search space (a shipped name)")
    p.add_argument("--target", default="here", help="the target; 'here' (default) profiles this machine's table "
                   "for the space at --resolution first")
    p.add_argument("--resolution", type=int, default=28, help="input resolution of the search, training and latency")
    p.add_argument("--trials", type=int, default=36, help="trials of (a), (c) and (e); (d) reads (c)'s samples")
    p.add_argument("--supernet-trials", type=int, default=120, help="trials of (b)'s search with the supernet")
    p.add_argument("--population", type=int, default=12, help="NSGA-II's population")
    p.add_argument("--search-epochs", type=int, default=3, help="epochs of evaluator=train in the searches")
    p.add_argument("--search-train-samples", type=int, default=10000, help="training images of the search split")
    p.add_argument("--search-val-samples", type=int, default=2000, help="validation images a search scores on")
    p.add_argument("--search-seed", type=int, default=0, help="the searches' sampler and training seed")
    p.add_argument("--final-epochs", type=int, default=6, help="epochs of each pick's final training on 54k images")
    p.add_argument("--final-seeds", type=int, default=DEFAULT_FINAL_SEEDS, help="final trainings of each pick (seeds 0, 1, ...)")
    p.add_argument("--final-methods", nargs="+", choices=METHODS, default=list(METHODS), metavar="METHOD",
                   help="whose picks the final trainings take to --final-seeds (default: every method's; a "
                        "comparison's two sides given together keep it even)")
    p.add_argument("--measure-rounds", type=int, default=5, help="rounds of latency measurement of every pick")
    p.add_argument("--device", default="cpu", help="where the searches and trainings run (cpu, cuda, cuda:<i>)")
    p.add_argument("--jobs", type=int, default=1, help="run the parts as processes on this many cores")
    p.add_argument("--parts", nargs="+", help="compute only these parts, in this process (see the list above)")
    p.add_argument("--quick", action="store_true", help="a few minutes: tiny data and budgets, checks the pipeline")
    p.add_argument("--out", type=Path, default=RESULTS / "search_value")
    a = p.parse_args(argv)
    if a.quick:
        a.trials, a.supernet_trials, a.population, a.search_epochs = 4, 4, 4, 1
        a.search_train_samples, a.search_val_samples, a.final_epochs, a.final_seeds = 256, 128, 1, 2
        a.measure_rounds = 1
    for k in ("trials", "supernet_trials", "population", "search_epochs", "search_train_samples",
              "search_val_samples", "final_epochs", "final_seeds", "measure_rounds", "jobs"):
        if getattr(a, k) < 1:
            p.error(f"--{k.replace('_', '-')} must be at least 1, got {getattr(a, k)}")
    a.device = usable_device(a.device)
    return a


FINAL_SEEDS = "final_seeds.json"  # method -> the final trainings its picks are due
DEFAULT_FINAL_SEEDS = 3


def settings(a: argparse.Namespace) -> dict[str, Any]:
    return {k: getattr(a, k) for k in _SETTINGS}


def check_settings(out: Path, a: argparse.Namespace) -> None:
    """Record the run's settings in ``<out>/settings.json``; refuse a folder of a run with other ones."""
    path = out / "settings.json"
    want = settings(a)
    if path.is_file():
        have = json.loads(path.read_text())
        diff = [f"{k}: {have.get(k)!r} there, {want[k]!r} now" for k in want if have.get(k) != want[k]]
        if diff:
            raise SystemExit(f"{out} holds a run with other settings ({'; '.join(diff)}): give another --out or the "
                             "same settings")
    else:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, want)


def search_data(a: argparse.Namespace) -> Any:

    return load_data(DataSettings(name="fashion_mnist", resolution=a.resolution, val_fraction=0.1, augment="crop",
                                  train_samples=a.search_train_samples, val_samples=a.search_val_samples))


def final_data(a: argparse.Namespace) -> Any:
    """The 54k training images (the quick check: 512), scored on the 10k test images (the quick check: 256)."""

    ds = load_data(DataSettings(name="fashion_mnist", resolution=a.resolution, val_fraction=0.1, augment="crop",
                                train_samples=512 if a.quick else None, val_samples=10))
    if ds.test is None:
        raise SystemExit("Fashion-MNIST has no test split here: the benchmark scores on its 10k test images")
    return dataclasses.replace(ds, val=ds.test.subset(np.arange(256)) if a.quick else ds.test)


def target_of(a: argparse.Namespace) -> Any:

    return dataclasses.replace(nas.load_target(a.target), resolution=a.resolution)


def use_home(out: Path) -> None:
    """The benchmark's own HWNAS_HOME (where ``conf=here``'s target and table live), unless one is set."""
    os.environ.setdefault("HWNAS_HOME", str((out / "home").resolve()))


# ------------------------------------------------------------------------------------------------
# budgets


def pool(a: argparse.Namespace, space: Any, latency: Any) -> dict[str, np.ndarray]:
    """Predicted latency and MACs of ``POOL`` seeded random networks of the space, as deployed."""

    rng = np.random.default_rng(12345)
    archs = [space.random(rng).with_head(num_classes=10, in_chans=1).with_resolution(a.resolution)
             for _ in range(POOL)]
    return {"ms": latency.predict(archs), "macs": np.array([arch_cost(x).macs for x in archs], dtype=float)}


def budgets(p: dict[str, np.ndarray]) -> list[dict[str, float]]:
    """The latency budgets at ``QUANTILES`` of the pool's predicted latency, each with the MACs budget at
    the same percentile of its MACs (the hardware-unaware search's matched budget)."""
    return [{"quantile": q, "latency_ms": float(np.percentile(p["ms"], q)), "macs": float(np.percentile(p["macs"], q))}
            for q in QUANTILES]


# ------------------------------------------------------------------------------------------------
# the searches


class MacsModel:
    """The hardware-unaware search's second objective: a network's MACs, in millions, where a search takes
    a latency.  It is no latency: the studies of (e) hold MACs in their latency column, and the benchmark
    measures (e)'s picks to learn their latency."""

    source = "estimated"
    device = "MACs (millions), not a latency"
    warning = None
    note = None

    def explain(self, arch: Arch) -> Prediction:
        return Prediction(ms=arch_cost(arch).macs / 1e6, source="estimated", device=self.device)

    def predict(self, archs: Sequence[Arch] | Arch) -> np.ndarray:
        archs = [archs] if isinstance(archs, Arch) else archs
        return np.array([self.explain(x).ms for x in archs], dtype=np.float64)

    def describe(self) -> str:
        return "MACs (millions): a hardware-unaware objective, not a latency"


def study_path(out: Path, method: str) -> Path:
    return out / "studies" / f"{method}.journal"


def run_study(a: argparse.Namespace, out: Path, method: str, *, evaluator: Any, latency: Any, trials: int,
              data: Any) -> None:
    """One search of ``trials`` trials in all (a re-run resumes where its journal stopped)."""
    sampler: dict[str, Any] = {"name": "random"} if method == "random" else {"name": "nsga2",
                                                                            "population_size": a.population}
    path = study_path(out, method)
    path.parent.mkdir(parents=True, exist_ok=True)
    s = prepare_search(target=target_of(a), search_space=a.space, data=data, evaluator=evaluator,
                       sampler=sampler_settings(sampler), budgets=Budgets(), seed=a.search_seed,
                       run_dir=out / "studies" / method, storage=str(path), study_name=method, latency=latency)
    run_search(s.study, s.problem, n_trials=trials, storage=s.storage)  # the study's total: a re-run resumes


def load_records(out: Path, method: str) -> list[dict[str, Any]]:
    """Every trial of a method's study (``nas.search.results.trial_records``), whatever its status."""
    st, _ = make_storage(str(study_path(out, method)), run_dir=out / "studies" / method)
    return trial_records(optuna.load_study(study_name=method, storage=st))


def search_cost(out: Path, method: str) -> dict[str, float] | None:
    """What a method's search cost, in seconds of one core (each part runs on a core of its own with one
    torch thread, so its wall time is its compute): every trial's duration (sampling, the latency
    prediction, the evaluation), plus the supernet's training for (b) and (b2); None before the search ran."""
    if not study_path(out, method).is_file():
        return None
    trials = sum(r["duration_s"] or 0.0 for r in load_records(out, method))
    sn = out / "studies" / f"{method}_training.json"
    training = json.loads(sn.read_text())["training_s"] if method in SUPERNET_PATHS and sn.is_file() else 0.0
    return {"trials_s": trials, "supernet_training_s": training, "total_s": trials + training}


def train_evaluator(a: argparse.Namespace) -> Any:
    return TrainEvaluator(epochs=a.search_epochs, device=a.device)


def part_search(a: argparse.Namespace, out: Path, method: str) -> None:
    data = search_data(a)
    if method in SUPERNET_PATHS:
        return part_supernet(a, out, data, method)
    latency = MacsModel() if method == "macs" else nas.load_latency_model(target_of(a))
    run_study(a, out, method, evaluator=train_evaluator(a), latency=latency, trials=a.trials, data=data)
    print(f"search {method}: {a.trials} trials, {search_cost(out, method)['total_s']:.0f} core-seconds", flush=True)
    return None


def supernet_plan(a: argparse.Namespace, out: Path, space: Any, data: Any, method: str = "supernet") -> dict[str, Any]:
    """A pilot's mean epoch and a supernet score's seconds (measured once, kept in ``<method>.plan.json``), and
    the epochs that make the supernet's training plus ``--supernet-trials`` scores cost what (a) cost.  The
    sandwich rule's pilot is one epoch (every epoch does the same work); progressive shrinking's is one epoch
    of each of its four phases (``PILOT_EPOCHS``), whose epochs cost unlike amounts (the largest subnet
    alone is a single pass a step, the elastic phases several)."""
    path = out / "studies" / f"{method}.plan.json"
    if not path.is_file():
        schedule, epochs = SUPERNET_PATHS[method], PILOT_EPOCHS[SUPERNET_PATHS[method]]
        t0 = time.perf_counter()
        train_supernet(space, data, SupernetSettings(epochs=epochs, seed=a.search_seed, device=a.device,
                                                     schedule=schedule), out / "studies" / f"{method}_pilot")
        epoch_s = (time.perf_counter() - t0) / epochs
        ev = SupernetEvaluator(checkpoint=str(out / "studies" / f"{method}_pilot" / "supernet.ckpt"), device=a.device)
        rng = np.random.default_rng(0)
        t0 = time.perf_counter()
        for _ in range(3):
            ev.evaluate(adapt_arch(space.random(rng), data), data, seed=0)
        atomic_write_json(path, {"pilot_epoch_s": epoch_s, "score_s": (time.perf_counter() - t0) / 3,
                                 "pilot_epochs": epochs, "schedule": schedule})
    plan = json.loads(path.read_text())
    matched = search_cost(out, "nsga2")
    if matched is None:
        raise SystemExit(f"search:{method} matches (a)'s compute: run search:nsga2 first")
    epochs = max(1, int((matched["total_s"] - a.supernet_trials * plan["score_s"]) // plan["pilot_epoch_s"]))
    return {**plan, "epochs": epochs, "matched_s": matched["total_s"]}


def part_supernet(a: argparse.Namespace, out: Path, data: Any, method: str = "supernet") -> None:
    """(b) and (b2): the supernet (``method``'s schedule, ``SUPERNET_PATHS``) trains for the epochs (a)'s
    compute pays for (``supernet_plan``, by a pilot of that schedule), then NSGA-II searches with
    ``evaluator=supernet`` for ``--supernet-trials`` trials."""
    space = nas.load_space(a.space)
    plan = supernet_plan(a, out, space, data, method)
    ckpt_dir = out / "studies" / f"{method}_ckpt"
    rec = train_supernet(space, data, SupernetSettings(epochs=plan["epochs"], seed=a.search_seed, device=a.device,
                                                       schedule=SUPERNET_PATHS[method]), ckpt_dir)
    atomic_write_json(out / "studies" / f"{method}_training.json",
                      {**plan, "schedule": SUPERNET_PATHS[method], "training_s": sum(h["seconds"] for h in rec["history"])})
    ev = SupernetEvaluator(checkpoint=str(ckpt_dir / "supernet.ckpt"), device=a.device)
    run_study(a, out, method, evaluator=ev, latency=nas.load_latency_model(target_of(a)),
              trials=a.supernet_trials, data=data)
    print(f"search {method}: {plan['epochs']} supernet epochs + {a.supernet_trials} trials, "
          f"{search_cost(out, method)['total_s']:.0f} core-seconds (matching (a)'s {plan['matched_s']:.0f})",
          flush=True)


def records(out: Path, method: str) -> list[dict[str, Any]]:
    """The evaluated trials of a method's study (``nas.search.results.trial_records``), each score with its
    Wilson interval on the run's validation images (``--search-val-samples``)."""
    images = json.loads((out / "settings.json").read_text())["search_val_samples"]
    st, _ = make_storage(str(study_path(out, method)), run_dir=out / "studies" / method)
    return [r for r in trial_records(optuna.load_study(study_name=method, storage=st), images=images)
            if r["status"] in ("evaluated", "cached") and r["score"] is not None]


# ------------------------------------------------------------------------------------------------
# the picks


def pick(method: str, recs: list[dict[str, Any]], budget: dict[str, float]) -> dict[str, Any] | None:
    """The network ``method`` deploys under ``budget``: the most accurate evaluated trial that fits it
    (for ``macs``, under its matched MACs budget; for ``largest``, the largest MACs that fits, whatever its
    score; for ``*_noise``, the largest MACs whose score lies within the 95% interval of the most accurate
    one's, ``nas.search.uncertainty.largest_within_noise``).  Ties go to the earlier trial.  None when
    nothing fits."""
    if method == "macs":
        fits = [r for r in recs if r["macs"] <= budget["macs"]]
    else:
        fits = [r for r in recs if r["latency_ms"] <= budget["latency_ms"]]
    if not fits:
        return None
    if method.endswith("_noise"):
        return largest_within_noise(fits)
    key = (lambda r: (r["macs"], -r["number"])) if method == "largest" else (lambda r: (r["score"], -r["number"]))
    return max(fits, key=key)


def all_picks(out: Path, bs: list[dict[str, float]]) -> dict[str, list[dict[str, Any] | None] | None]:
    """Each method's pick for each budget (``largest`` reads the random search's samples); None for a method
    whose search has not run yet."""
    recs = {m: records(out, m) if study_path(out, m).is_file() else None for m in SEARCHES}
    recs.update({m: recs[of] for m, of in STUDY_OF.items()})
    return {m: None if recs[m] is None else [pick(m, recs[m], b) for b in bs] for m in METHODS}


def trainings(picks: dict[str, list[dict[str, Any] | None] | None],
              seeds: int) -> list[tuple[str, dict[str, Any], int]]:
    """The final trainings: every distinct picked network with every seed, budget by budget; the picks
    the verdicts compare (hwnas's methods and the baselines to beat) before (e)'s, so a run stopped
    early has its comparisons first (a method not searched yet, None, has none)."""
    picks = {m: ps for m, ps in picks.items() if ps is not None}
    seen, out = set(), []
    n = len(next(iter(picks.values()), []))
    for methods in ((*HWNAS, *BASELINES), tuple(m for m in METHODS if m not in HWNAS + BASELINES)):
        for i in range(n):
            for m in (m for m in methods if m in picks):
                r = picks[m][i]
                if r is not None and r["digest"] not in seen:
                    seen.add(r["digest"])
                    out += [(r["digest"], r["_arch"], s) for s in range(seeds)]
    return out


# ------------------------------------------------------------------------------------------------
# final training and measurement


def final_path(out: Path, digest: str, seed: int) -> Path:
    return out / "final" / f"{digest[:16]}-s{seed}.json"


def final_runs(out: Path, digest: str) -> list[float]:
    """The test accuracy of every final training of ``digest`` done so far, by seed (a run asked for more
    seeds of some methods, ``--final-methods``, has more of them)."""
    runs = {}
    for path in (out / "final").glob(f"{digest[:16]}-s*.json"):
        seed = path.name[len(digest[:16]) + 2:-len(".json")]
        if seed.isdigit():
            runs[int(seed)] = json.loads(path.read_text())["test_accuracy"]
    return [runs[s] for s in sorted(runs)]


def due_seeds(a: argparse.Namespace, out: Path) -> dict[str, int]:
    """The final trainings each method's picks are due: the most seeds any run of the final part asked for
    that method (``<out>/final_seeds.json``, which ``record_due_seeds`` keeps) or this run's ``--final-seeds``
    where ``--final-methods`` names it; a method no run asked for yet: the default ``--final-seeds``."""
    path = out / FINAL_SEEDS
    asked = json.loads(path.read_text()) if path.is_file() else {}
    return {m: max(asked.get(m, 0), a.final_seeds if m in a.final_methods else 0) or DEFAULT_FINAL_SEEDS
            for m in METHODS}


def record_due_seeds(a: argparse.Namespace, out: Path) -> None:
    """Add this run's ``--final-seeds`` for its ``--final-methods`` to ``<out>/final_seeds.json``, so that a
    later report knows how many trainings each method is due (parts running at once share one lock)."""
    path = out / FINAL_SEEDS
    with FileLock(f"{path}.lock"):
        asked = json.loads(path.read_text()) if path.is_file() else {}
        atomic_write_json(path, {**asked, **{m: max(asked.get(m, 0), a.final_seeds) for m in a.final_methods}})


def part_final(a: argparse.Namespace, out: Path, k: int, of: int) -> None:
    """The final trainings ``k``, ``k + of``, ... of the run (each kept in a file of its own); a training
    another process holds (its claim, an OS lock) is left to it, so processes on other cores may share
    the same list (``--parts final@0/1`` on each)."""

    data, bs = None, json.loads((out / "budgets.json").read_text())["budgets"]
    record_due_seeds(a, out)
    picks = {m: ps for m, ps in all_picks(out, bs).items() if m in a.final_methods}
    todo = trainings(picks, a.final_seeds)[k::of]
    recipe = TrainEvaluator(epochs=a.final_epochs, device=a.device)
    for digest, arch, seed in todo:
        path = final_path(out, digest, seed)
        if path.is_file():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        claim = FileLock(f"{path}.lock", timeout=0)  # another process training it holds it (released if it dies)
        try:
            claim.acquire()
        except Timeout:
            continue
        try:
            if path.is_file():  # finished by another process meanwhile
                continue
            data = data or final_data(a)
            cpu0 = time.process_time()
            r = recipe.evaluate(Arch.from_dict(arch), data, seed=seed)
            atomic_write_json(path, {"digest": digest, "seed": seed, "test_accuracy": r.score, "cpu_s":
                                     time.process_time() - cpu0, "wall_s": r.seconds, "epochs": a.final_epochs,
                                     "metrics": r.metrics})
        finally:
            claim.release()
        print(f"final {digest[:10]} seed {seed}: test {100 * r.score:.2f}% ({r.seconds:.0f} s)", flush=True)


def part_measure(a: argparse.Namespace, out: Path) -> None:
    """Every pick's latency measured with the target's runtime: ``--measure-rounds`` rounds, each in a
    fresh session, the picks interleaved within a round; kept in ``<out>/measured.json``."""


    bs = json.loads((out / "budgets.json").read_text())["budgets"]
    picks = all_picks(out, bs)
    archs = {r["digest"]: r["_arch"] for rs in picks.values() for r in rs or () if r is not None}
    path = out / "measured.json"
    have = json.loads(path.read_text()) if path.is_file() else {}
    todo = {d: Arch.from_dict(x) for d, x in archs.items() if d not in have}
    if not todo:
        return
    runtime = get_runtime(target_of(a))
    rounds: dict[str, list[float]] = {d: [] for d in todo}
    for _ in range(a.measure_rounds):
        for d, arch in todo.items():
            with torch.no_grad():
                runner = runtime.prepare(build(arch).eval(), (arch.in_chans, arch.resolution, arch.resolution))
                rounds[d].append(summarize_times(measure(runner, warmup=20, repeats=200, min_time_s=0.3))["median_ms"])
    for d, v in rounds.items():
        have[d] = {"median_ms": float(np.median(v)), "rounds_ms": v, "runtime": runtime.info()}
    atomic_write_json(path, have)
    print(f"measured {len(todo)} networks in {a.measure_rounds} rounds", flush=True)


# ------------------------------------------------------------------------------------------------
# statistics


def verdict(lo: float, hi: float) -> str:
    return "beats" if lo > 0 else "loses" if hi < 0 else "ties"


# ------------------------------------------------------------------------------------------------
# report


def report(a: argparse.Namespace, out: Path) -> dict[str, Any] | None:
    bs = json.loads((out / "budgets.json").read_text())["budgets"]
    picks = all_picks(out, bs)
    measured = json.loads((out / "measured.json").read_text()) if (out / "measured.json").is_file() else {}
    rows, missing, due = [], [], due_seeds(a, out)
    acc: dict[tuple[str, int], list[float]] = {}
    for i, b in enumerate(bs):
        for m in METHODS:
            if picks[m] is None:  # its search has not run
                rows.append({"budget": i, "method": m, "pick": None, "searched": False})
                part = f"search:{STUDY_OF.get(m, m)}"
                missing += [] if part in missing else [part]
                continue
            r = picks[m][i]
            if r is None:
                rows.append({"budget": i, "method": m, "pick": None})
                continue
            runs = final_runs(out, r["digest"])
            if len(runs) < due[m]:
                missing.append(f"{m}@{b['quantile']}")
            acc[(m, i)] = runs
            mean, half = mean_ci(runs) if runs else (float("nan"), float("nan"))
            ms = measured.get(r["digest"], {}).get("median_ms")
            rows.append({"budget": i, "method": m, "pick": r["arch"], "digest": r["digest"], "trial": r["number"],
                         "search_score": r["score"], "predicted_ms": r["latency_ms"] if m != "macs" else None,
                         "macs": r["macs"], "params": r["params"], "measured_ms": ms,
                         "over_budget": None if ms is None else ms > b["latency_ms"],
                         "over_by": None if ms is None else ms / b["latency_ms"] - 1,
                         "test_accuracy": runs, "mean": mean, "ci95": half})
    comparisons = []
    for i, b in enumerate(bs):
        for m in HWNAS:
            for base in COMPARED:
                x, y = acc.get((m, i), []), acc.get((base, i), [])
                if picks[m] is None or picks[base] is None:
                    continue
                pm, pb = picks[m][i], picks[base][i]
                if pm is not None and pb is not None and pm["digest"] == pb["digest"]:
                    comparisons.append({"budget": i, "quantile": b["quantile"], "method": m, "baseline": base,
                                        "diff": 0.0, "lo": 0.0, "hi": 0.0, "verdict": "same network"})
                elif len(x) >= 2 and len(y) >= 2:
                    d, lo, hi = diff_ci(x, y)
                    comparisons.append({"budget": i, "quantile": b["quantile"], "method": m, "baseline": base,
                                        "diff": d, "lo": lo, "hi": hi, "verdict": verdict(lo, hi)})
    costs = {m: search_cost(out, m) for m in SEARCHES}
    macs_rows = [r for r in rows if r["method"] == "macs" and r.get("over_budget") is not None]
    result = {
        "command": harness_command("search_value"), "machine": machine(), "settings": settings(a),
        "final": {"epochs": a.final_epochs, "seeds": due,
                  "seeds_note": "the trainings each method's picks are due (--final-methods may take some methods' "
                                "picks to more); each row's test_accuracy holds every seed trained",
                  "train_images": "54000 (all but the val split)", "scored_on": "the 10k test images"},
        "budgets": bs, "rows": rows, "comparisons": comparisons, "search_cost": costs,
        "macs_over_budget": {"picks": len(macs_rows), "over": sum(bool(r["over_budget"]) for r in macs_rows),
                             "by": [r["over_by"] for r in macs_rows]},
        "complete": not missing and all(r.get("measured_ms") is not None for r in rows if r["pick"]),
        "missing": missing,
    }
    table = _table(result)
    write_result(out / "search_value.json", result, table=table, plot=lambda p: _plot(result, p))
    print(table)
    return result


def _fmt_acc(r: dict[str, Any]) -> str:
    if not r.get("test_accuracy"):
        return "-"
    n = len(r["test_accuracy"])
    ci = "" if math.isnan(r["ci95"]) else f" ± {100 * r['ci95']:.2f}"
    return f"{100 * r['mean']:.2f}{ci} (n={n})"


def _table(res: dict[str, Any]) -> str:
    lines = []
    for i, b in enumerate(res["budgets"]):
        lines.append(f"\nbudget p{b['quantile']}: {b['latency_ms']:.4f} ms predicted (MACs budget of (e): "
                     f"{b['macs'] / 1e6:.2f} M)\n")
        body = []
        for r in (x for x in res["rows"] if x["budget"] == i):
            if r["pick"] is None:
                body.append([LABELS[r["method"]], "not searched yet" if r.get("searched") is False else "nothing fits",
                             "", "", "", "", ""])
                continue
            meas = "-" if r["measured_ms"] is None else f"{r['measured_ms']:.4f}" + (" OVER" if r["over_budget"] else "")
            pred = "-" if r["predicted_ms"] is None else f"{r['predicted_ms']:.4f}"
            body.append([LABELS[r["method"]], r["pick"], f"{r['macs'] / 1e6:.2f}", pred, meas,
                         f"{100 * r['search_score']:.2f}" if r["method"] != "largest" else "-", _fmt_acc(r)])
        lines.append(markdown_table(body, ["method", "pick", "MACs (M)", "predicted ms", "measured ms",
                                           "search score %", "test acc % (95% CI)"]))
    if res["comparisons"]:
        lines.append("\ndifferences of test accuracy (points, 95% CI, Welch):\n")
        lines.append(markdown_table([[f"p{c['quantile']}", LABELS[c["method"]], LABELS[c["baseline"]],
                                      f"{100 * c['diff']:+.2f} [{100 * c['lo']:+.2f}, {100 * c['hi']:+.2f}]",
                                      c["verdict"]] for c in res["comparisons"]],
                                    ["budget", "method", "against", "difference", "verdict"]))
    cost = [[LABELS[m], f"{c['trials_s']:.0f}", f"{c['supernet_training_s']:.0f}" if m in SUPERNET_PATHS else "-",
             f"{c['total_s']:.0f}"] for m, c in res["search_cost"].items() if c]
    lines.append("\nsearch compute (seconds of one core):\n")
    lines.append(markdown_table(cost, ["method", "trials", "supernet training", "total"]))
    mo = res["macs_over_budget"]
    lines.append(f"\n(e)'s picks over the latency budget (measured): {mo['over']} of {mo['picks']}"
                 + (f" (by {', '.join(f'{100 * x:+.1f}%' for x in mo['by'])})" if mo["by"] else ""))
    if res["missing"]:
        lines.append(f"\nINCOMPLETE: final trainings missing for {', '.join(res['missing'])}")
    return "\n".join(lines) + "\n"


def _plot(res: dict[str, Any], path: Path) -> None:
    colors = {"nsga2": "tab:blue", "supernet": "tab:purple", "random": "0.45", "largest": "tab:orange",
              "macs": "tab:red", "nsga2_noise": "tab:cyan", "supernet_noise": "tab:pink", "progressive": "tab:green",
              "progressive_noise": "tab:olive"}
    markers = {"nsga2": "o", "supernet": "D", "random": "s", "largest": "^", "macs": "v", "nsga2_noise": "P",
               "supernet_noise": "X", "progressive": "d", "progressive_noise": "*"}
    fig, ax = plt.subplots(figsize=(8, 5), dpi=150)
    for m in METHODS:
        pts = [r for r in res["rows"] if r["method"] == m and r["pick"] and r["measured_ms"] and r["test_accuracy"]]
        if pts:
            ax.errorbar([r["measured_ms"] for r in pts], [100 * r["mean"] for r in pts],
                        yerr=[0 if math.isnan(r["ci95"]) else 100 * r["ci95"] for r in pts], fmt=markers[m],
                        color=colors[m], ms=6, capsize=3, label=LABELS[m])
    for b in res["budgets"]:
        ax.axvline(b["latency_ms"], color="0.7", lw=0.8, ls="--")
        ax.annotate(f"p{b['quantile']} budget", (b["latency_ms"], ax.get_ylim()[0]), fontsize=7, rotation=90,
                    xytext=(2, 4), textcoords="offset points", color="0.5")
    ax.set_xlabel("latency measured on this machine (ms, median of rounds)")
    ax.set_ylabel("test accuracy (%), mean and 95% CI over seeds")
    ax.set_title("Fashion-MNIST 28x28: each method's pick per latency budget, trained on 54k images", fontsize=9)
    ax.grid(alpha=0.25)
    if ax.get_legend_handles_labels()[0]:  # a report before any pick is trained and measured has none
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------
# parts


def part_table(a: argparse.Namespace) -> None:
    """``nas.profile`` of the target for the space at the benchmark's resolution, one channel, ten classes
    (a re-run measures only what the table lacks).  ``--quick`` measures nothing: without a table its
    latencies are the target's roofline estimates, labelled so."""
    if a.target != "here" or a.quick:
        return
    cmd = [sys.executable, "-m", "nas.profile", "conf=here", f"search_space={a.space}", f"resolution={a.resolution}",
           "in_chans=[1]", "num_classes=[10]", "progress=false"]
    if subprocess.run(cmd).returncode != 0:
        raise SystemExit("the profile of this machine's table stopped (its message above); run the same command "
                         "again on a quiet core to continue it")


def part_budgets(a: argparse.Namespace, out: Path) -> None:

    path = out / "budgets.json"
    if path.is_file():
        return
    latency = nas.load_latency_model(target_of(a))
    bs = budgets(pool(a, nas.load_space(a.space), latency))
    atomic_write_json(path, {"budgets": bs, "pool": POOL, "latency": latency.describe()})


def part_list(a: argparse.Namespace) -> list[Part]:
    cost = a.trials * a.search_epochs * a.search_train_samples
    out = [Part("table", 1), *(Part(f"search:{m}", cost, ("table",)) for m in ("nsga2", "random", "macs")),
           *(Part(f"search:{m}", cost, ("table", "search:nsga2")) for m in SUPERNET_PATHS)]
    searches = tuple(p.name for p in out if p.name.startswith("search:"))
    out += [Part(f"final@{k}", a.final_epochs * 54000, searches) for k in range(a.jobs)]
    out.append(Part("measure", 1, tuple(p.name for p in out if p.name.startswith("final@"))))
    return out


def run_part(a: argparse.Namespace, out: Path, name: str) -> None:
    if name == "table":
        part_table(a)
    elif name.startswith("search:"):
        part_budgets(a, out)
        part_search(a, out, name.split(":", 1)[1])
    elif name.startswith("final@"):
        k, _, of = name[len("final@"):].partition("/")
        part_final(a, out, int(k), int(of or a.jobs))
    elif name == "measure":
        part_measure(a, out)
    elif name == "report":
        report(a, out)
    else:
        raise SystemExit(f"--parts: no part {name!r}; the parts: table, search:nsga2, search:random, search:macs, "
                         "search:supernet, search:progressive, final@<k>[/<of>], measure, report")


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    a = _args(argv)
    out = a.out.resolve()  # the studies record their journal's path: one folder, however it is reached
    check_settings(out, a)
    use_home(out)
    torch.set_num_threads(1)
    if a.parts:
        part_table(a) if "table" in a.parts else None
        part_budgets(a, out)
        for name in a.parts:
            if name != "table":
                run_part(a, out, name)
        return None
    parts = part_list(a)
    if a.jobs > 1:
        cores = job_cores(a.jobs)
        argv_ = [x for x in (sys.argv[1:] if argv is None else argv)]
        keep = _without(argv_, "--jobs")
        print(f"{len(parts)} parts on cores {', '.join(map(str, cores))} (their output: {out / 'logs'})", flush=True)
        run_parts(parts, lambda p: [sys.executable, "-m", "benchmarks", "search_value", *keep, "--parts",
                                    p.name if not p.name.startswith("final@") else f"{p.name}/{a.jobs}"],
                  cores, out / "logs")
    else:
        for p in parts:
            run_part(a, out, p.name)
    return report(a, out)


def _without(argv: list[str], flag: str) -> list[str]:
    """``argv`` without ``flag`` and its value."""
    out, skip = [], False
    for x in argv:
        if skip:
            skip = False
            continue
        if x == flag:
            skip = True
            continue
        if x.startswith(flag + "="):
            continue
        out.append(x)
    return out


if __name__ == "__main__":
    main()
