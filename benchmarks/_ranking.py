"""Ranking math of the ranking benchmarks (``benchmarks/supernet.py``, ``benchmarks/supernet_ablation.py``):
the architectures they rank and their trivial scores (MACs, parameters, predicted latency); Kendall's tau
over all architectures, within equal-latency bands and partialled on MACs, each with a paired bootstrap
confidence interval, and each score's difference from MACs with its own; how well a noisy reference
agrees with itself, the tau its noise leaves a perfect score, and the plot of scores against the
reference."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from scipy.stats import kendalltau

import nas
from nas._io import atomic_write_json
from nas.arch import Arch
from nas.cost import arch_cost
from nas.data import adapt_arch

__all__ = ["METRICS", "PICKS", "Interval", "Ranking", "arch_baselines", "band_ceilings", "ceiling_line",
           "expected_tau", "graded_arch", "kendall_tau", "latency_bands", "partial_tau", "pick_archs", "plot_ranking",
           "point_taus",
           "rank_scores", "reference_agreement", "reference_ceiling", "tau_b"]

# what a score's ranking is judged by: Kendall's tau over every architecture, its mean over the equal-latency
# bands (where a search decides between networks of one latency), and tau partialled on MACs (what a score
# knows beyond a network's size)
METRICS = ("tau_all", "tau_bands", "tau_partial_macs")
PICKS = ("uniform", "spread", "graded")  # how pick_archs draws the architectures


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b of ``x`` and ``y`` (``scipy.stats.kendalltau``); NaN where either is constant."""
    return float(kendalltau(x, y).statistic)


def tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of ``x`` and ``y`` along their last axis, broadcast over the leading axes: the
    statistic ``scipy.stats.kendalltau`` gives (ties counted as it counts them; NaN where either side is
    constant), vectorised for the bootstrap's thousands of resamples, which scipy one at a time would
    take minutes over."""
    return _tau_of_signs(_pair_signs(x), _pair_signs(y))


def _pair_signs(x: np.ndarray) -> np.ndarray:
    """The sign of ``x[i] - x[j]`` for every pair i < j of the last axis (``np.triu_indices`` order), int8."""
    x = np.asarray(x, dtype=float)
    i, j = np.triu_indices(x.shape[-1], 1)
    return np.sign(x[..., i] - x[..., j]).astype(np.int8)


def _tau_of_signs(sx: np.ndarray, sy: np.ndarray) -> np.ndarray:
    """Tau-b from two pairs' signs: concordant less discordant over the root of the untied pairs of each."""
    num = (sx * sy).sum(axis=-1, dtype=np.int64)
    den = np.sqrt(np.count_nonzero(sx, axis=-1).astype(float) * np.count_nonzero(sy, axis=-1))
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def partial_tau(t_xy: Any, t_xz: Any, t_yz: Any) -> Any:
    """Kendall's partial tau of x and y given z from the three taus (Kendall 1942):
    ``(t_xy - t_xz t_yz) / sqrt((1 - t_xz^2)(1 - t_yz^2))``; 0 where z orders x or y completely (nothing of
    it is left beyond z), NaN where a tau is.  Floats give a float, arrays an array."""
    t_xy, t_xz, t_yz = (np.asarray(t, dtype=float) for t in (t_xy, t_xz, t_yz))
    whole = (np.abs(t_xz) > 1 - 1e-9) | (np.abs(t_yz) > 1 - 1e-9)  # z orders one completely (scipy's 1 may be 1 - 1e-16)
    den = np.sqrt(np.where(whole, 1.0, (1 - t_xz ** 2) * (1 - t_yz ** 2)))
    out = np.where(whole, 0.0, (t_xy - t_xz * t_yz) / den)
    out = np.where(np.isnan(t_xy) | np.isnan(t_xz) | np.isnan(t_yz), np.nan, out)
    return float(out) if out.ndim == 0 else out


