"""Prove the predictor: measure held-out architectures end to end and score four methods.

Methods, all scored on the same held-out networks:

(a) ``predictor``   the calibrated predictor (table + learned model + calibration);
(b) ``table_sum``   the raw sum of the table's block entries;
(c) ``flops_linear``  ``ms = a * MACs + b`` fitted on the calibration networks (the same data
                    the calibration sees), the usual FLOPs proxy;
(d) ``roofline``    the roofline estimate from the target's device figures;
and, when the drift check ran (below):
(e) ``predictor_rescaled``  (a) times the drift ratio: the median, over the re-measured
                    calibration networks, of their latency now over their table figure;
and, when the table holds a ``refresh`` or ``recalibration`` record (``nas.profile refresh=N`` /
``recalibrate=true``, measured earlier):
(g) ``predictor_stored``  the predictor as ``nas.predict`` / ``nas.search`` / ``nas.train`` use
                    it, with that record applied;
and, with ``recalibrate`` (every calibration network re-measured beside the held-out set):
(f) ``predictor_recalibrated``  the same predictor with its calibration (linear and network
                    residual) fitted on the calibration networks as measured now: the table's
                    blocks stay as measured, the calibration absorbs how the machine moved since,
                    also where it moved unevenly (small networks less than large ones).

Held-out means: seeded random samples of the spaces drawn from seeds other than the
calibration seed, with any architecture that is in the table's calibration set removed; timm
models are never in it.  Metrics per method: share within ±5% and ±10%, MAPE, Kendall τ, n.
Measurements are cached next to the report so an interrupted validation resumes.

Drift check: a machine's speed moves (other load, memory contention, a noisy cloud neighbour).
Validation re-measures a few of the table's own calibration networks in the same rounds as the
held-out set and reports, per group, how their latency now compares with the table's figure.
A ratio far from 1 means the machine is not in the state the table was measured in, and every
prediction is off by about that much; the report says so instead of hiding it, and scores (e):
the calibration refreshed by one scale factor measured now on networks it was fitted on (never
on the held-out networks), as a researcher would re-measure a few known networks before
trusting absolute milliseconds on a machine whose speed moves (a shared cloud VM moved 2-8%
within the hour here).  (a) stays the figure of the table as built.

Reproducibility: the re-measured calibration networks are also scored as if their own table
figure were the prediction (``report["reproducibility"]``: as built and rescaled by the drift
scale; and, when the table holds a recalibration record, that record's figure, the ceiling of
(g)).  A method that reads the table as it was measured (a, b, and e with its one factor)
cannot be expected to agree with a new measurement more often than the table agrees with a
re-measurement of the very same network: where that is far below 100%, a ±5% figure says as
much about the machine as about the predictor.  (f) re-measures, so it is not bound by it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from sklearn.base import clone
from sklearn.linear_model import LinearRegression

from nas._io import atomic_write_json
from nas.arch import Arch
from nas.cost import arch_cost
from nas.latency.budget_curve import budget_plot, budget_report
from nas.latency.bundle import bundle_manifest, bundle_networks, bundle_results
from nas.latency.device import device_identity
from nas.latency.load import load_latency_model, resolve_target
from nas.latency.measure import Interrupted, ProfileSettings
from nas.latency.options import VALIDATE
from nas.latency.predictor import LatencyPredictor, recorded, table_networks
from nas.latency.profiler import VALIDATION_SEED, anchor_archs, measure_networks, pruned_archs, round_order
from nas.latency.reproducibility import table_ceiling
from nas.latency.roofline import Roofline
from nas.latency.runtimes import get_runtime
from nas.latency.scoring import drift_ratios, drift_verdict, drift_warning, score, score_by_range
from nas.space import list_calibration_spaces, load_space, space_names
from nas.target import Target
from nas.timm_arch import arch_from_spec

__all__ = ["CEILING_OF", "METHODS", "RECALIBRATED", "RESCALED", "STORED", "WITHOUT_EXTRA", "ValidationSet", "held_out_archs",
           "held_out_pruned", "reproducibility_lines", "round_order", "score", "scatter_plot", "validate", "validated_spaces"]

log = logging.getLogger(__name__)

METHODS = ("predictor", "table_sum", "flops_linear", "roofline")
RESCALED = "predictor_rescaled"  # scored too when the drift check ran
RECALIBRATED = "predictor_recalibrated"  # scored too when every calibration network was re-measured
STORED = "predictor_stored"  # scored too when the table holds a refresh / recalibration record
# scored beside RECALIBRATED when the table holds networks of calibration-only spaces: the same
# re-measured figures, calibrated on the search spaces' networks alone (what those spaces add)
WITHOUT_EXTRA = "recalibrated_search_spaces_only"
# what each reproducibility figure bounds: a method reading those figures cannot agree with now more often
CEILING_OF = {"as_built": "predictor", "rescaled": RESCALED, "recalibration": STORED}


def held_out_archs(space, n: int, *, exclude: set[str], resolution: int | None = None,
                   seed: int = VALIDATION_SEED) -> list[Arch]:
    """``n`` distinct seeded samples of ``space`` whose digests are not in ``exclude``."""
    rng = np.random.default_rng([seed, sum(map(ord, space.name))])
    out: dict[str, Arch] = {}
    tries = 0
    while len(out) < n and tries < 100 * n:
        tries += 1
        a = space.random(rng)
        a = a.with_resolution(resolution) if resolution else a
        d = a.digest()
        if d not in exclude:
            out.setdefault(d, a)
    return list(out.values())


def held_out_pruned(space, n: int, *, exclude: set[str], resolution: int | None = None,
                    seed: int = VALIDATION_SEED) -> list[Arch]:
    """``n`` seeded networks of ``space`` narrowed as pruning narrows them
    (``nas.latency.profiler.pruned_archs`` with the validation seed), none in ``exclude``."""
    out = {a.digest(): a for a in pruned_archs(space, 2 * n, resolution=resolution, seed=seed)
           if a.digest() not in exclude}
    return list(out.values())[:n]


@dataclass
class ValidationSet:
    """Held-out architectures with their end-to-end measurements (cached on disk)."""

    archs: list[Arch]
    measured_ms: list[float]
    groups: list[str]  # space name, "<space> pruned", "timm" or "arch files"
    anchors: dict[str, list[tuple[float, float]]] | None = None  # group -> (now, table) of calibration nets
    remeasured: list[tuple[Arch, float]] | None = None  # those calibration networks with their latency now


def measure_held_out(archs: Sequence[Arch], groups: Sequence[str], runtime, settings, *, cache: Path | None,
                     progress: bool = True, table=None, anchors_per_group: int | None = 10,
                     desc: str = "held-out networks") -> ValidationSet:
    """Measure every network end to end, in the same interleaved rounds as the profiler; with
    ``table``, also re-measure a few of its calibration networks (the drift check; ``None``: all
    of them, which ``validate(recalibrate=True)`` needs).

    Each round visits the networks in its own seeded random order (``round_order``), the held-out
    networks mixed with the calibration networks: a machine's speed moves within a round (a 20-minute
    validation here: +-2% between rounds, more within one), and a fixed order gave the held-out
    networks (always measured first) and the re-measured calibration networks (always last)
    different shares of it.  Fitted on the calibration networks as re-measured, held-out space
    networks came out 1.0-2.0% low (median), where 5-fold CV on the calibration networks
    themselves showed no bias (+0.05%)."""
    anchors = anchor_archs(table, anchors_per_group) if table is not None else []
    everything = list(archs) + [a for a in anchors if a not in set(archs)]
    done: dict[str, list[float]] = {}
    if cache is not None and cache.is_file():
        data = json.loads(cache.read_text())
        if data.get("runtime") == runtime.info() and data.get("precision") == runtime.precision:
            done = {k: list(v) for k, v in data["rounds_ms"].items()}
        else:
            log.warning("ignoring %s: measured with another runtime/precision", cache)

    def save() -> None:
        if cache is not None:
            atomic_write_json(cache, {"runtime": runtime.info(), "precision": runtime.precision, "rounds_ms": done})

    try:
        for r in range(1, settings.rounds + 1):
            measure_networks(everything, runtime, settings, round_=r, shuffle=True,
                             have=lambda a: len(done.get(a.digest(), [])),
                             record=lambda a, e: done.setdefault(a.digest(), []).append(e.median_ms),
                             save=save, progress=progress, desc=desc)
    finally:
        save()
    med = {a.digest(): float(np.median(done[a.digest()][: settings.rounds])) for a in everything}
    drift: dict[str, list[tuple[float, float]]] = {}
    for a in anchors:
        drift.setdefault(a.name or "?", []).append((med[a.digest()], table.networks[a].median_ms))
    return ValidationSet(list(archs), [med[a.digest()] for a in archs], list(groups), drift or None,
                         [(a, med[a.digest()]) for a in anchors] or None)


def reproducibility(anchors: dict[str, list[tuple[float, float]]], scale: float,
                    remeasured: Sequence[tuple[Arch, float]] = (), record: dict | None = None) -> dict[str, dict[str, float]]:
    """The table's own figure of each re-measured calibration network as its "prediction" of
    the measurement now: ``as_built`` and ``rescaled`` (times the drift ``scale``, the median over
    these same networks): the ceilings of ``predictor`` and ``predictor_rescaled``.  With a
    recalibration ``record``, also ``recalibration``: its figure of each of the ``remeasured``
    networks it holds, the ceiling of ``predictor_stored`` (keys: ``CEILING_OF``)."""
    now = np.array([n for pairs in anchors.values() for n, _ in pairs])
    then = np.array([t for pairs in anchors.values() for _, t in pairs])
    out = {"as_built": score(then, now), "rescaled": score(then * scale, now)}
    figs = (record or {}).get("network_ms") or {}
    pairs = [(figs[a.digest()], ms) for a, ms in remeasured if a.digest() in figs]
    if pairs:
        out["recalibration"] = score([t for t, _ in pairs], [n for _, n in pairs])
    return out


def reproducibility_lines(report: dict[str, Any]) -> list[str]:
    """The report's reproducibility figures as sentences (``nas.validate`` and bench_predictor)."""
    return [f"reproducibility ({how}): the {'recalibration' if how == 'recalibration' else 'table'}'s own figure of "
            f"the {s['n']} re-measured calibration networks is within ±5% of the new measurement for "
            f"{100 * s['within_5pct']:.1f}%, ±10% for {100 * s['within_10pct']:.1f}% (the ceiling of {CEILING_OF[how]})"
            for how, s in report.get("reproducibility", {}).items()]


