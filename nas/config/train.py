"""Hydra schema of ``python -m nas.train``, registered in the ConfigStore.

The group schemas are generated from the library's settings dataclasses (``nas.train.settings``),
so names, types and defaults are written once: ``train`` (``nas.fit.settings.FitSettings``: full training), ``prune``
(``PruneSettings``: latency-aware structured pruning + fine-tuning), ``qat`` (``QATSettings``:
fake-quant fine-tuning), ``export`` (``ExportSettings``: ONNX, PTQ baseline, verification, latency
measurement; ``nas.export``'s too), ``targets`` (``TargetNames``).  A typo or a wrong type fails when the config is
composed; values are checked again by the dataclasses (``ValueError`` naming the field, the value
and what is allowed).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from nas.config.common import register_configs
from nas.config.schema import TargetConfig, defaults_of, schema_from
from nas.data.settings import DataSettings
from nas.fit.settings import FitSettings
from nas.train.settings import (
    TRAIN_DATA_FIELDS,
    ExportSettings,
    PipelineSettings,
    PruneSettings,
    QATSettings,
    TargetNames,
)

__all__ = [
    "ExportConfig",
    "PrecisionTargets",
    "PruneConfig",
    "QATConfig",
    "TrainAppConfig",
    "TrainConfig",
    "TrainDataConfig",
    "register_train_configs",
    "train_latency_budget",
]


TrainConfig = schema_from(FitSettings, schema_name="TrainConfig")
PruneConfig = schema_from(PruneSettings, schema_name="PruneConfig")
QATConfig = schema_from(QATSettings, schema_name="QATConfig")
ExportConfig = schema_from(ExportSettings, schema_name="ExportConfig")
PrecisionTargets = schema_from(TargetNames, schema_name="PrecisionTargets")
#: nas.train's ``data``: the search decides the dataset, its split and its images; of DataSettings only
#: what changes no result (how many processes read the images) may be set here
TrainDataConfig = schema_from(DataSettings, schema_name="TrainDataConfig",
                              exclude=tuple(n for n in DataSettings.__dataclass_fields__ if n not in TRAIN_DATA_FIELDS))
for _s in (TrainConfig, PruneConfig, QATConfig, ExportConfig, PrecisionTargets, TrainDataConfig):
    _s.__module__ = __name__


@dataclass
class TrainAppConfig:
    """``python -m nas.train conf=<target> run=<search run dir> [select=...] [epochs=...]``."""

    target: TargetConfig = MISSING
    run: str = MISSING  # a search run dir (pareto.json)
    select: Any = defaults_of(PipelineSettings)["select"]  # all | an index | a list of indices into pareto.json's front
    latency_budget_ms: float | None = None  # only architectures predicted at or under this latency (ms)
    max_ms: float | None = None  # the former name of latency_budget_ms (accepted, with a warning)
    epochs: int | None = None  # overrides train.epochs
    out: str | None = None  # null: <run>/train
    data_root: str | None = None  # where the dataset is, if not where the search found it
    train_samples: int | None = None  # training images (null: all; the search may have subsampled)
    resolution: int | None = None  # px trained and exported at (null: the search's deployment resolution)
    seed: int = defaults_of(PipelineSettings)["seed"]  # training seed
    allow_mismatch: bool = False  # use a table whose metadata (device, runtime, precision, ...) does not match the target anyway
    supernet: str | None = None  # a supernet.ckpt: start every network from its inherited weights, then fine-tune
    wait: bool = False  # another nas.train writing the same folder: wait for it to end (false: refuse at once)
    # the search's dataset, read with data.num_workers processes (docs/data.md); the rest is the search's
    data: TrainDataConfig = field(default_factory=TrainDataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)  # the training: train.<key>=<value>
    prune: PruneConfig = field(default_factory=PruneConfig)  # latency-guided pruning: prune.<key>=<value>
    qat: QATConfig = field(default_factory=QATConfig)  # quantization-aware training: qat.<key>=<value>
    export: ExportConfig = field(default_factory=ExportConfig)  # the ONNX exports: export.<key>=<value>
    # the target predicting each exported precision: targets.fp32= / targets.int8= (null: the target or its sibling)
    targets: PrecisionTargets = field(default_factory=PrecisionTargets)



def register_train_configs() -> None:
    register_configs()
    ConfigStore.instance().store(name="_train_schema", node=TrainAppConfig)


def train_latency_budget(c: Mapping[str, Any]) -> float | None:
    """``nas.train``'s latency budget from its config: ``latency_budget_ms``, or the former ``max_ms``
    with a ``FutureWarning``.

    Raises:
        ValueError: both names given.
    """
    if c.get("max_ms") is None:
        return c.get("latency_budget_ms")
    if c.get("latency_budget_ms") is not None:
        raise ValueError("max_ms is the former name of latency_budget_ms: give latency_budget_ms only")
    warnings.warn("nas.train max_ms= is now latency_budget_ms= (the search's name); max_ms= still works for now",
                  FutureWarning, stacklevel=2)
    return c["max_ms"]
