"""The objective of the search: one trial -> (score, predicted latency), budgets as constraints.

One trial:

1. the sampler picks the space's categorical parameters; ``SearchSpace.sample`` decodes an Arch;
2. the *deployed* network is that Arch with the dataset's classes and input channels at the target's
   deployment resolution: its latency is predicted (``LatencyModel.explain``: measured table or
   labelled estimate) and its params, MACs and peak activation memory counted (``nas.cost``);
3. the budgets become constraints (``trial.set_constraint``; relative excess, ``<= 0`` is
   feasible).  An architecture over budget is **never trained**: it is told with a placeholder
   score of 0 (samplers rank infeasible trials by their violation alone) and ``status=over_budget``;
4. an architecture already in the study (same ``Arch.digest()``: completed, failed with an error,
   or running in another worker under a lower trial number) is a *repeat*: it is neither evaluated
   nor counted (``status=duplicate``, recorded FAIL with ``duplicate_of``) and the loop asks the
   sampler again.  The samplers are reseeded per trial number (``nas.search.samplers``), so a
   resumed study or a second worker draws new architectures; when the sampler proposes nothing
   new ``max_consecutive_duplicates`` times in a row the space is taken as exhausted and the run
   stops;
5. otherwise the evaluator scores the Arch at the dataset's resolution (``status=evaluated``).
   With a pruner (``nas.search.pruners``) the ``train`` evaluator's validation accuracy after each
   epoch is kept in the trial (user attribute ``intermediate``) and the pruner may stop the
   training: the trial is told PRUNED (``status=pruned``), keeps its epoch accuracies, counts
   towards ``n_trials`` but has no score and is never on the Pareto front.

Objectives: maximise the score (validation accuracy, or a zero-cost proxy), minimise predicted
latency (ms).  Every trial keeps its deployed Arch (JSON), digest, latency provenance, costs,
status, worker (host:pid) and, when it failed, its error in its user attributes.

A trial whose evaluation raises (an exception, out of memory) is recorded FAIL with its error and
the search goes on.  Ctrl-C inside a trial records it FAIL with ``status=interrupted``; a trial
left RUNNING by a killed process on this host is marked FAIL (``status=stale``) at the next start.
Interrupted, stale, duplicate and surplus trials (``nas.search.study``: asked after other workers
took the last of ``n_trials``) do not count towards ``n_trials``; interrupted and stale ones are
redone on resume.  The loop drives Optuna with ``ask`` / ``tell``, so a failing trial is
one line in the progress output, never a traceback from Optuna's logger.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

import optuna
import torch
from optuna.trial import TrialState

from nas._yaml import load_yaml_config
from nas.arch import Arch
from nas.cost import arch_cost
from nas.data import Dataset, adapt_arch
from nas.latency.tables import LatencyModel
from nas.search.budget import Budgets
from nas.search.evaluate import Evaluator
from nas.search.pruners import TrialPruner, record_epoch
from nas.search.storage import SCHEMA_VERSION
from nas.space import SearchSpace
from nas.target import Target

__all__ = ["OVER_BUDGET_SCORE", "STATUSES", "WORKER", "DuplicateArch", "SearchProblem", "TrialOutcome"]

log = logging.getLogger(__name__)

OVER_BUDGET_SCORE = 0.0  # placeholder objective of an untrained, over-budget trial
STATUSES = ("running", "evaluated", "pruned", "over_budget", "duplicate", "surplus", "error", "interrupted", "stale")
WORKER = f"{socket.gethostname()}:{os.getpid()}"


class DuplicateArch(Exception):
    """The sampled architecture is already in the study (``.number``: the trial that holds it)."""

    def __init__(self, number: int) -> None:
        super().__init__(f"already in the study as trial {number}")
        self.number = number


# --------------------------------------------------------------------------------------------
# budgets


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
    duplicate_of: int | None = None


def _space_digest(space: SearchSpace) -> str:
    try:
        data: Any = load_yaml_config(space.source)
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
        target: Target | dict[str, Any],
        budgets: Budgets,
        train_seed: int,
        deploy_resolution: int | None = None,
        pruner: TrialPruner | None = None,
    ) -> None:
        if pruner is not None and not evaluator.fidelity:
            raise ValueError(f"pruner={pruner.name} needs an evaluator that trains over epochs (evaluator=train); "
                             f"evaluator={evaluator.name} has no epochs to stop early: use pruner=none")
        self.pruner = pruner
        self.space, self.data, self.evaluator, self.latency = space, data, evaluator, latency
        if not isinstance(target, Target):
            raise TypeError(f"target must be a Target (nas.load_target(name)), got {type(target).__name__}")
        self.target, self.budgets, self.train_seed = target, budgets, int(train_seed)
        self.deploy_resolution = int(deploy_resolution or self.target.resolution or space.resolution)
        self.bytes_per_act = {"int8": 1, "fp16": 2}.get(self.target.precision, 4)
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
        # where the files are, how many processes read them, and whether an unreadable one stops the loading
        # (a skipped one is named in the data line) do not change a score; the streamed
        # datasets' transform settings do nothing for the in-memory ones (so their studies keep their record)
        skip = {"root", "download", "num_workers", "skip_bad"}
        if not self.data.streamed:
            skip |= {"auto_augment", "crop_scale", "crop_pct"}
        data = {k: v for k, v in self.data.settings.to_dict().items() if k not in skip}
        ev = {k: v for k, v in self.evaluator.settings().items() if k != "device"}
        return {
            "version": SCHEMA_VERSION,
            "search_space": {"name": self.space.name, "digest": _space_digest(self.space)},
            "target": self.target.to_dict(),
            "latency_source": self.latency.source,
            "deploy_resolution": self.deploy_resolution,
            "data": data,
            "evaluator": ev,
            "budgets": self.budgets.to_dict(),
            "objectives": [self.evaluator.metric, "latency_ms"],
            "train_seed": self.train_seed,
        }

    def check_budgets(self, samples: int = 64) -> None:
        """Refuse budgets that no architecture of the space can meet: a ``ValueError`` naming the least
        any of the space's smallest architecture and ``samples`` random ones needs."""
        archs = [self.deployed(self.space.smallest())] + [self.deployed(self.space.random(i)) for i in range(samples)]
        b = self.budgets
        if b.latency_budget_ms is not None:
            ms = min(float(self.latency.explain(a).ms) for a in archs)
            if ms > b.latency_budget_ms:
                est = {"measured": "", "rehearsal": ", a REHEARSAL"}.get(self.latency.source, ", an ESTIMATE")
                raise ValueError(f"latency_budget_ms={b.latency_budget_ms:g}: no architecture of space {self.space.name!r} "
                                 f"can meet it on {self.target.name}: its smallest is predicted at {ms:.4g} ms"
                                 f"{est} (at {self.deploy_resolution}x{self.deploy_resolution}). Raise the budget "
                                 f"(latency_budget_ms={_round_up(ms)}) or search a smaller space")
        if b.memory_budget_kb is not None:
            kb = min(arch_cost(a, bytes_per_act=self.bytes_per_act).peak_activation_bytes for a in archs) / 1024
            if kb > b.memory_budget_kb:
                raise ValueError(f"memory_budget_kb={b.memory_budget_kb:g}: no architecture of space {self.space.name!r} "
                                 f"fits it: the smallest peaks at {kb:.4g} KiB of activations "
                                 f"(at {self.deploy_resolution}x{self.deploy_resolution}). Raise the budget "
                                 f"(memory_budget_kb={_round_up(kb)}) or search a smaller space")

    def eval_seed(self, digest: str) -> int:
        return (self.train_seed * 1_000_003 + int(digest[:8], 16)) % (2**31 - 1)

    # -- repeats --------------------------------------------------------------------------
    @staticmethod
    def holder(study: optuna.Study, number: int, digest: str) -> int | None:
        """The trial that already holds the architecture ``digest``, if any: a completed one, one that
        failed with an error, or one running in another worker under a lower number (so of two
        workers sampling one architecture at once, exactly one goes on)."""
        for t in study.get_trials(deepcopy=False):
            if t.number == number or t.user_attrs.get("digest") != digest:
                continue
            if t.state in (TrialState.COMPLETE, TrialState.PRUNED) or (
                    t.state == TrialState.FAIL and t.user_attrs.get("status") == "error") or (
                    t.state == TrialState.RUNNING and t.number < number):
                return t.number
        return None

    # -- one trial --------------------------------------------------------------------------
    def __call__(self, trial: optuna.Trial) -> tuple[float, float]:
        t0 = time.perf_counter()
        trial.set_user_attr("worker", WORKER)
        trial.set_user_attr("status", "running")
        self.last = TrialOutcome(trial.number, "running", None, None, None, 0.0)
        ms = feasible = None
        epochs: dict[int, float] = {}  # with a pruner: the validation accuracy after each epoch
        try:
            arch = self.space.sample(trial)
            dep = self.deployed(arch)
            digest = dep.digest()
            trial.set_user_attr("digest", digest)
            held = self.holder(trial.study, trial.number, digest)
            if held is not None:
                trial.set_user_attr("status", "duplicate")
                trial.set_user_attr("duplicate_of", held)
                self.last = TrialOutcome(trial.number, "duplicate", None, None, None, time.perf_counter() - t0,
                                         duplicate_of=held)
                raise DuplicateArch(held)
            pred = self.latency.explain(dep)
            ms = float(pred.ms)
            cost = arch_cost(dep, bytes_per_act=self.bytes_per_act)
            trial.set_user_attr("arch", dep.to_dict())
            trial.set_user_attr("latency", pred.to_dict())
            trial.set_user_attr("cost", {"params": cost.params, "macs": cost.macs,
                                         "peak_activation_bytes": cost.peak_activation_bytes})
            cons = self.budgets.constraints(latency_ms=ms, peak_bytes=cost.peak_activation_bytes)
            for k, v in cons.items():
                trial.set_constraint(k, v)
            feasible = all(v <= 0 for v in cons.values())
            if not feasible:
                return self._finish(trial, t0, "over_budget", OVER_BUDGET_SCORE, ms, False)
            self.evaluations += 1
            res = self._evaluate(trial, arch, digest, epochs)
            if not math.isfinite(res.score):
                raise ValueError(f"the evaluator returned a non-finite score {res.score}")
            trial.set_user_attr("metrics", {**res.metrics, "seconds": res.seconds})
            if self.pruner is not None:
                epochs[int(res.metrics.get("epochs", len(epochs) + 1))] = float(res.score)
                record_epoch(trial, epochs)
            return self._finish(trial, t0, "evaluated", float(res.score), ms, True)
        except DuplicateArch:
            raise
        except optuna.TrialPruned:
            secs = time.perf_counter() - t0
            trial.set_user_attr("status", "pruned")
            trial.set_user_attr("metrics", {"epochs": float(max(epochs, default=0)), "seconds": secs})
            self.last = TrialOutcome(trial.number, "pruned", None, ms, True, secs)
            _free_accelerator_memory()
            raise
        except KeyboardInterrupt:
            self._set_failed(trial, t0, "interrupted", "interrupted (KeyboardInterrupt)", ms, feasible)
            raise
        except Exception as e:
            msg = f"{type(e).__name__}: {e}"
            self._set_failed(trial, t0, "error", msg, ms, feasible)
            _free_accelerator_memory()
            raise

    def _evaluate(self, trial: optuna.Trial, arch: Arch, digest: str, epochs: dict[int, float]) -> Any:
        """The evaluator's result; with a pruner, each epoch's accuracy is recorded in ``epochs`` and the
        trial, and ``optuna.TrialPruned`` raised when the pruner stops it."""
        seed = self.eval_seed(digest)
        if self.pruner is None:
            return self.evaluator.evaluate(self.trained(arch), self.data, seed=seed)
        pruner = self.pruner

        def on_epoch(done: int, acc: float) -> None:
            epochs[done] = float(acc)
            record_epoch(trial, epochs)
            if pruner.should_prune(trial):
                raise optuna.TrialPruned(f"stopped by the {pruner.name} pruner after {done} epochs ({acc:.4f})")

        return self.evaluator.evaluate(self.trained(arch), self.data, seed=seed, on_epoch=on_epoch)

    def _finish(self, trial: optuna.Trial, t0: float, status: str, score: float, ms: float,
                feasible: bool) -> tuple[float, float]:
        trial.set_user_attr("status", status)
        secs = time.perf_counter() - t0
        self.last = TrialOutcome(trial.number, status, None if status == "over_budget" else score, ms, feasible,
                                 secs)
        return score, ms

    def _set_failed(self, trial: optuna.Trial, t0: float, status: str, msg: str, ms: float | None,
                    feasible: bool | None) -> None:
        try:
            trial.set_user_attr("status", status)
            trial.set_user_attr("error", msg[:2000])
        except Exception:  # the storage itself failed: nothing more to record
            log.debug("could not record the failure of trial %d", trial.number, exc_info=True)
        self.last = TrialOutcome(trial.number, status, None, ms, feasible, time.perf_counter() - t0, error=msg)


def _round_up(v: float) -> str:
    """``v`` rounded up to two significant digits, as a budget to suggest."""
    e = math.floor(math.log10(v)) - 1 if v > 0 else 0
    return f"{math.ceil(v / 10**e) * 10**e:.{max(0, -e)}f}"


def _free_accelerator_memory() -> None:
    try:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # never let cleanup hide the trial's own error
        pass
