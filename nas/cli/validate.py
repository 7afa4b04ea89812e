"""``python -m nas.validate conf=<target> [n=200] [models=[...]] [out=report.json]``.

Measures held-out networks end to end on this machine's runtime and scores four methods; see
``nas.latency.validate``.  Thin Hydra entry point.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nas.cli._common import check_counts, fmt_table, hydra_app, user_errors


@user_errors
def run(cfg: DictConfig) -> dict:
    from nas._io import atomic_write_json
    from nas.from_timm import arch_from_spec
    from nas.latency.predictor import LatencyPredictor, load_latency_model, table_networks
    from nas.latency.profiler import ProfileSettings
    from nas.latency.roofline import Roofline
    from nas.latency.runtimes import device_identity, get_runtime
    from nas.latency.validate import (
        RESCALED,
        held_out_archs,
        held_out_pruned,
        measure_held_out,
        reproducibility_lines,
        scatter_plot,
        validate,
    )
    from nas.space import list_spaces, load_space

    check_counts(cfg, {"n": "held-out networks", "pruned": "held-out networks",
                       "drift_anchors": "calibration networks per space"})
    target = OmegaConf.to_container(cfg.target, resolve=True)
    # the table as built: a refresh record is not applied (predictor_rescaled is the drift check's)
    model = load_latency_model(target, allow_mismatch=cfg.allow_mismatch, refresh=False)
    if not isinstance(model, LatencyPredictor):
        raise ValueError(f"target {target['name']!r} has no measured table to validate: {model.warning}")
    ident = device_identity((target.get("device") or {}).get("kind", "cpu"))
    why = model.table_.measured_elsewhere(ident)
    if why and not cfg.allow_mismatch:
        raise ValueError(f"the table was measured on {model.device!r} but {why}: validate on "
                         f"the device the table describes (or pass allow_mismatch=true)")
    ss = cfg.search_space
    names = list_spaces() if not ss else [str(ss)] if isinstance(ss, str) else [str(n) for n in ss]
    res = cfg.resolution or target.get("resolution")
    exclude = {a.digest() for a, _ in table_networks(model.table_)}
    archs, groups = [], []
    for i, n in enumerate(names):
        k = cfg.n // len(names) + (i < cfg.n % len(names))
        sp = load_space(n)
        got = held_out_archs(sp, k, exclude=exclude, resolution=res, seed=cfg.seed)
        archs += got
        groups += [sp.name] * len(got)
        k = cfg.pruned // len(names) + (i < cfg.pruned % len(names))
        got = held_out_pruned(sp, k, exclude=exclude, resolution=res, seed=cfg.seed) if k else []
        archs += got
        groups += [f"{sp.name} pruned"] * len(got)
    for m in cfg.models or []:
        archs.append(arch_from_spec(m if m.startswith("timm:") else f"timm:{m}", resolution=res))
        groups.append("timm")
    if not archs:
        raise ValueError("nothing to validate: n=0, pruned=0 and no models")
    out = Path(cfg.out)
    runtime = get_runtime(target)
    settings = ProfileSettings(**OmegaConf.to_container(cfg.profile))
    print(f"validating on {len(archs)} held-out networks ({', '.join(sorted(set(groups)))}) measured with "
          f"{runtime.name} {runtime.version()} on {ident['name']}", flush=True)
    try:
        vs = measure_held_out(archs, groups, runtime, settings, cache=out.with_suffix(".measurements.json"),
                              progress=cfg.progress,
                              table=model.table_ if cfg.drift_anchors or cfg.recalibrate else None,
                              anchors_per_group=None if cfg.recalibrate else cfg.drift_anchors)
    except KeyboardInterrupt:
        print(f"\ninterrupted: measurements so far are cached beside {out}; run again to continue", file=sys.stderr)
        sys.exit(130)
    report = validate(model, Roofline.from_target(target), vs, recalibrate=cfg.recalibrate)
    report["target"] = target["name"]
    report["table"] = model.describe()
    report["calibration_networks"] = model.n_calibration_
    atomic_write_json(out, report)
    png = scatter_plot(report, out.with_suffix(".png"), title=f"{target['name']}: {model.device}")
    rows = []
    for m, s in report["methods"].items():
        rows.append([m, f"{100 * s['within_5pct']:.1f}%", f"{100 * s['within_10pct']:.1f}%", f"{s['mape']:.2f}%",
                     f"{s['kendall_tau']:.4f}", s["n"]])
    print(fmt_table(rows, ["method", "within ±5%", "within ±10%", "MAPE", "Kendall τ", "n"]))
    for g, per in report["groups"].items():
        s = per["predictor"]
        print(f"  predictor on {g}: ±10% {100 * s['within_10pct']:.1f}%, ±5% {100 * s['within_5pct']:.1f}%, "
              f"MAPE {s['mape']:.2f}%, τ {s['kendall_tau']:.3f} (n={s['n']})")
    for g, d in report.get("drift", {}).items():
        print(f"  drift check on {g}: calibration networks now run at {d['now_over_table']:.3f}x their table figure")
    if "drift_scale" in report:
        d = report["drift_scale"]
        print(f"  drift scale {d['now_over_table']:.3f} (median of {d['n']} calibration networks re-measured now): "
              f"{RESCALED} = predictor x {d['now_over_table']:.3f}")
    if "stored" in report:
        st = report["stored"]
        print(f"  predictor_stored: the predictor as nas.predict / search / train use it, with the table's "
              f"{st['record']} of {st['measured_at']} applied")
    if "calibration_spaces" in report:
        c = report["calibration_spaces"]
        print(f"  recalibrated_search_spaces_only: recalibrated without the {c['networks']} of {c['of']} calibration "
              f"networks from calibration-only spaces ({', '.join(c['spaces'])})")
    for line in reproducibility_lines(report):
        print(f"  {line}")
    if "drift_warning" in report:
        print(f"WARNING: {report['drift_warning']}")
    print(f"report: {out}\nplot:   {png}")
    return report


@hydra_app("validate")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
