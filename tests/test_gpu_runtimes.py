"""TensorRT and onnxruntime's GPU providers: the pieces that run anywhere (flags, settings, errors,
the bundle measurer's imports), then real GPU runs (``-m gpu``; skipped without a CUDA GPU, and with
the reason when ``tensorrt`` or the onnxruntime-gpu provider is missing)."""

import ast
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from nas.builder import build_layer
from nas.export.onnx import export_onnx
from nas.export.qdq import QDQ_SETTINGS, TENSORRT_QDQ_SETTINGS, quantize_qdq
from nas.latency.profile.profiler import new_metadata, profile_blocks
from nas.latency.runtimes import hwnas_trt
from nas.latency.runtimes.core import get_runtime, trt_ep_options
from nas.latency.runtimes.loop import ProfileSettings, measure
from nas.latency.tables.table import LatencyTable
from nas.machine import RuntimeUnavailable
from nas.space import load_space
from nas.target import Target

BUNDLE_TRT = Path(hwnas_trt.__file__)
FAST = ProfileSettings(warmup=2, repeats=5, min_time_s=0.0, max_spread=10.0, remeasure=0, rounds=1, save_every_s=0.0)
DEVICE = {"name": None, "kind": "gpu", "peak_gflops": 1000.0, "mem_bandwidth_gbs": 100.0}


def target(runtime, provider="", precision="fp32") -> Target:
    return Target.from_dict({"name": "t", "runtime": runtime, "provider": provider, "precision": precision, "batch": 1,
                             "threads": 1, "latency_budget_ms": 1.0, "device": DEVICE})


@pytest.fixture(scope="module")
def keys():
    return load_space("tiny").unique_blocks()[:3]


def _fake_tensorrt(monkeypatch, version):
    """A stand-in ``tensorrt`` module of ``version`` (torch's lazy imports look it up, so it has a spec
    and torch._dynamo is loaded before it appears)."""
    import importlib.machinery

    import torch._dynamo  # noqa: F401

    fake = types.ModuleType("tensorrt")
    fake.__version__ = version
    fake.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)
    monkeypatch.setitem(sys.modules, "tensorrt", fake)


def _zero_points(data):
    m = onnx.load_from_string(data)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    return [inits[n.input[2]] for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[2] in inits]


# ------------------------------------------------------------------------------------------
# anywhere


def test_builder_flags_per_precision():
    flags = hwnas_trt.builder_flags
    assert flags("fp32", "10.9.0.34", qdq=False) == ()
    assert flags("fp16", "10.9.0.34", qdq=False) == ("FP16",)
    assert flags("int8", "10.9.0.34", qdq=True) == ("INT8", "FP16")
    assert flags("fp32", "10.9.0.34", qdq=True) == ("INT8",)  # TensorRT 10 refuses Q/DQ without INT8
    assert flags("int8", "11.1.0", qdq=True) == () == flags("fp32", "11.1.0", qdq=False)  # strong typing
    assert flags("int8", "10.9.0", qdq=False) == ("FP16",)  # nothing quantized: never implicit int8
    with pytest.raises(RuntimeError, match="tensorrt<11"):
        flags("fp16", "11.1.0", qdq=False)
    with pytest.raises(ValueError, match="precision must be one of fp32, fp16, int8, got 'bf16'"):
        flags("bf16", "10.9.0", qdq=False)


def test_trt_ep_options_per_precision():
    assert trt_ep_options("fp32") == {"trt_fp16_enable": False, "trt_int8_enable": False}
    assert trt_ep_options("fp16") == {"trt_fp16_enable": True, "trt_int8_enable": False}
    assert trt_ep_options("int8") == {"trt_fp16_enable": True, "trt_int8_enable": True}


def _one_line(e):
    assert "\n" not in str(e.value), str(e.value)
    return str(e.value)


