"""Search: the Optuna study (samplers, storage, budgets as constraints), the evaluators and the results.

    study.py      SearchProblem (one trial), run_search, prepare_search, Budgets
    samplers.py   sampler settings and the sampler registry (make_sampler)
    storage.py    Optuna storages (journal, RDB, Redis), open_study, stale trials
    results.py    trial records, the Pareto front, trials.csv / pareto.json / pareto.png
    evaluate.py   evaluators: short training, zero-cost proxies

The names below are imported on first use, so importing ``nas.search.evaluate`` does not load the study.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "Budgets": "study",
    "Search": "study",
    "SearchAborted": "study",
    "SearchProblem": "study",
    "SearchReport": "study",
    "TrialOutcome": "study",
    "count_trials": "study",
    "prepare_search": "study",
    "run_search": "study",
    "NSGA2Settings": "samplers",
    "RandomSettings": "samplers",
    "TPESettings": "samplers",
    "make_sampler": "samplers",
    "register_sampler": "samplers",
    "sampler_names": "samplers",
    "sampler_settings_class": "samplers",
    "fail_stale_trials": "storage",
    "make_storage": "storage",
    "open_study": "storage",
    "pareto_front": "results",
    "plot_pareto": "results",
    "trial_records": "results",
    "write_outputs": "results",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'nas.search' has no attribute {name!r}")
    return getattr(importlib.import_module(f"nas.search.{home}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
