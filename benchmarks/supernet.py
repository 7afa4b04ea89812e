"""Benchmark the supernet and the other accuracy estimators as ranking signals where a search decides.

Does an estimator rank networks of one latency better than their size does?  By default on
Fashion-MNIST at 28 px (a training subset of the Debian package's files) and the ``tiny`` space, on this
machine's CPU (``--space``, ``--data`` / ``--data-root``, ``--resolution``, ``--device``, ``--target``
run it elsewhere; docs/supernet.md has the GPU command):

1. draw ``--archs`` (60) distinct architectures uniformly from the space (``--pick``: ``spread`` and
   ``graded`` take evenly spaced latency quantiles of 2000 random or ``graded_arch`` ones instead),
   predict their latency on ``--target`` and cut them into ``--bands`` (3) bands of equal count by it;
2. score each on the validation split by the supernet's inherited weights (``supernet``; ``progressive``:
   a supernet trained by progressive shrinking), short training (``train``; ``train_equal`` at the
   supernet's measured compute; ``train_1epoch``) and the zero-cost proxies (``naswot``, ``synflow``),
   each with ``--estimator-seeds`` (5) seeds (a supernet's: its training seed, ``--seed`` + 100 k),
   beside the trivial scores: MACs, parameters, predicted latency;
3. train each stand-alone (``--standalone-epochs``, ``--standalone-seeds`` runs, seeds after ``--seed``)
   and score it on the test split, which no estimator saw: the reference is the mean of the runs;
4. report each score's Kendall tau against the reference within each band and their mean (the
   headline), partialled on MACs, and over all architectures: the mean over its seeds, with a paired
   bootstrap 95% CI (``--draws`` resamples of the architectures within the bands), and its difference
   from MACs' with its own CI; the ceiling the reference's noise leaves, and each score's cost.

    python -m benchmarks supernet --jobs 2               # hours: it prints its estimate first
    taskset -c 0 python -m benchmarks supernet --quick   # a few minutes: checks the pipeline only

The estimate (CPU hours) counts every image at ``--images-per-s`` training images per second on a core
(640: a ``tiny`` network at 28 px on an AMD EPYC Zen 4 core), a scored image a third of one, a supernet
epoch six stand-alone epochs (progressive shrinking: seven).  The scores are independent: ``--jobs N``
runs the parts (a supernet's training with its scores, each stand-alone run, each estimator seed) as
processes on N cores of their own, each part's output in ``<out>/bench_supernet/<run>/logs/``; or split
by hand (or across machines sharing the folder), each part computing only its scores:

    taskset -c 0 python -m benchmarks supernet --scores supernet train naswot synflow standalone2 &
    taskset -c 1 python -m benchmarks supernet --scores standalone0 standalone1

Whichever finds every score complete writes ``<out>/supernet_ranking.json``, ``.md`` (tables), ``.png``
(default out: benchmarks/results/).  While parts still run, ``--report`` computes nothing and writes an interim
report of the scores complete so far (``supernet_ranking_interim.*``: the complete reference needed, each
estimator with its seeds complete so far, those missing named).  Every supernet and score is cached under
``<out>/bench_supernet/``: an interrupted run resumes; a cache of other settings is refused, each difference named.
The caches are not committed: where they are lost (a fresh clone), ``--restore <report.json>`` (a complete or an
interim report of this run) puts back every score it holds (values and seconds), the supernets' training seconds and
``train_equal``'s epochs, so the run continues from there; its report names what it restored, and from where.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks._inputs import add_subset_args, load_bench_space, load_subset, on_test_split
from benchmarks._jobs import Part, job_cores, run_parts
from benchmarks._ranking import PICKS, arch_baselines, pick_archs
from benchmarks._supernet_report import RankingRun, report
from benchmarks.harness import RESULTS, usable_device
from benchmarks.harness import command as harness_command
from nas._io import atomic_write_json
from nas.arch import Arch
from nas.data import adapt_arch
from nas.search.evaluate import SupernetEvaluator, TrainEvaluator, ZeroCostEvaluator
from nas.supernet.checkpoint import read_checkpoint
from nas.supernet.settings import SupernetSettings
from nas.supernet.train import train_supernet

METHODS = ("supernet", "progressive", "train", "train_equal", "train_1epoch", "naswot", "synflow")
ACCURACY = ("supernet", "progressive", "train", "train_equal", "train_1epoch")  # scores that are accuracies (the rest: proxies)
SUPERNETS = {"supernet": "sandwich", "progressive": "progressive"}  # the estimators that train a supernet, its schedule
SEED_STEP = 100  # estimator seed k is --seed + 100 k: clear of the stand-alone runs' seeds and supernet_again's
MIN_BAND = 15  # architectures a latency band needs for its tau to mean something (--quick excepted)
IMAGES_PER_S = 640.0  # the cost estimate's rate: a tiny network's training images/s at 28 px on one AMD EPYC Zen 4 core
SCORED = 1 / 3  # a scored image costs about a third of a trained one (a forward pass, no backward)
SUPERNET_EPOCH = {"supernet": 6.0, "progressive": 7.0}  # a supernet epoch in stand-alone epochs (several subnets a step)
# what a cache was computed with: a re-run with other values of these must not reuse it
_SETTINGS = ("data", "data_root", "train_samples", "val_samples", "test_samples", "resolution", "space", "target",
             "device", "batch_size", "archs", "supernet_epochs", "standalone_epochs", "seed", "pick", "reference_split")
# the value of a setting a cache recorded before the benchmark had it
_ADDED = {"data_root": None, "space": "tiny", "target": "cpu", "device": "cpu", "batch_size": None, "pick": "spread",
          "test_samples": 0, "reference_split": "val"}
_RENAMED = {("pick", "random"): "spread"}  # a value a cache recorded under a name it no longer has
# --quick: tiny settings that check the pipeline in minutes (its figures mean nothing)
QUICK = {"train_samples": 256, "val_samples": 128, "test_samples": 256, "archs": 9, "supernet_epochs": 1,
         "standalone_epochs": 1, "standalone_seeds": 2, "estimator_seeds": 2, "draws": 200}


@dataclass(frozen=True)
class SplitSizes:
    """The images a run trains on, its estimators score on (validation) and its reference runs score on (test)."""

    train: int
    val: int
    test: int


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
    every estimator again with each further seed (``supernet@1``, ``train@1``, ``naswot@2`` ...)."""
    further = [seed_names(m, estimator_seeds)[1:] for m in METHODS]
    return (*METHODS, "supernet_again", *(f"standalone{k}" for k in range(seeds)), *(n for ns in zip(*further) for n in ns))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The benchmark's options (``--quick``: tiny settings), each bad value a one-line error."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    add_subset_args(p)
    p.set_defaults(train_samples=10000, val_samples=0, resolution=28, reference_split="test")
    p.add_argument("--test-samples", type=int, default=0, help="test images a reference run is scored on (0: all)")
    p.add_argument("--space", default="tiny", help="the search space (a shipped name or a YAML file)")
    p.add_argument("--target", default="cpu", help="whose predicted latency bands the architectures")
    p.add_argument("--device", default="cpu", help="where everything trains and scores (cpu, cuda, cuda:<i>)")
    p.add_argument("--batch-size", type=int, help="training batch of the supernet and every training score "
                   "(default: each one's own, 64)")
    p.add_argument("--archs", type=int, default=60, help="architectures ranked")
    p.add_argument("--pick", choices=PICKS, default="uniform",
                   help="uniform: distinct architectures drawn uniformly from the space; spread: those at evenly "
                        "spaced latency quantiles of 2000 random ones; graded: the same of 2000 graded ones (every "
                        "choice near one shared fraction of its range, narrowest to widest: ranks them by size)")
    p.add_argument("--bands", type=int, default=3, help=f"equal-latency bands (each of {MIN_BAND} architectures or more)")
    p.add_argument("--draws", type=int, default=2000, help="bootstrap resamples of every confidence interval")
    p.add_argument("--supernet-epochs", type=int, default=20)
    p.add_argument("--standalone-epochs", type=int, default=8, help="the stand-alone (reference) training")
    p.add_argument("--standalone-seeds", type=int, default=3, help="stand-alone runs per architecture (>= 2)")
    p.add_argument("--estimator-seeds", type=int, default=5,
                   help=f"seeds of every estimator (a supernet's: its training seed; seed k is --seed + {SEED_STEP} k)")
    p.add_argument("--images-per-s", type=float, default=IMAGES_PER_S,
                   help="training images per second on one core, for the cost estimate (default: a tiny network at "
                        "28 px on an AMD EPYC Zen 4 core)")
    p.add_argument("--scores", nargs="+", metavar="NAME",
                   help="compute only these scores (supernet, train, naswot, synflow, supernet_again, standalone<k>, "
                        "supernet@<k>, train@<k> ...)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1, help="processes the scores run in, each on a core of its own "
                   "(the first cores this process may use)")
    p.add_argument("--report", action="store_true", help="compute nothing: write the report of the scores complete "
                   "so far (an interim one, supernet_ranking_interim.*, while some are missing)")
    p.add_argument("--restore", metavar="REPORT", help="first put back the caches this run lost from its report (a "
                   "complete or interim supernet_ranking*.json of the same settings and architectures), then go on")
    p.add_argument("--quick", action="store_true", help="tiny settings: checks the pipeline, figures meaningless")
    p.add_argument("--out", default=str(RESULTS))
    argv = sys.argv[1:] if argv is None else argv
    if "--quick" in argv:  # its settings as defaults: an option given still wins
        p.set_defaults(**QUICK)
    a = p.parse_args(argv)
    for k in ("batch_size", "test_samples", "archs", "bands", "draws"):
        v = getattr(a, k)
        if v is not None and (v < 1 if k != "test_samples" else v < 0):
            p.error(f"--{k.replace('_', '-')} must be a {'non-negative' if k == 'test_samples' else 'positive'} "
                    f"integer, got {v}")
    least = 2 if a.quick else MIN_BAND
    if a.archs // a.bands < least:
        p.error(f"--archs {a.archs} in --bands {a.bands} leaves bands of {a.archs // a.bands} architectures; a band "
                f"needs at least {least}: give --archs {least * a.bands} or more, or fewer --bands")
    if a.standalone_seeds < 2:
        p.error("--standalone-seeds must be at least 2: the agreement of the runs is what bounds the ranking")
    if a.estimator_seeds < 1:
        p.error("--estimator-seeds must be at least 1")
    if a.images_per_s <= 0:
        p.error(f"--images-per-s must be positive, got {a.images_per_s}")
    if a.jobs < 1:
        p.error(f"--jobs must be at least 1, got {a.jobs}")
    if a.jobs > 1 and a.device != "cpu":
        p.error(f"--jobs runs the parts on CPU cores; on --device {a.device} give --jobs 1")
    if a.report and (a.scores or a.jobs > 1):
        p.error("--report computes nothing: give it without --scores and --jobs")
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
    got = {k: have.get(k, _ADDED.get(k)) for k in _SETTINGS}
    return {k: _RENAMED.get((k, v), v) if isinstance(v, str) else v for k, v in got.items()}


