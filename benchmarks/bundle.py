"""Device-bundle round trip: how well a table measured through a bundle predicts held-out networks.

Writes a bundle for a target (blocks, calibration and pruned networks of the spaces, plus
``--held-out`` networks for validation), measures it with ``measure_bundle.py`` run by a Python
that has numpy and the target's runtime but **no torch** (a venv made here, its packages linked
from this environment), imports the results and scores the imported table's predictor on the
held-out networks the same script measured (within ±5% / ±10%, MAPE, Kendall τ).  The same path a
Jetson or a board takes, run on this machine so it can be checked end to end.

    taskset -c 1 python -m benchmarks bundle [--target executorch_cpu_int8] [--spaces tiny]
           [--held-out 60] [--work DIR] [--table T.json] [--quick] [--out benchmarks/results/bundle.json]

``--target``: a target by name (``conf=`` of the commands; default: onnxruntime on this CPU, fp32).
onnxruntime and OpenVINO bundles are measured by a Python with numpy and that runtime only;
ExecuTorch's Python runtime imports torch itself, so its bundles are measured by this environment's
Python (the script still imports no hwnas).  ``--work DIR`` keeps the bundle, the results and the
imported table there: a bundle already written there is measured (continued where it stopped), not
written again, so the writing (CPU-heavy) and the measuring (wants an idle machine) can run apart.
``--table`` copies the imported table there.  ``--quick`` uses short measurement settings (a smoke
run; its figures are noise-bound).  Writes JSON and prints a table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks.harness import RESULTS, command, machine, write_result
from nas.config import ProfileAppConfig
from nas.latency.bundle.roundtrip import MEASURE_SETTINGS, bundle_networks
from nas.latency.predict.predictor import LatencyPredictor
from nas.latency.predict.scoring import score
from nas.latency.profile.workflow import profile_target
from nas.latency.runtimes.device import device_identity
from nas.latency.runtimes.loop import ProfileSettings
from nas.latency.tables.table import LatencyTable
from nas.target import Target, load_target

CPU = {"name": "cpu_here", "runtime": "onnxruntime", "provider": "CPUExecutionProvider", "precision": "fp32",
       "batch": 1, "threads": 1, "latency_budget_ms": 10.0,
       "device": {"name": None, "kind": "cpu", "peak_gflops": 50.0, "mem_bandwidth_gbs": 10.0}}


# what a device's Python has, per runtime: the packages linked into the measuring venv (None: this
# environment's Python measures, for a runtime whose Python package imports torch itself)
RUNTIME_PACKAGES = {"onnxruntime": ("numpy", "numpy.libs", "onnxruntime"),
                    "openvino": ("numpy", "numpy.libs", "openvino", "openvino_telemetry"),
                    "executorch": None}


def no_torch_python(root: Path, runtime: str = "onnxruntime") -> str:
    """A venv whose Python has numpy and ``runtime`` (linked from this environment) and no torch: what a
    device without torch has.  Returns its interpreter; this environment's for ExecuTorch (see above)."""
    if runtime not in RUNTIME_PACKAGES:
        raise ValueError(f"no measuring Python for runtime {runtime!r}: one of {', '.join(RUNTIME_PACKAGES)}")
    packages = RUNTIME_PACKAGES[runtime]
    if packages is None:
        return sys.executable
    py = root / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
        site = next(root.glob("lib/python3*/site-packages"))
        src = Path(np.__file__).parent.parent
        for pkg in packages:
            if (src / pkg).exists():
                (site / pkg).symlink_to(src / pkg)
    r = subprocess.run([str(py), "-c", f"import numpy, {runtime}, importlib.util as u; print(u.find_spec('torch'))"],
                       capture_output=True, text=True)
    if r.returncode != 0 or r.stdout.strip() != "None":
        raise RuntimeError(f"could not make a Python with numpy + {runtime} and no torch: {r.stderr.strip()}")
    return str(py)


def _bundle_differences(bundle: Path, target, settings, want: dict) -> list[str]:
    """How a bundle already written differs from the one asked for: its target, measurement settings
    and networks per role (from its manifest; it may not be measured yet)."""
    man = json.loads((bundle / "manifest.json").read_text())
    have = Counter(n["role"] for n in man["networks"])
    diffs = [f"{k} networks {have.get(k, 0)}, not {v}" for k, v in want.items() if have.get(k, 0) != v]
    if man.get("target") != target.name:
        diffs.append(f"target {man.get('target')!r}, not {target.name!r}")
    written = man.get("settings") or {}
    return diffs + [f"{k}={written.get(k)}, not {getattr(settings, k)}" for k in MEASURE_SETTINGS
                    if written.get(k) != getattr(settings, k)]


