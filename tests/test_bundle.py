"""Device bundles: written here, measured by the standalone script (numpy + one runtime, no torch),
imported by construction into a calibrated table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import forked
import pytest
from old_code import old_source

from benchmarks.bundle import _bundle_differences, no_torch_python, round_trip
from nas.latency.bundle.roundtrip import SCRIPTS, BundleError, bundle_networks, import_bundle, write_bundle
from nas.latency.profile.profiler import calibration_archs, calibration_order, pruned_archs
from nas.latency.runtimes.loop import ProfileSettings
from nas.latency.tables.table import LatencyTable
from nas.space import load_space
from nas.target import Target

FAST = ProfileSettings(warmup=1, repeats=3, min_time_s=0.0, max_spread=10.0, remeasure=0, rounds=2)
CPU_FIELDS = {"name": "cpu", "runtime": "onnxruntime", "provider": "CPUExecutionProvider", "precision": "fp32",
              "batch": 1, "threads": 1, "latency_budget_ms": 10.0,
              "device": {"name": None, "kind": "cpu", "peak_gflops": 50.0, "mem_bandwidth_gbs": 10.0}}
CPU = Target.from_dict(CPU_FIELDS)
CMD = "python -m nas.profile conf=mine search_space=tiny import_bundle=b/results.json"


def _measure(bundle: Path, *args: str, python: str = sys.executable) -> subprocess.CompletedProcess:
    return forked.run([python, str(bundle / "measure_bundle.py"), *args], cwd=bundle, timeout=600)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A bundle of 4 blocks, 2 calibration and 1 held-out network, measured in two runs (the first
    stopped by --limit: resumable)."""
    space = load_space("tiny")
    out = tmp_path_factory.mktemp("bundle") / "b"
    nets = calibration_archs(space, 3)
    write_bundle(space.unique_blocks()[:4], CPU, out, networks={"calibration": nets[:2], "held_out": nets[2:]},
                 settings=FAST, spaces=["tiny"], import_command=CMD, progress=False)
    first = _measure(out, "--limit", "5")
    assert first.returncode == 0, first.stderr
    assert "14 measurements left, 5 now" in first.stdout and "9 measurements left; run again" in first.stdout
    again = _measure(out)
    assert again.returncode == 0, again.stderr
    assert "9 measurements left, 9 now" in again.stdout and CMD in again.stdout  # the import command to run
    return out, nets


def test_manifest_and_script_are_standalone(measured):
    out, nets = measured
    man = json.loads((out / "manifest.json").read_text())
    assert man["schema_version"] == 2 and man["runtime"] == "onnxruntime" and man["settings"]["rounds"] == 2
    assert [n["role"] for n in man["networks"]] == ["calibration", "calibration", "held_out"]
    assert all((out / n["file"]).is_file() for n in man["blocks"] + man["networks"])
    for script in SCRIPTS:
        src = (out / script).read_text()
        # hwnas_trt.py imports hwnas_cuda.py beside it; the package's copy only where that is missing (in hwnas)
        src = src.replace("    from nas.latency.runtimes.hwnas_cuda import Cudart, GpuTimer, time_runs, timing_stats\n", "")
        assert "import torch" not in src and "from nas" not in src and "import nas" not in src


def test_import_makes_a_table_with_calibration_networks(measured):
    out, nets = measured
    table, rep = import_bundle(out / "results.json", CPU, command=CMD)
    assert rep["complete"] and rep["measured"] == {"blocks": "4/4", "networks": "2/2", "held_out": "1/1"}
    assert set(table.networks) == set(nets[:2]) and len(table) == 4  # held-out networks stay out of the table
    assert all(e.rounds == 2 for e in [*table.entries.values(), *table.networks.values()])
    meta = table.metadata
    assert meta["source"] == "measured" and meta["measurement"]["via"] == "device bundle"
    assert meta["runtime"]["name"] == "onnxruntime" and meta["call_overhead_ms"] > 0
    assert meta["device"]["name"] and "uncalibrated" not in table.describe()
    held = bundle_networks(out / "results.json")
    assert [a for a, _ in held] == nets[2:] and held[0][1] > 0
    p = table.save(out.parent / "t.json")
    assert LatencyTable.load(p).networks == table.networks



def _fail_first_network(res, man):
    """The results as measure_bundle.py leaves them when the runtime could not run the first calibration network."""
    f = man["networks"][0]["file"]
    res["entries"].pop(f)
    res["failed"] = {f: {"label": "tiny", "round": 1, "error": "RuntimeError: failed to create XNNPACK runtimeNode "
                                                               "number 36 (TfLiteXNNPackDelegate) failed to prepare."}}


