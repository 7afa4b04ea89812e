"""This machine as a target: ``conf=here`` (its CPU) and ``conf=here_gpu`` (its NVIDIA GPU).

``conf=here`` names the target of the machine the command runs on.  The first use writes
``$HWNAS_HOME/target/here_<slug>.yaml`` from the machine's identity (CPU model, vendor,
family/model, ISA flags, physical cores) with roofline figures measured here
(``nas.latency.predict.roofline.measure_peaks``); later uses on the same machine reuse that file.  The
slug, and so the target's name and its table's name, comes from the identity
(``here_amd_epyc_f25m1_avx2_2c``), so another machine's ``conf=here`` is another target and
tables never mix.

``conf=here_gpu`` does the same for the machine's first NVIDIA GPU (fp32, batch 1, timed as CUDA-graph
replays): onnxruntime's CUDA provider where onnxruntime-gpu is installed, else torch's own CUDA runtime
(``gpu_runtime``), so torch alone can measure.  ``here_gpu_<gpu>.yaml`` records the GPU's name, driver
and CUDA version, with roofline figures measured on the GPU by ``measure_gpu_peaks`` (torch CUDA: a
MatMul, a copy, a chain of tiny kernels).  Without a GPU it is a one-line error.
"""

from __future__ import annotations

import dataclasses
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

import torch
import yaml

from nas._io import atomic_write_text, file_lock
from nas._optional import MissingDependency, try_import
from nas._yaml import load_yaml
from nas.latency.predict.roofline import measure_peaks
from nas.latency.runtimes import device_identity
from nas.resources import user_home
from nas.target import HERE_NAMES, Target
from nas.target import load_target as load_target_file

__all__ = ["HERE", "HERE_GPU", "HERE_PREFIX", "ensure_here_target", "gpu_identity", "gpu_runtime", "here_gpu_slug",
           "here_slug",
           "is_here_name", "machine_identity", "measure_gpu_peaks", "profile_command"]

log = logging.getLogger(__name__)

HERE = "here"
HERE_GPU = "here_gpu"
HERE_PREFIX = "here_"
# the latency budget a here target starts with, per device kind: a search places it among the space's
# sampled networks when it binds none of them (nas.search.budget), so it is a starting point, not a claim
HERE_BUDGET_MS = {"cpu": 15.0, "gpu": 2.0}
# how a here target runs (written into its file): Target's own defaults for precision, batch, threads, resolution
_RUN = {f.name: f.default for f in dataclasses.fields(Target) if f.name in ("precision", "batch", "threads", "resolution")}
_ISA_TIERS = (("amx", {"amx_tile", "amx_int8", "amx_bf16"}), ("avx512", {"avx512f"}), ("avx2", {"avx2"}),
              ("avx", {"avx"}), ("sve", {"sve"}), ("neon", {"asimd", "neon"}))


def is_here_name(name: str | None) -> bool:
    """Whether ``name`` is ``here`` or a target ``conf=here`` made (``here_<slug>``)."""
    return bool(name) and (name == HERE or name.startswith(HERE_PREFIX))


def _conf_name(target_name: str) -> str:
    """``conf=`` as the user types it for a target: ``here`` / ``here_gpu`` for this machine's own."""
    if target_name == HERE_GPU or target_name.startswith(HERE_GPU + "_"):
        return HERE_GPU
    return HERE if is_here_name(target_name) else target_name


def profile_command(target_name: str) -> str:
    """The command that measures a target's table, as the user types it (``conf=here`` for this machine)."""
    return f"python -m nas.profile conf={_conf_name(target_name)}"


def _physical_cores(text: str) -> int:
    """Physical cores from /proc/cpuinfo (``cpu cores`` per ``physical id``), else the logical count."""
    ids = set(re.findall(r"^physical id\s*:\s*(\S+)", text, re.M))
    per = re.search(r"^cpu cores\s*:\s*(\d+)", text, re.M)
    if per:
        return int(per.group(1)) * max(len(ids), 1)
    return os.cpu_count() or 1


def machine_identity() -> dict[str, Any]:
    """This machine's CPU as ``nas.latency.runtimes.device.device_identity`` records it in a table's metadata,
    plus ``vendor`` and ``physical_cores``."""
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


def _device_of(path: Path) -> dict[str, Any] | None:
    """The ``device`` a target file at ``path`` records, or None when it cannot be read (an unreadable
    file is not this machine's: a new name is made beside it)."""
    try:
        return load_yaml(path).get("device") or {}
    except Exception:
        return None


def _same_machine(path: Path, ident: dict[str, Any]) -> bool:
    """Whether the target file at ``path`` describes this machine (its CPU name and ISA flags)."""
    dev = _device_of(path)
    return (dev is not None and dev.get("name") == ident.get("cpu")
            and set(dev.get("cpu_flags") or ()) == set(ident.get("cpu_flags") or ()))


