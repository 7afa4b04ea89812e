"""Value checks shared by the settings dataclasses: a ``ValueError`` naming the field, the value and what is allowed."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MAX_RESOLUTION", "check_number", "check_resolution"]

#: The largest input resolution (pixels on a side) of a space, a target, a dataset or a network: far
#: beyond what any latency table measured, and at it one activation of 16 channels is already 1 GiB.
MAX_RESOLUTION = 4096


def check_number(name: str, v: Any, *, integer: bool = False, zero: bool = False) -> None:
    """``v`` must be a positive (``zero``: non-negative) integer, or finite number; never a bool."""
    ok = not isinstance(v, bool) and isinstance(v, int if integer else (int, float))
    if not ok or (v < 0 if zero else v <= 0) or (not integer and not math.isfinite(v)):
        kind = "integer" if integer else "number"
        raise ValueError(f"{name} must be a {'non-negative' if zero else 'positive'} {kind}, got {v!r}")


def check_resolution(name: str, v: Any) -> None:
    """``v`` must be a positive integer of at most ``MAX_RESOLUTION`` pixels; never a bool."""
    check_number(name, v, integer=True)
    if v > MAX_RESOLUTION:
        raise ValueError(f"{name}={v} px is more than the {MAX_RESOLUTION} px an input may have on a side (beyond "
                         f"every latency table, and more activation memory than a device holds); give "
                         f"{MAX_RESOLUTION} or less")
