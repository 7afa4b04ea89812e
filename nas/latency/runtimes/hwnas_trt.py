"""TensorRT engines from ONNX files, timed with CUDA events: standalone, for device bundles.

This file is copied into a device bundle as ``hwnas_trt.py`` and runs on a Jetson or GPU machine
beside ``measure_bundle.py``, where neither torch nor this package may be installed: it imports only
the standard library, numpy, its bundle's ``hwnas_cuda.py`` (``nas.latency.runtimes.hwnas_cuda`` here: the
CUDA runtime through ctypes and the GPU timer) and (when called) ``tensorrt``.

- ``available()``: None, or the one-line reason this cannot run here.
- ``version()``: the TensorRT version.
- ``measure_factory(path, shape, precision, settings)``: builds the engine once and returns
  ``once()``, which times it (warm-up, then at least ``repeats`` runs and ``min_time_s``) and
  returns median / p10 / p90 / n.  Runs are timed on the GPU, not the host: a batch of
  ``execute_async_v3`` calls is queued behind a GPU-side wait (memsets of a scratch buffer, about
  twice as long as the host takes to queue the batch), with a CUDA event between consecutive runs,
  so each interval is one run's GPU time and never the host's enqueue (``GpuTimer``).
- ``python_api_supported(version)``: whether that TensorRT's Python API can be timed here (8.5+).
- ``builder_flags(precision, trt_version, qdq=...)``: the builder flags a precision needs (pure);
  ``network_flags(trt)``: the network creation flags the installed version needs.
- ``build_plan(onnx, precision)`` / ``Engine(plan)``: the engine (``nas.latency.runtimes.core`` builds
  with them too).
- ``trtexec_factory(exe, precision)``: the same measurements through ``trtexec`` (engine built once
  with ``--saveEngine``, then ``--loadEngine``; per-inference times from ``--exportTimes``, the
  printed summary as the fallback), with its parsers ``parse_times`` / ``parse_summary`` /
  ``trtexec_version``.  TensorRT 8.0-8.4 write their warm-up inferences into ``--exportTimes``
  too (``exportJSONTrace`` in ``samples/common/sampleReporting.cpp``, release/8.2 and 8.4; 8.5 skips
  them): ``parse_times(..., warmup_ms=)`` drops them by the rule those versions' summary applies.

TensorRT versions: 8.5 and 8.6 (JetPack 5.1, 6.0) need ``EXPLICIT_BATCH`` at network creation (the
ONNX parser refuses implicit-batch networks); 10 ignores the flag; 11 has neither it nor the FP16 /
INT8 builder flags (networks are strongly typed).  The Python API needs ``execute_async_v3`` (8.5+):
on 8.0-8.4 (JetPack 4.6, 5.0) use trtexec, whose output formats from 8.0 on are all read.

Python: 3.6 and later (JetPack 4.6 ships 3.6, JetPack 5 3.8): no postponed annotations (the
signatures' annotations are strings), no ``capture_output``.

Precisions: ``fp32``; ``fp16`` (the FP16 builder flag: TensorRT picks fp16 kernels where faster);
``int8``: explicit quantization from a QDQ ONNX graph (symmetric int8, zero point 0), built with
the INT8 and FP16 flags and no calibrator: the graph's Q/DQ nodes carry every scale.
"""

import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import weakref
from typing import Any, Callable, Sequence  # typing's (not collections.abc's): Python 3.6

import numpy as np

try:  # in a device bundle: the CUDA helpers copied beside this file
    from hwnas_cuda import Cudart, GpuTimer, time_runs, timing_stats
except ImportError:  # in hwnas
    from nas.latency.runtimes.hwnas_cuda import Cudart, GpuTimer, time_runs, timing_stats

__all__ = ["PRECISIONS", "Engine", "available", "build_plan", "builder_flags", "decode_version",
           "io_tensors", "measure_factory", "network_flags", "parse_summary", "parse_times", "python_api_supported", "qdq_in_file",
           "trtexec_command", "trtexec_factory", "trtexec_help_version", "trtexec_version", "trtexec_warmup_ms", "version"]

