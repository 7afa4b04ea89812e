"""Hydra schema of ``python -m nas.space``, registered in the ConfigStore (``_space_schema``, the defaults list of
``conf/space.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore

from nas.config.common import register_configs

__all__ = ["SpaceAppConfig", "register_space_configs"]


@dataclass
class SpaceAppConfig:
    """``python -m nas.space``: summarise the shipped spaces or one space."""

    search_space: str | None = None  # a name in search_spaces/ or a YAML path; None = all
    samples: int = 200  # seeded sample for the params / MACs statistics
    seed: int = 0  # the sample's seed


def register_space_configs() -> None:
    """Store the shared schemas and ``_space_schema`` in Hydra's ConfigStore (idempotent)."""
    register_configs()
    ConfigStore.instance().store(name="_space_schema", node=SpaceAppConfig)
