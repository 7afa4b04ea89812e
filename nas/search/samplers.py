"""Optuna samplers by name: a settings dataclass (the config schema) and a seeded builder for each."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna

from nas.registry import Registry

__all__ = [
    "NSGA2Settings",
    "RandomSettings",
    "TPESettings",
    "make_sampler",
    "register_sampler",
    "sampler_names",
    "sampler_settings_class",
]

SamplerBuilder = Callable[..., optuna.samplers.BaseSampler]

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


_SAMPLERS: Registry[tuple[type, SamplerBuilder]] = Registry("sampler")


def register_sampler(name: str, settings: type) -> Callable[[SamplerBuilder], SamplerBuilder]:
    """Decorator: ``fn(settings, seed) -> sampler`` registered under ``name`` with its settings class."""

    def deco(fn: SamplerBuilder) -> SamplerBuilder:
        _SAMPLERS.add(name, (settings, fn))
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


def sampler_settings_class(name: str) -> type:
    try:
        return _SAMPLERS[name][0]
    except ValueError as e:
        raise ValueError(f"sampler.name: {e}") from None


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
