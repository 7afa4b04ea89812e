"""TensorRT's Python API as each version behaves, one stand-in per behaviour that differs, each
modelled on TensorRT's own documentation or a real error and citing it; ``build_plan`` must build on
every one, and the code before (commit 8d3c7f7) is shown failing the one it broke on."""

import importlib.machinery
import sys
import types

import pytest
import torch._dynamo  # noqa: F401 - torch's lazy imports look tensorrt up: loaded before any stand-in
from old_code import load_old

from nas.latency.runtimes import hwnas_trt
from nas.latency.runtimes.core import get_runtime
from nas.machine import RuntimeUnavailable
from nas.target import Target

# the ONNX parser's refusal of an implicit-batch network, as users posted it (onnx/onnx-tensorrt#266,
# NVIDIA/TensorRT#358, TensorRT 6-8)
IMPLICIT_BATCH_ERROR = ("Assertion failed: !_importer_ctx.network()->hasImplicitBatchDimension() && \"This version "
                        "of the ONNX parser only supports TensorRT INetworkDefinitions with an explicit batch "
                        "dimension. Please ensure the network was created using the EXPLICIT_BATCH "
                        "NetworkDefinitionCreationFlag.\"")


#: the BuilderFlag members of TensorRT 11.4's bindings (tensorrt-cu12-bindings==11.4.0.106, the names in
#: tensorrt_bindings/tensorrt.so): no FP16, no INT8
BUILDER_FLAGS_11_4 = ("DEBUG", "GPU_FALLBACK", "DISABLE_TIMING_CACHE", "EDITABLE_TIMING_CACHE", "TF32", "SPARSE_WEIGHTS",
                      "SAFETY_SCOPE", "DIRECT_IO", "VERSION_COMPATIBLE", "ERROR_ON_TIMING_CACHE_MISS",
                      "DISABLE_COMPILATION_CACHE", "STRIP_PLAN", "REFIT_IDENTICAL", "WEIGHT_STREAMING",
                      "REFIT_INDIVIDUAL", "STRICT_NANS", "MONITOR_MEMORY", "DISTRIBUTIVE_INDEPENDENCE")


def fake_tensorrt(version: str) -> types.ModuleType:
    """A ``tensorrt`` module of ``version`` with the behaviours that differ between versions:

    - 8.x (8.4.3 and 8.6 Python API docs, ``NetworkDefinitionCreationFlag``): ``EXPLICIT_BATCH`` is
      member 0 and a network created without it has an implicit batch dimension, which the ONNX parser
      refuses (IMPLICIT_BATCH_ERROR); ``BuilderFlag`` has FP16 and INT8.
    - 10.x (10.x Python API docs: "EXPLICIT_BATCH: [DEPRECATED] Ignored because networks are always
      explicit batch in TensorRT 10.0"): the flag exists and is ignored; ``STRONGLY_TYPED`` is added.
    - 11.x, as the 11.4 Python bindings have them (``tensorrt-cu12-bindings==11.4.0.106``: the enum
      member names in ``tensorrt_bindings/tensorrt.so``) and as ``include/NvInfer.h`` at v11.1 numbers
      them: ``NetworkDefinitionCreationFlag`` is ``STRONGLY_TYPED = 0`` (deprecated, "strongly typed mode
      is always enabled"), ``PREFER_JIT_PYTHON_PLUGINS = 1``, ``PREFER_AOT_PYTHON_PLUGINS = 2``, with no
      EXPLICIT_BATCH; ``BuilderFlag`` has no FP16 or INT8 (the TensorRT 11 migration guide, "Removed
      Python APIs": they "will cause runtime errors if called").  Code naming any of them fails.
    """
    ns = types.SimpleNamespace
    major = int(version.split(".")[0])
    trt = types.ModuleType("tensorrt")
    trt.__version__ = version
    trt.Logger = type("Logger", (), {"ERROR": 0, "__init__": lambda self, sev: None})
    if major < 10:  # NvInfer.h, release/8.6
        creation = {"EXPLICIT_BATCH": 0, "EXPLICIT_PRECISION": 1}
    elif major == 10:  # NvInfer.h, v10.13.0
        creation = {"EXPLICIT_BATCH": 0, "STRONGLY_TYPED": 1, "PREFER_JIT_PYTHON_PLUGINS": 2, "PREFER_AOT_PYTHON_PLUGINS": 3}
    else:  # NvInfer.h, v11.1; the 11.4 bindings' member names
        creation = {"STRONGLY_TYPED": 0, "PREFER_JIT_PYTHON_PLUGINS": 1, "PREFER_AOT_PYTHON_PLUGINS": 2}
    trt.NetworkDefinitionCreationFlag = ns(**creation)
    if major < 11:
        trt.BuilderFlag = ns(FP16="FP16", INT8="INT8")
    else:
        trt.BuilderFlag = ns(**{n: n for n in BUILDER_FLAGS_11_4})
    trt.MemoryPoolType = ns(WORKSPACE="WORKSPACE")
    trt.LayerType = ns(QUANTIZE="Q", DEQUANTIZE="DQ", CONVOLUTION="C")

    class Network:
        def __init__(self, flags):
            self.implicit_batch = major < 10 and not flags & (1 << creation.get("EXPLICIT_BATCH", 31))
            self.num_layers, self.kinds = 0, []

        def get_layer(self, i):
            return ns(type=self.kinds[i])

    class Parser:
        def __init__(self, network, logger):
            self.network, self.errors = network, []

        @property
        def num_errors(self):
            return len(self.errors)

        def get_error(self, i):
            return self.errors[i]

        def parse(self, data):
            if self.network.implicit_batch:
                self.errors.append(IMPLICIT_BATCH_ERROR)
                return False
            self.network.kinds = ["Q", "C"] if b"QuantizeLinear" in data else ["C"]
            self.network.num_layers = len(self.network.kinds)
            return True

    class Builder:
        def __init__(self, logger):
            pass

        def create_network(self, flags=0):
            return Network(flags)

        def create_builder_config(self):
            cfg = ns(flags=[])
            cfg.set_flag = cfg.flags.append
            return cfg

        def build_serialized_network(self, network, config):
            return ("plan:" + ",".join(config.flags)).encode()

    trt.Builder, trt.OnnxParser = Builder, Parser
    return trt