def test_a_graph_the_device_could_not_run_is_named_and_not_left_to_measure(measured, tmp_path):
    out, nets = measured
    table, rep = import_bundle(_edited(out, tmp_path, _fail_first_network), CPU, command=CMD)
    assert rep["complete"] and rep["left"] == {} and rep["measured"]["networks"] == "1/2"
    assert [x["error"] for x in rep["failed"]] == ["RuntimeError: failed to create XNNPACK runtimeNode number 36 "
                                                   "(TfLiteXNNPackDelegate) failed to prepare."]
    assert set(table.networks) == {nets[1]}

def _edited(out: Path, tmp_path: Path, edit) -> Path:
    """A copy of the measured bundle's manifest + results with ``edit(results, manifest)`` applied."""
    d = tmp_path / "copy"
    d.mkdir(parents=True)
    res, man = (json.loads((out / f).read_text()) for f in ("results.json", "manifest.json"))
    edit(res, man)
    (d / "results.json").write_text(json.dumps(res))
    (d / "manifest.json").write_text(json.dumps(man))
    return d / "results.json"


@pytest.mark.parametrize("edit, target, expect", [
    (lambda r, m: r["runtime"].update(provider="CUDAExecutionProvider"), CPU,
     "provider: measured with 'CUDAExecutionProvider'.*measure_bundle.py --provider CPUExecutionProvider"),
    (lambda r, m: None, Target.from_dict({**CPU_FIELDS, "runtime": "tensorrt", "provider": ""}),
     r"runtime: measured with 'onnxruntime', target 'cpu' names 'tensorrt'.*conf\.runtime=onnxruntime"),
    (lambda r, m: None, Target.from_dict({**CPU_FIELDS, "precision": "int8"}), "precision: measured at 'fp32', target 'cpu' is 'int8'"),
    (lambda r, m: None, Target.from_dict({**CPU_FIELDS, "threads": 4}), "threads: measured with 1.*measure_bundle.py --threads 4"),
    (lambda r, m: r["device"].update(name="Raspberry Pi 5"), Target.from_dict({**CPU_FIELDS, "device": {**CPU_FIELDS["device"], "name": "Xeon"}}),
     "device: the results were measured on 'Raspberry Pi 5', not 'Xeon'.*\"conf.device.name='Raspberry Pi 5'\""),
])
def test_import_refuses_what_the_target_does_not_name(measured, tmp_path, edit, target, expect):
    out, _ = measured
    res = _edited(out, tmp_path, edit)
    with pytest.raises(BundleError, match=expect):
        import_bundle(res, target, command=CMD)
    # allowed, it records what was measured, never what the target names
    table, rep = import_bundle(res, target, allow_mismatch=True, command=CMD)
    assert rep["mismatch"] and table.metadata["precision"] == "fp32"
    assert table.metadata["runtime"]["name"] == "onnxruntime"


@pytest.mark.parametrize("edit, expect", [
    (lambda r, m: r.update(bundle_id="other"), "results belong to bundle 'other'"),
    (lambda r, m: m.update(schema_version=1), "bundle format 1 .*write the bundle again"),
    (lambda r, m: m["blocks"][0]["key"].update(kind="no_such_kind"), "cannot read"),
    (lambda r, m: r["entries"].update({"blocks/x.onnx": {}}), "not in the manifest"),
])
def test_import_refuses_foreign_or_old_bundles(measured, tmp_path, edit, expect):
    out, _ = measured
    with pytest.raises(BundleError, match=expect):
        import_bundle(_edited(out, tmp_path, edit), CPU)


def test_import_into_a_table_of_another_device_is_refused(measured):
    out, _ = measured
    table, _ = import_bundle(out / "results.json", CPU)
    table.metadata["device"] = {**table.metadata["device"], "name": "another CPU"}
    with pytest.raises(BundleError, match="measured on device .* the table on 'another CPU'"):
        import_bundle(out / "results.json", CPU, table)


def test_bundle_for_a_torch_runtime_is_refused(tmp_path):
    with pytest.raises(BundleError, match="runs 'torch'; a bundle holds graphs for onnxruntime, tensorrt, executorch, openvino"):
        write_bundle([], Target.from_dict({**CPU_FIELDS, "runtime": "torch"}), tmp_path / "b", progress=False)
    assert not (tmp_path / "b").exists()


