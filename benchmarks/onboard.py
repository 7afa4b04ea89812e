"""Onboarding a new device in a few minutes, simulated offline from the shipped tables.

Nothing is measured.  Leave one table out at a time (``--devices``; default: every shipped CPU
table with held-out networks measured on its device; a GPU table's job times are not a CPU's).
For the held-out table D, ``nas.profile budget_min=N`` is simulated: the jobs ``plan_jobs`` would
run (calibration networks in ``nas.profile``'s ``calibration_order``, most used blocks first) are
taken from D's table until N simulated minutes are spent.  A job's time is the profiler's cost
model (``expected_seconds``) scaled per kind to the measured profiling run of ``profile.json``
(onnxruntime on the Xeon), and for another runtime by its measured bundle time over onnxruntime's
(``bundle_xeon_<D>.json`` / ``bundle_xeon_cpu.json``).  A measured item takes D's figure.  D's own
predictor on the partial table each budget leaves (and on its full table, the ceiling) is scored
on D's held-out networks (``predictor.json``'s points, else ``validate_<D>.json``'s), overall, for
the ``tiny`` groups and under 1 ms, and on D's calibration networks the budget did not reach.

Before and after, leave one processor out.  Every setting of ``SETTINGS`` (the budget's network
order, whether the calibration-only spaces' networks are measured, the predictor's network
residual) is simulated on every table; D gets the one that scores best on the tables of the
*other* processors (a processor's tables, the Xeon's onnxruntime, ExecuTorch and OpenVINO ones
say, are held out together), so nothing D is scored on chose it:

* **before**: the default setting, the held-out figures divided by the validation's one drift
  scale (the table's calibration networks re-measured beside them, all spaces together);
* **after**: the setting picked without D, the held-out figures divided by the drift of the
  network's own space where that validation re-measured at least ``RELIABLE_DRIFT`` of the space's
  calibration networks (an ideal refresh on the fly, ``nas.latency.profile.refresh``: each space by its own
  factor), without the networks whose rounds disagree by more than ±10% (``nas.validate`` leaves
  them out; judged on the report's measurement cache where it is shipped).

    python -m benchmarks onboard            # -> benchmarks/results/onboard.json, .md, .png
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib
import numpy as np

from benchmarks.harness import RESULTS, command, markdown_table, write_result
from benchmarks.predictor import TIMM_MODELS
from nas.latency.predict.predictor import LatencyPredictor
from nas.latency.predict.scoring import score
from nas.latency.profile.jobs import expected_seconds, plan_jobs
from nas.latency.profile.options import VALIDATION_SEED
from nas.latency.profile.profiler import block_frequency, calibration_archs, calibration_order
from nas.latency.profile.repeatability import repeatability
from nas.latency.profile.validate import held_out_archs, held_out_pruned
from nas.latency.runtimes.loop import ProfileSettings
from nas.latency.tables.table import LatencyTable
from nas.resources import tables_dir
from nas.space import list_calibration_spaces, list_spaces, load_space
from nas.timm_arch import arch_from_spec, from_timm

matplotlib.use("Agg")  # headless: the backend is set before pyplot is imported
import matplotlib.pyplot as plt  # noqa: E402

MINUTES = (0.5, 1, 2, 5)
SELECT_MINUTES = (1, 2, 5)  # the budgets a setting is picked on (the other processors' tables)
RELIABLE_DRIFT = 10  # a space's drift measured on at least this many of its calibration networks: its own factor
_FRONT = RESULTS / "fashion_front"  # the Arch files nas.validate measured beside the validate_<D>.json reports
_VALIDATE_MODELS = ("mobilenetv2_100", "lcnet_050")  # the timm models of those reports


@dataclass(frozen=True)
class Setting:
    """One onboarding setting the leave-one-processor-out choice picks among."""

    order: str = "time"  # calibration_order by expected seconds ("time") or one network of each space in turn ("turns")
    calibration_spaces: bool = True  # the calibration-only spaces' networks measured (where the table holds them)
    residual: bool = True  # the predictor's network residual

    @property
    def name(self) -> str:
        return (f"order={self.order},calibration_spaces={str(self.calibration_spaces).lower()},"
                f"residual={str(self.residual).lower()}")


DEFAULT = Setting()  # what nas.profile and the predictor do
SETTINGS = tuple(Setting(o, c, r) for o, c, r in itertools.product(("time", "turns"), (True, False), (True, False)))


@dataclass
class HeldOut:
    """D's held-out networks with their measurements and the drift each is divided by."""

    archs: list
    measured_ms: np.ndarray
    groups: list[str]
    drift: np.ndarray  # before: the validation's one drift scale
    drift_by_space: np.ndarray  # after: the network's own space's, where measured on enough networks
    file: str
    repeatable: np.ndarray  # after: scored; False where its rounds disagree by more than ±10% (nas.validate's rule)


