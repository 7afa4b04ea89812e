#!/usr/bin/env python
"""Predictor benchmark: accuracy on held-out networks, and throughput.

For each target (default: cpu and cpu_int8) and each shipped space, measures held-out
architectures end to end on this machine (the same runtime, settings and interleaved rounds as
the profiler), plus timm EfficientNet-family models, and scores the calibrated predictor, the
raw table sum, a FLOPs-linear fit and the roofline (see nas.latency.validate).  Then times the
predictor: predictions per second batched (the compiled per-space predictor on index arrays,
and the Arch path) and microseconds for one Arch.

    taskset -c 1 python scripts/bench_predictor.py                    # full run (~1 h here)
    python scripts/bench_predictor.py --targets cpu --n 30 --timm 4    # a quick look

Writes scripts/results/predictor.json, predictor_<target>.png scatter plots, and measurement
caches (a re-run resumes).  Clean figures want an idle core: other load shifts measurements.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nas.convert import from_timm  # noqa: E402
from nas.latency.predictor import LatencyPredictor, table_networks  # noqa: E402
from nas.latency.profiler import ProfileSettings  # noqa: E402
from nas.latency.roofline import Roofline  # noqa: E402
from nas.latency.runtimes import get_runtime  # noqa: E402
from nas.latency.table import LatencyTable, resolve_table_path  # noqa: E402
from nas.latency.validate import METHODS, held_out_archs, measure_held_out, scatter_plot, validate  # noqa: E402
from nas.space import list_spaces, load_space  # noqa: E402

# blocks of the first 8 are in the shipped tables (profiled with models=[...]); the whole networks
# are never calibrated on.  The last 8 have no blocks in the tables: the learned model fills in.
TIMM_MODELS = [
    "mobilenetv2_100", "mobilenetv3_large_100", "mobilenetv3_small_100", "lcnet_100",
    "efficientnet_lite0", "efficientnet_b0", "mnasnet_100", "fbnetc_100",
    "mobilenetv2_050", "mobilenetv2_140", "mobilenetv3_large_075", "mobilenetv3_small_075",
    "lcnet_050", "lcnet_075", "spnasnet_100", "tinynet_e",
]


def load_target(name: str) -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from nas.config import CONF_DIR, register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="predict", overrides=[f"conf={name}"])
    return OmegaConf.to_container(cfg.conf, resolve=True)


def throughput(pred: LatencyPredictor) -> dict:
    out = {}
    for name in list_spaces():
        space = load_space(name)
        compiled = pred.compile(space)
        P = space.sample_indices(200_000, rng=0)
        compiled.predict_indices(P[:1000])
        t = time.perf_counter()
        compiled.predict_indices(P)
        dt = time.perf_counter() - t
        archs = [space.random(s) for s in range(2000)]
        pred.predict(archs[:10])
        t = time.perf_counter()
        pred.predict(archs[:1000])
        arch_path = 1000 / (time.perf_counter() - t)
        fresh = [space.random(10_000 + s) for s in range(1000)]  # keys not yet cached on these objects
        single = []
        for a in fresh:
            t0 = time.perf_counter_ns()
            pred.explain(a)
            single.append(time.perf_counter_ns() - t0)
        out[name] = {"batched_per_s": len(P) / dt, "arch_path_per_s": arch_path,
                     "single_us_median": float(np.median(single)) / 1e3,
                     "single_us_p90": float(np.percentile(single, 90)) / 1e3}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", nargs="+", default=["cpu", "cpu_int8"])
    ap.add_argument("--n", type=int, nargs="+", default=[200, 100], help="held-out networks per space, per target")
    ap.add_argument("--timm", type=int, default=len(TIMM_MODELS), help="how many of the timm models")
    ap.add_argument("--out", default=str(ROOT / "scripts" / "results"))
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    for i, tname in enumerate(args.targets):
        n = args.n[min(i, len(args.n) - 1)]
        target = load_target(tname)
        table = LatencyTable.load(resolve_table_path(target["table"]))
        table.check_target(target)
        pred = LatencyPredictor().fit(table)
        runtime = get_runtime(target)
        settings = ProfileSettings()
        exclude = {a.digest() for a, _ in table_networks(table)}
        archs, groups = [], []
        for name in list_spaces():
            got = held_out_archs(load_space(name), n, exclude=exclude)
            archs += got
            groups += [name] * len(got)
        for m in TIMM_MODELS[: args.timm]:
            archs.append(from_timm(m))
            groups.append("timm (blocks in table)" if TIMM_MODELS.index(m) < 8 else "timm (learned blocks)")
        t0 = time.time()
        vs = measure_held_out(archs, groups, runtime, settings, cache=out / f"predictor_{tname}.measurements.json",
                              progress=not args.no_progress, table=table)
        report = validate(pred, Roofline.from_target(target), vs)
        report["measure_seconds"] = time.time() - t0
        report["table"] = pred.describe()
        report["calibration"] = {"coef": list(pred.coef_), "intercept": pred.intercept_,
                                 "networks": pred.n_calibration_}
        report["throughput"] = throughput(pred)
        scatter_plot(report, out / f"predictor_{tname}.png", title=f"{tname}: {pred.device}")
        results[tname] = report
        print(f"\n== {tname}: {pred.describe()}")
        print(f"{'group':24s} {'method':13s} {'±5%':>7s} {'±10%':>7s} {'MAPE':>7s} {'τ':>7s} {'n':>5s}")
        for g, per in [("all", report["methods"]), *report["groups"].items()]:
            for m in METHODS:
                s = per[m]
                print(f"{g:24s} {m:13s} {100 * s['within_5pct']:6.1f}% {100 * s['within_10pct']:6.1f}% "
                      f"{s['mape']:6.2f}% {s['kendall_tau']:7.3f} {s['n']:5d}")
        for g, d in report.get("drift", {}).items():
            print(f"drift check {g}: calibration networks now at {d['now_over_table']:.3f}x their table latency")
        for name, t in report["throughput"].items():
            print(f"throughput {name}: {t['batched_per_s']:,.0f} predictions/s batched (compiled), "
                  f"{t['arch_path_per_s']:,.0f}/s on Arch objects, one Arch {t['single_us_median']:.1f} us "
                  f"(p90 {t['single_us_p90']:.1f})")
    path = out / "predictor.json"
    merged = json.loads(path.read_text()) if path.is_file() else {}
    merged.update(results)  # one target at a time keeps the others' results
    path.write_text(json.dumps(merged, indent=1) + "\n")
    print(f"\n-> {out / 'predictor.json'}")


if __name__ == "__main__":
    main()
