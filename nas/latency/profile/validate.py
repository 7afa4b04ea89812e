"""Prove the predictor: measure held-out architectures end to end and score four methods.

Methods, all scored on the same held-out networks:

(a) ``predictor``   the calibrated predictor (table + learned model + calibration), as ``nas.search``
                    and ``nas.predict`` use it: on the table's own machine refreshed on the fly
                    (``nas.latency.profile.refresh``: a few calibration networks re-timed before measuring,
                    each space's networks rescaled by its own; ``retime=False``: the table as built);
(h) ``predictor_as_built``  (a) without the refresh, scored when one was applied;
(b) ``table_sum``   the raw sum of the table's block entries;
(c) ``flops_linear``  ``ms = a * MACs + b`` fitted on the calibration networks (the same data
                    the calibration sees), the usual FLOPs proxy;
(d) ``roofline``    the roofline estimate from the target's device figures;
and, when the drift check ran (below):
(e) ``predictor_rescaled``  the table as built times the drift ratio: the median, over the
                    re-measured calibration networks, of their latency now over their table figure;
and, when the table holds a ``refresh`` or ``recalibration`` record (``nas.profile refresh=N`` /
``recalibrate=true``, measured earlier):
(g) ``predictor_stored``  the predictor with that record applied, as ``nas.train`` uses it;
and, with ``recalibrate`` (every calibration network re-measured beside the held-out set):
(f) ``predictor_recalibrated``  the same predictor with its calibration (linear and network
                    residual) fitted on the calibration networks as measured now: the table's
                    blocks stay as measured, the calibration absorbs how the machine moved since,
                    also where it moved unevenly (small networks less than large ones).

Held-out means: seeded random samples of the spaces drawn from seeds other than the
calibration seed, with any architecture that is in the table's calibration set removed; timm
models are never in it.  Metrics per method: share within ±5% and ±10%, MAPE, Kendall τ, n.
A network whose rounds (each a fresh session) disagree by more than ±10% is left out of every
score and named (``nas.latency.profile.repeatability``).  Measurements are cached next to the report so
an interrupted validation resumes.

Drift check: a machine's speed moves (other load, memory contention, a noisy cloud neighbour).
Validation re-measures a few of the table's own calibration networks in the same rounds as the
held-out set and reports, per group, how their latency now compares with the table's figure,
and judges it against the figures (a) used: the refresh's where one was applied.  A ratio far
from 1 means the machine moved, and every prediction is off by about that much; the report
says so instead of hiding it, and scores (e), measured on networks the calibration was fitted
on, never on the held-out ones (a shared cloud VM moved 2-8% within the hour here).

Reproducibility: the re-measured calibration networks are also scored as if their own table
figure were the prediction (``report["reproducibility"]``: as built and rescaled by the drift
scale; and, when the table holds a recalibration record, that record's figure, the ceiling of
(g)).  A method that reads the table as it was measured cannot be expected to agree with a new
measurement more often than the table agrees with a re-measurement of the very same network.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.linear_model import LinearRegression

from nas._io import atomic_write_json
from nas.arch import Arch
from nas.cost import arch_cost
from nas.latency.bundle import bundle_manifest, bundle_networks, bundle_results
from nas.latency.predict import (
    LatencyPredictor,
    Roofline,
    drift_ratios,
    drift_verdict,
    drift_warning,
    load_latency_model,
    recorded,
    resolve_target,
    score,
    score_by_range,
    table_networks,
)
from nas.latency.profile.budget_curve import budget_plot, budget_report
from nas.latency.profile.options import REFRESH, VALIDATE, VALIDATION_SEED
from nas.latency.profile.profiler import anchor_archs, measure_networks, pruned_archs
from nas.latency.profile.refresh import Refresh, refresh_model
from nas.latency.profile.repeatability import repeatability
from nas.latency.profile.reproducibility import reproducibility, table_ceiling
from nas.latency.profile.validate_plot import scatter_plot
from nas.latency.runtimes import Interrupted, ProfileSettings, device_identity, get_runtime
from nas.space import list_calibration_spaces, load_space, space_names
from nas.target import Target
from nas.timm_arch import arch_from_spec

__all__ = ["AS_BUILT", "METHODS", "RECALIBRATED", "RESCALED", "STORED", "WITHOUT_EXTRA", "ValidationSet", "held_out_archs", "held_out_pruned", "validate", "validated_spaces"]

log = logging.getLogger(__name__)

METHODS = ("predictor", "table_sum", "flops_linear", "roofline")
RESCALED = "predictor_rescaled"  # scored too when the drift check ran
RECALIBRATED = "predictor_recalibrated"  # scored too when every calibration network was re-measured
STORED = "predictor_stored"  # scored too when the table holds a refresh / recalibration record
AS_BUILT = "predictor_as_built"  # scored too when the table was refreshed on the fly: the table as measured
# scored beside RECALIBRATED when the table holds networks of calibration-only spaces: the same
# re-measured figures, calibrated on the search spaces' networks alone (what those spaces add)
WITHOUT_EXTRA = "recalibrated_search_spaces_only"


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
    (``nas.latency.profile.profiler.pruned_archs`` with the validation seed), none in ``exclude``."""
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
    rounds_ms: list[list[float]] | None = None  # each held-out network's figure per round (each a fresh session)


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
                         [(a, med[a.digest()]) for a in anchors] or None,
                         [done[a.digest()][: settings.rounds] for a in archs])


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
             recalibrate: bool = False, target_name: str = "<target>", refresh: Refresh | None = None) -> dict[str, Any]:
    """The report: per method overall and per group; never fitted on the held-out set.

    ``recalibrate``: also score ``predictor_recalibrated``, the predictor calibrated on the
    table's calibration networks as re-measured in ``vs`` (measure with ``anchors_per_group=None``).
    ``target_name``: the target the drift warning's fix names (``conf=<target_name>``).
    ``refresh``: the table's refresh on the fly (``nas.latency.profile.refresh``): ``predictor`` is then the
    predictor as built times each network's factor, as ``nas.search`` / ``nas.predict`` use it, and
    ``predictor_as_built`` the table as built.  Networks whose rounds do not repeat within
    ``REPEAT_TOLERANCE`` (``nas.latency.profile.repeatability``) are left out of every score, named.
    """
    calib = {a.digest() for a, _ in table_networks(predictor.table_)}
    leaked = [a for a in vs.archs if a.digest() in calib]
    if leaked:
        raise ValueError(f"{len(leaked)} validation architectures are in the calibration set")
    preds = predictions(predictor, roofline, vs)
    methods: tuple[str, ...] = METHODS
    report: dict[str, Any] = {"methods": {}, "groups": {}}
    if refresh is not None:
        report["refresh"] = refresh.to_dict()
        if refresh.applied:
            preds[AS_BUILT] = preds["predictor"]
            preds["predictor"] = preds[AS_BUILT] * np.array([refresh.ratio_for(a.name) for a in vs.archs])
            methods = (*METHODS, AS_BUILT)
    if vs.anchors:
        scale, per_group, n = drift_ratios(vs.anchors)
        preds[RESCALED] = preds[AS_BUILT if AS_BUILT in preds else "predictor"] * scale
        methods = (*methods, RESCALED)
        report["drift_scale"] = {"now_over_table": scale, "n": n}
    if recalibrate:
        methods = _recalibrated(predictor, vs, preds, methods, report)
    rf, rc = recorded(predictor.table_)
    if (rf or rc) and not predictor.refresh:
        stored = clone(predictor).set_params(refresh=True)
        preds[STORED] = stored.fit(predictor.table_, mismatched=predictor.mismatched_).predict(vs.archs)
        methods = (*methods, STORED)
        report["stored"] = {"record": "recalibration" if rc else "refresh",
                            "measured_at": (rc or rf or {}).get("measured_at")}
    rep = repeatability(vs.rounds_ms or [[ms] for ms in vs.measured_ms])
    _scores(report, preds, methods, vs, np.array(rep.repeatable))
    report["repeatability"] = {"rounds": rep.rounds, "tolerance": rep.tolerance, "judged": rep.judged,
                               "round_factors": list(rep.round_factors),
                               "left_out": [vs.archs[i].name or vs.archs[i].digest() for i in rep.left_out()]}
    if vs.anchors:
        report["drift"] = {g: {"now_over_table": per_group[g], "n": len(pairs)} for g, pairs in vs.anchors.items()}
        report["reproducibility"] = reproducibility(vs.anchors, scale, vs.remeasured or (), rc)
        applied = refresh if refresh is not None and refresh.applied else None
        since = {g: [(now, then * (applied.ratio_for(g) if applied else 1.0)) for now, then in pairs]
                 for g, pairs in vs.anchors.items()}  # against the figures the predictions used
        verdict = drift_verdict(since, predictor.table_.metadata.get("reproducibility"))
        report["drift_verdict"] = {**verdict, "refreshed": applied.ratio if applied else None}
        warning = drift_warning(verdict, target_name, refreshed=applied.ratio if applied else None)
        if warning:
            report["drift_warning"] = warning
            log.warning(warning)
    report["points"] = []
    for i, (a, g, ms) in enumerate(zip(vs.archs, vs.groups, vs.measured_ms)):
        ex = predictor.explain(a)
        report["points"].append(
            {"arch": a.name or a.digest(), "digest": a.digest(), "group": g, "measured_ms": float(ms),
             "layers_measured": ex.n_measured, "layers_learned": ex.n_learned,
             "rounds_spread_pct": rep.spread_pct[i] if rep.judged else None, "repeatable": rep.repeatable[i],
             **{m: float(preds[m][i]) for m in methods}})
    return report


