"""Where hwnas finds its files: the package's own data, and the user's.

Shipped data lives inside the package (``nas/conf``, ``nas/search_spaces``, ``nas/latency_tables``)
and is found through ``importlib.resources``, so a wheel and a non-editable install work like a
source checkout.  The user's own targets and tables live under ``HWNAS_HOME`` (default
``~/.hwnas``): ``$HWNAS_HOME/target/<name>.yaml`` joins the shipped targets, and a table name is
looked up in ``$HWNAS_HOME/latency_tables/`` before the shipped ones.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

__all__ = ["conf_dir", "spaces_dir", "tables_dir", "user_home", "user_tables_dir", "writable_tables_dir"]


def _package_path(sub: str) -> Path:
    # the package is installed as plain files (a wheel or a source tree); zipped installs are not supported
    return Path(str(resources.files("nas") / sub))


def conf_dir() -> Path:
    """The shipped Hydra configs (primary configs and the groups target/, data/, evaluator/, sampler/)."""
    return _package_path("conf")


def spaces_dir() -> Path:
    """The shipped search spaces (``calibration/`` holds the calibration-only ones)."""
    return _package_path("search_spaces")


def tables_dir() -> Path:
    """The shipped measured latency tables."""
    return _package_path("latency_tables")


def user_home() -> Path:
    """``$HWNAS_HOME``, default ``~/.hwnas``: the user's own targets (``target/``) and tables."""
    return Path(os.environ.get("HWNAS_HOME") or Path.home() / ".hwnas").expanduser()


def user_tables_dir() -> Path:
    return user_home() / "latency_tables"


def _source_checkout() -> bool:
    """True when the package runs from a source tree (an editable install or the repository itself)."""
    root = Path(str(resources.files("nas"))).parent
    return (root / "pyproject.toml").is_file() and os.access(tables_dir(), os.W_OK)


def writable_tables_dir(name: str | None = None) -> Path:
    """Where ``nas.profile`` writes a new table named by its target: the package's own
    ``latency_tables/`` in a source checkout (so it can be committed), else the user's.  The table
    of a machine's own target (``conf=here``: ``name`` starts with ``here_``) goes beside that
    target, in the user's tables, in either case."""
    if name and Path(name).name.startswith("here_"):
        return user_tables_dir()
    return tables_dir() if _source_checkout() else user_tables_dir()
