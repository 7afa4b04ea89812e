"""Multi-fidelity search: Optuna's pruners stop hopeless trials of the ``train`` evaluator early.

Pruners are registered by name (``pruner=<name>`` on the command line), each with a settings
dataclass (its config schema) and a builder, like the samplers:

    none       every trial trains for ``evaluator.epochs`` (the default).
    median     ``optuna.pruners.MedianPruner``: stop a trial whose best validation accuracy so far
               is below the median of the completed trials' at the same epoch.
    sha        ``optuna.pruners.SuccessiveHalvingPruner`` (asynchronous successive halving, Li et
               al. 2020): at ``min_resource * reduction_factor**k`` epochs a trial goes on only if
               it is in the top ``1 / reduction_factor`` of the trials that reached that rung.
    hyperband  ``optuna.pruners.HyperbandPruner`` (Li et al. 2018): several successive-halving
               brackets with different first rungs; ``max_resource`` is ``evaluator.epochs``.

A step is the number of epochs trained so far (1 .. epochs); the value is the validation accuracy
after that epoch.  The last epoch's value is the trial's score, and a trial is never stopped after
its last epoch.

Why there is a view: the study has two objectives (accuracy, latency), and Optuna 5 refuses
``Trial.report`` and ``Trial.should_prune`` in multi-objective studies (``NotImplementedError``).
Its multi-objective TPE also fails on a PRUNED trial that holds Optuna intermediate values (it
asks the study for its single direction).  So the epoch accuracies are kept in the trial's user
attribute ``intermediate`` (``{"1": 0.41, "2": 0.55}``), and the pruner runs unchanged on
``ScoreView``: the same storage seen as a single-objective study that maximises accuracy, whose
trials are those that trained, with ``intermediate`` as their intermediate values.  The pruner's
own bookkeeping (successive halving's rung values, trial system attributes) goes to the real
storage, so every worker sharing the study sees it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from nas.registry import SettingsRegistry

__all__ = [
    "INTERMEDIATE_ATTR",
    "HyperbandSettings",
    "MedianSettings",
    "NoPrunerSettings",
    "PrunerSettings",
    "ScoreView",
    "SHASettings",
    "TrialPruner",
    "intermediate_values",
    "make_pruner",
    "pruner_settings",
    "pruner_names",
    "pruner_settings_class",
    "record_epoch",
    "register_pruner",
]

INTERMEDIATE_ATTR = "intermediate"  # trial user attribute: {"<epochs trained>": validation accuracy}
_TRAINED = ("evaluated", "pruned")  # statuses of trials that trained (the view also shows running ones)


@dataclass(frozen=True)
class PrunerSettings:
    """The base of every pruner's settings (``pruner_settings`` reads one from its config group)."""


@dataclass(frozen=True)
class NoPrunerSettings(PrunerSettings):
    """No pruning: every trial trains for ``evaluator.epochs``."""


@dataclass(frozen=True)
class MedianSettings(PrunerSettings):
    """``optuna.pruners.MedianPruner`` over epochs."""

    n_startup_trials: int = 5  # no pruning until this many trials completed their training
    n_warmup_steps: int = 1  # a trial always trains this many epochs before it can be stopped
    interval_steps: int = 1  # check every this many epochs
    n_min_trials: int = 1  # completed trials needed at an epoch to compare against


@dataclass(frozen=True)
class SHASettings(PrunerSettings):
    """``optuna.pruners.SuccessiveHalvingPruner`` over epochs."""

    min_resource: int = 1  # epochs before the first rung
    reduction_factor: int = 3  # the top 1/reduction_factor of a rung go on
    min_early_stopping_rate: int = 0  # first rung at min_resource * reduction_factor**rate epochs
    bootstrap_count: int = 0  # trials needed at a rung before any is promoted


@dataclass(frozen=True)
class HyperbandSettings(PrunerSettings):
    """``optuna.pruners.HyperbandPruner`` over epochs (``max_resource`` = ``evaluator.epochs``)."""

    min_resource: int = 1
    reduction_factor: int = 3
    bootstrap_count: int = 0


PrunerBuilder = Callable[[Any, int], "optuna.pruners.BasePruner | None"]
_PRUNERS = SettingsRegistry("pruner", PrunerSettings)