def _target_file(header: str, body: dict[str, Any]) -> str:
    """A target YAML: the comment ``header``, the target schema as its default, then ``body``."""
    return header + "defaults:\n  - /_target_schema@_here_\n  - _self_\n\n" + yaml.safe_dump(
        body, sort_keys=False, width=1000, default_flow_style=None)


def _yaml(name: str, ident: dict[str, Any], peaks: dict[str, Any]) -> str:

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
        "runtime": "onnxruntime", "provider": "CPUExecutionProvider", **_RUN,
        "latency_budget_ms": HERE_BUDGET_MS["cpu"], "table": f"{name}.json",
    }
    header = (
        f"# This machine's own target (conf=here), generated by hwnas on {when} from its identity:\n"
        f"# {ident.get('cpu')} ({ident.get('vendor', '?')}, {fam}), ISA {' '.join(flags) or 'none'}, "
        f"{cores} physical cores, {ident.get('machine', '?')}.\n"
        "# Roofline figures measured here (nas.latency.predict.roofline.measure_peaks); onnxruntime CPU, fp32, batch 1,\n"
        "# 1 thread.  conf=here on this machine reuses this file; another machine's conf=here makes its own.\n"
        "# Its table: `python -m nas.profile conf=here`.\n"
    )
    return _target_file(header, body)


def gpu_identity() -> dict[str, Any]:
    """This machine's first NVIDIA GPU as ``device_identity("gpu")`` records it (name, driver, CUDA);
    a one-line error when there is none."""
    ident = device_identity("gpu")
    if not ident.get("gpu"):
        raise ValueError(f"conf={HERE_GPU}: no NVIDIA GPU is visible on this machine (neither torch.cuda nor "
                         f"nvidia-smi sees one); conf={HERE} is this machine's CPU")
    return ident


def here_gpu_slug(ident: dict[str, Any]) -> str:
    """``here_gpu_<gpu name>`` for a ``gpu_identity`` (``here_gpu_h100_80gb_hbm3``)."""
    name = re.sub(r"\bnvidia\b|\bgeforce\b", " ", str(ident.get("gpu") or "gpu").lower())
    return f"{HERE_GPU}_" + (re.sub(r"[^a-z0-9]+", "_", name).strip("_")[:40].strip("_") or "gpu")


def _same_gpu(path: Path, ident: dict[str, Any]) -> bool:
    """Whether the target file at ``path`` describes this machine's GPU (its name)."""
    dev = _device_of(path)
    return dev is not None and dev.get("name") == ident.get("gpu") and dev.get("kind") == "gpu"


def gpu_runtime() -> tuple[str, str, str]:
    """The runtime ``conf=here_gpu`` measures with: ``(runtime, provider, why)``; onnxruntime's CUDA
    provider when onnxruntime-gpu offers it, else torch's CUDA runtime."""
    try:
        ort = try_import("onnxruntime")
    except MissingDependency:  # torch's CUDA runtime measures without it
        return "torch", "cuda", "onnxruntime is not installed"
    if hasattr(ort, "preload_dlls"):
        try:
            ort.preload_dlls()
        except Exception:  # a missing CUDA library shows as the provider missing below
            pass
    if "CUDAExecutionProvider" in ort.get_available_providers():
        return "onnxruntime", "CUDAExecutionProvider", f"onnxruntime-gpu {ort.__version__} is installed"
    return "torch", "cuda", (f"onnxruntime {ort.__version__} has no CUDAExecutionProvider "
                             "(pip install onnxruntime-gpu to measure with it)")


def _gpu_yaml(name: str, ident: dict[str, Any], peaks: dict[str, Any],
              runtime: tuple[str, str, str] | None = None) -> str:
    rt, provider, why = runtime or gpu_runtime()
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = {
        "name": name,
        "device": {
            "name": ident.get("gpu"), "kind": "gpu",
            "description": f"{ident.get('gpu')} (driver {ident.get('driver') or '?'}, CUDA {ident.get('cuda') or '?'}) "
                           f"in a machine with {ident.get('cpu')}",
            "peak_gflops": float(peaks["peak_gflops"]), "mem_bandwidth_gbs": float(peaks["mem_bandwidth_gbs"]),
            "overhead_us": float(peaks["overhead_us"]), "spec_source": f"{peaks['spec_source']}, {when}",
        },
        "runtime": rt, "provider": provider, **_RUN,
        "latency_budget_ms": HERE_BUDGET_MS["gpu"], "table": f"{name}.json", "cuda_graph": True,
    }
    header = (
        f"# This machine's own GPU target (conf={HERE_GPU}), generated by hwnas on {when} from its identity:\n"
        f"# {ident.get('gpu')}, driver {ident.get('driver') or '?'}, CUDA {ident.get('cuda') or '?'}.\n"
        "# Roofline figures measured on the GPU (nas.latency.predict.here.measure_gpu_peaks).\n"
        f"# Runtime {rt} ({provider}): {why}.  fp32, batch 1, timed as CUDA-graph replays\n"
        f"# (cuda_graph: true; false times eager calls).  Its table: `python -m nas.profile conf={HERE_GPU}`.\n"
    )
    return _target_file(header, body)


