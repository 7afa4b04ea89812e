"""The trtexec path of device bundles, against real trtexec output posted in public issues
(tests/data/trtexec/, each file naming its source) and a stand-in ``trtexec`` executable that prints
such output: every summary format trtexec 8.0-10.x prints, per-inference times from ``--exportTimes``,
the engine built once and measured for ``min_time_s``, ``--int8`` only for Q/DQ graphs, TensorRT 11's
flags, the version as ``8.6.1``; and the code before these (commit 8d3c7f7) failing the same checks."""

import json
import sys
from pathlib import Path

import pytest
from old_code import frozen_module, load_old

from nas.latency.runtimes import hwnas_trt

frozen_bundle_trt = frozen_module("nas/latency/bundle_trt.py", at="83087d3")  # before the warm-up records were dropped

DATA = Path(__file__).parent / "data" / "trtexec"
SETTINGS = {"warmup": 2, "repeats": 5, "min_time_s": 1.5}

# (fixture, metric, median, p90 or None, p99 or None): the figures as the posts print them
SUMMARIES = [
    ("trt8.4_jetson_xavier_agx.log", "GPU Compute Time", 0.388443, None, 0.393188),
    ("trt8.x_jetson_xavier_nx.log", "GPU Compute Time", 0.564087, None, 0.578552),
    ("trt8.x_desktop_p99.log", "GPU Compute Time", 1.26953, None, 1.33472),
    ("trt8.5_jetson_xavier_agx.log", "GPU Compute Time", 0.369873, 0.373779, None),  # p99 cut off in the post
    ("trt8.5_desktop_2080ti.log", "Latency", 2.04193, 2.07666, 2.10303),
    ("trt8.6_jetson_agx_orin.log", "Latency", 4.83752, 4.84772, 4.85547),
    ("trt_desktop_p90.log", "GPU Compute Time", 7.14139, 10.2881, 12.9485),
    ("trt10.13_jetson_agx_thor.log", "Latency", 640.024, 664.195, 684.747),
    ("trt_desktop_p90_rapidflow.log", "GPU Compute Time", 30.333, 30.4037, 30.4204),
    ("trt8.6_desktop_5070ti.log", "GPU Compute Time", 140.855, 142.144, 143.038),
]
GPU_COMPUTE = [s for s in SUMMARIES if s[1] == "GPU Compute Time"]


def _fixture(name):
    text = (DATA / name).read_text()
    assert text.startswith("# source: https://"), f"{name} must name its source in its first line"
    return text


@pytest.mark.parametrize("name,metric,median,p90,p99", SUMMARIES)
def test_summary_of_every_format(name, metric, median, p90, p99):
    got = hwnas_trt.parse_summary(_fixture(name), metric)
    assert got["median"] == median
    assert got["percentiles"].get(90.0) == p90 and got["percentiles"].get(99.0) == p99


def test_total_gpu_compute_time_is_not_the_summary():
    """``Total GPU Compute Time: 2.99202 s`` follows the summary line and must not be read as it."""
    assert hwnas_trt.parse_summary(_fixture("trt8.4_jetson_xavier_agx.log"))["min"] == 0.375977


def test_the_metric_read_is_in_logs_of_each_summary_format():
    """The line the code reads (GPU Compute Time) in a real log of each format: percentile(99%) only
    (8.0-8.4: Xavier AGX 8.4), percentile(90, 95, 99%) (8.5: Xavier AGX 8.5.2; 8.6.1 on an RTX 5070 Ti;
    an unknown version); the posts of 8.5 on a 2080 Ti, 8.6 on AGX Orin and 10.13 on AGX Thor were
    cut before it (their Latency line is read above)."""
    for name in ("trt8.4_jetson_xavier_agx.log", "trt8.5_jetson_xavier_agx.log", "trt_desktop_p90_rapidflow.log",
                 "trt8.6_desktop_5070ti.log"):
        assert hwnas_trt.parse_summary(_fixture(name)) is not None, name
    text = _fixture("trt8.6_desktop_5070ti.log")
    assert hwnas_trt.trtexec_version(text) == "8.6.1" and hwnas_trt.parse_summary(text)["min"] == 139.995