def register_pruner(name: str, settings: type[PrunerSettings]) -> Callable[[PrunerBuilder], PrunerBuilder]:
    """Decorator: ``fn(settings, max_resource) -> optuna pruner (or None)`` registered under ``name``.

    Raises:
        TypeError: ``settings`` is not a dataclass subclassing ``PrunerSettings``.
    """
    return _PRUNERS.register_builder(name, settings)


def _check_ints(name: str, s: Any, **lows: int) -> None:
    for k, lo in lows.items():
        v = getattr(s, k)
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"pruner {name}: {k} must be an integer >= {lo}, got {v!r}")


@register_pruner("none", NoPrunerSettings)
def _none(s: NoPrunerSettings, max_resource: int) -> None:
    return None


@register_pruner("median", MedianSettings)
def _median(s: MedianSettings, max_resource: int) -> optuna.pruners.BasePruner:
    _check_ints("median", s, n_startup_trials=0, n_warmup_steps=0, interval_steps=1, n_min_trials=1)
    return optuna.pruners.MedianPruner(n_startup_trials=s.n_startup_trials, n_warmup_steps=s.n_warmup_steps,
                                       interval_steps=s.interval_steps, n_min_trials=s.n_min_trials)


@register_pruner("sha", SHASettings)
def _sha(s: SHASettings, max_resource: int) -> optuna.pruners.BasePruner:
    _check_ints("sha", s, min_resource=1, reduction_factor=2, min_early_stopping_rate=0, bootstrap_count=0)
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=s.min_resource, reduction_factor=s.reduction_factor,
                                                  min_early_stopping_rate=s.min_early_stopping_rate,
                                                  bootstrap_count=s.bootstrap_count)


@register_pruner("hyperband", HyperbandSettings)
def _hyperband(s: HyperbandSettings, max_resource: int) -> optuna.pruners.BasePruner:
    _check_ints("hyperband", s, min_resource=1, reduction_factor=2, bootstrap_count=0)
    if s.min_resource >= max_resource:
        raise ValueError(f"pruner hyperband: min_resource ({s.min_resource}) must be below evaluator.epochs "
                         f"({max_resource}), the largest budget; lower pruner.min_resource or raise evaluator.epochs")
    return optuna.pruners.HyperbandPruner(min_resource=s.min_resource, max_resource=max_resource,
                                          reduction_factor=s.reduction_factor, bootstrap_count=s.bootstrap_count)


def pruner_names() -> list[str]:
    return _PRUNERS.names()


def pruner_settings_class(name: str) -> type[PrunerSettings]:
    return _PRUNERS.settings_class(name)


# --------------------------------------------------------------------------------------------
# the single-objective view


def _intermediate(t: FrozenTrial) -> dict[int, float]:
    raw = t.user_attrs.get(INTERMEDIATE_ATTR) or {}
    return {int(k): float(v) for k, v in raw.items()}


def _score_trial(t: FrozenTrial) -> FrozenTrial:
    """``t`` as a single-objective trial: its accuracy as its value, its epoch accuracies as its
    intermediate values."""
    values = [t.values[0]] if t.values is not None else None
    return FrozenTrial(t.number, t.state, None, t.datetime_start, t.datetime_complete, t.params, t.distributions,
                       t.user_attrs, t.system_attrs, _intermediate(t), t._trial_id, values=values)


def _trained(t: FrozenTrial) -> bool:
    return t.state == TrialState.RUNNING or t.user_attrs.get("status") in _TRAINED


