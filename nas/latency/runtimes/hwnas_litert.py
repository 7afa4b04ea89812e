"""LiteRT graphs (``.tflite``) timed for a hwnas device bundle: standalone, standard library and numpy only.

Copied into every device bundle as ``hwnas_litert.py`` beside ``measure_bundle.py``, which measures a
LiteRT bundle in one of two ways:

- ``--runtime litert`` (an ARM board: a Raspberry Pi, a Jetson's CPU; or any machine): ``ai-edge-litert``'s
  Python interpreter (``pip install ai-edge-litert``) with XNNPACK, LiteRT's default CPU delegate, on
  the bundle's threads; ``interpreter_runner`` gives the call ``measure_bundle.py``'s timing loop times.
- ``--runtime benchmark_model`` (an Android phone, over ``adb``): LiteRT's ``benchmark_model`` binary
  runs each graph on the phone.  ``BenchmarkModel`` pushes the binary (when given) and each graph to
  ``/data/local/tmp/hwnas/``, runs ``benchmark_model --graph=... --num_threads=1 --use_xnnpack=true``
  with the bundle's warm-up, repeats and minimum time (``benchmark_command``), and reads its output
  with ``parse_output``; ``android_identity`` reads the phone (``getprop``, ``/proc/cpuinfo``), so the
  results name the phone, never the computer driving it.

``parse_output`` reads what ``benchmark_model`` prints, in the formats real runs show: the warm-up and
the timed run each end in a statistics line, ``count=50 first=... curr=... min=... max=... avg=...
std=...``, to which newer builds add ``p5=... median=... p95=...`` (microseconds; a ``count=N
curr=X(all same)`` line when every run took the same time); lines may carry an ``INFO:`` prefix or
Android's logcat prefix.  The timed run is the last statistics line after a ``Running benchmark for
at least ...`` header (never the warm-up's, never op profiling's ``Timings (microseconds):`` line).
Its median is ``median=`` where printed; older builds print only the mean (``avg=``), which is then
the figure, labelled so (``statistic``).  LiteRT's newer CompiledModel tool prints a ``BENCHMARK
RESULTS`` block instead (``Inference (avg): 7430.20 ms (10 runs)``), read the same way.
"""

import argparse
import hashlib
import os
import re
import shlex
import subprocess
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple  # typing's: Python 3.6

try:
    from importlib.metadata import version as _dist_version
except ImportError:  # Python 3.6 / 3.7 (JetPack 4.6): the bundle's other runtimes still run there
    _dist_version = None

import numpy as np

__all__ = ["DEVICE_DIR", "VIA", "BenchmarkError", "BenchmarkModel", "add_phone_arguments", "android_identity",
           "benchmark_command", "interpreter_runner", "litert_factory", "parse_output"]

DEVICE_DIR = "/data/local/tmp/hwnas"  # where graphs and the binary go on the phone (adb can write there)
VIA = "benchmark_model over adb"  # the runtime's ``via`` in the results and the table of a phone
_FLAGS = {"asimd", "asimddp", "asimdhp", "i8mm", "bf16", "sve", "sve2", "fphp", "neon"}
_HEADER = re.compile(r"Running benchmark for (?:at least )?(\d+) iterations")
_STAT = re.compile(r"\bcount=\d+\b.*")
_PAIR = re.compile(r"\b(count|first|curr|min|max|avg|std|p5|median|p95)=(-?\d+(?:\.\d*)?(?:e[-+]?\d+)?)")
_NEXT = re.compile(r"Inference \((avg|median|min|max)\):\s*([\d.]+)\s*ms(?:\s*\((\d+) runs\))?")
_FAILED = re.compile(r"(Benchmarking failed|Failed to apply XNNPACK delegate|Failed to allocate tensors"
                     r"|ERROR: .*)")


class BenchmarkError(RuntimeError):
    """benchmark_model failed, or printed nothing this module can read as a timed run."""


def _litert_version() -> str:
    """ai-edge-litert's version (``importlib.metadata`` from Python 3.8 on; "unknown" before it)."""
    return "unknown" if _dist_version is None else _dist_version("ai-edge-litert")


def _stat_line(line: str) -> Dict[str, Any]:
    vals = {k: float(v) for k, v in _PAIR.findall(line)}
    if "(all same)" in line and "avg" not in vals:  # every run took ``curr``: min = max = median
        vals.update({"avg": vals["curr"], "median": vals.get("median", vals["curr"])})
    return vals


