"""The ExecuTorch and OpenVINO runtimes: registered, one-line errors without their packages, outputs
matching torch (fp32 close, int8 within a loose tolerance) and a positive median from the measuring loop."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest
import torch

from nas.arch import BlockKey, ConvBlock, MBConvBlock
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
    get_runtime(load_target("cpu"))  # the first lookup registers them
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
        get_runtime(t.replace(device=dataclasses.replace(t.device, kind="gpu")))
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


def test_openvino_runs_a_qdq_graph_as_int8():
    """The reader a QAT checkpoint's export goes through: OpenVINO runs onnxruntime-style QDQ."""
    pytest.importorskip("openvino")
    from nas.export.edge import openvino_model
    from nas.export.onnx import export_onnx
    from nas.export.qdq import quantize_qdq

    rt = get_runtime(load_target("openvino_cpu"))
    module = build_layer(MBCONV).eval()
    x = rt._input(MBCONV.in_shape)
    qdq = quantize_qdq(export_onnx(module, x), [c.numpy() for c in rt.calibration(MBCONV.in_shape)])
    run = rt.runner_for_model(openvino_model(None, x, precision="int8", onnx=qdq), MBCONV.in_shape)
    run()
    with torch.no_grad():
        assert _rel_err(run.output(), module(x).numpy()) < 0.15


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


# --------------------------------------------------------------------------------------------
# nas.export format=pte|openvino


@pytest.fixture
def checkpoint(tmp_path):
    """A float checkpoint (a bare state dict) of a tiny digits network and its Arch file."""
    from nas.builder import build
    from nas.space import load_space

    arch = load_space("tiny").random(4).with_head(in_chans=1, num_classes=10).with_resolution(16)
    (tmp_path / "arch.json").write_text(__import__("json").dumps(arch.to_dict()))
    torch.manual_seed(0)
    torch.save(build(arch).state_dict(), tmp_path / "fp32.ckpt")
    return tmp_path


def _export(tmp_path, capsys, *args):
    """``nas.export`` in process on the checkpoint; (exit code, stderr, stdout)."""
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


def _check_export(tmp_path, capsys, fmt: str, precision: str, conf: str) -> dict:
    import json

    ext = {"pte": ".pte", "openvino": ".xml"}[fmt]
    code, err, out = _export(tmp_path, capsys, f"conf={conf}", f"format={fmt}", f"precision={precision}")
    assert code == 0, err
    path = tmp_path / f"fp32.{precision}{ext}"
    rec = json.loads((tmp_path / f"fp32.{precision}{ext}.json").read_text())  # beside an ONNX export's .json
    files = [path] + ([path.with_suffix(".bin")] if fmt == "openvino" else [])
    assert rec["file_bytes"] == sum(p.stat().st_size for p in files) and rec["verify"]["samples"] == 20
    if precision == "fp32":
        assert rec["verify"]["max_abs_diff"] < 1e-4 and f"max |{rec['runtime']} - torch|" in out
    else:
        assert rec["verify"]["top1_agreement"] >= 0.8 and "top-1 agreement" in out
    sibling = conf + ("_int8" if precision == "int8" else "")  # an fp32 target predicts int8 with its sibling
    assert rec["predicted"]["target"] == sibling and rec["measured"]["median_ms"] > 0  # device.name null: this CPU
    return rec


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_export_openvino_ir_verified(checkpoint, capsys, precision):
    """About 35 s each here (digits, conversion, verification, the prediction and the timing)."""
    pytest.importorskip("openvino")
    if precision == "int8":
        pytest.importorskip("nncf")
    rec = _check_export(checkpoint, capsys, "openvino", precision, "openvino_cpu")
    assert rec["how"] == "fp32" if precision == "fp32" else rec["how"].startswith("NNCF")


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_export_pte_verified(checkpoint, capsys, precision):
    """Lowering a whole network to XNNPACK takes 30-90 s here."""
    pytest.importorskip("executorch.runtime")
    _check_export(checkpoint, capsys, "pte", precision, "executorch_cpu")


