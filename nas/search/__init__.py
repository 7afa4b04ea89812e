"""Search: the Optuna study (samplers, storage, budgets as constraints), the evaluators and the results.

    study.py      the loop (run_search: ask / tell, repeats skipped) and prepare_search
    objective.py  SearchProblem (one trial), Budgets, TrialOutcome, DuplicateArch
    samplers.py   sampler settings, the sampler registry (make_sampler), per-trial reseeding
    storage.py    Optuna storages (journal, RDB, Redis), open_study, stale trials, redact_url
    journal.py    journal file checks, the OS lock, repair_journal (python -m nas.repair)
    rundir.py     one run dir, one study (run.json)
    results.py    trial records, the Pareto front, trials.csv / pareto.json / pareto.png
    uncertainty.py  each accuracy's interval, front neighbours within noise, the baseline to beat
    evaluate.py   evaluators: short training, zero-cost proxies

The names below are imported on first use, so importing ``nas.search.evaluate`` does not load the study.
"""

from __future__ import annotations

from nas._lazy import lazy_exports

_HOMES = {
    "Budgets": "budget",
    "DuplicateArch": "objective",
    "Search": "study",
    "SearchAborted": "study",
    "SearchProblem": "objective",
    "SearchReport": "study",
    "TrialOutcome": "objective",
    "count_trials": "study",
    "TrialProgress": "progress",
    "fmt_score": "progress",
    "NOT_RUN": "results",
    "Baseline": "uncertainty",
    "baseline_to_beat": "uncertainty",
    "noise_neighbours": "uncertainty",
    "SHORT_HOW": "results",
    "latency_how": "results",
    "short_how": "results",
    "prepare_search": "study",
    "requeue_interrupted": "study",
    "run_search": "study",
    "Evaluator": "evaluate",
    "make_evaluator": "evaluate",
    "NSGA2Settings": "samplers",
    "RandomSettings": "samplers",
    "TPESettings": "samplers",
    "make_sampler": "samplers",
    "register_sampler": "samplers",
    "sampler_names": "samplers",
    "sampler_settings_class": "samplers",
    "fail_stale_trials": "storage",
    "lost_storage": "storage",
    "make_storage": "storage",
    "storage_description": "storage",
    "open_study": "storage",
    "redact_url": "storage",
    "check_journal": "journal",
    "repair_journal": "journal",
    "RunDirTaken": "rundir",
    "starting_in": "rundir",
    "pareto_front": "results",
    "plot_pareto": "results",
    "trial_records": "results",
    "write_outputs": "results",
}

__all__ = sorted(_HOMES)


__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