def parse_output(text: str) -> Dict[str, Any]:
    """The timed run of ``benchmark_model``'s output: ``median_ms`` (the median where printed, else the
    mean, as ``statistic`` says), ``mean_ms``, ``p5_ms`` / ``p95_ms`` (None where not printed), ``n``,
    ``p10_ms`` / ``p90_ms`` (always None: benchmark_model prints no such percentile), and
    ``xnnpack`` (how much of the graph XNNPACK took, as printed; None where it printed nothing).

    Raises:
        BenchmarkError: the output holds no timed run (the message names the failure it reports, if any).
    """
    failed = _FAILED.search(text)
    lines = text.splitlines()
    headers = [i for i, ln in enumerate(lines) if _HEADER.search(ln)]
    stats = None
    if headers:
        stats = next((_stat_line(ln) for ln in lines[headers[-1] + 1:] if _STAT.search(ln)
                      and "Timings (microseconds)" not in ln), None)
    if stats is None or "avg" not in stats:
        nxt = {k: (float(v), r) for k, v, r in _NEXT.findall(text)}
        if "avg" not in nxt:
            if failed:
                raise BenchmarkError(f"benchmark_model failed: {failed.group(0).strip()}: {text.strip()[-600:]}")
            raise BenchmarkError(f"benchmark_model printed no statistics of a timed run: {text.strip()[-600:]}")
        med = nxt.get("median", nxt["avg"])[0]
        return {"median_ms": med, "mean_ms": nxt["avg"][0], "p10_ms": None, "p90_ms": None, "p5_ms": None,
                "p95_ms": None, "n": int(nxt["avg"][1] or 0), "statistic": "median" if "median" in nxt else "mean",
                "xnnpack": _delegation(text)}
    def ms(key: str) -> Optional[float]:  # benchmark_model prints microseconds
        return round(stats[key] * 1e-3, 6) if key in stats else None

    return {"median_ms": ms("median") if "median" in stats else ms("avg"), "mean_ms": ms("avg"),
            "p10_ms": None, "p90_ms": None, "p5_ms": ms("p5"), "p95_ms": ms("p95"), "n": int(stats["count"]),
            "statistic": "median" if "median" in stats else "mean", "xnnpack": _delegation(text)}


def _delegation(text: str) -> Optional[str]:
    m = re.search(r"Replacing (\d+) out of (\d+) node\(s\) with delegate \(TfLiteXNNPackDelegate\) node, yielding "
                  r"(\d+) partitions", text)
    if m:
        return f"{m.group(1)} of {m.group(2)} nodes in {m.group(3)} partition(s)"
    m = re.search(r"Explicitly applied XNNPACK delegate, and the model graph will be (completely|partially) executed"
                  r" by the delegate(?: w/ (\d+) delegate kernels)?", text)
    if m:
        return "all nodes" if m.group(1) == "completely" else f"partially, {m.group(2)} delegate kernel(s)"
    return None


def benchmark_command(binary: str, graph: str, settings: dict, *, threads: int = 1, taskset: Optional[str] = None
                      ) -> List[str]:
    """The ``benchmark_model`` command line run on the phone for one graph and one round: XNNPACK,
    ``threads`` threads, the bundle's warm-up runs (no minimum warm-up time), at least ``repeats``
    runs and ``min_time_s`` seconds; ``taskset`` (a hex CPU mask, e.g. ``f0``: the big cores) pins it."""
    cmd = [binary, f"--graph={graph}", f"--num_threads={threads}", "--use_xnnpack=true",
           f"--warmup_runs={int(settings['warmup'])}", "--warmup_min_secs=0", f"--num_runs={int(settings['repeats'])}",
           f"--min_secs={float(settings['min_time_s']):g}"]
    return (["taskset", taskset] if taskset else []) + cmd


