"""Rehearsing a device bundle here (``measure_bundle.py --rehearse``), the machine's own kind
(``--identify``), and the commands import refusals print, each run as printed."""

import json
import shlex
import sys
from pathlib import Path

import forked
import pytest
from old_code import old_source

from nas.latency.bundle.roundtrip import SCRIPTS
from nas.machine import hwnas_device

ROOT = Path(__file__).resolve().parents[1]
HERE = ("conf.device.name=null", "conf.device.cpu_flags=[]")
FAST = ("profile.repeats=3", "profile.min_time_s=0", "profile.warmup=1", "profile.rounds=1")
MICRO = ROOT / "tests" / "data" / "spaces" / "micro.yaml"  # a few blocks: a bundle of all of them in seconds


def _run(args, cwd):
    return forked.run(args, cwd=cwd, timeout=900)


def _cli(cwd, command):
    """Run a printed ``python -m nas...`` command as a user would (python is this interpreter)."""
    words = shlex.split(command)
    assert words[:2] == ["python", "-m"], command
    return _run([sys.executable, *words[1:]], cwd)


@pytest.mark.parametrize("model,smi,kind", [("NVIDIA Jetson AGX Orin Developer Kit", None, "jetson"),
                                            (None, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)", "gpu"),
                                            (None, None, "cpu")])
def test_kind_is_read_from_the_machine(monkeypatch, model, smi, kind):
    monkeypatch.setattr(hwnas_device, "read_text", lambda p: model if p == "/proc/device-tree/model" else None)
    monkeypatch.setattr(hwnas_device, "run_out", lambda cmd: smi)
    assert hwnas_device.machine_kind() == kind
    on_cpu = {"name": "onnxruntime", "provider": "CPUExecutionProvider"}
    assert hwnas_device.measured_kind(on_cpu) == "cpu"  # a CPU runtime measures the CPU, on any machine


def test_identify_reads_the_machine_not_the_bundle(tmp_path):
    """--identify on a Jetson bundle reports this machine's kind; the script before copied the bundle's."""
    man = {"schema": "hwnas.bundle", "schema_version": 2, "device_kind": "jetson"}
    (tmp_path / "manifest.json").write_text(json.dumps(man))
    for name, src in SCRIPTS.items():
        (tmp_path / name).write_text(src.read_text())
    (tmp_path / "old_measure_bundle.py").write_text(old_source("nas/latency/bundle_script.py"))
    new, old = (_run([sys.executable, f"{s}measure_bundle.py", ".", "--identify"], tmp_path) for s in ("", "old_"))
    assert new.returncode == 0 == old.returncode, new.stderr + old.stderr
    assert json.loads(new.stdout)["kind"] == hwnas_device.machine_kind()
    assert json.loads(old.stdout)["kind"] == "jetson"  # whatever this machine is


@pytest.fixture(scope="module")
def cpu_bundle(tmp_path_factory):
    """A small onnxruntime CPU bundle of this machine, measured."""
    d = tmp_path_factory.mktemp("refusals")
    r = _run([sys.executable, "-m", "nas.profile", "conf=cpu", *HERE, f"search_space={MICRO}", "calibration_networks=2",
              *FAST, "bundle=b", "progress=false", "limit=6"], d)
    assert r.returncode == 0, r.stderr
    m = _run([sys.executable, "b/measure_bundle.py", "b"], d)
    assert m.returncode == 0, m.stderr
    return d


def test_runtime_refusal_prints_a_command_that_works(cpu_bundle):
    d = cpu_bundle
    r = _run([sys.executable, "-m", "nas.profile", "conf=cpu", *HERE, "conf.runtime=tensorrt", "conf.provider=",
              f"search_space={MICRO}", "calibration_networks=2", "import_bundle=b/results.json", "out=t.json"], d)
    assert r.returncode == 2, r.stdout + r.stderr
    msg = r.stdout + r.stderr
    assert "runtime: measured with 'onnxruntime'" in msg
    fix = msg.split("whose runtime is 'onnxruntime': ", 1)[1].split(")")[0]
    assert "conf.runtime=onnxruntime" in fix and " runtime=" not in fix
    ok = _cli(d, fix)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "imported b/results.json into t.json" in ok.stdout


def test_device_refusal_prints_a_command_that_works(cpu_bundle):
    d = cpu_bundle
    r = _run([sys.executable, "-m", "nas.profile", "conf=cpu", "conf.device.name=Xeon", "conf.device.cpu_flags=[]",
              f"search_space={MICRO}", "calibration_networks=2", "import_bundle=b/results.json", "out=t2.json"], d)
    assert r.returncode == 2, r.stdout + r.stderr
    msg = r.stdout + r.stderr
    fix = msg.split("name it in the target: device.name: ", 1)[1].split(", or ", 1)[1].rsplit(")", 1)[0]
    assert "conf.device.name=" in fix
    ok = _cli(d, fix)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "imported b/results.json into t2.json" in ok.stdout