PRECISIONS = ("fp32", "fp16", "int8")
_INSTALL_TRT = "TensorRT is not installed: pip install tensorrt (on a Jetson, JetPack's python3-libnvinfer)"


def _tensorrt():
    """The ``tensorrt`` module, or RuntimeError naming what to install (or, for 8.0-8.4, what to use)."""
    try:
        import tensorrt  # optional heavy runtime: only where the TensorRT Python API is measured
    except ImportError:
        raise RuntimeError(_INSTALL_TRT) from None
    if not python_api_supported(tensorrt.__version__):
        raise RuntimeError(f"TensorRT {tensorrt.__version__}'s Python API lacks execute_async_v3 (8.5+): measure "
                           "with trtexec instead (python3 measure_bundle.py --runtime trtexec)")
    return tensorrt


def _major_minor(trt_version: str) -> "tuple[int, int]":
    parts = (str(trt_version).split(".") + ["0"])[:2]
    return int(parts[0]), int(parts[1])


def python_api_supported(trt_version: str) -> bool:
    """Whether TensorRT ``trt_version``'s Python API has what the timer needs (``execute_async_v3``, 8.5+)."""
    return _major_minor(trt_version) >= (8, 5)


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


def builder_flags(precision: str, trt_version: str, *, qdq: bool) -> "tuple[str, ...]":
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


def build_plan(onnx: bytes, precision: str, *, workspace_bytes: "int | None" = None) -> bytes:
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


def io_tensors(built: Engine, in_shape: Sequence[int]) -> "list[tuple[str, bool, tuple[int, ...], Any]]":
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


def available() -> "str | None":
    """None when TensorRT and a CUDA device are usable here, else the one-line reason."""
    try:
        _tensorrt()
        n = Cudart().device_count()
    except RuntimeError as e:
        return str(e)
    return None if n > 0 else "no CUDA device is visible here (cudaGetDeviceCount returned 0)"


# --------------------------------------------------------------------------------------------
# timing


def _settings(settings: dict) -> "tuple[int, int, float]":
    missing = [k for k in ("warmup", "repeats", "min_time_s") if k not in settings]
    if missing:
        raise ValueError(f"settings lacks {missing}: give warmup, repeats and min_time_s (got {sorted(settings)})")
    return int(settings["warmup"]), max(1, int(settings["repeats"])), float(settings["min_time_s"])


def measure_factory(path: str, shape: "list[int]", precision: str, settings: dict) -> Callable[[], dict]:
    """Build ``path``'s engine at ``precision`` once; return ``once()``, which times it and returns
    ``{"median_ms", "p10_ms", "p90_ms", "n"}`` (call it once per round).

    ``shape``: the input shape (batch first; used when the graph's input is dynamic).  ``settings``:
    ``warmup``, ``repeats``, ``min_time_s``.  Runs are ``execute_async_v3`` calls timed on the GPU by
    ``GpuTimer`` (queued behind a GPU-side wait, an event between consecutive runs): the engine's
    GPU time, without the host's enqueue or Python's overhead."""
    warmup, repeats, min_time_s = _settings(settings)
    trt_missing = available()
    if trt_missing is not None:
        raise RuntimeError(trt_missing)
    with open(path, "rb") as f:
        built = Engine(build_plan(f.read(), precision))
    cuda, context = Cudart(), built.context
    buffers: "list[int]" = []
    rng = np.random.default_rng(0)
    for name, is_input, tshape, dtype in io_tensors(built, shape):
        nbytes = int(np.prod(tshape, dtype=np.int64)) * dtype.itemsize
        buffers.append(cuda.malloc(nbytes))
        if is_input:
            cuda.to_device(buffers[-1], rng.standard_normal(tshape).astype(dtype))
        context.set_tensor_address(name, buffers[-1])
    stream = cuda.new("Stream")

    def run() -> None:
        if not context.execute_async_v3(stream):
            raise RuntimeError(f"TensorRT failed to run the engine of {path}")

    timer = GpuTimer(cuda, stream, run)

    def once() -> dict:
        return time_runs(timer, warmup, repeats, min_time_s)

    # device memory, the stream and the events are freed when once() is (it holds the engine too)
    weakref.finalize(once, cuda.release, [*buffers, timer.scratch], stream, timer.events)
    once.keep = built  # type: ignore[attr-defined]
    return once


