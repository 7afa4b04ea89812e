"""Profiling benchmark: how long building a `cpu` table takes on this machine, per shipped space.

For each space, builds a fresh table in a temporary file with the profiler's default settings
(every unique block at the space's resolution, plus the calibration networks, in interleaved
rounds) and reports the time for blocks and networks, entries per minute and the fraction of
block measurements re-measured because their spread was too high.

    taskset -c 1 python -m benchmarks profile [--target cpu] [--spaces tiny mbv3 hybrid]
           [--calibration-networks 40] [--out benchmarks/results/profile.json]

Writes JSON and prints a table.  Clean figures want an idle core.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.harness import RESULTS, command, composed_target, machine, write_result
from nas.latency.profile.profiler import calibration_archs, new_metadata, profile_blocks, profile_networks
from nas.latency.runtimes.core import get_runtime
from nas.latency.runtimes.loop import ProfileSettings
from nas.latency.tables.table import LatencyTable
from nas.space import list_spaces, load_space


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--spaces", nargs="+", default=list_spaces())
    ap.add_argument("--calibration-networks", type=int, default=40)
    ap.add_argument("--out", default=str(RESULTS / "profile.json"))
    args = ap.parse_args()

    target = composed_target(args.target)
    runtime = get_runtime(target)
    settings = ProfileSettings()
    rows = {}
    for name in args.spaces:
        space = load_space(name)
        keys = space.unique_blocks(resolution=target.resolution)
        nets = calibration_archs(space, args.calibration_networks, resolution=target.resolution)
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "t.json"
            table = LatencyTable(metadata=new_metadata(target, runtime, settings), path=path)
            t0 = time.time()
            b = n = None
            for r in range(1, settings.rounds + 1):
                rb = profile_blocks(keys, runtime, table, settings=settings, path=path, progress=False, round_=r)
                rn = profile_networks(nets, runtime, table, settings=settings, path=path, progress=False, round_=r)
                b, n = (rb, rn) if b is None else (b.combine(rb), n.combine(rn))
            total = time.time() - t0
        rows[name] = {
            "unique_blocks": len(keys), "calibration_networks": len(nets), "rounds": settings.rounds,
            "total_s": total, "blocks_s": b.seconds, "networks_s": n.seconds,
            "block_measurements_per_min": b.entries_per_minute,
            "remeasured_fraction": b.remeasured / max(b.measured, 1),
        }
        r = rows[name]
        print(f"{name}: {r['unique_blocks']} blocks x {r['rounds']} rounds in {r['blocks_s']:.0f}s "
              f"({r['block_measurements_per_min']:.0f} block measurements/min, "
              f"{100 * r['remeasured_fraction']:.1f}% re-measured for noise); "
              f"{r['calibration_networks']} networks in {r['networks_s']:.0f}s; total {total / 60:.1f} min", flush=True)
    result = {"target": args.target, "runtime": runtime.info(), "settings": settings.__dict__, "spaces": rows}
    write_result(args.out, {"command": command("profile"), "machine": machine(), **result})
    print(f"{'space':8s} {'blocks':>7s} {'rounds':>7s} {'blocks s':>9s} {'meas/min':>9s} {'re-meas':>8s} "
          f"{'nets':>5s} {'nets s':>7s} {'total min':>10s}")
    for name, r in rows.items():
        print(f"{name:8s} {r['unique_blocks']:7d} {r['rounds']:7d} {r['blocks_s']:9.0f} "
              f"{r['block_measurements_per_min']:9.0f} {100 * r['remeasured_fraction']:7.1f}% "
              f"{r['calibration_networks']:5d} {r['networks_s']:7.0f} {r['total_s'] / 60:10.1f}")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