def settings_differences(work: Path, a: argparse.Namespace) -> list[str] | None:
    """How the run cached in ``work`` was set otherwise than ``a`` (each difference named; [] when alike);
    None where ``work`` holds no run's settings."""
    have = recorded_settings(work)
    return None if have is None else setting_differences(have, a)


def setting_differences(have: dict[str, Any], a: argparse.Namespace) -> list[str]:
    """How the settings ``have`` differ from run ``a``'s, each difference named ([] when alike)."""
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
    """The seed of score ``name``: ``--seed`` (+ 100 k for seed k) for the estimators, the next ones for
    the stand-alone runs, the one after those for the supernet's second draw."""
    if name.startswith("standalone"):
        return a.seed + 1 + int(name.removeprefix("standalone"))
    if name == "supernet_again":
        return a.seed + 1 + a.standalone_seeds
    return a.seed + SEED_STEP * _split_seed(name)[1]


def supernet_of(name: str) -> str | None:
    """The score whose supernet score ``name`` scores with (``supernet_again``: ``supernet``'s); None for
    an estimator without one."""
    name = "supernet" if name == "supernet_again" else name
    return name if _split_seed(name)[0] in SUPERNETS else None


def supernet_dir(work: Path, name: str, a: argparse.Namespace) -> Path:
    """Where the supernet of score ``name`` keeps its checkpoint (``supernet.ckpt``): the sandwich one of
    ``--seed`` in ``work`` itself, the progressive one in ``work/progressive``, a further seed's in
    ``work/<estimator>_seed<seed>``."""
    method, k = _split_seed(supernet_of(name) or name)
    if k == 0:
        return work if method == "supernet" else work / method
    return work / f"{method}_seed{_seed(name, a)}"