def held_out_report(name: str) -> tuple[dict, str] | None:
    """D's held-out measurements: ``predictor.json``'s section for D, else ``validate_<D>.json``;
    with the file's name.  None where neither exists."""
    pred = json.loads((RESULTS / "predictor.json").read_text())
    if name in pred:
        return pred[name], "predictor.json"
    path = RESULTS / f"validate_{name}.json"
    return (json.loads(path.read_text()), path.name) if path.is_file() else None


def held_out(name: str, table: LatencyTable) -> HeldOut:
    """D's held-out networks as the report drew them (found again by digest among the seeded draws of
    every space, the timm models and the Arch files measured), their measured latency and the drift
    to divide it by (``HeldOut``).  No networks where no report exists."""
    got = held_out_report(name)
    if got is None:
        return HeldOut([], np.zeros(0), [], np.ones(0), np.ones(0), "", np.ones(0, bool))
    report, file = got
    drift = float((report.get("drift_scale") or {}).get("now_over_table", 1.0))
    own = {g: d["now_over_table"] for g, d in (report.get("drift") or {}).items() if d.get("n", 0) >= RELIABLE_DRIFT}
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
    return HeldOut(archs, np.array([points[a.digest()]["measured_ms"] for a in archs]),
                   [points[a.digest()]["group"] for a in archs], np.full(len(archs), drift),
                   np.array([own.get(a.name, drift) for a in archs]), file, repeatable(file, name, archs))


def repeatable(file: str, name: str, archs: list) -> np.ndarray:
    """Which held-out networks ``nas.validate`` would score (``nas.latency.profile.repeatability``): judged on
    the rounds of the report's measurement cache (``predictor_<D>.measurements.json`` /
    ``validate_<D>.measurements.json``), all of them where there is none."""
    cache = RESULTS / (f"predictor_{name}.measurements.json" if file == "predictor.json" else
                       f"validate_{name}.measurements.json")
    if not cache.is_file():
        return np.ones(len(archs), bool)
    rounds = json.loads(cache.read_text())["rounds_ms"]
    if not all(a.digest() in rounds for a in archs):
        return np.ones(len(archs), bool)
    return np.array(repeatability([rounds[a.digest()] for a in archs]).repeatable, bool)


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
                      scale: float = 1.0, *, setting: Setting = DEFAULT) -> tuple[list, np.ndarray]:
    """``plan_jobs``' order for ``table``'s blocks and networks on an empty table, and each job's
    cumulative simulated seconds.  The calibration networks come in ``nas.profile``'s order
    (``calibration_order``, a network's expected seconds from its figure in ``table``; with
    ``setting.order == "turns"`` one of each space in turn), the table's pruned networks (those that
    order does not draw) in their space's spread; any other follow.  Without
    ``setting.calibration_spaces`` the calibration-only spaces' networks are left out (their blocks
    stay, measured last: no search space's network uses them)."""
    spaces = {a.name for a in table.networks}
    extra = {load_space(n).name for n in list_calibration_spaces()}
    if not setting.calibration_spaces:
        spaces -= extra
    sps = [sp for sp in map(load_space, list_spaces() + list_calibration_spaces()) if sp.name in spaces]
    freq = block_frequency(sps)
    empty = LatencyTable(dict(table.metadata))
    stores = {"block": table.entries, "network": table.networks}

    def seconds(a):  # None for a network the table lacks (a seeded one it never held, or of a space since redefined)
        e = table.networks.get(a)
        return expected_seconds(a, "network", settings, e.median_ms) if e is not None else None

    def turns(a):  # one network of each space in turn (still None for one the table lacks)
        return None if a not in table.networks else 1.0

    n = calibration_count(table, sps)
    seeded = {a for sp in sps for a in calibration_archs(sp, n)}
    names = {sp.name for sp in sps}
    pruned = [a for a in table.networks if a not in seeded and a.name in names]  # joins its space's spread
    drawn = calibration_order(sps, n, None, seconds=seconds if setting.order == "time" else turns, pruned=pruned)
    nets = [a for a in drawn if a in table.networks]
    taken = set(nets)
    nets += [a for a in table.networks if a not in taken and a.name in spaces]
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


