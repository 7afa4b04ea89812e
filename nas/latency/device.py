"""What machine this is: the device identity recorded in every table's metadata (CPU model, ISA
flags, family / model; GPU name, driver, CUDA; a Jetson's board and L4T release), and the check
that a machine is the device a target or a table describes; ``RuntimeUnavailable`` when it lacks
what a target asks for.  ``measure_bundle.py`` reads the same fields the same way on devices
without hwnas."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

from nas.latency.bundle_device import jetson_release

__all__ = ["OtherProcessorWarning", "RuntimeUnavailable", "device_identity", "device_mismatch"]


class OtherProcessorWarning(UserWarning):
    """A CPU target's latency table was measured on another processor than this machine's: its
    latencies are that processor's (``nas.load_latency_model`` warns; the commands print it as a
    ``WARNING:`` line instead)."""


class RuntimeUnavailable(RuntimeError):
    """The runtime, provider or device a target asks for is not available here."""


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


def _nvidia_smi(query: str) -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def _cuda_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"CUDA Version:\s*([\d.]+)", out)
    return m.group(1) if m else None


def device_identity(kind: str = "cpu") -> dict[str, Any]:
    """What this machine is, for table metadata: CPU model and flags, GPU name, driver and CUDA, and
    on a Jetson its board and L4T release (the board's model is its name)."""
    info = _cpuinfo()
    ident: dict[str, Any] = {
        "kind": kind,
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
    if kind in ("gpu", "jetson"):
        import torch

        if torch.cuda.is_available():
            ident["gpu"] = torch.cuda.get_device_name(0)
        ident["gpu"] = ident["gpu"] or _nvidia_smi("name")
        ident["driver"] = _nvidia_smi("driver_version")
        ident["cuda"] = _cuda_version() or torch.version.cuda
        if kind == "jetson" and ident.get("model"):
            ident["gpu"] = ident["model"]
    ident["name"] = ident["gpu"] if kind in ("gpu", "jetson") and ident["gpu"] else ident["cpu"]
    return ident


def _words(name: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", name.lower())) - {"nvidia"}


def device_mismatch(want: dict[str, Any] | None, here: dict[str, Any], *, exact: bool = False) -> str | None:
    """Why the machine ``here`` (a ``device_identity``) is not the device ``want`` describes, or None.

    ``want`` is a target's ``device`` config (its ``name`` and the ``cpu_flags`` it requires) or, with
    ``exact=True``, a table's recorded ``device`` metadata, whose ISA flags and CPU family/model must all be
    the same: one model name can cover processors of different speed (``AMD EPYC`` with and without AVX-512).
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
