"""Ranking math of the ranking benchmarks (``benchmarks/supernet.py``, ``benchmarks/supernet_ablation.py``):
the architectures they rank (picked by predicted latency), Kendall's tau, how well a noisy reference
agrees with itself, the tau its noise leaves a perfect score, and the plot of scores against the
reference."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np

from nas._io import atomic_write_json

__all__ = ["_expected_tau", "_pick_archs", "_tau", "ceiling_line", "graded_arch", "plot_ranking", "reference_agreement",
           "reference_ceiling"]


def _tau(x: list[float], y: list[float]) -> float:
    from scipy.stats import kendalltau

    return float(kendalltau(x, y).statistic)


def reference_agreement(runs: list[list[float]]) -> dict[str, float]:
    """How well the stand-alone runs agree: Kendall tau of each pair, and of each run against the mean
    of the others (what a score as good as one more run would reach against a reference of the rest)."""
    pairs = [_tau(x, y) for x, y in itertools.combinations(runs, 2)]
    loo = [_tau(r, list(np.mean([o for j, o in enumerate(runs) if j != i], axis=0))) for i, r in enumerate(runs)]
    return {"pairwise_mean": float(np.mean(pairs)), "pairwise_min": float(min(pairs)),
            "pairwise_max": float(max(pairs)), "one_vs_mean_of_rest": float(np.mean(loo))}


def _expected_tau(truth: np.ndarray, noise_std: float, draws: int, rng: np.random.Generator) -> float:
    """Mean Kendall tau-b between ``truth`` and ``truth`` plus Gaussian noise, over ``draws`` draws
    (vectorised, 1000 draws at a time: scipy's kendalltau one draw at a time would take minutes for
    the search over reference sizes)."""
    i, j = np.triu_indices(len(truth), 1)
    s_true = np.sign(truth[i] - truth[j])
    taus = []
    for n in [1000] * (draws // 1000) + [draws % 1000] * bool(draws % 1000):
        noisy = truth + rng.normal(0.0, noise_std, size=(n, len(truth)))
        s_noisy = np.sign(noisy[:, i] - noisy[:, j])
        denom = np.sqrt(np.count_nonzero(s_true) * np.count_nonzero(s_noisy, axis=1))
        taus.append(np.where(denom > 0, (s_noisy @ s_true) / np.maximum(denom, 1), 0.0))
    return float(np.mean(np.concatenate(taus)))


def reference_ceiling(runs: list[list[float]], target: float = 0.8, draws: int = 10000, most_runs: int = 64,
                      seed: int = 0) -> dict[str, Any]:
    """What the reference's noise leaves any score: the expected Kendall tau, against the mean of the
    ``runs``, of a score that knew every architecture's expected stand-alone accuracy (a perfect
    estimator), and how many runs a reference needs before that expectation reaches ``target``.

    The model: run r of architecture i scores t_i + e_ri, with e independent, normal, of one variance
    across architectures.  The noise variance is the runs' variance within an architecture (ddof 1,
    averaged over the architectures); the t_i are the architectures' mean accuracies drawn toward their
    grand mean until their variance is the variance of the means less the noise a mean of k runs
    still holds (noise / k).  The expectation is simulated (``draws`` draws of the noise) for a reference
    of 1, 2 ... runs (``by_runs``), up to this one's and on until it reaches ``target``."""
    x = np.asarray(runs, dtype=float)
    k = x.shape[0]
    if k < 2:
        raise ValueError(f"the noise of a reference needs at least 2 runs, got {k}")
    noise_var = float(np.mean(np.var(x, axis=0, ddof=1)))
    means = x.mean(axis=0)
    between = float(np.var(means, ddof=1))
    arch_var = max(between - noise_var / k, 0.0)
    truth = means.mean() + np.sqrt(arch_var / between if between > 0 else 0.0) * (means - means.mean())
    by_runs: dict[int, float] = {}  # runs in the reference -> the perfect score's expected tau
    for m in range(1, most_runs + 1):  # each m its own draws: its figure does not depend on the others'
        rng = np.random.default_rng([seed, m])
        by_runs[m] = _expected_tau(truth, float(np.sqrt(noise_var / m)), draws, rng) if arch_var > 0 else 0.0
        if m >= k and (by_runs[m] >= target or arch_var == 0):
            break
    needed = next((m for m, t in by_runs.items() if t >= target), None)
    return {"runs": k, "noise_std": float(np.sqrt(noise_var)), "arch_std": float(np.sqrt(arch_var)),
            "perfect_score_tau": by_runs[k], "target": target, "runs_for_target": needed, "by_runs": by_runs}


