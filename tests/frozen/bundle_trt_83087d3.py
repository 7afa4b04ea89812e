# FROZEN copy of nas/latency/bundle_trt.py at commit 83087d3, for tests only: its Python-API timer timed each
# execute_async_v3 between two events on an idle stream, synchronising after every run, and its parse_times kept
# every --exportTimes record; tests show the stand-ins and real logs failing it (tests/old_code.py). Do not edit.
"""TensorRT engines from ONNX files, timed with CUDA events: standalone, for device bundles.

This file is copied into a device bundle and runs on a Jetson or GPU machine beside
``measure_bundle.py``, where neither torch nor this package may be installed: it imports only the
standard library, numpy and (when called) ``tensorrt``.  Device memory, streams and events come
from the CUDA runtime library (``libcudart``) through ctypes, the way Polygraphy's ``cuda``
module does it, so no pycuda, cupy or torch is needed.

- ``available()``: None, or the one-line reason this cannot run here.
- ``version()``: the TensorRT version.
- ``measure_factory(path, shape, precision, settings)``: builds the engine once and returns
  ``once()``, which times it (warm-up, then at least ``repeats`` runs and ``min_time_s``, each
  run timed by CUDA events around ``execute_async_v3``) and returns median / p10 / p90 / n.
- ``builder_flags(precision, trt_version, qdq=...)``: the builder flags a precision needs (pure);
  ``network_flags(trt)``: the network creation flags the installed version needs.
- ``build_plan(onnx, precision)`` / ``Engine(plan)``: the engine (``nas.latency.runtimes`` builds
  with them too).
- ``trtexec_factory(exe, precision)``: the same measurements through ``trtexec`` (engine built once
  with ``--saveEngine``, then ``--loadEngine``; per-inference times from ``--exportTimes``, the
  printed summary as the fallback), with its parsers ``parse_times`` / ``parse_summary`` /
  ``trtexec_version``.

TensorRT versions: 8.5 and 8.6 (JetPack 5.1, 6.0) need ``EXPLICIT_BATCH`` at network creation (the
ONNX parser refuses implicit-batch networks); 10 ignores the flag; 11 has neither it nor the FP16 /
INT8 builder flags (networks are strongly typed).  The Python API needs ``execute_async_v3`` (8.5+):
on 8.0-8.4 (JetPack 4.6, 5.0) use trtexec, whose output formats from 8.0 on are all read.

Precisions: ``fp32``; ``fp16`` (the FP16 builder flag: TensorRT picks fp16 kernels where faster);
``int8``: explicit quantization from a QDQ ONNX graph (symmetric int8, zero point 0), built with
the INT8 and FP16 flags and no calibrator: the graph's Q/DQ nodes carry every scale.
"""

from __future__ import annotations

import ctypes
import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["PRECISIONS", "Engine", "available", "build_plan", "builder_flags", "decode_version", "io_tensors",
           "measure_factory", "network_flags", "parse_summary", "parse_times", "trtexec_command", "trtexec_factory",
           "trtexec_version", "version"]

PRECISIONS = ("fp32", "fp16", "int8")
_INSTALL_TRT = "TensorRT is not installed: pip install tensorrt (on a Jetson, JetPack's python3-libnvinfer)"
_INSTALL_CUDART = ("the CUDA runtime library (libcudart) was not found: install the CUDA toolkit or JetPack, "
                   "or pip install nvidia-cuda-runtime-cu12, or put its folder on LD_LIBRARY_PATH")
_MAX_REPEATS = 2000  # as nas.latency.measure: a sub-millisecond engine stops here, not at min_time_s


def _tensorrt():
    """The ``tensorrt`` module, or RuntimeError naming what to install (or, for 8.0-8.4, what to use)."""
    try:
        import tensorrt  # optional heavy runtime: only where the TensorRT Python API is measured
    except ImportError:
        raise RuntimeError(_INSTALL_TRT) from None
    major, minor = _major_minor(tensorrt.__version__)
    if (major, minor) < (8, 5):
        raise RuntimeError(f"TensorRT {tensorrt.__version__}'s Python API lacks execute_async_v3 (8.5+): measure "
                           "with trtexec instead (python3 measure_bundle.py --runtime trtexec)")
    return tensorrt


