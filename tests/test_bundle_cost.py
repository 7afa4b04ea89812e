"""What a device bundle costs, said before it is written: its size (estimated from the graphs'
parameters, checked here against written files), the device's measuring time (TensorRT's engine
builds added on a TensorRT target), a question or a refusal above ``bundle_max_gb``, and the
README.md every bundle carries."""

import json
import re
import subprocess
import sys
from pathlib import Path

import forked
import pytest

from nas.latency.bundle.files import BundleCost, bundle_cost, graph_bytes
from nas.latency.bundle.roundtrip import write_bundle
from nas.latency.profile import workflow as profile_workflow
from nas.latency.profile.profiler import calibration_archs
from nas.latency.runtimes.loop import ProfileSettings
from nas.space import load_space
from nas.target import Target

FAST = ProfileSettings(warmup=1, repeats=3, min_time_s=0.0, max_spread=10.0, remeasure=0, rounds=2)
DEV = {"name": None, "kind": "cpu", "peak_gflops": 50.0, "mem_bandwidth_gbs": 10.0}
CPU = {"name": "cpu", "runtime": "onnxruntime", "provider": "CPUExecutionProvider", "precision": "fp32", "batch": 1,
       "threads": 1, "latency_budget_ms": 10.0, "device": DEV}
JETSON = {**CPU, "name": "jet", "runtime": "tensorrt", "provider": "", "precision": "fp16",
          "device": {**DEV, "kind": "jetson", "name": "Jetson AGX Orin"}}


@pytest.mark.parametrize("fields", [CPU, {**CPU, "name": "cpu_int8", "precision": "int8"},
                                    {**JETSON, "name": "jet_int8", "precision": "int8"}])
def test_estimated_sizes_match_written_files(tmp_path, fields):
    """The estimate of a bundle's files against the files written: the total within 15%."""
    target = Target.from_dict(fields)
    space = load_space("tiny")
    keys = space.unique_blocks()[::32]
    nets = calibration_archs(space, 3)
    out = tmp_path / "b"
    write_bundle(keys, target, out, networks={"calibration": nets}, settings=FAST, progress=False)
    man = json.loads((out / "manifest.json").read_text())
    written = sum((out / g["file"]).stat().st_size for g in man["blocks"] + man["networks"])
    est = bundle_cost(keys, target, {"calibration": nets}, FAST, lambda x, kind: 0.0)
    assert est.bytes == sum(graph_bytes(x, target) for x in [*keys, *nets])
    assert abs(est.bytes / written - 1) < 0.15, (est.bytes, written)
    big = max(man["blocks"] + man["networks"], key=lambda g: (out / g["file"]).stat().st_size)
    assert abs(est.largest_bytes / (out / big["file"]).stat().st_size - 1) < 0.25  # a small graph: its Q/DQ nodes weigh


def test_tensorrt_adds_engine_builds_to_the_time():
    space = load_space("tiny")
    keys, nets = space.unique_blocks()[:10], {"calibration": calibration_archs(space, 2)}
    seconds = lambda x, kind: 0.5  # noqa: E731
    cpu = bundle_cost(keys, Target.from_dict(CPU), nets, FAST, seconds)
    trt = bundle_cost(keys, Target.from_dict(JETSON), nets, FAST, seconds)
    assert cpu.measure_s == trt.measure_s == 2 * 12 * 0.5 and cpu.build_s == 0
    layers = sum(len(a.keys()) for a in nets["calibration"])
    assert trt.build_s == pytest.approx(2 * (12 * 2.0 + 0.5 * (10 + layers)))
    assert "TensorRT engine builds" in trt.lines()[1] and "TensorRT" not in cpu.lines()[1]


def _decide(tmp_path, monkeypatch, **kw):
    """profile_target's bundle branch up to writing: the lines said and whether (and with what) it writes."""
    written, said = [], []
    monkeypatch.setattr(profile_workflow, "write_bundle",
                        lambda keys, target, out, **k: written.append(k["cost"]) or Path(out) / "manifest.json")
    profile_workflow.profile_target(CPU, spaces="tiny", bundle=tmp_path / "b", calibration_networks=2,
                                    pruned_networks=1, say=said.append, **kw)
    return said, written


