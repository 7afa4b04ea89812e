"""This machine as a target: ``conf=here``.

``conf=here`` names the target of the machine the command runs on.  The first use writes
``$HWNAS_HOME/target/here_<slug>.yaml`` from the machine's identity (CPU model, vendor,
family/model, ISA flags, physical cores) with roofline figures measured here
(``nas.latency.roofline.measure_peaks``); later uses on the same machine reuse that file.  The
slug, and so the target's name and its table's name, comes from the identity
(``here_amd_epyc_f25m1_avx2_2c``), so another machine's ``conf=here`` is another target and
tables never mix.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from nas.resources import user_home

__all__ = ["HERE", "HERE_PREFIX", "ensure_here_target", "here_slug", "is_here_name", "machine_identity",
           "profile_command"]

log = logging.getLogger(__name__)

HERE = "here"
HERE_PREFIX = "here_"
_ISA_TIERS = (("amx", {"amx_tile", "amx_int8", "amx_bf16"}), ("avx512", {"avx512f"}), ("avx2", {"avx2"}),
              ("avx", {"avx"}), ("sve", {"sve"}), ("neon", {"asimd", "neon"}))


def is_here_name(name: str | None) -> bool:
    """Whether ``name`` is ``here`` or a target ``conf=here`` made (``here_<slug>``)."""
    return bool(name) and (name == HERE or name.startswith(HERE_PREFIX))


def profile_command(target_name: str) -> str:
    """The command that measures a target's table, as the user types it (``conf=here`` for this machine)."""
    return f"python -m nas.profile conf={HERE if is_here_name(target_name) else target_name}"


def _physical_cores(text: str) -> int:
    """Physical cores from /proc/cpuinfo (``cpu cores`` per ``physical id``), else the logical count."""
    ids = set(re.findall(r"^physical id\s*:\s*(\S+)", text, re.M))
    per = re.search(r"^cpu cores\s*:\s*(\d+)", text, re.M)
    if per:
        return int(per.group(1)) * max(len(ids), 1)
    return os.cpu_count() or 1


def machine_identity() -> dict[str, Any]:
    """This machine's CPU as ``nas.latency.device.device_identity`` records it in a table's metadata,
    plus ``vendor`` and ``physical_cores``."""
    from nas.latency.device import device_identity

    ident = device_identity("cpu")
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    m = re.search(r"^vendor_id\s*:\s*(\S+)", text, re.M)
    ident["vendor"] = m.group(1) if m else platform.machine()
    ident["physical_cores"] = _physical_cores(text)
    return ident


def here_slug(ident: dict[str, Any]) -> str:
    """``here_<cpu>_f<family>m<model>_<isa>_<cores>c`` for a ``machine_identity``."""
    name = re.sub(r"\((r|tm)\)|\bcpu\b|\bprocessor\b|@.*$", " ", str(ident.get("cpu") or "cpu").lower())
    parts = [re.sub(r"[^a-z0-9]+", "_", name).strip("_")[:32].strip("_") or "cpu"]
    if ident.get("cpu_family") is not None and ident.get("cpu_model") is not None:
        parts.append(f"f{ident['cpu_family']}m{ident['cpu_model']}")
    flags = set(ident.get("cpu_flags") or ())
    parts.append(next((tier for tier, need in _ISA_TIERS if flags & need), str(ident.get("machine") or "cpu")))
    parts.append(f"{ident.get('physical_cores') or ident.get('cpu_count') or 1}c")
    return HERE_PREFIX + "_".join(re.sub(r"[^a-z0-9]+", "_", p.lower()) for p in parts)


def _fingerprint(ident: dict[str, Any]) -> str:
    key = [ident.get(k) for k in ("cpu", "cpu_family", "cpu_model", "physical_cores")]
    key.append(sorted(ident.get("cpu_flags") or ()))
    return hashlib.sha1(json.dumps(key).encode()).hexdigest()[:6]