class BenchmarkModel:
    """LiteRT's ``benchmark_model`` on an Android phone, driven over ``adb``.

    Args:
        adb: the ``adb`` executable.
        binary: a local ``benchmark_model`` built for the phone (pushed once), or None: ``device_binary``
            is already on the phone.
        serial: the phone (``adb -s``); None: the only one attached.
        device_binary: where the binary is (or goes) on the phone.
        taskset: a hex CPU mask pinning each run (``f0``: cores 4-7, the big cores of most phones).
        version: the LiteRT release the binary was built from (benchmark_model prints none).
        threads: ``--num_threads`` (the bundle's: 1 for the LiteRT targets).
    """

    def __init__(self, adb: str = "adb", binary: Optional[str] = None, serial: Optional[str] = None,
                 device_binary: str = f"{DEVICE_DIR}/benchmark_model", taskset: Optional[str] = None,
                 version: Optional[str] = None, threads: int = 1) -> None:
        self.adb, self.serial, self.device_binary, self.taskset = adb, serial, device_binary, taskset
        self.threads = threads
        self.parse = parse_output
        devices = [ln.split()[0] for ln in self._run("devices").splitlines()[1:] if ln.strip().endswith("device")]
        if not devices:
            raise BenchmarkError("adb lists no device: connect the phone with USB debugging on (adb devices)")
        if serial is None and len(devices) > 1:
            raise BenchmarkError(f"adb lists {len(devices)} devices ({', '.join(devices)}): pick one with --serial")
        self.info = {"name": "litert", "version": version or "unknown (benchmark_model prints none)",
                     "provider": "XNNPACK", "via": VIA, "statistic": "median"}
        if binary:
            with open(binary, "rb") as f:
                self.info["binary_sha256"] = hashlib.sha256(f.read()).hexdigest()[:16]
            self._run("shell", f"mkdir -p {shlex.quote(os.path.dirname(device_binary))}")
            self._run("push", binary, device_binary)
            self._run("shell", f"chmod 755 {shlex.quote(device_binary)}")
        # "test -x": an older adb returns no remote exit status, and ls names a missing file in its error
        out = self._run("shell", f"test -x {shlex.quote(device_binary)} && echo hwnas-found", check=False)
        if "hwnas-found" not in out:
            raise BenchmarkError(f"no benchmark_model at {device_binary} on the phone: pass --benchmark-model <file> "
                                 "(LiteRT's android_aarch64 benchmark_model, docs/devices.md) to push it")
        if taskset:
            self.info["taskset"] = taskset

    def _run(self, *args: str, check: bool = True) -> str:
        cmd = [self.adb, *(["-s", self.serial] if self.serial else []), *args]
        try:
            out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=900)
        except FileNotFoundError:
            raise BenchmarkError(f"{self.adb} not found: install Android's platform tools (adb) or pass --adb <path>"
                                 ) from None
        if check and out.returncode != 0:
            raise BenchmarkError(f"{' '.join(cmd[:4])} ... failed (exit {out.returncode}): "
                                 f"{(out.stdout + out.stderr).strip()[-600:]}")
        return out.stdout + out.stderr  # benchmark_model logs to stderr; adb shell may give either

    def factory(self, path: str, shape: Sequence[int], settings: dict) -> Callable[[], dict]:
        """``once()`` for one graph: pushed now, each call one ``benchmark_model`` run (a round)."""
        remote = f"{DEVICE_DIR}/{os.path.basename(os.path.dirname(os.path.abspath(path)))}/{os.path.basename(path)}"
        self._run("shell", f"mkdir -p {shlex.quote(os.path.dirname(remote))}")
        self._run("push", path, remote)

        def once() -> dict:
            cmd = benchmark_command(self.device_binary, remote, settings, threads=self.threads, taskset=self.taskset)
            text = self._run("shell", shlex.join(cmd), check=False)
            got = self.parse(text)
            if got["statistic"] != "median":
                self.info["statistic"] = "mean where this benchmark_model printed no median (its avg=)"
            if got["xnnpack"] and not re.fullmatch(r"all nodes|(\d+) of \1 nodes in 1 partition\(s\)", got["xnnpack"]):
                self.info.setdefault("xnnpack_partial", {})[os.path.basename(path)] = got["xnnpack"]
            return {k: got[k] for k in ("median_ms", "p10_ms", "p90_ms", "n")}

        return once

    def identity(self) -> Dict[str, Any]:
        """The phone's identity (``android_identity``)."""
        return android_identity(lambda cmd: self._run("shell", cmd, check=False))