def predictions(predictor: LatencyPredictor, roofline: Roofline, vs: ValidationSet) -> dict[str, np.ndarray]:
    """Each method's predictions for the held-out set; the FLOPs fit uses the calibration networks."""
    nets = table_networks(predictor.table_)
    if len(nets) < 2:
        raise ValueError("the table has fewer than 2 calibration networks: run `python -m nas.profile` for the "
                         "target (it measures them) before validating")
    flops = LinearRegression().fit(np.array([[arch_cost(a).macs] for a, _ in nets], float),
                                   np.array([ms for _, ms in nets]))
    macs = np.array([[arch_cost(a).macs] for a in vs.archs], float)
    return {
        "predictor": predictor.predict(vs.archs),
        "table_sum": np.array([predictor.raw_sum(a) for a in vs.archs]),
        "flops_linear": flops.predict(macs),
        "roofline": np.array([roofline.predict_arch(a) for a in vs.archs]),
    }


def _calibration_only_names() -> set[str]:
    """The space names (``Arch.name`` of their networks) of the calibration-only spaces in
    search_spaces/calibration/."""
    return {load_space(n).name for n in list_calibration_spaces()}


def validate(predictor: LatencyPredictor, roofline: Roofline, vs: ValidationSet, *,
             recalibrate: bool = False, target_name: str = "<target>") -> dict[str, Any]:
    """The report: per method overall and per group; never fitted on the held-out set.

    ``recalibrate``: also score ``predictor_recalibrated``, the predictor calibrated on the
    table's calibration networks as re-measured in ``vs`` (measure with ``anchors_per_group=None``).
    ``target_name``: the target the drift warning's fix names (``conf=<target_name>``).
    """
    calib = {a.digest() for a, _ in table_networks(predictor.table_)}
    leaked = [a for a in vs.archs if a.digest() in calib]
    if leaked:
        raise ValueError(f"{len(leaked)} validation architectures are in the calibration set")
    preds = predictions(predictor, roofline, vs)
    methods: tuple[str, ...] = METHODS
    report: dict[str, Any] = {"methods": {}, "groups": {}}
    if vs.anchors:
        scale, per_group, n = drift_ratios(vs.anchors)
        preds[RESCALED] = preds["predictor"] * scale
        methods = (*METHODS, RESCALED)
        report["drift_scale"] = {"now_over_table": scale, "n": n}
    if recalibrate:
        nets = vs.remeasured or []
        if len(nets) < len(predictor.table_.networks):
            raise ValueError(f"recalibrate needs every calibration network of the table re-measured "
                             f"({len(predictor.table_.networks)}), got {len(nets)}: measure with "
                             f"anchors_per_group=None")
        # the calibration now sees the machine's state; no stored ratio on top
        again = clone(predictor).set_params(refresh=False)
        preds[RECALIBRATED] = again.fit(predictor.table_, nets, mismatched=predictor.mismatched_).predict(vs.archs)
        methods = (*methods, RECALIBRATED)
        extra = _calibration_only_names()
        own = [(a, ms) for a, ms in nets if a.name not in extra]
        if len(own) < len(nets):
            preds[WITHOUT_EXTRA] = clone(again).fit(predictor.table_, own, mismatched=predictor.mismatched_).predict(vs.archs)
            methods = (*methods, WITHOUT_EXTRA)
            report["calibration_spaces"] = {"networks": len(nets) - len(own), "of": len(nets),
                                            "spaces": sorted({a.name for a, _ in nets if a.name in extra})}
    rf, rc = recorded(predictor.table_)
    if (rf or rc) and not predictor.refresh:
        stored = clone(predictor).set_params(refresh=True)
        preds[STORED] = stored.fit(predictor.table_, mismatched=predictor.mismatched_).predict(vs.archs)
        methods = (*methods, STORED)
        report["stored"] = {"record": "recalibration" if rc else "refresh",
                            "measured_at": (rc or rf or {}).get("measured_at")}
    meas = np.array(vs.measured_ms)
    groups = np.array(vs.groups)
    for m in methods:
        report["methods"][m] = score(preds[m], meas)
    for g in sorted(set(vs.groups)):
        sel = groups == g
        report["groups"][g] = {m: score(preds[m][sel], meas[sel]) for m in methods}
    report["latency_ranges"] = {m: score_by_range(preds[m], meas) for m in ("predictor", RESCALED) if m in preds}
    if vs.anchors:
        report["drift"] = {g: {"now_over_table": per_group[g], "n": len(pairs)} for g, pairs in vs.anchors.items()}
        report["reproducibility"] = reproducibility(vs.anchors, scale, vs.remeasured or (), rc)
        verdict = drift_verdict(vs.anchors, predictor.table_.metadata.get("reproducibility"))
        report["drift_verdict"] = verdict
        warning = drift_warning(verdict, target_name)
        if warning:
            report["drift_warning"] = warning
            log.warning(warning)
    report["points"] = []
    for i, (a, g, ms) in enumerate(zip(vs.archs, vs.groups, meas)):
        ex = predictor.explain(a)
        report["points"].append(
            {"arch": a.name or a.digest(), "digest": a.digest(), "group": g, "measured_ms": float(ms),
             "layers_measured": ex.n_measured, "layers_learned": ex.n_learned,
             **{m: float(preds[m][i]) for m in methods}})
    return report