def scores(pred: np.ndarray, meas: np.ndarray, groups: list[str]) -> dict:
    """``score`` of all held-out networks, of the ``tiny`` groups (``tiny``, ``tiny pruned``) and of
    those measured under 1 ms (absent where there are none); shares and MAPE to 4 digits."""
    def short(s: dict) -> dict:
        return {k: round(s[k], 4) if k != "n" else s[k] for k in ("within_5pct", "within_10pct", "mape", "n")}

    out = {"all": short(score(pred, meas))}
    for key, sel in (("tiny", np.array([g.startswith("tiny") for g in groups], bool)), ("under_1ms", meas < 1.0)):
        if sel.any():
            out[key] = short(score(pred[sel], meas[sel]))
    return out


def run_plan(table: LatencyTable, ho: HeldOut, settings: ProfileSettings, factors: dict, scale: float, minutes,
             setting: Setting) -> dict[bool, dict]:
    """One budget order on one held-out table, with and without the network residual (keyed by
    ``residual``): each budget's partial table, its predictor scored before (one drift scale) and after
    (each space's own), and on the calibration networks not reached.  One fit serves both: the
    residual is fitted after the linear calibration and changes nothing of it."""
    jobs, cum = simulated_profile(table, settings, factors, scale, setting=setting)
    res = {r: {"full_profile_min": float(cum[-1] / 60), "budgets": []} for r in (True, False)}
    for m in [*minutes, None]:
        done = len(jobs) if m is None else int(np.searchsorted(cum, m * 60, side="right"))
        part = partial_table(table, jobs, done)
        mdl = LatencyPredictor(refresh=False).fit(part)
        rest = [(a, e.median_ms) for a, e in table.networks.items() if a not in part.networks]
        for residual in (True, False):
            if not residual:
                mdl.residual_ = None  # the same predictor as LatencyPredictor(residual=False) fits
            row = {"minutes": m, "blocks": len(part), "networks": len(part.networks)}
            if ho.archs:
                pred = mdl.predict(ho.archs)
                row["before"] = scores(pred, ho.measured_ms / ho.drift, ho.groups)
                k = ho.repeatable
                row["after"] = scores(pred[k], (ho.measured_ms / ho.drift_by_space)[k],
                                      [g for g, ok in zip(ho.groups, k) if ok])
                row["left_out"] = int((~k).sum())
            if len(rest) > 1:
                row["calibration_rest"] = {k: round(v, 4) for k, v in
                                           score(mdl.predict([a for a, _ in rest]), [ms for _, ms in rest]).items()}
            if m is None:
                res[residual]["full"] = row
            else:
                res[residual]["budgets"].append(row)
    return res


def effective(setting: Setting, table: LatencyTable) -> Setting:
    """``setting`` as it acts on ``table``: the order is moot for a table of one space, the
    calibration-only spaces for a table without their networks (those settings simulate alike)."""
    names = {a.name for a in table.networks}
    extra = {load_space(n).name for n in list_calibration_spaces()}
    return Setting("time" if len(names) < 2 else setting.order, setting.calibration_spaces or not (names & extra),
                   True)


def run_device(name: str, tables: dict, settings: ProfileSettings, factors: dict, minutes, grid=SETTINGS) -> dict:
    """Leave ``name`` out: every setting of ``grid``, its simulated budgets, its predictor on each
    partial table scored."""
    table = tables[name]
    ho = held_out(name, table)
    scale = runtime_scale(name)
    res = {"held_out_networks": len(ho.archs), "held_out_file": ho.file,
           "held_out_drift_scale": float(ho.drift[0]) if len(ho.drift) else 1.0,
           "held_out_left_out": int((~ho.repeatable).sum()),
           "held_out_drift_by_space": sorted({(a.name, float(d)) for a, d in zip(ho.archs, ho.drift_by_space)
                                              if d != ho.drift[0]}),
           "processor": processor(table), "scored_on": "held_out" if ho.archs else "calibration_rest",
           "runtime_time_scale": scale, "settings": {}, "acts_as": {}}
    print(f"\n== held out: {name} ({table.metadata['device']['name']}, {table.metadata['runtime']['name']}, "
          f"{table.metadata['precision']}); {len(ho.archs)} held-out networks "
          f"({ho.file or 'none: scored on the calibration networks not reached'}); time x{scale:.2f}")
    plans: dict[Setting, dict[bool, dict]] = {}
    for st in grid:
        key = effective(st, table)
        if key not in plans:
            plans[key] = run_plan(table, ho, settings, factors, scale, minutes, key)
        res["settings"][st.name] = plans[key][st.residual]
        res["acts_as"][st.name] = Setting(key.order, key.calibration_spaces, st.residual).name
        line = ", ".join(f"{b['minutes']:g} min {100 * within(b, res['scored_on'], 'after'):.1f}%"
                         for b in res["settings"][st.name]["budgets"])
        print(f"  {st.name}: {line} within ±10% (after)", flush=True)
    return res


