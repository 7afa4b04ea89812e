"""Hydra schema of ``python -m nas.supernet``, registered in the ConfigStore.

The ``train`` group is generated from ``nas.supernet.settings.SupernetSettings`` (names, types and
defaults written once); ``data`` is the search's dataset group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from nas.config.schema import TargetConfig, schema_from
from nas.config.search import register_search_configs
from nas.supernet.settings import SupernetSettings

__all__ = ["SupernetAppConfig", "SupernetTrainConfig", "register_supernet_configs"]

SupernetTrainConfig = schema_from(SupernetSettings, schema_name="SupernetTrainConfig")
SupernetTrainConfig.__module__ = __name__


@dataclass
class SupernetAppConfig:
    """``python -m nas.supernet conf=<target> search_space=<space> data=<dataset> [epochs=N] [out=<dir>]``."""

    target: TargetConfig = MISSING  # recorded only: one supernet serves the searches of every target
    data: Any = MISSING  # the dataset: data=<name> (listed above); data.<key>=<value> for one of its values
    search_space: str = "tiny"  # a name in search_spaces/ or a path to a YAML space
    epochs: int | None = None  # overrides train.epochs
    out: str = MISSING  # conf/supernet.yaml: runs/supernet/<data>-<space>; re-run with the same out= to resume
    train: SupernetTrainConfig = field(default_factory=SupernetTrainConfig)  # the supernet's training: train.<key>=


def register_supernet_configs() -> None:
    register_search_configs()  # the `data` group's schema
    ConfigStore.instance().store(name="_supernet_schema", node=SupernetAppConfig)
