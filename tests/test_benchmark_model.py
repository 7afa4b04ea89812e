"""The Android path of LiteRT device bundles, against real ``benchmark_model`` output posted in public issues
(tests/data/benchmark_model/, each file naming its source in its first line) and a stand-in ``adb`` that
prints such output: the timed run read (never the warm-up), the median where printed and the mean,
labelled so, where not, every prefix real logs carry (none, ``INFO:``, logcat's, a terminal escape), a
failed run refused, the phone's identity in the results; and a wrong parser (the first ``count=`` line,
tests/data/benchmark_model/wrong_parser.py) caught by the same stand-in.  Needs no LiteRT package."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nas.latency.runtimes import hwnas_litert
from nas.latency.runtimes.hwnas_litert import BenchmarkError, BenchmarkModel, benchmark_command, parse_output

DATA = Path(__file__).parent / "data" / "benchmark_model"
SETTINGS = {"warmup": 10, "repeats": 50, "min_time_s": 0.1}

# fixture -> (timed run's mean in ms, n), as the posts print them (microseconds there)
LOGS = {
    "tf61946_linux_x86_info_prefix.log": (116.066, 50),
    "tf43541_android_adb_gpu.log": (119.375, 50),
    "tf56301_android_logcat.log": (12.1676, 75),
    "tf62775_linux_escape_prefix.log": (3.79092, 261),
    "tf26736_android_2019_one_warmup.log": (880.688, 50),
    "xnnpack999_rpi4_use_xnnpack.log": (55.7442, 50),
    "yuenshome77_android_2019_squeezenet.log": (420.334, 10),
    "mlcommons1134_litert_compiled_model.log": (7430.2, 10),
}


def _fixture(name: str) -> str:
    text = (DATA / name).read_text()
    assert text.startswith("# source: https://github.com/"), f"{name} must name its source in its first line"
    return text


@pytest.mark.parametrize("name", sorted(LOGS))
def test_every_real_format_gives_the_timed_run(name):
    got = parse_output(_fixture(name))
    mean, n = LOGS[name]
    assert got["median_ms"] == pytest.approx(mean) and got["mean_ms"] == pytest.approx(mean) and got["n"] == n
    assert got["statistic"] == "mean"  # none of these builds prints a median: the mean is the figure, labelled so
    assert got["p10_ms"] is None and got["p90_ms"] is None  # benchmark_model prints no p10 / p90


def test_delegation_is_read():
    assert parse_output(_fixture("xnnpack999_rpi4_use_xnnpack.log"))["xnnpack"] == "partially, 1 delegate kernel(s)"


def test_median_where_a_build_prints_percentiles():
    """Newer builds print ``p5= median= p95=`` after the ``Stat`` fields (``StatWithPercentiles::
    OutputToStream`` in xla/tsl/util/stats_calculator.h); this output is constructed in that format, and
    the delegation line in the XNNPACK delegate's (``Replacing N out of M node(s) ...``)."""
    text = ("INFO: Replacing 31 out of 31 node(s) with delegate (TfLiteXNNPackDelegate) node, yielding 1 partitions "
            "for subgraph 0.\n"
            "INFO: Running benchmark for at least 5 iterations and at least 0.5 seconds but terminate if exceeding "
            "150 seconds.\nINFO: count=9 first=87112 curr=51629 min=51629 max=87112 avg=58147.4 std=11478 p5=51629 "
            "median=51962 p95=87112\n\nINFO: Running benchmark for at least 1000 iterations and at least 1 seconds "
            "but terminate if exceeding 150 seconds.\nINFO: count=1000 first=52162 curr=49785 min=49088 max=686105 "
            "avg=63743.2 std=60716 p5=49620 median=51891 p95=68628\n")
    got = parse_output(text)
    assert got["statistic"] == "median" and got["median_ms"] == 51.891 and got["mean_ms"] == 63.7432
    assert (got["p5_ms"], got["p95_ms"], got["n"]) == (49.62, 68.628, 1000)
    assert got["xnnpack"] == "31 of 31 nodes in 1 partition(s)"


