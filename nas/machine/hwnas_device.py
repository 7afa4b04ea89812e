"""This device's identity, for a hwnas device bundle: standalone, standard library only.

Copied into every bundle under this name, beside ``measure_bundle.py`` (``nas.latency.bundle.SCRIPTS``);
records the fields hwnas's ``nas.profile`` records, read the same way: CPU model, ISA flags,
family/model, cores; on a GPU its name, driver and CUDA version; on a Jetson the board
(``/proc/device-tree/model``) and L4T release.
The device's kind is read from the machine (``machine_kind``), never from the bundle.
"""

import os
import platform
import re
import subprocess

_FLAGS = {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_tile", "amx_int8",
          "amx_bf16", "asimd", "asimddp", "sve", "neon"}


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read().replace("\x00", "").strip()
    except OSError:
        return None


def run_out(cmd):
    try:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                             timeout=20)  # not capture_output / text: Python 3.6
        return out.stdout if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def jetson_release(ident):
    """A Jetson's board (/proc/device-tree/model) and L4T release (/etc/nv_tegra_release) into ``ident``;
    hwnas's own device identity (nas.machine.identity) reads them through this function too."""
    tegra = read_text("/etc/nv_tegra_release")
    if tegra:  # "# R36 (release), REVISION: 3.0, ..." -> L4T 36.3.0
        ident["jetpack"] = tegra.splitlines()[0]
        m = re.search(r"R(\d+) \(release\), REVISION: ([\d.]+)", tegra)
        ident["l4t"] = f"{m.group(1)}.{m.group(2)}" if m else None
    model = read_text("/proc/device-tree/model")
    if model:
        ident["model"] = model


def identity(kind):
    info = read_text("/proc/cpuinfo") or ""
    cpu = next((ln.split(":", 1)[1].strip() for ln in info.splitlines()
                if ln.lower().startswith(("model name", "hardware", "cpu model"))), None)
    flags = re.search(r"^(flags|Features)\s*:\s*(.*)$", info, re.M)
    ident = {"kind": kind, "cpu": cpu or platform.processor() or platform.machine(),
             "cpu_flags": sorted(set(flags.group(2).split()) & _FLAGS) if flags else [],
             "cpu_count": os.cpu_count(), "machine": platform.machine(), "os": platform.platform(),
             "gpu": None, "driver": None, "cuda": None, "jetpack": None}
    for key, field in (("cpu family", "cpu_family"), ("model", "cpu_model"), ("stepping", "cpu_stepping")):
        m = re.search(rf"^{key}\s*:\s*(\S+)\s*$", info, re.M)
        if m:
            ident[field] = m.group(1)
    jetson_release(ident)
    if kind in ("gpu", "jetson"):
        q = run_out(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
        if q and q.strip():
            parts = [s.strip() for s in q.splitlines()[0].split(",")]
            ident["gpu"], ident["driver"] = parts[0], parts[1] if len(parts) > 1 else None
        head = run_out(["nvidia-smi"]) or ""
        m = re.search(r"CUDA Version:\s*([\d.]+)", head)
        ident["cuda"] = m.group(1) if m else None
        if kind == "jetson" and ident.get("model"):
            ident["gpu"] = ident["model"]
    ident["name"] = ident["gpu"] if kind in ("gpu", "jetson") and ident["gpu"] else ident["cpu"]
    return ident


def machine_kind():
    """This machine's kind, read from it (never from the bundle): jetson (a Tegra board), gpu
    (nvidia-smi lists an NVIDIA GPU) or cpu."""
    if "jetson" in (read_text("/proc/device-tree/model") or "").lower() or read_text("/etc/nv_tegra_release"):
        return "jetson"
    return "gpu" if (run_out(["nvidia-smi", "-L"]) or "").strip() else "cpu"


def measured_kind(rt_info):
    """The kind of processor a runtime measured on: the CPU for CPU runtimes, else this machine's kind."""
    on_cpu = rt_info["name"] in ("executorch", "openvino", "litert") or rt_info.get("provider") == "CPUExecutionProvider"
    return "cpu" if on_cpu else machine_kind()
