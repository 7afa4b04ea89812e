"""What every command's config shares: the ``target`` group's schema, the ``--help`` templates, and
``normalize_overrides``, which turns ``conf=<name>`` into Hydra's ``target=<name>`` and ``conf=here``
into this machine's own target (written on first use by ``nas.latency.predict.here``) before Hydra composes.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

import nas.latency  # its ensure_here_target loads with conf=here only (the package's lazy exports)
from nas.config.schema import TargetConfig
from nas.resources import conf_dir, user_home
from nas.target import HERE_NAMES, removed_field_error, target_names

__all__ = ["CONF_DIR", "alias_override", "normalize_overrides", "register_configs", "user_search_path"]

CONF_DIR = conf_dir()






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
    home = user_search_path(out)
    if home and "-sc" not in out:  # shell completion reads its line from COMP_LINE (nas.cli: the same word there)
        # beside the user's own overrides: Hydra's parser reads them as one run of words, so one placed after
        # a flag (``conf=cpu --cfg job hydra.searchpath=...``) would be an unrecognized argument
        first = next((i for i, a in enumerate(out) if not a.startswith("-") and ("=" in a or a.startswith("~"))),
                     len(out))
        out.insert(first, home)
    return out


def user_search_path(args: Sequence[str]) -> str | None:
    """The override that puts the user's own config dir (``$HWNAS_HOME``, holding ``target/<name>.yaml``) on
    Hydra's search path, or None: it has no targets, or ``args`` set a search path already."""
    home = user_home()
    if (home / "target").is_dir() and not any(a.startswith("hydra.searchpath") for a in args):
        return f"hydra.searchpath=[file://{home}]"
    return None


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
    """Store the ``--help`` templates and the ``target`` group's schema in Hydra's ConfigStore (idempotent);
    each command's ``register_<cmd>_configs`` (``nas.config.<cmd>``) calls it and stores its own schema."""
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
