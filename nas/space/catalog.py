"""The shipped search spaces and loading one: by name from ``search_spaces/``, or any YAML file by path."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nas._yaml import YamlError, load_yaml_config
from nas.cost import arch_cost
from nas.resources import spaces_dir
from nas.space.parse import SpaceError
from nas.space.space import SearchSpace

__all__ = ["SPACES_DIR", "list_calibration_spaces", "list_spaces", "load_space", "space_names", "summarize"]

SPACES_DIR = spaces_dir()


def list_spaces() -> list[str]:
    """The shipped search spaces.

    Returns:
        The names (``search_space=<name>``) of the spaces in ``search_spaces/``, sorted; the
        calibration-only ones are apart (:func:`list_calibration_spaces`).
    """
    return sorted(p.stem for p in SPACES_DIR.glob("*.yaml"))


def space_names(spaces: str | Sequence[str] | None) -> list[str]:
    """Normalise a ``search_space`` setting that may name one space, several or none.

    Args:
        spaces: A name, a sequence of names, or None / empty.

    Returns:
        The names as a list; every shipped search space (:func:`list_spaces`) for None or empty.
    """
    return list_spaces() if not spaces else [str(spaces)] if isinstance(spaces, str) else [str(n) for n in spaces]


def list_calibration_spaces() -> list[str]:
    """The calibration-only spaces.

    ``nas.profile`` measures their blocks and seeded networks for the predictor's calibration, so
    that it also covers networks unlike the search spaces' (deep ReLU networks,
    depthwise-separable-only ones).  Nothing searches them and nothing validates on them.

    Returns:
        Their names as :func:`load_space` takes them (``calibration/<name>``), sorted.
    """
    return sorted(f"calibration/{p.stem}" for p in (SPACES_DIR / "calibration").glob("*.yaml"))


def load_space(name_or_path: str | Path) -> SearchSpace:
    """Load a search space: a shipped one by name, or any YAML file by path.

    Args:
        name_or_path: A shipped name (``tiny``, ``mbv3``, ``calibration/mbv2like``) or the path of a
            ``.yaml`` / ``.yml`` file.

    Returns:
        The validated ``SearchSpace``.

    Raises:
        SpaceError: The name is unknown (the message lists the shipped ones), the file does not
            exist or is not valid YAML (or stands for more values than ``nas._yaml`` reads: an alias
            bomb), or the space is malformed or beyond a limit.

    Example:
        >>> from nas import load_space
        >>> load_space("tiny").name
        'tiny'
    """
    p = Path(name_or_path)
    if p.suffix not in (".yaml", ".yml") and not p.exists():
        p = SPACES_DIR / f"{name_or_path}.yaml"
        if not p.is_file():
            raise SpaceError(
                f"unknown search space {str(name_or_path)!r}: not a file, and not one of the shipped "
                f"spaces ({', '.join(list_spaces())}) in {SPACES_DIR}"
            )
    if not p.is_file():
        raise SpaceError(f"search space file not found: {p}")
    try:  # bounded before anything expands it (an alias bomb is refused in milliseconds)
        cfg = load_yaml_config(p)
    except YamlError as e:  # yaml or interpolation errors, a file beyond the bounds
        raise SpaceError(str(e)) from None
    return SearchSpace(cfg, source=str(p))  # type: ignore[arg-type]


def summarize(space: SearchSpace, *, samples: int = 200, seed: int = 0) -> dict[str, Any]:
    """Size, unique block count and params / MACs statistics over a seeded sample."""
    rng = np.random.default_rng(seed)
    costs = [arch_cost(space.random(rng)) for _ in range(samples)]
    params = np.array([c.params for c in costs], dtype=np.int64)
    macs = np.array([c.macs for c in costs], dtype=np.int64)
    stat = lambda v: {"min": int(v.min()), "median": int(np.median(v)), "max": int(v.max())}  # noqa: E731
    return {
        "name": space.name,
        "source": space.source,
        "resolution": space.resolution,
        "channel_multiple": space.channel_multiple,
        "size": space.size(),
        "unique_blocks": len(space.unique_blocks()),
        "samples": samples,
        "seed": seed,
        "params": stat(params),
        "macs": stat(macs),
    }
