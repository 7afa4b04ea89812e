"""The hardware-aware search: an Optuna study over a search space, two objectives, budgets as constraints.

One trial:

1. the sampler picks the space's categorical parameters; ``SearchSpace.sample`` decodes an Arch;
2. the *deployed* network is that Arch with the dataset's classes and input channels at the target's
   deployment resolution: its latency is predicted (``LatencyModel.explain``: measured table or
   labelled estimate) and its params, MACs and peak activation memory counted (``nas.cost``);
3. the budgets become constraints (``trial.set_constraint``; relative excess, ``<= 0`` is
   feasible).  An architecture over budget is **never trained**: it is told with a placeholder
   score of 0 (samplers rank infeasible trials by their violation alone) and ``status=over_budget``;
4. an architecture already evaluated in this study (same ``Arch.digest()``, found in any worker's
   COMPLETE trials) is not evaluated again: its score is reused (``status=cached``);
5. otherwise the evaluator scores the Arch at the dataset's resolution (``status=evaluated``).

Objectives: maximise the score (validation accuracy, or a zero-cost proxy), minimise predicted
latency (ms).  Every trial keeps its deployed Arch (JSON), digest, latency provenance, costs,
status, worker (host:pid) and, when it failed, its error in its user attributes.

A trial whose evaluation raises (an exception, out of memory) is recorded FAIL with its error and
the search goes on.  Ctrl-C inside a trial records it FAIL with ``status=interrupted``; a trial
left RUNNING by a killed process on this host is marked FAIL (``status=stale``) at the next start.
Interrupted and stale trials do not count towards ``n_trials`` and are redone on resume.

``n_trials`` is the study's total: each worker runs trials until the study holds that many
(completed, failed with an error, or running in another worker), so re-running the same command
resumes an interrupted search and many workers (processes or machines, one storage) share one
budget; concurrent workers may overshoot it by at most one trial each.

Storage: a journal file in the run dir by default (append-only, safe under concurrent
processes, unlike SQLite), or any Optuna storage URL (``postgresql://``, ``mysql://``,
``sqlite:///``, ``redis://``) or a journal file path on a shared disk.  The study records the
settings that define it (space, target, data, evaluator, budgets); resuming it with different
ones is an error that names the differences.

Outputs (``write_outputs``): ``pareto.json``, ``trials.csv``, ``pareto.png``.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import logging
import math
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from nas._io import atomic_write_bytes, atomic_write_json, atomic_write_text
from nas.arch import Arch
from nas.cost import arch_cost
from nas.data import Dataset, adapt_arch
from nas.latency.base import LatencyModel
from nas.search.evaluate import Evaluator
from nas.space import SearchSpace

__all__ = [
    "Budgets",
    "NSGA2Settings",
    "RandomSettings",
    "SearchAborted",
    "SearchProblem",
    "SearchReport",
    "TPESettings",
    "TrialOutcome",
    "count_trials",
    "fail_stale_trials",
    "make_sampler",
    "make_storage",
    "open_study",
    "pareto_front",
    "plot_pareto",
    "run_search",
    "sampler_names",
    "sampler_settings_class",
    "trial_records",
    "write_outputs",
]

log = logging.getLogger(__name__)

STUDY_ATTR = "hwnas"  # study user attribute holding the settings that define the study
SCHEMA_VERSION = 1
OVER_BUDGET_SCORE = 0.0  # placeholder objective of an untrained, over-budget trial
STATUSES = ("running", "evaluated", "cached", "over_budget", "error", "interrupted", "stale")
WORKER = f"{socket.gethostname()}:{os.getpid()}"


class SearchAborted(RuntimeError):
    """Too many trials in a row failed: something is wrong beyond one architecture."""


# --------------------------------------------------------------------------------------------
# budgets


@dataclass(frozen=True)
class Budgets:
    """Latency (ms, predicted on the target) and peak activation memory (KiB) budgets; None: no limit."""

    latency_ms: float | None = None
    memory_kb: float | None = None

    def __post_init__(self) -> None:
        for name, v in (("latency_budget_ms", self.latency_ms), ("memory_budget_kb", self.memory_kb)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0
                                  or not math.isfinite(v)):
                raise ValueError(f"{name} must be a positive number or null (no budget), got {v!r}")

    def constraints(self, *, latency_ms: float, peak_bytes: int) -> dict[str, float]:
        """Relative excess over each budget (``<= 0`` feasible), as Optuna constraints."""
        out = {}
        if self.latency_ms is not None:
            out["latency"] = latency_ms / self.latency_ms - 1.0
        if self.memory_kb is not None:
            out["memory"] = peak_bytes / 1024.0 / self.memory_kb - 1.0
        return out

    def to_dict(self) -> dict[str, float | None]:
        return {"latency_ms": self.latency_ms, "memory_kb": self.memory_kb}


# --------------------------------------------------------------------------------------------
# samplers (a registry of settings dataclass + builder)


@dataclass(frozen=True)
class NSGA2Settings:
    """NSGA-II (constrained domination); categorical parameters use uniform crossover."""

    population_size: int = 12
    mutation_prob: float | None = None  # None: 1 / number of parameters
    crossover_prob: float = 0.9
    swapping_prob: float = 0.5


@dataclass(frozen=True)
class TPESettings:
    """Multi-objective TPE; ``multivariate`` models the parameters jointly."""

    n_startup_trials: int = 10
    multivariate: bool = True
    constant_liar: bool = True  # parallel workers avoid proposing what others are running
    n_ei_candidates: int = 24


@dataclass(frozen=True)
class RandomSettings:
    """Uniform random sampling: the baseline."""


_SAMPLERS: dict[str, tuple[type, Callable[..., optuna.samplers.BaseSampler]]] = {}


def register_sampler(name: str, settings: type) -> Callable:
    def deco(fn: Callable[..., optuna.samplers.BaseSampler]) -> Callable[..., optuna.samplers.BaseSampler]:
        if name in _SAMPLERS:
            raise ValueError(f"sampler {name!r} is already registered")
        _SAMPLERS[name] = (settings, fn)
        return fn

    return deco


@register_sampler("nsga2", NSGA2Settings)
def _nsga2(s: NSGA2Settings, seed: int) -> optuna.samplers.BaseSampler:
    if s.population_size < 2:
        raise ValueError(f"sampler.population_size must be >= 2, got {s.population_size}")
    for k in ("crossover_prob", "swapping_prob"):
        if not 0 <= getattr(s, k) <= 1:
            raise ValueError(f"sampler.{k} must be in [0, 1], got {getattr(s, k)}")
    if s.mutation_prob is not None and not 0 <= s.mutation_prob <= 1:
        raise ValueError(f"sampler.mutation_prob must be in [0, 1] or null, got {s.mutation_prob}")
    return optuna.samplers.NSGAIISampler(population_size=s.population_size, mutation_prob=s.mutation_prob,
                                         crossover_prob=s.crossover_prob, swapping_prob=s.swapping_prob, seed=seed)


@register_sampler("tpe", TPESettings)
def _tpe(s: TPESettings, seed: int) -> optuna.samplers.BaseSampler:
    if s.n_startup_trials < 0 or s.n_ei_candidates < 1:
        raise ValueError(f"sampler: n_startup_trials must be >= 0 and n_ei_candidates >= 1, got "
                         f"{s.n_startup_trials} and {s.n_ei_candidates}")
    import warnings

    with warnings.catch_warnings():  # multivariate / constant_liar are marked experimental in some versions
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(n_startup_trials=s.n_startup_trials, multivariate=s.multivariate,
                                          constant_liar=s.constant_liar, n_ei_candidates=s.n_ei_candidates,
                                          seed=seed)


@register_sampler("random", RandomSettings)
def _random(s: RandomSettings, seed: int) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=seed)


def sampler_names() -> list[str]:
    return sorted(_SAMPLERS)


def sampler_settings_class(name: str) -> type:
    if name not in _SAMPLERS:
        raise ValueError(f"sampler.name: unknown sampler {name!r}; valid samplers: {', '.join(sampler_names())}")
    return _SAMPLERS[name][0]


def make_sampler(cfg: dict[str, Any], *, seed: int) -> optuna.samplers.BaseSampler:
    """``{"name": "nsga2", "population_size": 16}`` -> a seeded Optuna sampler."""
    d = dict(cfg)
    name = d.pop("name", None)
    cls = sampler_settings_class(name)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise ValueError(f"sampler {name!r}: unknown setting(s) {unknown}; valid settings: {sorted(names)}")
    return _SAMPLERS[name][1](cls(**d), seed)


# --------------------------------------------------------------------------------------------
# storage and study


def make_storage(spec: str | None, *, run_dir: str | Path) -> tuple[optuna.storages.BaseStorage, str]:
    """The Optuna storage ``spec`` names, and a description for the user.

    ``None``: a journal file ``<run_dir>/study.journal``.  A URL: ``redis://`` -> journal on Redis;
    ``postgresql://``, ``mysql://``, ``sqlite:///`` ... -> RDB storage (with a heartbeat, so a dead
    worker's trial is failed and redone).  Anything else is a journal file path (on a shared disk
    for many machines).
    """
    from optuna.storages import JournalStorage, RDBStorage
    from optuna.storages.journal import JournalFileBackend, JournalRedisBackend

    if not spec:
        path = Path(run_dir) / "study.journal"
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path))), str(path)
    if "://" in spec:
        if spec.startswith("redis"):
            return JournalStorage(JournalRedisBackend(spec)), spec
        if spec.startswith("sqlite"):
            log.warning("SQLite storage locks under parallel workers; prefer the default journal file or a "
                        "PostgreSQL / MySQL URL for more than one worker")
        import warnings

        try:
            with warnings.catch_warnings():  # the heartbeat is marked experimental in Optuna 5.0
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return RDBStorage(spec, heartbeat_interval=60, grace_period=180), spec
        except ImportError as e:
            raise ValueError(f"storage={spec!r} needs a database driver that is not installed: {e}") from None
    p = Path(spec).expanduser()
    if p.suffix in (".db", ".sqlite", ".sqlite3"):
        raise ValueError(f"storage={spec!r} looks like a SQLite file: write sqlite:///{spec} for SQLite, or use a "
                         f"journal file (storage=<path>.journal), which is safe under parallel workers")
    if p.is_dir():
        raise ValueError(f"storage={spec!r} is a folder; give a journal file path (e.g. {p / 'study.journal'}) "
                         f"or a storage URL")
    p.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(p))), str(p)


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def open_study(
    *,
    storage: optuna.storages.BaseStorage,
    study_name: str,
    sampler: optuna.samplers.BaseSampler,
    record: dict[str, Any],
) -> optuna.Study:
    """Create the study, or load it and check it was made with the same ``record`` (except its seed)."""
    if not study_name:
        raise ValueError("study_name must be a non-empty string")
    study = optuna.create_study(storage=storage, study_name=study_name, sampler=sampler,
                                directions=["maximize", "minimize"], load_if_exists=True)
    if len(study.directions) != 2 or study.directions[0] != optuna.study.StudyDirection.MAXIMIZE:
        raise ValueError(f"study {study_name!r} exists in the storage but is not an hwnas search (directions "
                         f"{[d.name for d in study.directions]}); pick another study_name")
    have = study.user_attrs.get(STUDY_ATTR)
    if have is None:
        study.set_user_attr(STUDY_ATTR, record)
        import warnings

        with warnings.catch_warnings():  # experimental in Optuna 5.0, stable enough for labels
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(list(record["objectives"]))
        return study
    a = {k: v for k, v in _flatten(have).items() if not k.startswith("train_seed")}
    b = {k: v for k, v in _flatten(json.loads(json.dumps(record))).items() if not k.startswith("train_seed")}
    diffs = [f"{k}: {a.get(k, '<absent>')!r} in the study, {b.get(k, '<absent>')!r} now"
             for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    if diffs:
        shown = "; ".join(diffs[:8]) + (f"; and {len(diffs) - 8} more" if len(diffs) > 8 else "")
        raise ValueError(f"study {study_name!r} was created with different settings ({shown}). Resume it with the "
                         f"same settings, or start a new study: study_name=<new name> (or a new out= folder)")
    return study


# --------------------------------------------------------------------------------------------
# the objective


@dataclass(frozen=True)
class TrialOutcome:
    """What one trial did (reported to the progress callback)."""

    number: int
    status: str
    score: float | None
    latency_ms: float | None
    feasible: bool | None
    seconds: float
    error: str | None = None
    cached_from: int | None = None


def _space_digest(space: SearchSpace) -> str:
    try:
        from omegaconf import OmegaConf

        data: Any = OmegaConf.to_container(OmegaConf.load(space.source), resolve=True)
    except Exception:  # not a file (built in code): the parameter encoding is what we have
        data = {k: list(v) for k, v in space.param_choices().items()}
    return hashlib.sha1(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


class SearchProblem:
    """The objective: a trial -> (score, predicted latency ms), with budgets as constraints and a cache.

    ``deploy_resolution``: the target's deployment resolution (latency, costs); the evaluator sees
    the Arch at the dataset's resolution.  ``train_seed`` seeds every evaluation (combined with the
    Arch's digest, so a given Arch gets the same score in any worker and in any order).
    """

    def __init__(
        self,
        *,
        space: SearchSpace,
        data: Dataset,
        evaluator: Evaluator,
        latency: LatencyModel,
        target: dict[str, Any],
        budgets: Budgets,
        train_seed: int,
        deploy_resolution: int | None = None,
    ) -> None:
        self.space, self.data, self.evaluator, self.latency = space, data, evaluator, latency
        self.target, self.budgets, self.train_seed = target, budgets, int(train_seed)
        self.deploy_resolution = int(deploy_resolution or target.get("resolution") or space.resolution)
        self.bytes_per_act = 1 if target.get("precision") == "int8" else 2 if target.get("precision") == "fp16" else 4
        self._cache: dict[str, tuple[int, float, dict[str, Any]]] = {}
        self.last: TrialOutcome | None = None
        self.evaluations = 0  # evaluator calls made by this process

    # -- the networks -----------------------------------------------------------------------
    def deployed(self, arch: Arch) -> Arch:
        """The network as deployed: the data's classes and channels, at the deployment resolution."""
        return adapt_arch(arch, self.data, resolution=self.deploy_resolution)

    def trained(self, arch: Arch) -> Arch:
        """The network as evaluated: at the dataset's resolution."""
        return adapt_arch(arch, self.data)

    def record(self) -> dict[str, Any]:
        """The settings that define the study (checked when a study is resumed)."""
        data = {k: v for k, v in self.data.settings.to_dict().items() if k not in ("root", "download")}
        ev = {k: v for k, v in self.evaluator.settings().items() if k != "device"}
        return {
            "version": SCHEMA_VERSION,
            "search_space": {"name": self.space.name, "digest": _space_digest(self.space)},
            "target": self.target,
            "latency_source": self.latency.source,
            "deploy_resolution": self.deploy_resolution,
            "data": data,
            "evaluator": ev,
            "budgets": self.budgets.to_dict(),
            "objectives": [self.evaluator.metric, "latency_ms"],
            "train_seed": self.train_seed,
        }

    def eval_seed(self, digest: str) -> int:
        return (self.train_seed * 1_000_003 + int(digest[:8], 16)) % (2**31 - 1)

    # -- the cache --------------------------------------------------------------------------
    def _lookup(self, study: optuna.Study, digest: str) -> tuple[int, float, dict[str, Any]] | None:
        hit = self._cache.get(digest)
        if hit is not None:
            return hit
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            ua = t.user_attrs
            d = ua.get("digest")
            if d and ua.get("status") in ("evaluated", "cached") and d not in self._cache:
                src = ua.get("cached_from", t.number)
                self._cache[d] = (int(src), float(t.values[0]), dict(ua.get("metrics") or {}))
        return self._cache.get(digest)

    # -- one trial --------------------------------------------------------------------------
    def __call__(self, trial: optuna.Trial) -> tuple[float, float]:
        t0 = time.perf_counter()
        trial.set_user_attr("worker", WORKER)
        trial.set_user_attr("status", "running")
        self.last = TrialOutcome(trial.number, "running", None, None, None, 0.0)
        ms = feasible = None
        try:
            arch = self.space.sample(trial)
            dep = self.deployed(arch)
            digest = dep.digest()
            pred = self.latency.explain(dep)
            ms = float(pred.ms)
            cost = arch_cost(dep, bytes_per_act=self.bytes_per_act)
            trial.set_user_attr("arch", dep.to_dict())
            trial.set_user_attr("digest", digest)
            trial.set_user_attr("latency", pred.to_dict())
            trial.set_user_attr("cost", {"params": cost.params, "macs": cost.macs,
                                         "peak_activation_bytes": cost.peak_activation_bytes})
            cons = self.budgets.constraints(latency_ms=ms, peak_bytes=cost.peak_activation_bytes)
            for k, v in cons.items():
                trial.set_constraint(k, v)
            feasible = all(v <= 0 for v in cons.values())
            if not feasible:
                return self._finish(trial, t0, "over_budget", OVER_BUDGET_SCORE, ms, False)
            hit = self._lookup(trial.study, digest)
            if hit is not None:
                src, score, metrics = hit
                trial.set_user_attr("cached_from", src)
                trial.set_user_attr("metrics", metrics)
                return self._finish(trial, t0, "cached", score, ms, True, cached_from=src)
            self.evaluations += 1
            res = self.evaluator.evaluate(self.trained(arch), self.data, seed=self.eval_seed(digest))
            if not math.isfinite(res.score):
                raise ValueError(f"the evaluator returned a non-finite score {res.score}")
            trial.set_user_attr("metrics", {**res.metrics, "seconds": res.seconds})
            self._cache[digest] = (trial.number, float(res.score), {**res.metrics, "seconds": res.seconds})
            return self._finish(trial, t0, "evaluated", float(res.score), ms, True)
        except KeyboardInterrupt:
            self._set_failed(trial, t0, "interrupted", "interrupted (KeyboardInterrupt)", ms, feasible)
            raise
        except Exception as e:
            msg = f"{type(e).__name__}: {e}"
            self._set_failed(trial, t0, "error", msg, ms, feasible)
            _free_accelerator_memory()
            raise

    def _finish(self, trial: optuna.Trial, t0: float, status: str, score: float, ms: float, feasible: bool,
                cached_from: int | None = None) -> tuple[float, float]:
        trial.set_user_attr("status", status)
        secs = time.perf_counter() - t0
        self.last = TrialOutcome(trial.number, status, None if status == "over_budget" else score, ms, feasible,
                                 secs, cached_from=cached_from)
        return score, ms

    def _set_failed(self, trial: optuna.Trial, t0: float, status: str, msg: str, ms: float | None,
                    feasible: bool | None) -> None:
        try:
            trial.set_user_attr("status", status)
            trial.set_user_attr("error", msg[:2000])
        except Exception:  # the storage itself failed: nothing more to record
            log.debug("could not record the failure of trial %d", trial.number, exc_info=True)
        self.last = TrialOutcome(trial.number, status, None, ms, feasible, time.perf_counter() - t0, error=msg)


