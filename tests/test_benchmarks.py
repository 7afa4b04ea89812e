"""The benchmarks package: every benchmark imports and explains itself through ``python -m benchmarks``
(they are run, with figures, by hand), the harness's pieces work, and the result files are the ones
the docs quote."""

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import forked
import numpy as np
import pytest

from benchmarks import harness
from benchmarks.__main__ import listing, names, summary
from benchmarks.__main__ import main as bench_main

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = names()


def _bench(*args: str, **kw) -> subprocess.CompletedProcess:
    """``python -m benchmarks args`` from the checkout."""
    return forked.run([sys.executable, "-m", "benchmarks", *args], cwd=ROOT, timeout=kw.pop("timeout", 120), **kw)


def test_every_benchmark_imports():
    assert len(BENCHMARKS) >= 20
    for name in BENCHMARKS:
        assert callable(importlib.import_module(f"benchmarks.{name}").main), name


@pytest.mark.parametrize("name", BENCHMARKS)
def test_help(name, capsys, monkeypatch):
    """In this process (the modules are imported already): a process per benchmark took minutes."""
    monkeypatch.setattr(sys, "argv", sys.argv[:1])
    with pytest.raises(SystemExit) as e:
        bench_main([name, "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m benchmarks {name}")


def test_help_in_a_process_of_its_own():
    r = _bench("search_value", "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: python -m benchmarks search_value")


def test_list_names_each_benchmark_in_one_line():
    r = _bench("--list")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [line.split()[0] for line in lines] == BENCHMARKS and r.stdout.strip() == listing()
    for name in BENCHMARKS:
        assert 10 < len(summary(name)) <= 110, (name, summary(name))


def test_an_unknown_benchmark_is_refused_in_one_line():
    r = _bench("no_such_benchmark")
    assert r.returncode == 2 and "no benchmark 'no_such_benchmark'" in r.stderr and "--list" in r.stderr
    r = _bench()
    assert r.returncode == 2 and "usage: python -m benchmarks" in r.stdout


def test_no_benchmark_edits_sys_path():
    for path in (ROOT / "benchmarks").glob("*.py"):
        assert "sys.path.insert" not in path.read_text(), path.name


def test_no_benchmark_imports_the_command_layer():
    """The benchmarks share their helpers through the harness, not through nas.cli (the commands' own)."""
    bad = []
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{path.name}:{node.lineno} {m}" for m in mods if m == "nas.cli" or m.startswith("nas.cli.")]
    assert not bad, "benchmarks importing the command layer: " + "; ".join(bad)


def test_harness_command_reruns_the_benchmark():
    assert harness.command("int8", ["--targets", "cpu", "cpu_int8"]) == "python -m benchmarks int8 --targets cpu cpu_int8"
    assert harness.command("roofline", [], cores=[1]) == "taskset -c 1 python -m benchmarks roofline"
    assert harness.command("search", ["--out", "a b"]) == "python -m benchmarks search --out 'a b'"


def test_harness_interleaves_rounds_and_takes_medians():
    calls = []
    values = {"a": iter([3.0, 1.0, 2.0]), "b": iter([10.0, 30.0, 20.0])}

    def case(k):
        return lambda: calls.append(k) or next(values[k])

    got = harness.interleaved({"a": case("a"), "b": case("b")}, 3)
    assert calls == ["a", "b"] * 3  # every case once per round
    assert got == {"a": [3.0, 1.0, 2.0], "b": [10.0, 30.0, 20.0]}
    assert harness.medians(got) == {"a": 2.0, "b": 20.0}
    with pytest.raises(ValueError, match="at least 1"):
        harness.interleaved({"a": case("a")}, 0)


def test_harness_machine_identity():
    m = harness.machine()
    assert m["cpu"] and m["cores"] >= 1 and m["versions"]["python"] == sys.version.split()[0]
    assert "numpy" in m["versions"] and set(m["cpu_flags"]) <= {"avx2", "avx512f", "avx512_vnni", "avx_vnni",
                                                                 "amx_int8", "neon"}


def test_harness_pins_to_a_core():
    import os

    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no sched_setaffinity here")
    before = os.sched_getaffinity(0)
    core = min(before)
    try:
        assert harness.pin([core]) == [core] and os.sched_getaffinity(0) == {core}
        assert harness.pinned_cores() == ([core] if (os.cpu_count() or 1) > 1 else None)
    finally:
        os.sched_setaffinity(0, before)


def test_harness_writes_json_table_and_plot(tmp_path):
    import json

    drawn = []
    table = harness.markdown_table([[1, "x"], [2, "y"]], ["n", "name"])
    assert table.splitlines() == ["| n | name |", "|---|---|", "| 1 | x |", "| 2 | y |"]
    out = harness.write_result(tmp_path / "sub" / "r.json", {"command": "python -m benchmarks x", "v": 1},
                               table=table, plot=lambda png: drawn.append(png) or png.write_bytes(b"png"))
    assert json.loads(out.read_text()) == {"command": "python -m benchmarks x", "v": 1}
    assert (tmp_path / "sub" / "r.md").read_text() == table + "\n"
    assert drawn == [tmp_path / "sub" / "r.png"] and (tmp_path / "sub" / "r.png").is_file()


def test_harness_text_table_aligns_columns():
    """The terminal table: first column to the left, the others to the right, two spaces apart."""
    got = harness.text_table([["a", 1.5, "—"], ["longer", 10, "+2.0%"]], ["model", "ms", "error"])
    assert got.splitlines() == ["model    ms  error",
                                "------  ---  -----",
                                "a       1.5      —",
                                "longer   10  +2.0%"]
    assert harness.text_table([], ["x", "yy"]).splitlines() == ["x  yy", "-  --"]


@pytest.mark.parametrize("fp32,int8,stem,flags", [("cpu", "cpu_int8", "int8", []),
                                                   ("epyc_zen5", "epyc_zen5_int8", "int8_epyc_zen5", []),
                                                   ("cpu", "executorch_cpu", "runtimes_cpu_executorch_cpu",
                                                    ["--runtimes"])])
def test_bench_int8_divides_the_shipped_tables(tmp_path, fp32, int8, stem, flags):
    """bench_int8 measures nothing: its ratios are the int8 table over the fp32 table (with --runtimes,
    the second runtime's table over the first's)."""
    import json

    from nas.latency.tables.table import LatencyTable
    from nas.resources import tables_dir

    r = _bench("int8", "--out", str(tmp_path), "--targets", fp32, int8, *flags, timeout=300)
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / f"{stem}.json").read_text())
    assert (tmp_path / f"{stem}.png").is_file()
    f32 = LatencyTable.load(tables_dir() / f"{fp32}.json")
    i8 = LatencyTable.load(tables_dir() / f"{int8}.json")
    common = [k for k in f32.entries if k in i8.entries]
    assert rep["blocks"]["all"]["n"] == len(common)

    ratios = [i8.entries[k].median_ms / f32.entries[k].median_ms for k in common]
    assert rep["blocks"]["all"]["median"] == pytest.approx(float(np.median(ratios)))
    assert rep["blocks"]["all"]["share_le_bar"] == pytest.approx(float(np.mean(np.array(ratios) <= 0.6)))


