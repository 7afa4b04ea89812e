"""Benchmark the weight-sharing supernet as a ranking signal, against stand-alone training.

By default on Fashion-MNIST (the Debian package's files; a training subset, said so in the output)
and the ``tiny`` space, on this machine's CPU; ``--space``, ``--data`` / ``--data-root``,
``--resolution``, ``--device`` and ``--target`` run the same benchmark elsewhere (below):

1. train the supernet once (``nas.supernet.train.train_supernet``, the sandwich rule);
2. pick ``--archs`` architectures spread over the latency range of the space: 2000 random ones
   (``--pick graded``: 2000 from the space's narrowest to its widest, ``graded_arch``), their
   latency predicted by the ``--target``'s predictor (``cpu``), the ones at evenly spaced latency
   quantiles;
3. score each by (a) the supernet's inherited weights (``evaluator=supernet``), (a') those of a
   second supernet trained by progressive shrinking (``supernet.schedule=progressive``, same epochs),
   (b) short training (``evaluator=train`` at its default budget), (b') short training at the
   supernet's compute (``train_equal``: the epochs that make the 24 trainings cost what the
   sandwich supernet's training and scoring cost, from the measured seconds of both; it runs once
   ``supernet`` and ``train`` are complete), (b'') one epoch of training (``train_1epoch``: a
   supernet trial's cost in a search of many trials, the report says how many), (c) NASWOT and
   (d) synflow (``evaluator=zero_cost``),
   and train it stand-alone from scratch (``--standalone-epochs``) with ``--standalone-seeds`` seeds:
   the reference is the mean of those runs.  How well the runs agree with each other gives the
   ceiling the reference's noise leaves (``reference_ceiling``: the tau a perfect score would reach,
   and how many runs a reference needs for tau 0.8).  The estimators (and the supernet's training) use
   ``--seed``, the stand-alone runs the seeds after it, so no estimator starts from the initial
   weights of a reference run;
4. report Kendall's tau between the reference and each score, and the cost of each (the supernet's
   training wall time; seconds per evaluated architecture).

    taskset -c 0 python -m benchmarks supernet              # the benchmark (about 2 hours on one core)
    taskset -c 0 python -m benchmarks supernet --quick      # a minute or two: checks the pipeline only

The scores are independent, so a run splits across cores: ``--jobs 2`` runs its parts (a supernet's
training with its scores, each stand-alone run, each estimator) as processes pinned to two cores of
their own, each part's output in ``<out>/bench_supernet/<run>/logs/``; or by hand (or on machines
sharing the folder):

    taskset -c 0 python -m benchmarks supernet --scores supernet train naswot synflow standalone2 &
    taskset -c 1 python -m benchmarks supernet --scores standalone0 standalone1

Each part computes only its scores; whichever finds them all complete writes the report (a run
without ``--scores`` computes what is missing, then reports).

On a GPU, at 224 px on an ImageFolder, with a larger space (each of the 24 x 3 stand-alone runs
is a training of its own: plan GPU hours, ``docs/benchmarks.md`` gives measured throughput):

    python -m benchmarks supernet --device cuda --space mbv3 --target gpu --data imagefolder \
        --data-root ~/data/imagenette --resolution 224 --train-samples 0 --batch-size 128 \
        --supernet-epochs 60 --standalone-epochs 30 --out runs/bench_mbv3

Writes ``<out>/supernet.json`` and ``<out>/supernet.png`` (scatter plots; default out:
benchmarks/results/) and prints the table.  The supernet checkpoint and each score of each
architecture are cached under ``<out>/bench_supernet/``, so an interrupted run resumes where it
stopped; a cache written with other settings is refused, each difference named.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._inputs import add_subset_args, load_bench_space, load_subset
from benchmarks._jobs import Part, job_cores, run_parts
from benchmarks._ranking import _pick_archs, _tau, ceiling_line, plot_ranking, reference_agreement, reference_ceiling
from benchmarks.harness import RESULTS, usable_device
from benchmarks.harness import command as harness_command
from nas._io import atomic_write_json

METHODS = ("supernet", "progressive", "train", "train_equal", "train_1epoch", "naswot", "synflow")
ACCURACY = ("supernet", "progressive", "train", "train_equal", "train_1epoch")  # scores that are accuracies (the rest: proxies)
# the estimators --estimator-seeds scores again with other seeds (a supernet's seeds: supernet_ablation's seed=N variants)
SEEDED = ("train", "train_equal", "train_1epoch", "naswot", "synflow")
SEED_STEP = 100  # estimator seed k is --seed + 100 k: clear of the stand-alone runs' seeds and supernet_again's
# what a cache was computed with: a re-run with other values of these must not reuse it
_SETTINGS = ("data", "data_root", "train_samples", "val_samples", "resolution", "space", "target", "device",
             "batch_size", "archs", "supernet_epochs", "standalone_epochs", "seed", "pick")
# the value of a setting a cache recorded before the benchmark had it
_ADDED = {"data_root": None, "space": "tiny", "target": "cpu", "device": "cpu", "batch_size": None, "pick": "random"}


def seed_names(method: str, estimator_seeds: int) -> tuple[str, ...]:
    """The scores of ``method`` over ``estimator_seeds`` seeds: its own, then ``method@1``, ``method@2`` ..."""
    return (method, *(f"{method}@{k}" for k in range(1, estimator_seeds)))


def _split_seed(name: str) -> tuple[str, int]:
    """``train@2`` -> ``("train", 2)``; a name without ``@`` is its estimator's first seed (k = 0)."""
    method, _, k = name.partition("@")
    return method, int(k or 0)


