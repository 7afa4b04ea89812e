"""The LiteRT runtime, its export and its device bundle: registered, one-line errors without the
``[litert]`` extra, blocks converted NHWC at their edges and matching torch (fp32 close, full-integer
int8 within a loose tolerance), a positive median from the one measuring loop, ``format=tflite``
verified with its card's NHWC / int8 input, and a bundle measured by the standalone script (and
rehearsed, labelled so) imported as a table.  Everything that converts skips without the extra."""

from __future__ import annotations

import dataclasses
import importlib.machinery
import json
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

from nas.arch import BlockKey, ConvBlock, Head, MBConvBlock
from nas.builder import build_layer
from nas.latency.runtimes.base import RUNTIMES
from nas.latency.runtimes.core import get_runtime
from nas.latency.runtimes.loop import ProfileSettings
from nas.latency.runtimes.measure_model import measure_key
from nas.machine import RuntimeUnavailable
from nas.target import load_target

CONV = BlockKey(ConvBlock(8, 3, 2, "relu"), 3, 16, 16)
MBCONV = BlockKey(MBConvBlock(16, 32, 3, 1, "hard_swish"), 16, 8, 8)
QUICK = ProfileSettings(warmup=1, repeats=3, min_time_s=0.0, remeasure=0, rounds=1)


def _runtime(name: str):
    pytest.importorskip("litert_torch")
    pytest.importorskip("ai_edge_litert.interpreter")
    if name.endswith("int8"):
        pytest.importorskip("ai_edge_quantizer")
    return get_runtime(load_target(name))


def _rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(got - ref).mean() / np.abs(ref).mean())


def test_registered_and_targets_name_it():
    get_runtime(load_target("cpu"))  # the first lookup registers the edge runtimes
    assert "litert" in RUNTIMES
    for name, precision in (("litert_cpu", "fp32"), ("litert_cpu_int8", "int8")):
        t = load_target(name)
        assert (t.runtime, t.provider, t.precision, t.threads, t.device.name) == ("litert", "XNNPACK", precision, 1, None)


def _present(monkeypatch, *names: str) -> None:
    """Stand-in modules for ``names``, so that the check reaches the one a test takes away."""
    for name in names:
        mod = types.ModuleType(name)
        mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
        monkeypatch.setitem(sys.modules, name, mod)


@pytest.mark.parametrize("module", ["litert_torch", "ai_edge_litert.interpreter"])
def test_missing_package_is_one_line(monkeypatch, module):
    _present(monkeypatch, "litert_torch")
    monkeypatch.setitem(sys.modules, module, None)  # not importable, as if it were not installed
    with pytest.raises(RuntimeUnavailable) as e:
        get_runtime(load_target("litert_cpu"))
    assert str(e.value) == f'litert runtime: {module} is not installed: pip install "hwnas[litert]"'


def test_int8_needs_the_quantizer(monkeypatch):
    _present(monkeypatch, "litert_torch", "ai_edge_litert", "ai_edge_litert.interpreter")
    get_runtime(load_target("litert_cpu"))  # fp32 does not need it
    monkeypatch.setitem(sys.modules, "ai_edge_quantizer", None)
    with pytest.raises(RuntimeUnavailable, match=r'ai_edge_quantizer is not installed: pip install "hwnas\[litert\]"'):
        get_runtime(load_target("litert_cpu_int8"))


def test_wrong_provider_or_device_says_the_fix():
    t = load_target("litert_cpu")
    with pytest.raises(RuntimeUnavailable, match="takes provider 'XNNPACK'.*conf.provider=XNNPACK"):
        get_runtime(t.replace(provider="CPUExecutionProvider"))
    with pytest.raises(RuntimeUnavailable, match="runs on the CPU.*device.kind: cpu"):
        get_runtime(t.replace(device=dataclasses.replace(t.device, kind="gpu")))
    with pytest.raises(RuntimeUnavailable, match="does not support precision 'fp16'"):
        get_runtime(t.replace(precision="fp16"))


