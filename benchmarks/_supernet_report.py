"""The record, table and plot of a run of the ranking benchmark (``benchmarks/supernet.py``; complete, or an
interim report of the scores complete so far): every estimator and the trivial scores (MACs, parameters,
predicted latency) judged by Kendall's tau over all architectures, within equal-latency bands and partialled
on MACs, each the mean over the estimator's seeds with a paired bootstrap 95% confidence interval, and each
score's difference from MACs with its own."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import rankdata

from benchmarks._ranking import (
    METRICS,
    Ranking,
    band_ceilings,
    ceiling_line,
    kendall_tau,
    latency_bands,
    plot_ranking,
    rank_scores,
    reference_agreement,
    reference_ceiling,
)
from benchmarks.harness import machine, markdown_table, write_result

BASELINES = {"macs": "MACs", "params": "parameters", "latency": "predicted latency"}  # the trivial scores' rows
# an estimator's score combined with MACs: the mean of its rank and MACs' rank over the architectures, a rule
# with no weight to fit (what a search's "largest within noise" pick does with the two), one row per supernet
WITH_MACS = {"supernet": "supernet + MACs (the mean of their ranks)",
             "progressive": "progressive + MACs (the mean of their ranks)"}
HEADERS = {"tau_all": "τ, all {n}", "tau_bands": "τ within latency bands, mean", "tau_partial_macs": "partial τ given MACs"}


@dataclass(frozen=True)
class RankingRun:
    """Everything a run of the ranking benchmark computed (or, in an interim report, has so far), as its
    report reads it.

    Args:
        command: the command line that reproduces the run.
        setup: the run's settings and data, recorded as they are.
        archs: each architecture's ``{"arch": label, "digest": digest}``, fastest first.
        predicted_ms: each architecture's predicted latency on the run's target.
        baselines: the trivial scores per architecture (``arch_baselines``: macs, params, latency).
        estimators: per estimator, its score names, one per seed, the run's own seed first.
        accuracy: the estimators whose scores are accuracies (the rest: proxy scores).
        seeds: each score name's seed.
        values: each score name's value per architecture (estimators, ``supernet_again``, stand-alone runs).
        seconds: each score name's seconds per architecture.
        standalone: the stand-alone runs' score names; the reference is their mean.
        supernet_seconds: per score name that trained a supernet, that training's seconds.
        bands: the equal-latency bands.
        draws: bootstrap resamples.
        seed: the bootstrap's seed.
        extra: further records the JSON keeps as they are (histories, train_equal, jobs, the cost estimate;
            an interim report's ``interim``: how many scores are complete, of how many, and those missing).
    """

    command: str
    setup: dict[str, Any]
    archs: list[dict[str, str]]
    predicted_ms: list[float]
    baselines: dict[str, list[float]]
    estimators: dict[str, tuple[str, ...]]
    accuracy: tuple[str, ...]
    seeds: dict[str, int]
    values: dict[str, list[float]]
    seconds: dict[str, list[float]]
    standalone: tuple[str, ...]
    supernet_seconds: dict[str, float]
    bands: int
    draws: int
    seed: int
    extra: dict[str, Any]


def cost_per_arch(run: RankingRun) -> dict[str, float]:
    """Each estimator's seconds per architecture, the mean over its seeds, a supernet's training shared
    over the architectures."""
    n = len(run.archs)
    return {m: float(np.mean([np.mean(run.seconds[s]) + run.supernet_seconds.get(s, 0.0) / n for s in names]))
            for m, names in run.estimators.items()}


def trials_at_1epoch_cost(run: RankingRun) -> float | None:
    """The trials of a search over which the supernet's training, shared, makes a trial cost one epoch of
    training (``supernet`` and ``supernet_again`` are the same scoring timed twice: the lesser is the less
    disturbed by other load); None where a supernet trial costs no less than one epoch, or where an interim
    report lacks one of those scores."""
    if not {"supernet", "supernet_again", "train_1epoch"} <= run.seconds.keys():
        return None
    sn = min(np.mean(run.seconds["supernet"]), np.mean(run.seconds["supernet_again"]))
    margin = float(np.mean(run.seconds["train_1epoch"]) - sn)
    return run.supernet_seconds["supernet"] / margin if margin > 0 else None


def _table(run: RankingRun, ranking: dict[str, Ranking], ceilings: tuple[float, list[float]],
           cost: dict[str, float]) -> str:
    """The report's two markdown tables: each score's taus, then each score's differences from MACs."""
    n, nb = len(run.archs), run.bands
    head = ["score", "seeds", HEADERS["tau_all"].format(n=n), HEADERS["tau_bands"],
            *(f"band {k + 1}" for k in range(nb)), HEADERS["tau_partial_macs"], "s / arch"]
    rows = []
    same = (run.extra.get("train_equal") or {}).get("same_as_train")
    for name, r in ranking.items():
        label = _label(name) + (" (as many epochs as train: train's scores)" if same and name == "train_equal" else "")
        rows.append([label, r.seeds, r.tau_all.text(), r.tau_bands.text(), *(f"{b.value:.3f}" for b in r.bands),
                     r.tau_partial_macs.text(), f"{cost[name]:.2f}" if name in cost else "—"])
    rows.append(["a perfect score (simulated from the runs' noise)", "—", f"{ceilings[0]:.3f}",
                 f"{np.mean(ceilings[1]):.3f}", *(f"{c:.3f}" for c in ceilings[1]), "—", "—"])
    diff = [[_label(name), *(r.minus_macs[m].text(sign=True) for m in METRICS)]
            for name, r in ranking.items() if r.minus_macs is not None]
    interim = run.extra.get("interim")
    head_line = "" if interim is None else (
        f"**Interim report**: {interim['complete']} of the run's {interim['of']} scores complete; each estimator "
        f"with the seeds complete so far (its seeds column); still missing: {', '.join(interim['missing'])}.\n\n")
    back = run.extra.get("restored")
    if back:
        on = back["measured_on"] or {}
        cpu = " ".join([on.get("cpu", "a machine it does not name"), *on.get("cpu_flags", [])])
        blobs = back.get("git_blobs", {})
        where = ", ".join(f"{f} (git blob {blobs[f][:12]})" if f in blobs else f for f in back["from"])
        head_line += (f"Restored from {where} (measured there, on {cpu}): "
                      f"{', '.join(back['scores'])}; the other scores computed here.\n\n")
    return (head_line + markdown_table(rows, head) + "\n\nEach score less MACs (paired bootstrap 95% CI):\n\n"
            + markdown_table(diff, ["score − MACs", HEADERS["tau_all"].format(n=n), HEADERS["tau_bands"],
                                    HEADERS["tau_partial_macs"]]))


def _label(name: str) -> str:
    """A score's row label: a trivial score's name, a combination's description, an estimator's own name."""
    if name in BASELINES:
        return BASELINES[name]
    return WITH_MACS[name.removesuffix("+macs")] if name.endswith("+macs") else name


def with_macs(series: list[list[float]], macs: list[float]) -> list[list[float]]:
    """Each seed's series combined with MACs (``WITH_MACS``): the mean of the two ranks (ties: their mean rank)."""
    m = rankdata(macs)
    return [list((rankdata(s) + m) / 2) for s in series]


def follows_macs(ref: np.ndarray, scores: dict[str, list[list[float]]], macs: list[float],
                 bands: list[np.ndarray]) -> dict[str, float]:
    """How far the reference and each score follow size where the search decides: Kendall's tau with MACs
    within each band, the mean over the bands (and over a score's seeds).  A score below the reference's
    ranks the larger networks of a band lower than the full training does."""
    z = np.asarray(macs, dtype=float)

    def within(x: Any) -> float:
        x = np.asarray(x, dtype=float)
        return float(np.mean([kendall_tau(x[b], z[b]) for b in bands]))

    return {"reference": within(ref), **{k: float(np.mean([within(x) for x in xs])) for k, xs in scores.items()}}


def _panels(run: RankingRun, ranking: dict[str, Ranking]) -> list[tuple[str, list[float], str]]:
    """The plot's panels: each estimator's mean score over its seeds, then each trivial score."""
    out = []
    for m, names in run.estimators.items():
        mean = np.mean([run.values[s] for s in names], axis=0) * (100 if m in run.accuracy else 1)
        label = f"{m} {'accuracy %' if m in run.accuracy else 'score'}, mean of {len(names)} seeds"
        out.append((m, list(mean), label))
    scale = {"macs": (1e-6, "MACs, millions"), "params": (1e-3, "parameters, thousands"),
             "latency": (1.0, "predicted latency, ms (a prediction)")}
    out += [(BASELINES[k], [v * scale[k][0] for v in run.baselines[k]], scale[k][1]) for k in BASELINES]
    return [(f"{t}: tau {r.tau_all.value:.2f}, in bands {r.tau_bands.value:.2f},\npartial given MACs "
             f"{r.tau_partial_macs.value:.2f}", v, label)
            for (t, v, label), r in zip(out, [*(ranking[m] for m in run.estimators), *(ranking[k] for k in BASELINES)])]


def report(run: RankingRun, out: Path, name: str) -> dict[str, Any]:
    """Judge every score of a run (complete, or its scores complete so far), write ``<out>/<name>.json``,
    ``.md`` (the tables) and ``.png``, print the tables; returns the JSON record."""
    runs = [run.values[s] for s in run.standalone]
    ref = np.mean(runs, axis=0)
    bands = latency_bands(run.predicted_ms, run.bands)
    estimates = {m: [run.values[s] for s in names] for m, names in run.estimators.items()}
    combined = {f"{m}+macs": with_macs(estimates[m], run.baselines["macs"]) for m in WITH_MACS if m in estimates}
    scores = estimates | combined | {k: [run.baselines[k]] for k in BASELINES if k != "macs"}
    ranking = rank_scores(ref, scores, run.baselines["macs"], bands, draws=run.draws, seed=run.seed)
    ranking = {k: ranking[k] for k in (*run.estimators, *combined, *BASELINES)}
    ceiling = reference_ceiling(runs)
    in_bands = band_ceilings(runs, bands)
    cost = cost_per_arch(run)
    agreement = reference_agreement(runs)
    again = (kendall_tau(run.values["supernet"], run.values["supernet_again"])
             if {"supernet", "supernet_again"} <= run.values.keys() else None)
    follows = follows_macs(ref, estimates, run.baselines["macs"], bands)
    band_rec = [{"band": k + 1, "archs": len(b), "predicted_ms": [float(np.min(np.asarray(run.predicted_ms)[b])),
                                                                  float(np.max(np.asarray(run.predicted_ms)[b]))],
                 "reference_accuracy": [float(ref[b].min()), float(ref[b].max())], "perfect_score_tau": c}
                for k, (b, c) in enumerate(zip(bands, in_bands))]
    rows = [{**a, "predicted_ms": ms, "reference": float(r), "band": next(k + 1 for k, b in enumerate(bands) if i in b),
             **{k: run.baselines[k][i] for k in ("macs", "params")},
             "scores": {s: {"score": run.values[s][i], "seconds": run.seconds[s][i]} for s in run.values}}
            for i, (a, ms, r) in enumerate(zip(run.archs, run.predicted_ms, ref))]
    table = _table(run, ranking, (ceiling["perfect_score_tau"], in_bands), cost)
    result = {"command": run.command, **run.setup, "headline": "each estimator's statistic is the mean over its seeds "
              "(by_seed: each seed's); ci95: paired bootstrap over architectures, resampled within each band",
              "ranking": {k: r.to_dict() for k, r in ranking.items()}, "bands": band_rec,
              "bootstrap": {"draws": run.draws, "seed": run.seed}, "seeds": run.seeds,
              "cost_per_arch_s": cost, "trials_at_1epoch_cost": trials_at_1epoch_cost(run),
              "supernet_train_seconds": run.supernet_seconds, "reference_agreement": agreement,
              "reference_ceiling": ceiling, "supernet_against_itself": again, "follows_macs_in_bands": follows,
              "reference_accuracy": {"min": float(ref.min()), "max": float(ref.max()), "std": float(np.std(ref)),
                                     "run_difference_std": float(np.std(np.subtract(runs[0], runs[1])))},
              **run.extra, "rows": rows, "machine": machine()}
    path = write_result(out / f"{name}.json", result, table=table,
                        plot=lambda p: plot_ranking(p, list(ref), _panels(run, ranking), runs, bands))
    print("\n" + table + "\n")
    print("bands (predicted latency, fastest first): " + "; ".join(
        f"{b['band']}: {b['archs']} archs, {b['predicted_ms'][0]:.3f}-{b['predicted_ms'][1]:.3f} ms, reference "
        f"{100 * b['reference_accuracy'][0]:.2f}-{100 * b['reference_accuracy'][1]:.2f}%" for b in band_rec))
    if again is not None:
        print(f"the supernet against itself (another draw of BatchNorm-recalibration batches): tau {again:.3f}")
    print("how far each follows size within the bands (tau with MACs, mean of the bands and seeds): the reference "
          f"{follows['reference']:.3f}; " + ", ".join(f"{k} {v:.3f}" for k, v in follows.items() if k != "reference"))
    print(f"the reference against itself: tau between runs {agreement['pairwise_mean']:.3f} (pairs "
          f"{agreement['pairwise_min']:.3f}-{agreement['pairwise_max']:.3f}), one run against the mean of the others "
          f"{agreement['one_vs_mean_of_rest']:.3f}")
    print(ceiling_line(ceiling))
    print(f"wrote {path}, {path.with_suffix('.md')} and {path.with_suffix('.png')}")
    return result