def score_names(seeds: int, estimator_seeds: int = 1) -> tuple[str, ...]:
    """Every score the benchmark computes: the estimators, the supernet's again with another draw of
    BatchNorm-recalibration batches (how reproducible its score is), one stand-alone run per seed, then
    the ``SEEDED`` estimators again with each further estimator seed (``train@1``, ``naswot@2`` ...)."""
    further = [seed_names(m, estimator_seeds)[1:] for m in SEEDED]
    return (*METHODS, "supernet_again", *(f"standalone{k}" for k in range(seeds)), *(n for ns in zip(*further) for n in ns))


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    add_subset_args(p)
    p.set_defaults(train_samples=10000, val_samples=0)
    p.add_argument("--space", default="tiny", help="the search space (a shipped name or a YAML file)")
    p.add_argument("--target", default="cpu", help="whose predicted latency spreads the architectures")
    p.add_argument("--device", default="cpu", help="where everything trains and scores (cpu, cuda, cuda:<i>)")
    p.add_argument("--batch-size", type=int, help="training batch of the supernet and every training score "
                   "(default: each one's own, 64)")
    p.add_argument("--archs", type=int, default=24, help="architectures spread over the latency range")
    p.add_argument("--pick", choices=("random", "graded"), default="random",
                   help="the pool the architectures are picked from by latency: uniformly random ones, or graded "
                        "ones (every choice near one shared fraction of its range: from the space's narrowest to "
                        "its widest, which random draws rarely reach)")
    p.add_argument("--supernet-epochs", type=int, default=20)
    p.add_argument("--standalone-epochs", type=int, default=8, help="the stand-alone (reference) training")
    p.add_argument("--standalone-seeds", type=int, default=3, help="stand-alone runs per architecture (>= 2)")
    p.add_argument("--estimator-seeds", type=int, default=1,
                   help=f"seeds of {', '.join(SEEDED)} (their spread; seed k is --seed + {SEED_STEP} k)")
    p.add_argument("--scores", nargs="+", metavar="NAME",
                   help="compute only these scores (supernet, train, naswot, synflow, supernet_again, standalone<k>, "
                        "train@<k> ...)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1, help="processes the scores run in, each on a core of its own "
                   "(the first cores this process may use)")
    p.add_argument("--quick", action="store_true", help="tiny settings: checks the pipeline, figures meaningless")
    p.add_argument("--out", default=str(RESULTS))
    a = p.parse_args(argv)
    if a.quick:
        a.train_samples, a.val_samples, a.archs, a.supernet_epochs, a.standalone_epochs = 256, 128, 4, 1, 1
        a.standalone_seeds = 2
    if a.batch_size is not None and a.batch_size < 1:
        p.error(f"--batch-size must be a positive integer, got {a.batch_size}")
    if a.standalone_seeds < 2:
        p.error("--standalone-seeds must be at least 2: the agreement of the runs is what bounds the ranking")
    if a.estimator_seeds < 1:
        p.error("--estimator-seeds must be at least 1")
    if a.jobs < 1:
        p.error(f"--jobs must be at least 1, got {a.jobs}")
    if a.jobs > 1 and a.device != "cpu":
        p.error(f"--jobs runs the parts on CPU cores; on --device {a.device} give --jobs 1")
    names = score_names(a.standalone_seeds, a.estimator_seeds)
    unknown = [s for s in a.scores or () if s not in names]
    if unknown:
        p.error(f"--scores: unknown {', '.join(unknown)}; choose from {', '.join(names)}")
    a.scores = [s for s in names if s in (a.scores or names)]
    return a


