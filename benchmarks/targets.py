"""The same search with each target: how the Pareto front moves with the runtime and precision.

One search per target, everything else equal: the same space (``tiny``), data (the embedded
``digits``), evaluator (``train``, 3 epochs: the default search's), sampler (NSGA-II, population
12), seed and number of trials; only the latency objective differs, predicted by each target's own
table.  The searches run through the project's search API (``nas.search.prepare_search`` /
``run_search``), no latency budget (the targets' budgets, 12-15 ms, are far above any ``tiny``
network).  An architecture's accuracy does not depend on the target: every evaluation is seeded by
the architecture and the seed, so the benchmark trains each one once and hands its score to every
search that samples it (``<out>/evaluations.json``; a repeat gives the score training would).

Then, for the fronts:

* size, accuracy and predicted latency range of each, and the share of their layers that the
  target's table holds (the rest is the learned block model: the edge int8 tables are partial);
* how alike two targets rank the latency of the same networks (Kendall τ over every network trained);
* overlap: architectures two fronts share, and their Jaccard index;
* cross hypervolume: each front's hypervolume under every target's latency predictor (row: the
  search that found the front; column: the latency it is judged on), and how many of its networks
  stay Pareto-optimal there, among every network any of the searches trained.  The reference
  point is (chance accuracy, 1.05 x the largest predicted latency of 2000 random architectures of
  the space on that column's target); hypervolumes are fractions of that box;
* a control: the first target's search again with another seed (``--control-seeds``; the sampler's
  and the training's seed, as ``seed=`` sets both), to show how far a front moves by chance alone;
* ``--measure``: the union of the fronts measured end to end on each target's runtime on this
  CPU (``nas.latency.profile.validate.measure_held_out``: interleaved rounds, a few of the table's own
  calibration networks re-measured as the drift check), the same cross hypervolume on measured
  latency, and how far each predictor is from its runtime on these networks.

    python -m benchmarks targets                       # six searches and the control (~20 min on one core)
    taskset -c 1 python -m benchmarks targets --measure  # then measure their fronts on each runtime
    python -m benchmarks targets --targets cpu openvino_cpu --trials 24
    python -m benchmarks targets --smoke               # 2 targets, 6 trials, 1 epoch: the pipeline

Writes ``<out>/targets.json``, ``<out>/summary.md``, ``<out>/fronts.png`` (and with ``--measure``
``<out>/measured.png``; default out: benchmarks/results/bench_targets/) and prints the tables.  The
studies are journals under ``<out>/studies/<target>/`` (with each search's own pareto.json,
trials.csv, pareto.png), the scores ``<out>/evaluations.json``, the measurements
``<out>/measured_<target>.json``: an interrupted run resumes where it stopped.  Run the searches
pinned to one core (taskset -c 0) and the measurement on another, idle one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
import torch
from omegaconf import OmegaConf
from scipy.stats import kendalltau

from benchmarks._targets_report import BEST, jaccard, write_report  # noqa: F401
from benchmarks.search import hypervolume_2d, latency_reference
from nas._io import atomic_write_json
from nas.arch import Arch
from nas.config import compose_app
from nas.data import load_data
from nas.latency import load_latency_model
from nas.latency.predict.scoring import drift_ratios, score
from nas.latency.profile.validate import measure_held_out
from nas.latency.runtimes.core import get_runtime
from nas.latency.runtimes.loop import ProfileSettings
from nas.search.budget import Budgets
from nas.search.evaluate import EvalResult, Evaluator, make_evaluator
from nas.search.results import pareto_front, trial_records, write_outputs
from nas.search.samplers import sampler_settings
from nas.search.study import count_trials, prepare_search, run_search
from nas.space import load_space
from nas.target import load_target

TARGETS = ("cpu", "cpu_int8", "executorch_cpu", "executorch_cpu_int8", "openvino_cpu", "openvino_cpu_int8")
class SharedEvaluations(Evaluator):
    """An evaluator whose scores are kept per (trained Arch, seed) and shared by several searches.

    The searches of this benchmark differ only in their latency objective; a score depends on the
    Arch and its seed alone (``SearchProblem.eval_seed``), so a repeat returns what training would
    and costs nothing.  Its settings, metric and description are the wrapped evaluator's, so each
    study records the evaluator it would record without the cache."""

    def __init__(self, inner: Evaluator, path: Path | None, *, context: Mapping[str, Any]) -> None:
        self.inner, self.path = inner, path
        self.name = inner.name
        self.epochs = getattr(inner, "epochs", 1)
        self.context = json.loads(json.dumps({"evaluator": inner.settings(), **context}, sort_keys=True))
        self.scores: dict[str, dict[str, Any]] = {}
        self.trained = self.reused = 0
        if path is not None and path.is_file():
            d = json.loads(path.read_text())
            if d.get("context") == self.context:
                self.scores = d["scores"]
            else:
                print(f"ignoring {path}: made with other evaluator or data settings", file=sys.stderr)

    @property
    def metric(self) -> str:
        return self.inner.metric

    def check(self, space: Any, data: Any) -> None:
        self.inner.check(space, data)

    def settings(self) -> dict[str, Any]:
        return self.inner.settings()

    def describe(self) -> str:
        return self.inner.describe()

    def evaluate(self, arch: Arch, data: Any, *, seed: int) -> EvalResult:
        key = f"{arch.digest()}:{seed}"
        hit = self.scores.get(key)
        if hit is not None:
            self.reused += 1
            return EvalResult(**hit)
        r = self.inner.evaluate(arch, data, seed=seed)
        self.trained += 1
        self.scores[key] = r.to_dict()
        if self.path is not None:
            atomic_write_json(self.path, {"context": self.context, "scores": self.scores})
        return r


# --------------------------------------------------------------------------------------------
# the fronts compared


def front_of(digests: Sequence[str], scores: Mapping[str, float], lat: Mapping[str, float]) -> list[str]:
    """The digests among ``digests`` that no other one dominates (higher score, lower latency)."""
    pts = [(d, scores[d], lat[d]) for d in dict.fromkeys(digests)]
    return [d for d, s, m in pts if not any(s2 >= s and m2 <= m and (s2 > s or m2 < m) for _, s2, m2 in pts)]


def cross_hypervolume(fronts: Mapping[str, Sequence[str]], scores: Mapping[str, float],
                      lat: Mapping[str, Mapping[str, float]],
                      refs: Mapping[str, tuple[float, float]]) -> dict[str, dict[str, float]]:
    """``hv[a][b]``: the hypervolume of front ``a`` (Arch digests) with each network's latency
    predicted (or measured) on ``b`` (``lat[b][digest]``), against ``refs[b]`` = (accuracy, latency)
    and as a fraction of the box from that point to (accuracy 1, latency 0)."""
    out: dict[str, dict[str, float]] = {}
    for a, front in fronts.items():
        out[a] = {}
        for b, lb in lat.items():
            acc_ref, lat_ref = refs[b]
            hv = hypervolume_2d([(scores[d], lb[d]) for d in front], (acc_ref, lat_ref))
            out[a][b] = hv / ((1.0 - acc_ref) * lat_ref)
    return out


def still_optimal(fronts: Mapping[str, Sequence[str]], pool: Sequence[str], scores: Mapping[str, float],
                  lat: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, int]]:
    """``n[a][b]``: how many networks of front ``a`` are on the front of ``pool`` (every network
    trained) when latency is ``lat[b]``."""
    best = {b: set(front_of(pool, scores, lb)) for b, lb in lat.items()}
    return {a: {b: len(set(f) & best[b]) for b in lat} for a, f in fronts.items()}


def rank_agreement(lat: Mapping[str, Mapping[str, float]], digests: Sequence[str]) -> dict[str, dict[str, float]]:
    """Kendall τ between every two targets' latencies of the same networks."""
    v = {t: [lb[d] for d in digests] for t, lb in lat.items()}
    return {a: {b: float(kendalltau(v[a], v[b]).statistic) for b in lat} for a in lat}