def test_a_bundle_over_the_limit_is_refused_without_anyone_to_ask(tmp_path, monkeypatch):
    with pytest.raises(ValueError) as e:
        _decide(tmp_path, monkeypatch, bundle_max_gb=1e-6)
    msg = str(e.value)
    assert "\n" not in msg and "over bundle_max_gb=1e-06" in msg and "yes=true" in msg and "search_space=" in msg
    said, written = _decide(tmp_path, monkeypatch, bundle_max_gb=1e-6, yes=True)
    assert len(written) == 1 and isinstance(written[0], BundleCost)
    assert re.match(r"bundle for cpu \(onnxruntime, fp32\): \d+ blocks and 3 networks \(2 calibration, 1 pruned\), "
                    r"\d+ graphs: about \d+ MB, the largest file about \d+ kB \(network tiny \w+\)", said[0]), said[0]
    assert said[1].startswith("measuring it on the device: about ")


def test_the_question_decides(tmp_path, monkeypatch):
    asked = []
    with pytest.raises(ValueError, match=r"^the bundle was not written \(about 0\.0 GB\)"):
        _decide(tmp_path, monkeypatch, bundle_max_gb=1e-6, ask=lambda q: asked.append(q) or False)
    assert asked and asked[0].startswith("write about 0.0 GB to ") and asked[0].endswith("? [y/N] ")
    _, written = _decide(tmp_path, monkeypatch, bundle_max_gb=1e-6, ask=lambda q: True)
    assert len(written) == 1
    _, written = _decide(tmp_path, monkeypatch, ask=lambda q: pytest.fail("asked under the limit"))
    assert len(written) == 1
    with pytest.raises(ValueError, match="bundle_max_gb=0: give the size in GB"):
        _decide(tmp_path, monkeypatch, bundle_max_gb=0)


def test_the_command_says_the_cost_and_refuses_with_the_option(tmp_path):
    """Non-interactive (no terminal): the estimate, then a one-line refusal naming the option, exit 2, nothing written."""
    r = forked.run([sys.executable, "-m", "nas.profile", "conf=cpu", "search_space=tiny", "bundle=b",
                    "bundle_max_gb=0.0001", "calibration_networks=2", "pruned_networks=1", "progress=false"],
                   cwd=tmp_path, input="", timeout=600)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout.startswith("bundle for cpu (onnxruntime, fp32): ")
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: the bundle would take about") and "yes=true" in err
    assert not (tmp_path / "b").exists()


def test_every_bundle_explains_itself(tmp_path):
    """README.md: what to copy, the command per runtime, Python and numpy, the time, the trtexec line,
    how to bring the results back (the import command), and validation where held-out networks are in it."""
    target = Target.from_dict(JETSON)
    space = load_space("tiny")
    keys, nets = space.unique_blocks()[:3], calibration_archs(space, 3)
    cost = bundle_cost(keys, target, {"calibration": nets[:2], "held_out": nets[2:]}, FAST, lambda x, kind: 1.0)
    imp = "python -m nas.profile conf=jet import_bundle=jb/results.json"
    out = tmp_path / "jb"
    write_bundle(keys, target, out, networks={"calibration": nets[:2], "held_out": nets[2:]}, settings=FAST,
                 import_command=imp, cost=cost, progress=False)
    text = (out / "README.md").read_text()
    for want in ("## What to copy", "`scp -r jb device:`", "Python 3.6 or later", "numpy", "`python3 measure_bundle.py`",
                 "`python3 measure_bundle.py --runtime trtexec`", "--runtime onnxruntime --provider CUDAExecutionProvider",
                 "`python3 measure_bundle.py --rehearse`", "## How long it takes", "TensorRT engine builds",
                 "--print-trtexec", imp, "python -m nas.validate conf=jet bundle=jb/results.json"):
        assert want in text, want
    first = json.loads((out / "manifest.json").read_text())["blocks"][0]["file"]
    line = next(ln for ln in text.splitlines() if ln.startswith("/usr/src/tensorrt/bin/trtexec "))
    assert line == (f"/usr/src/tensorrt/bin/trtexec --onnx={first} --saveEngine=<tmp>/engine.plan --fp16 --warmUp=200 "
                    "--iterations=3 --duration=0 --useSpinWait --noDataTransfers --exportTimes=<tmp>/times.json "
                    "--percentile=10,50,90")
    # the script prints the same line for the same TensorRT (with the path it is given)
    r = subprocess.run([sys.executable, "measure_bundle.py", ".", "--print-trtexec", "--trt-version", "10.3.0",
                        "--limit", "40"], cwd=out, capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert line.replace("/usr/src/tensorrt/bin/trtexec --onnx=", "trtexec --onnx=./") in r.stdout.splitlines()
    assert Path(out / "README.md").read_text().count("results.json") >= 2