def recorded_settings(work: Path) -> dict[str, Any] | None:
    """The settings of the run cached in ``work`` (one recorded before a setting existed has its
    default); None where ``work`` holds no run's settings."""
    path = work / "settings.json"
    if not path.is_file():
        return None
    have = json.loads(path.read_text())
    return {k: have.get(k, _ADDED.get(k)) for k in _SETTINGS}


def settings_differences(work: Path, a: argparse.Namespace) -> list[str] | None:
    """How the run cached in ``work`` was set otherwise than ``a`` (each difference named; [] when alike);
    None where ``work`` holds no run's settings."""
    have = recorded_settings(work)
    if have is None:
        return None
    return [f"{k} {have[k]!r} there, {getattr(a, k)!r} asked" for k in _SETTINGS if have[k] != getattr(a, k)]


def check_work(work: Path, a: argparse.Namespace) -> None:
    """Refuse a cache in ``work`` computed with other settings (each difference named); record ours."""
    diffs = settings_differences(work, a)
    if diffs:
        raise SystemExit(f"{work} holds a benchmark run with other settings ({'; '.join(diffs)}); "
                         "give another --out or remove that folder")
    if diffs is None and work.is_dir() and any(work.iterdir()):
        raise SystemExit(f"{work} holds files but no settings.json: not a run of this benchmark's version; "
                         "give another --out or remove that folder")
    work.mkdir(parents=True, exist_ok=True)
    atomic_write_json(work / "settings.json", {k: getattr(a, k) for k in _SETTINGS})


def _seed(name: str, a: argparse.Namespace) -> int:
    """The seed of score ``name``: ``--seed`` for the estimators, the next ones for the stand-alone runs,
    the one after those for the supernet's second draw."""
    if name.startswith("standalone"):
        return a.seed + 1 + int(name.removeprefix("standalone"))
    if "@" in name:
        return a.seed + SEED_STEP * _split_seed(name)[1]
    return a.seed + 1 + a.standalone_seeds if name == "supernet_again" else a.seed


def supernet_dir(work: Path, schedule: str) -> Path:
    """Where the benchmark's supernet trained with ``schedule`` keeps its checkpoint (``supernet.ckpt``):
    the sandwich one in ``work`` itself, the progressive one in ``work/progressive``."""
    return work if schedule == "sandwich" else work / schedule


def _evaluator(name: str, a: argparse.Namespace, ckpt: Path) -> tuple[Any, int]:
    """The evaluator behind score ``name`` and the seed it runs with."""
    from nas.search.evaluate import SupernetEvaluator, TrainEvaluator, ZeroCostEvaluator

    if "@" in name:  # an estimator with a further seed
        return _evaluator(_split_seed(name)[0], a, ckpt)[0], _seed(name, a)

    batch = {} if a.batch_size is None else {"batch_size": a.batch_size}
    if name in ("supernet", "supernet_again"):
        return SupernetEvaluator(checkpoint=str(ckpt), device=a.device, **batch), _seed(name, a)
    if name == "progressive":
        return SupernetEvaluator(checkpoint=str(supernet_dir(ckpt.parent, "progressive") / ckpt.name), device=a.device, **batch), a.seed
    if name == "train":
        return TrainEvaluator(device=a.device, **batch), a.seed
    if name == "train_equal":
        return TrainEvaluator(epochs=equal_epochs(ckpt.parent, a), device=a.device, **batch), a.seed
    if name == "train_1epoch":  # the least training buys: the supernet's cost per trial in a search of many trials
        return TrainEvaluator(epochs=1, device=a.device, **batch), a.seed
    if name in ("naswot", "synflow"):
        return ZeroCostEvaluator(proxy=name, device=a.device), a.seed
    return TrainEvaluator(epochs=a.standalone_epochs, device=a.device, **batch), _seed(name, a)


