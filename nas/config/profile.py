"""Hydra schema of ``python -m nas.profile``, registered in the ConfigStore (``_profile_schema``, the defaults list of
``conf/profile.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from nas.config.common import register_configs
from nas.config.schema import MeasureConfig, TargetConfig
from nas.latency.profile import PROFILE

__all__ = ["ProfileAppConfig", "register_profile_configs"]


@dataclass
class ProfileAppConfig:
    """``python -m nas.profile conf=<target>``: measure the blocks of the spaces into a table."""

    target: TargetConfig = MISSING
    search_space: Any = None  # a name or YAML path, or a list of them ([mbv3,tiny]); None = all shipped
    resolution: int | None = None  # overrides the target's deployment resolution
    out: str | None = None  # table path; None = latency_tables/<conf.table>
    bundle: str | None = None  # write a device bundle to this folder instead of measuring
    import_bundle: str | None = None  # a bundle's results.json (or folder) to import into the table
    held_out: int = PROFILE.held_out  # with bundle=: seeded networks spread over the spaces, measured for validation only
    # with bundle=: a bundle estimated above this many GB is written only with yes=true or a yes at the prompt
    bundle_max_gb: float = PROFILE.bundle_max_gb
    yes: bool = False  # with bundle=: write it whatever its estimated size, without asking
    allow_mismatch: bool = False  # use a table / machine that does not match the target anyway
    limit: int | None = None  # measure at most this many blocks this run
    # stop measuring when these minutes are spent, most used blocks and calibration networks first;
    # the learned model predicts what is left, a re-run continues; None = no budget
    budget_min: float | None = None
    calibration_networks: int = PROFILE.calibration_networks  # whole networks per space measured for the predictor's calibration
    # + this many per space narrowed as nas.train's pruning narrows them (blocks and networks)
    pruned_networks: int = PROFILE.pruned_networks
    # calibration-only spaces (search_spaces/calibration/) whose blocks and calibration_networks +
    # pruned_networks seeded networks are measured too; None = all of them when profiling all shipped
    # spaces at their own resolutions (no search_space=, no resolution=), else none
    calibration_spaces: list[str] | None = None
    # >0: measure nothing new; re-measure this many of the table's calibration networks per space and
    # store their median now/table ratio (metadata.refresh), by which the predictor scales
    refresh: int = PROFILE.refresh
    # true: measure nothing new; re-measure every calibration network of the table and store those
    # figures (metadata.recalibration), on which the predictor then fits its calibration
    recalibrate: bool = False
    models: list[str] | None = None  # timm:<name> models whose blocks are measured too (never calibrated on)
    # stems for these input channels and heads for these class counts too, beside each space's
    # own: a search deploys its networks with the dataset's (Fashion-MNIST: 1 channel, 10 classes)
    in_chans: list[int] = field(default_factory=lambda: [1, 3])
    num_classes: list[int] = field(default_factory=lambda: [10])  # heads for these class counts (see in_chans)
    progress: bool = True  # a progress bar with the time left (false: none)
    wait: bool = False  # another nas.profile measuring this table on this machine: wait for it (false: refuse)
    profile: MeasureConfig = field(default_factory=MeasureConfig)  # how each item is timed: profile.<key>=<value>


def register_profile_configs() -> None:
    """Store the shared schemas and ``_profile_schema`` in Hydra's ConfigStore (idempotent)."""
    register_configs()
    ConfigStore.instance().store(name="_profile_schema", node=ProfileAppConfig)
