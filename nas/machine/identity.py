"""What processor this is: the CPU identity recorded in every table's metadata (model name, ISA flags,
family / model; a Jetson's board and L4T release), and the check that a machine is the device a target
or a table describes.

Standard library only: a target (``nas.target``) checks its processor with it, and
``nas.latency.runtimes.device`` adds the GPU fields on top.  ``measure_bundle.py`` reads the same fields the
same way on devices without hwnas (``nas.machine.hwnas_device``).
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

from nas.machine.hwnas_device import jetson_release

__all__ = ["OtherProcessorWarning", "RuntimeUnavailable", "cpu_identity", "device_mismatch"]


class RuntimeUnavailable(RuntimeError):
    """The runtime, provider or device a target asks for is not available on this machine."""


class OtherProcessorWarning(UserWarning):
    """A CPU target or its latency table names another processor than this machine's: its latencies are
    that processor's (``nas.load_target`` and ``nas.load_latency_model`` warn; the commands print it as
    a ``WARNING:`` line instead)."""


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def _cpu_name(text: str) -> str:
    for line in text.splitlines():
        if line.lower().startswith(("model name", "hardware", "cpu model")):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _cpu_flags(text: str) -> list[str]:
    interesting = {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_tile",
                   "amx_int8", "amx_bf16", "asimd", "asimddp", "sve", "neon"}
    m = re.search(r"^(flags|Features)\s*:\s*(.*)$", text, re.M)
    return sorted(set(m.group(2).split()) & interesting) if m else []


def _cpu_model(text: str) -> dict[str, str]:
    """x86 CPU family / model / stepping (empty elsewhere): the same model name can hide different
    microarchitectures on cloud machines (``AMD EPYC`` is Zen 3 at family 25, Zen 5 at 26)."""
    out = {}
    for key, field in (("cpu family", "cpu_family"), ("model", "cpu_model"), ("stepping", "cpu_stepping")):
        m = re.search(rf"^{key}\s*:\s*(\S+)\s*$", text, re.M)
        if m:
            out[field] = m.group(1)
    return out


def cpu_identity() -> dict[str, Any]:
    """This machine's processor as a table's metadata records it.

    Returns:
        ``kind`` (``"cpu"``), ``name`` and ``cpu`` (the model name), ``cpu_flags`` (the ISA extensions
        hwnas cares about), ``cpu_family`` / ``cpu_model`` / ``cpu_stepping`` (x86 only), ``cpu_count``,
        ``machine``, ``os``; ``gpu``, ``driver`` and ``jetpack`` as None, except on a Jetson, where
        ``model`` (the board) and ``jetpack`` (its L4T release) are read.

    Example:
        >>> from nas.machine import cpu_identity
        >>> cpu_identity()["kind"]
        'cpu'
    """
    info = _cpuinfo()
    ident: dict[str, Any] = {
        "kind": "cpu",
        "cpu": _cpu_name(info),
        "cpu_flags": _cpu_flags(info),
        **_cpu_model(info),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "os": platform.platform(),
        "gpu": None,
        "driver": None,
        "jetpack": None,
    }
    jetson_release(ident)
    ident["name"] = ident["cpu"]
    return ident


def _words(name: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", name.lower())) - {"nvidia"}


def device_mismatch(want: dict[str, Any] | None, here: dict[str, Any], *, exact: bool = False) -> str | None:
    """Why the machine ``here`` is not the device ``want`` describes.

    Args:
        want: a target's ``device`` (its ``name`` and the ``cpu_flags`` it requires) or, with
            ``exact=True``, a table's recorded ``device`` metadata.
        here: this machine, as ``cpu_identity()`` or ``nas.latency.runtimes.device.device_identity(kind)`` gives it.
        exact: a table's device: its ISA flags and CPU family / model must all be the same (one model name
            can cover processors of different speed, ``AMD EPYC`` with and without AVX-512); without it a
            GPU or board matches by the words of its name and a CPU needs at least the flags asked for.

    Returns:
        None when ``here`` is that device, else one sentence saying what differs.
    """
    want = want or {}
    name = want.get("name")
    gpu = here.get("kind", "cpu") != "cpu" and not exact
    # a GPU or board by the words of its name ("Jetson AGX Orin" is the "NVIDIA Jetson AGX Orin Developer
    # Kit"); a CPU by its exact model name
    if name and here.get("name") != name and not (gpu and _words(name) <= _words(str(here.get("name") or ""))):
        return f"this machine is {here.get('name')!r}, not {name!r}"
    if here.get("kind", "cpu") != "cpu" and want.get("kind", "cpu") != "cpu":
        return None
    need, have = set(want.get("cpu_flags") or ()), set(here.get("cpu_flags") or ())
    if exact and want.get("cpu_flags") is not None and need != have:
        return (f"this machine's CPU has ISA flags {sorted(have)}, the measured one had {sorted(need)} "
                "(same name, different processor)")
    if not exact and need - have:
        return f"this machine's CPU lacks {sorted(need - have)} (it has {sorted(have)})"
    for f in ("cpu_family", "cpu_model"):
        if exact and want.get(f) is not None and here.get(f) is not None and str(want[f]) != str(here[f]):
            return f"this machine's CPU is {f.replace('_', ' ')} {here[f]}, the measured one was {want[f]}"
    return None