def compare_fronts(fronts: Mapping[str, Sequence[str]], pool: Sequence[str], scores: Mapping[str, float],
                   lat: Mapping[str, Mapping[str, float]], refs: Mapping[str, tuple[float, float]]) -> dict[str, Any]:
    """Overlap, cross hypervolume (with the best known front's row) and still-optimal counts."""
    names = list(fronts)
    sets = {t: set(f) for t, f in fronts.items()}
    best = {b: front_of(pool, scores, lb) for b, lb in lat.items()}
    hv = cross_hypervolume(fronts, scores, lat, refs)
    hv[BEST] = {b: cross_hypervolume({b: best[b]}, scores, {b: lat[b]}, refs)[b][b] for b in lat}
    return {
        "common": {a: {b: len(sets[a] & sets[b]) for b in names} for a in names},
        "jaccard": {a: {b: jaccard(sets[a], sets[b]) for b in names} for a in names},
        "in_every_front": sorted(set.intersection(*sets.values())) if sets else [],
        "hypervolume": hv,
        "hypervolume_share_of_best": {a: {b: v / hv[BEST][b] if hv[BEST][b] else float("nan")
                                          for b, v in row.items()} for a, row in hv.items()},
        "still_optimal": still_optimal(fronts, pool, scores, lat),
        "best_known_front_size": {b: len(f) for b, f in best.items()},
        "kendall_tau": rank_agreement(lat, pool),
        "networks": len(pool),
    }


