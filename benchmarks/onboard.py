"""Onboarding a new device in a few minutes, simulated offline from the shipped tables.

Nothing is measured.  Leave one table out at a time (``--devices``; default: every shipped CPU
table in ``latency_tables/`` with held-out networks measured on its device).  For the held-out
table D, its budgeted profile (``nas.profile budget_min=N``) is simulated: the jobs ``plan_jobs``
would run (the calibration networks in ``nas.profile``'s order, ``calibration_order``: taken from
the space that has had the least measuring time so far, each space's from its smallest and
largest network on, spread over round 1; most used blocks first, ``block_frequency``) are taken
from D's table in that order until N simulated minutes are spent.  A job's simulated time is
the profiler's own cost model (``expected_seconds``: preparing and exporting it, then warm-up
and timed calls at D's measured latency), scaled per kind (block / network) to the measured
profiling run in ``benchmarks/results/profile.json`` (onnxruntime on the Xeon), and for another
runtime by its measured bundle time over onnxruntime's on the same blocks
(``bundle_xeon_<D>.json`` / ``bundle_xeon_cpu.json``).  A measured item takes D's figure.  A GPU
table is not held out: those scalings are a CPU's.

Scored on D's held-out networks (``predictor.json``'s points for the onnxruntime tables, the
``validate_<D>.json`` reports for the others; divided by the report's drift scale where it has
one), and on D's calibration networks the simulated profile did not reach:

(a) ``partial``   D's own predictor on the partial table the budget leaves;
(b) ``full``      D's predictor on its full table (the ceiling).

    python -m benchmarks onboard            # -> benchmarks/results/onboard.json, .md, .png
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks.harness import RESULTS, command, markdown_table, write_result
from benchmarks.predictor import TIMM_MODELS
from nas.latency.measure import ProfileSettings
from nas.latency.options import VALIDATION_SEED
from nas.latency.predictor import LatencyPredictor
from nas.latency.profile_jobs import expected_seconds, plan_jobs
from nas.latency.profiler import block_frequency, calibration_archs, calibration_order
from nas.latency.scoring import score
from nas.latency.table import LatencyTable
from nas.latency.validate import held_out_archs, held_out_pruned
from nas.resources import tables_dir
from nas.space import list_calibration_spaces, list_spaces, load_space
from nas.timm_arch import arch_from_spec, from_timm

MINUTES = (0.5, 1, 2, 5)
_FRONT = RESULTS / "fashion_front"  # the Arch files nas.validate measured beside the validate_<D>.json reports
_VALIDATE_MODELS = ("mobilenetv2_100", "lcnet_050")  # the timm models of those reports


def held_out_report(name: str) -> tuple[dict, str] | None:
    """D's held-out measurements: ``predictor.json``'s section for D, else ``validate_<D>.json``;
    with the file's name.  None where neither exists."""
    pred = json.loads((RESULTS / "predictor.json").read_text())
    if name in pred:
        return pred[name], "predictor.json"
    path = RESULTS / f"validate_{name}.json"
    return (json.loads(path.read_text()), path.name) if path.is_file() else None


def held_out(name: str, table: LatencyTable) -> tuple[list, np.ndarray, float, str]:
    """D's held-out networks as the report drew them, found again by digest among the seeded draws
    of every space, the timm models and the Arch files measured, with their measured latency
    divided by the report's drift scale (the machine's speed then over the table's: its
    calibration networks re-measured beside the held-out ones); that scale, and the file.
    No networks where no report exists."""
    got = held_out_report(name)
    if got is None:
        return [], np.zeros(0), 1.0, ""
    report, file = got
    drift = float((report.get("drift_scale") or {}).get("now_over_table", 1.0))
    points = {p["digest"]: p for p in report["points"]}
    seed = report.get("seed") or VALIDATION_SEED
    exclude = {a.digest() for a in table.networks}
    pool = []
    for sp in map(load_space, list_spaces()):
        pool += held_out_archs(sp, 150, exclude=exclude, seed=seed) + held_out_pruned(sp, 60, exclude=exclude, seed=seed)
    pool += [from_timm(m) for m in dict.fromkeys([*TIMM_MODELS, *_VALIDATE_MODELS])]
    pool += [arch_from_spec(str(p)) for p in sorted(_FRONT.glob("front_*.json"))]
    found = {}
    for a in pool:
        if a.digest() in points:
            found.setdefault(a.digest(), a)
    archs = list(found.values())
    if len(archs) < len(points):
        print(f"  {name}: {len(points) - len(archs)} of the {len(points)} networks of {file} not found again; "
              "scored on the rest")
    return archs, np.array([points[a.digest()]["measured_ms"] for a in archs]) / drift, drift, file


