"""The ExecuTorch and OpenVINO runtimes: registered, one-line errors without their packages, outputs
matching torch (fp32 close, int8 within a loose tolerance) and a positive median from the measuring loop."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from nas.arch import BlockKey, ConvBlock, MBConvBlock
from nas.builder import build_layer
from nas.latency.measure import ProfileSettings, measure_key
from nas.latency.runtimes import RUNTIMES, RuntimeUnavailable, get_runtime
from nas.target import load_target

CONV = BlockKey(ConvBlock(8, 3, 2, "relu"), 3, 16, 16)
MBCONV = BlockKey(MBConvBlock(16, 32, 3, 1, "hard_swish"), 16, 8, 8)
QUICK = ProfileSettings(warmup=1, repeats=3, min_time_s=0.0, remeasure=0, rounds=1)
PACKAGES = {"executorch": "executorch.runtime", "openvino": "openvino"}


def _runtime(runtime: str, precision: str):
    pytest.importorskip(PACKAGES[runtime])
    if runtime == "openvino" and precision == "int8":
        pytest.importorskip("nncf")
    suffix = "_int8" if precision == "int8" else ""
    return get_runtime(load_target(f"{runtime}_cpu{suffix}"))


def _rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(got - ref).mean() / np.abs(ref).mean())


def test_registered_and_targets_name_them():
    assert {"executorch", "openvino"} <= set(RUNTIMES)
    for name, runtime, provider in (("executorch_cpu", "executorch", "XNNPACK"), ("openvino_cpu_int8", "openvino", "CPU")):
        t = load_target(name)
        assert (t.runtime, t.provider, t.device.name, t.device.kind) == (runtime, provider, None, "cpu")


@pytest.mark.parametrize("runtime,module", [("executorch", "executorch.runtime"), ("openvino", "openvino")])
def test_missing_package_is_one_line(monkeypatch, runtime, module):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if it were not installed
    with pytest.raises(RuntimeUnavailable) as e:
        get_runtime(load_target(f"{runtime}_cpu"))
    assert str(e.value) == f'{runtime} runtime: {module} is not installed: pip install "hwnas[{runtime}]"'


def test_openvino_int8_needs_nncf(monkeypatch):
    pytest.importorskip("openvino")
    monkeypatch.setitem(sys.modules, "nncf", None)
    get_runtime(load_target("openvino_cpu"))  # fp32 does not need it
    with pytest.raises(RuntimeUnavailable, match=r'nncf is not installed: pip install "hwnas\[openvino\]"'):
        get_runtime(load_target("openvino_cpu_int8"))


@pytest.mark.parametrize("runtime", ["executorch", "openvino"])
def test_wrong_provider_or_device_says_the_fix(runtime):
    t = load_target(f"{runtime}_cpu")
    want = t.provider
    with pytest.raises(RuntimeUnavailable, match=f"takes provider '{want}'.*conf.provider={want}"):
        get_runtime(t.replace(provider="CPUExecutionProvider"))
    with pytest.raises(RuntimeUnavailable, match="runs on the CPU.*device.kind: cpu"):
        get_runtime(t.to_dict() | {"device": {**t.to_dict()["device"], "kind": "gpu"}})
    with pytest.raises(RuntimeUnavailable, match="does not support precision 'fp16'"):
        get_runtime(t.replace(precision="fp16"))


def _check_block(rt, key: BlockKey, *, tol: float) -> None:
    torch.manual_seed(0)
    module = build_layer(key).eval()
    x = rt._input(key.in_shape)
    with torch.no_grad():
        ref = module(x).numpy()
    got = rt.prepare(module, key.in_shape, key=key)
    got()
    out = got.output()
    assert out.shape == ref.shape
    assert _rel_err(out, ref) < tol, (rt.name, rt.precision, _rel_err(out, ref))
    entry = measure_key(key, rt, QUICK)  # the profiler's path: the cached conversion, the one measuring loop
    assert entry.median_ms > 0 and entry.n >= 3


@pytest.mark.parametrize("runtime", [pytest.param("executorch", marks=pytest.mark.slow), "openvino"])
def test_fp32_matches_torch_and_measures(runtime):
    """ExecuTorch: importing it and the first lowering take 20-60 s here."""
    rt = _runtime(runtime, "fp32")
    _check_block(rt, CONV, tol=1e-5)
    assert rt.info()["name"] == runtime and rt.info()["provider"] == rt.provider


def test_openvino_int8_close_to_torch():
    rt = _runtime("openvino", "int8")
    _check_block(rt, MBCONV, tol=0.15)
    assert "nncf" in rt.info()


@pytest.mark.slow
def test_executorch_int8_close_to_torch():
    """PT2E quantization and lowering of one block take 15-30 s here."""
    _check_block(_runtime("executorch", "int8"), CONV, tol=0.15)


def test_prepare_reuses_the_conversion_per_key(monkeypatch):
    rt = _runtime("openvino", "fp32")
    import nas.export.edge as edge

    calls = []
    real = edge.openvino_model
    monkeypatch.setattr(edge, "openvino_model", lambda *a, **k: calls.append(1) or real(*a, **k))
    module = build_layer(CONV)
    rt.prepare(module, CONV.in_shape, key=CONV)
    rt.prepare(module, CONV.in_shape, key=CONV)
    rt.prepare(module, CONV.in_shape)  # no key: converted again
    assert len(calls) == 2
