"""``measure_bundle.py`` (nas/latency/bundle/measure_bundle.py) on its own, without writing a bundle through
torch: its statistics over rounds, its noise note, TensorRT before 8.5 (measured with trtexec), the
trtexec command lines it prints without running them, and the oldest Python it runs on (JetPack 4.6's
3.6, JetPack 5's 3.8) where such an interpreter is found."""

import glob
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from old_code import frozen_module, old_source
from test_trtexec import _fake_trtexec, _fixture, _times_file

from nas.latency.bundle.roundtrip import SCRIPTS  # the scripts a bundle carries, as write_bundle copies them

ROOT = Path(__file__).resolve().parent.parent


def _copy_scripts(folder: Path) -> None:
    for name, src in SCRIPTS.items():
        shutil.copyfile(src, folder / name)


def _script(tmp_path):
    """The script as a module (its helpers beside it, as in a bundle)."""
    d = tmp_path / "script"
    d.mkdir(exist_ok=True)
    _copy_scripts(d)
    spec = importlib.util.spec_from_file_location("measure_bundle_under_test", d / "measure_bundle.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rounds(seed):
    """Three rounds of one graph as a shifting device gives them: each round's own p10 <= median <= p90."""
    rng = random.Random(seed)
    out = []
    for _ in range(3):
        med = rng.choice([0.1, 0.1, 0.3]) * rng.uniform(0.9, 1.1)
        out.append({"median_ms": med, "p10_ms": med * rng.uniform(0.6, 1.0), "p90_ms": med * rng.uniform(1.0, 2.5),
                    "n": 50})
    return out


def _merged(merge, rounds):
    e = None
    for st in rounds:
        e = merge(e, st, 0)
    return e


def test_p10_median_p90_in_order_over_rounds(tmp_path):
    """Each statistic is the median over the rounds of that round's own: never p10 above the median or
    p90 below it.  The merge before (means of the percentiles, median of the medians) broke the order."""
    merge = _script(tmp_path).merge
    broke = 0
    for seed in range(200):
        rounds = _rounds(seed)
        e = _merged(merge, rounds)
        assert e["p10_ms"] <= e["median_ms"] <= e["p90_ms"], (seed, e)
        assert e["rounds_p10_ms"] == [r["p10_ms"] for r in rounds] and e["n"] == 150
        old = _merged(frozen_module("nas/latency/bundle_script.py", at="db7cf55").merge, rounds)
        broke += not old["p10_ms"] <= old["median_ms"] <= old["p90_ms"]
    assert broke > 20  # the old definition put them out of order for many of these


def test_a_results_file_from_before_and_an_unknown_percentile(tmp_path):
    merge = _script(tmp_path).merge
    before = {"median_ms": 1.0, "p10_ms": 0.9, "p90_ms": 1.2, "n": 50, "rounds_ms": [1.0, 1.1], "remeasured": 0}
    e = merge(before, {"median_ms": 1.05, "p10_ms": 1.0, "p90_ms": 1.1, "n": 50}, 0)
    assert e["rounds_p10_ms"] == [0.9, 0.9, 1.0] and e["p10_ms"] == 0.9 and e["p90_ms"] == 1.2
    e = merge(e, {"median_ms": 1.0, "p10_ms": None, "p90_ms": None, "n": 0}, 0)  # trtexec's summary only
    assert e["p10_ms"] is None and e["p90_ms"] is None and e["median_ms"] == 1.025


def test_rounds_far_apart_get_a_noise_note(tmp_path):
    mod = _script(tmp_path)
    steady = {"a.onnx": {"rounds_ms": [1.0, 1.1, 1.05]}, "b.onnx": {"rounds_ms": [0.5]}}
    assert mod.noise_note(steady) is None
    noisy = {**steady, "c.onnx": {"rounds_ms": [0.1, 0.25, 0.11]}, "d.onnx": {"rounds_ms": [2.0, 2.1, 4.5]}}
    note = mod.noise_note(noisy)
    assert note["rounds_apart"] == 2 and note["of"] == 3 and note["worst"][0] == {"file": "c.onnx", "slowest_over_fastest": 2.5}
    assert note["note"].startswith("noise: in 2 of 3 graphs") and "\n" not in note["note"]


# ------------------------------------------------------------------------------------------
# a hand-made ONNX bundle (no torch): one block, the overhead graph


def _bundle(tmp_path, precision="fp16"):
    b = tmp_path / "b"
    (b / "blocks").mkdir(parents=True)
    for f in ("blocks/blk.onnx", "blocks/_overhead.onnx"):
        (b / f).write_bytes(b"\x08\x07 graph Conv")
    man = {"schema": "hwnas.bundle", "schema_version": 2, "bundle_id": "jetson-test-1", "target": "jetson",
           "runtime": "tensorrt", "provider": "", "precision": precision, "batch": 1, "threads": 1,
           "settings": {"warmup": 2, "repeats": 5, "min_time_s": 1.5, "max_spread": 10.0, "remeasure": 0, "rounds": 1},
           "overhead": "blocks/_overhead.onnx", "import_command": "python -m nas.profile conf=jetson import_bundle=b/results.json",
           "budget_min": None, "blocks": [{"file": "blocks/blk.onnx", "label": "blk", "in": [3, 8, 8], "key": {}}],
           "networks": []}
    (b / "manifest.json").write_text(json.dumps(man))
    _copy_scripts(b)
    return b


def _fake_tensorrt(tmp_path, version):
    """A ``tensorrt`` package that imports and names its version, as JetPack 5.0's python3-libnvinfer (8.4)."""
    d = tmp_path / "site"
    d.mkdir(exist_ok=True)
    (d / "tensorrt.py").write_text(f"__version__ = {version!r}\n")
    return str(d)


def test_tensorrt_before_8_5_measures_with_trtexec_and_says_so(tmp_path, monkeypatch):
    """JetPack 5.0: ``import tensorrt`` works (8.4) but its Python API lacks execute_async_v3; the default
    runtime measures with trtexec, saying so in one line (before: an error)."""
    times = tmp_path / "times.json"
    _times_file(times, [3.0] * 5 + [1.0] * 185 + [1.0] * 50)  # 200 ms of warm-up (5 slow runs first), 50 timed
    _fake_trtexec(tmp_path, monkeypatch, _fixture("trt8.4_jetson_xavier_agx.log"),
                  help_text="&&&& RUNNING TensorRT.trtexec [TensorRT v8401] # trtexec --help", times=times)
    b = _bundle(tmp_path)
    env = {**os.environ, "PYTHONPATH": _fake_tensorrt(tmp_path, "8.4.1")}
    r = subprocess.run([sys.executable, str(b / "measure_bundle.py")], cwd=b, capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    notes = [ln for ln in r.stdout.splitlines() if ln.startswith("note:")]
    assert notes == ["note: TensorRT 8.4.1's Python API lacks execute_async_v3 (8.5+): measuring with trtexec"]
    res = json.loads((b / "results.json").read_text())
    assert res["runtime"]["via"] == "trtexec" and res["runtime"]["version"] == "8.4.0"  # as the log's PASSED line names it
    e = res["entries"]["blocks/blk.onnx"]
    assert e["median_ms"] == 1.0 and e["n"] == 50  # 8.4's warm-up records (compute started before 200 ms) left out


def test_print_trtexec_prints_the_exact_command_lines_and_runs_nothing(tmp_path, monkeypatch):
    exe = _fake_trtexec(tmp_path, monkeypatch, "must not run",
                        help_text="&&&& RUNNING TensorRT.trtexec [TensorRT v8601] # trtexec --help")
    b = _bundle(tmp_path)
    r = subprocess.run([sys.executable, str(b / "measure_bundle.py"), "--print-trtexec"], cwd=b, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"# 1 measurement(s) with {exe}, TensorRT 8.6.1")
    assert lines[-1] == (f"{exe} --onnx={b}/blocks/blk.onnx --saveEngine=<tmp>/engine.plan --fp16 --warmUp=200 "
                         "--iterations=5 --duration=2 --useSpinWait --noDataTransfers --exportTimes=<tmp>/times.json "
                         "--percentile=10,50,90")
    ran = [json.loads(ln) for ln in (tmp_path / "argv.jsonl").read_text().splitlines()]
    assert ran == [["--help"]] and not (b / "results.json").exists()
    # where no trtexec is found: the version asked for, and a plain `trtexec`
    monkeypatch.setenv("PATH", os.defpath)
    r = subprocess.run([sys.executable, str(b / "measure_bundle.py"), "--print-trtexec", "--trt-version", "10.3.0"],
                       cwd=b, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.splitlines()[-1].startswith(f"trtexec --onnx={b}/blocks/blk.onnx --saveEngine")
    r = subprocess.run([sys.executable, str(b / "measure_bundle.py"), "--print-trtexec", "--trt-version", "11.0.0"],
                       cwd=b, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "tensorrt<11" in r.stderr  # fp16 on 11: refused, as a run would be


# ------------------------------------------------------------------------------------------
# the device's Python


def _python(version):
    """An interpreter of ``version`` (``3.6``) that runs, from pyenv's versions or PATH, else None."""
    roots = [os.environ.get("PYENV_ROOT", ""), os.path.expanduser("~/.pyenv")]
    cands = sorted(c for r in roots if r for c in glob.glob(os.path.join(r, "versions", f"{version}.*", "bin",
                                                                           f"python{version}")))
    for py in [*reversed(cands), shutil.which(f"python{version}")]:
        if py and subprocess.run([py, "-c", f"import sys; assert sys.version.startswith('{version}.')"],
                                 capture_output=True).returncode == 0:
            return py
    return None


@pytest.mark.parametrize("version", ["3.6", "3.8"])
def test_the_scripts_run_on_the_devices_python(tmp_path, monkeypatch, version):
    """JetPack 4.6's Python 3.6 and JetPack 5's 3.8 import the three scripts and run measure_bundle.py
    (with a numpy stand-in where that Python has none: the imports and --help, not the timing)."""
    py = _python(version)
    if py is None:
        pytest.skip(f"no Python {version} interpreter here (PATH or ~/.pyenv/versions) to run the scripts with")
    b = _bundle(tmp_path)
    env = dict(os.environ, PYTHONPATH="")
    has_numpy = subprocess.run([py, "-c", "import numpy"], capture_output=True, env=env).returncode == 0
    if not has_numpy:
        (tmp_path / "stub").mkdir()
        (tmp_path / "stub" / "numpy.py").write_text("")
        env["PYTHONPATH"] = str(tmp_path / "stub")
    r = subprocess.run([py, "-c", "import sys; sys.path.insert(0, '.'); import hwnas_trt, hwnas_cuda, hwnas_stats, hwnas_device, hwnas_litert; "
                        "print(hwnas_trt.decode_version(8401))"], cwd=b, capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "8.4.1", r.stderr
    r = subprocess.run([py, "measure_bundle.py", "--help"], cwd=b, capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "--print-trtexec" in r.stdout, r.stderr
    if has_numpy:  # the whole trtexec path, as on JetPack 4.6 (TensorRT 8.2 there; 8.4's log here)
        times = tmp_path / "times.json"
        _times_file(times, [1.0] * 211)
        _fake_trtexec(tmp_path, monkeypatch, _fixture("trt8.4_jetson_xavier_agx.log"),
                      help_text="&&&& RUNNING TensorRT.trtexec [TensorRT v8401] # trtexec --help", times=times)
        env["PATH"] = os.environ["PATH"]
        r = subprocess.run([py, "measure_bundle.py", "--runtime", "trtexec"], cwd=b, capture_output=True, text=True,
                           env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        assert json.loads((b / "results.json").read_text())["entries"]["blocks/blk.onnx"]["n"] == 11  # 200 warm-up


# ai-edge-litert 2.3.0's interpreter on an AMD EPYC (Zen 4), one int8 `tiny` network of a litert_cpu_int8
# bundle, full-integer by ai-edge-quantizer: allocate_tensors() raised this, and the whole measurement stopped
# at it (run again, it stopped at it again)
XNNPACK_PREPARE_ERROR = ("failed to create XNNPACK runtimeNode number 36 (TfLiteXNNPackDelegate) failed to "
                         "prepare.")


def _graphs_bundle(tmp_path):
    b = tmp_path / "b"
    b.mkdir()
    man = {"schema": "hwnas.bundle", "schema_version": 2, "bundle_id": "litert-test-1", "batch": 1,
           "blocks": [{"file": f"blocks/{k}.tflite", "label": f"blk{k}", "in": [8, 8, 8], "key": {}} for k in range(3)],
           "networks": [{"file": "networks/n.tflite", "label": "tiny", "in": [3, 32, 32], "role": "calibration",
                         "arch": {}}]}
    settings = {"warmup": 0, "repeats": 3, "min_time_s": 0, "max_spread": 10.0, "remeasure": 0, "rounds": 2}
    return b, man, settings


def _factory(bad):
    """A runtime that loads every graph but ``bad``, which raises as LiteRT's interpreter does."""
    def make(path, shape, s):
        if path.endswith(bad):
            raise RuntimeError(XNNPACK_PREPARE_ERROR)
        return lambda: {"median_ms": 0.1, "p10_ms": 0.09, "p90_ms": 0.11, "n": 3}
    return make


def _measure(mod, b, man, s, res):
    todo, _ = mod.plan(man, res, "all", s["rounds"])
    mod.measure_all(_factory("networks/n.tflite"), todo, res, man, s, str(b), str(b / "results.json"))
    return res


def test_a_graph_the_runtime_cannot_run_is_left_out_and_the_rest_measured(tmp_path, capsys):
    mod = _script(tmp_path)
    b, man, s = _graphs_bundle(tmp_path)
    res = _measure(mod, b, man, s, mod.load_results(str(b / "results.json"), man))
    assert sorted(res["entries"]) == [f"blocks/{k}.tflite" for k in range(3)]
    assert all(len(e["rounds_ms"]) == 2 for e in res["entries"].values())
    assert res["failed"] == {"networks/n.tflite": {"label": "tiny", "error": f"RuntimeError: {XNNPACK_PREPARE_ERROR}",
                                                   "round": 1}}
    assert "tiny (networks/n.tflite): FAILED, left out: RuntimeError: failed to create XNNPACK" in capsys.readouterr().out
    saved = json.loads((b / "results.json").read_text())
    assert saved["failed"] == res["failed"]
    # a re-run skips it: nothing is left to measure, and the script's end counts it as done
    assert mod.plan(man, saved, "all", s["rounds"])[0] == []
    # --retry-failed forgets the failure, so the graph is tried again
    assert len(mod.plan(man, {**saved, "failed": {}}, "all", s["rounds"])[0]) == 2


def test_the_old_script_stopped_at_such_a_graph(tmp_path):
    """The script before: the first graph the runtime could not load ended the whole measurement, and a
    re-run stopped at the same graph."""
    d = tmp_path / "old"
    d.mkdir()
    _copy_scripts(d)
    (d / "measure_bundle.py").write_text(old_source("nas/latency/bundle/measure_bundle.py", at="3d5a481"))
    spec = importlib.util.spec_from_file_location("old_measure_bundle", d / "measure_bundle.py")
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    b, man, s = _graphs_bundle(tmp_path)
    res = old.load_results(str(b / "results.json"), man)
    with pytest.raises(RuntimeError, match="XNNPACK"):
        _measure(old, b, man, s, res)
    assert "networks/n.tflite" not in res["entries"] and "failed" not in res
