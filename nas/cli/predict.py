"""``python -m nas.predict conf=<target> arch=<arch.json> | model=timm:<name>``: one prediction."""

from __future__ import annotations

from omegaconf import DictConfig

import nas
from nas import latency
from nas.arch import Arch, check_widths
from nas.cli._common import fmt_table, hydra_app, user_errors
from nas.target import Target


@user_errors
def run(cfg: DictConfig) -> dict:
    if bool(cfg.arch) == bool(cfg.model):
        raise ValueError("give exactly one of arch=<arch.json> or model=timm:<name>")
    spec = cfg.arch or cfg.model
    if cfg.model and not cfg.model.startswith("timm:"):
        raise ValueError(f"model must look like timm:<name>, got {cfg.model!r}")
    target = Target.coerce(cfg.target)
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
    if cfg.breakdown:
        if hasattr(model, "breakdown"):
            rows = [[r["layer"], f"{r['ms']:.4f}", r["source"]] for r in model.breakdown(arch)]
        else:
            rows = [[str(k), f"{model.roofline.predict_key(k):.4f}", "estimated"] for k in arch.keys()]
        print(fmt_table(rows, ["layer", "ms", "source"]))
        print("(per-layer figures are before calibration; the total above is calibrated when marked so)")
    return {"arch": arch.name or spec, **p.to_dict(), **({"refresh": refresh.to_dict()} if refresh is not None else {})}


@hydra_app("predict")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
