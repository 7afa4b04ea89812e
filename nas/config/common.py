"""The schemas and command-line aliases every command shares: the apps that take a target but none of
search's groups (``space``, ``profile``, ``predict``, ``validate``), the ``--help`` templates, and
``normalize_overrides``, which turns ``conf=<name>`` into Hydra's ``target=<name>`` and ``conf=here``
into this machine's own target (written on first use by ``nas.latency.predict.here``) before Hydra composes.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

import nas.latency  # its ensure_here_target loads with conf=here only (the package's lazy exports)
from nas.config.schema import MeasureConfig, TargetConfig, ValidateMeasureConfig
from nas.latency.profile import PROFILE, REFRESH, VALIDATE
from nas.resources import conf_dir, user_home
from nas.target import HERE_NAMES, removed_field_error, target_names

__all__ = ["CONF_DIR", "PredictAppConfig", "ProfileAppConfig", "SpaceAppConfig", "ValidateAppConfig",
           "alias_override", "normalize_overrides", "register_configs"]

CONF_DIR = conf_dir()


@dataclass
class SpaceAppConfig:
    """``python -m nas.space``: summarise the shipped spaces or one space."""

    search_space: str | None = None  # a name in search_spaces/ or a YAML path; None = all
    samples: int = 200  # seeded sample for the params / MACs statistics
    seed: int = 0  # the sample's seed


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


_ALIASES = {"conf": "target"}  # what users type -> the Hydra group


def alias_override(arg: str) -> str:
    """One override as Hydra reads it: ``conf=cpu`` / ``+conf.x=1`` -> ``target=cpu`` / ``+target.x=1``."""
    prefix = arg[: len(arg) - len(arg.lstrip("+~"))]
    body = arg[len(prefix):]
    for old, new in _ALIASES.items():
        if body.startswith((f"{old}=", f"{old}.")):
            body = new + body[len(old):]
    return prefix + body


def _here_override(args: list[str]) -> list[str]:
    """``target=here`` -> ``target=here_<slug>``, this machine's own target (written on first use);
    ``target=here_gpu`` -> ``target=here_gpu_<gpu>``, its GPU's."""
    out = list(args)
    for word, kind in zip(HERE_NAMES, ("cpu", "gpu"), strict=True):
        at = [i for i, a in enumerate(out) if a.lstrip("+") == f"target={word}"]
        if at:
            name = nas.latency.ensure_here_target(kind=kind, say=lambda m: print(m, file=sys.stderr, flush=True))
            out = [a.replace(f"target={word}", f"target={name}") if i in at else a for i, a in enumerate(out)]
    return out


def _refuse_removed(args: Sequence[str]) -> None:
    """A ``target.<field>`` override (``+``, ``~`` too) of a field that was removed: its one-line error."""
    for a in args:
        group, _, name = a.lstrip("+~").split("=", 1)[0].partition(".")
        if group == "target" and removed_field_error(name):
            raise ValueError(removed_field_error(name))


def normalize_overrides(args: Sequence[str]) -> list[str]:
    """Command-line overrides as Hydra reads them.

    ``conf=cpu`` / ``conf.threads=2`` (the form the docs use) become ``target=cpu`` /
    ``target.threads=2``; ``conf=here`` names this machine's own target (``target=here_<slug>``,
    written to ``$HWNAS_HOME/target/`` on first use); the user's own config dir (``$HWNAS_HOME``,
    holding ``target/<name>.yaml``) joins Hydra's search path when it exists.

    Args:
        args: the overrides as the user typed them.

    Returns:
        The overrides for Hydra.

    Raises:
        ValueError: ``conf=here_gpu`` without a GPU, ``$HWNAS_HOME`` not writable for a new here target,
            or a target field that was removed (``conf.transfer_from=``), with why.
    """
    out = [alias_override(a) for a in args]
    _refuse_removed(out)
    out = _here_override(out)
    home = user_home()
    if (home / "target").is_dir() and not any(a.startswith("hydra.searchpath") for a in out) and "-sc" not in out:
        # beside the user's own overrides: Hydra's parser reads them as one run of words, so one placed after
        # a flag (``conf=cpu --cfg job hydra.searchpath=...``) would be an unrecognized argument
        first = next((i for i, a in enumerate(out) if not a.startswith("-") and ("=" in a or a.startswith("~"))),
                     len(out))
        out.insert(first, f"hydra.searchpath=[file://{home}]")
    return out


# `--help` of the commands that take a target but none of search's groups (data, evaluator, sampler):
# Hydra's own template would list every group in conf/.  ($$ is a literal $ for string.Template.)
_HELP_TARGET = """${hydra.help.header}
== Targets ==
conf=<name>, one of: ${hwnas_targets:}
(conf=here: this machine's own target, made on first use; or your own: $$HWNAS_HOME/target/<name>.yaml,
default ~/.hwnas)

== Config ==
Override anything in the config (foo.bar=value)

$CONFIG

${hydra.help.footer}"""
# nas.export: the targets and the datasets (its calibration / verification images), no search groups
_HELP_TARGET_DATA = _HELP_TARGET.replace("\n== Config ==", """
== Datasets ==
data=<name>, one of: ${hwnas_options:data} (none: the checkpoint's own)

== Config ==""")
# nas.supernet: the targets and the dataset it trains on
_HELP_TARGET_TRAIN_DATA = _HELP_TARGET_DATA.replace("(none: the checkpoint's own)", "(default: digits)")
_HELP_PLAIN = """${hydra.help.header}
== Config ==
Override anything in the config (foo.bar=value)

$CONFIG

${hydra.help.footer}"""


def register_configs() -> None:
    """Store the shared schemas, the ``--help`` templates and the ``target`` group's schema in Hydra's
    ConfigStore (idempotent)."""
    OmegaConf.register_new_resolver("hwnas_targets", lambda: ", ".join(target_names()), replace=True)
    OmegaConf.register_new_resolver(  # a config group's options in the package's conf/ (for --help)
        "hwnas_options", lambda group: ", ".join(sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))),
        replace=True)
    cs = ConfigStore.instance()
    for name, template in (("hwnas_target", _HELP_TARGET), ("hwnas_target_data", _HELP_TARGET_DATA),
                           ("hwnas_target_train_data", _HELP_TARGET_TRAIN_DATA),
                           ("hwnas_plain", _HELP_PLAIN)):
        cs.store(group="hydra/help", name=name, node={"app_name": "${hydra.job.name}", "header": "", "footer": "",
                                                     "template": template})
    cs.store(name="_target_schema", node=TargetConfig)
    # `conf=here` as a target option (for --help and tab completion); normalize_overrides replaces it
    # by this machine's own target before composing, so this placeholder is never used as it is
    cs.store(group="target", name="here", node=TargetConfig(name="here"))
    cs.store(group="target", name="here_gpu", node=TargetConfig(name="here_gpu"))
    cs.store(name="_space_schema", node=SpaceAppConfig)
    cs.store(name="_profile_schema", node=ProfileAppConfig)
    cs.store(name="_predict_schema", node=PredictAppConfig)
    cs.store(name="_validate_schema", node=ValidateAppConfig)