def write_or_reuse(target, b: Path, *, spaces, settings, calibration_networks: int, pruned_networks: int,
                   held_out: int) -> float:
    """Write the bundle into ``b`` unless one is there (then check it asks for these networks); its seconds."""
    want = {"calibration": calibration_networks, "pruned": pruned_networks, "held_out": held_out}
    if (b / "manifest.json").is_file():
        diffs = _bundle_differences(b, target, settings, want)
        if diffs:
            raise SystemExit(f"bench_bundle: {b} holds another bundle ({'; '.join(diffs)}): give another --work, "
                             "or the options it was written with")
        return 0.0
    t0 = time.time()
    profile_target(target, spaces=spaces, bundle=b, settings=settings, calibration_networks=calibration_networks,
                   pruned_networks=pruned_networks, held_out=held_out, progress=False, say=lambda line: None,
                   **_stems_and_heads())
    return time.time() - t0


def _stems_and_heads() -> dict:
    """The extra stems and heads ``nas.profile`` measures by default (``in_chans``, ``num_classes``)."""
    d = ProfileAppConfig()
    return {"in_chans": list(d.in_chans), "num_classes": list(d.num_classes)}


def round_trip(work: Path, *, target, spaces, settings, calibration_networks: int, pruned_networks: int,
               held_out: int) -> dict:
    """Bundle -> measured (without torch where the runtime allows) -> imported -> scored on the
    bundle's held-out networks."""
    py = no_torch_python(work / "venv", target.runtime)
    b = work / "bundle"
    write_s = write_or_reuse(target, b, spaces=spaces, settings=settings, calibration_networks=calibration_networks,
                             pruned_networks=pruned_networks, held_out=held_out)
    t1 = time.time()
    r = subprocess.run([py, str(b / "measure_bundle.py")], cwd=b, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"measure_bundle.py failed: {r.stderr.strip()[-2000:]}")
    t2 = time.time()
    (work / "t.json").unlink(missing_ok=True)
    rep = profile_target(target, spaces=spaces, import_bundle=b / "results.json", out=work / "t.json",
                         calibration_networks=calibration_networks, pruned_networks=pruned_networks,
                         progress=False, say=lambda line: None, **_stems_and_heads())
    pred = LatencyPredictor().fit(LatencyTable.load(work / "t.json"))
    held = bundle_networks(b / "results.json")
    s = score(pred.predict([a for a, _ in held]), [ms for _, ms in held])
    return {"score": s, "blocks": rep["entries"], "calibration_networks": rep["networks"],
            "calibrated_on": pred.n_calibration_, "held_out": len(held), "write_s": write_s,
            "measure_s": t2 - t1, "predictor": pred.describe(),
            "measured_by": "this environment's Python" if py == sys.executable else "a Python without torch"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=None, help="a target name (default: onnxruntime on this CPU, fp32)")
    ap.add_argument("--spaces", nargs="+", default=["tiny"])
    ap.add_argument("--calibration-networks", type=int, default=30)
    ap.add_argument("--pruned-networks", type=int, default=10)
    ap.add_argument("--held-out", type=int, default=60)
    ap.add_argument("--work", default=None, help="keep the bundle, results and table here (reused by a re-run)")
    ap.add_argument("--table", default=None, help="copy the imported table here")
    ap.add_argument("--quick", action="store_true", help="short measurement settings (smoke run)")
    ap.add_argument("--out", default=str(RESULTS / "bundle.json"))
    args = ap.parse_args()
    target = load_target(args.target) if args.target else Target.coerce(CPU)
    settings = ProfileSettings(warmup=3, repeats=10, min_time_s=0.0, rounds=1) if args.quick else ProfileSettings()
    with tempfile.TemporaryDirectory() as d:
        work = Path(args.work) if args.work else Path(d)
        work.mkdir(parents=True, exist_ok=True)
        res = round_trip(work, target=target, spaces=args.spaces, settings=settings,
                         calibration_networks=args.calibration_networks, pruned_networks=args.pruned_networks,
                         held_out=args.held_out)
        if args.table:
            Path(args.table).parent.mkdir(parents=True, exist_ok=True)
            Path(args.table).write_bytes((work / "t.json").read_bytes())
    res.update({"device": device_identity("cpu")["name"], "target": target.name, "runtime": target.runtime,
                "precision": target.precision, "spaces": args.spaces, "quick": args.quick,
                "settings": {k: getattr(settings, k) for k in ("warmup", "repeats", "min_time_s", "rounds")}})
    write_result(args.out, {"command": command("bundle"), "machine": machine(), **res})
    report(res, args.out)


def report(res: dict, out: str) -> None:
    """The readable table."""
    s = res["score"]
    print(f"device bundle round trip on {res['device']}: {res['target']} ({res['runtime']}, {res['precision']}; "
          f"{', '.join(res['spaces'])}; measured by {res['measured_by']}; {res['blocks']} blocks, "
          f"calibrated on {res['calibrated_on']} networks)")
    print("| held-out | within ±5% | within ±10% | MAPE | Kendall τ | write | measure |\n|---|---|---|---|---|---|---|")
    print(f"| {s['n']} | {100 * s['within_5pct']:.1f}% | {100 * s['within_10pct']:.1f}% | {s['mape']:.2f}% | "
          f"{s['kendall_tau']:.3f} | {res['write_s']:.0f} s | {res['measure_s']:.0f} s |")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