def test_bundle_with_results_is_not_overwritten(measured):
    out, _ = measured
    before = (out / "manifest.json").read_text()
    with pytest.raises(BundleError, match="holds measurements .* import them first"):
        write_bundle([], CPU, out, progress=False)
    assert (out / "manifest.json").read_text() == before


def test_script_errors_are_one_line(measured, tmp_path):
    out, _ = measured
    r = _measure(out, "--runtime", "trtexec")
    assert r.returncode == 1 and r.stderr.strip().startswith("error: trtexec not found")
    assert len(r.stderr.strip().splitlines()) == 1
    r = _measure(out, "--provider", "CUDAExecutionProvider")
    assert r.returncode == 1 and "pip install onnxruntime-gpu" in r.stderr and "Traceback" not in r.stderr
    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({**json.loads((out / "manifest.json").read_text()),
                                                     "bundle_id": "x"}))
    (other / "results.json").write_text((out / "results.json").read_text())
    r = subprocess.run([sys.executable, str(out / "measure_bundle.py"), str(other)], capture_output=True, text=True)
    assert r.returncode == 1 and "belongs to another bundle" in r.stderr
    r = _measure(out, "--identify")
    assert r.returncode == 0 and json.loads(r.stdout)["kind"] == "cpu"


def test_tensorrt_int8_bundle_is_symmetric(tmp_path):
    """An int8 bundle for TensorRT holds QDQ graphs TensorRT consumes: int8, zero point 0."""
    import onnx
    from onnx import numpy_helper

    space = load_space("tiny")
    t = Target.from_dict({**CPU_FIELDS, "runtime": "tensorrt", "provider": "", "precision": "int8", "device": {**CPU_FIELDS["device"], "kind": "gpu"}})
    write_bundle(space.unique_blocks()[5:7], t, tmp_path / "b", networks={"calibration": calibration_archs(space, 1)},
                 settings=FAST, progress=False)
    files = sorted((tmp_path / "b").glob("*/*.onnx"))
    assert len(files) == 4
    for f in files:
        if f.name.startswith("_overhead"):
            continue
        m = onnx.load(f)
        onnx.checker.check_model(m)
        inits = {i.name: i for i in m.graph.initializer}
        q = [n for n in m.graph.node if n.op_type == "QuantizeLinear"]
        assert q, f
        for n in q:
            zp = inits[n.input[2]]
            assert zp.data_type == onnx.TensorProto.INT8 and not numpy_helper.to_array(zp).any(), f


def test_import_command_keeps_the_users_overrides(tmp_path):
    from nas.latency.profile.workflow import import_command

    typed = "python -m nas.profile conf=jetson \"conf.device.name=Jetson Orin Nano\" bundle=b held_out=3 budget_min=2"
    got = import_command(typed, Target.from_dict({**CPU_FIELDS, "name": "jetson"}), tmp_path / "b")
    assert got == f"python -m nas.profile conf=jetson \"conf.device.name=Jetson Orin Nano\" " \
                  f"import_bundle={tmp_path / 'b'}/results.json"


@pytest.mark.slow
def test_no_torch_round_trip_gives_a_calibrated_predictor(tmp_path):
    """Bundle here -> measured by a Python without torch -> import -> a predictor calibrated on the
    bundle's networks, scored on held-out networks the same script measured.  How close it gets is a
    benchmark figure (python -m benchmarks bundle, docs/benchmarks.md), not asserted here: timings on a
    shared machine move; the bound below only catches a broken round trip (wrong graphs, shapes, units)."""

    settings = ProfileSettings(warmup=3, repeats=10, min_time_s=0.0, max_spread=0.5, remeasure=0, rounds=1)
    res = round_trip(tmp_path, target=CPU, spaces="tiny", settings=settings,
                     calibration_networks=20, pruned_networks=5, held_out=20)
    assert res["calibrated_on"] == 25 and res["held_out"] == 20 and res["blocks"] > 250
    assert res["score"]["mape"] < 50 and res["score"]["kendall_tau"] > 0.3, res


@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino"])
def test_measuring_python_has_the_runtime_and_no_torch(tmp_path, runtime):
    """python -m benchmarks bundle measures onnxruntime and OpenVINO bundles with a Python that has numpy and the
    runtime only; ExecuTorch's (whose Python runtime imports torch) with this one."""
    pytest.importorskip(runtime)

    py = no_torch_python(tmp_path / "venv", runtime)
    assert py != sys.executable
    r = subprocess.run([py, "-c", f"import {runtime}, sys; print('torch' in sys.modules)"], capture_output=True,
                       text=True)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr
    assert no_torch_python(tmp_path / "venv", runtime) == py  # a second call reuses the venv
    assert no_torch_python(tmp_path / "other", "executorch") == sys.executable
    with pytest.raises(ValueError, match="no measuring Python for runtime 'tflite'"):
        no_torch_python(tmp_path / "x", "tflite")


