"""Search results: one record per trial, the Pareto front, trials.csv, pareto.json and pareto.png.

An accuracy (``val_accuracy``) carries its Wilson 95% interval on the validation images it was
scored on; front neighbours whose accuracies are within noise of each other are marked, and the
search's most accurate network is compared with the largest-MACs network that fits the budgets
(``nas.search.uncertainty``)."""

from __future__ import annotations

import csv
import io
import math
import os
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import optuna
from matplotlib.lines import Line2D
from optuna.trial import TrialState

from nas._io import atomic_write_bytes, atomic_write_json, atomic_write_text, file_lock
from nas.arch import Arch
from nas.latency.tables import Prediction
from nas.search.budget import BUDGET_ATTR, Budgets
from nas.search.pruners import intermediate_values
from nas.search.storage import SCHEMA_VERSION, STUDY_ATTR
from nas.search.uncertainty import (
    Baseline,
    add_intervals,
    baseline_to_beat,
    feasible_candidates,
    largest_within_noise,
    noise_neighbours,
    uncertainty_record,
)

__all__ = ["NOT_RUN", "SHORT_HOW", "latency_how", "pareto_front", "plot_pareto", "short_how", "trial_records",
           "write_outputs"]

NOT_RUN = ("duplicate", "surplus")  # statuses of trials asked but never run: not in the trial totals
# latency_how, for a table column
SHORT_HOW = {"measured": "predicted (table)", "estimated": "ESTIMATE (roofline)", "rehearsal": "REHEARSAL (table)"}


def latency_how(lat: Mapping[str, Any], *, extrapolation: bool = True) -> str | None:
    """How a stored latency figure was obtained, in the words every output uses (``Prediction.how``).

    Args:
        lat: a prediction as stored (``Prediction.to_dict()``: a trial's ``latency`` attribute), or
            at least its ``source`` and ``device``.
        extrapolation: append ``; EXTRAPOLATED: <why>`` when the network lies outside what the
            prediction was fitted on (``Prediction.outside``).

    Returns:
        ``predicted from a measured table (<device>)``, ``estimated (roofline, <device>)`` or a
        rehearsal's words (``REHEARSAL of <target> ... on <machine> ...``); None when ``lat`` names no
        known source.
    """
    try:
        how = Prediction(ms=float(lat.get("ms") or 0.0), source=str(lat["source"]),
                         device=str(lat.get("device") or ""), rehearsal=str(lat.get("rehearsal") or "")).how
    except (KeyError, TypeError, ValueError):
        return None
    return f"{how}; EXTRAPOLATED: {lat['outside']}" if extrapolation and lat.get("outside") else how


def short_how(lat: Mapping[str, Any]) -> str:
    """A stored latency's source in a table column's words (``SHORT_HOW``), ``EXTRAPOLATED`` added when it is."""
    short = SHORT_HOW.get(str(lat.get("source")), str(lat.get("source")))
    return f"{short}, EXTRAPOLATED" if lat.get("outside") else short


def trial_records(study: optuna.Study, *, images: int | None = None) -> list[dict[str, Any]]:
    """One flat record per trial (the rows of trials.csv).

    Args:
        study: the search's study.
        images: the validation images an evaluation scores, for trials that do not record theirs
            (``metrics["val_images"]``, recorded by the accuracy evaluators).

    Returns:
        The records, by trial number; a scored accuracy's Wilson 95% interval in ``ci95_low`` /
        ``ci95_high`` (``_ci``: the ``AccuracyInterval``) on ``scored_images`` images.
    """
    rows = []
    for t in study.get_trials(deepcopy=False):
        ua = t.user_attrs
        status = ua.get("status") or ("interrupted" if t.state == TrialState.FAIL else t.state.name.lower())
        lat = ua.get("latency") or {}
        cost = ua.get("cost") or {}
        cons = t.constraints
        score = t.values[0] if t.values is not None and status in ("evaluated", "cached") else None
        ms = t.values[1] if t.values is not None else lat.get("ms")
        arch = ua.get("arch")
        rows.append({
            "number": t.number,
            "state": t.state.name,
            "status": status,
            "score": score,
            "latency_ms": ms,
            "latency_source": lat.get("source"),
            "latency_how": latency_how(lat),
            "feasible": (all(v <= 0 for v in cons.values()) if cons else True) if ua.get("latency") else None,
            "params": cost.get("params"),
            "macs": cost.get("macs"),
            "peak_activation_kb": (cost["peak_activation_bytes"] / 1024.0) if "peak_activation_bytes" in cost else None,
            "latency_violation": cons.get("latency"),
            "memory_violation": cons.get("memory"),
            "eval_seconds": (ua.get("metrics") or {}).get("seconds") if status in ("evaluated", "pruned") else None,
            "epochs_trained": _epochs_trained(t, status),
            "epoch_scores": " ".join(f"{v:.4g}" for _, v in sorted(intermediate_values(t).items())) or None,
            "duration_s": t.duration.total_seconds() if t.duration is not None else None,
            "duplicate_of": ua.get("duplicate_of", ua.get("cached_from")),
            "worker": ua.get("worker"),
            "digest": ua.get("digest"),
            "error": ua.get("error"),
            "arch": _compact(Arch.from_dict(arch)) if arch else None,
            "_arch": arch,
            "_latency": lat,
            "_metrics": ua.get("metrics"),
        })
    objectives = (study.user_attrs.get(STUDY_ATTR) or {}).get("objectives") or ["score"]
    add_intervals(rows, accuracy=objectives[0] == "val_accuracy", images=images)
    return rows


