"""Which supernet training settings change its ranking (variants scored against one reference).

Variants of the ranking benchmark's supernet, scored against the same stand-alone reference.

Reads a complete ``benchmarks/supernet.py`` run (its cache under ``<out>/bench_supernet/full``: run that
first; its recorded settings, the space, data, resolution and device included, are this run's;
``--device cuda`` trains and scores the variants on a GPU instead, against the same reference),
trains one supernet per variant on the same data (with the benchmark's seed unless the variant sets
one), scores the same architectures with each (``evaluator=supernet``) and reports Kendall's tau
against the same reference (the mean of the stand-alone runs): over all architectures, within the
benchmark's equal-latency bands and partialled on MACs (one supernet each: no interval). A variant is ``base`` (the
benchmark's own supernet) or ``key=value[,key=value]`` over ``SupernetSettings`` (``epochs=40``,
``distill=0``, ``sort_channels=false``, ``random_subnets=4``, ``schedule=progressive`` ...); ``seed=1``,
the same supernet trained with another seed, shows how far the ranking moves by chance alone.  A
part ``eval.<key>=<value>`` changes how the evaluator scores (``SupernetEvaluatorSettings``:
``eval.finetune_steps=50``, ``eval.bn_recalibration_batches=64``): such a variant scores with the
supernet its other parts name (the benchmark's own when there are none), trained once for all the
variants that share it. A part ``split=<parameter>`` (a stage's width or depth, ``s1_width``, or
``stem_width``) splits the supernet (few-shot NAS, Zhao et al. 2021): one supernet per choice of
that parameter, trained on the sub-space holding that choice alone, each architecture scored by
its own; with ``warm=true`` each starts from the default supernet of the same seed (the
benchmark's, or the ``seed=N`` variant's: run that first) and trains the variant's ``epochs``
more, without it from scratch (``split=s1_width,epochs=7``: three sub-supernets at about one
supernet's compute). The report also scores
averages of several supernets: the mean inherited-weight accuracy of every set of k seed supernets
(``base`` and the ``seed=N`` variants), k = 1 .. all, and of all variants; a setting trained with
several seeds (``distill=0`` and ``distill=0,seed=1`` ...) beside the default settings with the same
seeds (the seed moves a ranking as much as a setting does, so only a paired comparison can tell a
setting's effect); and what each ranking follows: Kendall's tau of each architecture feature
(blocks, expanded channels, kernel, squeeze-excite blocks, last width, predicted latency) against
the reference and against the averaged seed supernets.

    taskset -c 0 python -m benchmarks supernet_ablation --variants epochs=40 seed=2 distill=0,seed=1 \
        distill=0,seed=3 sort_channels=false random_subnets=4 &
    taskset -c 1 python -m benchmarks supernet_ablation --variants distill=0 seed=1 seed=3 distill=0,seed=2 \
        sort_channels=false,seed=1 random_subnets=4,seed=1
    python -m benchmarks supernet_ablation      # the default variants: what is missing, then the report

Each variant's supernet and scores are kept under ``<out>/bench_supernet/full/ablation/<variant>/``,
so an interrupted run resumes.  Writes ``<out>/supernet_ablation.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import copy
import logging
import re
import time
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from benchmarks._inputs import load_subset
from benchmarks._ranking import (
    arch_baselines,
    kendall_tau,
    latency_bands,
    pick_archs,
    point_taus,
    reference_agreement,
)
from benchmarks.harness import RESULTS, usable_device
from benchmarks.harness import command as harness_command
from benchmarks.supernet import cache_path, command, parse_args, recorded_settings, score_archs, standalone_runs
from nas._io import atomic_write_json
from nas.search.evaluate import SupernetEvaluator
from nas.search.evaluator_settings import SupernetEvaluatorSettings
from nas.space import SearchSpace, load_space
from nas.supernet.checkpoint import read_checkpoint
from nas.supernet.elastic import locate
from nas.supernet.settings import SupernetSettings
from nas.supernet.train import train_supernet

VARIANTS = ("base", "seed=1", "seed=2", "seed=3", "epochs=40", "distill=0", "distill=0,seed=1", "distill=0,seed=2",
            "distill=0,seed=3", "sort_channels=false", "sort_channels=false,seed=1", "random_subnets=4",
            "random_subnets=4,seed=1")


def parse_variant(text: str) -> dict[str, Any]:
    """``key=value[,key=value]`` as ``SupernetSettings`` overrides (values read as YAML scalars);
    ``base``: none.  A malformed variant or an unknown setting is a one-line error."""
    if text == "base":
        return {}
    fields = set(SupernetSettings.__dataclass_fields__) - {"device"} | set(SPLIT_KEYS)
    eval_fields = {f"eval.{k}" for k in SupernetEvaluatorSettings.__dataclass_fields__} - {"eval.checkpoint", "eval.device"}
    out: dict[str, Any] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise SystemExit(f"variant {text!r}: expected base or key=value[,key=value], got {part!r}")
        if key not in fields | eval_fields:
            raise SystemExit(f"variant {text!r}: {key!r} is not a supernet training setting or an eval.<key> scoring "
                             f"setting a variant may change (choose from {', '.join(sorted(fields | eval_fields))})")
        out[key] = yaml.safe_load(value)
    train, scoring = split_overrides(out)
    if "warm" in out and ("split" not in out or not isinstance(out["warm"], bool)):
        raise SystemExit(f"variant {text!r}: warm=true|false goes with split=<parameter>")
    if "split" in out and not SPLITTABLE.match(str(out["split"])):
        raise SystemExit(f"variant {text!r}: split= takes a stage's width or depth (s<i>_width, s<i>_depth), "
                         f"stem_width or head_hidden, got {out['split']!r}")
    try:
        SupernetSettings(**{k: v for k, v in train.items() if k not in SPLIT_KEYS})
        SupernetEvaluatorSettings(checkpoint="-", **scoring)
    except (TypeError, ValueError) as e:
        raise SystemExit(f"variant {text!r}: {e}") from None
    return out


SPLIT_KEYS = ("split", "warm")  # a split supernet: one supernet per choice of a parameter (few-shot NAS)
SPLITTABLE = re.compile(r"^(?:stem_width|head_hidden|s\d+_(?:width|depth))$")


def split_overrides(overrides: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A variant's overrides as (supernet training settings, evaluator settings without ``eval.``)."""
    train = {k: v for k, v in overrides.items() if not k.startswith("eval.")}
    return train, {k.removeprefix("eval."): v for k, v in overrides.items() if k.startswith("eval.")}


