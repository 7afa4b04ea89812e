"""Onboarding a new device in a few minutes, simulated offline from the shipped tables.

Nothing is measured.  Leave one device out among those with full tables (``cpu``: Intel Xeon,
``epyc_zen5``: AMD EPYC Zen 5; both onnxruntime CPU fp32, 1 thread).  For the held-out device D,
its budgeted profile (``nas.profile budget_min=N``) is simulated: the jobs ``plan_jobs`` would
run (calibration networks spread over round 1, most used blocks first, ``block_frequency``) are
taken from D's table in that order until N simulated minutes are spent.  A job's simulated time
is the profiler's own cost model (``expected_seconds``: preparing and exporting it, then warm-up
and timed calls at D's measured latency), scaled per kind (block / network) to the measured
profiling run in ``benchmarks/results/profile.json``.  A measured item takes D's table figure.

Scored on D's held-out networks (``benchmarks/results/predictor_<D>.measurements.json``, as
``benchmarks/predictor.py`` measured them) and on D's calibration networks not in the simulated
profile:

(a) ``partial``      D's own predictor on the partial table;
(b) ``transfer_*``   ``TransferPredictor`` from the other device's full table + the same partial
                     table, one row per method;
(r) ``recalibrated`` the other device's predictor, calibrated on D's measured networks;
(c) ``full``         D's predictor on its full table (the ceiling; its calibration networks are
                     in-sample, so only its held-out score is comparable).

With two devices, "the other devices" of a held-out device is ONE device.

    python -m benchmarks onboard            # -> benchmarks/results/onboard.json, onboard.png
"""

from __future__ import annotations

import argparse
import json
import time
from itertools import zip_longest
from pathlib import Path

import numpy as np

from benchmarks.harness import RESULTS, command, write_result
from nas.latency.measure import ProfileSettings
from nas.latency.predictor import LatencyPredictor
from nas.latency.profile_jobs import expected_seconds, plan_jobs
from nas.latency.profiler import VALIDATION_SEED, block_frequency
from nas.latency.scoring import score
from nas.latency.table import LatencyTable, resolve_table_path
from nas.latency.transfer import METHODS, TransferPredictor
from nas.latency.validate import held_out_archs, held_out_pruned
from nas.space import list_calibration_spaces, list_spaces, load_space

DEVICES = ("cpu", "epyc_zen5")
MINUTES = (1, 2, 5, 10, 20)


def held_out(name: str, table: LatencyTable, timm: bool) -> tuple[list, np.ndarray, float]:
    """D's held-out networks as ``benchmarks/predictor.py`` drew them, with their measured latency
    (the points of ``predictor.json``, read back by digest), divided by the validation's drift
    scale where it measured one (the machine's speed then over the table's: its calibration
    networks re-measured beside the held-out ones), so that they describe the machine in the
    state its table was measured in; and that scale."""
    report = json.loads((RESULTS / "predictor.json").read_text())[name]
    drift = float((report.get("drift_scale") or {}).get("now_over_table", 1.0))
    points = {p["digest"]: p for p in report["points"]}
    seed = report.get("seed") or VALIDATION_SEED
    exclude = {a.digest() for a in table.networks}
    found = {}
    for sp in map(load_space, list_spaces()):
        for a in held_out_archs(sp, 150, exclude=exclude, seed=seed) + held_out_pruned(sp, 60, exclude=exclude, seed=seed):
            if a.digest() in points:
                found.setdefault(a.digest(), a)
    if timm:
        from benchmarks.predictor import TIMM_MODELS
        from nas.timm_arch import from_timm

        for m in TIMM_MODELS:
            a = from_timm(m)
            if a.digest() in points:
                found.setdefault(a.digest(), a)
    archs = list(found.values())
    return archs, np.array([points[a.digest()]["measured_ms"] for a in archs]) / drift, drift


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


def simulated_profile(table: LatencyTable, settings: ProfileSettings, factors: dict, *,
                      interleave: bool = False) -> tuple[list, np.ndarray]:
    """``plan_jobs``' order for ``table``'s blocks and networks on an empty table, and each job's
    cumulative simulated seconds.  The networks go in the table's order (``nas.profile``'s: space
    by space), or with ``interleave`` round-robin over the spaces (what a budgeted profile would
    gain if every space had calibration networks early)."""
    spaces = {a.name for a in table.networks}
    sps = [sp for sp in map(load_space, list_spaces() + list_calibration_spaces()) if sp.name in spaces]
    freq = block_frequency(sps)
    empty = LatencyTable(dict(table.metadata))
    stores = {"block": table.entries, "network": table.networks}
    nets = list(table.networks)
    if interleave:
        by: dict[str, list] = {}
        for a in nets:
            by.setdefault(a.name, []).append(a)
        nets = [a for group in zip_longest(*by.values()) for a in group if a is not None]
    jobs = plan_jobs(list(table.entries), nets, empty, settings,
                     call_ms=lambda item, kind: stores[kind][item].median_ms, freq=freq)
    return jobs, np.cumsum([j.cost_s * factors[j.kind] for j in jobs])