# --------------------------------------------------------------------------------------------
# the searches


def _setup(args) -> dict[str, Any]:
    """Targets, their latency models, the space, the data and the shared evaluator."""
    cfg = compose_app("search", [f"conf={args.targets[0]}", f"data={args.data}"])
    data = load_data(OmegaConf.to_container(cfg.data, resolve=True))
    ev = make_evaluator({**OmegaConf.to_container(cfg.evaluator, resolve=True), "epochs": args.epochs,
                         "device": "cpu"})
    out = Path(args.out)
    shared = SharedEvaluations(ev, out / "evaluations.json", context={"data": data.describe(), "space": args.space})
    targets = {t: load_target(t) for t in args.targets}
    models = {}
    for t, tg in targets.items():
        models[t] = load_latency_model(tg)
        if models[t].warning:
            print(f"WARNING ({t}): {models[t].warning}", file=sys.stderr)
    sampler = {**OmegaConf.to_container(cfg.sampler, resolve=True), "population_size": args.population}
    return {"targets": targets, "models": models, "space": load_space(args.space), "data": data,
            "evaluator": shared, "sampler": sampler}


def search_plan(args) -> list[tuple[str, str, int]]:
    """(label, target, seed) of every search: one per target, then the first target again with each
    control seed (``<target>@seed<n>``)."""
    plan = [(t, t, args.seed) for t in args.targets]
    return plan + [(f"{args.targets[0]}@seed{c}", args.targets[0], c) for c in args.control_seeds if c != args.seed]


def run_searches(args, env: Mapping[str, Any], *, run: bool = True) -> dict[str, Any]:
    """One study per search of ``search_plan`` in ``<out>/studies/<label>`` (resumed if there);
    ``run=False`` opens them only.  Returns label -> ``nas.search.Search``."""
    searches = {}
    for label, t, seed in search_plan(args):
        t0 = time.perf_counter()
        ev = env["evaluator"]
        trained, reused = ev.trained, ev.reused
        s = prepare_search(target=env["targets"][t], search_space=env["space"], data=env["data"], evaluator=ev,
                           sampler=sampler_settings(env["sampler"]), budgets=Budgets(), seed=seed,
                           run_dir=Path(args.out) / "studies" / label.replace("@", "_"), latency=env["models"][t])
        searches[label] = s
        if not run:
            continue
        rep = run_search(s.study, s.problem, n_trials=args.trials, storage=s.storage)
        write_outputs(s.study, s.run_dir, info=s.info())
        print(f"search {label:20s}: {rep.ran} new trials ({ev.trained - trained} trained, {ev.reused - reused} "
              f"scores reused), {time.perf_counter() - t0:.0f}s", flush=True)
    return searches


