"""Whether a table's runtime version is the one installed here, and whether a difference matters.

A table records the runtime that measured it (``metadata.runtime``: name and version).  When this
machine runs a CPU target's runtime in another version (``nas.machine.installed_version``),
``runtime_note`` says so in one line, and how much it may matter: a patch release keeps the kernels,
so the timings are expected to hold; a minor or major release may change the kernels a block runs, so
``nas.validate`` (which measures held-out networks here against the predictions) tells whether the
table still predicts them.
"""

from __future__ import annotations

import re
from typing import Any

from nas.latency.runtimes import VIA as PHONE_VIA
from nas.machine import installed_version
from nas.target import Target

__all__ = ["runtime_note"]


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+")[0])[:3])


def runtime_note(target: Target, metadata: dict[str, Any], *, installed: str | None = None) -> str | None:
    """One line when a CPU target's table was measured with another version of its runtime than the
    one installed here (``installed``, default looked up), saying whether that matters; else None.
    Remote devices (a Jetson, a GPU, a phone measured by LiteRT's ``benchmark_model`` over adb) run their
    own runtime, so their tables get no note; nor does a table whose runtime version is not known."""
    rt = metadata.get("runtime") or {}
    name, measured = rt.get("name"), rt.get("version")
    if target.device.kind != "cpu" or not name or not measured or rt.get("via") == PHONE_VIA or not _release(measured):
        return None
    installed = installed or installed_version(name)
    if installed is None or _release(installed) == _release(measured):
        return None
    a, b = _release(measured), _release(installed)
    if a[:2] == b[:2]:
        why = "a patch release apart: the kernels are the same, the timings are expected to hold"
    else:
        why = (f"another release: its kernels may time differently; python -m nas.validate conf={target.name} "
               "measures how well the table still predicts here")
    return f"note: the {target.name} table was measured with {name} {measured}; {installed} is installed here ({why})"