_WITHOUT_MODELOPT = ("import runpy, sys; sys.modules['modelopt'] = None; "
                     "runpy.run_module('benchmarks', run_name='__main__')")


def test_bench_modelopt_help_needs_no_modelopt():
    """nvidia-modelopt is optional: the script explains itself without it."""
    r = forked.run([sys.executable, "-c", _WITHOUT_MODELOPT, "modelopt", "--help"], timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "usage:" in r.stdout and "--quick" in r.stdout


def test_bench_modelopt_without_modelopt_compares_the_hwnas_exports(tmp_path):
    """Without nvidia-modelopt the hwnas variants still run and are checked for TensorRT's form; the
    ModelOpt ones say why they did not."""
    import json

    out = tmp_path / "modelopt.json"
    r = forked.run([sys.executable, "-c", _WITHOUT_MODELOPT, "modelopt", "--seeds", "1", "--epochs", "1",
                    "--qat-epochs", "1", "--calib", "32", "--out", str(out)], timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    rep = json.loads(out.read_text())
    assert rep["modelopt"] is None and rep["tensorrt_speed"].startswith("not measured")
    (net,) = rep["networks"]
    for name in ("hwnas_ptq", "hwnas_qat"):
        v = net["variants"][name]
        assert v["status"] == "ok" and v["onnxruntime_cpu"] == "ok"
        f = v["format"]
        assert f["checker"] == "ok" and f["zero_points_int8_0"] and f["weights_per_channel"]
        assert f["bias"] == "float" and f["batchnorm_nodes"] == 0 and set(f["weights"]) == {"int8"}
        assert 0.0 <= v["top1"] <= 1.0 and 0.0 <= v["agree_fp32"] <= 1.0
    for name in ("modelopt_ptq", "modelopt_qat", "modelopt_onnx"):
        assert net["variants"][name]["status"] == "modelopt not installed"
    assert set(rep["summary"]) == {"hwnas_ptq", "hwnas_qat"}
    assert "hwnas_qat" in r.stdout


RESULTS = ROOT / "benchmarks" / "results"
QUOTING_DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "CONTRIBUTING.md"]


def _quoted_results() -> set[str]:
    """Every ``benchmarks/results/...`` path the docs name (a folder ends in ``/``; ``<target>`` stands
    for any one name)."""
    text = "\n".join(p.read_text() for p in QUOTING_DOCS if p.is_file())
    return {q.rstrip(".,") for q in re.findall(r"benchmarks/results/([\w./<>-]+)", text)}


def _quotes(quoted: str, path: str) -> bool:
    if quoted.endswith("/"):
        return path.startswith(quoted)
    pattern = re.sub(r"<[\w-]+>", r"[\\w-]+", re.escape(quoted).replace(r"\<", "<").replace(r"\>", ">"))
    return re.fullmatch(pattern, path) is not None


def _not_ignored(paths: list[Path]) -> list[Path]:
    """``paths`` less those git ignores (a benchmark's caches beside its results); all of them outside
    a git checkout."""
    r = subprocess.run(["git", "check-ignore", "--stdin"], input="\n".join(map(str, paths)), text=True,
                       capture_output=True, cwd=RESULTS)
    if r.returncode not in (0, 1):  # 1: none ignored; anything else: no git here
        return paths
    ignored = set(r.stdout.splitlines())
    return [p for p in paths if str(p) not in ignored]


def test_every_result_file_is_quoted_by_a_doc():
    """A result file stays only while a page quotes it (by its path, or its folder's); the caches git
    ignores are not results."""
    quoted = _quoted_results()
    files = sorted(p.relative_to(RESULTS).as_posix() for p in _not_ignored([p for p in RESULTS.rglob("*") if p.is_file()]))
    assert files
    assert [f for f in files if not any(_quotes(q, f) for q in quoted)] == []


def test_every_quoted_result_file_exists():
    """... in a fresh clone too: a quoted path git ignores (a benchmark's caches) is not there."""
    quoted = [RESULTS / q for q in _quoted_results() if "<" not in q and q]
    present = set(_not_ignored([p for p in quoted if p.exists()]))
    assert [p.relative_to(RESULTS).as_posix() for p in quoted if p not in present] == []