def _recalibrated(predictor: LatencyPredictor, vs: ValidationSet, preds: dict[str, np.ndarray],
                  methods: tuple[str, ...], report: dict[str, Any]) -> tuple[str, ...]:
    """``predictor_recalibrated`` (and ``recalibrated_search_spaces_only``) into ``preds``; the methods now."""
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
    return methods


def _scores(report: dict[str, Any], preds: dict[str, np.ndarray], methods: Sequence[str], vs: ValidationSet,
            keep: np.ndarray) -> None:
    """Each method's score overall, per group and (predictor, rescaled) per latency range, on the
    networks ``keep`` marks (the repeatable ones); the predictor's on all of them beside."""
    meas, groups = np.array(vs.measured_ms), np.array(vs.groups)
    for m in methods:
        report["methods"][m] = score(preds[m][keep], meas[keep])
    for g in sorted(set(vs.groups)):
        sel = (groups == g) & keep
        if sel.any():
            report["groups"][g] = {m: score(preds[m][sel], meas[sel]) for m in methods}
    report["latency_ranges"] = {m: score_by_range(preds[m][keep], meas[keep]) for m in ("predictor", RESCALED)
                                if m in preds}
    if not keep.all():
        report["with_unrepeatable"] = {"predictor": score(preds["predictor"], meas)}


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
                    bundle: str | Path | None = None, retime: bool = REFRESH.retime, progress: bool = True,
                    say=log.info) -> dict[str, Any]:
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
        retime: on the table's own machine, re-time a few of its calibration networks first and score
            ``predictor`` rescaled by them, as ``nas.search`` / ``nas.predict`` use it (``nas.latency.profile.refresh``).
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
    vs, ref = _measure(model, target, archs, groups, runtime, settings, out, retime=retime, drift_anchors=drift_anchors,
                       recalibrate=recalibrate, progress=progress, say=say)
    return _finish(model, target, vs, out, spaces, resolution, recalibrate=recalibrate, refresh=ref)


