"""What machine this is, GPU included: ``device_identity(kind)`` adds a GPU's name, driver and CUDA
version (and a Jetson's board) to the processor ``nas.machine.cpu_identity`` reads, for the metadata of
every table.  ``RuntimeUnavailable`` (the machine lacks what a target asks for), ``device_mismatch``
and ``OtherProcessorWarning`` live in ``nas.machine`` (below ``nas.target``) and are named here too for
the latency modules."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import torch

from nas.machine import cpu_identity

__all__ = ["device_identity"]


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
    """What this machine is, for a table's metadata.

    Args:
        kind: ``"cpu"``, ``"gpu"`` or ``"jetson"``: which device of the machine names it.

    Returns:
        ``nas.machine.cpu_identity()``'s fields with ``kind``; for a GPU or Jetson also ``gpu`` (its name,
        a Jetson's board), ``driver`` and ``cuda``.  ``name`` is the GPU's name when there is one, else
        the CPU's.
    """
    ident: dict[str, Any] = {**cpu_identity(), "kind": kind}
    if kind in ("gpu", "jetson"):
        if torch.cuda.is_available():
            ident["gpu"] = torch.cuda.get_device_name(0)
        ident["gpu"] = ident["gpu"] or _nvidia_smi("name")
        ident["driver"] = _nvidia_smi("driver_version")
        ident["cuda"] = _cuda_version() or torch.version.cuda
        if kind == "jetson" and ident.get("model"):
            ident["gpu"] = ident["model"]
    ident["name"] = ident["gpu"] if kind in ("gpu", "jetson") and ident["gpu"] else ident["cpu"]
    return ident