def _deployed_reference(env: Mapping[str, Any], problem: Any) -> dict[str, float]:
    """Per target: 1.05 x the largest predicted latency of 2000 seeded random deployed networks."""
    return dict(zip(env["models"], latency_reference(env["space"], problem.deployed, list(env["models"].values()))))


def _coverage(model: Any, archs: Sequence[Arch]) -> dict[str, Any]:
    """How many of the distinct layers of ``archs`` the model's table holds (the rest are learned)."""
    keys = {k for a in archs for k in a.keys()}
    held = sum(k in model.lookup_ for k in keys)
    return {"layers": len(keys), "in_table": held, "learned": len(keys) - held,
            "table_entries": len(model.table_.entries)}


def collect(args, env: Mapping[str, Any], searches: Mapping[str, Any]) -> dict[str, Any]:
    """Every search's front and trained networks, each network's latency on every target, the comparison."""
    pool: dict[str, Arch] = {}
    scores: dict[str, float] = {}
    names: dict[str, str] = {}
    fronts: dict[str, list[str]] = {}
    per_target: dict[str, dict[str, Any]] = {}
    for t in args.targets:
        recs = trial_records(searches[t].study)
        for r in recs:
            if r["state"] == "COMPLETE" and r["score"] is not None:
                pool.setdefault(r["digest"], Arch.from_dict(r["_arch"]))
                scores.setdefault(r["digest"], float(r["score"]))
                names.setdefault(r["digest"], r["arch"])
        front = pareto_front(recs)
        fronts[t] = [r["digest"] for r in front]
        per_target[t] = {"trials": sum(r["status"] != "duplicate" for r in recs),
                         "evaluated": sum(r["status"] == "evaluated" for r in recs),
                         "front": [{"number": r["number"], "digest": r["digest"], "summary": r["arch"]}
                                   for r in front]}
    digests = list(pool)
    lat = {m: dict(zip(digests, (float(v) for v in model.predict([pool[d] for d in digests]))))
           for m, model in env["models"].items()}
    problem = searches[args.targets[0]].problem
    acc_ref = 1.0 / env["data"].num_classes
    refs = {t: (acc_ref, v) for t, v in _deployed_reference(env, problem).items()}
    union = sorted({d for f in fronts.values() for d in f}, key=lambda d: lat[args.targets[0]][d])
    for t, f in fronts.items():
        own = [lat[t][d] for d in f]
        acc = [scores[d] for d in f]
        per_target[t].update({
            "size": len(f), "accuracy": [min(acc), max(acc)], "predicted_ms": [min(own), max(own)],
            "latency_model": env["models"][t].describe(),
            "coverage_front": _coverage(env["models"][t], [pool[d] for d in f]),
            "coverage_union": _coverage(env["models"][t], [pool[d] for d in union]),
            "coverage_trained": _coverage(env["models"][t], list(pool.values()))})
    return {
        "settings": {"targets": args.targets, "space": args.space, "data": env["data"].describe(),
                     "evaluator": env["evaluator"].describe(), "sampler": env["sampler"], "seed": args.seed,
                     "trials": args.trials, "budgets": "none",
                     "deploy_resolution": problem.deploy_resolution},
        "reference": {t: {"accuracy": a, "latency_ms": m} for t, (a, m) in refs.items()},
        "targets": per_target,
        "trained_networks": len(pool),
        "compare_predicted": compare_fronts(fronts, digests, scores, lat, refs),
        "networks": {d: {"summary": names[d], "score": scores[d], "arch": pool[d].to_dict(),
                         "in_fronts": [t for t, f in fronts.items() if d in f],
                         "predicted_ms": {t: lat[t][d] for t in lat}} for d in union},
        "_pool": {"digests": digests, "scores": scores, "lat": lat, "fronts": fronts, "refs": refs, "archs": pool},
    }