def _free_accelerator_memory() -> None:
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # never let cleanup hide the trial's own error
        pass


# --------------------------------------------------------------------------------------------
# running


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fail_stale_trials(study: optuna.Study, storage: optuna.storages.BaseStorage) -> list[int]:
    """Mark FAIL (``status=stale``) the RUNNING trials of dead processes on this host; their numbers."""
    host = socket.gethostname()
    stale = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        w = str(t.user_attrs.get("worker", ""))
        h, _, pid = w.rpartition(":")
        if h != host or not pid.isdigit() or int(pid) == os.getpid() or _pid_alive(int(pid)):
            continue
        try:
            storage.set_trial_user_attr(t._trial_id, "status", "stale")
            if storage.set_trial_state_values(t._trial_id, TrialState.FAIL):
                stale.append(t.number)
        except Exception:  # another worker got there first
            log.debug("could not fail stale trial %d", t.number, exc_info=True)
    if stale:
        log.warning("marked %d trial(s) left running by dead processes as failed (stale): %s", len(stale), stale)
    return stale


def _counts(t: FrozenTrial) -> bool:
    if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING):
        return True
    return t.state == TrialState.FAIL and t.user_attrs.get("status") == "error"


def count_trials(study: optuna.Study) -> int:
    """Trials that count towards ``n_trials``: all but interrupted, stale or killed ones."""
    return sum(_counts(t) for t in study.get_trials(deepcopy=False))