def test_export_format_errors_are_one_line(checkpoint, capsys):
    code, err, _ = _export(checkpoint, capsys, "format=coreml")
    assert code != 0 and "format must be onnx, pte, openvino or tflite, got 'coreml'" in err
    pytest.importorskip("openvino")
    code, err, _ = _export(checkpoint, capsys, "format=openvino", f"out={checkpoint / 'm.onnx'}")
    assert code != 0 and "format=openvino writes a .xml file" in err
    assert not (checkpoint / "m.onnx").exists()


@pytest.mark.slow
def test_export_qat_checkpoint(tmp_path, capsys):
    """A QAT checkpoint: OpenVINO IR from its own QDQ graph; ``.pte`` refused with the fix (40 s here)."""
    import dataclasses
    import json

    pytest.importorskip("openvino")
    from nas.builder import build
    from nas.compress.qat import calibrate, prepare_qat
    from nas.compress.quant_settings import QuantSettings
    from nas.fit.checkpoint import CKPT_FORMAT, CKPT_VERSION, save_checkpoint
    from nas.space import load_space

    arch = load_space("tiny").random(4).with_head(in_chans=1, num_classes=10).with_resolution(16)
    (tmp_path / "arch.json").write_text(json.dumps(arch.to_dict()))
    torch.manual_seed(0)
    m = build(arch).train()
    with torch.no_grad():
        for _ in range(3):  # non-trivial BN statistics, as after training
            m(torch.randn(8, 1, 16, 16))
    q = prepare_qat(m.eval(), QuantSettings())
    calibrate(q, [torch.randn(8, 1, 16, 16) for _ in range(4)])
    save_checkpoint(tmp_path / "fp32.ckpt", {"format": CKPT_FORMAT, "version": CKPT_VERSION, "arch": arch.to_dict(),
                                             "qat": dataclasses.asdict(q.settings), "model": q.eval().state_dict()})
    code, err, out = _export(tmp_path, capsys, "conf=openvino_cpu_int8", "format=openvino", "precision=int8")
    assert code == 0, err
    rec = json.loads((tmp_path / "fp32.int8.xml.json").read_text())
    assert rec["how"] == "QAT QDQ read by OpenVINO" and rec["verify"]["against"] == "the fake-quant torch model"
    assert rec["verify"]["top1_agreement"] >= 0.8
    code, err, _ = _export(tmp_path, capsys, "conf=executorch_cpu_int8", "format=pte", "precision=int8")
    assert code != 0 and "ExecuTorch does not read" in err and "format=openvino" in err
    assert not (tmp_path / "fp32.int8.pte").exists()


@pytest.mark.parametrize("name", ["executorch_cpu", "executorch_cpu_int8", "openvino_cpu", "openvino_cpu_int8"])
def test_shipped_table_on_another_cpu_warns_and_profiles_into_the_users_folder(name, tmp_path, monkeypatch):
    """These targets name no device: the shipped table is the Xeon's.  On another processor it warns
    (naming the same target's profile command) and nas.profile measures into the user's folder, read
    before the shipped table; on the table's own processor it is used as it is."""
    from nas.latency.predict.load import elsewhere_warning
    from nas.latency.profile.workflow import default_out
    from nas.latency.tables.table import TABLES_DIR, LatencyTable, resolve_table_path

    monkeypatch.setenv("HWNAS_HOME", str(tmp_path))
    target = load_target(name)
    path = resolve_table_path(target.table)
    if path.parent != TABLES_DIR or not path.is_file():
        pytest.skip(f"no shipped {target.table}")
    table = LatencyTable.load(path)
    own = dict(table.metadata["device"])
    other = {**own, "name": "AMD EPYC 9B45", "cpu": "AMD EPYC 9B45", "cpu_family": "26", "cpu_model": "2"}
    warning = elsewhere_warning(target, table, here=other)
    assert "ANOTHER PROCESSOR" in warning and f"python -m nas.profile conf={name}" in warning
    assert elsewhere_warning(target, table, here=own) is None
    assert default_out(target, here=other) == tmp_path / "latency_tables" / path.name
    assert default_out(target, here=own) == path