def collect_controls(args, searches: Mapping[str, Any], res: dict[str, Any]) -> dict[str, Any]:
    """The first target's search again with other seeds (the sampler's and the training's, as
    ``seed=`` sets both): how far its front moves with no change of target.  Its scores are its own."""
    p = res["_pool"]
    t = args.targets[0]
    acc_ref, lat_ref = p["refs"][t]
    out = {}
    for label, s in searches.items():
        if label in args.targets:
            continue
        front = pareto_front(trial_records(s.study))
        pts = [(float(r["score"]), float(r["latency_ms"])) for r in front]  # latency: t's predictor
        mine = {r["digest"] for r in front}
        out[label] = {
            "target": t, "seed": s.problem.train_seed, "size": len(front),
            "accuracy": [min(a for a, _ in pts), max(a for a, _ in pts)],
            "predicted_ms": [min(m for _, m in pts), max(m for _, m in pts)],
            "common": {u: len(mine & set(f)) for u, f in p["fronts"].items()},
            "jaccard": {u: jaccard(mine, set(f)) for u, f in p["fronts"].items()},
            "hypervolume_on_target": hypervolume_2d(pts, (acc_ref, lat_ref)) / ((1.0 - acc_ref) * lat_ref),
            "front": [{"number": r["number"], "digest": r["digest"], "summary": r["arch"], "score": r["score"],
                       "predicted_ms": r["latency_ms"]} for r in front]}
    return out


# --------------------------------------------------------------------------------------------
# measuring the fronts on each runtime


def measure_fronts(args, env: Mapping[str, Any], res: dict[str, Any]) -> dict[str, Any]:
    """The union of the fronts measured end to end with each target's runtime on this CPU, and each
    predictor scored on them (as is, and times the drift its table's re-measured networks show)."""
    p = res["_pool"]
    union = list(res["networks"])
    archs = [p["archs"][d] for d in union]
    settings = ProfileSettings(rounds=args.rounds)
    per: dict[str, dict[str, Any]] = {}
    old = _previous(Path(args.out)).get("measured", {}).get("per_target", {})
    for t in args.targets:
        runtime = get_runtime(env["targets"][t])
        t0 = time.perf_counter()
        cache = Path(args.out) / f"measured_{t}.json"
        before = _cached_rounds(cache)
        vs = measure_held_out(archs, ["fronts"] * len(archs), runtime, settings, cache=cache,
                              table=env["models"][t].table_, anchors_per_group=args.anchors, desc=f"{t}: the fronts")
        new = _cached_rounds(cache) > before
        drift, _, n_anchors = drift_ratios(vs.anchors) if vs.anchors else (None, {}, 0)
        meas = dict(zip(union, map(float, vs.measured_ms)))
        pred = [p["lat"][t][d] for d in union]
        per[t] = {"runtime": runtime.info(), "precision": runtime.precision, "measured_ms": meas,
                  "range_ms": [min(meas.values()), max(meas.values())],
                  "drift_now_over_table": drift, "drift_networks": n_anchors,
                  "predictor_on_fronts": score(pred, list(meas.values())),
                  "predictor_rescaled_on_fronts": score([x * drift for x in pred], list(meas.values()))
                  if drift else None,
                  "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()) if new
                  else old.get(t, {}).get("measured_at", "before this run")}
        print(f"measured {t:20s}: {len(union)} networks, drift {drift if drift is None else round(drift, 3)}, "
              f"{time.perf_counter() - t0:.0f}s" + ("" if new else " (all from the cache)"), flush=True)
    res["measured"] = {"settings": {"rounds": args.rounds, "drift_anchors_per_group": args.anchors},
                       "per_target": per}
    return res


