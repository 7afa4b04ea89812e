"""Hydra schema of ``python -m nas.export``, registered in the ConfigStore (``_export_schema``).

Its ``export`` group is ``nas.train``'s (``nas.config.train.ExportConfig``): one export, the same settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from nas.config.schema import TargetConfig
from nas.config.search import register_search_configs
from nas.config.train import ExportConfig
from nas.train.settings import VERIFY_SAMPLES

__all__ = ["ExportAppConfig", "register_export_configs"]


@dataclass
class ExportAppConfig:
    """``python -m nas.export weights=<ckpt> [arch=<arch.json>] precision=fp32|int8 [out=...]``."""

    target: TargetConfig | None = None  # conf=<target>; null: the target the checkpoint records (nas.train's)
    arch: str | None = None  # Arch file (JSON/YAML, or a nas.train record holding one); null: the checkpoint's
    weights: str = MISSING  # the checkpoint to export (a .pt file of nas.train, or a state dict)
    precision: str = "fp32"  # fp32 | int8
    format: str = "onnx"  # onnx | pte (ExecuTorch, XNNPACK) | openvino (OpenVINO IR .xml + .bin) | tflite (LiteRT, NHWC)
    out: str | None = None  # null: beside the weights, <stem>.<precision>.onnx|.pte|.xml (+ .json report)
    data: Any = None  # group `data` (data=fashion_mnist): calibration / verification images; null: the checkpoint's
    data_root: str | None = None  # the data's folder, over the checkpoint's (or the data group's)
    verify_samples: int = VERIFY_SAMPLES  # images the export is checked on against torch
    overwrite: bool = False  # replace an existing out= file
    allow_mismatch: bool = False  # use a table whose metadata (device, runtime, precision, ...) does not match the target anyway
    export: ExportConfig = field(default_factory=ExportConfig)  # the export's settings: export.<key>=<value>


def register_export_configs() -> None:
    """Store the shared schemas, the ``data`` group's and ``_export_schema`` in Hydra's ConfigStore (idempotent)."""
    register_search_configs()  # the `data` group's schema: nas.export data=<dataset>
    ConfigStore.instance().store(name="_export_schema", node=ExportAppConfig)