def android_identity(shell: Callable[[str], str]) -> Dict[str, Any]:
    """An Android device's identity from its properties and ``/proc/cpuinfo``, in the fields a bundle's
    results record (``hwnas_device.identity``): ``name`` is ``<manufacturer> <model>`` (e.g. ``Google
    Pixel 8``), ``cpu`` the SoC where Android names it (``ro.soc.model``, else the board platform)."""

    def prop(name: str) -> Optional[str]:
        v = shell(f"getprop {name}").strip()
        return v or None

    info = shell("cat /proc/cpuinfo")
    flags = re.search(r"^Features\s*:\s*(.*)$", info, re.M)
    maker, model = prop("ro.product.manufacturer"), prop("ro.product.model")
    soc = " ".join(p for p in (prop("ro.soc.manufacturer"), prop("ro.soc.model")) if p) or prop("ro.board.platform")
    hardware = re.search(r"^Hardware\s*:\s*(.+)$", info, re.M)
    parts = sorted(set(re.findall(r"^CPU part\s*:\s*(\S+)", info, re.M)))
    return {"kind": "cpu", "name": " ".join(p for p in (maker, model) if p) or "Android device",
            "cpu": soc or (hardware.group(1).strip() if hardware else None), "cpu_parts": parts,
            "cpu_flags": sorted(set(flags.group(1).split()) & _FLAGS) if flags else [],
            "cpu_count": len(re.findall(r"^processor\s*:", info, re.M)) or None,
            "machine": prop("ro.product.cpu.abi"), "os": f"Android {prop('ro.build.version.release')}",
            "build": prop("ro.build.fingerprint"), "gpu": None, "driver": None, "cuda": None, "jetpack": None}


def interpreter_runner(threads: int) -> Tuple[Callable[[str, Sequence[int]], Callable[[], None]], Dict[str, Any]]:
    """``(make, info)``: ``make(path, shape)`` loads a ``.tflite`` graph into ``ai-edge-litert``'s interpreter
    (``threads`` threads, XNNPACK applied by the default op resolver), sets a seeded input once (quantized
    for an int8 input) and returns the call to time; outputs stay in the interpreter's buffers.

    Raises:
        ImportError: ai-edge-litert is not installed.
    """
    from ai_edge_litert.interpreter import Interpreter, OpResolverType  # optional runtime: the Python path

    def make(path: str, shape: Sequence[int]) -> Callable[[], None]:
        interp = Interpreter(model_path=path, num_threads=threads, experimental_op_resolver_type=OpResolverType.AUTO)
        interp.allocate_tensors()
        d = interp.get_input_details()[0]
        x = np.random.default_rng(0).standard_normal([int(s) for s in d["shape"]]).astype(np.float32)
        if np.dtype(d["dtype"]) != np.float32:  # a full-integer graph: its input quantized as the file says
            scale, zero = d["quantization"]
            info = np.iinfo(d["dtype"])
            x = np.clip(np.round(x / scale) + zero, info.min, info.max).astype(d["dtype"])
        interp.set_tensor(d["index"], x)
        interp.invoke()
        call = interp.invoke
        return call

    return make, {"name": "litert", "version": _litert_version(), "provider": "XNNPACK", "via": "python"}


def add_phone_arguments(ap: argparse.ArgumentParser) -> None:
    """``measure_bundle.py``'s options for a phone (``--runtime benchmark_model``)."""
    phone = ap.add_argument_group("an Android phone (--runtime benchmark_model)")
    phone.add_argument("--benchmark-model", default=None, help="LiteRT's benchmark_model built for the phone, "
                       f"pushed to {DEVICE_DIR}/ (left out: it is there already)")
    phone.add_argument("--adb", default="adb", help="the adb executable")
    phone.add_argument("--serial", default=None, help="the phone (adb -s), when several are attached")
    phone.add_argument("--taskset", default=None, help="a hex CPU mask pinning each run, e.g. f0 (the big cores)")
    phone.add_argument("--litert-version", default=None, help="the LiteRT release the binary is from (it prints none)")


def litert_factory(runtime: str, args: argparse.Namespace, threads: int, timed: Callable[[Callable[[], Any], dict], dict]
                   ) -> Tuple[Callable[[str, Sequence[int], dict], Callable[[], dict]], Dict[str, Any]]:
    """``(factory, info)`` for ``measure_bundle.py``: ``factory(path, shape, settings)`` returns ``once()``,
    one round of one graph's statistics.  ``litert``: the interpreter, timed by ``timed`` (the script's
    loop); ``benchmark_model``: a phone over adb, whose identity ``info["device"]`` carries.

    Raises:
        ImportError: ai-edge-litert is not installed (``litert``).
        BenchmarkError: adb, the phone or its benchmark_model cannot be used (``benchmark_model``).
    """
    if runtime == "litert":
        make, info = interpreter_runner(threads)
        return (lambda path, shape, s: (lambda call: lambda: timed(call, s))(make(path, shape))), info
    bm = BenchmarkModel(args.adb, args.benchmark_model, args.serial, taskset=args.taskset, version=args.litert_version,
                        threads=threads)
    bm.info["device"] = bm.identity()  # the script takes it out; the rest stays the dict the runs update
    return bm.factory, bm.info