def scatter_plot(report: dict[str, Any], path: str | Path, *, title: str = "") -> Path:
    """Predicted vs measured for every method, with the ±10% band (a ``Figure`` of its own, no pyplot)."""
    pts = report["points"]
    methods = list(report["methods"])
    meas = np.array([p["measured_ms"] for p in pts])
    cols = min(len(methods), 4)  # up to 4 per row: 7 methods side by side are too thin to read
    rows = -(-len(methods) // cols)
    fig = Figure(figsize=(4.2 * cols, 4.4 * rows))
    grid = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)
    axes = grid.ravel()
    for ax in axes[len(methods):]:
        ax.set_visible(False)
    lo, hi = meas.min() * 0.7, meas.max() * 1.3
    for m in methods:
        hi = max(hi, float(np.nanmax([p[m] for p in pts])) * 1.05)
    xs = np.array([lo, hi])
    for ax, m in zip(axes, methods):
        pred = np.array([p[m] for p in pts])
        s = report["methods"][m]
        ax.fill_between(xs, xs * 0.9, xs * 1.1, color="tab:green", alpha=0.12, label="±10%")
        ax.plot(xs, xs, color="k", lw=0.8)
        for g in sorted({p["group"] for p in pts}):
            sel = np.array([p["group"] == g for p in pts])
            ax.scatter(meas[sel], pred[sel], s=12, alpha=0.7, label=g)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_title(f"{m}\n±10%: {100 * s['within_10pct']:.0f}%  ±5%: {100 * s['within_5pct']:.0f}%  "
                     f"τ={s['kendall_tau']:.3f}", fontsize=9)
        ax.set_xlabel("measured ms")
        ax.tick_params(labelbottom=True)
    for r in range(rows):
        grid[r, 0].set_ylabel("predicted ms")
    axes[0].legend(fontsize=7, loc="upper left")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=110)
    return p


