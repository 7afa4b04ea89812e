#!/usr/bin/env python
"""Device-bundle round trip: how well a table measured through a bundle predicts held-out networks.

Writes a bundle for a target (blocks, calibration and pruned networks of the spaces, plus
``--held-out`` networks for validation), measures it with ``measure_bundle.py`` run by a Python
that has numpy and onnxruntime but **no torch** (a venv made here, its packages linked from this
environment), imports the results and scores the imported table's predictor on the held-out
networks the same script measured (within ±5% / ±10%, MAPE, Kendall τ).  The same path a Jetson
or a board takes, run on this machine so it can be checked end to end.

    taskset -c 1 python scripts/bench_bundle.py [--spaces tiny] [--held-out 60] [--quick]
           [--out scripts/results/bundle.json]

``--quick`` uses short measurement settings (for a smoke run; its figures are noise-bound).
Writes JSON and prints a table.  Clean figures want an idle core.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CPU = {"name": "cpu_here", "runtime": "onnxruntime", "provider": "CPUExecutionProvider", "precision": "fp32",
       "batch": 1, "threads": 1, "latency_budget_ms": 10.0,
       "device": {"name": None, "kind": "cpu", "peak_gflops": 50.0, "mem_bandwidth_gbs": 10.0}}


def no_torch_python(root: Path) -> str:
    """A venv whose Python has numpy and onnxruntime (linked from this environment) and no torch: what a
    device without torch has.  Returns its interpreter."""
    import numpy as np

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next(root.glob("lib/python3*/site-packages"))
    src = Path(np.__file__).parent.parent
    for pkg in ("numpy", "numpy.libs", "onnxruntime"):
        if (src / pkg).exists():
            (site / pkg).symlink_to(src / pkg)
    py = str(root / "bin" / "python")
    r = subprocess.run([py, "-c", "import numpy, onnxruntime, importlib.util as u; print(u.find_spec('torch'))"],
                       capture_output=True, text=True)
    if r.returncode != 0 or r.stdout.strip() != "None":
        raise RuntimeError(f"could not make a Python with numpy + onnxruntime and no torch: {r.stderr.strip()}")
    return py


def round_trip(work: Path, *, spaces, settings, calibration_networks: int, pruned_networks: int,
               held_out: int) -> dict:
    """Bundle -> measured without torch -> imported -> scored on the bundle's held-out networks."""
    from nas.latency.bundle import bundle_networks
    from nas.latency.predictor import LatencyPredictor
    from nas.latency.profile_workflow import profile_target
    from nas.latency.scoring import score
    from nas.latency.table import LatencyTable

    py = no_torch_python(work / "venv")
    b = work / "bundle"
    t0 = time.time()
    profile_target(CPU, spaces=spaces, bundle=b, settings=settings, calibration_networks=calibration_networks,
                   pruned_networks=pruned_networks, held_out=held_out, progress=False, say=lambda line: None)
    t1 = time.time()
    r = subprocess.run([py, str(b / "measure_bundle.py")], cwd=b, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"measure_bundle.py failed: {r.stderr.strip()}")
    t2 = time.time()
    rep = profile_target(CPU, spaces=spaces, import_bundle=b / "results.json", out=work / "t.json",
                         calibration_networks=calibration_networks, pruned_networks=pruned_networks,
                         progress=False, say=lambda line: None)
    pred = LatencyPredictor().fit(LatencyTable.load(work / "t.json"))
    held = bundle_networks(b / "results.json")
    s = score(pred.predict([a for a, _ in held]), [ms for _, ms in held])
    return {"score": s, "blocks": rep["entries"], "calibration_networks": rep["networks"],
            "calibrated_on": pred.n_calibration_, "held_out": len(held), "write_s": t1 - t0,
            "measure_s": t2 - t1, "predictor": pred.describe()}


def main() -> None:
    from nas.latency.device import device_identity
    from nas.latency.measure import ProfileSettings

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spaces", nargs="+", default=["tiny"])
    ap.add_argument("--calibration-networks", type=int, default=30)
    ap.add_argument("--pruned-networks", type=int, default=10)
    ap.add_argument("--held-out", type=int, default=60)
    ap.add_argument("--quick", action="store_true", help="short measurement settings (smoke run)")
    ap.add_argument("--out", default=str(ROOT / "scripts" / "results" / "bundle.json"))
    args = ap.parse_args()
    settings = ProfileSettings(warmup=3, repeats=10, min_time_s=0.0, rounds=1) if args.quick else ProfileSettings()
    with tempfile.TemporaryDirectory() as d:
        res = round_trip(Path(d), spaces=args.spaces, settings=settings,
                         calibration_networks=args.calibration_networks, pruned_networks=args.pruned_networks,
                         held_out=args.held_out)
    res.update({"device": device_identity("cpu")["name"], "spaces": args.spaces, "quick": args.quick,
                "settings": {k: getattr(settings, k) for k in ("warmup", "repeats", "min_time_s", "rounds")}})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    s = res["score"]
    print(f"device bundle round trip on {res['device']} ({', '.join(args.spaces)}; measured by a Python without "
          f"torch; {res['blocks']} blocks, calibrated on {res['calibrated_on']} networks)")
    print("| held-out | within ±5% | within ±10% | MAPE | Kendall τ | write | measure |\n|---|---|---|---|---|---|---|")
    print(f"| {s['n']} | {100 * s['within_5pct']:.1f}% | {100 * s['within_10pct']:.1f}% | {s['mape']:.2f}% | "
          f"{s['kendall_tau']:.3f} | {res['write_s']:.0f} s | {res['measure_s']:.0f} s |")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