def test_missing_tensorrt_names_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # `import tensorrt` raises ImportError
    with pytest.raises(RuntimeUnavailable) as e:
        get_runtime(target("tensorrt", precision="fp16"))
    assert "pip install tensorrt" in _one_line(e)
    assert "pip install tensorrt" in hwnas_trt.available()
    with pytest.raises(RuntimeError) as e:
        hwnas_trt.measure_factory(str(tmp_path / "b.onnx"), [1, 3, 8, 8], "fp16",
                                   {"warmup": 1, "repeats": 3, "min_time_s": 0.0})
    assert "pip install tensorrt" in _one_line(e)
    with pytest.raises(RuntimeError, match="pip install tensorrt"):
        hwnas_trt.version()


def test_bundle_measurer_checks_its_settings(tmp_path):
    with pytest.raises(ValueError, match=r"settings lacks \['min_time_s'\]"):
        hwnas_trt.measure_factory(str(tmp_path / "b.onnx"), [1, 3, 8, 8], "fp32", {"warmup": 1, "repeats": 3})


@pytest.mark.parametrize("provider", ["CUDAExecutionProvider", "TensorrtExecutionProvider"])
def test_missing_gpu_provider_names_onnxruntime_gpu(monkeypatch, provider):
    import onnxruntime as ort

    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    with pytest.raises(RuntimeUnavailable) as e:
        get_runtime(target("onnxruntime", provider))
    assert f"{provider} is not available here" in _one_line(e) and "pip install onnxruntime-gpu" in str(e.value)


def test_provider_fallback_to_cpu_is_refused(monkeypatch, keys):
    """onnxruntime falls back to the CPU (with a warning only) when a GPU provider cannot start: a
    table measured that way would describe the CPU, so the session is refused."""
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("onnxruntime-gpu is installed here: the CUDA provider would start")
    real = ort.get_available_providers
    monkeypatch.setattr(ort, "get_available_providers", lambda: [*real(), "CUDAExecutionProvider"])
    rt = get_runtime(target("onnxruntime", "CUDAExecutionProvider"))
    data = rt.onnx_bytes(build_layer(keys[0]), keys[0].in_shape)
    with pytest.raises(RuntimeUnavailable) as e, pytest.warns(UserWarning):
        rt.session(data)
    assert "fell back to CPUExecutionProvider" in _one_line(e) and "pip install onnxruntime-gpu" in str(e.value)


def test_int8_graphs_follow_the_runtime(monkeypatch, keys):
    """TensorRT (its own runtime or onnxruntime's provider) gets the symmetric QDQ export, zero point
    0; onnxruntime's CPU and CUDA providers the u8-activation one."""
    import onnxruntime as ort

    real = ort.get_available_providers
    monkeypatch.setattr(ort, "get_available_providers",
                        lambda: [*real(), "CUDAExecutionProvider", "TensorrtExecutionProvider"])
    _fake_tensorrt(monkeypatch, "10.9.0.34")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    key = keys[0]
    for rt, settings, dtype in [
        (get_runtime(target("tensorrt", precision="int8")), TENSORRT_QDQ_SETTINGS, np.int8),
        (get_runtime(target("onnxruntime", "TensorrtExecutionProvider", "int8")), TENSORRT_QDQ_SETTINGS, np.int8),
        (get_runtime(target("onnxruntime", "CUDAExecutionProvider", "int8")), QDQ_SETTINGS, np.uint8),
    ]:
        assert rt.qdq_settings() == settings
        zps = _zero_points(rt.onnx_bytes(build_layer(key), key.in_shape))
        assert zps and all(z.dtype == dtype for z in zps), type(rt).__name__
        if dtype == np.int8:
            assert all(np.all(z == 0) for z in zps)


def test_tensorrt_fp16_refused_on_tensorrt_11(monkeypatch):
    _fake_tensorrt(monkeypatch, "11.1.0")
    with pytest.raises(RuntimeUnavailable) as e:
        get_runtime(target("tensorrt", precision="fp16"))
    assert "tensorrt<11" in _one_line(e)