def _same_machine(path: Path, ident: dict[str, Any]) -> bool:
    """Whether the target file at ``path`` describes this machine (its CPU name and ISA flags)."""
    from omegaconf import OmegaConf

    try:
        dev = OmegaConf.to_container(OmegaConf.load(path)).get("device") or {}
    except Exception:  # an unreadable file is not this machine's: a new name is made beside it
        return False
    return dev.get("name") == ident.get("cpu") and set(dev.get("cpu_flags") or ()) == set(ident.get("cpu_flags") or ())


def _yaml(name: str, ident: dict[str, Any], peaks: dict[str, Any]) -> str:
    import yaml

    fam = (f"family {ident['cpu_family']} model {ident['cpu_model']} stepping {ident.get('cpu_stepping', '?')}"
           if ident.get("cpu_family") is not None else str(ident.get("machine") or ""))
    flags = list(ident.get("cpu_flags") or ())
    cores = ident.get("physical_cores") or ident.get("cpu_count") or 1
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = {
        "name": name,
        "device": {
            "name": ident.get("cpu"),
            "cpu_flags": flags,
            "kind": "cpu",
            "description": f"{ident.get('cpu')} ({ident.get('vendor', '?')}, {fam}; ISA {', '.join(flags) or 'none'}), "
                           f"{cores} physical cores; one core used",
            "peak_gflops": float(peaks["peak_gflops"]),
            "mem_bandwidth_gbs": float(peaks["mem_bandwidth_gbs"]),
            "overhead_us": float(peaks["overhead_us"]),
            "spec_source": f"{peaks['spec_source']}, {when}",
        },
        "runtime": "onnxruntime", "provider": "CPUExecutionProvider", "precision": "fp32",
        "batch": 1, "threads": 1, "resolution": None, "latency_budget_ms": 15.0, "table": f"{name}.json",
    }
    header = (
        f"# This machine's own target (conf=here), generated by hwnas on {when} from its identity:\n"
        f"# {ident.get('cpu')} ({ident.get('vendor', '?')}, {fam}), ISA {' '.join(flags) or 'none'}, "
        f"{cores} physical cores, {ident.get('machine', '?')}.\n"
        "# Roofline figures measured here (nas.latency.roofline.measure_peaks); onnxruntime CPU, fp32, batch 1,\n"
        "# 1 thread.  conf=here on this machine reuses this file; another machine's conf=here makes its own.\n"
        "# Its table: `python -m nas.profile conf=here`.\n"
    )
    return header + "defaults:\n  - /_target_schema@_here_\n  - _self_\n\n" + yaml.safe_dump(body, sort_keys=False, width=1000, default_flow_style=None)


def ensure_here_target(*, ident: dict[str, Any] | None = None, measure: Callable[[], dict[str, Any]] | None = None,
                       say: Callable[[str], None] = log.info) -> str:
    """This machine's target name (``here_<slug>``), writing ``$HWNAS_HOME/target/<name>.yaml`` first
    when it does not exist (its roofline measured by ``measure``, default ``measure_peaks``).  A file of
    that name describing another CPU (same slug, other flags) keeps its name; this one gets a suffix."""
    from nas._io import atomic_write_text, file_lock

    ident = ident or machine_identity()
    folder = user_home() / "target"
    name = here_slug(ident)
    if (folder / f"{name}.yaml").is_file() and not _same_machine(folder / f"{name}.yaml", ident):
        name = f"{name}_{_fingerprint(ident)}"
    path = folder / f"{name}.yaml"
    if path.is_file() and _same_machine(path, ident):
        return name
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with file_lock(folder / ".here", what=f"this machine's target {path}"):
            if path.is_file() and _same_machine(path, ident):  # another process wrote it meanwhile
                return name
            say(f"conf=here: writing this machine's target {path} (measuring its roofline, a few seconds)")
            if measure is None:
                from nas.latency.roofline import measure_peaks as measure
            atomic_write_text(path, _yaml(name, ident, measure()))
    except OSError as e:
        raise ValueError(f"conf=here: cannot write this machine's target {path} ({e.strerror or e}); "
                         "set HWNAS_HOME to a writable folder") from None
    return name
