"""``python -m nas.predict conf=<target> arch=<arch.json> | model=timm:<name>``: one prediction; with
``breakdown=true`` every layer's time beside the roofline's verdict on it (``nas.latency.predict.breakdown``) and a
bar chart of them (``breakdown_png``)."""

from __future__ import annotations

from omegaconf import DictConfig

import nas
from nas import latency
from nas.arch import Arch, check_widths
from nas.cli._common import fmt_table, hydra_app, user_errors
from nas.config.predict import register_predict_configs
from nas.latency.tables import check_target_table
from nas.target import Target

register_predict_configs()


@user_errors
def run(cfg: DictConfig) -> dict:
    if bool(cfg.arch) == bool(cfg.model):
        raise ValueError("give exactly one of arch=<arch.json> or model=timm:<name>")
    spec = cfg.arch or cfg.model
    if cfg.model and not cfg.model.startswith("timm:"):
        raise ValueError(f"model must look like timm:<name>, got {cfg.model!r}")
    target = Target.coerce(cfg.target)
    check_target_table(target)  # a table no predictor can use is refused before torch or scikit-learn load
    if cfg.arch:
        arch = Arch.load(cfg.arch)
        check_widths(arch, cfg.arch)
    else:
        arch = nas.from_timm(cfg.model[len("timm:"):])  # torch and timm load here: only to read a timm model
    res = cfg.resolution or target.resolution
    if res:
        arch = arch.with_resolution(res)
    model = latency.load_latency_model(target, allow_mismatch=cfg.allow_mismatch)  # scikit-learn loads here
    if model.warning:
        print(f"WARNING: {model.warning}")
    if model.note:
        print(model.note)
    refresh = latency.refresh_model(model, target, spaces=[arch.name] if arch.name else None) if cfg.retime else None
    if refresh is not None:
        print(refresh.line())
    p = model.explain(arch)
    print(f"{arch.name or spec} at {arch.resolution}x{arch.resolution} on {target.name}: {p.label()}")
    out = {"arch": arch.name or spec, **p.to_dict(), **({"refresh": refresh.to_dict()} if refresh is not None else {})}
    if cfg.breakdown:
        out.update(_breakdown(arch, model, target, cfg.breakdown_png))
    return out


def _breakdown(arch, model, target: Target, png: str) -> dict:
    """Print the per-layer table with the roofline's verdict, write its chart; both for the return value."""
    rows = latency.layer_breakdown(arch, model, target)  # matplotlib loads here: only where a chart is drawn
    d, ridge = target.device, latency.ridge_point(target)
    print(f"roofline of {d.name or d.description or 'the device'}: {d.peak_gflops:g} GFLOP/s, {d.mem_bandwidth_gbs:g} "
          f"GB/s, ridge point {ridge:.1f} FLOP/byte at {target.precision} ({d.spec_source or 'no source given'})")
    print(fmt_table([[r.layer, f"{r.ms:.4f}", f"{100 * r.share:.1f}%", r.source, f"{r.intensity:.1f}", r.bound,
                      f"{r.gflops:.1f} ({r.compute_pct:.0f}%)", f"{r.gbs:.1f} ({r.memory_pct:.0f}%)"] for r in rows],
                    ["layer", "ms", "share", "source", "FLOP/B", "roofline", "GFLOP/s (% peak)", "GB/s (% peak)"]))
    print("(per-layer figures are before calibration; the total above is calibrated when marked so.  FLOP/B is the "
          "arithmetic intensity; a layer far below both peaks is bound by fixed costs, not by either roof; one above "
          "100% of the GB/s peak works from the caches, faster than the memory the peak was measured on)")
    chart = latency.breakdown_chart(rows, png, ridge=ridge, title=f"{arch.name or 'network'} at {arch.resolution} px on "
                               f"{target.name}: {sum(r.ms for r in rows):.3f} ms summed per layer "
                               f"({', '.join(sorted({r.source for r in rows}))})")
    print(f"chart: {chart}")
    return {"breakdown": [r.to_dict() for r in rows], "chart": chart}


@hydra_app("predict")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
