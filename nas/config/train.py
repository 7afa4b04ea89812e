"""Hydra schemas of ``python -m nas.train`` and ``python -m nas.export``, registered in the ConfigStore.

The groups mirror the library's settings (``nas.train.pipeline``): ``train`` (full training),
``prune`` (latency-aware structured pruning + fine-tuning), ``qat`` (fake-quant fine-tuning),
``export`` (ONNX, PTQ baseline, verification, latency measurement).  A typo or a wrong type fails
when the config is composed; values are checked again by the library (``ValueError`` naming the
field, the value and what is allowed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from nas.config import TargetConfig, register_configs

__all__ = [
    "ExportAppConfig",
    "ExportConfig",
    "PrecisionTargets",
    "PruneConfig",
    "QATConfig",
    "TrainAppConfig",
    "TrainConfig",
    "register_train_configs",
]


@dataclass
class TrainConfig:
    """Full training of each selected architecture (from scratch)."""

    epochs: int = 30
    batch_size: int = 128
    optimizer: str = "adamw"  # adamw | sgd
    lr: float = 0.005
    weight_decay: float = 0.05  # not applied to norms and biases
    momentum: float = 0.9  # sgd only
    label_smoothing: float = 0.1
    warmup_epochs: float = 1.0  # linear warm-up, then cosine decay to zero
    grad_clip: float | None = 5.0
    eval_batch_size: int = 512
    bn_recalibration_batches: int = 8  # BN statistics re-estimated with each epoch's final weights


@dataclass
class PruneConfig:
    """Latency-aware structured pruning of the trained network, then fine-tuning."""

    enabled: bool = True
    target_ms: float | None = None  # predicted latency to reach; null: ratio x the unpruned prediction
    ratio: float = 0.7
    criterion: str = "loss"  # loss (measured loss change; can also drop SE / residual blocks) | l1 | bn | taylor
    multiple: int | None = None  # channel group; null: the search space's channel_multiple
    min_keep: float = 0.25  # every layer keeps at least this share of its channels
    lookahead: int = 4  # each step tries a layer 1..lookahead channel groups narrower
    measure_steps: int = 3  # target is this machine: re-plan until measured <= ratio x unpruned (0: predicted)
    taylor_batches: int = 16  # training batches for the taylor criterion
    loss_samples: int = 512  # training images the loss criterion measures each candidate step on
    structural: bool = True  # loss criterion: steps may also drop a squeeze-excite or a residual block
    epochs: int = 10  # fine-tuning
    lr: float = 0.002
    distill: float = 0.0  # fine-tune with knowledge distillation from the unpruned network (weight of the KD term)
    temperature: float = 4.0  # distillation temperature


@dataclass
class QATConfig:
    """Quantization-aware fine-tuning (BN folded, int8 fake quantization)."""

    enabled: bool = True
    epochs: int = 4
    lr: float = 0.0005
    freeze_epochs: int = 1  # the last epochs train with frozen activation ranges
    reduce_range: bool = True  # 7-bit weights, as nas.export.onnx.QDQ_SETTINGS (the PTQ baseline)
    ema: float = 0.01  # activation range EMA momentum
    calib_batches: int = 16  # training batches for the initial min/max ranges
    distill: float = 0.0  # knowledge distillation from the fp32 (unpruned) network: weight of the KD term
    temperature: float = 4.0  # distillation temperature


@dataclass
class ExportConfig:
    """ONNX export, the PTQ baseline, verification and latency measurement."""

    calib_samples: int = 256  # training images calibrating onnxruntime's PTQ baseline
    eval_samples: int | None = None  # test images the ONNX models are scored on (null: all)
    measure: bool = True  # measure latency when the target is this machine
    rounds: int = 3  # measurement rounds (fresh session each), median of rounds
    warmup: int = 10
    repeats: int = 50
    min_time_s: float = 0.1


@dataclass
class PrecisionTargets:
    """Targets (names in conf/conf/) predicting each exported precision; null: conf itself when its
    precision matches, else its sibling by name (cpu <-> cpu_int8), if that file exists."""

    fp32: str | None = None
    int8: str | None = None


@dataclass
class TrainAppConfig:
    """``python -m nas.train conf=<target> run=<search run dir> [select=...] [epochs=...]``."""

    target: TargetConfig = MISSING
    run: str = MISSING  # a search run dir (pareto.json)
    select: Any = "all"  # all | an index | a list of indices into pareto.json's front
    max_ms: float | None = None  # only architectures predicted at or under this latency (ms)
    epochs: int | None = None  # overrides train.epochs
    out: str | None = None  # null: <run>/train
    data_root: str | None = None  # where the dataset is, if not where the search found it
    train_samples: int | None = None  # training images (null: all; the search may have subsampled)
    seed: int = 0
    allow_mismatch: bool = False
    train: TrainConfig = field(default_factory=TrainConfig)
    prune: PruneConfig = field(default_factory=PruneConfig)
    qat: QATConfig = field(default_factory=QATConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    targets: PrecisionTargets = field(default_factory=PrecisionTargets)


@dataclass
class ExportAppConfig:
    """``python -m nas.export arch=<arch.json> weights=<ckpt> precision=fp32|int8 [out=...]``."""

    target: TargetConfig = MISSING
    arch: str = MISSING
    weights: str = MISSING
    precision: str = "fp32"  # fp32 | int8
    out: str | None = None  # null: beside the weights, <stem>.<precision>.onnx (+ .json report)
    data: Any = None  # group `data` (data=fashion_mnist): calibration / verification images; null: the checkpoint's
    verify_samples: int = 500
    overwrite: bool = False
    allow_mismatch: bool = False
    export: ExportConfig = field(default_factory=ExportConfig)


def register_train_configs() -> None:
    from nas.config.search import register_search_configs

    register_configs()
    register_search_configs()  # the `data` group's schema: nas.export data=<dataset>
    cs = ConfigStore.instance()
    cs.store(name="_train_schema", node=TrainAppConfig)
    cs.store(name="_export_schema", node=ExportAppConfig)