def _cache_path(work: Path, name: str, a: argparse.Namespace) -> Path:
    """Where score ``name``'s values are kept; a stand-alone run's and a second draw's file are named by
    their seed."""
    stem = name
    if name.startswith("standalone"):
        stem = f"standalone_seed{_seed(name, a)}"
    elif name == "supernet_again":
        stem = f"supernet_seed{_seed(name, a)}"
    elif "@" in name:
        stem = f"{_split_seed(name)[0]}_seed{_seed(name, a)}"
    return work / "scores" / f"{stem}.json"


def _cache(work: Path, name: str, a: argparse.Namespace) -> dict[str, Any]:
    p = _cache_path(work, name, a)
    return json.loads(p.read_text()) if p.is_file() else {}


def score_archs(label: str, ev: Any, seed: int, path: Path, archs: list[Any], data: Any) -> dict[str, Any]:
    """Score with ``ev`` every architecture the cache at ``path`` lacks, saving after each (an interruption
    loses one); the cache, by architecture digest."""
    from nas.data import adapt_arch

    cache = json.loads(path.read_text()) if path.is_file() else {}
    for i, arch in enumerate(archs):
        if arch.digest() in cache:
            continue
        r = ev.evaluate(adapt_arch(arch, data), data, seed=seed)
        cache[arch.digest()] = {"score": r.score, "seconds": r.seconds}
        atomic_write_json(path, cache)
        print(f"{label} [{i + 1}/{len(archs)}] {r.score:.4g} ({r.seconds:.1f} s)", flush=True)
    return cache


def equal_epochs(work: Path, a: argparse.Namespace) -> int:
    """The epochs of ``train_equal``: ``evaluator=train``'s epochs scaled by the sandwich supernet's cost
    (its training and its scoring of every architecture) over ``train``'s (its scoring of every
    architecture), both measured in this run; at least 1.  Kept in ``equal_compute.json`` once computed,
    so every process of a split run trains the same epochs."""
    from nas.search.evaluate import TrainEvaluator
    from nas.supernet.checkpoint import read_checkpoint

    path = work / "equal_compute.json"
    if path.is_file():
        return int(json.loads(path.read_text())["epochs"])
    sn, tr, ckpt = _cache(work, "supernet", a), _cache(work, "train", a), work / "supernet.ckpt"
    if len(sn) < a.archs or len(tr) < a.archs or not ckpt.is_file():
        raise SystemExit("train_equal needs the supernet and train scores of every architecture first (its epochs "
                         "are the supernet's cost over train's): compute those, then train_equal")
    sn_s = sum(h["seconds"] for h in read_checkpoint(ckpt)["history"]) + sum(v["seconds"] for v in sn.values())
    tr_s = sum(v["seconds"] for v in tr.values())
    base = TrainEvaluator().epochs
    epochs = max(1, round(base * sn_s / tr_s))
    atomic_write_json(path, {"epochs": epochs, "supernet_seconds": sn_s, "train_seconds": tr_s, "train_epochs": base})
    return epochs


def _missing(names: Any, work: Path, a: argparse.Namespace, archs: list[Any]) -> list[str]:
    """The scores of ``names`` whose cache lacks some of ``archs``."""
    digests = {x.digest() for x in archs}
    return [n for n in names if not digests <= _cache(work, n, a).keys()]