def held_out_set(spaces: list[str], n: int, pruned: int, models: Sequence[str], *, exclude: set[str],
                 resolution: int | None, seed: int) -> tuple[list[Arch], list[str]]:
    """``n`` held-out samples and ``pruned`` held-out pruned networks spread over ``spaces``, plus
    the ``models`` (``timm:<name>``, or an Arch JSON file), with their groups (space name,
    ``<space> pruned``, ``timm`` or ``arch files``)."""
    archs, groups = [], []
    for i, name in enumerate(spaces):
        k = n // len(spaces) + (i < n % len(spaces))
        sp = load_space(name)
        got = held_out_archs(sp, k, exclude=exclude, resolution=resolution, seed=seed)
        archs += got
        groups += [sp.name] * len(got)
        k = pruned // len(spaces) + (i < pruned % len(spaces))
        got = held_out_pruned(sp, k, exclude=exclude, resolution=resolution, seed=seed) if k else []
        archs += got
        groups += [f"{sp.name} pruned"] * len(got)
    for m in models or []:
        if m.endswith(".json"):  # an Arch file (a searched front's network, say): group "arch files"
            if not Path(m).is_file():
                raise ValueError(f"models: no Arch file {m}")
            archs.append(arch_from_spec(m, resolution=resolution))
            groups.append("arch files")
            continue
        archs.append(arch_from_spec(m if m.startswith("timm:") else f"timm:{m}", resolution=resolution))
        groups.append("timm")
    return archs, groups


