"""A table measured with another version of its runtime than the installed one gets a one-line note
saying whether that matters (nas.predict / nas.search / nas.validate print it; never an error)."""

import sys
from pathlib import Path

import forked

from nas.latency.predict.versions import runtime_note
from nas.machine import installed_version
from nas.resources import tables_dir
from nas.target import load_target

ORT = {"runtime": {"name": "onnxruntime", "version": "1.31.1"}}


def test_a_minor_release_apart_is_noted_with_how_to_check():
    note = runtime_note(load_target("cpu"), ORT, installed="1.32.0")
    assert note.startswith("note: the cpu table was measured with onnxruntime 1.31.1; 1.32.0 is installed here")
    assert "python -m nas.validate conf=cpu" in note and "\n" not in note


def test_a_patch_release_apart_is_noted_as_expected_to_hold():
    assert "expected to hold" in runtime_note(load_target("cpu"), ORT, installed="1.31.2")


def test_no_note_for_the_same_version_a_remote_device_or_an_unknown_runtime():
    assert runtime_note(load_target("cpu"), ORT, installed="1.31.1") is None
    assert runtime_note(load_target("cpu"), ORT, installed="1.31.1+cpu") is None
    assert runtime_note(load_target("jetson"), {"runtime": {"name": "tensorrt", "version": "8.6"}},
                        installed="10.3") is None  # the device runs its own runtime
    assert runtime_note(load_target("cpu"), {}, installed="1.32.0") is None


def test_installed_version_reads_the_distribution():
    import onnxruntime

    assert installed_version("onnxruntime") == onnxruntime.__version__
    assert installed_version("no-such-runtime") is None


def test_nas_predict_prints_the_note_when_the_versions_differ(tmp_path):
    import json


    table = json.loads((tables_dir() / "cpu.json").read_text())
    table["metadata"]["runtime"]["version"] = "0.1.0"
    (tmp_path / "old.json").write_text(json.dumps(table))
    r = forked.run([sys.executable, "-m", "nas.predict", "conf=cpu", f"conf.table={tmp_path / 'old.json'}",
                    "model=timm:mobilenetv2_100"], timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0, r.stderr
    assert f"note: the cpu table was measured with onnxruntime 0.1.0; {installed_version('onnxruntime')} is " \
           "installed here" in r.stdout