def _measure(model: LatencyPredictor, target: Target, archs: list[Arch], groups: list[str], runtime, settings,
             out: Path, *, retime: bool, drift_anchors: int, recalibrate: bool, progress: bool,
             say) -> tuple[ValidationSet, Refresh | None]:
    """The refresh on the fly (when ``retime``), then the held-out networks and the drift check measured."""
    ref = refresh_model(model, target, spaces=sorted({a.name for a in archs if a.name}), apply=False) if retime else None
    if ref is not None:
        say(ref.line())
    try:
        vs = measure_held_out(archs, groups, runtime, settings, cache=out.with_suffix(".measurements.json"),
                              progress=progress, table=model.table_ if drift_anchors or recalibrate else None,
                              anchors_per_group=None if recalibrate else drift_anchors)
    except KeyboardInterrupt as e:
        raise Interrupted(f"measurements so far are cached beside {out}; run again to continue") from e
    return vs, ref


def validated_spaces(model: LatencyPredictor, spaces: str | Sequence[str] | None, bundle: str | Path | None = None) -> list[str]:
    """The spaces a validation of ``model`` draws from and counts its table's blocks against: ``spaces``,
    else its table's (``LatencyTable.spaces``), else the ``bundle``'s, else every shipped space."""
    if not spaces and not model.table_.spaces and bundle is not None:  # imported before tables recorded them
        spaces = bundle_manifest(bundle).get("spaces")
    return space_names(spaces or model.table_.spaces)


def _finish(model, target, vs: ValidationSet, out: Path, spaces, resolution, *, recalibrate: bool,
            refresh: Refresh | None = None) -> dict[str, Any]:
    """Score ``vs``, add the budget section, write the report and its plots."""
    report = validate(model, Roofline.from_target(target), vs, recalibrate=recalibrate, target_name=target.name,
                      refresh=refresh)
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
    """``nas.latency.profile.budget_curve.budget_report`` for a budgeted or partial table, with its plot
    (``out`` with ``.budget.png``) when matplotlib is installed; None for a complete table."""
    keys = [k for n in spaces for k in load_space(n).unique_blocks(resolution=resolution)]
    budget = budget_report(model, vs, space_keys=keys, reached=report["methods"].get(AS_BUILT, report["methods"]["predictor"]))
    if budget is not None:  # the spaces counted, and the curve's plot
        budget.update(spaces=spaces, plot=budget_plot(budget, out.with_suffix(".budget.png"), title=title))
    return budget