def _epochs_trained(t: optuna.trial.FrozenTrial, status: str) -> int | None:
    """Epochs a trained trial ran: all of them, or as many as it had when a pruner stopped it."""
    if status not in ("evaluated", "pruned"):
        return None
    ep = (t.user_attrs.get("metrics") or {}).get("epochs")
    return int(ep) if ep is not None else None


def _compact(arch: Arch) -> str:
    """A one-line summary: stem width, then each run of same-kind same-width blocks as kind+width[xdepth]."""
    parts = [f"c{arch.stem.out_ch}"]
    prev, n = None, 0
    for b in arch.blocks:
        key = (b.kind, b.out_ch)  # type: ignore[attr-defined]
        if key == prev:
            n += 1
            continue
        if prev is not None:
            parts.append(f"{prev[0]}{prev[1]}" + (f"x{n}" if n > 1 else ""))
        prev, n = key, 1
    if prev is not None:
        parts.append(f"{prev[0]}{prev[1]}" + (f"x{n}" if n > 1 else ""))
    if arch.head.hidden:
        parts.append(f"head{arch.head.hidden}")
    return " ".join(parts)


def pareto_front(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The non-dominated feasible evaluated trials (max score, min latency), one per Arch, by latency."""
    cands: dict[str, dict[str, Any]] = {}
    for r in records:
        if r["state"] == "COMPLETE" and r["score"] is not None and r["feasible"]:
            d = r["digest"] or str(r["number"])
            if d not in cands:  # the first trial of each Arch
                cands[d] = r
    pts = list(cands.values())
    front = [p for p in pts if not any(
        (q["score"] >= p["score"] and q["latency_ms"] <= p["latency_ms"])
        and (q["score"] > p["score"] or q["latency_ms"] < p["latency_ms"]) for q in pts)]
    return sorted(front, key=lambda r: (r["latency_ms"], -r["score"]))


_CSV_COLUMNS = ("number", "state", "status", "score", "latency_ms", "latency_source", "latency_how", "feasible",
                "params", "macs",
                "peak_activation_kb", "latency_violation", "memory_violation", "eval_seconds", "epochs_trained",
                "epoch_scores", "duration_s", "duplicate_of", "worker", "digest", "error", "arch")
# the score's Wilson 95% interval and the images it was counted on, beside the score
_CSV_COLUMNS = (_CSV_COLUMNS[:_CSV_COLUMNS.index("score") + 1] + ("ci95_low", "ci95_high", "scored_images")
                + _CSV_COLUMNS[_CSV_COLUMNS.index("score") + 1:])



def _csv_text(records: Sequence[dict[str, Any]], metric: str) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([metric if c == "score" else c for c in _CSV_COLUMNS])
    for r in records:
        row = []
        for c in _CSV_COLUMNS:
            v = r[c]
            row.append("" if v is None else f"{v:.6g}" if isinstance(v, float) else v)
        w.writerow(row)
    return buf.getvalue()


def write_outputs(study: optuna.Study, run_dir: str | Path, *, info: dict[str, Any] | None = None,
                  plot: bool = True) -> dict[str, Any]:
    """Write pareto.json, trials.csv and pareto.png for the whole study into ``run_dir``.

    Each file is replaced atomically, and one worker at a time reads the study and writes the three
    (a lock on the run dir's pareto.json), so the files always show one moment of the study, and the
    last worker to finish writes the final state.  ``pareto.json``'s ``snapshot`` says when, by whom,
    and how many trials were still running in other workers; its ``latency_budget``, how the study's
    latency budget was chosen at its start (``nas.search.budget``)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(run_dir / "pareto.json", what=f"the results in {run_dir}"):
        return _write_outputs(study, run_dir, info=info, plot=plot)


def _write_outputs(study: optuna.Study, run_dir: Path, *, info: dict[str, Any] | None,
                   plot: bool) -> dict[str, Any]:
    rec = dict(study.user_attrs.get(STUDY_ATTR) or {})
    metric = (rec.get("objectives") or ["score"])[0]
    records = trial_records(study, images=(info or {}).get("val_images"))
    front = pareto_front(records)
    ties, baseline = noise_neighbours(front), baseline_to_beat(records, front)
    roomy = largest_within_noise(feasible_candidates(records)) if front else None
    statuses: dict[str, int] = {}
    for r in records:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    pareto = []
    for r in front:
        lat = r["_latency"]
        pareto.append({
            "trial": r["number"],
            metric: r["score"],
            "latency_ms": r["latency_ms"],
            "latency_source": lat.get("source"),
            "latency_how": r["latency_how"],
            "latency": lat,
            "params": r["params"],
            "macs": r["macs"],
            "peak_activation_bytes": int(round(r["peak_activation_kb"] * 1024)) if r["peak_activation_kb"] else None,
            "peak_activation_kb": r["peak_activation_kb"],
            "digest": r["digest"],
            "summary": r["arch"],
            "metrics": r["_metrics"],
            "arch": r["_arch"],
            "accuracy_ci95": r["_ci"].to_dict() if r["_ci"] else None,
            "within_noise_of": ties.get(r["number"], []),
        })
    out = {
        "schema": "hwnas.pareto",
        "version": SCHEMA_VERSION,
        "study": study.study_name,
        "metric": metric,
        "objectives": {metric: "maximize", "latency_ms": "minimize"},
        "search": rec,
        **({"latency_budget": study.user_attrs[BUDGET_ATTR]} if BUDGET_ATTR in study.user_attrs else {}),
        **(info or {}),
        "trials": {"total": len(records) - sum(statuses.get(k, 0) for k in NOT_RUN), **statuses},
        "snapshot": {"written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "by": f"{socket.gethostname()}:{os.getpid()}",
                     "running": sum(r["state"] == "RUNNING" for r in records)},
        "pareto": pareto,
        "accuracy_uncertainty": uncertainty_record(metric, records),
        "baseline": baseline.to_dict() if baseline else None,
        "largest_within_noise": _roomy_record(roomy),
        "notes": ("arch: the deployed network (the dataset's classes and input channels at the target's deployment "
                  "resolution); latency is predicted for it, params / MACs / peak memory counted on it; "
                  f"{metric} was measured with the same body at the dataset's resolution "
                  f"({(rec.get('data') or {}).get('resolution')} px)"),
    }
    paths: dict[str, Any] = {"pareto_json": run_dir / "pareto.json", "trials_csv": run_dir / "trials.csv"}
    atomic_write_json(paths["pareto_json"], _jsonable(out))
    atomic_write_text(paths["trials_csv"], _csv_text(records, metric))
    if plot:
        budget = Budgets.from_record(rec.get("budgets") or {}).latency_budget_ms
        target = rec.get("target") or {}
        title = (f"{rec.get('search_space', {}).get('name', '?')} on {(rec.get('data') or {}).get('name', '?')} "
                 f"for {target.get('name', '?')} ({(target.get('device') or {}).get('name', '?')})")
        how = next((h for r in records if (h := latency_how(r["_latency"], extrapolation=False))), None)
        paths["pareto_png"] = plot_pareto(records, front, run_dir / "pareto.png", metric=metric, latency_budget_ms=budget,
                                          title=title, source=rec.get("latency_source", "measured"), how=how,
                                          ties=ties, baseline=baseline)
    paths["front"] = front
    paths["within_noise"] = ties
    paths["baseline"] = baseline
    paths["largest_within_noise"] = roomy
    paths["records"] = records
    paths["statuses"] = statuses
    return paths


def _roomy_record(r: dict[str, Any] | None) -> dict[str, Any] | None:
    """pareto.json's ``largest_within_noise``: the largest-MACs feasible network whose accuracy lies within the
    most accurate one's 95% interval (``nas.search.uncertainty.largest_within_noise``)."""
    if r is None:
        return None
    return {"trial": r["number"], "score": r["score"], "macs": r["macs"], "latency_ms": r["latency_ms"],
            "ci95": r["_ci"].to_dict() if r["_ci"] else None, "digest": r["digest"], "summary": r["arch"],
            "rule": "the largest-MACs network within the budgets whose score lies within the 95% interval of the "
                    "most accurate one's (the most accurate one where scores have no interval)"}


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def plot_pareto(records: Sequence[dict[str, Any]], front: Sequence[dict[str, Any]], path: str | Path, *,
                metric: str, latency_budget_ms: float | None, title: str, source: str, how: str | None = None,
                ties: Mapping[int, Sequence[int]] | None = None, baseline: Baseline | None = None) -> Path:
    """Score vs latency: every evaluated trial faded, the front highlighted, the budget line.

    ``source``: the latency model's (``nas.latency.SOURCES``); ``how``: how the figures were
    obtained (``latency_how``), the x axis's label (without it, the source's words without a device).
    The front's accuracies carry their 95% intervals as error bars; ``ties`` (``noise_neighbours``):
    neighbours within noise, joined by a band; ``baseline`` (``baseline_to_beat``): the largest-MACs
    network under the budget, marked.
    """
    matplotlib.use("Agg", force=False)

    acc = metric == "val_accuracy"
    scale = 100.0 if acc else 1.0
    ev = [r for r in records if r["score"] is not None and r["latency_ms"] is not None]
    over = [r for r in records if r["status"] == "over_budget" and r["latency_ms"] is not None]
    fig, ax = plt.subplots(figsize=(8, 5), dpi=150)
    handles = []
    xs_all = [r["latency_ms"] for r in ev + over]
    if ev:
        ax.scatter([r["latency_ms"] for r in ev], [r["score"] * scale for r in ev], s=18, color="0.55", alpha=0.35,
                   linewidths=0, zorder=2)
        handles.append(Line2D([], [], ls="", marker="o", color="0.55", alpha=0.5, label=f"trials ({len(ev)})"))
    if front:
        fx = [r["latency_ms"] for r in front]
        fy = [r["score"] * scale for r in front]
        ax.step(fx, fy, where="post", color="tab:blue", lw=1.6, zorder=3)
        ax.scatter(fx, fy, s=46, color="tab:blue", edgecolors="white", linewidths=0.8, zorder=4)
        for r, x, y in zip(front, fx, fy):
            ax.annotate(f"#{r['number']}", (x, y), textcoords="offset points", xytext=(4, -11), fontsize=7,
                        color="tab:blue")
        handles.append(Line2D([], [], color="tab:blue", marker="o", label=f"Pareto front ({len(front)})"))
        handles += _draw_uncertainty(ax, front, ties or {}, baseline, scale)
    if ev:
        handles += _set_ylim(ax, ev, front, scale)
    if over:
        ymin = ax.get_ylim()[0]
        ax.scatter([r["latency_ms"] for r in over], [ymin] * len(over), marker="|", s=80, color="tab:red",
                   alpha=0.5, zorder=2, clip_on=False)
        handles.append(Line2D([], [], ls="", marker="|", markersize=9, color="tab:red",
                              label=f"over budget, not trained ({len(over)})"))
    pruned = sum(r["status"] == "pruned" for r in records)
    if pruned:
        handles.append(Line2D([], [], ls="", label=f"({pruned} trials stopped early by the pruner: no score)"))
    if xs_all:
        x0, x1 = min(xs_all), max(xs_all)
        span = max(x1 - x0, 1e-6)
        xl = (max(0.0, x0 - 0.06 * span), x1 + 0.06 * span)
        if latency_budget_ms is not None and latency_budget_ms <= xl[1] + 0.5 * span:
            xl = (xl[0], max(xl[1], latency_budget_ms + 0.06 * span))
            ax.axvline(latency_budget_ms, color="tab:red", ls="--", lw=1.2, zorder=1)
            handles.append(Line2D([], [], color="tab:red", ls="--", label=f"latency budget {latency_budget_ms:g} ms"))
        elif latency_budget_ms is not None:
            handles.append(Line2D([], [], color="tab:red", ls="--",
                                  label=f"latency budget {latency_budget_ms:g} ms (off the chart, right)"))
        ax.set_xlim(*xl)
    how = how or {"estimated": "estimated (roofline)", "rehearsal": "REHEARSAL"}.get(source,
                                                                                    "predicted from a measured table")
    note = {"estimated": ": an ESTIMATE, no measured table", "rehearsal": ":\nmeasured on another machine, not the device"}
    ax.set_xlabel(f"latency (ms), {how}{note.get(source, '')}")
    ax.set_ylabel("validation accuracy (%)" if acc else f"{metric} (zero-cost proxy, higher is better)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.25, zorder=0)
    if not ev:
        ax.text(0.5, 0.5, "no evaluated trials yet", transform=ax.transAxes, ha="center", va="center", color="0.4")
    ax.legend(handles=handles, loc="best", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    p = Path(path)
    atomic_write_bytes(p, buf.getvalue())
    return p


def _set_ylim(ax: Any, ev: Sequence[dict[str, Any]], front: Sequence[dict[str, Any]], scale: float) -> list[Line2D]:
    """The score axis: the top 90% of the trials, the whole front and its intervals; a legend line for
    the trials below it."""
    ys = sorted(r["score"] * scale for r in ev)
    lo_data = ys[max(0, int(0.1 * len(ys)) - 1)]
    lo = min(lo_data, min((r["score"] * scale for r in front), default=lo_data),
             min((r["_ci"].low * scale for r in front if r.get("_ci")), default=lo_data))
    hi = max(ys[-1], max((r["_ci"].high * scale for r in front if r.get("_ci")), default=ys[-1]))
    pad = max(1e-6, (hi - lo) * 0.08)
    ax.set_ylim(lo - pad, hi + pad)
    hidden = sum(1 for y in ys if y < lo - pad)
    return [Line2D([], [], ls="", label=f"({hidden} low-scoring trials below the axis)")] if hidden else []


def _draw_uncertainty(ax: Any, front: Sequence[dict[str, Any]], ties: Mapping[int, Sequence[int]],
                      baseline: Baseline | None, scale: float) -> list[Line2D]:
    """The front's 95% intervals (error bars), a band joining neighbours within noise, the baseline marked."""
    handles = []
    cis = [r for r in front if r.get("_ci")]
    if cis:
        ns = sorted({r["_ci"].n for r in cis})
        ax.errorbar([r["latency_ms"] for r in cis], [r["score"] * scale for r in cis], fmt="none", ecolor="tab:blue",
                    elinewidth=1.0, capsize=2.5, alpha=0.8, zorder=3,
                    yerr=[[(r["score"] - r["_ci"].low) * scale for r in cis],
                          [(r["_ci"].high - r["score"]) * scale for r in cis]])
        n = str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"
        handles.append(Line2D([], [], color="tab:blue", marker="|", ls="", markersize=9,
                              label=f"95% interval (Wilson, {n} val images)"))
    pairs = [(a, b) for a, b in zip(front, front[1:]) if b["number"] in ties.get(a["number"], ())]
    for a, b in pairs:
        ax.plot([a["latency_ms"], b["latency_ms"]], [a["score"] * scale, b["score"] * scale], color="tab:orange",
                lw=7, alpha=0.35, solid_capstyle="round", zorder=2.5)
    if pairs:
        handles.append(Line2D([], [], color="tab:orange", lw=7, alpha=0.35,
                              label=f"neighbours within noise ({len(pairs)} pair{'s' if len(pairs) > 1 else ''})"))
    if baseline is not None:
        ax.scatter([baseline.latency_ms], [baseline.score * scale], marker="D", s=70, facecolors="none",
                   edgecolors="tab:green", linewidths=1.6, zorder=5)
        iv = baseline.interval
        if iv is not None and baseline.trial not in {r["number"] for r in front}:
            ax.errorbar([baseline.latency_ms], [baseline.score * scale], fmt="none", ecolor="tab:green", capsize=2.5,
                        elinewidth=1.0, zorder=3, yerr=[[(baseline.score - iv.low) * scale], [(iv.high - baseline.score) * scale]])
        handles.append(Line2D([], [], ls="", marker="D", markerfacecolor="none", color="tab:green",
                              label=f"baseline: largest MACs within the budget (#{baseline.trial})"))
    return handles