class _FakeCudart:
    """Records the CUDA calls hwnas_trt makes; every timed run takes 0.5 ms."""

    def __init__(self):
        self.calls, self.released, self.copied, self._next = [], None, [], 0x1000

    def _handle(self, *_):
        self._next += 0x100
        return self._next

    malloc = new = _handle

    def device_count(self):
        return 1

    def call(self, name, *args):
        self.calls.append(name)

    def to_device(self, dst, host):
        self.copied.append((dst, host.shape, host.dtype))

    def elapsed_ms(self, start, end):
        return 0.5

    def release(self, buffers, stream, events):
        self.released = (list(buffers), stream, tuple(events))


def _fake_trt_module(version="10.9.0.34"):
    """Just enough of TensorRT's Python API for hwnas_trt's glue: a parsed graph is quantized when
    the ONNX bytes contain b"QuantizeLinear"; the plan records the flags set."""
    ns = types.SimpleNamespace
    trt = types.ModuleType("tensorrt")
    trt.__version__ = version
    trt.Logger = type("Logger", (), {"ERROR": 0, "__init__": lambda self, sev: None})
    trt.BuilderFlag = ns(FP16="FP16", INT8="INT8")
    trt.MemoryPoolType = ns(WORKSPACE="WORKSPACE")
    trt.LayerType = ns(QUANTIZE="Q", DEQUANTIZE="DQ", CONVOLUTION="C")
    trt.TensorIOMode = ns(INPUT="in", OUTPUT="out")
    trt.nptype = lambda dt: np.float32
    shapes = {"input": (1, 3, 8, 8), "output": (1, 8, 8, 8)}

    class Parser:
        def __init__(self, network, logger):
            self.network, self.num_errors = network, 0

        def parse(self, data):
            kinds = ["Q", "C"] if b"QuantizeLinear" in data else ["C"]
            self.network.num_layers, self.network.get_layer = len(kinds), lambda i: ns(type=kinds[i])
            return True

    class Builder:
        def __init__(self, logger):
            pass

        def create_network(self, flags):
            return ns()

        def create_builder_config(self):
            cfg = ns(flags=[])
            cfg.set_flag = cfg.flags.append
            return cfg

        def build_serialized_network(self, network, config):
            return ",".join(config.flags).encode()

    class Context:
        def __init__(self):
            self.addresses, self.runs = {}, 0

        def get_tensor_shape(self, name):
            return shapes[name]

        def set_tensor_address(self, name, ptr):
            self.addresses[name] = ptr

        def execute_async_v3(self, stream):
            self.runs += 1
            return True

    class Engine:
        num_io_tensors = 2

        def __init__(self, plan):
            self.plan, self.context = plan, Context()

        def get_tensor_name(self, i):
            return ["input", "output"][i]

        def get_tensor_mode(self, name):
            return "in" if name == "input" else "out"

        def get_tensor_shape(self, name):
            return shapes[name]

        def get_tensor_dtype(self, name):
            return "float32"

        def create_execution_context(self):
            return self.context

    trt.OnnxParser, trt.Builder = Parser, Builder
    trt.Runtime = type("Runtime", (), {"__init__": lambda self, logger: None,
                                       "deserialize_cuda_engine": lambda self, plan: Engine(plan)})
    return trt


@pytest.mark.parametrize("precision,quantized,flags", [("fp16", False, b"FP16"), ("int8", True, b"INT8,FP16"),
                                                       ("fp32", True, b"INT8")])
