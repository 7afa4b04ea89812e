"""The hardware-aware search: an Optuna study over a search space, two objectives, budgets as constraints.

The trial itself (sampling, the deployed network, budgets, repeats, evaluation) is
``nas.search.objective.SearchProblem``; this module runs trials and assembles a search.

``n_trials`` is the study's total: each worker runs trials until the study holds that many
(completed, failed with an error, or running in another worker), so re-running the same command
resumes an interrupted search and many workers (processes or machines, one storage) share one
budget exactly.  Workers that see the last free slot at once each ask for a trial; a trial whose
lower-numbered trials already count ``n_trials`` is *surplus*: recorded FAIL (``status=surplus``),
never evaluated and never counted, and its worker stops unless a slot was freed meanwhile.  Trial
numbers follow the order in which the storage creates trials (RDB: under a lock on the study row;
journal: the log's order), so when a worker holds trial ``k`` all trials below it exist; and a
trial that stops counting (a repeat, an interruption) only frees a slot, never takes one.  An
interrupted trial's architecture (Ctrl-C, SIGTERM, a lost storage, a killed process's stale trial)
is queued again on resume (``requeue_interrupted``), so it is run, once, in a freed slot.

Storage: a journal file in the run dir by default (append-only, safe under concurrent
processes, unlike SQLite), or any Optuna storage URL (``postgresql://``, ``mysql://``,
``sqlite:///``, ``redis://``) or a journal file path on a shared disk.  The study records the
settings that define it (space, target, data, evaluator, budgets); resuming it with different
ones is an error that names the differences.

Outputs (``write_outputs``): ``pareto.json``, ``trials.csv``, ``pareto.png``.

This module holds the loop; the trial is in ``nas.search.objective``, the samplers in
``nas.search.samplers``, storages and study opening in ``nas.search.storage``, run dir ownership in
``nas.search.rundir``, records, the front and the files in ``nas.search.results`` (their public
names are importable from here too).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from nas.data import Dataset, DataSettings, load_data
from nas.latency import load_latency_model
from nas.latency.profile import REFRESH, Refresh, refresh_model
from nas.latency.tables import LatencyModel
from nas.search.budget import BUDGET_ATTR, Budgets, LatencyBudget, choose_latency_budget, kept, sampled_latencies
from nas.search.evaluate import Evaluator
from nas.search.evaluator_settings import MAX_CONSECUTIVE_FAILURES
from nas.search.journal import check_journal
from nas.search.objective import WORKER, DuplicateArch, SearchProblem, TrialOutcome
from nas.search.progress import TrialProgress
from nas.search.pruners import PrunerSettings, TrialPruner, make_pruner
from nas.search.rundir import check_run_dir, claim_run_dir, new_run_command
from nas.search.samplers import SamplerSettings, make_sampler
from nas.search.storage import (
    STUDY_ATTR,
    fail_stale_trials,
    journal_file,
    make_storage,
    open_study,
    storage_description,
)
from nas.space import SearchSpace, load_space
from nas.target import Target

__all__ = ["Search", "SearchAborted", "SearchReport", "count_trials", "prepare_search", "requeue_interrupted", "run_search"]

log = logging.getLogger(__name__)



class SearchAborted(RuntimeError):
    """Too many trials in a row failed, or every trial of the run did: something is wrong beyond one
    architecture.  The message holds the first failure's reason; ``report``: what the run did until then."""

    def __init__(self, message: str, report: SearchReport | None = None) -> None:
        super().__init__(message)
        self.report = report


# --------------------------------------------------------------------------------------------
# running


#: the statuses of failed trials whose architecture is run again on resume (``requeue_interrupted``)
REDONE = ("interrupted", "stale")


def _counts(t: FrozenTrial) -> bool:
    if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING):
        return True
    return t.state == TrialState.FAIL and t.user_attrs.get("status") == "error"


def count_trials(study: optuna.Study) -> int:
    """Trials that count towards ``n_trials``: all but repeats, surplus, interrupted, stale or killed ones."""
    return sum(_counts(t) for t in study.get_trials(deepcopy=False))