def result(r: dict, name: str) -> dict:
    """A held-out table's results for the setting ``name`` (following ``same_as``: a setting that acts
    on the table as another, stored once)."""
    got = r["settings"][name]
    return r["settings"][got["same_as"]] if "same_as" in got else got


def compact(out: dict) -> dict:
    """``out`` with each setting that acts on its table as another stored as ``{"same_as": <that one>}``."""
    devs = {}
    for d, r in out["devices"].items():
        sets = {n: ({"same_as": r["acts_as"][n]} if r["acts_as"].get(n, n) != n else v)
                for n, v in r["settings"].items()}
        devs[d] = {**r, "settings": sets}
    return {**out, "devices": devs}


def within(row: dict, on: str, when: str = "before", group: str = "all") -> float:
    """A budget row's fraction within ±10% on ``on`` (``held_out``: of ``group``, ``before`` or
    ``after``; ``calibration_rest``); nan if unscored."""
    if on == "calibration_rest":
        return row.get("calibration_rest", {}).get("within_10pct", float("nan"))
    return row.get(when, {}).get(group, {}).get("within_10pct", float("nan"))


def processor(table: LatencyTable) -> str:
    """The processor a table was measured on (its device's name): tables of one processor are held
    out together."""
    return str((table.metadata.get("device") or {}).get("name", "?"))


def selection_score(res: dict) -> float:
    """What a setting is picked by on one table: the mean, over ``SELECT_MINUTES``, of the held-out
    networks within ±10% and of those under 1 ms within ±10% (after: each space's own drift)."""
    vals = []
    for b in res["budgets"]:
        if b["minutes"] in SELECT_MINUTES and "after" in b:
            parts = [b["after"]["all"]["within_10pct"]]
            if "under_1ms" in b["after"]:
                parts.append(b["after"]["under_1ms"]["within_10pct"])
            vals.append(float(np.mean(parts)))
    return float(np.mean(vals)) if vals else float("nan")


def pick_settings(out: dict) -> dict:
    """Per held-out table, the setting with the best mean ``selection_score`` over the tables of the
    other processors (the default where none is scored, or on a tie)."""
    devs = out["devices"]
    picks = {}
    for d, r in devs.items():
        others = [o for o, ro in devs.items() if ro["processor"] != r["processor"] and ro["scored_on"] == "held_out"]
        mean = {st: float(np.mean([selection_score(result(devs[o], st)) for o in others])) if others else float("nan")
                for st in r["settings"]}
        best = max(mean, key=lambda st: (mean[st], st == DEFAULT.name)) if others else DEFAULT.name
        picks[d] = {"setting": best, "picked_on": others, "selection_scores": mean}
    return picks


def _cell(row: dict, when: str, on: str) -> str:
    """``all / tiny / < 1 ms`` within ±10% of one budget row (``-`` where a part is not scored)."""
    if on != "held_out":
        return f"{100 * within(row, on):.1f}% (rest)"
    return " / ".join("-" if np.isnan(v := within(row, on, when, g)) else f"{100 * v:.1f}%"
                      for g in ("all", "tiny", "under_1ms"))