def _evaluator(name: str, a: argparse.Namespace, work: Path) -> tuple[Any, int]:
    """The evaluator behind score ``name`` and the seed it runs with."""
    batch = {} if a.batch_size is None else {"batch_size": a.batch_size}
    method, seed = _split_seed(name)[0], _seed(name, a)
    if supernet_of(name):
        return SupernetEvaluator(checkpoint=str(supernet_dir(work, name, a) / "supernet.ckpt"), device=a.device,
                                 **batch), seed
    if method == "train":
        return TrainEvaluator(device=a.device, **batch), seed
    if method == "train_equal":
        return TrainEvaluator(epochs=equal_epochs(work, a), device=a.device, **batch), seed
    if method == "train_1epoch":  # the least training buys: the supernet's cost per trial in a search of many trials
        return TrainEvaluator(epochs=1, device=a.device, **batch), seed
    if method in ("naswot", "synflow"):
        return ZeroCostEvaluator(proxy=method, device=a.device), seed
    return TrainEvaluator(epochs=a.standalone_epochs, device=a.device, **batch), seed


def equal_is_train(work: Path) -> bool:
    """Whether ``train_equal`` trains as many epochs as ``train`` (``equal_compute.json``, once computed): then
    each of its seeds is ``train``'s seed, the same training, whose scores it reads instead of computing them
    again."""
    path = work / "equal_compute.json"
    if not path.is_file():
        return False
    rec = json.loads(path.read_text())
    return int(rec["epochs"]) == int(rec["train_epochs"])


def cache_path(work: Path, name: str, a: argparse.Namespace) -> Path:
    """Where score ``name``'s values are kept; a stand-alone run's, a second draw's and a further seed's
    file are named by their seed; ``train_equal``'s are ``train``'s where it trains as many epochs
    (``equal_is_train``)."""
    if _split_seed(name)[0] == "train_equal" and equal_is_train(work):
        return cache_path(work, name.replace("train_equal", "train", 1), a)
    stem = name
    if name.startswith("standalone"):
        stem = f"standalone_seed{_seed(name, a)}"
    elif name == "supernet_again":
        stem = f"supernet_seed{_seed(name, a)}"
    elif "@" in name:
        stem = f"{_split_seed(name)[0]}_seed{_seed(name, a)}"
    return work / "scores" / f"{stem}.json"