def _major_minor(trt_version: str) -> tuple[int, int]:
    parts = (str(trt_version).split(".") + ["0"])[:2]
    return int(parts[0]), int(parts[1])


def network_flags(trt: Any) -> int:
    """The ``create_network`` flags for the installed TensorRT: ``1 << EXPLICIT_BATCH`` before 10 (the
    ONNX parser refuses an implicit-batch network), 0 from 10 on (explicit batch is the only mode:
    10 ignores the flag, 11 removed it)."""
    if _major_minor(trt.__version__)[0] < 10:
        return 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    return 0


def version() -> str:
    """The installed TensorRT version (RuntimeError naming what to install if there is none)."""
    return str(_tensorrt().__version__)


def builder_flags(precision: str, trt_version: str, *, qdq: bool) -> tuple[str, ...]:
    """Names of the ``tensorrt.BuilderFlag`` members to set for ``precision`` on TensorRT ``trt_version``.

    ``qdq``: the graph holds Q/DQ nodes.  TensorRT 10 (weakly typed networks) refuses a Q/DQ graph
    without the INT8 flag, so it is set whenever the graph is quantized, and int8 adds FP16 so the
    layers left unquantized run in fp16 rather than fp32.  int8 never sets INT8 on a graph without
    Q/DQ (that would ask for implicit quantization, which needs a calibrator): a graph the QDQ
    quantizer left float (no Conv, Gemm, MatMul or Add: a pooling block, the empty overhead graph)
    is built with FP16 only, as those layers run in an int8 engine.  TensorRT 11 removed the
    precision flags (strong typing: the graph's types decide), so there the list is empty and fp16
    is refused.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if _major_minor(trt_version)[0] >= 11:
        if precision == "fp16":
            raise RuntimeError(f"TensorRT {trt_version} has no FP16 builder flag (strong typing): it builds fp16 "
                               "only from an fp16 ONNX graph; install TensorRT 10 (pip install 'tensorrt<11')")
        return ()
    return {"fp32": ("INT8",) if qdq else (), "fp16": ("FP16", "INT8") if qdq else ("FP16",),
            "int8": ("INT8", "FP16") if qdq else ("FP16",)}[precision]


def _has_qdq(trt: Any, network: Any) -> bool:
    kinds = {trt.LayerType.QUANTIZE, trt.LayerType.DEQUANTIZE}
    return any(network.get_layer(i).type in kinds for i in range(network.num_layers))


def build_plan(onnx: bytes, precision: str, *, workspace_bytes: int | None = None) -> bytes:
    """A serialized TensorRT engine (a plan) built from ONNX model bytes with the ONNX parser.

    The flags follow ``builder_flags`` (a Q/DQ graph is detected from the parsed network).  Raises
    RuntimeError with TensorRT's parser errors when the graph cannot be parsed or built."""
    trt = _tensorrt()
    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    network = builder.create_network(network_flags(trt))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT could not parse the ONNX graph: {errors}")
    config = builder.create_builder_config()
    if workspace_bytes is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_bytes)
    for name in builder_flags(precision, trt.__version__, qdq=_has_qdq(trt, network)):
        config.set_flag(getattr(trt.BuilderFlag, name))
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise RuntimeError(f"TensorRT could not build a {precision} engine from this graph (set "
                           "TensorRT's logger to VERBOSE to see why)")
    return bytes(plan)


class Engine:
    """A deserialized engine and one execution context, with the runtime that must outlive them."""

    def __init__(self, plan: bytes) -> None:
        trt = _tensorrt()
        self.logger = trt.Logger(trt.Logger.ERROR)
        self.runtime = trt.Runtime(self.logger)
        self.engine = self.runtime.deserialize_cuda_engine(plan)
        if self.engine is None:
            raise RuntimeError("TensorRT could not deserialize the engine (built by another TensorRT version?)")
        self.context = self.engine.create_execution_context()


