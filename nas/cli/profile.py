"""``python -m nas.profile conf=<target>``: build the latency table on the device.

Thin Hydra entry point: parse the config, call ``nas.latency``, print a summary.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nas.cli._common import check_counts, hydra_app, user_errors

log = logging.getLogger("nas.profile")


@user_errors
def run(cfg: DictConfig) -> dict:
    from nas.latency.bundle import import_bundle, write_bundle
    from nas.latency.profiler import (
        ProfileSettings,
        calibration_archs,
        new_metadata,
        profile_blocks,
        profile_networks,
        pruned_archs,
    )
    from nas.latency.runtimes import device_identity, device_mismatch, get_runtime
    from nas.latency.table import LatencyTable, resolve_table_path
    from nas.space import list_spaces, load_space

    check_counts(cfg, dict.fromkeys(("calibration_networks", "pruned_networks", "refresh"), "networks per space"))
    target = OmegaConf.to_container(cfg.target, resolve=True)
    settings = ProfileSettings(**OmegaConf.to_container(cfg.profile))
    out = Path(cfg.out) if cfg.out else resolve_table_path(target["table"] or f"{target['name']}.json", for_writing=True)
    ss = cfg.search_space
    names = list_spaces() if not ss else [str(ss)] if isinstance(ss, str) else [str(n) for n in ss]
    resolution = cfg.resolution or target.get("resolution")
    spaces = [load_space(n) for n in names]
    cal_spaces = [load_space(n) for n in calibration_space_names(cfg.calibration_spaces, default=not ss and
                                                                 not resolution)]
    keys = []
    for sp in spaces:
        keys += sp.unique_blocks(resolution=resolution, in_chans=list(cfg.in_chans or ()),
                                            num_classes=list(cfg.num_classes or ()))
    for sp in cal_spaces:  # calibration only: their own stems and heads
        keys += sp.unique_blocks(resolution=resolution)
    for m in cfg.models or []:
        from nas.from_timm import arch_from_spec

        keys += arch_from_spec(m if m.startswith("timm:") else f"timm:{m}", resolution=resolution).keys()
    # narrowed networks as structured pruning leaves them: their blocks and the networks themselves
    pruned = [a for sp in spaces + cal_spaces for a in pruned_archs(sp, cfg.pruned_networks, resolution=resolution)]
    keys += [k for a in pruned for k in a.keys()]
    keys = list(dict.fromkeys(keys))
    where = f"{', '.join(names)} at {'resolution ' + str(resolution) if resolution else 'their own resolutions'}"
    if cal_spaces:
        where += f" + calibration-only spaces {', '.join(sp.name for sp in cal_spaces)}"
    if pruned:
        where += f" + the blocks of {len(pruned)} pruned networks"
    if cfg.models:
        where += f" + the blocks of {len(cfg.models)} timm models"

    if cfg.bundle:
        manifest = write_bundle(keys, target, cfg.bundle, settings=settings, progress=cfg.progress)
        print(f"wrote a bundle of {len(keys)} blocks ({where}) to {manifest.parent}\n"
              f"on the device:  cd {manifest.parent.name} && python3 measure_bundle.py\n"
              f"then here:      python -m nas.profile conf={target['name']} "
              f"import_bundle={manifest.parent}/results.json")
        return {"bundle": str(manifest.parent), "blocks": len(keys)}

    table = LatencyTable.load(out) if out.is_file() else None
    if cfg.import_bundle:
        table = import_bundle(cfg.import_bundle, table)
        table.check_target(target, allow_mismatch=cfg.allow_mismatch)
        table.save(out)
        print(f"imported {cfg.import_bundle} into {out}: {table.describe()}")
        return {"table": str(out), "entries": len(table)}

    ident = device_identity((target.get("device") or {}).get("kind", "cpu"))
    here, want = ident["name"], (target.get("device") or {}).get("name")
    why = device_mismatch(target.get("device"), ident)
    if why and not cfg.allow_mismatch:
        raise ValueError(
            f"{why}, so it is not target {target['name']!r}'s device: run nas.profile on the device, "
            f"or write a bundle for it (bundle=<dir>), or pass allow_mismatch=true to measure here anyway"
        )
    runtime = get_runtime(target)
    if table is None:
        table = LatencyTable(metadata=new_metadata(target, runtime, settings), path=out)
        if why:
            table.metadata["device"]["note"] = f"measured on {here!r} for target device {want!r} ({why}; allow_mismatch)"
    else:
        table.check_target({**target, "device": {"name": here}}, allow_mismatch=cfg.allow_mismatch)
        why = table.measured_elsewhere(ident)
        if why and not cfg.allow_mismatch:
            raise ValueError(
                f"{out} holds measurements from another processor: {why}. Adding to it would mix two machines' "
                f"timings in one table; measure into a new file (out=<path>), or pass allow_mismatch=true"
            )
    if cfg.recalibrate and cfg.refresh:
        raise ValueError(f"refresh={cfg.refresh} and recalibrate=true: pick one (recalibrate re-measures every "
                         "calibration network, refresh a few of them for one scale factor)")
    if cfg.recalibrate:
        return _recalibrate(table, out, runtime, settings, progress=cfg.progress)
    if cfg.refresh:
        return _refresh(table, out, runtime, settings, cfg.refresh, progress=cfg.progress)
    R = settings.rounds
    nets = [a for sp in spaces + cal_spaces for a in calibration_archs(sp, cfg.calibration_networks,
                                                        resolution=resolution)] + pruned
    missing = len(table.missing(keys))
    print(f"{len(keys)} unique blocks in {where}; {len(keys) - missing} already in {out}, {missing} to measure "
          f"on {here} with {runtime.name} {runtime.version()} ({target.get('provider')}, {runtime.precision}, "
          f"batch {runtime.batch}, {runtime.threads} thread(s)); {len(nets)} calibration networks; "
          f"{R} round(s), blocks and networks interleaved", flush=True)
    rep = nrep = None
    try:
        for r in range(1, R + 1):  # rounds spread over the run, so slow drifts of the machine average out
            b = profile_blocks(keys, runtime, table, settings=settings, path=out, progress=cfg.progress,
                               limit=cfg.limit, round_=r)
            n = profile_networks(nets, runtime, table, settings=settings, path=out, progress=cfg.progress,
                                 round_=r)
            rep, nrep = (b, n) if rep is None else (rep.combine(b), nrep.combine(n))
    except KeyboardInterrupt:
        print(f"\ninterrupted: {len(table)} block entries and {len(table.networks)} networks are saved in {out}; "
              "run the same command again to continue", file=sys.stderr)
        sys.exit(130)
    assert rep is not None and nrep is not None
    print(f"{rep.measured} block measurements in {rep.seconds:.1f}s ({rep.entries_per_minute:.0f}/min), "
          f"{rep.remeasured} re-measured for noise; {nrep.measured} network measurements in {nrep.seconds:.1f}s; "
          f"table: {table.describe()}, {len(table.networks)} networks -> {out}")
    return {"table": str(out), "measured": rep.measured, "remeasured": rep.remeasured, "seconds": rep.seconds,
            "entries": len(table), "requested": rep.requested, "networks": len(table.networks),
            "network_seconds": nrep.seconds, "rounds": R}


def calibration_space_names(given, *, default: bool) -> list[str]:
    """The calibration-only spaces to profile: ``given`` (names as in search_spaces/calibration/, or
    YAML paths; a bare name means ``calibration/<name>``), or when it is None every one of them if
    ``default`` (all shipped spaces at their own resolutions), else none."""
    from nas.space import list_calibration_spaces

    if given is None:
        return list_calibration_spaces() if default else []
    names = [str(given)] if isinstance(given, str) else [str(n) for n in given]
    out = [n if "/" in n or n.endswith((".yaml", ".yml")) else f"calibration/{n}" for n in names]
    known = list_calibration_spaces()
    for n in out:
        if n.startswith("calibration/") and n not in known and not Path(n).is_file():
            raise ValueError(f"calibration_spaces: unknown calibration space {n.split('/', 1)[1]!r}; the shipped "
                             f"ones are {', '.join(k.split('/', 1)[1] for k in known)} (search_spaces/calibration/), "
                             "or give a YAML path")
    return out


def _refresh(table, out: Path, runtime, settings, per_space: int, *, progress: bool) -> dict:
    """Re-measure ``per_space`` of the table's calibration networks per space now and store the
    median now/table ratio in its metadata (``refresh``); the predictor scales by it.  Entries
    and networks are left as measured; only the ``refresh`` record is replaced."""
    from nas.latency.table import now_iso
    from nas.latency.validate import drift_ratios, measure_held_out

    if not table.networks:
        raise ValueError(f"refresh={per_space}: {out} holds no calibration networks to re-measure; build the table "
                         "first (nas.profile without refresh=)")
    print(f"refresh: re-measuring {per_space} of the table's calibration networks per space ({settings.rounds} "
          f"round(s)) with {runtime.name} {runtime.version()}", flush=True)
    try:  # the drift check of nas.validate, without held-out networks
        vs = measure_held_out([], [], runtime, settings, cache=None, progress=progress, table=table,
                              anchors_per_group=per_space, desc="calibration networks")
    except KeyboardInterrupt:
        print(f"\ninterrupted: {out} is unchanged", file=sys.stderr)
        sys.exit(130)
    scale, per, n = drift_ratios(vs.anchors or {})
    rec = {"now_over_table": scale, "networks": n, "per_space": per,
           "measured_at": now_iso(), "rounds": settings.rounds,
           "previous": (table.metadata.get("refresh") or {}).get("now_over_table")}
    table.metadata["refresh"] = rec
    table.save(out)
    print(f"refresh: the table's calibration networks now run at {rec['now_over_table']:.3f}x their table figures "
          f"({', '.join(f'{g} {v:.3f}x' for g, v in per.items())}); predictions from {out} are scaled by it "
          f"(the entries themselves are unchanged)")
    return {"table": str(out), "refresh": rec}


def _recalibrate(table, out: Path, runtime, settings, *, progress: bool) -> dict:
    """Re-measure every calibration network of the table now (interleaved rounds, resumable from
    ``<table>.recalibrate.json``) and store their figures in its metadata (``recalibration``); the
    predictor fits its calibration (linear and network residual) on them instead of the table's
    figures.  Entries and networks are left as measured."""
    from nas.latency.predictor import LatencyPredictor
    from nas.latency.table import now_iso
    from nas.latency.validate import drift_ratios, measure_held_out, score

    if not table.networks:
        raise ValueError(f"recalibrate=true: {out} holds no calibration networks to re-measure; build the table "
                         "first (nas.profile without recalibrate=)")
    cache = out.with_suffix(".recalibrate.json")
    print(f"recalibrate: re-measuring all {len(table.networks)} calibration networks ({settings.rounds} round(s)) "
          f"with {runtime.name} {runtime.version()}; progress kept in {cache}", flush=True)
    try:
        vs = measure_held_out([], [], runtime, settings, cache=cache, progress=progress, table=table,
                              anchors_per_group=None, desc="calibration networks")
    except KeyboardInterrupt:
        print(f"\ninterrupted: {out} is unchanged; the networks measured so far are kept in {cache}: run the same "
              "command again to continue", file=sys.stderr)
        sys.exit(130)
    scale, per, n = drift_ratios(vs.anchors or {})
    figs = {a.digest(): ms for a, ms in vs.remeasured or []}
    rec = {"measured_at": now_iso(), "rounds": settings.rounds, "networks": len(figs), "now_over_table": scale,
           "per_space": per, "runtime": runtime.info(), "network_ms": figs}
    previous = table.metadata.get("recalibration")
    if previous:
        rec["previous"] = {k: previous.get(k) for k in ("measured_at", "now_over_table")}
    as_built = LatencyPredictor(refresh=False).fit(table)
    table.metadata["recalibration"] = rec
    now = LatencyPredictor().fit(table)
    archs, y = [a for a, _ in vs.remeasured], [ms for _, ms in vs.remeasured]
    before, after = score(as_built.predict(archs), y), score(now.predict(archs), y)
    table.save(out)
    cache.unlink(missing_ok=True)
    print(f"recalibrate: the table's calibration networks now run at {scale:.3f}x their table figures "
          f"({', '.join(f'{g} {v:.3f}x' for g, v in per.items())}); on them (in-sample) the predictor as built was "
          f"within ±5% for {100 * before['within_5pct']:.1f}%, recalibrated {100 * after['within_5pct']:.1f}% "
          f"(MAPE {before['mape']:.2f}% -> {after['mape']:.2f}%). Predictions from {out} now use this calibration "
          "(the entries and networks themselves are unchanged); `nas.validate recalibrate=true` scores it on "
          "held-out networks", flush=True)
    return {"table": str(out), "recalibration": {k: v for k, v in rec.items() if k != "network_ms"},
            "in_sample": {"as_built": before, "recalibrated": after}}


@hydra_app("profile")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