@dataclass
class SearchReport:
    """What this process did."""

    ran: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    study_trials: int = 0


def run_search(
    study: optuna.Study,
    problem: SearchProblem,
    *,
    n_trials: int,
    storage: optuna.storages.BaseStorage | None = None,
    max_consecutive_failures: int = 10,
    callback: Callable[[TrialOutcome], None] | None = None,
) -> SearchReport:
    """Run trials until the study holds ``n_trials`` counted trials (see the module docs).

    A failing trial is recorded FAIL and the search goes on, unless ``max_consecutive_failures``
    fail in a row (``SearchAborted``).  ``KeyboardInterrupt`` propagates after the running trial
    is recorded FAIL (``status=interrupted``).
    """
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 0:
        raise ValueError(f"n_trials must be a non-negative integer, got {n_trials!r}")
    if storage is not None:
        fail_stale_trials(study, storage)
    rep = SearchReport()
    t0 = time.perf_counter()
    in_a_row = 0
    while count_trials(study) < n_trials:
        problem.last = None
        study.optimize(problem, n_trials=1, catch=(Exception,))
        out = problem.last
        if out is None:  # the sampler or storage failed before the objective ran
            raise SearchAborted("a trial ended before the objective ran; see the log above")
        rep.ran += 1
        rep.statuses[out.status] = rep.statuses.get(out.status, 0) + 1
        if callback is not None:
            callback(out)
        in_a_row = in_a_row + 1 if out.status == "error" else 0
        if max_consecutive_failures and in_a_row >= max_consecutive_failures:
            raise SearchAborted(f"{in_a_row} trials in a row failed; the last error (trial {out.number}): "
                                f"{out.error}")
    rep.seconds = time.perf_counter() - t0
    rep.study_trials = len(study.get_trials(deepcopy=False))
    return rep


