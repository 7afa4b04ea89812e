"""How good is nas.profile's ETA early on: the whole job's expected time against the time it took.

Profiles one space into a temporary table the way ``nas.profile`` does (``plan_jobs``: every round
of every block and calibration network, each with its expected seconds from the target's roofline;
``run_jobs``: one progress bar whose total is the time so far plus the expected time left, each
kind rescaled by what its measurements took), records that total after every measurement, and
reports it at 5%, 10%, 25% and 50% of the real run time, as the error against the real total.

    taskset -c 1 python -m benchmarks profile_eta [--target cpu] [--space tiny] [--rounds 3]
           [--calibration-networks 20] [--limit 100] [--repeats 50] [--min-time-s 0.1]
           [--out benchmarks/results/profile_eta.json]

A benchmark, not a test: the figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchmarks.harness import RESULTS, command, composed_target, machine, write_result
from nas.latency.profile.jobs import plan_jobs, run_jobs
from nas.latency.profile.profiler import block_frequency, calibration_archs, new_metadata
from nas.latency.profile.workflow import call_ms_of
from nas.latency.runtimes.core import get_runtime
from nas.latency.runtimes.loop import ProfileSettings
from nas.latency.runtimes.measure_model import measure_overhead
from nas.latency.tables.table import LatencyTable
from nas.space import load_space

SHARES = (0.05, 0.10, 0.25, 0.50)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--space", default="tiny")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calibration-networks", type=int, default=20)
    ap.add_argument("--limit", type=int, default=None, help="at most this many blocks per round")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--min-time-s", type=float, default=0.1)
    ap.add_argument("--out", default=str(RESULTS / "profile_eta.json"))
    args = ap.parse_args()

    target = composed_target(args.target)
    runtime = get_runtime(target)
    settings = ProfileSettings(repeats=args.repeats, min_time_s=args.min_time_s, rounds=args.rounds)
    space = load_space(args.space)
    res = target.resolution
    keys = space.unique_blocks(resolution=res)
    nets = calibration_archs(space, args.calibration_networks, resolution=res)
    steps: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.json"
        table = LatencyTable(metadata=new_metadata(target, runtime, settings), path=path)
        table.metadata["call_overhead_ms"] = measure_overhead(runtime, settings)
        jobs = plan_jobs(keys, nets, table, settings, call_ms=call_ms_of(target, table.metadata.get("call_overhead_ms")),
                         freq=block_frequency([space], resolution=res), limit=args.limit)
        rep = run_jobs(jobs, runtime, table, settings, path=path, progress=False,
                       on_step=lambda elapsed, left: steps.append((elapsed, left)))
    total = rep.seconds
    at = {}
    for share in SHARES:
        elapsed, left = next(((e, v) for e, v in steps if e >= share * total), steps[-1])
        at[f"{share:.2f}"] = {"elapsed_s": elapsed, "expected_total_s": elapsed + left,
                              "error": (elapsed + left) / total - 1}
    # what each kind of measurement took against its plan, per round (round 1 exports each graph)
    ratios: dict[str, dict[str, float]] = {}
    prev = 0.0
    for job, (elapsed, _) in zip(rep.done, steps):
        r = ratios.setdefault(f"{job.kind} round {job.round}", {"planned_s": 0.0, "took_s": 0.0, "n": 0})
        r["planned_s"] += job.cost_s
        r["took_s"] += elapsed - prev
        r["n"] += 1
        prev = elapsed
    result = {"per_kind": ratios, "target": args.target, "space": args.space, "runtime": runtime.info(), "settings": settings.__dict__,
              "blocks": sum(j.kind == "block" for j in jobs), "networks": sum(j.kind == "network" for j in jobs),
              "total_s": total, "planned_s": rep.planned_s, "plan_error": rep.planned_s / total - 1, "at": at}
    write_result(args.out, {"command": command("profile_eta"), "machine": machine(), **result})
    print(f"{args.space} on {args.target}: {result['blocks']} block and {result['networks']} network measurements "
          f"({settings.rounds} round(s)) in {total:.0f}s; planned {rep.planned_s:.0f}s "
          f"({100 * result['plan_error']:+.0f}%)")
    print(f"{'at':>5s} {'elapsed s':>10s} {'ETA total s':>12s} {'error':>7s}")
    for share, a in at.items():
        ok = "" if abs(a["error"]) <= 0.25 else "  (off by more than 25%)"
        print(f"{float(share):5.0%} {a['elapsed_s']:10.1f} {a['expected_total_s']:12.1f} {100 * a['error']:+6.1f}%{ok}")
    for k, r in ratios.items():
        print(f"  {k}: {r['n']} measurements, planned {r['planned_s']:.1f}s, took {r['took_s']:.1f}s "
              f"(x{r['took_s'] / max(r['planned_s'], 1e-9):.2f})")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