def measure_gpu_peaks(*, matmul_n: int = 4096, copy_mb: int = 1024,  # pragma: no cover - needs a CUDA GPU
                      chain_ops: int = 200) -> dict[str, Any]:
    """The first CUDA GPU's fp32 roofline figures, measured with torch and CUDA events (TF32 off):
    ``peak_gflops`` (an n x n MatMul), ``mem_bandwidth_gbs`` (a copy of ``copy_mb`` MB, read + write),
    ``overhead_us`` (per kernel of a chain of tiny ReLUs); ``spec_source`` says how."""
    dev = torch.device("cuda")

    def best_ms(fn, repeats: int = 10) -> float:
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        return min(times)

    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        x = torch.randn(matmul_n, matmul_n, device=dev)
        peak = 2 * matmul_n**3 / (best_ms(lambda: x @ x) * 1e-3) / 1e9
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.empty(copy_mb * 2**20 // 4, device=dev)
    b = torch.empty_like(a)
    bw = 2 * a.numel() * 4 / (best_ms(lambda: b.copy_(a)) * 1e-3) / 1e9
    t = torch.ones(8, device=dev)

    def chain(k: int):
        return lambda: [torch.relu_(t) for _ in range(k)]

    overhead = max((best_ms(chain(chain_ops)) - best_ms(chain(1))) / (chain_ops - 1) * 1e3, 0.01)
    return {"peak_gflops": round(peak, 1), "mem_bandwidth_gbs": round(bw, 1),
            "overhead_us": round(overhead, 3),
            "spec_source": f"measured on {torch.cuda.get_device_name(0)} by nas.latency.predict.here.measure_gpu_peaks: MatMul "
                           f"{matmul_n}^3 fp32 {peak:.0f} GFLOP/s, {copy_mb} MB copy {bw:.0f} GB/s, {overhead:.2f} us "
                           "per kernel"}


def ensure_here_target(*, kind: str = "cpu", ident: dict[str, Any] | None = None,
                       measure: Callable[[], dict[str, Any]] | None = None, say: Callable[[str], None] = log.info) -> str:
    """This machine's target name (``here_<slug>``; with ``kind="gpu"`` its GPU's, ``here_gpu_<gpu>``),
    writing ``$HWNAS_HOME/target/<name>.yaml`` first when it does not exist (its roofline measured by
    ``measure``, default ``measure_peaks`` / ``measure_gpu_peaks``).  A file of that name describing
    another CPU (same slug, other flags) keeps its name; this one gets a suffix."""
    gpu = kind == "gpu"
    ident = ident or (gpu_identity() if gpu else machine_identity())
    same, conf = (_same_gpu, HERE_GPU) if gpu else (_same_machine, HERE)
    folder = user_home() / "target"
    name = here_gpu_slug(ident) if gpu else here_slug(ident)
    if (folder / f"{name}.yaml").is_file() and not same(folder / f"{name}.yaml", ident):
        name = f"{name}_{_fingerprint(ident)}"
    path = folder / f"{name}.yaml"
    if path.is_file() and same(path, ident):
        return name
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with file_lock(folder / ".here", what=f"this machine's target {path}"):
            if path.is_file() and same(path, ident):  # another process wrote it meanwhile
                return name
            say(f"conf={conf}: writing this machine's target {path} (measuring its roofline, a few seconds)")
            if measure is None:
                measure = measure_gpu_peaks if gpu else measure_peaks
            if gpu:
                rt = gpu_runtime()
                say(f"conf={conf}: measuring with {rt[0]} ({rt[1]}, CUDA-graph replays): {rt[2]}")
                atomic_write_text(path, _gpu_yaml(name, ident, measure(), rt))
            else:
                atomic_write_text(path, _yaml(name, ident, measure()))
    except OSError as e:
        raise ValueError(f"conf={conf}: cannot write this machine's target {path} ({e.strerror or e}); "
                         "set HWNAS_HOME to a writable folder") from None
    return name


def load_target(name: str) -> Target:
    """A target by name, this machine's own included (``nas.load_target``).

    ``here`` / ``here_gpu`` name this machine's CPU / first NVIDIA GPU: the first use writes
    ``$HWNAS_HOME/target/here_<slug>.yaml`` (its roofline measured here, a few seconds), later uses read
    it.  Any other name is a target file, read by ``nas.target.load_target``.

    Args:
        name: a name from ``nas.target.target_names()``.

    Returns:
        The ``Target``.

    Raises:
        ValueError: an unknown name (listing the targets), a file whose fields are unknown or out of range,
            ``here_gpu`` without a GPU, or ``$HWNAS_HOME`` not writable.

    Example:
        >>> import nas
        >>> nas.load_target("here").device.kind
        'cpu'
    """
    if name in HERE_NAMES:
        name = ensure_here_target(kind="gpu" if name == HERE_GPU else "cpu")
    return load_target_file(name)