def _cache(work: Path, name: str, a: argparse.Namespace) -> dict[str, Any]:
    p = cache_path(work, name, a)
    return json.loads(p.read_text()) if p.is_file() else {}


def score_archs(label: str, ev: Any, seed: int, path: Path, archs: list[Arch], data: Any) -> dict[str, Any]:
    """Score with ``ev`` every architecture the cache at ``path`` lacks, saving after each (an interruption
    loses one); the cache, by architecture digest."""
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
    architecture), both measured in this run (``--seed``'s); at least 1.  The training's cost is its median
    epoch times its epochs: every epoch does the same work, so an epoch slowed by other load (or by a
    resumed run's start) counts as a typical one.  Kept in ``equal_compute.json`` once computed, so every
    process of a split run, and every seed, trains the same epochs."""
    path = work / "equal_compute.json"
    if path.is_file():
        return int(json.loads(path.read_text())["epochs"])
    sn, tr, ckpt = _cache(work, "supernet", a), _cache(work, "train", a), work / "supernet.ckpt"
    if len(sn) < a.archs or len(tr) < a.archs or not ckpt.is_file():
        raise SystemExit("train_equal needs the supernet and train scores of every architecture first (its epochs "
                         "are the supernet's cost over train's): compute those, then train_equal")
    epoch_s = [h["seconds"] for h in read_checkpoint(ckpt)["history"]]
    training_s = statistics.median(epoch_s) * len(epoch_s)
    sn_s = training_s + sum(v["seconds"] for v in sn.values())
    tr_s = sum(v["seconds"] for v in tr.values())
    base = TrainEvaluator().epochs
    epochs = max(1, round(base * sn_s / tr_s))
    atomic_write_json(path, {"epochs": epochs, "supernet_seconds": sn_s, "train_seconds": tr_s, "train_epochs": base,
                             "supernet_training_s": training_s, "supernet_epoch_s": epoch_s})
    return epochs


def estimated_seconds(name: str, a: argparse.Namespace, n: int, sizes: SplitSizes, work: Path) -> float:
    """The CPU seconds score ``name`` is estimated to cost on ``n`` architectures: every image trained at
    ``--images-per-s``, a scored one a third of that, a supernet epoch ``SUPERNET_EPOCH`` stand-alone
    epochs (and its validation of the largest and the smallest subnet); ``train_equal`` at the epochs it
    was given, or, before those are known, at the estimated supernet's cost over ``train``'s."""
    method = _split_seed(name)[0]
    per_image = 1 / a.images_per_s
    if name.startswith("standalone"):
        return n * (a.standalone_epochs * sizes.train + SCORED * sizes.test) * per_image
    if supernet_of(name):
        scoring = n * SCORED * sizes.val * per_image
        if name == "supernet_again":
            return scoring
        return scoring + a.supernet_epochs * (SUPERNET_EPOCH[method] * sizes.train + 2 * SCORED * sizes.val) * per_image
    if method in ("naswot", "synflow"):
        return n * 64 * per_image  # one batch
    if method == "train_equal" and equal_is_train(work):
        return 0.0  # train's scores (equal_is_train): counted there
    epochs = {"train": TrainEvaluator().epochs, "train_1epoch": 1}.get(method)
    if epochs is None:  # train_equal
        path = work / "equal_compute.json"
        epochs = json.loads(path.read_text())["epochs"] if path.is_file() else max(1, round(
            TrainEvaluator().epochs * estimated_seconds("supernet", a, n, sizes, work)
            / estimated_seconds("train", a, n, sizes, work)))
    return n * (epochs * sizes.train + SCORED * sizes.val) * per_image


def _group(name: str) -> str:
    """The part a score runs in: a supernet's scores with its training, the zero-cost proxies together."""
    method = _split_seed(name)[0]
    return {"supernet_again": "supernet", "naswot": "zero_cost", "synflow": "zero_cost"}.get(method, name)


def cost_estimate(a: argparse.Namespace, work: Path, archs: list[Arch], sizes: SplitSizes) -> dict[str, Any]:
    """The run's estimated CPU hours (``estimated_seconds``): in all, still to compute, and by kind of part."""
    names = score_names(a.standalone_seeds, a.estimator_seeds)
    secs = {s: estimated_seconds(s, a, len(archs), sizes, work) for s in names}
    kinds: dict[str, float] = {}
    for s, v in secs.items():
        kind = "reference" if s.startswith("standalone") else _split_seed(_group(s))[0]
        kinds[kind] = kinds.get(kind, 0.0) + v / 3600
    missing = _missing(names, work, a, archs)
    measured, nominal = measured_seconds_left(a, work, archs, sizes, missing)
    return {"images_per_s": a.images_per_s, "cpu_hours": sum(secs.values()) / 3600,
            "still_to_compute_h": sum(secs[s] for s in missing) / 3600, "by_kind_h": kinds,
            "measured_still_to_compute_h": measured / 3600 if {_kind(s) for s in missing} - set(nominal) else None,
            "measured_lacks": nominal}


def _kind(name: str) -> str:
    """A score's kind: its estimator (``train@2``: ``train``), or ``standalone`` for every reference run."""
    return "standalone" if name.startswith("standalone") else _split_seed(name)[0]


def measured_seconds_left(a: argparse.Namespace, work: Path, archs: list[Arch], sizes: SplitSizes,
                          missing: list[str]) -> tuple[float, list[str]]:
    """The seconds the ``missing`` scores still need by the rates this run measured: an architecture of a
    score at the mean seconds of its kind's complete scores (another seed's; ``train_equal`` before any:
    ``train``'s scaled by their epochs), a supernet's epochs not yet trained at the median epoch of its
    schedule's checkpoints; the kinds with no measurement yet at the nominal rate (``estimated_seconds``),
    named (``train``, ``progressive`` ...) in the second value."""
    digests = [x.digest() for x in archs]
    done = [n for n in score_names(a.standalone_seeds, a.estimator_seeds) if n not in missing]

    def per_arch(k: str) -> float | None:
        caches = [_cache(work, n, a) for n in done if _kind(n) == k]
        rates = [statistics.fmean(c[d]["seconds"] for d in digests) for c in caches]
        return statistics.fmean(rates) if rates else None

    histories: dict[Path, list[dict[str, Any]]] = {}

    def history(name: str) -> list[dict[str, Any]]:
        path = supernet_dir(work, name, a) / "supernet.ckpt"
        if path not in histories:
            histories[path] = supernet_record(work, name, a)[0] or []
        return histories[path]

    def epoch_s(method: str) -> float | None:
        secs = [h["seconds"] for n in seed_names(method, a.estimator_seeds) for h in history(n)]
        return statistics.median(secs) if secs else None

    rates = {k: per_arch(k) for k in {*map(_kind, missing), "train"}}  # each kind's caches read once
    left, nominal, equal = 0.0, [], work / "equal_compute.json"
    for name in missing:
        k = _kind(name)
        rate = rates[k]
        if rate is None and k == "train_equal" and equal.is_file() and (tr := rates["train"]) is not None:
            rec = json.loads(equal.read_text())
            rate = tr * int(rec["epochs"]) / int(rec["train_epochs"])
        todo = len(set(digests) - _cache(work, name, a).keys())
        train_left = 0.0
        if supernet_of(name) == name:
            epoch = epoch_s(_split_seed(name)[0])
            train_left = None if epoch is None else max(0, a.supernet_epochs - len(history(name))) * epoch
        if rate is None or train_left is None:
            nominal += [] if k in nominal else [k]
            left += estimated_seconds(name, a, len(archs), sizes, work) * todo / len(archs)
        else:
            left += todo * rate + train_left
    return left, nominal


def estimate_line(est: dict[str, Any], jobs: int) -> str:
    """``cost_estimate``'s result in a sentence (CPU hours; under one, minutes)."""
    def t(h: float) -> str:
        return f"{h:.1f} h" if h >= 1 else f"{60 * h:.1f} min"
    kinds = ", ".join(f"{k} {t(v)}" for k, v in est["by_kind_h"].items())
    wall = f"; about {t(est['still_to_compute_h'] / jobs)} of wall time on {jobs} cores" if jobs > 1 else ""
    line = (f"estimated cost: {est['cpu_hours']:.2f} CPU hours ({kinds}), {t(est['still_to_compute_h'])} still to "
            f"compute{wall}; at {est['images_per_s']:g} training images/s per core (--images-per-s), a scored image a "
            "third of one: an estimate, not a measurement")
    if est.get("measured_still_to_compute_h") is not None:
        lacks = est["measured_lacks"]
        line += (f"; by the seconds this run measured: {t(est['measured_still_to_compute_h'])} still to compute"
                 + (f" ({', '.join(lacks)} at the estimate: none measured yet)" if lacks else ""))
    return line


RESTORED = "restored.json"  # in a run's cache folder: what --restore put back, and from which report


def git_blob(data: bytes) -> str:
    """The id git gives a file of content ``data`` (``git hash-object``): the version of a committed report
    a run was restored from, found again with ``git log --find-object=<id>`` after the report is rewritten."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def restored(work: Path) -> dict[str, Any]:
    """What ``--restore`` put back into ``work`` (empty where nothing was)."""
    path = work / RESTORED
    return json.loads(path.read_text()) if path.is_file() else {}


def supernet_record(work: Path, name: str, a: argparse.Namespace) -> tuple[list[dict[str, Any]] | None, float | None]:
    """The training history of score ``name``'s own supernet and its training seconds: from its checkpoint, else
    from what ``--restore`` put back (a further seed's history is not in a report: its seconds only); (None,
    None) where neither has it."""
    path = supernet_dir(work, name, a) / "supernet.ckpt"
    if path.is_file():
        hist = read_checkpoint(path)["history"]
        return hist, float(sum(h["seconds"] for h in hist))
    rec = restored(work)
    return rec.get("histories", {}).get(name), rec.get("supernet_seconds", {}).get(name)


def restore(a: argparse.Namespace, work: Path, path: Path, space: Any, data: Any) -> list[str]:
    """Put back into ``work`` what the report at ``path`` holds of run ``a`` and the caches lack: the
    architectures (with the report's predicted latency, so the bands are the report's), every score's value and
    seconds by architecture, the supernets' training seconds (the first seed's history too) and
    ``train_equal``'s epochs; recorded in ``restored.json``.  Returns the scores restored.

    Raises:
        SystemExit: the file is not a report of this benchmark, its settings or architectures are not this run's,
            or a value it holds differs from one already cached (each a one-line error naming it).
    """
    try:
        raw = path.read_bytes()
        rec = json.loads(raw)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SystemExit(f"--restore {path}: cannot read it ({e})") from None
    if not isinstance(rec, dict) or not {"command", "rows", "seeds"} <= rec.keys():
        raise SystemExit(f"--restore {path}: not a report of this benchmark (it lacks command, rows or seeds)")
    words = shlex.split(rec["command"])
    if "supernet" not in words:
        raise SystemExit(f"--restore {path}: its command ({rec['command']}) is not this benchmark's")
    theirs = parse_args([w for w in words[words.index("supernet") + 1:] if w != "--report"])
    diffs = setting_differences(vars(theirs), a)
    if diffs:
        raise SystemExit(f"--restore {path}: a run with other settings ({'; '.join(diffs)})")
    rows = rec["rows"]
    drawn = {x.digest(): x for x in pick_archs(space, data, a.archs, a.seed, a.target, a.pick)[0]}
    if sorted(r["digest"] for r in rows) != sorted(drawn):
        raise SystemExit(f"--restore {path}: its architectures are not those this run draws (another version of "
                         "the space or of the draw)")
    kept = work / "archs.json"
    if kept.is_file() and [Arch.from_dict(x).digest() for x in json.loads(kept.read_text())["archs"]] != \
            [r["digest"] for r in rows]:
        raise SystemExit(f"--restore {path}: {kept} orders the architectures otherwise than the report")
    equal = work / "equal_compute.json"
    if rec.get("train_equal") and equal.is_file() and json.loads(equal.read_text())["epochs"] != \
            rec["train_equal"]["epochs"]:
        raise SystemExit(f"--restore {path}: train_equal trains {rec['train_equal']['epochs']} epochs there, "
                         f"{json.loads(equal.read_text())['epochs']} in {equal}: not the same run")
    if rec.get("train_equal") and not equal.is_file():  # first: where train_equal's scores are kept follows it
        atomic_write_json(equal, {k: v for k, v in rec["train_equal"].items() if k != "same_as_train"})
    names = [n for n in rec["seeds"] if all(n in r["scores"] for r in rows)]
    caches = {}
    for name in names:  # every value checked against the caches before any is written
        cache_file = cache_path(work, name, a)
        cache = json.loads(cache_file.read_text()) if cache_file.is_file() else {}
        for r in rows:
            v, old = r["scores"][name], cache.get(r["digest"])
            if old is not None and old["score"] != v["score"]:
                raise SystemExit(f"--restore {path}: {name} of {r['digest']} is {v['score']} there, {old['score']} in "
                                 f"{cache_file}: not the same run")
            cache.setdefault(r["digest"], {"score": v["score"], "seconds": v["seconds"]})
        caches[cache_file] = cache
    if not kept.is_file():
        atomic_write_json(kept, {"pick": a.pick, "archs": [drawn[r["digest"]].to_dict() for r in rows],
                                 "predicted_ms": [float(r["predicted_ms"]) for r in rows]})
    for cache_file, cache in caches.items():
        atomic_write_json(cache_file, cache)
    before = restored(work)
    histories = {n: rec.get(f"{n}_history") for n in SUPERNETS if rec.get(f"{n}_history")}
    atomic_write_json(work / RESTORED, {
        "reports": sorted({*before.get("reports", []), str(path)}), "scores": sorted({*before.get("scores", []), *names}),
        "git_blobs": before.get("git_blobs", {}) | {str(path): git_blob(raw)},
        "machine": rec.get("machine"), "supernet_seconds": before.get("supernet_seconds", {}) | rec.get(
            "supernet_train_seconds", {}), "histories": before.get("histories", {}) | histories})
    print(f"restored from {path}: {len(names)} scores of {len(rows)} architectures ({', '.join(names)})", flush=True)
    return names


def _missing(names: Any, work: Path, a: argparse.Namespace, archs: list[Arch]) -> list[str]:
    """The scores of ``names`` whose cache lacks some of ``archs``."""
    digests = {x.digest() for x in archs}
    return [n for n in names if not digests <= _cache(work, n, a).keys()]


def parts(a: argparse.Namespace, work: Path, archs: list[Arch], sizes: SplitSizes) -> dict[Part, list[str]]:
    """The missing scores of ``a.scores`` as ``--jobs`` parts, each with its scores: a supernet's training and
    scores, each stand-alone run or estimator seed, the zero-cost proxies together (``train_equal`` needs
    ``supernet`` and ``train``); a part's cost: its estimated seconds (``estimated_seconds``)."""
    groups: dict[str, list[str]] = {}
    same = equal_is_train(work)  # train_equal's scores are train's, computed by train's parts
    for s in _missing(a.scores, work, a, archs):
        if not (same and _split_seed(s)[0] == "train_equal"):
            groups.setdefault(_group(s), []).append(s)
    out = {}
    for key, scores in groups.items():
        needs = tuple(k for k in ("supernet", "train") if k in groups) if key.startswith("train_equal") else ()
        out[Part(key, sum(estimated_seconds(s, a, len(archs), sizes, work) for s in scores), needs)] = scores
    return out


def run_parts_of(a: argparse.Namespace, work: Path, archs: list[Arch], sizes: SplitSizes) -> None:
    """Compute the missing scores of run ``a`` in ``a.jobs`` processes, each on a core of its own; the run's
    wall seconds, each part's, and how many scores it computed go to ``jobs.json`` (the report's ``jobs``)."""
    todo = parts(a, work, archs, sizes)
    cores = job_cores(a.jobs)
    argv = _options(a, "num_workers", "out")
    print(f"{len(todo)} parts on cores {', '.join(map(str, cores))} (their output: {work / 'logs'})", flush=True)
    t0, before = time.perf_counter(), sum(len(v) for v in todo.values())
    seconds = run_parts(list(todo), lambda part: [sys.executable, "-m", "benchmarks", "supernet", *argv, "--scores",
                                                  *todo[part]], cores, work / "logs")
    atomic_write_json(work / "jobs.json", {"cores": cores, "wall_s": time.perf_counter() - t0, "part_wall_s": seconds,
                                           "scores_computed": before, "scores_complete_before": len(a.scores) - before})
    print("wall seconds of each part: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()), flush=True)


def standalone_runs(work: Path, a: argparse.Namespace, archs: list[Arch]) -> list[list[float]]:
    """The stand-alone (test) accuracy of every architecture, one list per run; a run that lacks some is a
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


def collect(a: argparse.Namespace, data: Any, sizes: SplitSizes, archs: list[Arch], ms: list[float],
            work: Path, *, so_far: bool = False) -> RankingRun:
    """What the report of the complete run ``a`` reads, from its caches; ``so_far``: of the scores complete so
    far (the reference must be: a one-line error names what it lacks), each estimator with the seeds complete,
    one without any left out, and what is missing recorded (``extra["interim"]``)."""
    names = score_names(a.standalone_seeds, a.estimator_seeds)
    missing = _missing(names, work, a, archs)
    standalone_runs(work, a, archs)  # the reference complete, or a one-line error naming what it lacks
    if missing and not so_far:
        raise SystemExit(f"{work}: the run is not complete (missing {', '.join(missing)}); finish it, or give "
                         "--report for an interim report of what is")
    names = tuple(n for n in names if n not in missing)
    caches = {n: _cache(work, n, a) for n in names}
    values = {n: [caches[n][x.digest()]["score"] for x in archs] for n in names}
    seconds = {n: [caches[n][x.digest()]["seconds"] for x in archs] for n in names}
    records = {n: supernet_record(work, n, a) for n in names if supernet_of(n) == n}
    lost = [n for n, (_, secs) in records.items() if secs is None]
    if lost:
        raise SystemExit(f"{work}: the supernet of {', '.join(lost)} has no checkpoint and no restored record "
                         "(--restore <its report>), or compute those scores again")
    histories = {n: hist for n, (hist, _) in records.items() if hist is not None}
    estimators = {m: seeds for m in METHODS
                  if (seeds := tuple(n for n in seed_names(m, a.estimator_seeds) if n in names))}
    setup = {"data": data.describe(), "train_subset": a.train_samples, "resolution": a.resolution, "space": a.space,
             "target": a.target, "device": a.device, "batch_size": a.batch_size, "pick": a.pick, "archs": len(archs),
             "supernet_epochs": a.supernet_epochs, "standalone_epochs": a.standalone_epochs,
             "estimators_scored_on": f"the validation split ({sizes.val} images)",
             "reference": f"the mean of {a.standalone_seeds} stand-alone runs, each scored on the test split "
                          f"({sizes.test} images), which no estimator saw", "quick": a.quick}
    equal = work / "equal_compute.json"
    extra = {"supernet_history": histories.get("supernet"), "progressive_history": histories.get("progressive"),
             "train_equal": ({**json.loads(equal.read_text()), "same_as_train": equal_is_train(work)}
                             if equal.is_file() else None),
             "estimated_cost": cost_estimate(a, work, archs, sizes),
             "jobs": json.loads((work / "jobs.json").read_text()) if (work / "jobs.json").is_file() else None}
    back = restored(work)
    if back:
        extra["restored"] = {"from": back["reports"], "git_blobs": back.get("git_blobs", {}), "measured_on": back["machine"],
                             "scores": [n for n in back["scores"] if n in names]}
    if so_far:
        extra["interim"] = {"complete": len(names), "of": len(names) + len(missing), "missing": missing}
    return RankingRun(command(a) + (" --report" if so_far else ""), setup,
                      [{"arch": x.label(), "digest": x.digest()} for x in archs], list(ms),
                      arch_baselines(archs, ms, data), estimators, ACCURACY, {n: _seed(n, a) for n in names}, values,
                      seconds, tuple(n for n in names if n.startswith("standalone")),
                      {n: float(secs) for n, (_, secs) in records.items()},
                      a.bands, a.draws, a.seed, extra)


def _options(a: argparse.Namespace, *more: str) -> list[str]:
    """The options that give run ``a`` again: its settings, seeds and ``more`` that differ from the defaults."""
    default = parse_args(["--quick"] if a.quick else [])
    keys = [k for k in (*_SETTINGS, "standalone_seeds", "estimator_seeds", "bands", "draws", "images_per_s", *more)
            if k != "reference_split" and getattr(a, k) != getattr(default, k)]
    return [*(["--quick"] if a.quick else []), *(x for k in keys for x in (f"--{k.replace('_', '-')}", str(getattr(a, k))))]


def command(a: argparse.Namespace) -> str:
    """The command line that reproduces run ``a`` (the options that differ from the defaults)."""
    return harness_command("supernet", _options(a), cores=[0] if a.device == "cpu" else None)


def compute_here(a: argparse.Namespace, space: Any, data: Any, reference_data: Any, archs: list[Arch],
                 work: Path) -> None:
    """Compute the scores of ``a.scores`` in this process (a stand-alone run's on ``reference_data``), training
    a supernet first where one is needed."""
    for name in a.scores:
        if _split_seed(name)[0] == "train_equal" and equal_is_train(work):
            print(f"{name}: as many epochs as train, the same training: its scores are "
                  f"{name.replace('train_equal', 'train', 1)}'s, computed there", flush=True)
            continue
        own = supernet_of(name)
        if own and _missing([name], work, a, archs):
            t0 = time.perf_counter()
            batch = {} if a.batch_size is None else {"batch_size": a.batch_size}
            settings = SupernetSettings(epochs=a.supernet_epochs, seed=_seed(own, a), device=a.device,
                                        schedule=SUPERNETS[_split_seed(own)[0]], **batch)
            rec = train_supernet(space, data, settings, supernet_dir(work, own, a))
            print(f"supernet of {own}: {a.supernet_epochs} epochs, {sum(h['seconds'] for h in rec['history']):.0f} s "
                  f"of training (this run {time.perf_counter() - t0:.0f} s)", flush=True)
        ev, seed = _evaluator(name, a, work)
        score_archs(name, ev, seed, cache_path(work, name, a), archs,
                    reference_data if name.startswith("standalone") else data)


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    a = parse_args(argv)
    usable_device(a.device)
    if a.device == "cpu":
        torch.set_num_threads(1)
    work = Path(a.out) / "bench_supernet" / ("quick" if a.quick else "full")
    space = load_bench_space(a.space)
    check_work(work, a)
    data = load_subset(a)
    reference_data = on_test_split(data, a.test_samples)
    sizes = SplitSizes(len(data.train), len(data.val), len(reference_data.val))
    if a.restore:
        restore(a, work, Path(a.restore), space, data)
    archs, ms = pick_archs(space, data, a.archs, a.seed, a.target, a.pick, keep=work)
    print(estimate_line(cost_estimate(a, work, archs, sizes), a.jobs), flush=True)
    if a.jobs > 1:
        run_parts_of(a, work, archs, sizes)
    elif not a.report:
        compute_here(a, space, data, reference_data, archs, work)
    missing = _missing(score_names(a.standalone_seeds, a.estimator_seeds), work, a, archs)
    name = "supernet_ranking_quick" if a.quick else "supernet_ranking"  # the former benchmark's supernet.json stays
    if missing and a.report:
        print(f"an interim report: {len(missing)} scores still missing ({', '.join(missing)})", flush=True)
        return report(collect(a, data, sizes, archs, ms, work, so_far=True), Path(a.out), f"{name}_interim")
    if missing:
        print(f"done: {', '.join(a.scores)}; still missing: {', '.join(missing)} (the run computing them writes "
              "the report; or run again without --scores; --report writes an interim one of what is complete)")
        return None
    return complete_report(collect(a, data, sizes, archs, ms, work), Path(a.out), name)


def complete_report(run: RankingRun, out: Path, name: str) -> dict[str, Any]:
    """The report of the complete run, written as ``<out>/<name>.*``; the interim report of the same run
    (``<name>_interim.*``, a snapshot of it in progress) is removed: the complete one replaces it."""
    result = report(run, out, name)
    stale = [p for p in out.glob(f"{name}_interim.*") if p.suffix in (".json", ".md", ".png")]
    for p in stale:
        p.unlink()
    if stale:
        print(f"removed the interim report ({', '.join(p.name for p in stale)}): the complete one replaces it")
    return result


if __name__ == "__main__":
    main()