def io_tensors(built: Engine, in_shape: Sequence[int]) -> list[tuple[str, bool, tuple[int, ...], Any]]:
    """(name, is_input, shape, numpy dtype) of each I/O tensor; a dynamic input gets ``in_shape``."""
    trt = _tensorrt()
    engine, context = built.engine, built.context
    out = []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        if is_input and any(d < 0 for d in engine.get_tensor_shape(name)):
            context.set_input_shape(name, tuple(in_shape))
        out.append((name, is_input, None, np.dtype(trt.nptype(engine.get_tensor_dtype(name)))))
    # output shapes are known once every input shape is
    return [(n, inp, tuple(context.get_tensor_shape(n)), dt) for n, inp, _, dt in out]


# --------------------------------------------------------------------------------------------
# CUDA runtime through ctypes


def _cudart_candidates() -> list[str]:
    """Where libcudart may be: the loader's own path first, then the CUDA toolkit, JetPack and pip's
    nvidia-cuda-runtime wheels (which tensorrt's wheels depend on)."""
    if sys.platform.startswith("win"):
        dirs = [os.path.join(os.environ.get("CUDA_PATH", ""), "bin"), *os.environ.get("PATH", "").split(os.pathsep)]
        pattern = "cudart64_*.dll"
    else:
        dirs = [*os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep), "/usr/local/cuda/lib64",
                *glob.glob("/usr/local/cuda/targets/*/lib"), "/usr/lib/aarch64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                "/usr/lib64", "/usr/lib"]
        for p in sys.path:
            dirs += glob.glob(os.path.join(p, "nvidia", "cuda_runtime", "lib")) + glob.glob(
                os.path.join(p, "nvidia", "cu*", "lib"))
        pattern = "libcudart.so*"
    found = [f for d in dirs if d for f in sorted(glob.glob(os.path.join(d, pattern)), reverse=True)]
    return ["libcudart.so", *found] if not sys.platform.startswith("win") else found


