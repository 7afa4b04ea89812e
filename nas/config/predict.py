"""Hydra schema of ``python -m nas.predict``, registered in the ConfigStore (``_predict_schema``, the defaults list of
``conf/predict.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from nas.config.common import register_configs
from nas.config.schema import TargetConfig
from nas.latency.profile import REFRESH

__all__ = ["PredictAppConfig", "register_predict_configs"]


@dataclass
class PredictAppConfig:
    """``python -m nas.predict conf=<target> arch=<arch.json> | model=timm:<name>``."""

    target: TargetConfig = MISSING
    arch: str | None = None  # an Arch JSON file
    model: str | None = None  # timm:<name>, converted with nas.from_timm.from_timm
    resolution: int | None = None  # default: the target's deployment resolution, else the Arch's own
    breakdown: bool = False  # print a per-layer table: time, share, the roofline's verdict, achieved GFLOP/s and GB/s
    breakdown_png: str = "breakdown.png"  # with breakdown=true: the per-layer bar chart's file
    allow_mismatch: bool = False  # use a table whose metadata (device, runtime, precision, ...) does not match the target anyway
    # on the table's own machine, re-time a few of its calibration networks first and rescale the
    # prediction by how fast they run now (a few seconds; false: the table as measured)
    retime: bool = REFRESH.retime


def register_predict_configs() -> None:
    """Store the shared schemas and ``_predict_schema`` in Hydra's ConfigStore (idempotent)."""
    register_configs()
    ConfigStore.instance().store(name="_predict_schema", node=PredictAppConfig)