def _label(overrides: dict[str, Any]) -> str:
    """A folder name for overrides (``base`` for none)."""
    return "_".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in overrides.items()) or "base"


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), help=f"default: {' '.join(VARIANTS)}")
    p.add_argument("--out", default=str(RESULTS),
                   help="where the benchmarks/supernet.py run is (the same --out)")
    p.add_argument("--standalone-seeds", type=int, default=3, help="the benchmark run's --standalone-seeds")
    p.add_argument("--device", help="where the variants train and score (cpu, cuda, cuda:<i>; default: the benchmark "
                   "run's); the reference stays the benchmark's stand-alone runs")
    p.add_argument("--write", metavar="NAME", help="write <out>/NAME.json with these variants (default: "
                   "supernet_ablation.json, and only when they are the default variants: a part of a split run "
                   "writes nothing)")
    a = p.parse_args(argv)
    a.overrides = {v: parse_variant(v) for v in a.variants}
    return a


def benchmark_run(work: Path, out: str, standalone_seeds: int, device: str | None = None) -> argparse.Namespace:
    """The settings of the ``benchmarks/supernet.py`` run cached in ``work`` (as its options would give
    them; ``device``, where given, in place of the run's); none there is a one-line error."""
    have = recorded_settings(work)
    if have is None:
        raise SystemExit(f"{work}: no benchmarks/supernet.py run there; run python -m benchmarks supernet first")
    b = parse_args(["--out", out, "--standalone-seeds", str(standalone_seeds)])
    for k, v in have.items():
        setattr(b, k, v)
    b.device = device or b.device
    return b


def _reference(work: Path, b: argparse.Namespace, archs: list[Any]) -> tuple[list[float], list[float]]:
    """The benchmark's reference per architecture (the mean of its stand-alone runs) and its first run;
    a run that is missing, of other settings or incomplete is a one-line error."""
    runs = standalone_runs(work, b, archs)
    return [float(v) for v in np.mean(runs, axis=0)], runs[0]