def _old_build_plan(tmp_path):
    return load_old("nas/latency/bundle_trt.py", tmp_path).build_plan


@pytest.mark.parametrize("version,precision,qdq,plan", [
    ("8.6.1", "fp16", False, b"plan:FP16"), ("8.6.1", "int8", True, b"plan:INT8,FP16"),
    ("8.5.2", "fp32", False, b"plan:"),
    ("10.3.0", "fp16", False, b"plan:FP16"), ("10.3.0", "int8", False, b"plan:FP16"),
    ("11.0.0", "int8", True, b"plan:"), ("11.0.0", "fp32", False, b"plan:"), ("11.4.0", "int8", True, b"plan:"),
])
def test_build_plan_on_each_version(monkeypatch, version, precision, qdq, plan):
    monkeypatch.setitem(sys.modules, "tensorrt", fake_tensorrt(version))
    assert hwnas_trt.build_plan(b"graph" + (b" QuantizeLinear" if qdq else b""), precision) == plan


def test_network_flags_per_version():
    assert hwnas_trt.network_flags(fake_tensorrt("8.6.1")) == 1
    assert hwnas_trt.network_flags(fake_tensorrt("10.3.0")) == 0
    assert hwnas_trt.network_flags(fake_tensorrt("11.0.0")) == 0
    assert hwnas_trt.network_flags(fake_tensorrt("11.4.0")) == 0


def test_the_11_stand_in_is_the_11_4_bindings():
    """STRONGLY_TYPED is 0 on 11 (NvInfer.h@v11.1), 1 on 10; 11 has no EXPLICIT_BATCH, FP16 or INT8."""
    t10, t11 = fake_tensorrt("10.13.0"), fake_tensorrt("11.4.0")
    assert t10.NetworkDefinitionCreationFlag.STRONGLY_TYPED == 1 and t11.NetworkDefinitionCreationFlag.STRONGLY_TYPED == 0
    assert not {"EXPLICIT_BATCH"} & set(vars(t11.NetworkDefinitionCreationFlag))
    assert not {"FP16", "INT8"} & set(vars(t11.BuilderFlag))
    for precision, qdq in (("fp32", False), ("int8", True), ("fp32", True)):
        assert hwnas_trt.builder_flags(precision, "11.4.0", qdq=qdq) == ()  # names no flag 11 lacks


def test_fakes_can_fail():
    """Each stand-in refuses what its version refuses."""
    t86, t11 = fake_tensorrt("8.6.1"), fake_tensorrt("11.0.0")
    parser = t86.OnnxParser(t86.Builder(None).create_network(0), None)
    assert not parser.parse(b"graph") and "explicit batch" in parser.get_error(0)
    with pytest.raises(AttributeError):
        t11.BuilderFlag.FP16  # noqa: B018 - removed in 11
    with pytest.raises(AttributeError):
        t11.NetworkDefinitionCreationFlag.EXPLICIT_BATCH  # noqa: B018


def test_fp16_on_11_is_refused_with_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", fake_tensorrt("11.0.0"))
    with pytest.raises(RuntimeError, match=r"tensorrt<11"):
        hwnas_trt.build_plan(b"graph", "fp16")


def test_python_api_before_8_5_points_to_trtexec(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", fake_tensorrt("8.4.1"))
    with pytest.raises(RuntimeError, match=r"execute_async_v3 \(8\.5\+\).*--runtime trtexec"):
        hwnas_trt.build_plan(b"graph", "fp16")


def test_old_code_fails_on_8_6(tmp_path, monkeypatch):
    """The old build_plan created every network with flags 0: TensorRT 8.6 (JetPack 6.0) refused it."""
    old_build_plan = _old_build_plan(tmp_path)
    monkeypatch.setitem(sys.modules, "tensorrt", fake_tensorrt("8.6.1"))
    with pytest.raises(RuntimeError, match="only supports TensorRT INetworkDefinitions with an explicit batch"):
        old_build_plan(b"graph", "fp16")
    monkeypatch.setitem(sys.modules, "tensorrt", fake_tensorrt("10.3.0"))
    assert old_build_plan(b"graph", "fp16") == b"plan:FP16"  # 10.x ignored the missing flag


def test_local_runtime_before_8_5_is_unavailable(monkeypatch):
    """nas.profile on a JetPack 5.0 board (TensorRT 8.4) says to use trtexec instead of failing later."""
    trt = fake_tensorrt("8.4.1")
    trt.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    target = Target.from_dict({"name": "t", "runtime": "tensorrt", "provider": "", "precision": "fp16", "batch": 1,
                               "threads": 1, "latency_budget_ms": 1.0,
                               "device": {"name": None, "kind": "gpu", "peak_gflops": 1.0, "mem_bandwidth_gbs": 1.0}})
    with pytest.raises(RuntimeUnavailable, match="trtexec"):
        get_runtime(target)
