"""The user's YAML files (search spaces, targets, Arch files, a run's saved config), read with what they
stand for bounded before anything expands it.

A YAML alias (``*name``) repeats the node its anchor (``&name``) marks, so a file of a few hundred
bytes can stand for billions of nodes: an anchor ``&a [x, x, x]``, then levels of ``[*a, *a, *a]``
(an "alias bomb").  Composing the file is cheap, since PyYAML keeps one shared node per anchor; every
reader that copies the data (OmegaConf, a dataclass, json) expands it, for hours and gigabytes.
``check_yaml`` composes the file and counts the nodes it stands for, a shared node once per
reference, without expanding anything; ``load_yaml`` and ``load_yaml_config`` read only a file it
passed.  A Ctrl-C while a file is read is a ``KeyboardInterrupt``, whatever the parser made of it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

__all__ = ["MAX_YAML_BYTES", "MAX_YAML_DEPTH", "MAX_YAML_NODES", "YamlError", "check_yaml", "load_yaml",
           "load_yaml_config"]

MAX_YAML_BYTES = 2 << 20  # a YAML file's size (the largest shipped one is a few KiB)
MAX_YAML_NODES = 100_000  # the nodes a YAML file stands for once its aliases are expanded
MAX_YAML_DEPTH = 64  # the nesting of its lists and mappings


class YamlError(ValueError):
    """A YAML file that cannot be read, or that stands for more than the bounds allow: the message names
    the file, what is wrong and the fix."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _bound(root: yaml.Node, where: str) -> None:
    """Count the nodes ``root`` stands for (each node once per reference) and its nesting, without
    expanding them; a ``YamlError`` past a bound, or for an alias inside its own anchor."""
    size: dict[int, int] = {}  # id(node) -> the nodes it stands for
    height: dict[int, int] = {}
    active: set[int] = set()  # the nodes on the path being counted
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, counted = stack.pop()
        key = id(node)
        kids = _children(node)
        if counted:
            active.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in kids)
            height[key] = 1 + max((height[id(c)] for c in kids), default=0)
            if size[key] > MAX_YAML_NODES:
                raise YamlError(f"{where} stands for more than {MAX_YAML_NODES:,} values once its aliases (*name) are "
                                f"expanded (the value at line {node.start_mark.line + 1} alone for {size[key]:,}): an "
                                f"alias bomb, or more than a config holds; write out the values it needs instead of "
                                f"repeating aliases")
            if height[key] > MAX_YAML_DEPTH:
                raise YamlError(f"{where} nests lists and mappings more than {MAX_YAML_DEPTH} deep (at line "
                                f"{node.start_mark.line + 1}); a config is a few levels deep: flatten it")
            continue
        if key in size:
            continue
        active.add(key)
        stack.append((node, True))
        for c in kids:
            if id(c) in active:
                raise YamlError(f"{where}: the alias at line {c.start_mark.line + 1} refers to a list or mapping "
                                f"that holds it, so it never ends; remove the alias")
            if id(c) not in size:
                stack.append((c, False))


def _interrupted(e: BaseException) -> bool:
    """Whether ``e`` arose from a Ctrl-C (a parser turns a ``KeyboardInterrupt`` into errors of its own)."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def check_yaml(path: str | os.PathLike, *, what: str | None = None) -> str:
    """Check that the YAML file at ``path`` is of a bounded size before anything expands it.

    Args:
        path: the file.
        what: how messages name it (``search_space=my.yaml``); default: its path.

    Returns:
        The file's text.

    Raises:
        FileNotFoundError: no file at ``path``.
        YamlError: larger than ``MAX_YAML_BYTES``, not valid YAML, standing for more than ``MAX_YAML_NODES``
            values once its aliases are expanded, nested deeper than ``MAX_YAML_DEPTH``, or holding an alias
            inside its own anchor.
    """
    p = Path(path)
    where = what or str(p)
    if not p.is_file():
        raise FileNotFoundError(f"{where}: no such file")
    n = p.stat().st_size
    if n > MAX_YAML_BYTES:
        raise YamlError(f"{where} is {n / 2**20:.1f} MiB, more than a YAML config may be ({MAX_YAML_BYTES >> 20} MiB)")
    try:
        text = p.read_text()
        root = yaml.compose(text, Loader=yaml.SafeLoader)  # the pure-Python composer: deep nesting is a RecursionError
    except RecursionError:
        raise YamlError(f"{where} nests lists and mappings more than {MAX_YAML_DEPTH} deep; a config is a few levels "
                        f"deep: flatten it") from None
    except UnicodeDecodeError as e:
        raise YamlError(f"{where} is not a text file ({e.reason} at byte {e.start}); give a YAML file") from None
    except yaml.YAMLError as e:
        raise YamlError(f"{where}: not valid YAML ({' '.join(str(e).split())})") from None
    if root is not None:
        _bound(root, where)
    return text


def load_yaml(path: str | os.PathLike, *, what: str | None = None) -> Any:
    """The YAML file at ``path`` as Python data (PyYAML's safe loader), once ``check_yaml`` passed it.

    Raises:
        FileNotFoundError, YamlError: as ``check_yaml``.
    """
    text = check_yaml(path, what=what)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:  # a tag the safe loader does not construct
        raise YamlError(f"{what or path}: not valid YAML ({' '.join(str(e).split())})") from None


def load_yaml_config(path: str | os.PathLike, *, what: str | None = None, resolve: bool = True) -> Any:
    """The YAML file at ``path`` read as OmegaConf reads a config (``${...}`` interpolations resolved when
    ``resolve``), as plain containers, once ``check_yaml`` passed it.

    Raises:
        FileNotFoundError, YamlError: as ``check_yaml``, or an interpolation OmegaConf cannot resolve.
        KeyboardInterrupt: a Ctrl-C while it was read (never an OmegaConf error made of it).
    """
    check_yaml(path, what=what)
    try:
        return OmegaConf.to_container(OmegaConf.load(Path(path)), resolve=resolve)
    except Exception as e:
        if _interrupted(e):
            raise KeyboardInterrupt from None
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        raise YamlError(f"{what or path}: cannot read it as a config ({first})") from None