def _cached_rounds(path: Path) -> int:
    """Measurements held in a ``measure_held_out`` cache."""
    if not path.is_file():
        return 0
    return sum(len(v) for v in json.loads(path.read_text()).get("rounds_ms", {}).values())


def _previous(out: Path) -> dict[str, Any]:
    path = out / "targets.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def compare_measured(res: dict[str, Any]) -> dict[str, Any]:
    """The fronts compared on measured latency (``res["measured"]``), with the predicted comparison's
    reference points; the best known front is the union's (only the fronts' networks were measured)."""
    p = res["_pool"]
    lat_m = {t: v["measured_ms"] for t, v in res["measured"]["per_target"].items()}
    union = list(res["networks"])
    fronts = {t: [d for d in f if all(d in lm for lm in lat_m.values())] for t, f in p["fronts"].items()}
    cmp_m = compare_fronts(fronts, union, p["scores"], lat_m, {t: p["refs"][t] for t in lat_m})
    cmp_m["measured_fronts"] = {t: front_of(union, p["scores"], lat_m[t]) for t in lat_m}
    for d, row in res["networks"].items():
        row["measured_ms"] = {t: lat_m[t].get(d) for t in lat_m}
    return cmp_m


# --------------------------------------------------------------------------------------------
# tables and plots


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--targets", nargs="+", default=list(TARGETS))
    ap.add_argument("--space", default="tiny")
    ap.add_argument("--data", default="digits")
    ap.add_argument("--epochs", type=int, default=3, help="evaluator epochs (the default search's)")
    ap.add_argument("--trials", type=int, default=36, help="trials per search (the default search's)")
    ap.add_argument("--population", type=int, default=12, help="NSGA-II population size")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--control-seeds", nargs="*", type=int, default=[1],
                    help="the first target's search again with these seeds: how far a front moves by chance")
    ap.add_argument("--measure", action="store_true",
                    help="measure the fronts on each runtime (needs the searches done; run on an idle core)")
    ap.add_argument("--rounds", type=int, default=3, help="--measure: interleaved rounds per network")
    ap.add_argument("--anchors", type=int, default=3,
                    help="--measure: the table's calibration networks re-measured per group (drift check)")
    ap.add_argument("--out", default="benchmarks/results/bench_targets")
    ap.add_argument("--smoke", action="store_true", help="2 targets, 6 trials, 1 epoch: checks the pipeline")
    args = ap.parse_args()
    if args.smoke:
        args.targets, args.trials, args.population, args.epochs = args.targets[:2], 6, 4, 1
        args.control_seeds = args.control_seeds[:1]
        args.rounds, args.anchors = 1, 1
        if args.out == "benchmarks/results/bench_targets":
            args.out = "benchmarks/results/bench_targets_smoke"
    unknown = sorted(set(args.targets) - set(TARGETS))
    if unknown:
        print(f"note: {unknown} are not among the shipped targets this benchmark was written for", file=sys.stderr)
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = _setup(args)
    searches = run_searches(args, env, run=not args.measure)
    short = {t: n for t, s in searches.items() if (n := count_trials(s.study)) < args.trials}
    if args.measure and short:
        raise SystemExit(f"--measure needs the searches done first; unfinished: {short} (run without --measure)")
    res = collect(args, env, searches)
    res["controls"] = collect_controls(args, searches, res)
    if args.measure:
        res = measure_fronts(args, env, res)
    elif "measured" in (old := _previous(out)) and set(old.get("networks", {})) == set(res["networks"]):
        res["measured"] = {k: v for k, v in old["measured"].items() if k != "compare_measured"}  # the same fronts
    if "measured" in res:
        res["measured"]["compare_measured"] = compare_measured(res)
    write_report(args, res, out)
    print(f"results in {out}/ (summary.md, targets.json, *.png)")


if __name__ == "__main__":
    main()