class ScoreView(BaseStorage):
    """A storage seen as a single-objective study (maximise accuracy) for Optuna's pruners.

    Its trials are the trials that trained (evaluated, pruned, or running; over-budget trials were
    never trained and say nothing about accuracy at an epoch), with the ``intermediate`` user
    attribute as intermediate values.  Trial system attributes (the pruners' bookkeeping) are
    written through; every other write is refused: the view never changes the study.
    """

    def __init__(self, storage: BaseStorage) -> None:
        self._inner = storage

    # -- what the pruners read ---------------------------------------------------------------
    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return [StudyDirection.MAXIMIZE]

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return _score_trial(self._inner.get_trial(trial_id))

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return [_score_trial(t) for t in self._inner.get_all_trials(study_id, deepcopy=False, states=states)
                if _trained(t)]

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._inner.set_trial_system_attr(trial_id, key, value)

    def get_study_id_from_name(self, study_name: str) -> int:
        return self._inner.get_study_id_from_name(study_name)

    def get_study_name_from_id(self, study_id: int) -> str:
        return self._inner.get_study_name_from_id(study_id)

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return self._inner.get_study_user_attrs(study_id)

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return self._inner.get_study_system_attrs(study_id)

    def get_all_studies(self) -> list[Any]:
        return self._inner.get_all_studies()

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        return self._inner.get_trial_id_from_study_id_trial_number(study_id, trial_number)

    # -- refused -----------------------------------------------------------------------------
    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise RuntimeError("ScoreView is a read-only view of a study for pruners; write to the study itself")

    create_new_study = delete_study = set_study_user_attr = set_study_system_attr = _refuse  # type: ignore[assignment]
    create_new_trial = set_trial_param = set_trial_state_values = _refuse  # type: ignore[assignment]
    set_trial_intermediate_value = set_trial_user_attr = _refuse  # type: ignore[assignment]


class TrialPruner:
    """An Optuna pruner applied to the search's two-objective study through ``ScoreView``."""

    def __init__(self, name: str, settings: PrunerSettings, pruner: optuna.pruners.BasePruner) -> None:
        self.name, self.settings, self.pruner = name, settings, pruner
        self._views: dict[tuple[int, str], optuna.Study] = {}

    def describe(self) -> str:
        s = ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(self.settings).items())
        return f"{self.name} ({s})" if s else self.name

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **dataclasses.asdict(self.settings)}

    def _view(self, study: optuna.Study, storage: BaseStorage) -> optuna.Study:
        key = (id(storage), study.study_name)
        if key not in self._views:
            self._views[key] = optuna.study.Study(study_name=study.study_name, storage=ScoreView(storage),
                                                  sampler=optuna.samplers.RandomSampler(), pruner=self.pruner)
        return self._views[key]

    def should_prune(self, trial: optuna.Trial) -> bool:
        """Whether the pruner stops ``trial`` now, from the epoch accuracies recorded so far."""
        view = self._view(trial.study, trial.storage)
        frozen = next((t for t in view.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                       if t.number == trial.number), None)
        if frozen is None:
            return False
        return bool(self.pruner.prune(view, frozen))


def pruner_settings(cfg: Mapping[str, Any] | None) -> PrunerSettings:
    """A pruner's settings object from its config group.

    Args:
        cfg: ``{"name": "sha", "reduction_factor": 3}``; None: ``{"name": "none"}``.

    Returns:
        The name's settings dataclass (``SHASettings(reduction_factor=3)``).

    Raises:
        ValueError: an unknown name (listing the pruners) or setting (listing the valid ones).
    """
    return _PRUNERS.read(cfg or {"name": "none"})


def make_pruner(settings: PrunerSettings | Mapping[str, Any] | None, *, max_resource: int) -> TrialPruner | None:
    """The search's pruner.

    Args:
        settings: a pruner's settings object (``pruner_settings``), its config group as a dict, or None
            (no pruning).
        max_resource: the evaluator's epochs.

    Returns:
        A ``TrialPruner``, or None for ``none``.

    Raises:
        ValueError: as ``pruner_settings``; settings of no registered pruner.
    """
    if not dataclasses.is_dataclass(settings):
        settings = pruner_settings(settings)
    name, build = _PRUNERS.builder_for(settings)
    pruner = build(settings, max_resource)
    return None if pruner is None else TrialPruner(name, settings, pruner)


def record_epoch(trial: optuna.Trial, values: dict[int, float]) -> None:
    """Keep the epoch accuracies so far in the trial (``INTERMEDIATE_ATTR``)."""
    trial.set_user_attr(INTERMEDIATE_ATTR, {str(k): float(v) for k, v in sorted(values.items())})


def intermediate_values(t: FrozenTrial) -> dict[int, float]:
    """A trial's epoch accuracies ``{epochs trained: accuracy}`` (empty when it reported none)."""
    return _intermediate(t)