def tables_md(out: dict) -> str:
    """The readable tables: per held-out table, before (default setting, one drift scale) and after (the
    setting picked on the other processors' tables, each space's own drift), within ±10% of all held-out
    networks / the tiny groups / those under 1 ms at each budget; the picks."""
    mins = [f"{m:g}" for m in out["minutes"]]
    rows, picks = [], []
    for d, r in out["devices"].items():
        pick = out["picks"][d]["setting"]
        before, after = result(r, DEFAULT.name), result(r, pick)
        on = r["scored_on"]
        for when, res in (("before", before), ("after", after)):
            cells = [_cell(b, when, on) for b in res["budgets"]]
            full = _cell(res["full"], when, on)
            rows.append([f"`{d}`" if when == "before" else "", when, *cells, full, f"{res['full_profile_min']:.1f}"])
        others = ", ".join(f"`{o}`" for o in out["picks"][d]["picked_on"]) or "none"
        picks.append([f"`{d}`", f"{r['held_out_networks']} ({r['held_out_file'] or '-'})", r["processor"],
                      f"`{pick}`" + (" (the default)" if pick == DEFAULT.name else ""), others])
    head = ["held out", "", *[f"{m} min" for m in mins], "full table", "full profile (min)"]
    return (f"Offline simulation from the shipped tables (nothing measured). {out['command']}\n\n"
            "Within ±10%, all held-out networks / the `tiny` groups / those under 1 ms, D's own predictor on the "
            "partial table each budget leaves. Before: the default setting, the held-out figures divided by the "
            "validation's one drift scale. After: the setting picked on the other processors' tables, each "
            "space's held-out figures divided by its own drift where measured on at least "
            f"{RELIABLE_DRIFT} of its calibration networks (an ideal refresh on the fly), networks whose rounds "
            "disagree by more than ±10% left out as nas.validate leaves them out (where the measurement cache is "
            "shipped):\n\n"
            + markdown_table(rows, head) + "\n\nThe setting each table got, picked on the tables of the other "
            "processors only:\n\n"
            + markdown_table(picks, ["held out", "scored on", "processor", "setting", "picked on"]) + "\n")


def plot(out: dict, path: Path) -> None:
    """Within ±10% against the simulated minutes, before (dashed) and after (solid), one colour per
    held-out table."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, group, title in zip(axes, ("all", "under_1ms"), ("all held-out networks", "held-out networks under 1 ms")):
        for i, (d, r) in enumerate(out["devices"].items()):
            if r["scored_on"] != "held_out":
                continue
            color = f"C{i % 10}"
            for when, st, ls in (("before", DEFAULT.name, "--"), ("after", out["picks"][d]["setting"], "-")):
                bs = result(r, st)["budgets"]
                ys = [100 * within(b, "held_out", when, group) for b in bs]
                ax.plot([b["minutes"] for b in bs], ys, "o" + ls, color=color, ms=3,
                        label=d if when == "after" else None)
        mins = out["minutes"]
        ax.set(xscale="log", xlabel="simulated minutes of profiling", title=title)
        ax.set_xticks(mins, [f"{m:g}" for m in mins])
        ax.minorticks_off()
    axes[0].set_ylabel("within ±10% (%; dashed: before, solid: after)")
    axes[1].legend(fontsize=7, loc="lower right")
    fig.suptitle("offline simulation from the shipped tables, leave one processor out", fontsize=10)
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
    ap.add_argument("--default-only", action="store_true", help="simulate the default setting only (no choice: "
                    "after differs from before by the drift alone)")
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
    grid = (DEFAULT,) if args.default_only else SETTINGS
    print(f"OFFLINE SIMULATION from the shipped tables: nothing measured; job times: the profiler's cost model "
          f"x{factors['block']:.2f} (blocks) / x{factors['network']:.2f} (networks), from profile.json; "
          f"{len(grid)} settings")
    skipped = {d: "not in --devices" if args.devices else "no held-out measurements" if held_out_report(d) is None
               else "a GPU table (the simulated job times are a CPU's)" for d in tables if d not in devices}
    out = {"command": command("onboard"), "simulation": "offline, from the shipped tables (nothing measured)",
           "time_factors": factors, "minutes": list(args.minutes), "select_minutes": list(SELECT_MINUTES),
           "default": asdict(DEFAULT), "settings_grid": [asdict(s) | {"name": s.name} for s in grid],
           "reliable_drift": RELIABLE_DRIFT,
           "network_order": "nas.profile's calibration_order (by expected seconds, each space in spread_order)",
           "settings": {k: getattr(settings, k) for k in ("warmup", "repeats", "min_time_s", "rounds")},
           "not_held_out": skipped, "devices": {}}
    t0 = time.time()
    for d in devices:
        out["devices"][d] = run_device(d, tables, settings, factors, args.minutes, grid)
    out["picks"] = pick_settings(out)
    write_result(args.out, compact(out), table=tables_md(out), plot=lambda p: plot(out, p))
    print(f"-> {args.out} (+ .md, .png; {time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