def time_factors(cpu: LatencyTable, settings: ProfileSettings) -> dict[str, float]:
    """Measured over modelled seconds per block and per network measurement, from the profiling
    run on the Xeon (``profile.json``: three spaces, 40 calibration networks each, 3 rounds)."""
    prof = json.loads((RESULTS / "profile.json").read_text())["spaces"]
    blocks_s = sum(s["blocks_s"] for s in prof.values())
    n_blocks = sum(s["unique_blocks"] * s["rounds"] for s in prof.values())
    nets_s = sum(s["networks_s"] for s in prof.values())
    n_nets = sum(s["calibration_networks"] * s["rounds"] for s in prof.values())
    r = settings.rounds
    model_b = np.mean([(expected_seconds(k, "block", settings, e.median_ms)
                        + (r - 1) * expected_seconds(k, "block", settings, e.median_ms, export=False)) / r
                       for k, e in cpu.entries.items()])
    model_n = np.mean([(expected_seconds(a, "network", settings, e.median_ms)
                        + (r - 1) * expected_seconds(a, "network", settings, e.median_ms, export=False)) / r
                       for a, e in cpu.networks.items()])
    return {"block": blocks_s / n_blocks / model_b, "network": nets_s / n_nets / model_n,
            "measured_s_per_block": blocks_s / n_blocks, "measured_s_per_network": nets_s / n_nets}


def runtime_scale(name: str) -> float:
    """How much longer D's runtime measures the same items than onnxruntime: the measured time of
    its bundle over the onnxruntime bundle's, on the Xeon (1 where D has no bundle)."""
    path = RESULTS / f"bundle_xeon_{name}.json"
    if not path.is_file() or name == "cpu":
        return 1.0
    return json.loads(path.read_text())["measure_s"] / json.loads((RESULTS / "bundle_xeon_cpu.json").read_text())["measure_s"]


def calibration_count(table: LatencyTable, spaces) -> int:
    """The ``calibration_networks`` ``table`` was profiled with: the most of a space's seeded
    calibration networks (``calibration_archs``) it holds (its pruned networks are other draws)."""
    n = max(Counter(a.name for a in table.networks).values(), default=0)
    return max((sum(a in table.networks for a in calibration_archs(sp, n)) for sp in spaces), default=0)


def simulated_profile(table: LatencyTable, settings: ProfileSettings, factors: dict,
                      scale: float = 1.0) -> tuple[list, np.ndarray]:
    """``plan_jobs``' order for ``table``'s blocks and networks on an empty table, and each job's
    cumulative simulated seconds.  The calibration networks come in ``nas.profile``'s order
    (``calibration_order``, a network's expected seconds from its figure in ``table``), the table's
    pruned networks (those that order does not draw) in their space's spread; any other follow."""
    spaces = {a.name for a in table.networks}
    sps = [sp for sp in map(load_space, list_spaces() + list_calibration_spaces()) if sp.name in spaces]
    freq = block_frequency(sps)
    empty = LatencyTable(dict(table.metadata))
    stores = {"block": table.entries, "network": table.networks}

    def seconds(a):  # None for a network the table lacks (a seeded one it never held, or of a space since redefined)
        e = table.networks.get(a)
        return expected_seconds(a, "network", settings, e.median_ms) if e is not None else None

    n = calibration_count(table, sps)
    seeded = {a for sp in sps for a in calibration_archs(sp, n)}
    names = {sp.name for sp in sps}
    pruned = [a for a in table.networks if a not in seeded and a.name in names]  # joins its space's spread
    drawn = calibration_order(sps, n, None, seconds=seconds, pruned=pruned)
    nets = [a for a in drawn if a in table.networks]
    taken = set(nets)
    nets += [a for a in table.networks if a not in taken]
    jobs = plan_jobs(list(table.entries), nets, empty, settings,
                     call_ms=lambda item, kind: stores[kind][item].median_ms, freq=freq)
    return jobs, np.cumsum([j.cost_s * factors[j.kind] * scale for j in jobs])