def ceiling_line(ceiling: dict[str, Any]) -> str:
    """``reference_ceiling``'s result in a sentence: the tau a perfect score would reach against this
    reference, the noise and spread behind it, and the runs a reference needs for its target."""
    need, target = ceiling["runs_for_target"], ceiling["target"]
    if need:
        reach = f"tau {target} needs a reference of {need} runs"
    elif ceiling["arch_std"] == 0:
        reach = f"the runs differ no more than their noise: no reference lets it reach tau {target}"
    else:
        reach = f"no reference of up to {max(ceiling['by_runs'])} runs lets it reach tau {target}"
    return (f"what the reference's noise leaves: a score that knew each architecture's expected accuracy would reach "
            f"tau {ceiling['perfect_score_tau']:.3f} against the mean of {ceiling['runs']} runs (a run's noise: std "
            f"{100 * ceiling['noise_std']:.2f} points; the expected accuracies: std {100 * ceiling['arch_std']:.2f}); "
            f"{reach}")


def plot_ranking(rows: list[dict[str, Any]], taus: dict[str, float], runs: list[list[float]], ceiling: float,
                 path: Path, methods: tuple[str, ...], accuracy: tuple[str, ...]) -> None:
    """The ranking benchmark's plot: one panel per score of ``methods`` against the reference (those in
    ``accuracy`` as accuracies %, the rest as proxy scores), the predicted latency's, and the reference
    against itself (its first two runs)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 11))
    axes = fig.subplots(3, 3).ravel()
    ref = [r["reference"] * 100 for r in rows]
    panels = [(m, [r["scores"][m]["score"] * (100 if m in accuracy else 1) for r in rows],
               f"{m} {'accuracy %' if m in accuracy else 'score'}") for m in methods]
    panels.append(("latency", [r["predicted_ms"] for r in rows], "predicted latency, ms (an estimate)"))
    for ax, (m, v, label) in zip(axes, panels):
        ax.scatter(v, ref, s=14)
        ax.set_xlabel(label)
        ax.set_title(f"{m}: Kendall tau {taus[m]:.2f}\n(a perfect score: {ceiling:.2f})")
        ax.set_ylabel(f"stand-alone accuracy %, mean of {len(runs)} seeds")
    ax = axes[len(panels)]
    ax.scatter([x * 100 for x in runs[0]], [y * 100 for y in runs[1]], s=14, color="tab:gray")
    ax.set_xlabel("stand-alone accuracy %, run 1")
    ax.set_ylabel("stand-alone accuracy %, run 2")
    ax.set_title(f"the reference against itself: tau {_tau(runs[0], runs[1]):.2f}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def graded_arch(space: Any, rng: np.random.Generator) -> Any:
    """An architecture whose every choice lies near one fraction ``u`` of its range (``u`` uniform; each
    choice's index ``u (n - 1)`` plus normal noise of 0.5, clipped; numeric choices in increasing order):
    narrow shallow networks for small ``u``, wide deep ones for large, a mix between."""
    u = rng.uniform()
    params = {}
    for name, ch in space.param_choices().items():
        order = sorted(ch) if all(isinstance(c, (int, float)) for c in ch) else list(ch)
        i = int(np.clip(np.rint(u * (len(order) - 1) + rng.normal(0.0, 0.5)), 0, len(order) - 1))
        params[name] = order[i]
    return space.decode(params)


def _pick_archs(space: Any, data: Any, n: int, seed: int, target_name: str = "cpu",
                pick: str = "random", keep: Path | None = None) -> tuple[list[Any], list[float]]:
    """``n`` architectures at evenly spaced quantiles of the predicted latency (on ``target_name``) of
    2000 random ones (``pick="graded"``: 2000 ``graded_arch`` ones).  With ``keep`` (a run's cache
    folder) the pick is saved there as ``archs.json`` and read back on every later call, so a part of
    the run on another machine, whose predictor (another scikit-learn) may place the quantiles a little
    differently, scores the same architectures."""
    import nas
    from nas.arch import Arch
    from nas.data import adapt_arch

    kept = keep / "archs.json" if keep is not None else None
    if kept is not None and kept.is_file():
        rec = json.loads(kept.read_text())
        return [Arch.from_dict(x) for x in rec["archs"]], [float(v) for v in rec["predicted_ms"]]
    try:
        target = nas.load_target(target_name)
    except ValueError as e:
        raise SystemExit(f"--target: {e}") from None
    model = nas.load_latency_model(target)
    res = target.resolution or space.resolution
    rng = np.random.default_rng(seed)
    draw = space.random if pick == "random" else lambda r: graded_arch(space, r)
    pool = {a.digest(): a for a in (draw(rng) for _ in range(2000))}
    archs = list(pool.values())
    ms = model.predict([adapt_arch(a, data, resolution=res) for a in archs])
    order = np.argsort(ms)
    idx = list(dict.fromkeys(int(order[int(round(q * (len(order) - 1)))]) for q in np.linspace(0, 1, n)))
    if kept is not None:
        atomic_write_json(kept, {"archs": [archs[i].to_dict() for i in idx], "predicted_ms": [float(ms[i]) for i in idx]})
    return [archs[i] for i in idx], [float(ms[i]) for i in idx]