def _check_block(rt, key: BlockKey, *, tol: float) -> None:
    torch.manual_seed(0)
    module = build_layer(key).eval()
    x = rt._input(key.in_shape)
    with torch.no_grad():
        ref = module(x).numpy()
    run = rt.prepare(module, key.in_shape, key=key)
    run()
    out = run.output()
    assert out.shape == ref.shape and run.partitions >= 1  # XNNPACK took the graph
    assert _rel_err(out, ref) < tol, (rt.precision, _rel_err(out, ref))
    entry = measure_key(key, rt, QUICK)  # the profiler's path: the cached conversion, the one measuring loop
    assert entry.median_ms > 0 and entry.n >= 3


def test_fp32_block_nhwc_at_its_edges_matches_torch_and_measures():
    """About 15 s here: importing litert-torch (jax) and one conversion."""
    from nas.export.litert import interpreter, io_spec

    rt = _runtime("litert_cpu")
    _check_block(rt, CONV, tol=1e-5)
    spec = io_spec(interpreter(rt.tflite(build_layer(CONV).eval(), CONV.in_shape, key=CONV)))
    assert spec["input"]["shape"] == [1, 16, 16, 3] and spec["output"]["shape"] == [1, 8, 8, 8]
    assert spec["input"]["layout"] == "NHWC" and spec["input"]["dtype"] == "float32"
    info = rt.info()
    assert info["name"] == "litert" and info["provider"] == "XNNPACK" and info["layout"] == "NHWC"


@pytest.mark.slow
def test_int8_blocks_full_integer_close_to_torch():
    """ai-edge-quantizer's static int8: the block's input and output are int8 too (30 s here)."""
    from nas.export.litert import interpreter, io_spec

    rt = _runtime("litert_cpu_int8")
    _check_block(rt, MBCONV, tol=0.15)
    head = BlockKey(Head(10), 48, 4, 4)
    _check_block(rt, head, tol=0.15)  # a 2-D output stays 2-D
    spec = io_spec(interpreter(rt.tflite(build_layer(MBCONV).eval(), MBCONV.in_shape, key=MBCONV)))
    assert spec["input"]["dtype"] == "int8" and spec["input"]["quantization"]["scale"] > 0
    assert "static_wi8_ai8" in rt.info()["scheme"]


def test_prepare_reuses_the_conversion_per_key(monkeypatch):
    rt = _runtime("litert_cpu")
    import nas.export.litert as litert

    calls = []
    real = litert.tflite_bytes
    monkeypatch.setattr(litert, "tflite_bytes", lambda *a, **k: calls.append(1) or real(*a, **k))
    module = build_layer(CONV)
    rt.prepare(module, CONV.in_shape, key=CONV)
    rt.prepare(module, CONV.in_shape, key=CONV)
    rt.prepare(module, CONV.in_shape)  # no key: converted again
    assert len(calls) == 2


# --------------------------------------------------------------------------------------------
# nas.export format=tflite


@pytest.fixture
def checkpoint(tmp_path):
    """A float checkpoint (a bare state dict) of a tiny digits network and its Arch file."""
    from nas.builder import build
    from nas.space import load_space

    arch = load_space("tiny").random(4).with_head(in_chans=1, num_classes=10).with_resolution(16)
    (tmp_path / "arch.json").write_text(json.dumps(arch.to_dict()))
    torch.manual_seed(0)
    torch.save(build(arch).state_dict(), tmp_path / "fp32.ckpt")
    return tmp_path