def partial_table(table: LatencyTable, jobs, done: int) -> LatencyTable:
    """``table`` as the first ``done`` jobs left it."""
    meta = {k: v for k, v in table.metadata.items() if k not in ("refresh", "recalibration")}
    part = LatencyTable(meta)
    for j in jobs[:done]:
        if j.kind == "block":
            part.entries[j.item] = table.entries[j.item]
        else:
            part.networks[j.item] = table.networks[j.item]
    return part


def run_device(name: str, tables: dict, settings: ProfileSettings, factors: dict, minutes) -> dict:
    """Leave ``name`` out: its simulated budgets, its predictor on each partial table scored."""
    table = tables[name]
    archs, meas, drift, file = held_out(name, table)
    scale = runtime_scale(name)
    jobs, cum = simulated_profile(table, settings, factors, scale)
    res = {"held_out_networks": len(archs), "held_out_file": file, "held_out_drift_scale": drift,
           "scored_on": "held_out" if archs else "calibration_rest", "runtime_time_scale": scale,
           "full_profile_min": float(cum[-1] / 60), "budgets": []}
    if archs:
        res["full"] = {"held_out": score(LatencyPredictor(refresh=False).fit(table).predict(archs), meas)}
    print(f"\n== held out: {name} ({table.metadata['device']['name']}, {table.metadata['runtime']['name']}, "
          f"{table.metadata['precision']}); {len(archs)} held-out networks "
          f"({file or 'none: scored on the calibration networks not reached'}, measured / {drift:.3f}); "
          f"time x{scale:.2f}; full simulated profile {res['full_profile_min']:.1f} min")
    for m in minutes:
        done = int(np.searchsorted(cum, m * 60, side="right"))
        part = partial_table(table, jobs, done)
        rest = [(a, e.median_ms) for a, e in table.networks.items() if a not in part.networks]
        mdl = LatencyPredictor(refresh=False).fit(part)
        s = {"held_out": score(mdl.predict(archs), meas)} if archs else {}
        if len(rest) > 1:
            s["calibration_rest"] = score(mdl.predict([a for a, _ in rest]), [ms for _, ms in rest])
        res["budgets"].append({"minutes": m, "blocks": len(part), "networks": len(part.networks),
                               "scores": {"partial": s}})
        print(f"{m:5g} min, {len(part)} blocks, {len(part.networks)} nets: partial "
              f"{100 * within(s, res['scored_on']):.1f}% within ±10%")
    return res


def within(scores: dict, on: str) -> float:
    """The fraction within ±10% on ``on`` (``held_out`` or ``calibration_rest``); nan if unscored."""
    return scores.get(on, {}).get("within_10pct", float("nan"))


