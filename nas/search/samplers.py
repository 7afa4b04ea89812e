"""Optuna samplers by name: a settings dataclass (the config schema) and a seeded builder for each.

Every sampler is wrapped in a ``TrialSeededSampler``: before each trial its random state is reseeded
from ``(seed, trial number)``.  Trial numbers are unique in a study and handed out by the storage,
so a resumed or extended study continues where it stopped instead of replaying its first draws,
and workers sharing a study draw distinct streams without choosing seeds, while one worker on a
fresh study with the same seed proposes the same sequence.
"""

from __future__ import annotations

import dataclasses
import hashlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna
from optuna.samplers._lazy_random_state import LazyRandomState

from nas.registry import SettingsRegistry

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.study import Study
    from optuna.trial import FrozenTrial, TrialState

__all__ = [
    "NSGA2Settings",
    "RandomSettings",
    "SamplerSettings",
    "TPESettings",
    "TrialSeededSampler",
    "make_sampler",
    "sampler_settings",
    "register_sampler",
    "sampler_names",
    "sampler_settings_class",
]

SamplerBuilder = Callable[..., optuna.samplers.BaseSampler]


@dataclass(frozen=True)
class SamplerSettings:
    """The base of every sampler's settings (``sampler_settings`` reads one from its config group)."""


@dataclass(frozen=True)
class NSGA2Settings(SamplerSettings):
    """NSGA-II (constrained domination); categorical parameters use uniform crossover."""

    population_size: int = 12
    mutation_prob: float | None = None  # None: 1 / number of parameters
    crossover_prob: float = 0.9
    swapping_prob: float = 0.5


@dataclass(frozen=True)
class TPESettings(SamplerSettings):
    """Multi-objective TPE; ``multivariate`` models the parameters jointly."""

    n_startup_trials: int = 10
    multivariate: bool = True
    constant_liar: bool = True  # parallel workers avoid proposing what others are running
    n_ei_candidates: int = 24


@dataclass(frozen=True)
class RandomSettings(SamplerSettings):
    """Uniform random sampling: the baseline."""


_SAMPLERS = SettingsRegistry("sampler", SamplerSettings)


def register_sampler(name: str, settings: type[SamplerSettings]) -> Callable[[SamplerBuilder], SamplerBuilder]:
    """Decorator: ``fn(settings, seed) -> sampler`` registered under ``name`` with its settings class.

    Raises:
        TypeError: ``settings`` is not a dataclass subclassing ``SamplerSettings``.
    """
    return _SAMPLERS.register_builder(name, settings)


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
    with warnings.catch_warnings():  # multivariate / constant_liar are marked experimental in some versions
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(n_startup_trials=s.n_startup_trials, multivariate=s.multivariate,
                                          constant_liar=s.constant_liar, n_ei_candidates=s.n_ei_candidates,
                                          seed=seed)


@register_sampler("random", RandomSettings)
def _random(s: RandomSettings, seed: int) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=seed)




def sampler_names() -> list[str]:
    return _SAMPLERS.names()


def sampler_settings_class(name: str) -> type[SamplerSettings]:
    return _SAMPLERS.settings_class(name)


def sampler_settings(cfg: Mapping[str, Any]) -> SamplerSettings:
    """A sampler's settings object from its config group.

    Args:
        cfg: ``{"name": "nsga2", "population_size": 16}``: the name and any of its settings.

    Returns:
        The name's settings dataclass (``NSGA2Settings(population_size=16)``).

    Raises:
        ValueError: an unknown name (listing the samplers) or setting (listing the valid ones).
    """
    return _SAMPLERS.read(cfg)


def make_sampler(settings: SamplerSettings | Mapping[str, Any], *, seed: int) -> optuna.samplers.BaseSampler:
    """A seeded Optuna sampler.

    Args:
        settings: a sampler's settings object (``sampler_settings``), or its config group as a dict.
        seed: the sampler's seed (each trial's draws are seeded from it and the trial's number).

    Returns:
        The sampler, wrapped so that a trial's draws depend on the seed and its number only.

    Raises:
        ValueError: as ``sampler_settings``; settings of no registered sampler.
    """
    if not dataclasses.is_dataclass(settings):
        settings = sampler_settings(settings)
    name, build = _SAMPLERS.builder_for(settings)
    return TrialSeededSampler(build(settings, seed), seed=seed)


def _random_states(obj: Any, seen: set[int] | None = None) -> list[Any]:
    """The ``LazyRandomState`` objects an Optuna sampler draws from (its own and its inner samplers')."""
    seen = set() if seen is None else seen
    out = []
    for v in vars(obj).values():
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, LazyRandomState):
            out.append(v)
        elif isinstance(v, optuna.samplers.BaseSampler):
            out.extend(_random_states(v, seen))
    return out


class TrialSeededSampler(optuna.samplers.BaseSampler):
    """An Optuna sampler whose random state is reseeded from ``(seed, trial number)`` before each trial.

    Optuna samplers keep one random stream per process, so a restarted process replays its first
    draws (a resumed study re-proposes what it already scored) and two workers with one seed propose
    the same architectures.  No Optuna option ties the stream to the trial; this wrapper does, for
    every sampler built here.  The sampler's own model (TPE's densities, NSGA-II's population) still
    comes from the study's history, so only the random draws change.
    """

    def __init__(self, sampler: optuna.samplers.BaseSampler, *, seed: int) -> None:
        self.sampler, self.seed = sampler, int(seed)
        self._states = _random_states(sampler)

    def __str__(self) -> str:
        return f"{self.sampler} (reseeded per trial from seed {self.seed})"

    def reseed_for(self, number: int) -> None:
        for i, st in enumerate(self._states):
            h = hashlib.sha256(f"{self.seed}:{number}:{i}".encode()).digest()
            st.rng.seed(int.from_bytes(h[:4], "little"))

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self.reseed_for(trial.number)
        self.sampler.before_trial(study, trial)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.sampler.infer_relative_search_space(study, trial)

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self.sampler.sample_relative(study, trial, search_space)

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self.sampler.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self.sampler.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.sampler.reseed_rng()