# --------------------------------------------------------------------------------------------
# trtexec: the same engines through TensorRT's command-line tool


def decode_version(tag: "str | int") -> str:
    """``8601`` -> ``8.6.1``, ``100300`` -> ``10.3.0``: the number trtexec prints as ``[TensorRT vN]``
    (``NV_TENSORRT_VERSION``: major*1000 + minor*100 + patch before 10, major*10000 + minor*100 + patch from 10)."""
    n = int(tag)
    if n >= 100000:
        return f"{n // 10000}.{n // 100 % 100}.{n % 100}"
    return f"{n // 1000}.{n // 100 % 10}.{n % 100}"


def trtexec_version(text: str) -> "str | None":
    """The TensorRT version trtexec's output names (``TensorRT version: 8.6.3``, else ``[TensorRT v8601]``)."""
    m = re.search(r"TensorRT version: (\d+\.\d+\.\d+)", text)
    if m:
        return m.group(1)
    m = re.search(r"\[TensorRT v(\d+)\]", text)
    return decode_version(m.group(1)) if m else None


def parse_times(text: str, *, warmup_ms: "float | None" = None) -> "list[float]":
    """The per-inference GPU compute times (ms) of a ``--exportTimes`` file: its records' ``computeMs``.

    ``warmup_ms``: the file is from TensorRT 8.0-8.4, whose ``exportJSONTrace`` writes every inference,
    the warm-up ones too (8.5 on skip them); the records before the first whose compute started at
    ``warmup_ms`` or later are dropped, the rule those versions' own summary applies
    (``printPerformanceReport``: ``computeStart >= warmupMs``).

    Raises ValueError when the text is not such a file or holds no record (after the warm-up)."""
    try:
        records = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not a trtexec --exportTimes file ({e})") from None
    if not isinstance(records, list):
        raise ValueError("not a trtexec --exportTimes file (its top level is not a list of records)")
    records = [r for r in records if isinstance(r, dict) and "computeMs" in r]
    if warmup_ms is not None:
        first = next((i for i, r in enumerate(records) if float(r.get("startComputeMs", 0.0)) >= warmup_ms),
                     len(records))
        records = records[first:]
    times = [float(r["computeMs"]) for r in records]
    if not times:
        raise ValueError("the trtexec --exportTimes file holds no computeMs record"
                         + (" after the warm-up" if warmup_ms is not None else ""))
    return times


_PAIR = re.compile(r"(min|max|mean|median|percentile\((\d+(?:\.\d+)?)%\))\s*=?\s*(\d+(?:\.\d*)?(?:e[-+]?\d+)?)\s*ms")


def parse_summary(text: str, metric: str = "GPU Compute Time") -> "dict[str, Any] | None":
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


def trtexec_flags(precision: str, trt_version: "str | None", *, qdq: bool) -> "list[str]":
    """trtexec's precision flags: ``builder_flags`` spelled as options (``--int8`` only for a Q/DQ graph,
    so trtexec and the Python API build the same engine); none on TensorRT 11 (strong typing)."""
    return [f"--{name.lower()}" for name in builder_flags(precision, trt_version or "10", qdq=qdq)]


