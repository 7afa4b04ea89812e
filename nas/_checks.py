"""Value checks shared by the settings dataclasses: a ``ValueError`` naming the field, the value and what is allowed."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["check_number"]


def check_number(name: str, v: Any, *, integer: bool = False, zero: bool = False) -> None:
    """``v`` must be a positive (``zero``: non-negative) integer, or finite number; never a bool."""
    ok = not isinstance(v, bool) and isinstance(v, int if integer else (int, float))
    if not ok or (v < 0 if zero else v <= 0) or (not integer and not math.isfinite(v)):
        kind = "integer" if integer else "number"
        raise ValueError(f"{name} must be a {'non-negative' if zero else 'positive'} {kind}, got {v!r}")