def _is_surplus(study: optuna.Study, number: int, n_trials: int) -> bool:
    """Whether trial ``number`` would exceed ``n_trials``: the trials numbered below it (all of which exist
    once ``number`` is given) already count that many, running ones included."""
    return sum(_counts(t) for t in study.get_trials(deepcopy=False) if t.number < number) >= n_trials


@dataclass
class SearchReport:
    """What this process did."""

    ran: int = 0  # counted trials (duplicates excluded)
    statuses: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    study_trials: int = 0
    duplicates: int = 0  # repeats skipped (not evaluated, not counted)
    surplus: int = 0  # trials asked after other workers had taken the last slots (not evaluated, not counted)
    exhausted: bool = False  # stopped: the sampler proposed only repeats
    redone: list[int] = field(default_factory=list)  # interrupted or stale trials whose architecture was run again


def requeue_interrupted(study: optuna.Study, n_trials: int) -> list[int]:
    """Queue again the architectures of interrupted trials (Ctrl-C, SIGTERM, a lost storage) and stale ones
    (left running by a killed process), so the next trials run them (``optuna.Study.enqueue_trial``: the
    same parameters); an architecture another trial holds or waits for is not queued twice, and no more
    are queued than ``n_trials`` has free slots.

    Args:
        study: the study, its stale trials already failed (``fail_stale_trials``).
        n_trials: the study's total.

    Returns:
        The numbers of the trials whose architecture was queued, each marked ``redo_of`` on its new trial.
    """
    trials = study.get_trials(deepcopy=False)
    taken = {t.user_attrs.get("digest") for t in trials if _counts(t)}  # held, running or already queued
    free = n_trials - sum(_counts(t) for t in trials)
    queued = []
    for t in trials:
        digest = t.user_attrs.get("digest")  # set once the architecture is sampled
        if free <= 0:
            break
        if t.state != TrialState.FAIL or t.user_attrs.get("status") not in REDONE or not digest or digest in taken:
            continue
        study.enqueue_trial(dict(t.params), user_attrs={"redo_of": t.number, "digest": digest})
        taken.add(digest)
        free -= 1
        queued.append(t.number)
    if queued:
        log.info("redoing the architecture of interrupted trial(s) %s first", ", ".join(map(str, queued)))
    return queued


def _run_one(study: optuna.Study, problem: SearchProblem, n_trials: int) -> TrialOutcome:
    """Ask for a trial, run the objective, tell the study; the outcome (``status=duplicate`` for a
    repeat, ``status=surplus`` for a trial beyond ``n_trials``, which is not run).  ``KeyboardInterrupt``
    propagates after the trial is told FAIL."""
    trial = study.ask()
    if _is_surplus(study, trial.number, n_trials):
        return _tell_surplus(study, trial)
    problem.last = None
    try:
        values = problem(trial)
    except DuplicateArch:
        study.tell(trial, state=TrialState.FAIL)
    except optuna.TrialPruned:
        study.tell(trial, state=TrialState.PRUNED)
    except KeyboardInterrupt:
        study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
        raise
    except Exception:
        study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
    else:
        study.tell(trial, values)
    out = problem.last
    if out is None:  # the objective failed before it began
        raise SearchAborted(f"trial {trial.number} ended before the objective ran")
    return out


def _tell_surplus(study: optuna.Study, trial: optuna.Trial) -> TrialOutcome:
    """Record ``trial`` FAIL with ``status=surplus`` (not evaluated, not counted)."""
    t0 = time.perf_counter()
    try:
        trial.set_user_attr("worker", WORKER)
        trial.set_user_attr("status", "surplus")
    finally:  # even when interrupted: a surplus trial must not stay RUNNING, where it counts
        study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
    return TrialOutcome(trial.number, "surplus", None, None, None, time.perf_counter() - t0)