def validate_target(target: Target | str | Mapping[str, Any], *, n: int = VALIDATE.n, pruned: int = VALIDATE.pruned,
                    models: Sequence[str] = (),
                    spaces: str | Sequence[str] | None = None, resolution: int | None = None,
                    out: str | Path = VALIDATE.out, seed: int = VALIDATE.seed, settings=None,
                    drift_anchors: int = VALIDATE.drift_anchors, recalibrate: bool = False, allow_mismatch: bool = False,
                    bundle: str | Path | None = None, progress: bool = True, say=log.info) -> dict[str, Any]:
    """Score a target's latency predictor against held-out networks measured on the device (the
    ``nas.validate`` command).

    The networks are measured on this machine, or taken from a device ``bundle`` written with
    ``held_out=N``; every method (the predictor, its variants, the roofline) is scored on them.  The
    report goes to ``out`` (JSON) with its scatter plot beside it (``.png``); for a table built under
    a budget, or missing blocks of the spaces, also what it reached and what more measuring would buy
    (``report["budget"]``, plotted to ``.budget.png``).

    Args:
        target: the target whose measured table is validated: a ``Target``, a target name (read with ``nas.load_target``) or a dict of its fields.
        n: seeded held-out networks drawn from the spaces.
        pruned: seeded pruned-like held-out networks.
        models: timm models (``timm:<name>``) measured too.
        spaces: the search spaces to draw from and to count the table's blocks against (default: the
            table's, ``validated_spaces``).
        resolution: their input resolution (default: the target's).
        out: the report file.
        seed: the seed of the held-out draw (other than the calibration's).
        settings: the measuring loop's settings (``ProfileSettings``).
        drift_anchors: calibration networks per space re-measured to check the table for drift.
        recalibrate: also score the predictor recalibrated on those.
        allow_mismatch: accept a table whose metadata differs from the target.
        bundle: a bundle folder whose ``results.json`` holds the held-out networks measured on the device.
        progress: show a progress bar.
        say: where progress lines go.

    Returns:
        The report: ``methods`` (within ±5% / ±10%, MAPE, Kendall τ, n per method), ``groups``,
        ``points``, and ``drift``, ``budget``, ``table_reproducibility`` where they apply.

    Raises:
        TypeError: ``target`` is none of those.
        ValueError: the target has no measured table, or nothing to validate.
        Interrupted: Ctrl-C (the measurements so far are cached: a re-run continues).
    """
    target = resolve_target(target)
    # the table as built: a refresh record is not applied (predictor_rescaled is the drift check's)
    model = load_latency_model(target, allow_mismatch=allow_mismatch, refresh=False)
    if not isinstance(model, LatencyPredictor):
        raise ValueError(f"target {target.name!r} has no measured table to validate: {model.warning}")
    spaces = validated_spaces(model, spaces, bundle)
    if model.note and bundle is None:  # measured here, with the installed runtime
        say(model.note)
    if bundle is not None:
        vs = bundle_validation_set(model, bundle, allow_mismatch=allow_mismatch)
        where = f"in a {model.table_.rehearsal_label}" if model.table_.rehearsal_label else "on the device"
        say(f"validating on {len(vs.archs)} held-out networks ({', '.join(sorted(set(vs.groups)))}) measured "
            f"{where} through the bundle {bundle}")
        return _finish(model, target, vs, Path(out), spaces, resolution, recalibrate=False)
    ident = device_identity(target.device.kind)
    why = model.table_.measured_elsewhere(ident)
    if why and not allow_mismatch:
        raise ValueError(f"the table was measured on {model.device!r} but {why}: validate on "
                         f"the device the table describes, through a bundle (nas.profile ... bundle=<dir> "
                         f"held_out=N, then bundle=<dir>/results.json here), or pass allow_mismatch=true")
    exclude = {a.digest() for a, _ in table_networks(model.table_)}
    archs, groups = held_out_set(space_names(spaces), n, pruned, models, exclude=exclude,
                                 resolution=resolution or target.resolution, seed=seed)
    if not archs:
        raise ValueError("nothing to validate: n=0, pruned=0 and no models")
    out = Path(out)
    runtime = get_runtime(target)
    settings = settings or ProfileSettings()
    say(f"validating on {len(archs)} held-out networks ({', '.join(sorted(set(groups)))}) measured with "
        f"{runtime.name} {runtime.version()} on {ident['name']}")
    try:
        vs = measure_held_out(archs, groups, runtime, settings, cache=out.with_suffix(".measurements.json"),
                              progress=progress, table=model.table_ if drift_anchors or recalibrate else None,
                              anchors_per_group=None if recalibrate else drift_anchors)
    except KeyboardInterrupt as e:
        raise Interrupted(f"measurements so far are cached beside {out}; run again to continue") from e
    return _finish(model, target, vs, out, spaces, resolution, recalibrate=recalibrate)