def _export(tmp_path, capsys, *args):
    from nas.cli.export import run
    from nas.config import compose_app

    cfg = compose_app("export", [f"arch={tmp_path / 'arch.json'}", f"weights={tmp_path / 'fp32.ckpt'}",
                                 "verify_samples=20", "data=digits", "export.calib_samples=8", "export.rounds=1",
                                 "export.warmup=1", "export.repeats=3", "export.min_time_s=0", *args])
    try:
        run(cfg)
        code = 0
    except SystemExit as e:
        code = e.code
    cap = capsys.readouterr()
    return code, cap.err, cap.out


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_export_tflite_verified_with_its_card(checkpoint, capsys, precision):
    """Conversion, verification on 20 digits, the prediction and the timing (30-60 s here)."""
    _runtime("litert_cpu_int8" if precision == "int8" else "litert_cpu")
    code, err, out = _export(checkpoint, capsys, "conf=litert_cpu", "format=tflite", f"precision={precision}")
    assert code == 0, err
    path = checkpoint / f"fp32.{precision}.tflite"
    rec = json.loads((checkpoint / f"fp32.{precision}.tflite.json").read_text())
    assert rec["file_bytes"] == path.stat().st_size and rec["verify"]["samples"] == 20
    if precision == "fp32":
        assert rec["verify"]["max_abs_diff"] < 1e-4 and "max |litert - torch|" in out
    else:
        assert rec["verify"]["top1_agreement"] >= 0.8 and rec["how"].startswith("ai-edge-quantizer full-integer")
    assert rec["predicted"]["target"] == ("litert_cpu_int8" if precision == "int8" else "litert_cpu")
    assert rec["measured"]["median_ms"] > 0  # device.name null: this CPU
    card = json.loads((checkpoint / f"fp32.{precision}.tflite.card.json").read_text())
    assert card["input"]["layout"] == "NHWC" and card["input"]["shape"] == [1, 16, 16, 1]
    assert card["preprocess"]["steps"][-1 if precision == "fp32" else -2].startswith("keep HWC")
    if precision == "int8":
        q = card["input"]["quantization"]
        assert card["input"]["dtype"] == "int8" and q["scale"] > 0 and "zero_point" in q
        assert card["preprocess"]["steps"][-1].startswith("quantize to int8")
        assert card["output"]["dtype"] == "int8" and "quantization" in card["output"]
    else:
        assert card["input"]["dtype"] == "float32" and "quantization" not in card["input"]
    assert "input:     1x16x16x1 NHWC" in out and f"fp32.{precision}.tflite.card.json" in out


# --------------------------------------------------------------------------------------------
# the device bundle


@pytest.mark.slow
def test_bundle_measured_and_rehearsed_imports_labelled(tmp_path):
    """Written here (.tflite), measured by measure_bundle.py with ai-edge-litert in a subprocess, rehearsed
    (rehearsal.json: imported only as a rehearsal), both imported (40 s here)."""
    _runtime("litert_cpu_int8")
    from nas.latency.bundle.roundtrip import BundleError, import_bundle, write_bundle
    from nas.latency.profile.profiler import calibration_archs
    from nas.space import load_space

    target = load_target("litert_cpu_int8")
    space = load_space("tiny")
    nets = calibration_archs(space, 2)
    out = tmp_path / "b"
    write_bundle(space.unique_blocks()[:1], target, out, networks={"calibration": nets[:1], "held_out": nets[1:]},
                 settings=ProfileSettings(warmup=1, repeats=3, min_time_s=0.0, max_spread=10.0, remeasure=0, rounds=1),
                 spaces=["tiny"], progress=False)
    man = json.loads((out / "manifest.json").read_text())
    assert man["runtime"] == "litert" and all(e["file"].endswith(".tflite") for e in man["blocks"] + man["networks"])
    for args in ([], ["--rehearse"]):
        run = subprocess.run([sys.executable, str(out / "measure_bundle.py"), *args], cwd=out, capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        assert "0 measurements left" in run.stdout and ("REHEARSAL: " in run.stdout) == bool(args)
    table, rep = import_bundle(out / "results.json", target)
    assert rep["complete"] and table.metadata["runtime"]["name"] == "litert"
    assert table.metadata["runtime"]["via"] == "python" and "rehearsal" not in table.metadata
    with pytest.raises(BundleError, match="is a rehearsal measured with litert XNNPACK.*allow_mismatch=true"):
        import_bundle(out / "rehearsal.json", target)
    table, _ = import_bundle(out / "rehearsal.json", target, allow_mismatch=True)
    assert table.metadata["rehearsal"]["target"] == "litert_cpu_int8" and table.metadata["rehearsal"]["measured_on"]


def test_a_qat_checkpoint_is_refused_as_tflite_with_the_fix():
    """Before any conversion (no LiteRT package needed): its int8 is a QDQ ONNX graph."""
    from torch import nn

    from nas.train import deploy_edge

    with pytest.raises(ValueError, match="litert-torch does not convert.*format=tflite precision=int8.*format=openvino"):
        deploy_edge._convert("tflite", nn.Identity(), (1, 8, 8), "int8", is_qat=True, calib=[])