def latency_bands(predicted_ms: Sequence[float], bands: int) -> list[np.ndarray]:
    """The architectures' indices in ``bands`` bands of equal count by predicted latency, the fastest band
    first (where the count does not divide, the first bands hold one more); each band's indices ascending.

    Raises:
        ValueError: fewer than 1 band, or more bands than architectures.
    """
    if not 1 <= bands <= len(predicted_ms):
        raise ValueError(f"{len(predicted_ms)} architectures cannot make {bands} latency bands")
    return [np.sort(b) for b in np.array_split(np.argsort(predicted_ms, kind="stable"), bands)]


@dataclass(frozen=True)
class Interval:
    """A statistic and its bootstrap 95% confidence interval (percentiles 2.5 and 97.5 of the resamples).

    Args:
        value: the statistic on the architectures themselves.
        low: the interval's lower end.
        high: its upper end.
    """

    value: float
    low: float
    high: float

    def to_dict(self) -> dict[str, Any]:
        """``{"value": v, "ci95": [low, high]}`` (NaN as None: JSON has no NaN)."""
        return {"value": _num(self.value), "ci95": [_num(self.low), _num(self.high)]}

    def text(self, digits: int = 3, sign: bool = False) -> str:
        """``0.612 [0.501, 0.700]`` (``sign``: ``+0.050 [-0.080, +0.190]``)."""
        f = f"{{:{'+' if sign else ''}.{digits}f}}"
        return f"{f.format(self.value)} [{f.format(self.low)}, {f.format(self.high)}]"


def _num(v: float) -> float | None:
    return None if np.isnan(v) else float(v)


@dataclass(frozen=True)
class Ranking:
    """How one score ranks the architectures against the reference, averaged over its seeds.

    Args:
        seeds: the seeds (score series) averaged.
        tau_all: Kendall's tau over every architecture, the mean over the seeds.
        tau_bands: the mean of the bands' taus (each band's tau against the reference within it).
        tau_partial_macs: Kendall's partial tau given MACs.
        bands: each band's tau, the mean over the seeds.
        by_seed: each metric of ``METRICS`` per seed (no interval: the seeds' spread).
        minus_macs: each metric of ``METRICS`` less MACs' own, with the paired interval; None for MACs.
    """

    seeds: int
    tau_all: Interval
    tau_bands: Interval
    tau_partial_macs: Interval
    bands: tuple[Interval, ...]
    by_seed: dict[str, list[float]]
    minus_macs: dict[str, Interval] | None

    def to_dict(self) -> dict[str, Any]:
        """The record the benchmark's JSON keeps."""
        return {"seeds": self.seeds, **{m: getattr(self, m).to_dict() for m in METRICS},
                "band_taus": [b.to_dict() for b in self.bands],
                "by_seed": {m: [_num(v) for v in vs] for m, vs in self.by_seed.items()},
                "minus_macs": None if self.minus_macs is None else {m: v.to_dict() for m, v in self.minus_macs.items()}}


