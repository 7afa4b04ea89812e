"""Device bundles for ExecuTorch (.pte programs) and OpenVINO (IR): written here, measured by the
standalone script in a subprocess (the runtime's package and numpy, nothing of hwnas), resumed,
and imported into a table of that runtime."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import forked
import pytest

from nas.latency.bundle.roundtrip import bundle_networks, import_bundle, write_bundle
from nas.latency.profile.profiler import calibration_archs
from nas.latency.runtimes.loop import ProfileSettings
from nas.space import load_space
from nas.target import load_target

FAST = ProfileSettings(warmup=1, repeats=3, min_time_s=0.0, max_spread=10.0, remeasure=0, rounds=1)
PACKAGES = {"executorch": "executorch.runtime", "openvino": "openvino"}
SUFFIX = {"executorch": ".pte", "openvino": ".xml"}


def _measure(bundle: Path, *args: str) -> subprocess.CompletedProcess:
    return forked.run([sys.executable, str(bundle / "measure_bundle.py"), *args], cwd=bundle, timeout=300)


@pytest.mark.parametrize("runtime", [pytest.param("executorch", marks=pytest.mark.slow), "openvino"])
def test_bundle_measured_by_the_script_imports_as_a_table(tmp_path, runtime):
    pytest.importorskip(PACKAGES[runtime])
    target = load_target(f"{runtime}_cpu")
    space = load_space("tiny")
    nets = calibration_archs(space, 2)  # one calibration network, one held out
    out = tmp_path / "b"
    write_bundle(space.unique_blocks()[:1], target, out, networks={"calibration": nets[:1], "held_out": nets[1:]},
                 settings=FAST, spaces=["tiny"], progress=False)
    man = json.loads((out / "manifest.json").read_text())
    files = [e["file"] for e in man["blocks"] + man["networks"]] + [man["overhead"]]
    assert man["runtime"] == runtime and all(f.endswith(SUFFIX[runtime]) and (out / f).is_file() for f in files)
    src = (out / "measure_bundle.py").read_text()
    assert "import torch" not in src and "from nas" not in src and "import nas" not in src

    if runtime == "openvino":  # the same script and loop for both: stopped part-way, continued by the next run
        first = _measure(out, "--limit", "2")
        assert first.returncode == 0, first.stderr
        assert "3 measurements left, 2 now" in first.stdout
        wrong = _measure(out, "--runtime", "onnxruntime")
        assert wrong.returncode == 1 and "holds .xml graphs, which onnxruntime does not run" in wrong.stderr
    again = _measure(out)
    assert again.returncode == 0, again.stderr
    assert "0 measurements left" in again.stdout

    table, rep = import_bundle(out / "results.json", target)
    assert rep["complete"] and not rep["mismatch"]
    assert len(table.entries) == 1 and len(table.networks) == 1
    assert table.metadata["runtime"]["name"] == runtime and table.metadata["call_overhead_ms"] > 0
    assert table.metadata["measurement"]["via"] == "device bundle"
    assert [a for a, ms in bundle_networks(out / "results.json")] == nets[1:]