def test_bundle_measurer_glue(monkeypatch, tmp_path, precision, quantized, flags):
    """measure_factory against a stand-in TensorRT and CUDA runtime: the flags reach the builder,
    every I/O tensor gets a device buffer (the input filled once), once() runs warmup + repeats
    times, the timed ones queued behind a GPU-side wait with an event between consecutive runs (two
    more time one memset of the wait's scratch buffer, once), and the buffers (the scratch buffer
    too) are freed with the function."""
    import gc

    monkeypatch.setitem(sys.modules, "tensorrt", _fake_trt_module())
    cuda = _FakeCudart()
    monkeypatch.setattr(hwnas_trt, "Cudart", lambda: cuda)
    path = tmp_path / "b.onnx"
    path.write_bytes(b"graph QuantizeLinear" if quantized else b"graph")
    once = hwnas_trt.measure_factory(str(path), [1, 3, 8, 8], precision, {"warmup": 2, "repeats": 7, "min_time_s": 0})
    built = once.keep
    assert built.engine.plan == flags
    assert set(built.context.addresses) == {"input", "output"}
    assert cuda.copied == [(built.context.addresses["input"], (1, 3, 8, 8), np.float32)]
    assert once() == {"median_ms": 0.5, "p10_ms": 0.5, "p90_ms": 0.5, "n": 7}
    assert built.context.runs == 9 and cuda.calls.count("cudaEventRecord") == 2 + 7 + 1
    assert cuda.calls.count("cudaMemsetAsync") >= 3 and cuda.calls.count("cudaStreamSynchronize") == 2
    buffers = sorted(built.context.addresses.values())
    del once, built
    gc.collect()
    assert cuda.released is not None and set(buffers) < set(cuda.released[0]) and len(cuda.released[0]) == 3


def _imported(path):
    tree = ast.parse(path.read_text())
    mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    assert not any(isinstance(n, ast.ImportFrom) and n.level > 0 for n in ast.walk(tree))
    return mods - set(sys.stdlib_module_names)


def test_bundle_measurer_imports_only_stdlib_numpy_tensorrt():
    """hwnas_trt.py and hwnas_cuda.py are copied into device bundles under these names,
    where torch and this package are absent: hwnas_trt.py imports hwnas_cuda.py beside it there (and
    nas.latency.runtimes.hwnas_cuda only where that is missing: in hwnas)."""
    assert _imported(BUNDLE_TRT) == {"numpy", "tensorrt", "hwnas_cuda", "nas"}
    assert _imported(BUNDLE_TRT.with_name("hwnas_cuda.py")) == {"numpy"}


