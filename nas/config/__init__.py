"""Hydra config schemas (dataclasses): typos and wrong types fail when the config is composed.

Hydra's config root is the shipped ``conf/`` folder (``nas.resources.conf_dir()``).  Targets are the
``target`` group (``conf/target/<name>.yaml``, and the user's ``$HWNAS_HOME/target/<name>.yaml``), selected with
``conf=<name>`` (or ``target=<name>``); each is checked against ``TargetConfig``.  ``conf=here`` is
this machine's own target: ``normalize_overrides`` writes it on first use (``nas.latency.here``)
and names it (``target=here_<slug>``) before Hydra composes.  Primary configs
(``conf/space.yaml``, ...) start from a schema stored here.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from nas.latency.measure import ProfileSettings
from nas.resources import conf_dir, user_home
from nas.target import Device, Target

__all__ = [
    "CONF_DIR", "DeviceConfig", "MeasureConfig", "PredictAppConfig", "ProfileAppConfig", "SpaceAppConfig",
    "TargetConfig", "ValidateAppConfig",
    "alias_override", "compose_app", "normalize_overrides", "register_configs", "schema_from",
]

CONF_DIR = conf_dir()


def _hydra_type(tp: Any) -> Any:
    """``tp`` as OmegaConf types it: tuples become lists (``tuple[str, ...]`` -> ``list[str]``)."""
    args = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if origin is tuple:
        return list[args[0]] if args else list  # type: ignore[valid-type]
    if origin in (typing.Union, types.UnionType):
        out = None
        for a in args:
            a = _hydra_type(a)
            out = a if out is None else out | a
        return out
    return tp


def _nested_dataclass(tp: Any) -> type | None:
    """The dataclass ``tp`` names (``Device`` or ``Device | None``), else None."""
    for t in (tp, *typing.get_args(tp)):
        if isinstance(t, type) and dataclasses.is_dataclass(t):
            return t
    return None


def _default(f: dataclasses.Field) -> Any:
    """A schema field's default: the library's own, tuples as lists; no default -> ``MISSING`` (``???``)."""
    if f.default is not dataclasses.MISSING:
        v = f.default
        return field(default_factory=lambda v=v: list(v)) if isinstance(v, tuple) else field(default=v)
    if f.default_factory is not dataclasses.MISSING:
        make = f.default_factory
        return field(default_factory=lambda: (lambda v: list(v) if isinstance(v, tuple) else v)(make()))
    return field(default=MISSING)


def schema_from(cls: type, *, name: str | None = None, schema_name: str) -> type:
    """A mutable Hydra schema with ``cls``'s fields, types and defaults, led by a ``name`` field
    (default ``name``) when ``name`` is given (a group option's name, e.g. ``"nsga2"``).

    A field typed by a dataclass gets a nested schema (``Device`` -> ``DeviceConfig``) built by its
    ``default_factory``; a tuple becomes a list; a field without a default is required (``???``).
    """
    hints = typing.get_type_hints(cls)
    fields: list[tuple[str, Any, Any]] = []
    if name is not None:
        fields.append(("name", str, field(default=name)))
    for f in dataclasses.fields(cls):
        if f.name == "name" and name is not None:
            continue
        nested = _nested_dataclass(hints[f.name])
        if nested is not None:
            sub = schema_from(nested, schema_name=f"{nested.__name__}Config")
            fields.append((f.name, sub, field(default_factory=sub)))
            continue
        fields.append((f.name, _hydra_type(hints[f.name]), _default(f)))
    schema = dataclasses.make_dataclass(schema_name, fields)
    schema.__module__ = __name__
    schema.__doc__ = f"Hydra schema generated from {cls.__module__}.{cls.__name__}."
    return schema


DeviceConfig = schema_from(Device, schema_name="DeviceConfig")
TargetConfig = schema_from(Target, schema_name="TargetConfig")


@dataclass
class SpaceAppConfig:
    """``python -m nas.space``: summarise the shipped spaces or one space."""

    search_space: str | None = None  # a name in search_spaces/ or a YAML path; None = all
    samples: int = 200  # seeded sample for the params / MACs statistics
    seed: int = 0  # the sample's seed


MeasureConfig = schema_from(ProfileSettings, schema_name="MeasureConfig")


@dataclass
class ProfileAppConfig:
    """``python -m nas.profile conf=<target>``: measure the blocks of the spaces into a table."""

    target: TargetConfig = MISSING
    search_space: Any = None  # a name or YAML path, or a list of them ([mbv3,tiny]); None = all shipped
    resolution: int | None = None  # overrides the target's deployment resolution
    out: str | None = None  # table path; None = latency_tables/<conf.table>
    bundle: str | None = None  # write a device bundle to this folder instead of measuring
    import_bundle: str | None = None  # a bundle's results.json (or folder) to import into the table
    held_out: int = 0  # with bundle=: seeded networks spread over the spaces, measured for validation only
    allow_mismatch: bool = False  # use a table / machine that does not match the target anyway
    limit: int | None = None  # measure at most this many blocks this run
    # stop measuring when these minutes are spent, most used blocks and calibration networks first;
    # the learned model predicts what is left, a re-run continues; None = no budget
    budget_min: float | None = None
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
    breakdown: bool = False  # print a per-block table
    allow_mismatch: bool = False  # use a table whose metadata (device, runtime, precision, ...) does not match the target anyway


@dataclass
class ValidateAppConfig:
    """``python -m nas.validate conf=<target> [n=200] [models=[timm:a,...]] [out=report.json]``."""

    target: TargetConfig = MISSING
    search_space: Any = None  # a name / path or a list; None = every shipped space
    n: int = 200  # held-out architectures in all, split evenly over the spaces
    pruned: int = 0  # + this many held-out networks narrowed as nas.train's pruning narrows them
    models: list[str] | None = None  # timm:<name> models or Arch JSON files to validate on as well (or instead: n=0)
    resolution: int | None = None  # input resolution of the held-out networks (null: the target's / the space's)
    out: str = "validation/report.json"  # + .png scatter plot and a measurement cache beside it
    seed: int = 7_000_001  # seed of the held-out networks (apart from the calibration networks' seeds)
    drift_anchors: int = 10  # calibration networks per space re-measured beside the held-out set; 0 = none
    recalibrate: bool = False  # re-measure every calibration network and score the predictor calibrated on them
    # a device bundle's results.json (written with held_out=N): score on the networks it measured, measure nothing
    bundle: str | None = None
    allow_mismatch: bool = False  # use a table whose metadata (device, runtime, precision, ...) does not match the target anyway
    progress: bool = True  # a progress bar while measuring (false: none)
    profile: MeasureConfig = field(default_factory=MeasureConfig)  # how each network is timed: profile.<key>=<value>


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
    import sys

    from nas.latency.here import HERE, HERE_GPU, ensure_here_target

    out = list(args)
    for word, kind in ((HERE, "cpu"), (HERE_GPU, "gpu")):
        at = [i for i, a in enumerate(out) if a.lstrip("+") == f"target={word}"]
        if at:
            name = ensure_here_target(kind=kind, say=lambda m: print(m, file=sys.stderr, flush=True))
            out = [a.replace(f"target={word}", f"target={name}") if i in at else a for i, a in enumerate(out)]
    return out


def normalize_overrides(args: Sequence[str]) -> list[str]:
    """Command-line overrides as Hydra reads them: ``conf=cpu`` / ``conf.threads=2`` (the form the
    docs use) become ``target=cpu`` / ``target.threads=2``, ``conf=here`` names this machine's own
    target (``target=here_<slug>``, written to ``$HWNAS_HOME/target/`` on first use), and the user's
    own config dir (``$HWNAS_HOME``, holding ``target/<name>.yaml``) joins Hydra's search path when it exists."""
    out = _here_override([alias_override(a) for a in args])
    home = user_home()
    if (home / "target").is_dir() and not any(a.startswith("hydra.searchpath") for a in out) and "-sc" not in out:
        out.append(f"hydra.searchpath=[file://{home}]")
    return out


def compose_app(app: str, overrides: Sequence[str] = ()) -> Any:
    """The composed config of one command (``"search"``, ``"train"``, ...) for the overrides a user
    would type: Hydra's compose API behind the same aliases as the command line."""
    from hydra import compose, initialize_config_dir

    from nas.config.search import register_search_configs
    from nas.config.supernet import register_supernet_configs
    from nas.config.train import register_train_configs

    register_configs()
    register_search_configs()
    register_train_configs()
    register_supernet_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name=app, overrides=normalize_overrides(list(overrides)))


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
    from omegaconf import OmegaConf

    from nas.target import target_names

    OmegaConf.register_new_resolver("hwnas_targets", lambda: ", ".join(target_names()), replace=True)
    OmegaConf.register_new_resolver(  # a config group's options in the shipped conf/ (for --help)
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
