"""Hydra schemas of ``python -m nas.search`` and its groups, registered in the ConfigStore.

The group schemas are generated from the library's own settings dataclasses
(``nas.data.DataSettings``, the evaluators' settings in ``nas.search.evaluator_settings``, the
sampler settings in ``nas.search.samplers``, the pruner settings in ``nas.search.pruners``), plus a
``name`` field, so names, types and defaults live in one place; a typo or a wrong type in any group
fails when the config is composed.  Group options (``conf/data/*.yaml``, ``conf/evaluator/*.yaml``,
``conf/sampler/*.yaml``, ``conf/pruner/*.yaml``) start from these schemas.  None of these modules
loads torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

import nas.search  # make_evaluator through the package's lazy exports: composing a config loads no torch
from nas.config.common import register_configs
from nas.config.schema import TargetConfig, schema_from
from nas.data.settings import DataSettings
from nas.latency.profile import REFRESH
from nas.search.budget import Budgets
from nas.search.evaluator_settings import (
    MAX_CONSECUTIVE_FAILURES,
    SupernetEvaluatorSettings,
    TrainEvaluatorSettings,
    ZeroCostEvaluatorSettings,
)
from nas.search.pruners import (
    HyperbandSettings,
    MedianSettings,
    NoPrunerSettings,
    PrunerSettings,
    SHASettings,
    pruner_settings,
)
from nas.search.samplers import NSGA2Settings, RandomSettings, SamplerSettings, TPESettings, sampler_settings
from nas.target import Target

if TYPE_CHECKING:
    from nas.search.evaluate import Evaluator

__all__ = [
    "DataConfig",
    "HyperbandPrunerConfig",
    "MedianPrunerConfig",
    "NoPrunerConfig",
    "NSGA2SamplerConfig",
    "RandomSamplerConfig",
    "SHAPrunerConfig",
    "SearchAppConfig",
    "SupernetEvaluatorConfig",
    "TPESamplerConfig",
    "TrainEvaluatorConfig",
    "ZeroCostEvaluatorConfig",
    "SearchInputs",
    "register_search_configs",
    "search_inputs",
]


DataConfig = schema_from(DataSettings, schema_name="DataConfig")
TrainEvaluatorConfig = schema_from(TrainEvaluatorSettings, name="train", schema_name="TrainEvaluatorConfig")
SupernetEvaluatorConfig = schema_from(SupernetEvaluatorSettings, name="supernet", schema_name="SupernetEvaluatorConfig")
ZeroCostEvaluatorConfig = schema_from(ZeroCostEvaluatorSettings, name="zero_cost", schema_name="ZeroCostEvaluatorConfig")
NSGA2SamplerConfig = schema_from(NSGA2Settings, name="nsga2", schema_name="NSGA2SamplerConfig")
TPESamplerConfig = schema_from(TPESettings, name="tpe", schema_name="TPESamplerConfig")
RandomSamplerConfig = schema_from(RandomSettings, name="random", schema_name="RandomSamplerConfig")
NoPrunerConfig = schema_from(NoPrunerSettings, name="none", schema_name="NoPrunerConfig")
MedianPrunerConfig = schema_from(MedianSettings, name="median", schema_name="MedianPrunerConfig")
SHAPrunerConfig = schema_from(SHASettings, name="sha", schema_name="SHAPrunerConfig")
HyperbandPrunerConfig = schema_from(HyperbandSettings, name="hyperband", schema_name="HyperbandPrunerConfig")
_PRUNER_SCHEMAS = {"none": NoPrunerConfig, "median": MedianPrunerConfig, "sha": SHAPrunerConfig,
                   "hyperband": HyperbandPrunerConfig}


@dataclass
class SearchAppConfig:
    """``python -m nas.search conf=<target> [search_space=..] [data=..] [evaluator=..] [sampler=..] ...``."""

    target: TargetConfig = MISSING
    data: Any = MISSING  # the dataset: data=<name> (listed above); data.<key>=<value> for one of its values
    evaluator: Any = MISSING  # how a trial is scored: evaluator=<name> (listed above); evaluator.<key>=<value>
    sampler: Any = MISSING  # Optuna's sampler: sampler=<name> (listed above); sampler.<key>=<value>
    pruner: Any = MISSING  # stops hopeless trials early (evaluator=train only): pruner=<name> (listed above)
    search_space: str = "tiny"  # a name in search_spaces/ or a path to a YAML space
    n_trials: int = 36  # the study's total (a re-run resumes up to it)
    latency_budget_ms: float | None = None  # conf/search.yaml: the target's; null = no latency constraint
    memory_budget_kb: float | None = None  # peak activation memory (KiB); null = no constraint
    seed: int = 0  # sampler seed; for a new study also the training seed (kept in the study)
    storage: str | None = None  # null: <out>/study.journal; or a journal path, or an Optuna storage URL
    study_name: str | None = None  # null: <space>-<data>-<target>
    out: str = MISSING  # the run dir (conf/search.yaml: runs/search/<date>_<time>)
    allow_mismatch: bool = False  # use a latency table whose metadata does not match the target
    # on the table's own machine, re-time a few of the space's calibration networks first and rescale the
    # predictions by how fast they run now (a few seconds; false: the table as measured)
    retime: bool = REFRESH.retime
    progress: bool = True  # a progress bar over the trials (false: a line per failed trial only)
    max_consecutive_failures: int = MAX_CONSECUTIVE_FAILURES  # stop when this many trials in a row fail (0: never)
    supernet: str | None = None  # evaluator=supernet: the supernet checkpoint (python -m nas.supernet)


def register_search_configs() -> None:
    register_configs()
    cs = ConfigStore.instance()
    cs.store(name="_search_schema", node=SearchAppConfig)
    cs.store(name="_data_schema", node=DataConfig)
    cs.store(name="_evaluator_train_schema", node=TrainEvaluatorConfig)
    cs.store(name="_evaluator_zero_cost_schema", node=ZeroCostEvaluatorConfig)
    cs.store(name="_evaluator_supernet_schema", node=SupernetEvaluatorConfig)
    cs.store(name="_sampler_nsga2_schema", node=NSGA2SamplerConfig)
    cs.store(name="_sampler_tpe_schema", node=TPESamplerConfig)
    cs.store(name="_sampler_random_schema", node=RandomSamplerConfig)
    for name, node in _PRUNER_SCHEMAS.items():
        cs.store(name=f"_pruner_{name}_schema", node=node)


@dataclass(frozen=True)
class SearchInputs:
    """A composed search config as the library takes it (``nas.search.study.prepare_search``)."""

    target: Target
    data: DataSettings
    evaluator: Evaluator  # made by nas.search.make_evaluator (loaded with the first search_inputs)
    sampler: SamplerSettings  # NSGA2Settings, TPESettings, RandomSettings
    pruner: PrunerSettings  # NoPrunerSettings, MedianSettings, SHASettings, HyperbandSettings
    budgets: Budgets  # latency_budget_given: the user set latency_budget_ms (else it is the target's own)


def search_inputs(cfg: DictConfig) -> SearchInputs:
    """The library's objects from a composed ``search`` config: the one place a search's config becomes
    the dataclasses its schema was generated from.

    Args:
        cfg: the composed config (``compose_app("search", ...)`` or the command's).

    Returns:
        The ``SearchInputs``.

    Raises:
        ValueError: a value the library's checks refuse (named with the value and what is allowed).
    """
    def plain(node: Any) -> dict[str, Any]:
        return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]

    return SearchInputs(
        target=Target.coerce(cfg.target),
        data=DataSettings.from_dict(plain(cfg.data)),
        evaluator=nas.search.make_evaluator(plain(cfg.evaluator)),
        sampler=sampler_settings(plain(cfg.sampler)),
        pruner=pruner_settings(plain(cfg.pruner)),
        # latency_budget_ms still the reference conf/search.yaml sets (${target.latency_budget_ms}): the target's own
        budgets=Budgets(latency_budget_ms=cfg.latency_budget_ms, memory_budget_kb=cfg.memory_budget_kb,
                        latency_budget_given=not OmegaConf.is_interpolation(cfg, "latency_budget_ms")),
    )