def test_all_same_runs():
    """``count=N curr=X(all same)`` (``Stat::OutputToStream`` when min == max): X is the median."""
    got = parse_output("Running benchmark for at least 50 iterations and at least 1 seconds\ncount=50 curr=12(all same)\n")
    assert got["median_ms"] == 0.012 and got["n"] == 50


def test_a_failed_run_is_refused_with_its_reason():
    with pytest.raises(BenchmarkError, match="Failed to apply XNNPACK delegate"):
        parse_output(_fixture("tf56166_xnnpack_failed.log"))
    with pytest.raises(BenchmarkError, match="no statistics of a timed run"):
        parse_output("STARTING!\nLoaded model m.tflite\n")


def test_command_is_the_bundles_settings():
    cmd = benchmark_command("/data/local/tmp/hwnas/benchmark_model", "/data/local/tmp/hwnas/blocks/a.tflite",
                            SETTINGS, taskset="f0")
    assert cmd == ["taskset", "f0", "/data/local/tmp/hwnas/benchmark_model", "--graph=/data/local/tmp/hwnas/blocks/a.tflite",
                   "--num_threads=1", "--use_xnnpack=true", "--warmup_runs=10", "--warmup_min_secs=0", "--num_runs=50",
                   "--min_secs=0.1"]


# ------------------------------------------------------------------------------------------
# a stand-in adb, answering as adb and an arm64 Android phone do


PROPS = {"ro.product.manufacturer": "Google", "ro.product.model": "Pixel 6a", "ro.soc.manufacturer": "Google",
         "ro.soc.model": "GS101", "ro.board.platform": "gs101", "ro.product.cpu.abi": "arm64-v8a",
         "ro.build.version.release": "14", "ro.build.fingerprint": "google/bluejay/bluejay:14/UQ1A/1:user/release-keys"}


def fake_adb(tmp_path: Path, monkeypatch, log: str, devices=("2B161JEGR07913",)) -> Path:
    """An ``adb`` on PATH: ``devices`` lists ``devices`` (adb's ``List of devices attached`` then
    ``<serial>\\tdevice``), ``push`` records the file (and prints adb's one-line summary), ``shell``
    answers ``getprop`` with PROPS, ``cat /proc/cpuinfo`` with tests/data/benchmark_model/cpuinfo_arm64.txt
    (arm64's format, arch/arm64/kernel/cpuinfo.c; a Cortex-A55 and a Cortex-A78 core), ``test -x F && echo
    X`` as a shell does (X for a pushed file; toybox's ``ls`` of a missing file would name it in its error),
    and ``benchmark_model`` with the real log ``log`` on stderr (where TFLITE_LOG writes).
    Every call's arguments go to argv.jsonl."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    state = tmp_path / "pushed.json"
    (tmp_path / "log.txt").write_text((DATA / log).read_text().split("\n", 1)[1])
    exe = bindir / "adb"
    exe.write_text(f"""#!{sys.executable}
