"""Hydra config schemas (dataclasses): typos and wrong types fail when the config is composed.

Hydra's config root is the package's ``nas/conf/`` folder.  Targets are the ``target`` group
(``nas/conf/target/<name>.yaml``, and the user's ``$HWNAS_HOME/target/<name>.yaml``), selected with
``conf=<name>`` (or ``target=<name>``); each is checked against ``TargetConfig``.  Primary configs
(``nas/conf/space.yaml``, ...) start from a schema stored here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from nas.resources import conf_dir, user_home

__all__ = [
    "CONF_DIR", "DeviceConfig", "MeasureConfig", "PredictAppConfig", "ProfileAppConfig", "SpaceAppConfig",
    "TargetConfig", "ValidateAppConfig",
    "compose_app", "normalize_overrides", "register_configs",
]

CONF_DIR = conf_dir()


@dataclass
class DeviceConfig:
    """The target device, and its published peak figures for the roofline estimate."""

    # e.g. "Jetson AGX Orin 64GB"; null = whatever machine runs the command (no identity check)
    name: str | None = MISSING
    # CPU ISA flags the device must have (e.g. [avx512f, avx512_vnni]), checked even when name is null;
    # empty = the name alone identifies it
    cpu_flags: list[str] = field(default_factory=list)
    kind: str = MISSING  # cpu | gpu | jetson
    description: str = ""
    peak_gflops: float = MISSING  # at the target precision, from the vendor's spec sheet
    mem_bandwidth_gbs: float = MISSING
    overhead_us: float = 5.0  # fixed cost per layer (kernel launch, dispatch)
    spec_source: str = ""  # where the peak figures come from


@dataclass
class TargetConfig:
    """One deployment target: ``conf=<name>``."""

    name: str = MISSING
    device: DeviceConfig = field(default_factory=DeviceConfig)
    runtime: str = "onnxruntime"  # onnxruntime | torch | torch_compile | tensorrt
    provider: str = "CPUExecutionProvider"  # onnxruntime execution provider
    precision: str = "fp32"  # fp32 | fp16 | int8
    batch: int = 1
    threads: int = 1
    resolution: int | None = None  # deployment resolution; None = the space's own
    latency_budget_ms: float = MISSING
    table: str | None = None  # file in latency_tables/ (or a path); None = roofline estimate


@dataclass
class SpaceAppConfig:
    """``python -m nas.space``: summarise the shipped spaces or one space."""

    search_space: str | None = None  # a name in search_spaces/ or a YAML path; None = all
    samples: int = 200  # seeded sample for the params / MACs statistics
    seed: int = 0


@dataclass
class MeasureConfig:
    """How each block is timed (see ``nas.latency.profiler.ProfileSettings``)."""

    warmup: int = 10
    repeats: int = 50
    min_time_s: float = 0.1
    max_spread: float = 0.2  # (p90 - p10) / median above this is re-measured
    remeasure: int = 2
    rounds: int = 3  # passes over all blocks and networks, each in a fresh session; entry = median of rounds
    save_every_s: float = 2.0


@dataclass
class ProfileAppConfig:
    """``python -m nas.profile conf=<target>``: measure the blocks of the spaces into a table."""

    target: TargetConfig = MISSING
    search_space: Any = None  # a name or YAML path, or a list of them ([mbv3,tiny]); None = all shipped
    resolution: int | None = None  # overrides the target's deployment resolution
    out: str | None = None  # table path; None = latency_tables/<conf.table>
    bundle: str | None = None  # write a device bundle to this folder instead of measuring
    import_bundle: str | None = None  # a bundle's results.json to import into the table
    allow_mismatch: bool = False  # use a table / machine that does not match the target anyway
    limit: int | None = None  # measure at most this many blocks this run
    calibration_networks: int = 40  # whole networks per space measured for the predictor's calibration
    # + this many per space narrowed as nas.train's pruning narrows them (blocks and networks)
    pruned_networks: int = 20
    # calibration-only spaces (search_spaces/calibration/) whose blocks and calibration_networks +
    # pruned_networks seeded networks are measured too; None = all of them when profiling all shipped
    # spaces at their own resolutions (no search_space=, no resolution=), else none
    calibration_spaces: list[str] | None = None
    # >0: measure nothing new; re-measure this many of the table's calibration networks per space and
    # store their median now/table ratio (metadata.refresh), by which the predictor scales
    refresh: int = 0
    # true: measure nothing new; re-measure every calibration network of the table and store those
    # figures (metadata.recalibration), on which the predictor then fits its calibration
    recalibrate: bool = False
    models: list[str] | None = None  # timm:<name> models whose blocks are measured too (never calibrated on)
    # stems for these input channels and heads for these class counts too, beside each space's
    # own: a search deploys its networks with the dataset's (Fashion-MNIST: 1 channel, 10 classes)
    in_chans: list[int] = field(default_factory=lambda: [1, 3])
    num_classes: list[int] = field(default_factory=lambda: [10])
    progress: bool = True
    profile: MeasureConfig = field(default_factory=MeasureConfig)


@dataclass
class PredictAppConfig:
    """``python -m nas.predict conf=<target> arch=<arch.json> | model=timm:<name>``."""

    target: TargetConfig = MISSING
    arch: str | None = None  # an Arch JSON file
    model: str | None = None  # timm:<name>, converted with nas.from_timm.from_timm
    resolution: int | None = None  # default: the target's deployment resolution, else the Arch's own
    breakdown: bool = False  # print a per-block table
    allow_mismatch: bool = False


@dataclass
class ValidateAppConfig:
    """``python -m nas.validate conf=<target> [n=200] [models=[timm:a,...]] [out=report.json]``."""

    target: TargetConfig = MISSING
    search_space: Any = None  # a name / path or a list; None = every shipped space
    n: int = 200  # held-out architectures in all, split evenly over the spaces
    pruned: int = 0  # + this many held-out networks narrowed as nas.train's pruning narrows them
    models: list[str] | None = None  # timm:<name> models to validate on as well (or instead: n=0)
    resolution: int | None = None
    out: str = "validation/report.json"  # + .png scatter plot and a measurement cache beside it
    seed: int = 7_000_001
    drift_anchors: int = 10  # calibration networks per space re-measured beside the held-out set; 0 = none
    recalibrate: bool = False  # re-measure every calibration network and score the predictor calibrated on them
    allow_mismatch: bool = False
    progress: bool = True
    profile: MeasureConfig = field(default_factory=MeasureConfig)


_ALIASES = {"conf": "target"}  # what users type -> the Hydra group


def normalize_overrides(args: Sequence[str]) -> list[str]:
    """Command-line overrides as Hydra reads them: ``conf=cpu`` / ``conf.threads=2`` (the form the
    docs use) become ``target=cpu`` / ``target.threads=2``, and the user's own config dir
    (``$HWNAS_HOME``, holding ``target/<name>.yaml``) joins Hydra's search path when it exists."""
    out = []
    for a in args:
        prefix = a[: len(a) - len(a.lstrip("+~"))]
        body = a[len(prefix):]
        for old, new in _ALIASES.items():
            if body.startswith((f"{old}=", f"{old}.")):
                body = new + body[len(old):]
        out.append(prefix + body)
    home = user_home()
    if (home / "target").is_dir() and not any(a.startswith("hydra.searchpath") for a in out) and "-sc" not in out:
        out.append(f"hydra.searchpath=[file://{home}]")
    return out


def compose_app(app: str, overrides: Sequence[str] = ()) -> Any:
    """The composed config of one command (``"search"``, ``"train"``, ...) for the overrides a user
    would type: Hydra's compose API behind the same aliases as the command line."""
    from hydra import compose, initialize_config_dir

    from nas.config.search import register_search_configs
    from nas.config.train import register_train_configs

    register_configs()
    register_search_configs()
    register_train_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name=app, overrides=normalize_overrides(list(overrides)))


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="_target_schema", node=TargetConfig)
    cs.store(name="_space_schema", node=SpaceAppConfig)
    cs.store(name="_profile_schema", node=ProfileAppConfig)
    cs.store(name="_predict_schema", node=PredictAppConfig)
    cs.store(name="_validate_schema", node=ValidateAppConfig)