def _variant(name: str, overrides: dict[str, Any], work: Path, b: argparse.Namespace, data: Any,
             archs: list[Any]) -> dict[str, Any]:
    """Train (or resume) the variant's supernet and score every architecture with it."""
    if "split" in overrides:
        return _split_variant(name, overrides, work, b, data, archs)
    train, scoring = split_overrides(overrides)
    vdir = work if not train else work / "ablation" / _label(train)  # the supernet, shared by eval.* variants
    scores_path = cache_path(work, "supernet", b) if name == "base" else work / "ablation" / _label(overrides) / "scores.json"
    rec = None
    if train:
        kw = {"epochs": b.supernet_epochs, **train}
        s = SupernetSettings(**{"seed": b.seed, **kw, "device": b.device})
        t0 = time.perf_counter()
        rec = train_supernet(load_space(b.space), data, s, vdir)
        print(f"{name}: supernet {s.epochs} epochs, {sum(h['seconds'] for h in rec['history']):.0f} s of training "
              f"(this run {time.perf_counter() - t0:.0f} s)", flush=True)
    ev = SupernetEvaluator(checkpoint=str(vdir / "supernet.ckpt"), device=b.device, **scoring)
    scores = score_archs(name, ev, b.seed, scores_path, archs, data)
    history = rec["history"] if rec is not None else read_checkpoint(vdir / "supernet.ckpt")["history"]  # none trained here
    return _row(name, overrides, [history], scores, archs)


def _row(name: str, overrides: dict[str, Any], histories: list[list[dict[str, Any]]], scores: dict[str, Any],
         archs: list[Any]) -> dict[str, Any]:
    """A variant's report row from its supernets' training histories (one, or one per part of a split
    supernet, the part holding the smallest architecture first and the largest's last) and its scores."""
    return {"variant": name, "overrides": overrides, "epochs": len(histories[0]),
            "train_seconds": float(sum(h["seconds"] for hist in histories for h in hist)),
            "val_accuracy_largest": histories[-1][-1]["val_accuracy_largest"],
            "val_accuracy_smallest": histories[0][-1]["val_accuracy_smallest"],
            "scores": [scores[x.digest()]["score"] for x in archs]}


def sub_spaces(space: Any, param: str) -> list[tuple[Any, Any]]:
    """``(choice, space)`` for each choice of ``param`` (a stage's width or depth, the stem width or the
    head's hidden width): ``space`` with that choice alone, the sub-spaces a split supernet trains one
    supernet each on.  A parameter the space does not vary is a one-line error."""
    choices = space.param_choices()
    if not SPLITTABLE.match(param) or len(choices.get(param, ())) < 2:
        varied = [k for k, v in choices.items() if SPLITTABLE.match(k) and len(v) > 1]
        raise SystemExit(f"split={param}: space {space.name!r} has no such choice to split on (choose from "
                         f"{', '.join(varied)})")
    out = []
    for v in choices[param]:
        c = copy.deepcopy(space.config)
        if param == "stem_width":
            c["stem"]["width"] = [v]
        elif param == "head_hidden":
            c["head"]["hidden"] = [v]
        else:
            i, option = param[1:].split("_", 1)
            c["stages"][int(i)][option] = [v]
        c["name"] = f"{space.name}_{param}_{v}"
        out.append((v, SearchSpace(c, source=space.source)))
    return out


def _split_variant(name: str, overrides: dict[str, Any], work: Path, b: argparse.Namespace, data: Any,
                   archs: list[Any]) -> dict[str, Any]:
    """A split supernet: one supernet per choice of ``split`` (trained on the sub-space, from scratch, or
    with ``warm`` from the default supernet of the same seed), each architecture scored by its own."""
    train, scoring = split_overrides(overrides)
    vdir = work / "ablation" / _label(train)  # the sub-supernets, shared by eval.* variants
    param, warm = train.pop("split"), train.pop("warm", False)
    s = SupernetSettings(**{"seed": b.seed, "epochs": b.supernet_epochs, **train, "device": b.device})
    space = load_space(b.space)
    init = None
    if warm:  # the default supernet of this seed: the benchmark's own, or the seed=N variant's
        parent = work if s.seed == b.seed else work / "ablation" / f"seed={s.seed}"
        init = parent / "supernet.ckpt"
        if not init.is_file():
            raise SystemExit(f"{name}: warm=true starts from {init}, which is not there: run the variant "
                             f"seed={s.seed} first")
    scores_path = work / "ablation" / _label(overrides) / "scores.json"
    which = {x.digest(): locate(space, x)[0][param] for x in archs}
    scores: dict[str, Any] = {}
    histories = []
    for v, sub in sub_spaces(space, param):
        sdir = vdir / f"{param}={v}"
        rec = train_supernet(sub, data, s, sdir, init=init)
        print(f"{name}: supernet {param}={v}, {s.epochs} epochs, {sum(h['seconds'] for h in rec['history']):.0f} s "
              "of training", flush=True)
        histories.append(rec["history"])
        ev = SupernetEvaluator(checkpoint=str(sdir / "supernet.ckpt"), device=b.device, **scoring)
        mine = [x for x in archs if which[x.digest()] == v]
        scores.update(score_archs(f"{name} {param}={v}", ev, b.seed, scores_path, mine, data))
    return _row(name, overrides, histories, scores, archs)