def validated_spaces(model: LatencyPredictor, spaces: str | Sequence[str] | None, bundle: str | Path | None = None) -> list[str]:
    """The spaces a validation of ``model`` draws from and counts its table's blocks against: ``spaces``,
    else its table's (``LatencyTable.spaces``), else the ``bundle``'s, else every shipped space."""
    if not spaces and not model.table_.spaces and bundle is not None:  # imported before tables recorded them
        spaces = bundle_manifest(bundle).get("spaces")
    return space_names(spaces or model.table_.spaces)


def _finish(model, target, vs: ValidationSet, out: Path, spaces, resolution, *, recalibrate: bool) -> dict[str, Any]:
    """Score ``vs``, add the budget section, write the report and its plots."""
    report = validate(model, Roofline.from_target(target), vs, recalibrate=recalibrate, target_name=target.name)
    report.update(target=target.name, table=model.describe(), latency_source=model.source, latency_how=model.how,
                  calibration_networks=model.n_calibration_)
    table_ceiling(model.table_, report)
    title = f"{target.name}: {model.table_.rehearsal_label or model.device}"
    budget = _budget_section(model, vs, spaces, resolution or target.resolution, report, out, title=title)
    if budget is not None:
        report["budget"] = budget
    atomic_write_json(out, report)
    scatter_plot(report, out.with_suffix(".png"), title=title)
    return report


