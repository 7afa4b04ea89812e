"""Has the machine drifted since its table was built, and does the profiler's long process bias it?

Measures, on this machine, ``--networks`` of the table's own calibration networks three times
with the profiler's settings: (1) in this fresh process, (2) right after measuring ``--blocks``
of the table's blocks (as the profiler does between its rounds of networks), (3) once more.
Reports each pass against the table's figures and against pass 1:

  * pass 1 / table: how much faster or slower the machine runs now than when the table was built;
  * pass 2 / pass 1: whether a process that has just measured many blocks times networks differently;
  * pass 3 / pass 1: the noise between passes a few minutes apart.

    taskset -c 1 python -m benchmarks drift --target epyc_zen5

Writes ``benchmarks/results/drift_<target>.json`` and prints a table.  Only on the machine the table
names (it refuses another).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import RESULTS, command, machine, write_result
from nas.latency.runtimes.core import get_runtime
from nas.latency.runtimes.device import device_identity
from nas.latency.runtimes.loop import ProfileSettings
from nas.latency.runtimes.measure_model import measure_arch, measure_key
from nas.latency.tables.table import LatencyTable, resolve_table_path
from nas.target import load_target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="epyc_zen5")
    ap.add_argument("--networks", type=int, default=30)
    ap.add_argument("--blocks", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args()
    target = load_target(a.target)
    table = LatencyTable.load(resolve_table_path(target.table))
    table.check_target(target)
    why = table.measured_elsewhere(device_identity(table.metadata.get("device", {}).get("kind", "cpu")))
    if why:
        sys.exit(f"{a.target}: its table was measured on another machine ({why}); run this there")
    runtime, settings = get_runtime(target), ProfileSettings()
    rng = np.random.default_rng(a.seed)
    nets = list(table.networks.items())
    pick = [nets[i] for i in rng.choice(len(nets), min(a.networks, len(nets)), replace=False)]
    keys = list(table.entries)
    blocks = [keys[i] for i in rng.choice(len(keys), min(a.blocks, len(keys)), replace=False)]
    tab = np.array([e.median_ms for _, e in pick])

    def one_pass() -> np.ndarray:
        return np.array([measure_arch(arch, runtime, settings).median_ms for arch, _ in pick])

    t0 = time.time()
    p1 = one_pass()
    tb = time.time()
    for k in blocks:
        measure_key(k, runtime, settings)
    tb = time.time() - tb
    p2 = one_pass()
    p3 = one_pass()
    rows = {"pass 1 / table": p1 / tab, "pass 2 (after blocks) / pass 1": p2 / p1, "pass 3 / pass 1": p3 / p1}
    res = {
        "target": a.target, "table_updated": table.metadata.get("updated"),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "networks": len(pick), "blocks": len(blocks),
        "block_seconds": tb, "seconds": time.time() - t0,
        "ratios": {k: {"median": float(np.median(v)), "p10": float(np.percentile(v, 10)),
                       "p90": float(np.percentile(v, 90))} for k, v in rows.items()},
        "per_network_ms": [[float(x) for x in r] for r in zip(tab, p1, p2, p3)],
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"drift_{a.target}.json"
    write_result(path, {"command": command("drift"), "machine": machine(), **res})
    print(f"{a.target}: {len(pick)} calibration networks, {len(blocks)} blocks in between ({tb:.0f} s); "
          f"table last written {res['table_updated']}")
    print(f"{'ratio':34s} {'median':>7s} {'p10':>7s} {'p90':>7s}")
    for k, r in res["ratios"].items():
        print(f"{k:34s} {r['median']:7.3f} {r['p10']:7.3f} {r['p90']:7.3f}")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