import json, os, shlex, sys
args = sys.argv[1:]
with open({str(tmp_path / 'argv.jsonl')!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:1] == ["-s"]:
    args = args[2:]
state = {str(state)!r}
pushed = json.load(open(state)) if os.path.exists(state) else []
if args[0] == "devices":
    print("List of devices attached")
    for d in {list(devices)!r}:
        print(d + "\\tdevice")
    print()
elif args[0] == "push":
    pushed.append(args[2])
    json.dump(pushed, open(state, "w"))
    print(args[1] + ": 1 file pushed, 0 skipped. 38.1 MB/s (16384 bytes in 0.000s)")
elif args[0] == "shell":
    cmd = shlex.split(args[1])
    if cmd[0] == "getprop":
        print({PROPS!r}.get(cmd[1], ""))
    elif cmd[:2] == ["cat", "/proc/cpuinfo"]:
        print(open({str(DATA / 'cpuinfo_arm64.txt')!r}).read())
    elif cmd[0] == "test":  # test -x F && echo X
        if cmd[2] in pushed:
            print(cmd[5])
    elif any(w.endswith("benchmark_model") for w in cmd):
        sys.stderr.write(open({str(tmp_path / 'log.txt')!r}).read())
""")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return exe


def _calls(tmp_path: Path) -> list[list[str]]:
    return [json.loads(ln) for ln in (tmp_path / "argv.jsonl").read_text().splitlines()]


def _graph(tmp_path: Path) -> str:
    g = tmp_path / "bundle" / "blocks" / "abc.tflite"
    g.parent.mkdir(parents=True, exist_ok=True)
    g.write_bytes(b"TFL3")
    return str(g)


def test_phone_measured_over_adb(tmp_path, monkeypatch):
    fake_adb(tmp_path, monkeypatch, "yuenshome77_android_2019_squeezenet.log")
    binary = tmp_path / "benchmark_model"
    binary.write_bytes(b"\x7fELF")
    bm = BenchmarkModel(binary=str(binary))
    got = bm.factory(_graph(tmp_path), [1, 3, 32, 32], SETTINGS)()
    assert got == {"median_ms": 420.334, "p10_ms": None, "p90_ms": None, "n": 10}  # the timed run, not the warm-up
    assert bm.info["statistic"].startswith("mean where this benchmark_model printed no median")
    calls = [c for c in _calls(tmp_path) if c[0] != "devices"]
    assert ["push", str(binary), "/data/local/tmp/hwnas/benchmark_model"] in calls
    assert ["push", _graph(tmp_path), "/data/local/tmp/hwnas/blocks/abc.tflite"] in calls
    run = next(c for c in calls if c[0] == "shell" and "benchmark_model --graph" in c[1])
    assert run[1].split() == benchmark_command("/data/local/tmp/hwnas/benchmark_model",
                                               "/data/local/tmp/hwnas/blocks/abc.tflite", SETTINGS)
    ident = bm.identity()
    assert ident["name"] == "Google Pixel 6a" and ident["cpu"] == "Google GS101" and ident["kind"] == "cpu"
    assert ident["cpu_parts"] == ["0xd05", "0xd41"] and "asimddp" in ident["cpu_flags"] and ident["cpu_count"] == 2
    assert ident["machine"] == "arm64-v8a" and ident["os"] == "Android 14"


def test_wrong_parser_is_caught_by_the_fake(tmp_path, monkeypatch):
    """The same stand-in and logs, read by the frozen wrong parser: the warm-up's mean (37% above the
    timed run on the squeezenet phone log), and nothing at all on a log with INFO: prefixes."""
    spec = importlib.util.spec_from_file_location("wrong_parser", DATA / "wrong_parser.py")
    wrong = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wrong)
    fake_adb(tmp_path, monkeypatch, "yuenshome77_android_2019_squeezenet.log")
    (tmp_path / "b").write_bytes(b"\x7fELF")
    bm = BenchmarkModel(binary=str(tmp_path / "b"))
    assert bm.factory(_graph(tmp_path), [1, 3, 32, 32], SETTINGS)()["median_ms"] == 420.334  # the right parser
    bm.parse = wrong.parse_output
    got = bm.factory(_graph(tmp_path), [1, 3, 32, 32], SETTINGS)()
    assert got["median_ms"] == pytest.approx(577.904) and got["median_ms"] != LOGS[
        "yuenshome77_android_2019_squeezenet.log"][0]
    with pytest.raises(ValueError):
        wrong.parse_output(_fixture("tf61946_linux_x86_info_prefix.log"))


def test_failed_run_over_adb(tmp_path, monkeypatch):
    fake_adb(tmp_path, monkeypatch, "tf56166_xnnpack_failed.log")
    (tmp_path / "b").write_bytes(b"\x7fELF")
    once = BenchmarkModel(binary=str(tmp_path / "b")).factory(_graph(tmp_path), [1, 3, 8, 8], SETTINGS)
    with pytest.raises(BenchmarkError, match="Failed to apply XNNPACK delegate"):
        once()


def test_adb_errors_name_the_fix(tmp_path, monkeypatch):
    fake_adb(tmp_path, monkeypatch, "tf43541_android_adb_gpu.log", devices=())
    with pytest.raises(BenchmarkError, match="no device: connect the phone with USB debugging"):
        BenchmarkModel()
    fake_adb(tmp_path, monkeypatch, "tf43541_android_adb_gpu.log", devices=("A", "B"))
    with pytest.raises(BenchmarkError, match=r"2 devices \(A, B\): pick one with --serial"):
        BenchmarkModel()
    with pytest.raises(BenchmarkError, match="no benchmark_model at /data/local/tmp/hwnas/benchmark_model.*"
                                             "--benchmark-model"):
        BenchmarkModel(serial="A")  # nothing pushed, none on the phone
    with pytest.raises(BenchmarkError, match="not found: install Android's platform tools"):
        BenchmarkModel(adb=str(tmp_path / "no-adb"))


def test_measure_bundle_on_a_phone_imports_as_the_phone(tmp_path, monkeypatch):
    """measure_bundle.py --runtime benchmark_model on a LiteRT bundle (its graphs stand-ins: the fake phone
    does not read them): results name the phone, runtime litert via benchmark_model, and import into a
    target naming the phone."""
    from nas.latency.bundle import roundtrip as bundle_mod
    from nas.latency.bundle.roundtrip import import_bundle, write_bundle
    from nas.latency.predict.versions import runtime_note
    from nas.latency.runtimes.loop import ProfileSettings
    from nas.space import load_space
    from nas.target import load_target

    monkeypatch.setattr(bundle_mod, "tflite_bytes", lambda *a, **k: b"TFL3")
    monkeypatch.setattr(bundle_mod, "require", lambda what: None)
    target = load_target("litert_cpu")
    out = tmp_path / "bundle"
    write_bundle(load_space("tiny").unique_blocks()[:2], target, out,
                 settings=ProfileSettings(warmup=2, repeats=5, min_time_s=0.0, rounds=1), progress=False)
    fake_adb(tmp_path, monkeypatch, "tf61946_linux_x86_info_prefix.log")
    (tmp_path / "bm").write_bytes(b"\x7fELF")
    run = subprocess.run([sys.executable, str(out / "measure_bundle.py"), "--runtime", "benchmark_model",
                          "--benchmark-model", str(tmp_path / "bm"), "--litert-version", "2.3.0"],
                         cwd=out, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "with litert 2.3.0 (XNNPACK, fp32) on Google Pixel 6a" in run.stdout
    res = json.loads((out / "results.json").read_text())
    assert res["device"]["name"] == "Google Pixel 6a" and res["runtime"]["via"] == "benchmark_model over adb"
    assert {e["median_ms"] for e in res["entries"].values()} == {116.066} and res["call_overhead_ms"] == 116.066
    phone = target.replace(name="pixel6a_litert", device=target.device.__class__(
        **{**target.device.__dict__, "name": "Google Pixel 6a"}))
    table, rep = import_bundle(out / "results.json", phone)
    assert rep["complete"] and table.metadata["device"]["name"] == "Google Pixel 6a"
    assert table.metadata["runtime"]["statistic"].startswith("mean where")
    # the phone's benchmark_model is never the runtime installed here: no "another release" note
    assert runtime_note(phone, table.metadata, installed="2.4.0") is None
    unknown = {**table.metadata, "runtime": {"name": "litert", "version": "unknown (benchmark_model prints none)"}}
    assert runtime_note(phone, unknown, installed="2.4.0") is None
    assert "another release" in runtime_note(phone, {"runtime": {"name": "litert", "version": "2.3.0"}}, installed="2.4.0")


def test_the_bundle_helper_needs_nothing_of_hwnas():
    src = Path(hwnas_litert.__file__).read_text()
    assert "from nas" not in src and "import nas" not in src and "import torch" not in src