def test_targets_accept_their_own_measurements():
    """trtexec and TensorRT's Python API are both the runtime 'tensorrt' (the script records 'via')."""
    from nas.latency.bundle.roundtrip import _differences

    t = Target.from_dict({**CPU_FIELDS, "runtime": "tensorrt", "provider": "", "precision": "fp16",
                          "device": {**CPU_FIELDS["device"], "kind": "jetson", "name": "Jetson AGX Orin"}})
    dev = {"kind": "jetson", "name": "NVIDIA Jetson AGX Orin Developer Kit", "cpu_flags": []}
    for via in ("trtexec", "python"):
        res = {"runtime": {"name": "tensorrt", "provider": "", "via": via}, "precision": "fp16", "batch": 1,
               "threads": 1, "device": dev}
        assert _differences(res, {"target": "jetson"}, t, None) == []


def test_budgeted_measuring_goes_calibration_networks_first(tmp_path):
    """A budget spends its minutes as nas.profile's does: calibration networks, then the most used blocks."""
    space = load_space("tiny")
    out = tmp_path / "b"
    write_bundle(space.unique_blocks()[:3], CPU, out, networks={"calibration": calibration_archs(space, 2)},
                 settings=FAST, budget_min=1e-6, progress=False)
    r = _measure(out)  # the bundle's budget: spent after the first measurement
    assert r.returncode == 0, r.stderr
    assert "budget of" in r.stdout and "run again" in r.stdout
    res = json.loads((out / "results.json").read_text())
    assert list(res["entries"]) and all(f.startswith("networks/") for f in res["entries"])
    assert not res["complete"]
    table, rep = import_bundle(out, CPU)
    assert not rep["complete"] and rep["left"]["blocks"] == 3 and len(table.networks) == len(res["entries"])
    r = _measure(out, "--budget-min", "0")
    assert r.returncode == 1 and "--budget-min 0" in r.stderr


BEFORE_ORDER = "db7cf55"  # the script that measured every calibration network before any pruned one


def _first_round(bundle: Path, script: str, *args: str) -> list[str]:
    """The files ``script`` measures, in order, from a bundle with nothing measured yet (results.json
    keeps them in the order measured); results.json is removed again."""
    r = forked.run([sys.executable, str(bundle / script), *args], cwd=bundle, timeout=600)
    assert r.returncode == 0, r.stderr
    res = bundle / "results.json"
    files = list(json.loads(res.read_text())["entries"])
    res.unlink()
    return files


def test_budget_measures_pruned_networks_in_the_calibration_order(tmp_path):
    """Under a budget the script measures the calibration and pruned networks in nas.profile's order
    (``calibration_order(pruned=)``, the manifest's ``order``), then the most used blocks, then the
    held-out networks.  The script before measured the pruned networks after every block; a manifest
    written without the order is measured in that order still."""
    space = load_space("tiny")
    nets, pruned = calibration_archs(space, 3), pruned_archs(space, 2)
    order = calibration_order([space], 2, None, pruned=pruned)
    assert set(order) == {*nets[:2], *pruned} and order[0] in pruned  # the smallest: a pruned one
    blocks = space.unique_blocks()[:2]
    out = tmp_path / "b"
    networks = {"calibration": nets[:2], "pruned": pruned, "held_out": nets[2:]}
    with pytest.raises(ValueError, match="order must list the 4 calibration and pruned networks.* 1 of them are "
                                         "missing"):
        write_bundle(blocks, CPU, out, networks=networks, order=order[:-1], progress=False)
    write_bundle(blocks, CPU, out, networks=networks, settings=FAST, order=order, progress=False)
    (out / "old_measure_bundle.py").write_text(old_source("nas/latency/bundle_script.py", at=BEFORE_ORDER))
    net = {a: f"networks/{a.digest()}.onnx" for a in nets + pruned}
    blk = [f"blocks/{k.digest()}.onnx" for k in blocks]
    first = ["--budget-min", "60", "--limit", "7"]  # round 1 of the 7 graphs, in the budget's order
    assert _first_round(out, "measure_bundle.py", *first) == [net[a] for a in order] + blk + [net[nets[2]]]
    before = [net[a] for a in nets[:2]] + blk + [net[a] for a in pruned] + [net[nets[2]]]
    assert _first_round(out, "old_measure_bundle.py", *first) == before
    man = json.loads((out / "manifest.json").read_text())
    assert sorted(n.get("order", -1) for n in man["networks"]) == [-1, 0, 1, 2, 3]
    for n in man["networks"]:
        n.pop("order", None)
    (out / "manifest.json").write_text(json.dumps(man))  # as written before the order
    assert _first_round(out, "measure_bundle.py", *first) == before