def is_seed_variant(overrides: dict[str, Any]) -> bool:
    """``base`` or ``seed=N`` alone: the same training settings, another seed."""
    return set(overrides) <= {"seed"}


def averaged_supernets(rows: list[dict[str, Any]], ref: list[float]) -> list[dict[str, Any]]:
    """Kendall's tau against ``ref`` of the mean score of several supernets: for each k, every set
    of k seed supernets (the same settings, other seeds; mean, min and max over the sets), then
    every variant together.  Too few seed supernets (< 2): only the latter."""
    seeds = [r for r in rows if is_seed_variant(r["overrides"])]
    out = []
    for k in range(1, len(seeds) + 1) if len(seeds) >= 2 else ():
        taus = [kendall_tau(ref, list(np.mean([r["scores"] for r in c], axis=0))) for c in combinations(seeds, k)]
        out.append({"supernets": f"{k} of the {len(seeds)} seeds", "k": k, "sets": len(taus),
                    "tau_mean": float(np.mean(taus)), "tau_min": min(taus), "tau_max": max(taus)})
    if len(rows) >= 2:
        tau = kendall_tau(ref, list(np.mean([r["scores"] for r in rows], axis=0)))
        out.append({"supernets": f"all {len(rows)} variants", "k": len(rows), "sets": 1,
                    "tau_mean": tau, "tau_min": tau, "tau_max": tau})
    return out


def by_seed(rows: list[dict[str, Any]], base_seed: int) -> list[dict[str, Any]]:
    """Each training setting (the overrides but the seed) trained with several seeds: its tau against
    the reference per seed, beside the default setting's tau with the same seeds (a paired comparison,
    since the seed alone moves a supernet's ranking as much as any setting)."""
    groups: dict[str, dict[int, float]] = {}
    for r in rows:
        setting = ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                           for k, v in sorted(r["overrides"].items()) if k != "seed") or "default"
        groups.setdefault(setting, {})[int(r["overrides"].get("seed", base_seed))] = r["kendall_tau_vs_reference"]
    default = groups.get("default", {})
    out = []
    for setting, taus in groups.items():
        paired = sorted(set(taus) & set(default))
        if setting == "default" or len(taus) < 2 or not paired:
            continue
        out.append({"setting": setting, "seeds": sorted(taus), "tau": [taus[k] for k in sorted(taus)],
                    "paired_seeds": paired, "tau_mean_paired": float(np.mean([taus[k] for k in paired])),
                    "default_tau_mean_paired": float(np.mean([default[k] for k in paired])),
                    "better_on": sum(taus[k] > default[k] for k in paired)})
    return out


def arch_features(arch: Any) -> dict[str, float]:
    """What distinguishes the space's architectures: body blocks, summed expanded (mid) channels,
    mean kernel, squeeze-excite blocks, the last block's output channels."""
    body = arch.blocks
    return {"blocks": len(body), "expanded_channels": sum(getattr(b, "mid_ch", 0) for b in body),
            "mean_kernel": float(np.mean([getattr(b, "kernel", 0) for b in body])),
            "se_blocks": sum(getattr(b, "se", None) is not None for b in body),
            "last_width": body[-1].out_ch if body else 0}


def ranked_by(archs: list[Any], predicted_ms: list[float], ref: list[float],
              averaged: list[float] | None) -> dict[str, dict[str, float | None]]:
    """Kendall's tau of each architecture feature (and the predicted latency) against the reference
    and against the averaged seed supernets: what each ranking follows."""
    feats = [arch_features(x) for x in archs]
    cols = {k: [float(f[k]) for f in feats] for k in feats[0]} | {"predicted_ms": list(predicted_ms)}
    return {k: {"vs_reference": kendall_tau(v, ref), "vs_averaged_supernets": kendall_tau(v, averaged) if averaged else None}
            for k, v in cols.items()}