# --------------------------------------------------------------------------------------------
# outputs


def trial_records(study: optuna.Study) -> list[dict[str, Any]]:
    """One flat record per trial (the rows of trials.csv)."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        ua = t.user_attrs
        status = ua.get("status") or ("interrupted" if t.state == TrialState.FAIL else t.state.name.lower())
        lat = ua.get("latency") or {}
        cost = ua.get("cost") or {}
        cons = t.constraints
        score = t.values[0] if t.values is not None and status in ("evaluated", "cached") else None
        ms = t.values[1] if t.values is not None else lat.get("ms")
        arch = ua.get("arch")
        rows.append({
            "number": t.number,
            "state": t.state.name,
            "status": status,
            "score": score,
            "latency_ms": ms,
            "latency_source": lat.get("source"),
            "feasible": (all(v <= 0 for v in cons.values()) if cons else True) if ua.get("digest") else None,
            "params": cost.get("params"),
            "macs": cost.get("macs"),
            "peak_activation_kb": (cost["peak_activation_bytes"] / 1024.0) if "peak_activation_bytes" in cost else None,
            "latency_violation": cons.get("latency"),
            "memory_violation": cons.get("memory"),
            "eval_seconds": (ua.get("metrics") or {}).get("seconds") if status == "evaluated" else None,
            "duration_s": t.duration.total_seconds() if t.duration is not None else None,
            "cached_from": ua.get("cached_from"),
            "worker": ua.get("worker"),
            "digest": ua.get("digest"),
            "error": ua.get("error"),
            "arch": _compact(Arch.from_dict(arch)) if arch else None,
            "_arch": arch,
            "_latency": lat,
            "_metrics": ua.get("metrics"),
        })
    return rows


def _compact(arch: Arch) -> str:
    """A one-line summary: stem width, then each run of same-kind same-width blocks as kind+width[xdepth]."""
    parts = [f"c{arch.stem.out_ch}"]
    prev, n = None, 0
    for b in arch.blocks:
        key = (b.kind, b.out_ch)  # type: ignore[attr-defined]
        if key == prev:
            n += 1
            continue
        if prev is not None:
            parts.append(f"{prev[0]}{prev[1]}" + (f"x{n}" if n > 1 else ""))
        prev, n = key, 1
    if prev is not None:
        parts.append(f"{prev[0]}{prev[1]}" + (f"x{n}" if n > 1 else ""))
    if arch.head.hidden:
        parts.append(f"head{arch.head.hidden}")
    return " ".join(parts)


def pareto_front(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The non-dominated feasible evaluated trials (max score, min latency), one per Arch, by latency."""
    cands: dict[str, dict[str, Any]] = {}
    for r in records:
        if r["state"] == "COMPLETE" and r["score"] is not None and r["feasible"]:
            d = r["digest"] or str(r["number"])
            if d not in cands:  # the first trial of each Arch
                cands[d] = r
    pts = list(cands.values())
    front = [p for p in pts if not any(
        (q["score"] >= p["score"] and q["latency_ms"] <= p["latency_ms"])
        and (q["score"] > p["score"] or q["latency_ms"] < p["latency_ms"]) for q in pts)]
    return sorted(front, key=lambda r: (r["latency_ms"], -r["score"]))