def test_bundle_takes_the_profiles_calibration_order(tmp_path, monkeypatch):
    """nas.profile bundle= writes the calibration and pruned networks in the order calibration_order
    gives with the pruned networks (the order a profile here measures them in)."""
    from nas.latency.profile import workflow as profile_workflow

    calls, written = [], {}

    def spy(*args, **kwargs):
        calls.append((kwargs.get("pruned"), calibration_order(*args, **kwargs)))
        return calls[-1][1]

    def write(keys, target, out, **kwargs):
        written.update(kwargs)
        return Path(out) / "manifest.json"

    monkeypatch.setattr(profile_workflow, "calibration_order", spy)
    monkeypatch.setattr(profile_workflow, "write_bundle", write)
    profile_workflow.profile_target(CPU, spaces="tiny", bundle=tmp_path / "b", calibration_networks=3,
                                    pruned_networks=2, progress=False, say=lambda line: None)
    (pruned, order), = calls
    assert len(pruned) == 2 and written["networks"]["pruned"] == pruned and written["order"] == order
    assert set(order) == {*written["networks"]["calibration"], *pruned} and len(order) == 5


def test_import_for_other_spaces_is_refused(measured, tmp_path):
    from nas.latency.profile.workflow import profile_target

    out, _ = measured
    with pytest.raises(BundleError, match=r"written for spaces \['tiny'\], this command names \['mbv3'\]"):
        profile_target(CPU, spaces="mbv3", import_bundle=out, out=tmp_path / "t.json", progress=False)
    assert not (tmp_path / "t.json").exists()
    rep = profile_target(CPU, spaces="tiny", import_bundle=out, out=tmp_path / "t.json", calibration_networks=1,
                         pruned_networks=0, progress=False, say=lambda line: None)
    assert rep["complete"] and rep["covered"] == 4 and rep["blocks_of_spaces"] > 4


def test_validate_on_the_bundles_held_out_networks(measured, tmp_path):
    """nas.validate bundle=: the table's predictor scored on the networks the device measured, nothing measured here."""
    from nas.latency.profile.validate import validate_target

    out, nets = measured
    table, _ = import_bundle(out, CPU)
    path = table.save(tmp_path / "t.json")
    target = Target.from_dict({**CPU_FIELDS, "table": str(path)})
    report = validate_target(target, bundle=out / "results.json", out=tmp_path / "v" / "report.json",
                             say=lambda line: None)
    assert report["methods"]["predictor"]["n"] == 1 and (tmp_path / "v" / "report.json").is_file()
    other = _edited(out, tmp_path, lambda r, m: r.update(threads=4))
    with pytest.raises(ValueError, match="measured with threads 4 vs the table's 1"):
        validate_target(target, bundle=other, out=tmp_path / "v2.json", say=lambda line: None)
    empty = _edited(out, tmp_path / "e", lambda r, m: [r["entries"].pop(n["file"]) for n in m["networks"]
                                                      if n["role"] == "held_out"])
    with pytest.raises(ValueError, match="no measured held-out networks: write the bundle with held_out=N"):
        validate_target(target, bundle=empty, out=tmp_path / "v3.json", say=lambda line: None)


def test_bench_bundle_reuses_only_the_bundle_it_was_asked_for(tmp_path):
    """--work with a bundle already written: its target, settings and network counts must be the ones asked for."""

    settings = ProfileSettings()
    nets = [{"role": r} for r in ["calibration"] * 2 + ["held_out"]]
    man = {"target": "cpu", "networks": nets, "settings": {k: getattr(settings, k) for k in
                                                            ("warmup", "repeats", "min_time_s", "max_spread",
                                                             "remeasure", "rounds")}}
    (tmp_path / "manifest.json").write_text(json.dumps(man))
    want = {"calibration": 2, "pruned": 0, "held_out": 1}
    assert _bundle_differences(tmp_path, CPU, settings, want) == []
    got = _bundle_differences(tmp_path, Target.from_dict({**CPU_FIELDS, "name": "other"}), ProfileSettings(rounds=1),
                              {**want, "held_out": 3})
    assert got == ["held_out networks 1, not 3", "target 'cpu', not 'other'", f"rounds={settings.rounds}, not 1"]