def _metrics(sx: np.ndarray, sr: np.ndarray, sz: np.ndarray, band_pairs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Every metric of a score against the reference given MACs, from the pairs' signs (``_pair_signs``) of
    each: the score's ``sx``, the reference's ``sr``, MACs' ``sz``; ``band_pairs``: the positions of the
    pairs within each band.  ``bands``: each band's tau, on a last axis of its own."""
    t_all = _tau_of_signs(sx, sr)
    bands = np.stack([_tau_of_signs(sx[..., p], sr[..., p]) for p in band_pairs], axis=-1)
    return {"tau_all": t_all, "tau_bands": bands.mean(axis=-1), "bands": bands,
            "tau_partial_macs": partial_tau(t_all, _tau_of_signs(sx, sz), _tau_of_signs(sr, sz))}


def _interval(value: float, draws: np.ndarray) -> Interval:
    draws = draws[~np.isnan(draws)]
    if not len(draws):
        return Interval(float(value), float("nan"), float("nan"))
    low, high = np.percentile(draws, [2.5, 97.5])
    return Interval(float(value), float(low), float(high))


def rank_scores(ref: Sequence[float], scores: Mapping[str, Sequence[Sequence[float]]], macs: Sequence[float],
                bands: Sequence[np.ndarray], *, draws: int = 2000, seed: int = 0) -> dict[str, Ranking]:
    """Each score's ranking against ``ref``, with paired bootstrap 95% confidence intervals.

    A score's statistic is the mean over its seeds of each seed's statistic (never the best seed's). One
    bootstrap resample draws every band's architectures again with replacement (each band keeps its
    count), and every score, every seed and MACs are judged on the same resample: so the interval of a
    difference from MACs is that of the paired difference.

    Args:
        ref: the reference accuracy of every architecture.
        scores: per score, one series (a value per architecture) per seed.
        macs: every architecture's MACs; the baseline of every difference, and the ``macs`` row where
            ``scores`` has none.
        bands: the architectures' indices in each equal-latency band (``latency_bands``).
        draws: bootstrap resamples.
        seed: the resampling's seed.

    Returns:
        Per score (``macs`` included), its ``Ranking``.
    """
    order = np.concatenate(bands)  # the architectures band by band: each band a contiguous cut
    ends = [int(e) for e in np.cumsum([0, *map(len, bands)])]
    cuts = [slice(a, b) for a, b in zip(ends[:-1], ends[1:])]
    ref, z = np.asarray(ref, dtype=float)[order], np.asarray(macs, dtype=float)[order]
    series = {"macs": z[None], **{k: np.asarray(v, dtype=float)[:, order] for k, v in scores.items()}}
    rng = np.random.default_rng(seed)
    resample = np.concatenate([rng.integers(a, b, size=(draws, b - a)) for a, b in zip(ends[:-1], ends[1:])], axis=1)
    i, j = np.triu_indices(len(ref), 1)
    band_pairs = [np.flatnonzero((i >= c.start) & (j < c.stop)) for c in cuts]  # i < j: both in the band
    boot: dict[str, dict[str, list[np.ndarray]]] = {k: {} for k in series}
    for start in range(0, draws, 250):  # 250 resamples at a time: a score's sign matrices stay small
        idx = resample[start:start + 250]
        sr, sz = _pair_signs(ref[idx]), _pair_signs(z[idx])
        for name, xs in series.items():
            for m, v in _metrics(_pair_signs(xs[:, idx]), sr, sz, band_pairs).items():
                boot[name].setdefault(m, []).append(v.mean(axis=0))  # the mean over the seeds
    dist = {k: {m: np.concatenate(v) for m, v in d.items()} for k, d in boot.items()}
    points = {k: [point_taus(ref, x, z, cuts) for x in xs] for k, xs in series.items()}  # per seed
    value = {k: {m: float(np.mean([p[m] for p in ps], axis=0)) for m in METRICS} for k, ps in points.items()}
    out = {}
    for name, ps in points.items():
        d = dist[name]
        minus = None if name == "macs" else {m: _interval(value[name][m] - value["macs"][m], d[m] - dist["macs"][m])
                                             for m in METRICS}
        band_vals = np.mean([p["bands"] for p in ps], axis=0)
        out[name] = Ranking(len(ps), *(_interval(value[name][m], d[m]) for m in METRICS),
                            tuple(_interval(v, d["bands"][:, i]) for i, v in enumerate(band_vals)),
                            {m: [p[m] for p in ps] for m in METRICS}, minus)
    return out


def point_taus(ref: np.ndarray, x: np.ndarray, z: np.ndarray, bands: Sequence[Any]) -> dict[str, Any]:
    """Every metric of ``METRICS`` of the score ``x`` against ``ref`` given ``z`` (MACs), on the
    architectures themselves (no interval), from scipy's taus; ``bands``: each band's tau.

    Args:
        ref: the reference per architecture.
        x: the score per architecture.
        z: the MACs per architecture.
        bands: each band's architectures (indices, or slices of arrays ordered by band).
    """
    ref, x, z = (np.asarray(v, dtype=float) for v in (ref, x, z))
    t_all = kendall_tau(x, ref)
    bands = [kendall_tau(x[c], ref[c]) for c in bands]
    return {"tau_all": t_all, "tau_bands": float(np.mean(bands)), "bands": bands,
            "tau_partial_macs": partial_tau(t_all, kendall_tau(x, z), kendall_tau(ref, z))}


def reference_agreement(runs: list[list[float]]) -> dict[str, float]:
    """How well the stand-alone runs agree: Kendall tau of each pair, and of each run against the mean
    of the others (what a score as good as one more run would reach against a reference of the rest)."""
    pairs = [kendall_tau(x, y) for x, y in itertools.combinations(runs, 2)]
    loo = [kendall_tau(r, list(np.mean([o for j, o in enumerate(runs) if j != i], axis=0))) for i, r in enumerate(runs)]
    return {"pairwise_mean": float(np.mean(pairs)), "pairwise_min": float(min(pairs)),
            "pairwise_max": float(max(pairs)), "one_vs_mean_of_rest": float(np.mean(loo))}


def expected_tau(truth: np.ndarray, noise_std: float, draws: int, rng: np.random.Generator) -> float:
    """Mean Kendall tau-b between ``truth`` and ``truth`` plus Gaussian noise, over ``draws`` draws
    (``tau_b``, 1000 draws at a time)."""
    taus = []
    for n in [1000] * (draws // 1000) + [draws % 1000] * bool(draws % 1000):
        noisy = truth + rng.normal(0.0, noise_std, size=(n, len(truth)))
        taus.append(np.nan_to_num(tau_b(noisy, truth)))
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
        by_runs[m] = expected_tau(truth, float(np.sqrt(noise_var / m)), draws, rng) if arch_var > 0 else 0.0
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


def band_ceilings(runs: list[list[float]], bands: Sequence[np.ndarray], draws: int = 2000) -> list[float]:
    """The tau a perfect score is expected to reach within each band against the mean of the ``runs``
    (``reference_ceiling`` of the band's architectures alone, for a reference of as many runs)."""
    x = np.asarray(runs, dtype=float)
    return [reference_ceiling(list(x[:, b]), draws=draws, most_runs=len(x))["perfect_score_tau"] for b in bands]


def plot_ranking(path: Path, ref: Sequence[float], panels: Sequence[tuple[str, Sequence[float], str]],
                 runs: list[list[float]], bands: Sequence[np.ndarray]) -> None:
    """The ranking benchmark's plot: one panel per ``(title, values, x label)`` of ``panels`` against the
    reference (accuracies in %), each latency band in a colour of its own, then the reference against
    itself (its first two runs)."""
    cols = 4
    fig = Figure(figsize=(4 * cols, 3.6 * -(-(len(panels) + 1) // cols)))
    axes = fig.subplots(-(-(len(panels) + 1) // cols), cols).ravel()
    band_of = np.zeros(len(ref), dtype=int)
    for k, b in enumerate(bands):
        band_of[b] = k
    ref_pct = np.asarray(ref) * 100
    for ax, (title, values, label) in zip(axes, panels):
        for k in range(len(bands)):
            ax.scatter(np.asarray(values)[band_of == k], ref_pct[band_of == k], s=12, label=f"latency band {k + 1}")
        ax.set_xlabel(label)
        ax.set_ylabel(f"reference: test accuracy %, mean of {len(runs)} runs")
        ax.set_title(title, fontsize=9)
    axes[0].legend(fontsize=7)
    ax = axes[len(panels)]
    ax.scatter([x * 100 for x in runs[0]], [y * 100 for y in runs[1]], s=12, color="tab:gray")
    ax.set_xlabel("stand-alone test accuracy %, run 1")
    ax.set_ylabel("stand-alone test accuracy %, run 2")
    ax.set_title(f"the reference against itself: tau {kendall_tau(runs[0], runs[1]):.2f}", fontsize=9)
    for ax in axes[len(panels) + 1:]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def graded_arch(space: Any, rng: np.random.Generator) -> Arch:
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


def _uniform(space: Any, n: int, rng: np.random.Generator) -> list[Arch]:
    """``n`` distinct architectures drawn uniformly from ``space`` (every choice uniform)."""
    pool: dict[str, Arch] = {}
    for _ in range(100 * n):
        arch = space.random(rng)
        pool.setdefault(arch.digest(), arch)
        if len(pool) == n:
            return list(pool.values())
    raise SystemExit(f"--archs {n}: space {space.name!r} gave only {len(pool)} distinct architectures in {100 * n} "
                     "draws; give fewer --archs")


def pick_archs(space: Any, data: Any, n: int, seed: int, target_name: str = "cpu", pick: str = "uniform",
               keep: Path | None = None) -> tuple[list[Arch], list[float]]:
    """The architectures the benchmark ranks, fastest first, and their predicted latency on ``target_name``.

    ``pick="uniform"``: ``n`` distinct architectures drawn uniformly from the space, what a search meets.
    ``"spread"`` / ``"graded"``: the ``n`` at evenly spaced quantiles of the predicted latency of 2000
    random ones (``graded``: 2000 ``graded_arch`` ones, from the space's narrowest to its widest, which
    ranks them by size).  With ``keep`` (a run's cache folder) the pick is saved there as ``archs.json``
    and read back on every later call, so a part of the run on another machine, whose predictor
    (another scikit-learn) may predict a little differently, scores the same architectures.

    Raises:
        SystemExit: an unknown target, an unknown pick, or a space with fewer than ``n`` architectures.
    """
    kept = keep / "archs.json" if keep is not None else None
    if kept is not None and kept.is_file():
        rec = json.loads(kept.read_text())
        return [Arch.from_dict(x) for x in rec["archs"]], [float(v) for v in rec["predicted_ms"]]
    if pick not in PICKS:
        raise SystemExit(f"--pick {pick}: choose from {', '.join(PICKS)}")
    try:
        target = nas.load_target(target_name)
    except ValueError as e:
        raise SystemExit(f"--target: {e}") from None
    model = nas.load_latency_model(target)
    res = target.resolution or space.resolution
    rng = np.random.default_rng(seed)
    if pick == "uniform":
        archs = _uniform(space, n, rng)
    else:
        draw = space.random if pick == "spread" else lambda r: graded_arch(space, r)
        archs = list({a.digest(): a for a in (draw(rng) for _ in range(2000))}.values())
    ms = np.asarray(model.predict([adapt_arch(a, data, resolution=res) for a in archs]), dtype=float)
    order = np.argsort(ms, kind="stable")
    if pick != "uniform":
        order = list(dict.fromkeys(int(order[int(round(q * (len(order) - 1)))]) for q in np.linspace(0, 1, n)))
    if kept is not None:
        atomic_write_json(kept, {"pick": pick, "archs": [archs[i].to_dict() for i in order],
                                 "predicted_ms": [float(ms[i]) for i in order]})
    return [archs[i] for i in order], [float(ms[i]) for i in order]


def arch_baselines(archs: Sequence[Arch], predicted_ms: Sequence[float], data: Any) -> dict[str, list[float]]:
    """The trivial scores every estimator is judged beside: each architecture's MACs and parameters (as
    built for ``data``) and its predicted latency (larger: more accurate, the rule a size count follows)."""
    costs = [arch_cost(adapt_arch(a, data)) for a in archs]
    return {"macs": [float(c.macs) for c in costs], "params": [float(c.params) for c in costs],
            "latency": [float(v) for v in predicted_ms]}