def test_provider_refusal_prints_a_command_that_works(cpu_bundle, tmp_path):
    d = cpu_bundle
    b2 = d / "b_cuda"
    b2.mkdir(exist_ok=True)
    res = json.loads((d / "b" / "results.json").read_text())
    res["runtime"]["provider"] = "CUDAExecutionProvider"  # as if measured with onnxruntime-gpu's CUDA provider
    (b2 / "results.json").write_text(json.dumps(res))
    (b2 / "manifest.json").write_text((d / "b" / "manifest.json").read_text())
    r = _run([sys.executable, "-m", "nas.profile", "conf=cpu", *HERE, f"search_space={MICRO}", "calibration_networks=2",
              "import_bundle=b_cuda/results.json", "out=t3.json"], d)
    assert r.returncode == 2, r.stdout + r.stderr
    fix = (r.stdout + r.stderr).split("`, or ", 1)[1].rsplit(")", 1)[0]
    assert "conf.provider=CUDAExecutionProvider" in fix
    ok = _cli(d, fix)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "imported b_cuda/results.json into t3.json" in ok.stdout


def _rehearse(d, target):
    w = _run([sys.executable, "-m", "nas.profile", f"conf={target}", f"search_space={MICRO}", "calibration_networks=2",
              "held_out=3", *FAST, f"bundle={target}", "progress=false"], d)
    assert w.returncode == 0, w.stderr
    r = _run([sys.executable, f"{target}/measure_bundle.py", target, "--rehearse"], d)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("REHEARSAL: ") and "onnxruntime" in r.stdout
    assert not (d / target / "results.json").exists()  # the device's results stay apart
    return r.stdout.strip().splitlines()[-1].strip()  # the import command it prints


@pytest.mark.slow
@pytest.mark.parametrize("target,precision", [("jetson", "fp32"), ("jetson_int8", "int8")])
def test_rehearsal_round_trip(tmp_path, target, precision):
    """fp16 (fp32 graphs run at fp32 here) and int8 (QDQ graphs) Jetson bundles: rehearsed with
    onnxruntime, refused as the target, imported as what they are, predicted and validated with
    every figure labelled a rehearsal on this machine."""
    d = tmp_path
    printed = _rehearse(d, target)
    if target == "jetson":  # fp16 refuses onnxruntime, naming the rehearsal; the command it prints works
        r = _run([sys.executable, f"{target}/measure_bundle.py", target, "--runtime", "onnxruntime"], d)
        assert r.returncode == 1 and r.stderr.strip().endswith("python3 measure_bundle.py --rehearse"), r.stderr
        again = _run([sys.executable, "measure_bundle.py", "--rehearse"], d / target)  # as printed, in the bundle
        assert again.returncode == 0 and "0 measurements left" in again.stdout, again.stderr
    res = json.loads((d / target / "rehearsal.json").read_text())
    assert res["rehearsal"]["target"] == target and res["precision"] == precision
    assert res["device"]["kind"] == "cpu" and res["runtime"]["provider"] == "CPUExecutionProvider"
    ident = json.loads(_run([sys.executable, f"{target}/measure_bundle.py", target, "--identify"], d).stdout)
    assert ident["kind"] == "cpu"  # this machine, not the bundle's "jetson"

    plain = printed.replace(" allow_mismatch=true", "").split(" conf.table=")[0]
    refused = _cli(d, plain)
    assert refused.returncode == 2 and "is a rehearsal measured with onnxruntime" in refused.stdout + refused.stderr
    fix = (refused.stdout + refused.stderr).split("into a table of its own: ", 1)[1].strip()
    assert fix == printed
    imported = _cli(d, fix)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert f"REHEARSAL of {target}" in imported.stdout
    table = json.loads((d / target / "rehearsal_table.json").read_text())
    assert table["metadata"]["rehearsal"]["target"] == target and table["metadata"]["device"]["kind"] == "cpu"

    man = json.loads((d / target / "manifest.json").read_text())
    (d / "arch.json").write_text(json.dumps(next(n["arch"] for n in man["networks"] if n["role"] == "held_out")))
    over = (f"conf={target}", f"conf.table={target}/rehearsal_table.json", "allow_mismatch=true")
    pred = _run([sys.executable, "-m", "nas.predict", *over, "arch=arch.json"], d)
    assert pred.returncode == 0 and f"REHEARSAL of {target}" in pred.stdout, pred.stdout + pred.stderr
    val = _run([sys.executable, "-m", "nas.validate", *over, f"bundle={target}/rehearsal.json", "out=v.json"], d)
    assert val.returncode == 0, val.stdout + val.stderr
    assert f"in a REHEARSAL of {target}" in val.stdout
    report = json.loads((d / "v.json").read_text())
    assert report["latency_source"] == "rehearsal" and report["latency_how"].startswith(f"REHEARSAL of {target}")
    # the table holds every block of its own space (micro): nothing counted against spaces it was not made for
    assert table["metadata"]["spaces"] == [str(MICRO)] and "budget" not in report and "blocks of the spaces" not in val.stdout