def partial_table(table: LatencyTable, jobs, done: int) -> LatencyTable:
    meta = {k: v for k, v in table.metadata.items() if k not in ("refresh", "recalibration")}
    part = LatencyTable(meta)
    for j in jobs[:done]:
        if j.kind == "block":
            part.entries[j.item] = table.entries[j.item]
        else:
            part.networks[j.item] = table.networks[j.item]
    return part


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, nargs="+", default=list(MINUTES))
    ap.add_argument("--no-timm", action="store_true", help="leave out the timm networks of the held-out sets")
    ap.add_argument("--interleave", action="store_true",
                    help="calibration networks round-robin over the spaces instead of space by space (nas.profile's order)")
    ap.add_argument("--out", default=str(RESULTS / "onboard.json"))
    args = ap.parse_args()
    tables = {d: LatencyTable.load(resolve_table_path(f"{d}.json")) for d in DEVICES}
    m = tables["cpu"].metadata["measurement"]
    settings = ProfileSettings(warmup=m["warmup"], repeats=m["repeats"], min_time_s=m["min_time_s"], rounds=m["rounds"])
    factors = time_factors(tables["cpu"], settings)
    print("OFFLINE SIMULATION from the shipped tables: nothing measured; budgets simulated with the profiler's "
          f"cost model x{factors['block']:.2f} (blocks) / x{factors['network']:.2f} (networks), the measured over "
          f"modelled time of the Xeon profiling run (profile.json: {factors['measured_s_per_block']:.3f} s per block "
          f"measurement, {factors['measured_s_per_network']:.3f} s per network measurement)")
    out = {"simulation": "offline, from the shipped tables (nothing measured)", "time_factors": factors,
           "network_order": "round-robin over spaces" if args.interleave else "space by space (as nas.profile)",
           "settings": {k: getattr(settings, k) for k in ("warmup", "repeats", "min_time_s", "rounds")},
           "devices": {}}
    t0 = time.time()
    for d in DEVICES:
        table = tables[d]
        others = [tables[o] for o in DEVICES if o != d]
        archs, meas, drift = held_out(d, table, not args.no_timm)
        full = LatencyPredictor(refresh=False).fit(table)
        jobs, cum = simulated_profile(table, settings, factors, interleave=args.interleave)
        res = {"held_out_networks": len(archs), "held_out_drift_scale": drift, "sources": [o for o in DEVICES if o != d],
               "full_profile_min": float(cum[-1] / 60), "budgets": []}
        res["full"] = {"held_out": score(full.predict(archs), meas)}
        print(f"\n== held out: {d} ({table.metadata['device']['name']}); source: {res['sources']} (ONE device); "
              f"{len(archs)} held-out networks (measured / {drift:.3f}, the validation's drift scale); "
              f"full simulated profile {res['full_profile_min']:.1f} min")
        print(f"{'min':>5s} {'blocks':>6s} {'nets':>5s} {'method':24s} {'±5%':>6s} {'±10%':>6s} {'MAPE':>6s} {'τ':>6s}"
              f" | rest of calibration nets: {'±10%':>6s} {'τ':>6s} {'n':>4s}")
        for minutes in args.minutes:
            done = int(np.searchsorted(cum, minutes * 60, side="right"))
            part = partial_table(table, jobs, done)
            rest = [(a, e.median_ms) for a, e in table.networks.items() if a not in part.networks]
            models = {"partial": LatencyPredictor(refresh=False).fit(part)}
            for meth in METHODS:
                models[f"transfer_{meth}"] = TransferPredictor(sources=others, method=meth, refresh=False).fit(part)
            if len(part.networks) >= 2:
                models["recalibrated"] = LatencyPredictor(refresh=False).fit(
                    others[0], networks=[(a, e.median_ms) for a, e in part.networks.items()])
            row = {"minutes": minutes, "blocks": len(part), "networks": len(part.networks), "scores": {}}
            for name, mdl in models.items():
                s = {"held_out": score(mdl.predict(archs), meas)}
                if rest:
                    s["calibration_rest"] = score(mdl.predict([a for a, _ in rest]), [ms for _, ms in rest])
                row["scores"][name] = s
                h, c = s["held_out"], s.get("calibration_rest", {})
                print(f"{minutes:5g} {len(part):6d} {len(part.networks):5d} {name:24s} {100 * h['within_5pct']:5.1f}% "
                      f"{100 * h['within_10pct']:5.1f}% {h['mape']:5.2f}% {h['kendall_tau']:6.3f} | "
                      f"{100 * c.get('within_10pct', float('nan')):25.1f}% {c.get('kendall_tau', float('nan')):6.3f} "
                      f"{c.get('n', 0):4d}")
            res["budgets"].append(row)
        f = res["full"]["held_out"]
        print(f"{'all':>5s} {len(table):6d} {len(table.networks):5d} {'full':24s} {100 * f['within_5pct']:5.1f}% "
              f"{100 * f['within_10pct']:5.1f}% {f['mape']:5.2f}% {f['kendall_tau']:6.3f}")
        out["devices"][d] = res
    # the method picked: best mean held-out within ±10% over both held-out devices and every budget
    mean = {meth: float(np.mean([b["scores"][f"transfer_{meth}"]["held_out"]["within_10pct"]
                                 for r in out["devices"].values() for b in r["budgets"]])) for meth in METHODS}
    out["method_mean_within_10pct"] = mean
    out["chosen_method"] = max(mean, key=mean.get)
    print("\nmean held-out within ±10% per transfer method: "
          + ", ".join(f"{k} {100 * v:.1f}%" for k, v in mean.items()) + f" -> {out['chosen_method']}")
    out["goal"] = goal(out)
    for line in out["goal"]["lines"]:
        print(line)
    write_result(args.out, {"command": command("onboard"), **out})
    plot(out, Path(args.out).with_suffix(".png"))
    print(f"-> {args.out}, {Path(args.out).with_suffix('.png')} ({time.time() - t0:.0f} s)")