def _print(rows: list[dict[str, Any]], averaged: list[dict[str, Any]], paired: list[dict[str, Any]],
           by: dict[str, dict[str, Any]]) -> None:
    print(f"\n{'variant':<22} {'epochs':>6} {'train s':>8} {'largest':>8} {'smallest':>9} {'mean score':>10} "
          f"{'tau vs reference':>16} {'in bands':>8} {'given MACs':>10} {'tau vs run 1':>12} {'tau vs base':>11}")
    for r in rows:
        print(f"{r['variant']:<22} {r['epochs']:>6} {r['train_seconds']:>8.0f} {100 * r['val_accuracy_largest']:>7.1f}% "
              f"{100 * r['val_accuracy_smallest']:>8.1f}% {100 * np.mean(r['scores']):>9.2f}% "
              f"{r['kendall_tau_vs_reference']:>16.3f} {r['kendall_tau_in_bands']:>8.3f} "
              f"{r['partial_tau_given_macs']:>10.3f} {r['kendall_tau_vs_one_run']:>12.3f} "
              f"{r['kendall_tau_vs_base'] if r['kendall_tau_vs_base'] is not None else float('nan'):>11.3f}")
    if averaged:
        print(f"\n{'scores averaged over':<22} {'sets':>5} {'tau vs reference: mean':>23} {'min':>6} {'max':>6}")
        for e in averaged:
            print(f"{e['supernets']:<22} {e['sets']:>5} {e['tau_mean']:>23.3f} {e['tau_min']:>6.3f} {e['tau_max']:>6.3f}")
    for e in paired:
        print(f"{e['setting']} with seeds {', '.join(map(str, e['paired_seeds']))}: tau {e['tau_mean_paired']:.3f} "
              f"on average against {e['default_tau_mean_paired']:.3f} for the default settings with the same "
              f"seeds (higher with {e['better_on']} of {len(e['paired_seeds'])})")
    print(f"\n{'feature':<22} {'tau vs reference':>16} {'tau vs averaged seed supernets':>31}")
    for k, t in by.items():
        v = t["vs_averaged_supernets"]
        print(f"{k:<22} {t['vs_reference']:>16.3f} {v if v is not None else float('nan'):>31.3f}")


def main(argv: list[str] | None = None) -> dict[str, Any]:


    a = _args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the supernet's epochs as they finish
    work = Path(a.out) / "bench_supernet" / "full"
    b = benchmark_run(work, a.out, a.standalone_seeds, a.device)
    usable_device(b.device)
    if b.device == "cpu":
        torch.set_num_threads(1)
    data = load_subset(b)
    archs, ms = pick_archs(load_space(b.space), data, b.archs, b.seed, b.target, b.pick, keep=work)
    rows = [_variant(name, overrides, work, b, data, archs) for name, overrides in a.overrides.items()]
    ref, first = _reference(work, b, archs)  # after the variants: they can be scored while the reference runs
    macs, bands = arch_baselines(archs, ms, data)["macs"], latency_bands(ms, b.bands)
    for r in rows:  # the benchmark's statistics, one supernet each (no interval)
        t = point_taus(ref, r["scores"], macs, bands)
        r["kendall_tau_vs_reference"], r["kendall_tau_in_bands"] = t["tau_all"], t["tau_bands"]
        r["partial_tau_given_macs"], r["kendall_tau_vs_one_run"] = t["tau_partial_macs"], kendall_tau(first, r["scores"])
    base = next((r["scores"] for r in rows if r["variant"] == "base"), None)
    for r in rows:  # how alike two supernets rank: the base against itself is 1
        r["kendall_tau_vs_base"] = kendall_tau(base, r["scores"]) if base is not None else None
    averaged = averaged_supernets(rows, ref)
    paired = by_seed(rows, b.seed)
    seeds = [r["scores"] for r in rows if is_seed_variant(r["overrides"])]
    seed_agreement = reference_agreement(seeds) if len(seeds) >= 2 else None  # how alike the seeds rank
    by = ranked_by(archs, ms, ref, [float(v) for v in np.mean(seeds, axis=0)] if seeds else None)
    result = {"command": harness_command("supernet_ablation", ["--variants", *a.variants, *(["--write", a.write] if a.write else [])]),
              "benchmark": command(b), "data": data.describe(), "archs": len(archs), "reference": "mean of the benchmarks/supernet.py "
              f"stand-alone runs ({b.standalone_seeds} seeds, {b.standalone_epochs} epochs)", "variants": rows,
              "averaged_supernets": averaged, "settings_by_seed": paired, "seed_supernets_agreement": seed_agreement,
              "ranked_by": by}
    name = a.write or ("supernet_ablation" if a.variants == list(VARIANTS) else None)  # a part of a split run: none
    if name:
        atomic_write_json(Path(a.out) / f"{name}.json", result)
    _print(rows, averaged, paired, by)
    if seed_agreement:
        print(f"seed supernets against each other: tau {seed_agreement['pairwise_min']:.2f}-"
              f"{seed_agreement['pairwise_max']:.2f} (mean {seed_agreement['pairwise_mean']:.2f}) pairwise")
    if name:
        print(f"wrote {Path(a.out) / (name + '.json')}")
    return result


if __name__ == "__main__":
    main()
