"""Onboarding a new device in a few minutes, simulated offline from the shipped tables.

Nothing is measured.  Leave one table out at a time (``--devices``; default: every shipped table
in ``latency_tables/`` with held-out networks measured on its device and at least one other
table to transfer from).  For the held-out table D, its budgeted profile (``nas.profile
budget_min=N``) is simulated: the jobs ``plan_jobs`` would run (calibration networks taken in
turn from each space, as ``nas.profile`` lists them, spread over round 1; most used blocks first,
``block_frequency``) are taken from D's table in that order until N simulated minutes are spent.
A job's simulated time is the profiler's own cost model (``expected_seconds``: preparing and
exporting it, then warm-up and timed calls at D's measured latency), scaled per kind (block /
network) to the measured profiling run in ``benchmarks/results/profile.json`` (onnxruntime on the
Xeon), and for another runtime by its measured bundle time over onnxruntime's on the same
blocks (``bundle_xeon_<D>.json`` / ``bundle_xeon_cpu.json``).  A measured item takes D's figure.

Scored on D's held-out networks (``predictor.json``'s points for the onnxruntime tables, the
``validate_<D>.json`` reports for the others; divided by the report's drift scale where it has
one), and on D's calibration networks the simulated profile did not reach:

(a) ``partial``             D's own predictor on the partial table;
(b) ``transfer_<m>``        ``TransferPredictor`` (method m) from the other tables of the same
                            runtime and precision (what ``conf.transfer_from`` accepts), plus the
                            same partial table;
(b') ``transfer_any_<m>``   the same from every other table of the same precision and kind of
                            processor, whatever its runtime (the library refuses other runtimes:
                            the sources are relabelled, to see whether they would pay);
(c) ``full``                D's predictor on its full table (the ceiling).

Sources share the held-out table's precision: int8 blocks run other kernels (per-channel
quantized convolutions, requantization) whose speed does not follow the fp32 ones, so int8
tables transfer among int8 and fp32 among fp32.  Transfer earns its place if it adds at least
``NEEDED_POINTS`` held-out networks within ±10% at ``DECIDE_AT`` minutes or less, averaged over
the held-out tables (its best method, and the default ``stack``).

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
from nas.latency.profile_workflow import _round_robin
from nas.latency.profiler import block_frequency
from nas.latency.scoring import score
from nas.latency.table import LatencyTable
from nas.latency.transfer import METHODS, TransferPredictor, check_compatible
from nas.latency.validate import held_out_archs, held_out_pruned
from nas.resources import tables_dir
from nas.space import list_calibration_spaces, list_spaces, load_space
from nas.timm_arch import arch_from_spec, from_timm

MINUTES = (0.5, 1, 2, 5)
DECIDE_AT = 1.0  # minutes: the budgets the rule looks at are those up to this
NEEDED_POINTS = 5.0  # held-out networks within ±10%, in points, that transfer must add
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


def simulated_profile(table: LatencyTable, settings: ProfileSettings, factors: dict,
                      scale: float = 1.0) -> tuple[list, np.ndarray]:
    """``plan_jobs``' order for ``table``'s blocks and networks on an empty table, and each job's
    cumulative simulated seconds.  The networks go round-robin over the spaces, as ``nas.profile``
    lists them (``_round_robin``); those of the table that list does not draw follow."""
    spaces = {a.name for a in table.networks}
    sps = [sp for sp in map(load_space, list_spaces() + list_calibration_spaces()) if sp.name in spaces]
    freq = block_frequency(sps)
    empty = LatencyTable(dict(table.metadata))
    stores = {"block": table.entries, "network": table.networks}
    per_space = Counter(a.name for a in table.networks)
    drawn = _round_robin(sps, max(per_space.values(), default=1), None)
    nets = [a for a in drawn if a in table.networks]
    nets += [a for a in table.networks if a not in set(nets)]
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


def sources_for(name: str, tables: dict[str, LatencyTable]) -> tuple[list[str], list[str]]:
    """The tables D can transfer from: (same runtime and precision, as ``conf.transfer_from``
    accepts; every other table of the same precision and kind of processor)."""
    me = tables[name].metadata
    same_prec = [o for o, t in tables.items() if o != name and t.metadata.get("precision") == me.get("precision")
                 and (t.metadata.get("device") or {}).get("kind") == (me.get("device") or {}).get("kind")]
    native = []
    for o in same_prec:
        try:
            check_compatible(tables[name], tables[o])
            native.append(o)
        except ValueError:
            pass
    return native, same_prec


def relabelled(src: LatencyTable, like: LatencyTable) -> LatencyTable:
    """``src`` with ``like``'s runtime, precision, batch and threads in its metadata (its figures
    as they are): a source of another runtime the library would refuse."""
    meta = dict(src.metadata)
    for f in ("runtime", "precision", "batch", "threads"):
        meta[f] = like.metadata.get(f)
    return LatencyTable(meta, dict(src.entries), src.path, dict(src.networks))


def models_at(part: LatencyTable, tables: dict, name: str, native: list[str], every: list[str]) -> dict:
    """Every predictor scored at one budget, fitted on ``part``."""
    models = {"partial": LatencyPredictor(refresh=False).fit(part)}
    if len(part) == 0:  # nothing measured yet: transfer has no block to learn from
        return models
    sets = {"transfer": [tables[o] for o in native]}
    if every != native:
        sets["transfer_any"] = [relabelled(tables[o], tables[name]) for o in every]
    for prefix, srcs in sets.items():
        for meth in METHODS if srcs else ():
            models[f"{prefix}_{meth}"] = TransferPredictor(sources=srcs, method=meth, refresh=False).fit(part)
    return models


def run_device(name: str, tables: dict, settings: ProfileSettings, factors: dict, minutes) -> dict:
    """Leave ``name`` out: its simulated budgets, each predictor scored."""
    table = tables[name]
    native, every = sources_for(name, tables)
    archs, meas, drift, file = held_out(name, table)
    scale = runtime_scale(name)
    jobs, cum = simulated_profile(table, settings, factors, scale)
    res = {"held_out_networks": len(archs), "held_out_file": file, "held_out_drift_scale": drift,
           "scored_on": "held_out" if archs else "calibration_rest", "runtime_time_scale": scale,
           "sources_same_runtime": native, "sources_any_runtime": every,
           "full_profile_min": float(cum[-1] / 60), "budgets": []}
    if archs:
        res["full"] = {"held_out": score(LatencyPredictor(refresh=False).fit(table).predict(archs), meas)}
    print(f"\n== held out: {name} ({table.metadata['device']['name']}, {table.metadata['runtime']['name']}, "
          f"{table.metadata['precision']}); sources: same runtime {native or 'none'}, any runtime {every}; "
          f"{len(archs)} held-out networks ({file or 'none: scored on the calibration networks not reached'}, "
          f"measured / {drift:.3f}); time x{scale:.2f}; full simulated profile {res['full_profile_min']:.1f} min")
    for m in minutes:
        done = int(np.searchsorted(cum, m * 60, side="right"))
        part = partial_table(table, jobs, done)
        rest = [(a, e.median_ms) for a, e in table.networks.items() if a not in part.networks]
        row = {"minutes": m, "blocks": len(part), "networks": len(part.networks), "scores": {}}
        for key, mdl in models_at(part, tables, name, native, every).items():
            s = {"held_out": score(mdl.predict(archs), meas)} if archs else {}
            if len(rest) > 1:
                s["calibration_rest"] = score(mdl.predict([a for a, _ in rest]), [ms for _, ms in rest])
            row["scores"][key] = s
        res["budgets"].append(row)
        print(f"{m:5g} min, {len(part)} blocks, {len(part.networks)} nets: "
              + ", ".join(f"{k} {100 * within(v, res['scored_on']):.1f}%" for k, v in row["scores"].items()))
    return res


def within(scores: dict, on: str) -> float:
    """The fraction within ±10% on ``on`` (``held_out`` or ``calibration_rest``); nan if unscored."""
    return scores.get(on, {}).get("within_10pct", float("nan"))


def gains(out: dict, prefix: str) -> dict:
    """Per method and budget, the points within ±10% ``prefix`` adds over the partial table: per
    held-out table and their mean (over the tables that have the row)."""
    res: dict = {}
    for meth in METHODS:
        key = f"{prefix}_{meth}"
        per_min: dict = {}
        for d, r in out["devices"].items():
            for b in r["budgets"]:
                if key in b["scores"]:
                    g = 100 * (within(b["scores"][key], r["scored_on"]) - within(b["scores"]["partial"], r["scored_on"]))
                    per_min.setdefault(f"{b['minutes']:g}", {})[d] = g
        res[meth] = {m: {"per_device": v, "mean": float(np.mean(list(v.values())))} for m, v in per_min.items()}
    return res


def decide(out: dict) -> dict:
    """The rule: transfer stays if its best method, or the default ``stack``, adds at least
    ``NEEDED_POINTS`` on average at a budget of ``DECIDE_AT`` minutes or less."""
    res: dict = {"needed_points": NEEDED_POINTS, "decide_at_min": DECIDE_AT, "lines": []}
    for prefix in ("transfer", "transfer_any"):
        g = gains(out, prefix)
        if not any(g.values()):
            continue
        early = {meth: max(v["mean"] for m, v in per.items() if float(m) <= DECIDE_AT) for meth, per in g.items()}
        best = max(early, key=early.get)
        earns = max(early[best], early["stack"]) >= NEEDED_POINTS
        res[prefix] = {"gains": g, "best_method": best, "best_gain": early[best], "stack_gain": early["stack"],
                       "earns_its_place": earns}
        res["lines"].append(f"{prefix}: best method {best} adds {early[best]:+.1f} points at <= {DECIDE_AT:g} min "
                            f"(stack {early['stack']:+.1f}); needed {NEEDED_POINTS:g}: "
                            f"{'EARNS its place' if earns else 'does NOT earn its place'}")
    res["earns_its_place"] = any(res.get(p, {}).get("earns_its_place") for p in ("transfer", "transfer_any"))
    return res


def tables_md(out: dict) -> str:
    """The readable tables: per held-out table, within ±10% per predictor and budget; then the
    mean gains the decision reads."""
    parts = [f"Offline simulation from the shipped tables (nothing measured). {out['command']}\n"]
    for d, r in out["devices"].items():
        head = ["predictor"] + [f"{b['minutes']:g} min ({b['blocks']} blocks, {b['networks']} nets)" for b in r["budgets"]]
        keys = list(dict.fromkeys(k for b in r["budgets"] for k in b["scores"]))
        rows = [[k] + [f"{100 * within(b['scores'][k], r['scored_on']):.1f}%" if k in b["scores"] else "-"
                       for b in r["budgets"]] for k in keys]
        if "full" in r:
            rows.append(["full table"] + [f"{100 * r['full']['held_out']['within_10pct']:.1f}%"] * len(r["budgets"]))
        parts.append(f"**{d}** held out: {r['held_out_networks']} networks ({r['scored_on']}, {r['held_out_file']}); "
                     f"sources same runtime: {', '.join(r['sources_same_runtime']) or 'none'}; any runtime: "
                     f"{', '.join(r['sources_any_runtime'])}. Within ±10%:\n\n" + markdown_table(rows, head) + "\n")
    dec = out["decision"]
    for prefix in ("transfer", "transfer_any"):
        if prefix not in dec:
            continue
        g = dec[prefix]["gains"]
        mins = list(next(iter(g.values())))
        rows = [[f"{prefix}_{meth}"] + [f"{per[m]['mean']:+.1f}" for m in mins] for meth, per in g.items()]
        parts.append(f"Mean points within ±10% added over the own partial table ({prefix}):\n\n"
                     + markdown_table(rows, ["method"] + [f"{m} min" for m in mins]) + "\n")
    return "\n".join(parts + dec["lines"])


def plot(out: dict, path: Path) -> None:
    """Within ±10% against the simulated minutes: the own partial table, the default ``stack``
    transfer, the best method's, the full table; one panel per held-out table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    best = f"transfer_{out['decision'].get('transfer', {}).get('best_method', 'stack')}"
    n = len(out["devices"])
    cols = min(n, 4)
    fig, axes = plt.subplots((n + cols - 1) // cols, cols, figsize=(4.2 * cols, 3.4 * ((n + cols - 1) // cols)),
                             squeeze=False)
    for ax, (d, r) in zip(axes.flat, out["devices"].items()):
        mins = [b["minutes"] for b in r["budgets"]]
        for key, style in dict.fromkeys([("partial", "o-"), ("transfer_stack", "s-"), (best, "d-"),
                                          ("transfer_any_stack", "^--")]):
            if any(key in b["scores"] for b in r["budgets"]):
                ax.plot(mins, [100 * within(b["scores"].get(key, {}), r["scored_on"]) for b in r["budgets"]], style,
                        label=key)
        if "full" in r:
            ax.axhline(100 * r["full"]["held_out"]["within_10pct"], color="k", ls=":", label="full table")
        ax.set(xscale="log", xlabel="simulated minutes", ylabel="within ±10% (%)", title=f"held out: {d}", ylim=(0, 101))
        ax.set_xticks(mins, [f"{m:g}" for m in mins])
        ax.minorticks_off()
        ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.suptitle("offline simulation from the shipped tables", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def default_devices(tables: dict) -> list[str]:
    """Every shipped table with held-out measurements and at least one table to transfer from."""
    return [d for d in tables if held_out_report(d) is not None and sources_for(d, tables)[1]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", nargs="+", help="shipped tables to hold out (default: every one the benchmark "
                    "can score: held-out measurements and a table to transfer from)")
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
    skipped = {d: "no held-out measurements or no table to transfer from" for d in tables if d not in devices}
    out = {"command": command("onboard"), "simulation": "offline, from the shipped tables (nothing measured)",
           "time_factors": factors, "network_order": "round-robin over spaces (as nas.profile)",
           "settings": {k: getattr(settings, k) for k in ("warmup", "repeats", "min_time_s", "rounds")},
           "not_held_out": skipped, "devices": {}}
    t0 = time.time()
    for d in devices:
        out["devices"][d] = run_device(d, tables, settings, factors, args.minutes)
    out["decision"] = decide(out)
    print("\n" + "\n".join(out["decision"]["lines"]))
    write_result(args.out, out, table=tables_md(out), plot=lambda p: plot(out, p))
    print(f"-> {args.out} (+ .md, .png; {time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
