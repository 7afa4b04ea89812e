"""Where hwnas finds its files: the shipped data, and the user's own.

The shipped data sits at the repository's top level, beside the package: ``conf/`` (the Hydra
configs), ``search_spaces/`` and ``latency_tables/``.  The wheel carries them inside the package
(``nas/conf/``, ...: setup.py maps each folder there at build time), so they are found in one of
two places:

* a source tree (a checkout on ``PYTHONPATH``, or an editable install): ``<repository>/<folder>``,
  the folders beside ``nas/``;
* an installed wheel: ``<site-packages>/nas/<folder>``, through ``importlib.resources``.

The user's own files live under ``HWNAS_HOME`` (default ``~/.hwnas``), never in the package:
``$HWNAS_HOME/target/<name>.yaml`` joins the shipped targets (``conf=<name>``), and a table name is
looked up in ``$HWNAS_HOME/latency_tables/`` before the shipped tables.  A search space of one's own
is any YAML path (``search_space=path/to/space.yaml``).

Example:
    >>> from nas.resources import conf_dir, tables_dir
    >>> (conf_dir() / "search.yaml").is_file()
    True
    >>> sorted(p.name for p in tables_dir().glob("cpu*.json"))
    ['cpu.json', 'cpu_int8.json']
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

__all__ = ["conf_dir", "spaces_dir", "tables_dir", "user_home", "user_tables_dir", "writable_tables_dir"]

# the package as plain files (a source tree or an installed wheel); zipped installs are not supported
_PACKAGE = Path(str(resources.files("nas")))


def _source_tree() -> Path | None:
    """The repository holding the package (``pyproject.toml`` and ``conf/`` beside ``nas/``), else None."""
    root = _PACKAGE.parent
    return root if (root / "pyproject.toml").is_file() and (root / "conf").is_dir() else None


def _data_dir(folder: str) -> Path:
    root = _source_tree()
    return root / folder if root is not None else _PACKAGE / folder


def conf_dir() -> Path:
    """The shipped Hydra configs.

    Returns:
        The folder of the primary configs (one per command: ``search.yaml``, ``train.yaml``, ...) and
        of the groups ``target/``, ``data/``, ``evaluator/``, ``sampler/``, ``pruner/``: ``conf/`` in
        a source tree, ``nas/conf/`` in an installed wheel.
    """
    return _data_dir("conf")


def spaces_dir() -> Path:
    """The shipped search spaces.

    Returns:
        The folder of the ``<name>.yaml`` spaces that ``search_space=<name>`` selects;
        its ``calibration/`` holds the calibration-only spaces.
    """
    return _data_dir("search_spaces")


def tables_dir() -> Path:
    """The shipped measured latency tables.

    Returns:
        The folder of the ``<target>.json`` tables; the user's own
        (:func:`user_tables_dir`) are looked up before it.
    """
    return _data_dir("latency_tables")


def user_home() -> Path:
    """The user's own folder for targets and tables.

    Returns:
        ``$HWNAS_HOME`` if set and non-empty, else ``~/.hwnas`` (``~`` expanded). It holds ``target/``
        (the user's targets) and ``latency_tables/`` (the user's tables); it need not exist.
    """
    return Path(os.environ.get("HWNAS_HOME") or Path.home() / ".hwnas").expanduser()


def user_tables_dir() -> Path:
    """The user's own latency tables.

    Returns:
        ``user_home() / "latency_tables"``: searched before :func:`tables_dir` for a table name.
    """
    return user_home() / "latency_tables"


def _source_checkout() -> bool:
    """True when the package runs from a source tree whose tables folder can be written."""
    return _source_tree() is not None and os.access(tables_dir(), os.W_OK)


def writable_tables_dir(name: str | None = None) -> Path:
    """Where ``nas.profile`` writes a new table named by its target.

    Args:
        name: The table's file name (``<target>.json``), or None for a table of a shipped target.

    Returns:
        The shipped :func:`tables_dir` in a writable source tree (so the table can be committed),
        else :func:`user_tables_dir`.  The table of a machine's own target (``conf=here``: ``name``
        starts with ``here_``) goes beside that target, in the user's tables, in either case.
    """
    if name and Path(name).name.startswith("here_"):
        return user_tables_dir()
    return tables_dir() if _source_checkout() else user_tables_dir()