def goal(out: dict) -> dict:
    """The users' goal for a device never seen (>= 95% of held-out networks within ±10% after <= 5
    minutes, >= 99% after <= 10, τ >= 0.95), checked for the chosen transfer method per device at
    the largest simulated budget within each limit."""
    name = f"transfer_{out['chosen_method']}"
    res: dict = {"method": name, "lines": []}
    for d, r in out["devices"].items():
        got = {}
        for minutes, need in ((5, 0.95), (10, 0.99)):
            rows = [b for b in r["budgets"] if b["minutes"] <= minutes]
            best = max(rows, key=lambda b: b["minutes"])["scores"][name]["held_out"] if rows else None  # budget_min=minutes
            got[f"{minutes}_min"] = best and {"within_10pct": best["within_10pct"], "kendall_tau": best["kendall_tau"],
                                              "met": bool(best["within_10pct"] >= need and best["kendall_tau"] >= 0.95)}
            if best:
                res["lines"].append(
                    f"goal {d}, <= {minutes} min: {100 * best['within_10pct']:.1f}% within ±10% (need {100 * need:.0f}%), "
                    f"τ {best['kendall_tau']:.3f}: {'MET' if got[f'{minutes}_min']['met'] else 'NOT MET'} "
                    f"(own full table: {100 * r['full']['held_out']['within_10pct']:.1f}%)")
        res[d] = got
    return res


def plot(out: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    best = f"transfer_{out['chosen_method']}"
    fig, axes = plt.subplots(1, len(out["devices"]), figsize=(5.5 * len(out["devices"]), 4), squeeze=False)
    for ax, (d, r) in zip(axes[0], out["devices"].items()):
        mins = [b["minutes"] for b in r["budgets"]]
        for name, style in (("partial", "o-"), (best, "s-"), ("recalibrated", "^--")):
            ys = [100 * b["scores"][name]["held_out"]["within_10pct"] if name in b["scores"] else np.nan
                  for b in r["budgets"]]
            ax.plot(mins, ys, style, label={"partial": "(a) own partial table", "recalibrated":
                                            "other device, recalibrated"}.get(name, f"(b) {name}"))
        ax.axhline(100 * r["full"]["held_out"]["within_10pct"], color="k", ls=":", label="(c) own full table")
        ax.set(xscale="log", xlabel="simulated profiling minutes", ylabel="held-out networks within ±10% (%)",
               title=f"held out: {d} (source: {', '.join(r['sources'])})", ylim=(0, 101))
        ax.set_xticks(mins, [f"{m:g}" for m in mins])
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("offline simulation from the shipped tables", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