def parts(a: argparse.Namespace, work: Path, archs: list[Any]) -> dict[Part, list[str]]:
    """The missing scores of ``a.scores`` as ``--jobs`` parts, each with its scores: a supernet's training and
    scores, each stand-alone run or estimator seed, the zero-cost proxies together (``train_equal`` needs
    ``supernet`` and ``train``); a part's cost: its architecture-epochs, a supernet epoch as about six."""
    n = len(archs)
    groups: dict[str, list[str]] = {}
    for s in _missing(a.scores, work, a, archs):
        key = {"supernet_again": "supernet", "naswot": "zero_cost", "synflow": "zero_cost"}.get(_split_seed(s)[0], s)
        groups.setdefault(key, []).append(s)
    epochs = {"train": 3, "train_equal": 5, "train_1epoch": 1, "zero_cost": 0.1, "supernet": 6 * a.supernet_epochs / n,
              "progressive": 7 * a.supernet_epochs / n}
    out = {}
    for key, scores in groups.items():
        needs = tuple(k for k in ("supernet", "train") if k in groups) if key.startswith("train_equal") else ()
        cost = n * epochs.get(_split_seed(key)[0], a.standalone_epochs)
        out[Part(key, cost, needs)] = scores
    return out


def run_parts_of(a: argparse.Namespace, work: Path, archs: list[Any]) -> None:
    """Compute the missing scores of run ``a`` in ``a.jobs`` processes, each on a core of its own; the run's
    wall seconds, each part's, and how many scores it computed go to ``jobs.json`` (the report's ``jobs``)."""
    todo = parts(a, work, archs)
    cores = job_cores(a.jobs)
    argv = _options(a, "num_workers", "out")
    print(f"{len(todo)} parts on cores {', '.join(map(str, cores))} (their output: {work / 'logs'})", flush=True)
    t0, before = time.perf_counter(), sum(len(v) for v in todo.values())
    seconds = run_parts(list(todo), lambda part: [sys.executable, "-m", "benchmarks", "supernet", *argv, "--scores",
                                                  *todo[part]], cores, work / "logs")
    atomic_write_json(work / "jobs.json", {"cores": cores, "wall_s": time.perf_counter() - t0, "part_wall_s": seconds,
                                           "scores_computed": before, "scores_complete_before": len(a.scores) - before})
    print("wall seconds of each part: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()), flush=True)


def standalone_runs(work: Path, a: argparse.Namespace, archs: list[Any]) -> list[list[float]]:
    """The stand-alone accuracy of every architecture, one list per run; a run that lacks some is a
    one-line error."""
    runs = []
    for name in (n for n in score_names(a.standalone_seeds) if n.startswith("standalone")):
        cache = _cache(work, name, a)
        lack = sum(x.digest() not in cache for x in archs)
        if lack:
            raise SystemExit(f"{work}: the stand-alone run {name} lacks {lack} of {len(archs)} architectures; "
                             "finish python -m benchmarks supernet first")
        runs.append([cache[x.digest()]["score"] for x in archs])
    return runs


def report(a: argparse.Namespace, data: Any, archs: list[Any], ms: list[float], work: Path) -> dict[str, Any]:
    """The JSON record and plot of a complete run, and its table printed."""
    from nas.supernet.checkpoint import read_checkpoint

    names = score_names(a.standalone_seeds, a.estimator_seeds)
    caches = {n: _cache(work, n, a) for n in names}
    stand = [n for n in names if n.startswith("standalone")]
    runs = standalone_runs(work, a, archs)
    ref = [float(v) for v in np.mean(runs, axis=0)]
    rows = [{"arch": arch.label(), "digest": arch.digest(), "predicted_ms": lat, "reference": r,
             "scores": {n: caches[n][arch.digest()] for n in names}} for arch, lat, r in zip(archs, ms, ref)]
    taus = {m: _tau(ref, [r["scores"][m]["score"] for r in rows]) for m in METHODS}
    taus_one = {m: _tau(runs[0], [r["scores"][m]["score"] for r in rows]) for m in METHODS}
    seeded = {m: seed_names(m, a.estimator_seeds) for m in SEEDED}
    by_seed = {m: {"seeds": [_seed(n, a) for n in ns], "taus": [_tau(ref, [r["scores"][n]["score"] for r in rows])
                                                                for n in ns]} for m, ns in seeded.items()}
    agreement = reference_agreement(runs)
    ceiling = reference_ceiling(runs)
    sn_again = _tau([r["scores"]["supernet"]["score"] for r in rows], [r["scores"]["supernet_again"]["score"] for r in rows])
    by_latency = _tau(ref, ms)  # the baseline any estimator must beat: slower networks are more accurate
    secs = {m: float(np.mean([r["scores"][m]["seconds"] for r in rows])) for m in names}
    history = read_checkpoint(work / "supernet.ckpt")["history"]
    sn_train_s = float(sum(h["seconds"] for h in history))
    pg_history = read_checkpoint(supernet_dir(work, "progressive") / "supernet.ckpt")["history"]
    pg_train_s = float(sum(h["seconds"] for h in pg_history))
    # what each score cost per architecture, a supernet's training shared over the architectures
    cost = {**secs, "supernet": secs["supernet"] + sn_train_s / len(rows),
            "progressive": secs["progressive"] + pg_train_s / len(rows)}
    # the trials of a search over which the supernet's training, shared, makes a trial cost one epoch of training;
    # supernet and supernet_again are the same scoring timed twice: the lesser is the less disturbed by other load
    margin = secs["train_1epoch"] - min(secs["supernet"], secs["supernet_again"])
    trials_1epoch = sn_train_s / margin if margin > 0 else None
    spread = {"min": float(min(ref)), "max": float(max(ref)), "std": float(np.std(ref)),
              "run_difference_std": float(np.std(np.subtract(runs[0], runs[1])))}
    result = {
        "command": command(a),
        "data": data.describe(), "train_subset": a.train_samples, "resolution": a.resolution, "space": a.space,
        "target": a.target, "device": a.device, "batch_size": a.batch_size,
        "archs": len(rows), "supernet_epochs": a.supernet_epochs, "standalone_epochs": a.standalone_epochs,
        "standalone_seeds": [_seed(n, a) for n in stand], "estimator_seed": a.seed,
        "supernet_train_seconds": sn_train_s, "supernet_history": history,
        "progressive_train_seconds": pg_train_s, "progressive_history": pg_history,
        "train_equal": json.loads((work / "equal_compute.json").read_text()), "cost_per_arch_s": cost,
        "trials_at_1epoch_cost": trials_1epoch,
        "kendall_tau_vs_reference": taus, "kendall_tau_vs_one_run": taus_one, "kendall_tau_by_seed": by_seed,
        "reference_agreement": agreement,
        "reference_ceiling": ceiling, "supernet_against_itself": sn_again,
        "kendall_tau_predicted_latency_vs_reference": by_latency,
        "reference_accuracy": spread, "seconds_per_arch": secs, "rows": rows, "quick": a.quick,
        "jobs": json.loads((work / "jobs.json").read_text()) if (work / "jobs.json").is_file() else None,
    }
    name = "supernet_quick" if a.quick else "supernet"
    out = Path(a.out)
    atomic_write_json(out / f"{name}.json", result)
    plot_ranking(rows, {**taus, "latency": by_latency}, runs, ceiling["perfect_score_tau"], out / f"{name}.png",
                 METHODS, ACCURACY)
    print(f"\n{'method':<12} {'tau vs mean of ' + str(len(runs)):>16} {'tau vs run 1':>13} {'s / arch':>9}")
    for m in METHODS:
        print(f"{m:<12} {taus[m]:>16.3f} {taus_one[m]:>13.3f} {cost[m]:>9.2f}")
    if a.estimator_seeds > 1:
        for m, v in by_seed.items():
            print(f"{m:<12} over seeds {', '.join(map(str, v['seeds']))}: tau {' / '.join(f'{t:.3f}' for t in v['taus'])} "
                  f"(mean {np.mean(v['taus']):.3f})")
    print(f"{'standalone':<12} {'(reference)':>16} {'':>13} {np.mean([secs[n] for n in stand]):>9.2f}")
    print(f"{'latency':<12} {by_latency:>16.3f} {_tau(runs[0], ms):>13.3f} {'':>9}  (the predicted latency as the score)")
    print("s / arch: a supernet's includes its training shared over the architectures; train_equal trained "
          f"{result['train_equal']['epochs']} epochs")
    if trials_1epoch:
        print(f"a supernet trial costs as much as train_1epoch's in a search of {trials_1epoch:.0f} trials")
    print(f"the supernet against itself (another draw of BatchNorm-recalibration batches): tau {sn_again:.3f}")
    print(f"the reference against itself: tau between seeds {agreement['pairwise_mean']:.3f} (pairs "
          f"{agreement['pairwise_min']:.3f}-{agreement['pairwise_max']:.3f}), one seed against the mean of the others "
          f"{agreement['one_vs_mean_of_rest']:.3f}; reference accuracies {100 * spread['min']:.2f}-"
          f"{100 * spread['max']:.2f}% (std {100 * spread['std']:.2f} points; run 1 - run 2: std "
          f"{100 * spread['run_difference_std']:.2f} points)")
    print(ceiling_line(ceiling))
    print(f"supernet training: {sn_train_s:.0f} s once ({sn_train_s / max(1, len(rows)):.1f} s per arch over "
          f"{len(rows)} archs); progressive shrinking {pg_train_s:.0f} s\nwrote {out / (name + '.json')} and {out / (name + '.png')}")
    return result


def _options(a: argparse.Namespace, *more: str) -> list[str]:
    """The options that give run ``a`` again: its settings, seeds and ``more`` that differ from the defaults."""
    default = _args(["--quick"] if a.quick else [])
    keys = [k for k in (*_SETTINGS, "standalone_seeds", "estimator_seeds", *more) if getattr(a, k) != getattr(default, k)]
    return [*(["--quick"] if a.quick else []), *(x for k in keys for x in (f"--{k.replace('_', '-')}", str(getattr(a, k))))]


def command(a: argparse.Namespace) -> str:
    """The command line that reproduces run ``a`` (the options that differ from the defaults)."""
    return harness_command("supernet", _options(a), cores=[0] if a.device == "cpu" else None)


def compute_here(a: argparse.Namespace, space: Any, data: Any, archs: list[Any], work: Path) -> None:
    """Compute the scores of ``a.scores`` in this process, training a supernet first where one is needed."""
    from nas.supernet.settings import SupernetSettings
    from nas.supernet.train import train_supernet

    for schedule, names in (("sandwich", ("supernet", "supernet_again")), ("progressive", ("progressive",))):
        if any(n in a.scores and len(_cache(work, n, a)) < len(archs) for n in names):
            t0 = time.perf_counter()
            batch = {} if a.batch_size is None else {"batch_size": a.batch_size}
            settings = SupernetSettings(epochs=a.supernet_epochs, seed=a.seed, device=a.device, schedule=schedule, **batch)
            rec = train_supernet(space, data, settings, supernet_dir(work, schedule))
            print(f"supernet ({schedule}): {a.supernet_epochs} epochs, {sum(h['seconds'] for h in rec['history']):.0f} s "
                  f"of training (this run {time.perf_counter() - t0:.0f} s)", flush=True)
    for name in a.scores:
        ev, seed = _evaluator(name, a, work / "supernet.ckpt")
        score_archs(name, ev, seed, _cache_path(work, name, a), archs, data)


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    import torch

    a = _args(argv)
    usable_device(a.device)
    if a.device == "cpu":
        torch.set_num_threads(1)
    work = Path(a.out) / "bench_supernet" / ("quick" if a.quick else "full")
    space = load_bench_space(a.space)
    check_work(work, a)
    data = load_subset(a)
    archs, ms = _pick_archs(space, data, a.archs, a.seed, a.target, a.pick, keep=work)
    if a.jobs > 1:
        run_parts_of(a, work, archs)
    else:
        compute_here(a, space, data, archs, work)
    missing = _missing(score_names(a.standalone_seeds, a.estimator_seeds), work, a, archs)
    if missing:
        print(f"done: {', '.join(a.scores)}; still missing: {', '.join(missing)} (the run computing them writes "
              "the report; or run again without --scores)")
        return None
    return report(a, data, archs, ms, work)


if __name__ == "__main__":
    main()