def test_versions_as_trtexec_prints_them():
    rows = [ln.split(" | ", 1) for ln in (DATA / "versions.txt").read_text().splitlines() if " | " in ln and not ln.startswith("#")]
    assert len(rows) == 7
    for want, line in rows:
        assert hwnas_trt.trtexec_version(line) == want, line
    assert hwnas_trt.decode_version("8601") == "8.6.1" and hwnas_trt.decode_version(100300) == "10.3.0"


def _times_file(path, compute_ms):
    """A ``--exportTimes`` file in the format trtexec writes (samples/common/sampleReporting.cpp,
    exportJSONTrace: a list of records with startEnqMs ... computeMs ... latencyMs); constructed
    from that source, not a recorded run."""
    t, rows = 0.0, []
    for c in compute_ms:
        rows.append({"startEnqMs": t, "endEnqMs": t + 0.01, "startH2dMs": t, "endH2dMs": t, "startComputeMs": t,
                     "endComputeMs": t + c, "startD2hMs": t + c, "endD2hMs": t + c, "h2dMs": 0.0, "computeMs": c,
                     "d2hMs": 0.0, "latencyMs": c})
        t += c
    path.write_text(json.dumps(rows))


def _fake_trtexec(tmp_path, monkeypatch, output, help_text="", times=None):
    """A ``trtexec`` on PATH that prints ``output`` (``help_text`` for --help), copies ``times`` (a
    --exportTimes file) where it is asked to, and logs its arguments."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (tmp_path / "out.txt").write_text(output)
    (tmp_path / "help.txt").write_text(help_text)
    exe = bindir / "trtexec"
    exe.write_text(f"""#!{sys.executable}