def test_bundle_measurer_runs_without_torch_or_nas(tmp_path):
    """Loaded as a bundle holds it (hwnas_trt.py beside hwnas_cuda.py) with torch and nas made
    unimportable, it still answers available()."""
    import shutil

    shutil.copyfile(BUNDLE_TRT, tmp_path / "hwnas_trt.py")
    shutil.copyfile(BUNDLE_TRT.with_name("hwnas_cuda.py"), tmp_path / "hwnas_cuda.py")
    code = f"""
import importlib.abc, importlib.util, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "nas"):
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
sys.path.insert(0, {str(tmp_path)!r})
spec = importlib.util.spec_from_file_location("hwnas_trt", {str(tmp_path / "hwnas_trt.py")!r})
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
print("REASON", m.available())
assert not any(k.split(".")[0] in ("torch", "nas") for k in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "REASON" in out.stdout


# ------------------------------------------------------------------------------------------
# on a CUDA GPU


def _runtime(**t):
    try:
        return get_runtime(target(**t))
    except RuntimeUnavailable as e:
        pytest.skip(str(e))


@pytest.mark.gpu
def test_tensorrt_fp16_block_close_to_torch(keys):
    rt = _runtime(runtime="tensorrt", precision="fp16")
    key = keys[0]
    torch.manual_seed(0)
    module = build_layer(key).eval()
    run = rt.prepare(module, key.in_shape)
    ms = measure(run, warmup=3, repeats=10, min_time_s=0.0)
    assert np.median(ms) > 0
    with torch.no_grad():
        want = module(rt._input(key.in_shape)).numpy()
    got = run.outputs["output"].float().cpu().numpy()
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 0.02 * np.abs(want).max() + 1e-2


@pytest.mark.gpu
def test_tensorrt_int8_builds_from_the_qdq_export(keys):
    rt = _runtime(runtime="tensorrt", precision="int8")
    key = keys[0]
    module = build_layer(key).eval()
    data = rt.onnx_bytes(module, key.in_shape)
    zps = _zero_points(data)
    assert zps and all(z.dtype == np.int8 and np.all(z == 0) for z in zps)
    run = rt.prepare(module, key.in_shape)
    assert np.median(measure(run, warmup=3, repeats=10, min_time_s=0.0)) > 0
    with torch.no_grad():
        want = module(rt._input(key.in_shape)).numpy()
    got = run.outputs["output"].float().cpu().numpy()
    assert got.shape == want.shape and np.isfinite(got).all()
    assert np.abs(got - want).max() <= 0.25 * np.abs(want).max() + 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("provider,precision", [("CUDAExecutionProvider", "fp32"),
                                                ("TensorrtExecutionProvider", "fp16"),
                                                ("TensorrtExecutionProvider", "int8")])
def test_onnxruntime_gpu_provider_measures_a_block(keys, provider, precision):
    rt = _runtime(runtime="onnxruntime", provider=provider, precision=precision)
    key = keys[0]
    run = rt.prepare(build_layer(key), key.in_shape)
    assert np.median(measure(run, warmup=3, repeats=10, min_time_s=0.0)) > 0


@pytest.mark.gpu
def test_profiled_table_with_tensorrt(tmp_path, keys):
    t = target("tensorrt", precision="fp16")
    rt = _runtime(runtime=t.runtime, precision=t.precision)
    table = LatencyTable(metadata=new_metadata(t, rt, FAST), path=tmp_path / "trt.json")
    rep = profile_blocks(keys, rt, table, settings=FAST, progress=False, path=tmp_path / "trt.json")
    assert rep.measured == len(keys)
    back = LatencyTable.load(tmp_path / "trt.json")
    assert set(back.entries) == set(keys) and back.metadata["runtime"]["name"] == "tensorrt"
    assert back.metadata["call_overhead_ms"] > 0
    for e in back.entries.values():
        assert 0 < e.p10_ms <= e.median_ms <= e.p90_ms and e.n >= FAST.repeats


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_bundle_measurer_times_an_onnx_file(tmp_path, keys, precision):
    reason = hwnas_trt.available()
    if reason is not None:
        pytest.skip(reason)
    key = keys[0]
    x = torch.randn(1, *key.in_shape)
    data = export_onnx(build_layer(key), x)
    if precision == "int8":
        calib = [torch.randn(1, *key.in_shape).numpy() for _ in range(4)]
        data = quantize_qdq(data, calib, **TENSORRT_QDQ_SETTINGS)
    path = tmp_path / "block.onnx"
    path.write_bytes(data)
    once = hwnas_trt.measure_factory(str(path), [1, *key.in_shape], precision,
                                      {"warmup": 2, "repeats": 5, "min_time_s": 0.0})
    for _ in range(2):  # one factory, several rounds
        r = once()
        assert set(r) == {"median_ms", "p10_ms", "p90_ms", "n"}
        assert 0 < r["p10_ms"] <= r["median_ms"] <= r["p90_ms"] and r["n"] >= 5
    assert hwnas_trt.version()


@pytest.mark.gpu
def test_here_gpu_microbenchmark_measures_the_gpu():
    from nas.latency.predict.here import gpu_identity, measure_gpu_peaks

    ident = gpu_identity()
    peaks = measure_gpu_peaks(matmul_n=2048, copy_mb=256, chain_ops=50)
    assert peaks["peak_gflops"] > 1000 and peaks["mem_bandwidth_gbs"] > 100 and peaks["overhead_us"] > 0
    assert ident["gpu"] in peaks["spec_source"]