def run_search(
    study: optuna.Study,
    problem: SearchProblem,
    *,
    n_trials: int,
    storage: optuna.storages.BaseStorage | None = None,
    max_consecutive_failures: int = MAX_CONSECUTIVE_FAILURES,
    max_consecutive_duplicates: int = 50,
    callback: Callable[[TrialOutcome], None] | None = None,
    progress: bool = True,
) -> SearchReport:
    """Run trials until the study holds ``n_trials`` counted trials (a re-run resumes up to it).

    A failing trial is recorded FAIL and the search goes on; a repeat is skipped; a trial asked after
    other workers took the last slots is recorded surplus and not run (see the module docs).  The
    architectures of interrupted and stale trials run first (``requeue_interrupted``).

    Args:
        study: ``prepare_search(...).study``.
        problem: ``prepare_search(...).problem``.
        n_trials: the study's total, over every worker.
        storage: the study's storage: the RUNNING trials of dead processes on this host are failed first.
        max_consecutive_failures: this many failed trials in a row stop the search; 0: never.
        max_consecutive_duplicates: this many repeats in a row end the run (``SearchReport.exhausted``).
        callback: sees every outcome, repeats and surplus trials included.
        progress: a bar on standard error over this call's trials, with the best feasible score so far.

    Returns:
        The ``SearchReport`` of this call's trials.

    Raises:
        ValueError: ``n_trials`` or ``max_consecutive_failures`` is not a non-negative integer.
        SearchAborted: failures in a row reached ``max_consecutive_failures``, or every trial of the run
            sent to the evaluator failed; the message holds the first failure's reason.
        KeyboardInterrupt: after the running trial is recorded FAIL (``status=interrupted``).

    Example:
        >>> search = nas.prepare_search(...)  # doctest: +SKIP
        >>> nas.run_search(search.study, search.problem, n_trials=36, storage=search.storage)  # doctest: +SKIP
    """
    for name, v in (("n_trials", n_trials), ("max_consecutive_failures", max_consecutive_failures)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
    if not progress:
        return _run_trials(study, problem, n_trials=n_trials, storage=storage, callback=callback,
                           max_failures=max_consecutive_failures, max_duplicates=max_consecutive_duplicates)
    bar = TrialProgress(max(0, n_trials - count_trials(study)), problem.evaluator.metric)
    try:
        return _run_trials(study, problem, n_trials=n_trials, storage=storage, callback=_both(bar, callback),
                           max_failures=max_consecutive_failures, max_duplicates=max_consecutive_duplicates)
    finally:
        bar.close()


def _run_trials(study: optuna.Study, problem: SearchProblem, *, n_trials: int,
                storage: optuna.storages.BaseStorage | None, callback: Callable[[TrialOutcome], None] | None,
                max_failures: int, max_duplicates: int) -> SearchReport:
    """``run_search``'s loop."""
    if storage is not None:
        fail_stale_trials(study, storage)
    rep = SearchReport(redone=requeue_interrupted(study, n_trials))
    t0 = time.perf_counter()
    failed = repeats = 0
    first: TrialOutcome | None = None  # the first failure of the current run of failures
    first_error: TrialOutcome | None = None  # the run's first failure
    while count_trials(study) < n_trials:
        out = _run_one(study, problem, n_trials)
        if callback is not None:
            callback(out)
        if out.status == "surplus":  # the loop's test sees whether a slot was freed meanwhile
            rep.surplus += 1
            continue
        if out.status == "duplicate":
            rep.duplicates += 1
            repeats += 1
            if max_duplicates and repeats >= max_duplicates:
                rep.exhausted = True
                break
            continue
        repeats = 0
        rep.ran += 1
        rep.statuses[out.status] = rep.statuses.get(out.status, 0) + 1
        failed = failed + 1 if out.status == "error" else 0
        first = (first or out) if failed else None
        first_error = first_error or first
        if max_failures and failed >= max_failures:
            raise SearchAborted(f"{failed} trials in a row failed; the first error (trial {first.number}): "
                                f"{first.error}", rep)
    rep.seconds = time.perf_counter() - t0
    rep.study_trials = len(study.get_trials(deepcopy=False))
    errors = rep.statuses.get("error", 0)
    if first_error is not None and not (rep.statuses.get("evaluated") or rep.statuses.get("pruned")):
        others = f" ({rep.ran - errors} over a budget, not scored)" if rep.ran > errors else ""
        raise SearchAborted(f"every trial of this run that was scored failed: {errors} of {rep.ran}{others}; the "
                            f"first error (trial {first_error.number}): {first_error.error}", rep)
    return rep


def _both(first: Callable[[TrialOutcome], None],
          second: Callable[[TrialOutcome], None] | None) -> Callable[[TrialOutcome], None]:
    def call(o: TrialOutcome) -> None:
        first(o)
        if second is not None:
            second(o)
    return call


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
    latency_budget: LatencyBudget | None = None  # the study's latency budget and why (nas.search.budget)
    refresh: Refresh | None = None  # the latency table's refresh on the fly (nas.latency.profile.refresh), if it re-timed

    def info(self) -> dict[str, Any]:
        """Context for pareto.json: the latency model (and how its figures are obtained), the data and
        evaluator, where the study is.  (How the latency budget was chosen comes from the study itself:
        ``nas.search.results.write_outputs``.)"""
        p = self.problem
        return {
            "latency_model": {"source": p.latency.source, "how": p.latency.how,
                              "describe": p.latency.describe(), "warning": p.latency.warning,
                              **({"refresh": self.refresh.to_dict()} if self.refresh is not None else {})},
            "data_description": p.data.describe(),
            "val_images": len(p.data.val),  # what an accuracy evaluator scores on: its interval's n
            "evaluator_description": p.evaluator.describe(),
            "pruner": p.pruner.to_dict() if p.pruner is not None else {"name": "none"},
            "storage": self.storage_desc,
            "run_dir": str(self.run_dir),
        }


def default_study_name(*, space: str, data: str, target: str) -> str:
    return f"{Path(space).stem}-{data}-{target}"


def prepare_search(
    *,
    target: Target,
    search_space: str | SearchSpace,
    data: Dataset | DataSettings,
    evaluator: Evaluator,
    sampler: SamplerSettings,
    budgets: Budgets,
    seed: int,
    run_dir: str | Path,
    storage: str | None = None,
    study_name: str | None = None,
    latency: LatencyModel | None = None,
    allow_mismatch: bool = False,
    command: Sequence[str] | None = None,
    pruner: PrunerSettings | None = None,
    retime: bool = REFRESH.retime,
) -> Search:
    """Load the space, data, evaluator and latency model; open (or create) the study in its storage.

    The settings are checked first, then the run dir (one study's: ``nas.search.rundir``), then what
    takes seconds (the data, the latency model).  Settings are typed objects: a dict of them is refused
    with a ``TypeError`` naming the function that reads it (``nas.config.search.search_inputs`` reads a
    whole composed config).

    Args:
        target: the deployment target (``nas.load_target``).
        search_space: a space name, a YAML path, or a ``SearchSpace``.
        data: a loaded ``Dataset``, or its ``DataSettings`` (``DataSettings.from_dict`` reads a dict).
        evaluator: an ``Evaluator`` (``nas.search.make_evaluator`` makes one from ``{"name": "train", ...}``).
        sampler: a sampler's settings, a ``SamplerSettings`` (``NSGA2Settings``, ``TPESettings``,
            ``RandomSettings``; ``nas.search.samplers.sampler_settings`` reads a dict).
        budgets: the latency and memory budgets.  A latency budget the user gave is kept as given; the
            target's own (``Budgets(latency_budget_given=False)``) is replaced by the median of the space's
            sampled networks when it binds none, by the study's own when the study exists
            (``nas.search.budget``; ``Search.latency_budget`` says which).
        seed: the sampler's seed, and a new study's training seed (kept in the study).
        run_dir: the run dir (outputs, and the journal unless ``storage`` names another).
        storage: None (``<run_dir>/study.journal``), a journal path or an Optuna storage URL.
        study_name: None: ``<space>-<data>-<target>``.
        latency: a latency model; None: ``nas.load_latency_model(target)``.
        allow_mismatch: use a latency table whose metadata does not match the target.
        command: the user's arguments, recorded in the run dir (and in a refusal's suggested command).
        pruner: a pruner's settings, a ``PrunerSettings`` (``nas.search.pruners.pruner_settings`` reads a dict);
            None: no pruning.  It does not define the study, so a study may be resumed with another one.
        retime: on the target's table's own machine, rescale the loaded model by a few of the space's calibration
            networks re-timed now (``nas.latency.profile.refresh``; ``Search.refresh``); a ``latency`` given is left as is.

    Returns:
        A ``Search``: the study, the problem, the storage and the placed latency budget.

    Raises:
        TypeError: ``target``, ``data``, ``evaluator``, ``sampler``, ``pruner`` or ``budgets`` of another type (a
            dict of settings among them).
        ValueError: a setting out of range, a run dir of another study, a study resumed with other settings.

    Example:
        >>> import nas
        >>> from nas.data import DataSettings
        >>> from nas.search import Budgets, make_evaluator
        >>> from nas.search.samplers import RandomSettings
        >>> search = nas.prepare_search(target=nas.load_target("cpu"), search_space="tiny",
        ...     data=DataSettings(name="digits"), evaluator=make_evaluator({"name": "zero_cost"}),
        ...     sampler=RandomSettings(), budgets=Budgets(), seed=0, run_dir="runs/example")  # doctest: +SKIP
    """
    # the settings first, then the run dir, then what takes seconds (the data, the latency model)
    _check_types(target=target, data=data, evaluator=evaluator, sampler=sampler, pruner=pruner, budgets=budgets)
    space = search_space if isinstance(search_space, SearchSpace) else load_space(search_space)
    smp = make_sampler(sampler, seed=seed)
    prn = _pruner(pruner, evaluator)
    run_dir = Path(run_dir)
    name = study_name or default_study_name(space=space.name, data=data.name, target=target.name)
    _check_run_dir(run_dir, name, storage, command)
    ds = data if isinstance(data, Dataset) else load_data(data)
    evaluator.check(space, ds)
    refresh, latency = (None, latency) if latency is not None else _latency(target, space, allow_mismatch, retime)
    problem = SearchProblem(space=space, data=ds, evaluator=evaluator, latency=latency, target=target,
                            budgets=budgets, train_seed=seed, pruner=prn)
    search = _open_search(problem, smp, name=name, storage=storage, run_dir=run_dir, command=command, seed=seed)
    return replace(search, refresh=refresh)


def _check_types(*, target: object, data: object, evaluator: object, sampler: object, pruner: object,
                 budgets: object) -> None:
    """Refuse an argument of ``prepare_search`` of another type, naming what makes the right one from a dict."""
    wants = (
        ("target", target, Target, "a Target (nas.load_target(name))"),
        ("data", data, (Dataset, DataSettings),
         "a Dataset or DataSettings (nas.data.DataSettings.from_dict(d) reads a dict of data settings)"),
        ("evaluator", evaluator, Evaluator,
         "an Evaluator (nas.search.make_evaluator(d) makes one from a dict of evaluator settings)"),
        ("sampler", sampler, SamplerSettings,
         "a SamplerSettings (nas.search.samplers.sampler_settings(d) reads a dict of sampler settings)"),
        ("pruner", pruner, (PrunerSettings, type(None)),
         "a PrunerSettings or None (nas.search.pruners.pruner_settings(d) reads a dict of pruner settings)"),
        ("budgets", budgets, Budgets, "a Budgets (nas.search.Budgets(latency_budget_ms=..., memory_budget_kb=...))"),
    )
    for arg, value, cls, what in wants:
        if not isinstance(value, cls):
            raise TypeError(f"{arg} must be {what}, got {type(value).__name__}")


def _latency(target: Target, space: SearchSpace, allow_mismatch: bool, retime: bool) -> tuple[Refresh | None, Any]:
    """The target's latency model, refreshed on the fly for ``space`` when ``retime`` (nas.latency.profile.refresh)."""
    latency = load_latency_model(target, allow_mismatch=allow_mismatch)
    return (refresh_model(latency, target, spaces=[space.name]) if retime else None), latency


def _pruner(pruner: PrunerSettings | None, ev: Evaluator) -> TrialPruner | None:
    """The pruner its settings name, with a warning where the evaluator leaves it nothing to stop."""
    prn = make_pruner(pruner, max_resource=int(getattr(ev, "epochs", 1)))
    if prn is not None and int(getattr(ev, "epochs", 1)) < 2:
        log.warning("pruner=%s does nothing with evaluator.epochs=%s: a trial is only stopped between epochs",
                    prn.name, getattr(ev, "epochs", 1))
    return prn


def _check_run_dir(run_dir: Path, name: str, storage: str | None, command: Sequence[str] | None) -> None:
    """Refuse, before the data loads, a run dir of another study (``check_run_dir``) and a damaged journal."""
    check_run_dir(run_dir, study=name, storage_desc=storage_description(storage, run_dir=run_dir), command=command)
    journal = journal_file(storage, run_dir=run_dir)
    if journal is not None and journal.is_file():
        check_journal(journal)


def _open_search(problem: SearchProblem, sampler: optuna.samplers.BaseSampler, *, name: str, storage: str | None,
                 run_dir: Path, command: Sequence[str] | None, seed: int) -> Search:
    """Place the latency budget, open (or create) the study in its storage and claim the run dir."""
    given = problem.budgets.latency_budget_given
    budget = _place_latency_budget(problem)
    problem.check_budgets()
    st, desc = make_storage(storage, run_dir=run_dir)
    existed = name in {s.study_name for s in optuna.get_all_study_summaries(st, include_best_trial=False)}
    if existed and not given:
        budget = _keep_latency_budget(problem, st, name) or budget
    new = new_run_command(command, run_dir)
    hint = f"Resume it with the same settings, or start this search in a new folder: {new}" if new else None
    study = open_study(storage=st, study_name=name, sampler=sampler, record=problem.record(), hint=hint)
    if not existed:
        study.set_user_attr(BUDGET_ATTR, budget.to_dict())
    claim_run_dir(run_dir, study=name, storage_desc=desc, command=command)
    problem.train_seed = int(study.user_attrs[STUDY_ATTR].get("train_seed", seed))
    return Search(study, problem, st, desc, run_dir, not existed, budget)


def _place_latency_budget(problem: SearchProblem) -> LatencyBudget:
    """Place the problem's latency budget among the space's sampled networks (``nas.search.budget``):
    the target's own (``Budgets.latency_budget_given`` false) is replaced by their median when it binds none."""
    ms = sampled_latencies(problem.space, problem.latency, problem.deployed)
    b = problem.budgets
    budget = choose_latency_budget(b.latency_budget_ms, given=b.latency_budget_given, latencies=ms,
                                   where=f"{problem.space.name} on {problem.target.name}", source=problem.latency.source)
    problem.budgets = replace(problem.budgets, latency_budget_ms=budget.ms)
    return budget


def _keep_latency_budget(problem: SearchProblem, storage: optuna.storages.BaseStorage,
                         name: str) -> LatencyBudget | None:
    """A resumed study's own latency budget, set on ``problem`` (None when its record holds none)."""
    attrs = storage.get_study_user_attrs(storage.get_study_id_from_name(name))
    budgets = (attrs.get(STUDY_ATTR) or {}).get("budgets")
    if not isinstance(budgets, dict) or not {"latency_budget_ms", "latency_ms"} & set(budgets):
        return None
    budget = kept(Budgets.from_record(budgets).latency_budget_ms, attrs.get(BUDGET_ATTR))
    problem.budgets = replace(problem.budgets, latency_budget_ms=budget.ms)
    return budget
