"""Settings of ``python -m nas.train`` / ``nas.export``: one frozen dataclass per stage.

These are the one source of names, types and defaults: the Hydra schemas (``nas.config.train``)
are generated from them; ``train.*``, one training run's, is ``nas.fit.settings.FitSettings``.  Each
validates itself in ``__post_init__`` (``ValueError`` naming the field, the value and what is allowed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nas._checks import check_number, check_resolution
from nas.compress import CRITERIA
from nas.compress.quant_settings import QuantSettings
from nas.data.settings import DataSettings
from nas.fit.settings import FitSettings
from nas.latency.runtimes import ProfileSettings
from nas.target import Target, require_target

__all__ = [
    "SEED_OFFSETS",
    "TRAIN_DATA_FIELDS",
    "VERIFY_SAMPLES",
    "ExportSettings",
    "PipelineSettings",
    "PruneSettings",
    "QATSettings",
    "TargetNames",
]

# each stage of nas.train draws from its own stream: the run's seed plus the stage's offset (fixed, so a
# run with the same seed gives the same networks, batches and calibration inputs)
SEED_OFFSETS = {
    "prune_finetune": 1,      # fine-tuning after a pruning step
    "qat": 2,                 # quantization-aware fine-tuning
    "taylor_batches": 17,     # the batches Taylor importance is measured on
    "loss_probe": 19,         # the batches the loss criterion probes
    "qat_calibration": 29,    # the batches that calibrate the QAT observers
    "export_calibration": 41,  # the inputs that calibrate an int8 export
}


PRUNE_BY = ("latency", "macs")
# the data settings nas.train takes over the search's: they change no result (the search decides the rest)
TRAIN_DATA_FIELDS = ("num_workers",)


def _bool(name: str, v: Any) -> None:
    if not isinstance(v, bool):
        raise ValueError(f"{name} must be true or false, got {v!r}")


def _distill(group: str, distill: Any, temperature: Any) -> None:
    if isinstance(distill, bool) or not isinstance(distill, (int, float)) or not 0 <= distill <= 1:
        raise ValueError(f"{group}.distill must be a weight in [0, 1] (0: no distillation), got {distill!r}")
    check_number(f"{group}.temperature", temperature)


def _from_mapping(cls: type, group: str, d: Mapping[str, Any]) -> Any:
    """``cls(**d)``, refusing unknown keys by name (a typo must not be ignored)."""
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(d) - set(known))
    if unknown:
        raise ValueError(f"{group}: unknown setting(s) {unknown}; valid settings: {sorted(known)}")
    return cls(**d)


@dataclass(frozen=True)
class PruneSettings:
    """Latency-aware structured pruning of the trained network, then fine-tuning."""

    enabled: bool = True
    target_ms: float | None = None  # predicted latency to reach; None: ratio x the unpruned prediction
    ratio: float = 0.7
    # loss: each step's loss change measured on loss_samples training images (with structural, it may
    # also drop a squeeze-excite or a residual block) | l1 | bn | taylor
    criterion: str = "loss"
    multiple: int | None = None  # channel group; None: the search space's channel_multiple
    min_keep: float = 0.25  # every layer keeps at least this share of its channels
    lookahead: int = 4  # each greedy step tries every layer 1..lookahead channel groups narrower
    # when the target is this machine and target_ms is None: measure the pruned network against the
    # unpruned one and re-plan (up to this many times) until measured <= ratio (0: trust the prediction)
    measure_steps: int = 3
    taylor_batches: int = 16  # training batches for the taylor criterion
    loss_samples: int = 512  # training images the loss criterion measures each candidate step on
    structural: bool = True  # loss criterion: steps may also drop a squeeze-excite or a residual block
    epochs: int = 10  # fine-tuning
    lr: float = 0.002
    distill: float = 0.0  # > 0: fine-tune with knowledge distillation from the unpruned network (KD weight)
    temperature: float = 4.0  # distillation temperature
    # what pruning may cost: a pruned network that, fine-tuned, scores more than max_drop accuracy points
    # below the unpruned one on the validation split is not kept (the unpruned network ships, and the int8
    # variants are built from it)
    max_drop: float = 1.0
    # a pruning step must save at least this share of the unpruned network's latency (or MACs) to be taken
    min_gain: float = 0.001
    by: str = "latency"  # latency: toward the target's latency model | macs: toward prune.ratio x the MACs
    on_estimate: bool = False  # by=latency on a target whose latency is a roofline estimate or a rehearsal: false skips pruning

    def __post_init__(self) -> None:
        _bool("prune.enabled", self.enabled)
        _bool("prune.on_estimate", self.on_estimate)
        if self.by not in PRUNE_BY:
            raise ValueError(f"prune.by must be one of {', '.join(PRUNE_BY)}, got {self.by!r}")
        check_number("prune.max_drop", self.max_drop, zero=True)
        if isinstance(self.min_gain, bool) or not isinstance(self.min_gain, (int, float)) or not 0 <= self.min_gain < 1:
            raise ValueError(f"prune.min_gain must be in [0, 1) (a share of the unpruned latency), got {self.min_gain!r}")
        if self.criterion not in CRITERIA:
            raise ValueError(f"prune.criterion must be one of {', '.join(CRITERIA)}, got {self.criterion!r}")
        if self.target_ms is not None:
            check_number("prune.target_ms", self.target_ms)
        if isinstance(self.ratio, bool) or not isinstance(self.ratio, (int, float)) or not 0 < self.ratio <= 1:
            raise ValueError(f"prune.ratio must be in (0, 1], got {self.ratio!r}")
        if self.multiple is not None:
            check_number("prune.multiple", self.multiple, integer=True)
        check_number("prune.epochs", self.epochs, integer=True, zero=True)
        check_number("prune.lr", self.lr)
        check_number("prune.taylor_batches", self.taylor_batches, integer=True)
        check_number("prune.loss_samples", self.loss_samples, integer=True)
        _bool("prune.structural", self.structural)
        check_number("prune.lookahead", self.lookahead, integer=True)
        check_number("prune.measure_steps", self.measure_steps, integer=True, zero=True)
        _distill("prune", self.distill, self.temperature)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class QATSettings:
    """Quantization-aware fine-tuning (BN folded, int8 fake quantization)."""

    enabled: bool = True
    epochs: int = 4
    lr: float = 0.0005
    freeze_epochs: int = 1  # the last epochs train with frozen activation ranges
    reduce_range: bool = True  # 7-bit weights: the same settings as the PTQ baseline (nas.export.qdq.QDQ_SETTINGS)
    ema: float = 0.01  # activation range EMA momentum
    calib_batches: int = 16  # training batches for the initial min/max ranges
    distill: float = 0.0  # > 0: knowledge distillation from the fp32 (unpruned) network (KD weight)
    temperature: float = 4.0  # distillation temperature

    def __post_init__(self) -> None:
        _bool("qat.enabled", self.enabled)
        check_number("qat.epochs", self.epochs, integer=True, zero=True)
        check_number("qat.lr", self.lr)
        check_number("qat.freeze_epochs", self.freeze_epochs, integer=True, zero=True)
        check_number("qat.calib_batches", self.calib_batches, integer=True)
        self.quant  # noqa: B018 - validates reduce_range and ema
        _distill("qat", self.distill, self.temperature)

    @property
    def quant(self) -> QuantSettings:
        return QuantSettings(self.reduce_range, self.ema)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


VERIFY_SAMPLES = 500  # images (batch 1) an export is checked on against torch (export_checkpoint, nas.export)


@dataclass(frozen=True)
class ExportSettings:
    """ONNX export, the PTQ baseline, verification and latency measurement (the measuring loop's
    ``rounds`` / ``warmup`` / ``repeats`` / ``min_time_s`` default to ``ProfileSettings``')."""

    calib_samples: int = 256  # training images calibrating onnxruntime's PTQ baseline
    eval_samples: int | None = None  # test images the ONNX models are scored on (None: all)
    measure: bool = True  # measure latency when the target is this machine
    rounds: int = ProfileSettings.rounds  # measurement rounds (fresh session each), median of rounds
    warmup: int = ProfileSettings.warmup
    repeats: int = ProfileSettings.repeats
    min_time_s: float = ProfileSettings.min_time_s

    def __post_init__(self) -> None:
        check_number("export.calib_samples", self.calib_samples, integer=True)
        if self.eval_samples is not None:
            check_number("export.eval_samples", self.eval_samples, integer=True)
        for k in ("rounds", "repeats"):
            check_number(f"export.{k}", getattr(self, k), integer=True)
        check_number("export.warmup", self.warmup, integer=True, zero=True)
        check_number("export.min_time_s", self.min_time_s, zero=True)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class TargetNames:
    """Targets (names in conf/target/) predicting each exported precision; None: conf itself when its
    precision matches, else its sibling by name (cpu <-> cpu_int8), if that file exists."""

    fp32: str | None = None
    int8: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class PipelineSettings:
    """Everything ``train_front`` needs (built from the Hydra config by ``nas.train``).

    ``target`` is a ``Target`` (``nas.load_target``); ``prune`` / ``qat`` / ``export`` / ``targets`` may be
    given as dicts of their fields: they are converted (unknown names refused).
    """

    run: str
    target: Target
    out: str | None = None
    select: Any = "all"  # all | an index | a list of indices into pareto.json's front
    latency_budget_ms: float | None = None  # only architectures predicted at or under this latency (ms)
    data_root: str | None = None
    train_samples: int | None = None
    # data settings over the search's: only those in TRAIN_DATA_FIELDS (they change no result: num_workers)
    data: Mapping[str, Any] = field(default_factory=dict)
    # input resolution trained and exported at; None: the one the search predicted latency at (its
    # deployment resolution), so the exported files are the networks of the Pareto front
    resolution: int | None = None
    seed: int = 0
    allow_mismatch: bool = False
    # a supernet checkpoint (python -m nas.supernet): each network starts from the weights it inherits
    # from it (fine-tuned for train.epochs) instead of from scratch; None: from scratch
    supernet: str | None = None
    train: FitSettings = field(default_factory=FitSettings)
    prune: PruneSettings = field(default_factory=PruneSettings)
    qat: QATSettings = field(default_factory=QATSettings)
    export: ExportSettings = field(default_factory=ExportSettings)
    targets: TargetNames = field(default_factory=TargetNames)

    def __post_init__(self) -> None:
        require_target(self.target)
        for name, cls in (("train", FitSettings), ("prune", PruneSettings), ("qat", QATSettings),
                          ("export", ExportSettings), ("targets", TargetNames)):
            v = getattr(self, name)
            if isinstance(v, Mapping):
                object.__setattr__(self, name, _from_mapping(cls, name, v))
            elif not isinstance(v, cls):
                raise ValueError(f"{name} must be a {cls.__name__} or a dict of its fields, got {type(v).__name__}")
        if self.train.epochs == 0 and self.supernet is None:
            raise ValueError("epochs=0: the networks would never be trained, and then be pruned, QAT-trained and "
                             "exported with their random weights; give epochs=1 or more (or supernet=<ckpt> to "
                             "start from a supernet's trained weights)")
        if self.latency_budget_ms is not None:
            check_number("latency_budget_ms", self.latency_budget_ms)
        if self.train_samples is not None:
            check_number("train_samples", self.train_samples, integer=True)
        if not isinstance(self.data, Mapping):
            raise ValueError(f"data must be a dict of data settings, got {type(self.data).__name__}")
        other = sorted(set(self.data) - set(TRAIN_DATA_FIELDS))
        if other:
            raise ValueError(f"data.{other[0]}: nas.train reads the search's dataset as the search did; of the data "
                             f"settings it takes only {', '.join('data.' + n for n in TRAIN_DATA_FIELDS)}")
        DataSettings(**dict(self.data))  # each value checked where the data settings are defined
        if self.resolution is not None:
            check_resolution("resolution", self.resolution)
        if self.supernet is not None and (not isinstance(self.supernet, str) or not self.supernet):
            raise ValueError(f"supernet must be the path of a supernet checkpoint (supernet.ckpt), got {self.supernet!r}")

    @property
    def out_dir(self) -> Path:
        """Where the pipeline writes: ``out``, else ``<run>/train``."""
        return Path(self.out or Path(self.run) / "train")

    @property
    def writing(self) -> str:
        """The pipeline's work as its writer's lock names it (``nas._io.exclusive``): ``training into <out>``."""
        return f"training into {self.out_dir}"