_CSV_COLUMNS = ("number", "state", "status", "score", "latency_ms", "latency_source", "feasible", "params", "macs",
                "peak_activation_kb", "latency_violation", "memory_violation", "eval_seconds", "duration_s",
                "cached_from", "worker", "digest", "error", "arch")


def _csv_text(records: Sequence[dict[str, Any]], metric: str) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([metric if c == "score" else c for c in _CSV_COLUMNS])
    for r in records:
        row = []
        for c in _CSV_COLUMNS:
            v = r[c]
            row.append("" if v is None else f"{v:.6g}" if isinstance(v, float) else v)
        w.writerow(row)
    return buf.getvalue()


def write_outputs(study: optuna.Study, run_dir: str | Path, *, info: dict[str, Any] | None = None,
                  plot: bool = True) -> dict[str, Any]:
    """Write pareto.json, trials.csv and pareto.png for the whole study into ``run_dir`` (atomically)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    rec = dict(study.user_attrs.get(STUDY_ATTR) or {})
    metric = (rec.get("objectives") or ["score"])[0]
    records = trial_records(study)
    front = pareto_front(records)
    statuses: dict[str, int] = {}
    for r in records:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    pareto = []
    for r in front:
        lat = r["_latency"]
        pareto.append({
            "trial": r["number"],
            metric: r["score"],
            "latency_ms": r["latency_ms"],
            "latency_source": lat.get("source"),
            "latency": lat,
            "params": r["params"],
            "macs": r["macs"],
            "peak_activation_bytes": int(round(r["peak_activation_kb"] * 1024)) if r["peak_activation_kb"] else None,
            "peak_activation_kb": r["peak_activation_kb"],
            "digest": r["digest"],
            "summary": r["arch"],
            "metrics": r["_metrics"],
            "arch": r["_arch"],
        })
    out = {
        "schema": "hwnas.pareto",
        "version": SCHEMA_VERSION,
        "study": study.study_name,
        "metric": metric,
        "objectives": {metric: "maximize", "latency_ms": "minimize"},
        "search": rec,
        **(info or {}),
        "trials": {"total": len(records), **statuses},
        "pareto": pareto,
        "notes": ("arch: the deployed network (the dataset's classes and input channels at the target's deployment "
                  "resolution); latency is predicted for it, params / MACs / peak memory counted on it; "
                  f"{metric} was measured with the same body at the dataset's resolution "
                  f"({(rec.get('data') or {}).get('resolution')} px)"),
    }
    paths: dict[str, Any] = {"pareto_json": run_dir / "pareto.json", "trials_csv": run_dir / "trials.csv"}
    atomic_write_json(paths["pareto_json"], _jsonable(out))
    atomic_write_text(paths["trials_csv"], _csv_text(records, metric))
    if plot:
        budget = (rec.get("budgets") or {}).get("latency_ms")
        target = rec.get("target") or {}
        title = (f"{rec.get('search_space', {}).get('name', '?')} on {(rec.get('data') or {}).get('name', '?')} "
                 f"for {target.get('name', '?')} ({(target.get('device') or {}).get('name', '?')})")
        paths["pareto_png"] = plot_pareto(records, front, run_dir / "pareto.png", metric=metric, budget_ms=budget,
                                          title=title, source=rec.get("latency_source", "measured"))
    paths["front"] = front
    paths["records"] = records
    paths["statuses"] = statuses
    return paths


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def plot_pareto(records: Sequence[dict[str, Any]], front: Sequence[dict[str, Any]], path: str | Path, *,
                metric: str, budget_ms: float | None, title: str, source: str) -> Path:
    """Score vs predicted latency: every evaluated trial faded, the front highlighted, the budget line."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    acc = metric == "val_accuracy"
    scale = 100.0 if acc else 1.0
    ev = [r for r in records if r["score"] is not None and r["latency_ms"] is not None]
    over = [r for r in records if r["status"] == "over_budget" and r["latency_ms"] is not None]
    fig, ax = plt.subplots(figsize=(8, 5), dpi=150)
    handles = []
    xs_all = [r["latency_ms"] for r in ev + over]
    if ev:
        ax.scatter([r["latency_ms"] for r in ev], [r["score"] * scale for r in ev], s=18, color="0.55", alpha=0.35,
                   linewidths=0, zorder=2)
        handles.append(Line2D([], [], ls="", marker="o", color="0.55", alpha=0.5, label=f"trials ({len(ev)})"))
    if front:
        fx = [r["latency_ms"] for r in front]
        fy = [r["score"] * scale for r in front]
        ax.step(fx, fy, where="post", color="tab:blue", lw=1.6, zorder=3)
        ax.scatter(fx, fy, s=46, color="tab:blue", edgecolors="white", linewidths=0.8, zorder=4)
        for r, x, y in zip(front, fx, fy):
            ax.annotate(f"#{r['number']}", (x, y), textcoords="offset points", xytext=(4, -11), fontsize=7,
                        color="tab:blue")
        handles.append(Line2D([], [], color="tab:blue", marker="o", label=f"Pareto front ({len(front)})"))
    if ev:
        ys = sorted(r["score"] * scale for r in ev)
        lo_data = ys[max(0, int(0.1 * len(ys)) - 1)]
        lo = min(lo_data, min((r["score"] * scale for r in front), default=lo_data))
        hi = ys[-1]
        pad = max(1e-6, (hi - lo) * 0.08)
        ax.set_ylim(lo - pad, hi + pad)
        hidden = sum(1 for y in ys if y < lo - pad)
        if hidden:
            handles.append(Line2D([], [], ls="", label=f"({hidden} low-scoring trials below the axis)"))
    if over:
        ymin = ax.get_ylim()[0]
        ax.scatter([r["latency_ms"] for r in over], [ymin] * len(over), marker="|", s=80, color="tab:red",
                   alpha=0.5, zorder=2, clip_on=False)
        handles.append(Line2D([], [], ls="", marker="|", markersize=9, color="tab:red",
                              label=f"over budget, not trained ({len(over)})"))
    if xs_all:
        x0, x1 = min(xs_all), max(xs_all)
        span = max(x1 - x0, 1e-6)
        xl = (max(0.0, x0 - 0.06 * span), x1 + 0.06 * span)
        if budget_ms is not None and budget_ms <= xl[1] + 0.5 * span:
            xl = (xl[0], max(xl[1], budget_ms + 0.06 * span))
            ax.axvline(budget_ms, color="tab:red", ls="--", lw=1.2, zorder=1)
            handles.append(Line2D([], [], color="tab:red", ls="--", label=f"latency budget {budget_ms:g} ms"))
        elif budget_ms is not None:
            handles.append(Line2D([], [], color="tab:red", ls="--",
                                  label=f"latency budget {budget_ms:g} ms (off the chart, right)"))
        ax.set_xlim(*xl)
    est = source == "estimated"
    ax.set_xlabel("predicted latency (ms)" + (" — ESTIMATE (roofline), no measured table" if est
                                              else " — from the measured latency table"))
    ax.set_ylabel("validation accuracy (%)" if acc else f"{metric} (zero-cost proxy, higher is better)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.25, zorder=0)
    if not ev:
        ax.text(0.5, 0.5, "no evaluated trials yet", transform=ax.transAxes, ha="center", va="center", color="0.4")
    ax.legend(handles=handles, loc="best", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    p = Path(path)
    atomic_write_bytes(p, buf.getvalue())
    return p


# --------------------------------------------------------------------------------------------
# assembling a search from settings


@dataclass
class Search:
    """Everything one worker needs: the study, the objective, and where things are."""

    study: optuna.Study
    problem: SearchProblem
    storage: optuna.storages.BaseStorage
    storage_desc: str
    run_dir: Path
    created: bool  # this worker created the study

    def info(self) -> dict[str, Any]:
        """Context for pareto.json: the latency model, the data and evaluator, where the study is."""
        p = self.problem
        return {
            "latency_model": {"source": p.latency.source, "describe": p.latency.describe(),
                              "warning": p.latency.warning},
            "data_description": p.data.describe(),
            "evaluator_description": p.evaluator.describe(),
            "storage": self.storage_desc,
            "run_dir": str(self.run_dir),
        }


def default_study_name(*, space: str, data: str, target: str) -> str:
    return f"{Path(space).stem}-{data}-{target}"


def prepare_search(
    *,
    target: dict[str, Any],
    search_space: str | SearchSpace,
    data: Dataset | dict[str, Any],
    evaluator: Evaluator | dict[str, Any],
    sampler: dict[str, Any],
    budgets: Budgets,
    seed: int,
    run_dir: str | Path,
    storage: str | None = None,
    study_name: str | None = None,
    latency: LatencyModel | None = None,
    allow_mismatch: bool = False,
) -> Search:
    """Load the space, data, evaluator and latency model; open (or create) the study in its storage."""
    from nas.data import load_data
    from nas.latency import load_latency_model
    from nas.search.evaluate import make_evaluator
    from nas.space import load_space

    space = search_space if isinstance(search_space, SearchSpace) else load_space(search_space)
    ev = evaluator if isinstance(evaluator, Evaluator) else make_evaluator(evaluator)
    smp = make_sampler(sampler, seed=seed)  # validate before loading data
    ds = data if isinstance(data, Dataset) else load_data(data)
    lat = latency if latency is not None else load_latency_model(target, allow_mismatch=allow_mismatch)
    problem = SearchProblem(space=space, data=ds, evaluator=ev, latency=lat, target=target, budgets=budgets,
                            train_seed=seed)
    run_dir = Path(run_dir)
    st, desc = make_storage(storage, run_dir=run_dir)
    name = study_name or default_study_name(space=space.name, data=ds.name, target=str(target.get("name", "target")))
    existed = name in {s.study_name for s in optuna.get_all_study_summaries(st, include_best_trial=False)}
    study = open_study(storage=st, study_name=name, sampler=smp, record=problem.record())
    problem.train_seed = int(study.user_attrs[STUDY_ATTR].get("train_seed", seed))
    return Search(study, problem, st, desc, run_dir, not existed)