def bundle_validation_set(model: LatencyPredictor, results: str | Path, *, allow_mismatch: bool = False) -> ValidationSet:
    """The held-out networks a device bundle measured (``nas.profile ... bundle=<dir> held_out=N``),
    refused unless measured on the device, runtime and precision of the predictor's table."""
    res = bundle_results(results)
    meta = model.table_.metadata
    diffs = [f"{f} {res.get(f)!r} vs the table's {meta.get(f)!r}" for f in ("precision", "batch", "threads")
             if res.get(f) != meta.get(f)]
    for f in ("device", "runtime"):
        got, have = (res.get(f) or {}).get("name"), (meta.get(f) or {}).get("name")
        if got != have:
            diffs.append(f"{f} {got!r} vs the table's {have!r}")
    if diffs and not allow_mismatch:
        raise ValueError(f"{results} was measured with {'; '.join(diffs)}: validate with the bundle whose results "
                         "built this table (or pass allow_mismatch=true)")
    held = bundle_networks(results, "held_out")
    if not held:
        raise ValueError(f"{results} holds no measured held-out networks: write the bundle with held_out=N "
                         "(nas.profile ... bundle=<dir> held_out=100) and measure it on the device")
    return ValidationSet([a for a, _ in held], [ms for _, ms in held], [a.name or "held-out" for a, _ in held])


def _budget_section(model: LatencyPredictor, vs: ValidationSet, spaces: list[str], resolution: int | None,
                    report: dict[str, Any], out: Path, *, title: str) -> dict[str, Any] | None:
    """``nas.latency.budget_curve.budget_report`` for a budgeted or partial table, with its plot
    (``out`` with ``.budget.png``) when matplotlib is installed; None for a complete table."""
    keys = [k for n in spaces for k in load_space(n).unique_blocks(resolution=resolution)]
    budget = budget_report(model, vs, space_keys=keys, reached=report["methods"]["predictor"])
    if budget is not None:  # the spaces counted, and the curve's plot
        budget.update(spaces=spaces, plot=budget_plot(budget, out.with_suffix(".budget.png"), title=title))
    return budget