import json, shutil, sys
args = sys.argv[1:]
with open({str(tmp_path / 'argv.jsonl')!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
print(open({str(tmp_path / ('help.txt'))!r}).read() if "--help" in args else open({str(tmp_path / 'out.txt')!r}).read())
dest = [a.split("=", 1)[1] for a in args if a.startswith("--exportTimes=")]
if dest and {str(times) if times else ''!r}:
    shutil.copyfile({str(times) if times else ''!r}, dest[0])
""")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{__import__('os').environ['PATH']}")
    return str(exe)


def _calls(tmp_path):
    return [json.loads(ln) for ln in (tmp_path / "argv.jsonl").read_text().splitlines() if "--help" not in ln]


def _onnx(tmp_path, qdq):
    p = tmp_path / ("q.onnx" if qdq else "f.onnx")
    p.write_bytes(b"\x08\x07 graph Conv" + (b" QuantizeLinear DequantizeLinear" if qdq else b""))
    return str(p)


def test_records_give_the_percentiles_and_the_engine_is_built_once(tmp_path, monkeypatch):
    times = tmp_path / "times.json"
    _times_file(times, [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 3.0])
    exe = _fake_trtexec(tmp_path, monkeypatch, _fixture("trt_desktop_p90.log"),
                        help_text="&&&& RUNNING TensorRT.trtexec [TensorRT v8601] # trtexec --help", times=times)
    factory, info = hwnas_trt.trtexec_factory(exe, "int8")
    assert info["version"] == "8.6.1"
    once = factory(_onnx(tmp_path, qdq=True), [1, 3, 8, 8], SETTINGS)
    first, second = once(), once()
    assert first == second and first["from"] == "exportTimes" and first["n"] == 11
    assert first["median_ms"] == pytest.approx(1.5) and first["p10_ms"] == pytest.approx(1.1)
    assert first["p10_ms"] > 1.0  # the 10th percentile of the records, not their minimum
    build, load = _calls(tmp_path)
    assert any(a.startswith("--onnx=") for a in build) and any(a.startswith("--saveEngine=") for a in build)
    assert any(a.startswith("--loadEngine=") for a in load) and not any(a.startswith("--onnx=") for a in load)
    for call in (build, load):
        assert "--duration=2" in call and "--iterations=5" in call and "--percentile=10,50,90" in call
        assert not any(a.startswith("--avgRuns") for a in call)
    assert "--int8" in build and "--fp16" in build


@pytest.mark.parametrize("name", [s[0] for s in GPU_COMPUTE])
def test_summary_is_the_fallback(tmp_path, monkeypatch, name):
    """Without an --exportTimes file the summary gives the median; a percentile it does not print is
    None (never the minimum)."""
    exe = _fake_trtexec(tmp_path, monkeypatch, _fixture(name))
    factory, info = hwnas_trt.trtexec_factory(exe, "fp16")
    got = factory(_onnx(tmp_path, qdq=False), [1, 3, 8, 8], SETTINGS)()
    want = next(s for s in GPU_COMPUTE if s[0] == name)
    assert got["from"] == "summary" and got["median_ms"] == want[2]
    assert got["p90_ms"] == want[3] and got["p10_ms"] is None


def test_warm_up_records_of_8_4_are_dropped(tmp_path):
    """TensorRT 8.0-8.4's exportJSONTrace writes every inference, warm-up included (release/8.2 and
    release/8.4 samples/common/sampleReporting.cpp; 8.5 passes the warm-up count and skips them); the
    records before the first whose compute starts at --warmUp or later are dropped, as those versions'
    summary drops them (printPerformanceReport: ``computeStart >= warmupMs``).  The parser before read
    them as timed runs."""
    times = tmp_path / "times.json"
    _times_file(times, [4.0] * 50 + [1.0] * 100)  # the first 200 ms: slow warm-up runs
    text = times.read_text()
    assert hwnas_trt.parse_times(text, warmup_ms=200) == [1.0] * 100
    assert hwnas_trt.parse_times(text) == [4.0] * 50 + [1.0] * 100  # 8.5 on: the file holds timed runs only
    old = frozen_bundle_trt.parse_times(text)
    assert len(old) == 150 and old[:50] == [4.0] * 50  # the warm-up runs read as timed ones
    with pytest.raises(ValueError, match="after the warm-up"):
        hwnas_trt.parse_times(text, warmup_ms=1000)


def test_int8_flag_only_for_qdq_graphs_and_none_on_11():
    assert hwnas_trt.trtexec_flags("int8", "8.6.1", qdq=True) == ["--int8", "--fp16"]
    assert hwnas_trt.trtexec_flags("int8", "10.3.0", qdq=False) == ["--fp16"]  # the overhead graph, pooling
    assert hwnas_trt.trtexec_flags("int8", "11.0.0", qdq=True) == []
    with pytest.raises(RuntimeError, match="tensorrt<11"):
        hwnas_trt.trtexec_flags("fp16", "11.0.0", qdq=False)
    cmd = hwnas_trt.trtexec_command("trtexec", "b.onnx", "b.plan", "t.json", SETTINGS, [], build=True,
                                     trt_version="8.4.0")
    assert "--percentile=10,50,90" not in cmd  # 8.0-8.4 take one percentile only


# ------------------------------------------------------------------------------------------
# the code before (8d3c7f7) against the same output


def _old_script(tmp_path):
    return load_old("nas/latency/bundle_script.py", tmp_path)


@pytest.mark.parametrize("name", ["trt8.4_jetson_xavier_agx.log", "trt8.x_jetson_xavier_nx.log",
                                  "trt8.x_desktop_p99.log"])
def test_old_code_cannot_read_8_0_to_8_4(tmp_path, monkeypatch, name):
    _fake_trtexec(tmp_path, monkeypatch, _fixture(name))
    old = _old_script(tmp_path)
    factory, _ = old.trtexec_factory("fp16")
    with pytest.raises(RuntimeError, match="trtexec failed"):
        factory(_onnx(tmp_path, qdq=False), [1, 3, 8, 8], SETTINGS)()


def test_old_code_measured_badly(tmp_path, monkeypatch):
    """The old path: the minimum as p10, no --duration, a rebuild per call, --int8 on a float graph,
    the version as 8601."""
    _fake_trtexec(tmp_path, monkeypatch, _fixture("trt_desktop_p90.log"),
                  help_text="&&&& RUNNING TensorRT.trtexec [TensorRT v8601] # trtexec --help")
    old = _old_script(tmp_path)
    factory, info = old.trtexec_factory("int8")
    once = factory(_onnx(tmp_path, qdq=False), [1, 3, 8, 8], SETTINGS)
    got = [once(), once()]
    assert info["version"] == "8601"
    assert got[0]["p10_ms"] == 5.34595  # the printed minimum
    calls = _calls(tmp_path)
    assert all(any(a.startswith("--onnx=") for a in c) for c in calls)  # built again every call
    assert all("--int8" in c and not any(a.startswith("--duration") for a in c) for c in calls)