class _Cudart:
    """The few CUDA runtime calls a timing loop needs, each checked (RuntimeError with CUDA's message)."""

    def __init__(self) -> None:
        self.lib = None
        for cand in _cudart_candidates():
            try:
                self.lib = ctypes.CDLL(cand)
                break
            except OSError:
                continue
        if self.lib is None:
            raise RuntimeError(_INSTALL_CUDART)
        vp, pvp = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
        sigs = {"cudaGetDeviceCount": [ctypes.POINTER(ctypes.c_int)], "cudaMalloc": [pvp, ctypes.c_size_t],
                "cudaFree": [vp], "cudaMemcpy": [vp, vp, ctypes.c_size_t, ctypes.c_int],
                "cudaStreamCreate": [pvp], "cudaStreamSynchronize": [vp], "cudaStreamDestroy": [vp],
                "cudaEventCreate": [pvp], "cudaEventRecord": [vp, vp], "cudaEventSynchronize": [vp],
                "cudaEventElapsedTime": [ctypes.POINTER(ctypes.c_float), vp, vp], "cudaEventDestroy": [vp]}
        for name, args in sigs.items():
            fn = getattr(self.lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        self.lib.cudaGetErrorString.argtypes, self.lib.cudaGetErrorString.restype = [ctypes.c_int], ctypes.c_char_p

    def call(self, name: str, *args: Any) -> None:
        status = getattr(self.lib, name)(*args)
        if status != 0:
            msg = (self.lib.cudaGetErrorString(status) or b"").decode(errors="replace")
            raise RuntimeError(f"CUDA error {status} in {name}: {msg}")

    def device_count(self) -> int:
        n = ctypes.c_int(0)
        self.call("cudaGetDeviceCount", ctypes.byref(n))
        return n.value

    def new(self, what: str) -> int:
        """A new stream (``what="Stream"``) or event (``"Event"``) handle."""
        h = ctypes.c_void_p()
        self.call(f"cuda{what}Create", ctypes.byref(h))
        return h.value or 0

    def malloc(self, nbytes: int) -> int:
        p = ctypes.c_void_p()
        self.call("cudaMalloc", ctypes.byref(p), ctypes.c_size_t(max(int(nbytes), 1)))
        return p.value or 0

    def to_device(self, dst: int, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        self.call("cudaMemcpy", ctypes.c_void_p(dst), ctypes.c_void_p(host.ctypes.data), ctypes.c_size_t(host.nbytes),
                  1)  # cudaMemcpyHostToDevice

    def release(self, buffers: Sequence[int], stream: int, events: Sequence[int]) -> None:
        """Free device memory, events and the stream (statuses ignored: this runs at garbage collection)."""
        for p in buffers:
            self.lib.cudaFree(ctypes.c_void_p(p))
        for e in events:
            self.lib.cudaEventDestroy(ctypes.c_void_p(e))
        self.lib.cudaStreamDestroy(ctypes.c_void_p(stream))

    def elapsed_ms(self, start: int, end: int) -> float:
        ms = ctypes.c_float()
        self.call("cudaEventElapsedTime", ctypes.byref(ms), ctypes.c_void_p(start), ctypes.c_void_p(end))
        return float(ms.value)


def available() -> str | None:
    """None when TensorRT and a CUDA device are usable here, else the one-line reason."""
    try:
        _tensorrt()
        n = _Cudart().device_count()
    except RuntimeError as e:
        return str(e)
    return None if n > 0 else "no CUDA device is visible here (cudaGetDeviceCount returned 0)"


# --------------------------------------------------------------------------------------------
# timing


def _stats(ms: Sequence[float]) -> dict[str, float]:
    a = np.asarray(ms, dtype=np.float64)
    return {"median_ms": float(np.median(a)), "p10_ms": float(np.percentile(a, 10)),
            "p90_ms": float(np.percentile(a, 90)), "n": int(a.size)}


def _settings(settings: dict) -> tuple[int, int, float]:
    missing = [k for k in ("warmup", "repeats", "min_time_s") if k not in settings]
    if missing:
        raise ValueError(f"settings lacks {missing}: give warmup, repeats and min_time_s (got {sorted(settings)})")
    return int(settings["warmup"]), max(1, int(settings["repeats"])), float(settings["min_time_s"])


def measure_factory(path: str, shape: list[int], precision: str, settings: dict) -> Callable[[], dict]:
    """Build ``path``'s engine at ``precision`` once; return ``once()``, which times it and returns
    ``{"median_ms", "p10_ms", "p90_ms", "n"}`` (call it once per round).

    ``shape``: the input shape (batch first; used when the graph's input is dynamic).  ``settings``:
    ``warmup``, ``repeats``, ``min_time_s``.  Each timed run is ``execute_async_v3`` between two CUDA
    events on one stream, so the figure is GPU time for the engine, without Python's overhead."""
    warmup, repeats, min_time_s = _settings(settings)
    trt_missing = available()
    if trt_missing is not None:
        raise RuntimeError(trt_missing)
    with open(path, "rb") as f:
        built = Engine(build_plan(f.read(), precision))
    cuda, context = _Cudart(), built.context
    buffers: list[int] = []
    rng = np.random.default_rng(0)
    for name, is_input, tshape, dtype in io_tensors(built, shape):
        nbytes = int(np.prod(tshape, dtype=np.int64)) * dtype.itemsize
        buffers.append(cuda.malloc(nbytes))
        if is_input:
            cuda.to_device(buffers[-1], rng.standard_normal(tshape).astype(dtype))
        context.set_tensor_address(name, buffers[-1])
    stream, events = cuda.new("Stream"), (cuda.new("Event"), cuda.new("Event"))

    def run_timed() -> float:
        cuda.call("cudaEventRecord", ctypes.c_void_p(events[0]), ctypes.c_void_p(stream))
        if not context.execute_async_v3(stream):
            raise RuntimeError(f"TensorRT failed to run the engine of {path}")
        cuda.call("cudaEventRecord", ctypes.c_void_p(events[1]), ctypes.c_void_p(stream))
        cuda.call("cudaEventSynchronize", ctypes.c_void_p(events[1]))
        return cuda.elapsed_ms(*events)

    def once() -> dict:
        for _ in range(warmup):
            run_timed()
        times: list[float] = []
        t_end = time.perf_counter() + min_time_s
        while len(times) < repeats or (time.perf_counter() < t_end and len(times) < _MAX_REPEATS):
            times.append(run_timed())
        return _stats(times)

    # device memory, the stream and the events are freed when once() is (it holds the engine too)
    weakref.finalize(once, cuda.release, buffers, stream, events)
    once.keep = built  # type: ignore[attr-defined]
    return once


# --------------------------------------------------------------------------------------------
# trtexec: the same engines through TensorRT's command-line tool


def decode_version(tag: str | int) -> str:
    """``8601`` -> ``8.6.1``, ``100300`` -> ``10.3.0``: the number trtexec prints as ``[TensorRT vN]``
    (``NV_TENSORRT_VERSION``: major*1000 + minor*100 + patch before 10, major*10000 + minor*100 + patch from 10)."""
    n = int(tag)
    if n >= 100000:
        return f"{n // 10000}.{n // 100 % 100}.{n % 100}"
    return f"{n // 1000}.{n // 100 % 10}.{n % 100}"


def trtexec_version(text: str) -> str | None:
    """The TensorRT version trtexec's output names (``TensorRT version: 8.6.3``, else ``[TensorRT v8601]``)."""
    m = re.search(r"TensorRT version: (\d+\.\d+\.\d+)", text)
    if m:
        return m.group(1)
    m = re.search(r"\[TensorRT v(\d+)\]", text)
    return decode_version(m.group(1)) if m else None


def parse_times(text: str) -> list[float]:
    """The per-inference GPU compute times (ms) of a ``--exportTimes`` file: its records' ``computeMs``.

    Raises ValueError when the text is not such a file or holds no record."""
    try:
        records = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not a trtexec --exportTimes file ({e})") from None
    if not isinstance(records, list):
        raise ValueError("not a trtexec --exportTimes file (its top level is not a list of records)")
    times = [float(r["computeMs"]) for r in records if isinstance(r, dict) and "computeMs" in r]
    if not times:
        raise ValueError("the trtexec --exportTimes file holds no computeMs record")
    return times


_PAIR = re.compile(r"(min|max|mean|median|percentile\((\d+(?:\.\d+)?)%\))\s*=?\s*(\d+(?:\.\d*)?(?:e[-+]?\d+)?)\s*ms")


def parse_summary(text: str, metric: str = "GPU Compute Time") -> dict[str, Any] | None:
    """The last ``<metric>: min = ... ms, ...`` summary line of trtexec's output, or None.

    Reads every format trtexec 8.0-10.x prints: ``percentile(99%)`` alone (8.0-8.4), ``percentile(90%)``,
    ``(95%)``, ``(99%)`` (8.5 on) or whatever ``--percentile`` asked for; a value cut off mid-line is
    left out.  Returns ``{"min", "max", "mean", "median"}`` (those present) and ``"percentiles"``
    ({percent: ms})."""
    lines = re.findall(rf"(?m)(?:^|\]\s)\s*{re.escape(metric)}:(.*)$", text)
    if not lines:
        return None
    out: dict[str, Any] = {"percentiles": {}}
    for name, pct, value in _PAIR.findall(lines[-1]):
        if pct:
            out["percentiles"][float(pct)] = float(value)
        else:
            out[name] = float(value)
    return out if "median" in out else None


def trtexec_flags(precision: str, trt_version: str | None, *, qdq: bool) -> list[str]:
    """trtexec's precision flags: ``builder_flags`` spelled as options (``--int8`` only for a Q/DQ graph,
    so trtexec and the Python API build the same engine); none on TensorRT 11 (strong typing)."""
    return [f"--{name.lower()}" for name in builder_flags(precision, trt_version or "10", qdq=qdq)]


def trtexec_command(exe: str, onnx: str, plan: str, times: str, settings: dict, flags: Sequence[str], *,
                    build: bool, trt_version: str | None) -> list[str]:
    """One trtexec run: build ``onnx`` into ``plan`` (``build``) or load it, then time it for at least
    ``repeats`` inferences and ``min_time_s`` (``--duration``, whole seconds), writing each inference's
    times to ``times``; asks for p10 / p90 in the summary where trtexec takes several percentiles (8.5+)."""
    warmup, repeats, min_time_s = _settings(settings)
    cmd = [exe, *([f"--onnx={onnx}", f"--saveEngine={plan}", *flags] if build else [f"--loadEngine={plan}"]),
           f"--warmUp={max(200, warmup * 10)}", f"--iterations={repeats}", f"--duration={math.ceil(min_time_s)}",
           "--useSpinWait", "--noDataTransfers", f"--exportTimes={times}"]
    if trt_version and _major_minor(trt_version) >= (8, 5):
        cmd.append("--percentile=10,50,90")
    return cmd


def _qdq_in_file(path: str) -> bool:
    """Whether an ONNX file holds Q/DQ nodes (their op type is stored as text; no onnx package here)."""
    with open(path, "rb") as f:
        return b"QuantizeLinear" in f.read()


def trtexec_stats(output: str, times_path: str) -> dict:
    """median / p10 / p90 / n from the ``--exportTimes`` records, else from the printed summary (p10 and
    p90 None where it does not print them: never the minimum passed off as p10)."""
    try:
        with open(times_path) as f:
            return {**_stats(parse_times(f.read())), "from": "exportTimes"}
    except (OSError, ValueError):
        pass
    summary = parse_summary(output)
    if summary is None:
        raise RuntimeError(f"trtexec printed no GPU Compute Time summary and wrote no --exportTimes file: "
                           f"{output[-1500:]}")
    n = re.search(r"Timing trace has (\d+) queries", output)
    pct = summary["percentiles"]
    return {"median_ms": summary["median"], "p10_ms": pct.get(10.0), "p90_ms": pct.get(90.0),
            "n": int(n.group(1)) if n else 0, "from": "summary"}


def trtexec_factory(exe: str, precision: str) -> tuple[Callable[[str, list[int], dict], Callable[[], dict]], dict]:
    """A factory timing ONNX files with ``exe`` at ``precision``, and the runtime's description.

    ``factory(path, shape, settings)`` returns ``once()``: its first call builds the engine (saved in a
    temporary folder removed with ``once``), later calls load it; each returns median / p10 / p90 / n.
    Raises RuntimeError for a precision this TensorRT cannot build (fp16 on 11)."""
    help_out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    trt_version = trtexec_version(help_out.stdout + help_out.stderr)
    builder_flags(precision, trt_version or "10", qdq=False)  # fp16 on 11 is refused here, before any graph
    info = {"name": "tensorrt", "version": trt_version or "unknown", "provider": "", "via": "trtexec"}

    def factory(path: str, shape: list[int], settings: dict) -> Callable[[], dict]:
        work = tempfile.mkdtemp(prefix="hwnas_trtexec_")
        plan, times = os.path.join(work, "engine.plan"), os.path.join(work, "times.json")
        flags = trtexec_flags(precision, trt_version, qdq=_qdq_in_file(path))
        built = []

        def once() -> dict:
            cmd = trtexec_command(exe, path, plan, times, settings, flags, build=not built, trt_version=trt_version)
            if os.path.exists(times):
                os.remove(times)
            out = subprocess.run(cmd, capture_output=True, text=True)
            text = out.stdout + out.stderr
            if out.returncode != 0:
                raise RuntimeError(f"trtexec failed on {path} (exit {out.returncode}): {text[-1500:]}")
            built.append(True)
            info["version"] = trtexec_version(text) or info["version"]
            return trtexec_stats(text, times)

        weakref.finalize(once, shutil.rmtree, work, True)
        once.command = lambda: trtexec_command(exe, path, plan, times, settings, flags, build=not built,  # type: ignore[attr-defined]
                                               trt_version=trt_version)
        return once

    return factory, info