def trtexec_command(exe: str, onnx: str, plan: str, times: str, settings: dict, flags: Sequence[str], *,
                    build: bool, trt_version: "str | None") -> "list[str]":
    """One trtexec run: build ``onnx`` into ``plan`` (``build``) or load it, then time it for at least
    ``repeats`` inferences and ``min_time_s`` (``--duration``, whole seconds), writing each inference's
    times to ``times``; asks for p10 / p90 in the summary where trtexec takes several percentiles (8.5+)."""
    _, repeats, min_time_s = _settings(settings)
    cmd = [exe, *([f"--onnx={onnx}", f"--saveEngine={plan}", *flags] if build else [f"--loadEngine={plan}"]),
           f"--warmUp={trtexec_warmup_ms(settings)}", f"--iterations={repeats}", f"--duration={math.ceil(min_time_s)}",
           "--useSpinWait", "--noDataTransfers", f"--exportTimes={times}"]
    if trt_version and _major_minor(trt_version) >= (8, 5):
        cmd.append("--percentile=10,50,90")
    return cmd


def trtexec_warmup_ms(settings: dict) -> int:
    """trtexec's ``--warmUp`` (ms of untimed inferences) for the bundle's ``warmup`` calls: 10 ms a call, 200 at least."""
    return max(200, _settings(settings)[0] * 10)


def qdq_in_file(path: str) -> bool:
    """Whether an ONNX file holds Q/DQ nodes (their op type is stored as text; no onnx package here)."""
    with open(path, "rb") as f:
        return b"QuantizeLinear" in f.read()


def trtexec_stats(output: str, times_path: str, *, warmup_ms: "float | None" = None) -> dict:
    """median / p10 / p90 / n from the ``--exportTimes`` records (``warmup_ms``: drop 8.0-8.4's warm-up
    records, ``parse_times``), else from the printed summary (p10 and p90 None where it does not print
    them: never the minimum passed off as p10)."""
    try:
        with open(times_path) as f:
            return {**timing_stats(parse_times(f.read(), warmup_ms=warmup_ms)), "from": "exportTimes"}
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


def trtexec_help_version(exe: str) -> "str | None":
    """The TensorRT version ``exe --help`` names (None when it names none)."""
    out = subprocess.run([exe, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                         timeout=60)
    return trtexec_version(out.stdout + out.stderr)


def trtexec_factory(exe: str, precision: str) -> "tuple[Callable[[str, list[int], dict], Callable[[], dict]], dict]":
    """A factory timing ONNX files with ``exe`` at ``precision``, and the runtime's description.

    ``factory(path, shape, settings)`` returns ``once()``: its first call builds the engine (saved in a
    temporary folder removed with ``once``), later calls load it; each returns median / p10 / p90 / n.
    Raises RuntimeError for a precision this TensorRT cannot build (fp16 on 11)."""
    trt_version = trtexec_help_version(exe)
    builder_flags(precision, trt_version or "10", qdq=False)  # fp16 on 11 is refused here, before any graph
    info = {"name": "tensorrt", "version": trt_version or "unknown", "provider": "", "via": "trtexec"}

    def factory(path: str, shape: "list[int]", settings: dict) -> Callable[[], dict]:
        work = tempfile.mkdtemp(prefix="hwnas_trtexec_")
        plan, times = os.path.join(work, "engine.plan"), os.path.join(work, "times.json")
        flags = trtexec_flags(precision, trt_version, qdq=qdq_in_file(path))
        built = []

        def once() -> dict:
            cmd = trtexec_command(exe, path, plan, times, settings, flags, build=not built, trt_version=trt_version)
            if os.path.exists(times):
                os.remove(times)
            out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
            text = out.stdout + out.stderr
            if out.returncode != 0:
                raise RuntimeError(f"trtexec failed on {path} (exit {out.returncode}): {text[-1500:]}")
            built.append(True)
            info["version"] = trtexec_version(text) or info["version"]
            known = info["version"] if info["version"] != "unknown" else None
            old_trace = known is not None and not python_api_supported(known)  # 8.0-8.4 export warm-ups too
            return trtexec_stats(text, times, warmup_ms=trtexec_warmup_ms(settings) if old_trace else None)

        weakref.finalize(once, shutil.rmtree, work, True)
        once.command = lambda: trtexec_command(exe, path, plan, times, settings, flags, build=not built,  # type: ignore[attr-defined]
                                               trt_version=trt_version)
        return once

    return factory, info
