"""``python -m nas.validate conf=<target> [n=200] [models=[...]] [out=report.json]``.

Measures held-out networks end to end on this machine's runtime and scores four methods; see
``nas.latency.profile.validate``.  Thin Hydra entry point; the library loads inside ``run``, after the
counts are checked, so a refused value answers before scikit-learn and torch load.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nas import latency
from nas.cli._common import check_counts, fmt_table, hydra_app, user_errors
from nas.config.validate import register_validate_configs
from nas.latency.runtimes import Interrupted, ProfileSettings

register_validate_configs()


@user_errors
def run(cfg: DictConfig) -> dict:
    check_counts(cfg, {"n": "held-out networks", "pruned": "held-out networks",
                       "drift_anchors": "calibration networks per space"})
    if not (cfg.n or cfg.pruned or cfg.models):  # (validate_target says so too, after loading scikit-learn)
        raise ValueError("nothing to validate: n=0, pruned=0 and no models")
    out = Path(cfg.out)
    try:
        report = latency.validate_target(  # scikit-learn and the runtimes load here
            OmegaConf.to_container(cfg.target, resolve=True), n=cfg.n, pruned=cfg.pruned,
            models=list(cfg.models or ()), spaces=cfg.search_space, resolution=cfg.resolution, out=out,
            seed=cfg.seed, settings=ProfileSettings(**OmegaConf.to_container(cfg.profile)),
            drift_anchors=cfg.drift_anchors, recalibrate=cfg.recalibrate, allow_mismatch=cfg.allow_mismatch,
            bundle=cfg.bundle, retime=cfg.retime,
            progress=cfg.progress, say=lambda line: print(line, flush=True))
    except Interrupted as e:
        print(f"\ninterrupted: {e}", file=sys.stderr)
        sys.exit(130)
    png = out.with_suffix(".png")
    rows = []
    for m, s in report["methods"].items():
        rows.append([m, f"{100 * s['within_5pct']:.1f}%", f"{100 * s['within_10pct']:.1f}%", f"{s['mape']:.2f}%",
                     f"{s['kendall_tau']:.4f}", s["n"]])
    print(fmt_table(rows, ["method", "within ±5%", "within ±10%", "MAPE", "Kendall τ", "n"]))
    for g, per in report["groups"].items():
        s = per["predictor"]
        print(f"  predictor on {g}: ±10% {100 * s['within_10pct']:.1f}%, ±5% {100 * s['within_5pct']:.1f}%, "
              f"MAPE {s['mape']:.2f}%, τ {s['kendall_tau']:.3f} (n={s['n']})")
    for label, s in report.get("latency_ranges", {}).get("predictor", {}).items():
        print(f"  predictor at {label} (measured): ±10% {100 * s['within_10pct']:.1f}%, ±5% {100 * s['within_5pct']:.1f}%, "
              f"MAPE {s['mape']:.2f}%, signed median {s.get('median_error_pct', float('nan')):+.1f}% (n={s['n']})")
    for g, d in report.get("drift", {}).items():
        print(f"  drift check on {g}: calibration networks now run at {d['now_over_table']:.3f}x their table figure")
    if "drift_scale" in report:
        d = report["drift_scale"]
        print(f"  drift scale {d['now_over_table']:.3f} (median of {d['n']} calibration networks re-measured now): "
              f"{latency.RESCALED} = predictor x {d['now_over_table']:.3f}")
    if "drift_verdict" in report:
        print(f"  {_verdict_line(report['drift_verdict'])}")
    for line in _repeat_lines(report):
        print(f"  {line}")
    if "stored" in report:
        st = report["stored"]
        print(f"  predictor_stored: the predictor as nas.predict / search / train use it, with the table's "
              f"{st['record']} of {st['measured_at']} applied")
    if "calibration_spaces" in report:
        c = report["calibration_spaces"]
        print(f"  recalibrated_search_spaces_only: recalibrated without the {c['networks']} of {c['of']} calibration "
              f"networks from calibration-only spaces ({', '.join(c['spaces'])})")
    for line in latency.reproducibility_lines(report):
        print(f"  {line}")
    if "table_reproducibility" in report:
        print(f"  table reproducibility ({report['timing']}): {latency.summary_line(report['table_reproducibility'])}")
    if "budget" in report:
        print("\n".join(_budget_lines(report["budget"])))
    if "drift_warning" in report:
        print(f"WARNING: {report['drift_warning']}")
    if "reproducibility_warning" in report:
        print(f"WARNING: {report['reproducibility_warning']}")
    print(f"report: {out}\nplot:   {png}")
    if "budget" in report:
        b = report["budget"]
        print(f"budget curve: {b['plot']}" if b["plot"] else f"budget curve: {b['plot_note']}")
    return report


def _verdict_line(v: dict) -> str:
    """The drift verdict in one line: against the refreshed figures when the table was refreshed on the fly."""
    word = "noisy now" if v["noisy"] else "drifted" if v["drifted"] else "none"
    if v.get("refreshed") is not None:
        return (f"drift verdict: refreshed on the fly at {v['refreshed']:.3f}x before measuring; since then median "
                f"{v['median']:.3f}x, spread ±{100 * v['spread']:.1f}% over {v['n']} networks; drift beyond "
                f"±{100 * v['threshold']:.1f}%: {word} ({'predictions rescaled by the refresh' if word == 'none' else 'see below'})")
    return (f"drift verdict: median {v['median']:.3f}x, spread ±{100 * v['spread']:.1f}% over {v['n']} networks; "
            f"drift beyond ±{100 * v['threshold']:.1f}% (from the table's own reproducibility, ±"
            f"{100 * v['table_noise']:.1f}% an entry): {word}")


def _repeat_lines(report: dict) -> list[str]:
    """Which networks were left out of the scores because their own measurement did not repeat."""
    r = report.get("repeatability") or {}
    if not r.get("judged"):
        return ["repeatability: each network measured in one round only, so whether its measurement repeats "
                "was not judged (profile.rounds=3 judges it)"] if r else []
    out, n = r["left_out"], len(report["points"])
    if not out:
        return [f"repeatability: every network's {r['rounds']} rounds (each a fresh session) agree within "
                f"±{100 * r['tolerance']:.0f}% of its median"]
    allin = report["with_unrepeatable"]["predictor"]
    return [f"left out of every score: {len(out)} of {n} networks whose {r['rounds']} rounds (each a fresh session) "
            f"disagree by more than ±{100 * r['tolerance']:.0f}% of their median, so their measurement cannot support "
            f"±10%: {', '.join(out)}; predictor with them: ±10% {100 * allin['within_10pct']:.1f}% (n={allin['n']})"]


def _budget_lines(b: dict) -> list[str]:
    """The report's budget section (``nas.latency.profile.budget_curve``) as lines for the terminal."""
    bl = b["blocks"]
    budget = f" under a budget of {', '.join(f'{m:g}' for m in b['budget_min'])} min" if b["budget_min"] else ""
    spaces = f" ({', '.join(b['spaces'])})" if b.get("spaces") else ""
    lines = [f"budget: {bl['measured']} of {bl['of']} blocks of the spaces{spaces} measured ({100 * bl['share']:.1f}%)"
             f"{budget}, covering {100 * b['time_covered']:.1f}% of the held-out networks' time; "
             f"{b['networks']} calibration networks; {b['minutes_measured']:.1f} min of measuring "
             f"(order from the table's {b['order_source']})"]
    if b["order_source"] != "profile log":
        lines.append("  (no profile log in the table: order and minutes come from the entries' measured_at, the time "
                     "of their last round, so with several rounds the minutes span about the last round only)")
    elif b["unlogged"]:
        lines.append(f"  ({b['unlogged']} entries predate the profile log: counted as measured at minute 0)")
    rows = [[f"{p['minutes']:.1f}", p["blocks"], p["networks"], f"{100 * p['time_covered']:.1f}%",
             f"{100 * p['within_5pct']:.1f}%", f"{100 * p['within_10pct']:.1f}%", f"{p['mape']:.2f}%",
             f"{p['kendall_tau']:.3f}"] for p in b["curve"]]
    if rows:
        lines.append(fmt_table(rows, ["minutes", "blocks", "networks", "time measured", "within ±5%",
                                      "within ±10%", "MAPE", "Kendall τ"]))
    lines.append(b["sentence"])
    return lines


@hydra_app("validate")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
