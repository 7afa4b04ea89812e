"""Hydra schema of ``python -m nas.validate``, registered in the ConfigStore (``_validate_schema``, the defaults list of
``conf/validate.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from nas.config.common import register_configs
from nas.config.schema import TargetConfig, ValidateMeasureConfig
from nas.latency.profile import REFRESH, VALIDATE

__all__ = ["ValidateAppConfig", "register_validate_configs"]


@dataclass
class ValidateAppConfig:
    """``python -m nas.validate conf=<target> [n=200] [models=[timm:a,...]] [out=report.json]``."""

    target: TargetConfig = MISSING
    search_space: Any = None  # a name / path or a list; None = every shipped space
    n: int = VALIDATE.n  # held-out architectures in all, split evenly over the spaces
    pruned: int = VALIDATE.pruned  # + this many held-out networks narrowed as nas.train's pruning narrows them
    models: list[str] | None = None  # timm:<name> models or Arch JSON files to validate on as well (or instead: n=0)
    resolution: int | None = None  # input resolution of the held-out networks (null: the target's / the space's)
    out: str = VALIDATE.out  # + .png scatter plot and a measurement cache beside it
    seed: int = VALIDATE.seed  # seed of the held-out networks (apart from the calibration networks' seeds)
    drift_anchors: int = VALIDATE.drift_anchors  # calibration networks per space re-measured beside the held-out set; 0 = none
    recalibrate: bool = False  # re-measure every calibration network and score the predictor calibrated on them
    # on the table's own machine, re-time a few of its calibration networks before measuring and score the
    # predictor rescaled by how fast they run now, as nas.search / nas.predict use it (false: as measured)
    retime: bool = REFRESH.retime
    # a device bundle's results.json (written with held_out=N): score on the networks it measured, measure nothing
    bundle: str | None = None
    allow_mismatch: bool = False  # use a table whose metadata (device, runtime, precision, ...) does not match the target anyway
    progress: bool = True  # a progress bar while measuring (false: none)
    profile: ValidateMeasureConfig = field(default_factory=ValidateMeasureConfig)  # how each network is timed: profile.<key>=<value>


def register_validate_configs() -> None:
    """Store the shared schemas and ``_validate_schema`` in Hydra's ConfigStore (idempotent)."""
    register_configs()
    ConfigStore.instance().store(name="_validate_schema", node=ValidateAppConfig)