def tables_md(out: dict) -> str:
    """The readable tables: per held-out table and budget, what the budget measured and its own
    predictor's held-out networks within ±10%; the full table's beside them."""
    mins = [f"{m:g}" for m in out["minutes"]]
    rows = []
    for d, r in out["devices"].items():
        cells = [f"({b['blocks']}, {b['networks']}) {100 * within(b['scores']['partial'], r['scored_on']):.1f}%"
                 for b in r["budgets"]]
        full = f"{100 * r['full']['held_out']['within_10pct']:.1f}%" if "full" in r else "-"
        rows.append([f"`{d}`", f"{r['held_out_networks']} ({r['scored_on']}, {r['held_out_file'] or '-'})",
                     *cells, full, f"{r['full_profile_min']:.1f}"])
    head = ["held out", "scored on", *[f"{m} min (blocks, nets)" for m in mins], "full table", "full profile (min)"]
    return (f"Offline simulation from the shipped tables (nothing measured). {out['command']}\n\n"
            "Within ±10%, the device's own predictor on the partial table each budget leaves:\n\n"
            + markdown_table(rows, head) + "\n")


def plot(out: dict, path: Path) -> None:
    """Within ±10% against the simulated minutes: the own partial table, one line per held-out
    table, its full table's level dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, (d, r) in enumerate(out["devices"].items()):
        color = f"C{i % 10}"
        mins = [b["minutes"] for b in r["budgets"]]
        ax.plot(mins, [100 * within(b["scores"]["partial"], r["scored_on"]) for b in r["budgets"]], "o-",
                color=color, label=d)
        if "full" in r:
            ax.axhline(100 * r["full"]["held_out"]["within_10pct"], color=color, ls=":", lw=0.8)
    mins = out["minutes"]
    ax.set(xscale="log", xlabel="simulated minutes of profiling", ylabel="held-out within ±10% (%)",
           title="offline simulation from the shipped tables (dotted: full table)")
    ax.set_xticks(mins, [f"{m:g}" for m in mins])
    ax.minorticks_off()
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def default_devices(tables: dict) -> list[str]:
    """Every shipped CPU table with held-out measurements."""
    return [d for d, t in tables.items() if held_out_report(d) is not None
            and (t.metadata.get("device") or {}).get("kind") != "gpu"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", nargs="+", help="shipped tables to hold out (default: every CPU table with "
                    "held-out measurements)")
    ap.add_argument("--minutes", type=float, nargs="+", default=list(MINUTES))
    ap.add_argument("--out", default=str(RESULTS / "onboard.json"))
    ap.add_argument("--replot", action="store_true", help="draw --out's plot again from its JSON, nothing else")
    args = ap.parse_args()
    if args.replot:
        plot(json.loads(Path(args.out).read_text()), Path(args.out).with_suffix(".png"))
        return
    tables = {p.stem: LatencyTable.load(p) for p in sorted(tables_dir().glob("*.json"))}
    devices = args.devices or default_devices(tables)
    unknown = [d for d in devices if d not in tables]
    if unknown:
        ap.error(f"--devices: no shipped table {unknown}; the shipped tables are {sorted(tables)}")
    m = tables["cpu"].metadata["measurement"]
    settings = ProfileSettings(warmup=m["warmup"], repeats=m["repeats"], min_time_s=m["min_time_s"], rounds=m["rounds"])
    factors = time_factors(tables["cpu"], settings)
    print(f"OFFLINE SIMULATION from the shipped tables: nothing measured; job times: the profiler's cost model "
          f"x{factors['block']:.2f} (blocks) / x{factors['network']:.2f} (networks), from profile.json")
    skipped = {d: "not in --devices" if args.devices else "no held-out measurements" if held_out_report(d) is None
               else "a GPU table (the simulated job times are a CPU's)" for d in tables if d not in devices}
    out = {"command": command("onboard"), "simulation": "offline, from the shipped tables (nothing measured)",
           "time_factors": factors, "minutes": list(args.minutes),
           "network_order": "nas.profile's calibration_order (by expected seconds, each space in spread_order)",
           "settings": {k: getattr(settings, k) for k in ("warmup", "repeats", "min_time_s", "rounds")},
           "not_held_out": skipped, "devices": {}}
    t0 = time.time()
    for d in devices:
        out["devices"][d] = run_device(d, tables, settings, factors, args.minutes)
    write_result(args.out, out, table=tables_md(out), plot=lambda p: plot(out, p))
    print(f"-> {args.out} (+ .md, .png; {time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
