"""The ``nas.profile`` workflow as one library call: ``profile_target(target, ...)``.

Collects the blocks of the spaces (and of calibration-only spaces, pruned networks and timm
models), then, depending on the arguments, writes a bundle for a device without torch,
imports a bundle's results, re-measures a few calibration networks for one scale factor
(``refresh``), re-measures all of them for a new calibration (``recalibrate``), or measures the
missing blocks and calibration networks in interleaved rounds into the table: one planned job
(``plan_jobs``) under one progress bar over all of it, optionally within a time budget
(``budget_min``: the blocks the spaces' networks use most and the calibration networks first).

Lines for the user go to ``say`` (``log.info`` unless the caller passes ``print``).  Ctrl-C
raises ``Interrupted`` (a ``KeyboardInterrupt``) whose message says what was kept.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nas._io import exclusive, shell_join
from nas.arch import Arch, BlockKey
from nas.latency.bundle import BundleError, bundle_cost, bundle_manifest, write_bundle
from nas.latency.bundle import import_bundle as _import_bundle
from nas.latency.predict import LatencyPredictor, Roofline, drift_ratios, resolve_target, score
from nas.latency.profile import reproducibility
from nas.latency.profile.jobs import expected_seconds, plan_jobs, run_jobs
from nas.latency.profile.options import PROFILE, VALIDATION_SEED
from nas.latency.profile.profiler import block_frequency, calibration_order, new_metadata, pruned_archs
from nas.latency.profile.validate import held_out_set, measure_held_out
from nas.latency.profile.watch import Unwatched, Watch, noise_note
from nas.latency.runtimes import Interrupted, ProfileSettings, device_identity, get_runtime, measure_overhead
from nas.latency.tables import LatencyTable, default_table_out, now_iso, profile_writer
from nas.machine import device_mismatch
from nas.space import list_calibration_spaces, load_space, space_names
from nas.target import Target
from nas.timm_arch import arch_from_spec

__all__ = ["calibration_space_names", "call_ms_of", "check_budget", "default_out", "profile_target", "remeasure_calibration"]

log = logging.getLogger(__name__)


def calibration_space_names(given, *, default: bool) -> list[str]:
    """The calibration-only spaces to profile: ``given`` (names as in search_spaces/calibration/, or
    YAML paths; a bare name means ``calibration/<name>``), or when it is None every one of them if
    ``default`` (all shipped spaces at their own resolutions), else none."""
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


def _collect(names: list[str], resolution: int | None, calibration_spaces, *, models, in_chans, num_classes,
             pruned_networks: int) -> tuple[list[BlockKey], list, list[Arch], str, dict[str, list[BlockKey]]]:
    """Every block to measure, the spaces (search and calibration-only), the pruned networks, a
    sentence saying where the blocks come from, and each space's blocks (its pruned networks' too)."""
    spaces = [load_space(n) for n in names]
    cal_spaces = [load_space(n) for n in calibration_spaces]
    per: dict[str, list[BlockKey]] = {}
    for sp in spaces:
        per[sp.name] = sp.unique_blocks(resolution=resolution, in_chans=list(in_chans or ()),
                                        num_classes=list(num_classes or ()))
    for sp in cal_spaces:  # calibration only: their own stems and heads
        per[sp.name] = sp.unique_blocks(resolution=resolution)
    keys = [k for ks in per.values() for k in ks]
    for m in models or []:
        keys += arch_from_spec(m if m.startswith("timm:") else f"timm:{m}", resolution=resolution).keys()
    # narrowed networks as structured pruning leaves them: their blocks and the networks themselves
    pruned = [a for sp in spaces + cal_spaces for a in pruned_archs(sp, pruned_networks, resolution=resolution)]
    for a in pruned:
        per.setdefault(a.name, []).extend(a.keys())
    keys += [k for a in pruned for k in a.keys()]
    keys = list(dict.fromkeys(keys))
    where = f"{', '.join(names)} at {'resolution ' + str(resolution) if resolution else 'their own resolutions'}"
    if cal_spaces:
        where += f" + calibration-only spaces {', '.join(sp.name for sp in cal_spaces)}"
    if pruned:
        where += f" + the blocks of {len(pruned)} pruned networks"
    if models:
        where += f" + the blocks of {len(models)} timm models"
    return keys, spaces + cal_spaces, pruned, where, per


def default_out(target: Target, here: dict[str, Any] | None = None) -> Path:
    """Where ``nas.profile`` writes the target's table: its ``table`` as ``resolve_table_path`` finds it;
    but for a target naming no device (any CPU) whose table found is a shipped one measured on another
    processor than this machine (``here``), the user's tables folder, which is read before the
    shipped one: this machine's own table, never mixed with another processor's."""
    return default_table_out(target, lambda: here or device_identity(target.device.kind))


def _open_table(target: Target, out: Path, table: LatencyTable | None, settings: ProfileSettings, *,
                allow_mismatch: bool) -> tuple[LatencyTable, str, Any]:
    """The table to measure into (new, or ``table`` checked against the target and this machine),
    this machine's name and the target's runtime; refuses another machine's device unless
    ``allow_mismatch`` (before asking for the runtime, which that device may have and this one not)."""
    ident = device_identity(target.device.kind)
    here, want = ident["name"], target.device.name
    why = device_mismatch(target.to_dict()["device"], ident)
    if why and not allow_mismatch:
        raise ValueError(
            f"{why}, so it is not target {target.name!r}'s device: run nas.profile on the device, "
            f"or write a bundle for it (bundle=<dir>), or pass allow_mismatch=true to measure here anyway"
        )
    runtime = get_runtime(target)
    if table is None:
        table = LatencyTable(metadata=new_metadata(target, runtime, settings), path=out)
        if why:
            table.metadata["device"]["note"] = f"measured on {here!r} for target device {want!r} ({why}; allow_mismatch)"
        return table, here, runtime
    table.check_target(target.replace(device=dataclasses.replace(target.device, name=here)),
                       allow_mismatch=allow_mismatch)
    why = table.measured_elsewhere(ident)
    if why and not allow_mismatch:
        raise ValueError(
            f"{out} holds measurements from another processor: {why}. Adding to it would mix two machines' "
            f"timings in one table; measure into a new file (out=<path>), or pass allow_mismatch=true"
        )
    return table, here, runtime


def profile_target(target: Target | str | Mapping[str, Any], *, spaces: str | Sequence[str] | None = None,
                   resolution: int | None = None, out: str | Path | None = None, bundle: str | Path | None = None,
                   import_bundle: str | Path | None = None, settings: ProfileSettings | None = None,
                   calibration_spaces: str | Sequence[str] | None = None, calibration_networks: int = PROFILE.calibration_networks,
                   pruned_networks: int = PROFILE.pruned_networks, models: Sequence[str] = (), in_chans: Sequence[int] = (),
                   num_classes: Sequence[int] = (), refresh: int = PROFILE.refresh, recalibrate: bool = False,
                   allow_mismatch: bool = False, limit: int | None = None, progress: bool = True,
                   budget_min: float | None = None, held_out: int = PROFILE.held_out, command: str | None = None,
                   wait: bool = False, yes: bool = False, bundle_max_gb: float = PROFILE.bundle_max_gb,
                   ask: Callable[[str], bool] | None = None, say: Callable[[str], None] = log.info) -> dict[str, Any]:
    """Build, extend, refresh or recalibrate a target's latency table on this machine, or write / import a
    device bundle (the ``nas.profile`` command).

    One run per machine writes a table at a time; runs on other machines sharing the table's folder
    measure into it together, never timing one item at once (``nas.latency.profile.claims``).  Finished
    measurements are saved as they come: a re-run (or one after Ctrl-C) continues.

    Args:
        target: a ``Target``, a target name (read with ``nas.load_target``) or a dict of its fields.
        spaces: search spaces whose blocks are measured (names, or one comma-separated string);
            default: every shipped calibration space.
        resolution: the input resolution of the spaces' blocks; default the target's.
        out: the table file; default the target's table in the user's tables folder.
        bundle: write a bundle for a device without torch into this folder instead of measuring.
        import_bundle: a bundle's ``results.json`` to import into the table.
        settings: the measuring loop's settings.
        calibration_spaces: spaces whose networks calibrate the predictor (default: shipped ones).
        calibration_networks: seeded networks per space measured whole for the calibration.
        pruned_networks: seeded pruned-like networks measured beside them.
        models: timm models (``timm:<name>``) whose blocks are measured too.
        in_chans, num_classes: their input channels and classes.
        refresh: re-measure this many calibration networks for one drift scale factor.
        recalibrate: re-measure every calibration network and fit the calibration on them.
        allow_mismatch: write into a table whose metadata differs from the target.
        limit: measure at most this many blocks.
        progress: show a progress bar.
        budget_min: stop measuring when these minutes are spent (a re-run continues).
        held_out: seeded networks a bundle adds for validation only.
        command: the command line as typed, for the hints printed and for another run finding the table taken.
        wait: wait for another run on this machine writing the table instead of stopping.
        yes: write a bundle whatever its estimated size.
        bundle_max_gb: a bundle estimated above this many GB is written only with ``yes`` or when ``ask``
            says yes.
        ask: the question before writing a large bundle, answered yes or no (None: no one to ask, so
            such a bundle is refused).
        say: where progress lines go (a bundle's estimated size and measuring time first).

    Returns:
        A summary: the table, its entry and network counts, what was measured or imported.

    Raises:
        TypeError: ``target`` is none of those.
        nas._io.Busy: another run on this machine writes the table and ``wait`` is false.
        ValueError: a setting out of range, ``refresh`` with ``recalibrate``, or a bundle over
            ``bundle_max_gb`` not asked for.
        TableError: the table does not fit the target (without ``allow_mismatch``).
    """

    target = resolve_target(target)
    settings = settings or ProfileSettings()
    check_budget(budget_min, measuring=not (import_bundle or refresh or recalibrate))
    out = Path(out) if out else default_out(target)
    names = space_names(spaces)
    resolution = resolution or target.resolution
    cal_names = calibration_space_names(calibration_spaces, default=not spaces and not resolution)
    keys, all_spaces, pruned, where, per_space = _collect(names, resolution, cal_names, models=models,
                                                          in_chans=in_chans, num_classes=num_classes,
                                                          pruned_networks=pruned_networks)
    if bundle:
        return _bundle(target, bundle, keys, all_spaces, pruned, per_space, names, where, settings,
                       resolution=resolution, calibration_networks=calibration_networks, held_out=held_out,
                       budget_min=budget_min, yes=yes, bundle_max_gb=bundle_max_gb, ask=ask, command=command,
                       progress=progress, say=say)
    return _profile_here(target, out, settings, keys, names if spaces else None, where, all_spaces, pruned,
                         import_bundle=import_bundle, resolution=resolution, calibration_networks=calibration_networks,
                         refresh=refresh, recalibrate=recalibrate, allow_mismatch=allow_mismatch, limit=limit,
                         progress=progress, budget_min=budget_min, command=command, wait=wait, say=say)


def _bundle(target: Target, bundle, keys: list[BlockKey], all_spaces: list, pruned: list[Arch],
            per_space: dict[str, list[BlockKey]], names: list[str], where: str, settings: ProfileSettings, *,
            resolution: int | None, calibration_networks: int, held_out: int, budget_min: float | None, yes: bool,
            bundle_max_gb: float, ask: Callable[[str], bool] | None, command: str | None, progress: bool,
            say: Callable[[str], None]) -> dict[str, Any]:
    """``profile_target``'s bundle: its networks and block order, its cost said first (asked about
    above ``bundle_max_gb`` unless ``yes``), then written."""
    if not bundle_max_gb > 0:
        raise ValueError(f"bundle_max_gb={bundle_max_gb}: give the size in GB above which to ask first, a number > 0")
    call_ms = call_ms_of(target, None)
    order = calibration_order(all_spaces, calibration_networks, resolution, _network_seconds(call_ms, settings),
                              pruned=pruned)
    narrowed = set(pruned)
    nets = {"calibration": [a for a in order if a not in narrowed], "pruned": pruned}
    if held_out:
        exclude = {a.digest() for v in nets.values() for a in v}
        nets["held_out"] = held_out_set(names, held_out, 0, (), exclude=exclude, resolution=resolution,
                                        seed=VALIDATION_SEED)[0]
    freq = block_frequency(all_spaces, resolution=resolution)  # most used first: a budget measures them first
    keys = sorted(keys, key=lambda k: -freq.get(k, 0))
    cost = bundle_cost(keys, target, nets, settings, spaces=per_space, seconds=lambda x, kind: expected_seconds(
        x, kind, settings, call_ms(x, kind), export=False))
    for line in cost.lines():
        say(line)
    if cost.gb > bundle_max_gb and not yes:
        fix = (f"pass yes=true to write it, bundle_max_gb={math.ceil(cost.gb)} to allow that size, or write less "
               "(search_space=[...], calibration_networks=, pruned_networks=, held_out=)")
        if ask is None:
            raise ValueError(f"the bundle would take about {cost.gb:.1f} GB, over bundle_max_gb={bundle_max_gb:g}: "
                             f"{fix}")
        if not ask(f"write about {cost.gb:.1f} GB to {bundle}? [y/N] "):
            raise ValueError(f"the bundle was not written (about {cost.gb:.1f} GB): {fix}")
    # budget_min becomes the script's default budget, spent on the calibration and pruned networks in
    # ``order`` (``calibration_order``, as here), then the blocks
    cmd = import_command(command, target, Path(bundle))
    manifest = write_bundle(keys, target, Path(bundle), networks=nets, settings=settings, spaces=names,
                            resolution=resolution, import_command=cmd, budget_min=budget_min, order=order, cost=cost,
                            progress=progress)
    counts = ", ".join(f"{len(v)} {k.replace('_', '-')} networks" for k, v in nets.items() if v)
    say(f"wrote a bundle of {len(keys)} blocks ({where}) and {counts} to {manifest.parent} (its README.md says what "
        f"to copy and how to measure it)\non the device:  cd {manifest.parent.name} && python3 measure_bundle.py"
        f"{f'   (budget {budget_min:g} min; run again to continue)' if budget_min else ''}\n"
        f"then here:      {cmd}")
    return {"bundle": str(manifest.parent), "blocks": len(keys), **{k: len(v) for k, v in nets.items()}}


def _profile_here(target: Target, out: Path, settings: ProfileSettings, keys: list[BlockKey],
                  names: list[str] | None, where: str, all_spaces: list, pruned: list[Arch], *,
                  import_bundle: str | Path | None, resolution: int | None, calibration_networks: int, refresh: int,
                  recalibrate: bool, allow_mismatch: bool, limit: int | None, progress: bool,
                  budget_min: float | None, command: str | None, wait: bool,
                  say: Callable[[str], None]) -> dict[str, Any]:
    """``profile_target`` on this machine, under its writer's lock: import, refresh, recalibrate or measure."""
    lock, what = profile_writer(out)
    with exclusive(lock, what=what, wait=wait, command=command, say=say):
        table = LatencyTable.load(out) if out.is_file() else None
        if import_bundle:
            return _import(import_bundle, target, table, out, keys, names, where,
                           allow_mismatch=allow_mismatch, command=command, say=say)
        table, here, runtime = _open_table(target, out, table, settings, allow_mismatch=allow_mismatch)
        if recalibrate and refresh:
            raise ValueError(f"refresh={refresh} and recalibrate=true: pick one (recalibrate re-measures every "
                             "calibration network, refresh a few of them for one scale factor)")
        if not (recalibrate or refresh):  # a measuring run: the table records the spaces it was measured for
            table.add_spaces(space_names(names))
        if recalibrate:
            return _recalibrate(table, out, runtime, settings, progress=progress, say=say)
        if refresh:
            return _refresh(table, out, runtime, settings, refresh, progress=progress, say=say)
        missing = len(table.missing(keys))
        freq = block_frequency(all_spaces, resolution=resolution)
        if table.metadata.get("call_overhead_ms") is None:  # the per-call floor of every plan figure
            table.metadata["call_overhead_ms"] = measure_overhead(runtime, settings)
        call_ms = call_ms_of(target, table.metadata.get("call_overhead_ms"))
        nets = calibration_order(all_spaces, calibration_networks, resolution, seconds=_network_seconds(call_ms, settings),
                                 pruned=pruned)
        jobs = plan_jobs(keys, nets, table, settings, call_ms=call_ms, freq=freq, limit=limit)
        budget = f"; budget {budget_min:g} min, most used blocks and calibration networks first" if budget_min else ""
        say(f"{len(keys)} unique blocks in {where}; {len(keys) - missing} already in {out}, {missing} to measure "
            f"on {here} with {runtime.name} {runtime.version()} ({target.provider}, {runtime.precision}, "
            f"batch {runtime.batch}, {runtime.threads} thread(s)); {len(nets)} calibration networks; "
            f"{settings.rounds} round(s), blocks and networks interleaved: {len(jobs)} measurements{budget}")
        return _measure_table(jobs, table, out, runtime, settings, freq=freq, budget_min=budget_min,
                              progress=progress, say=say)


def _import(results, target: Target, table: LatencyTable | None, out: Path, keys: list[BlockKey],
            spaces: list[str] | None, where: str, *, allow_mismatch: bool, command: str | None,
            say: Callable[[str], None]) -> dict[str, Any]:
    """Import a bundle's results into ``out``; ``spaces`` (when the command names them) must be the
    bundle's.  Says what was measured, what is left and how much of the spaces' blocks it covers."""
    man = bundle_manifest(results)
    if spaces is not None and sorted(man.get("spaces") or []) != sorted(spaces):
        raise BundleError(f"the bundle was written for spaces {man.get('spaces')}, this command names {spaces}: "
                          f"import with search_space=[{','.join(man.get('spaces') or [])}], or write a bundle for "
                          f"{','.join(spaces)} and measure it")
    table, rep = _import_bundle(results, target, table, allow_mismatch=allow_mismatch, command=command)
    table.add_spaces(man.get("spaces") or ())
    table.save(out)
    m = rep["measured"]
    covered = sum(k in table.entries for k in keys)
    say(f"imported {results} into {out}: {table.describe()}; measured {m['blocks']} blocks, {m['networks']} "
        f"calibration networks" + ("" if rep["complete"] else "; the rest is not measured yet: run "
                                   "measure_bundle.py again on the device and import again"))
    for x in rep["failed"]:
        say(f"left out: {x['label']} ({x['file']}): the device's runtime could not run it: {x['error']}")
    if covered < len(keys) and rep["complete"]:
        say(f"the table holds {covered} of the {len(keys)} blocks of {where}: the learned model predicts the "
            "rest; for all of them, write a bundle with this command's spaces (bundle=<dir>) and measure it")
    return {"table": str(out), "entries": len(table), "networks": len(table.networks), "covered": covered,
            "blocks_of_spaces": len(keys), **rep}


def import_command(command: str | None, target: Target, bundle: Path) -> str:
    """The command that imports ``bundle``'s results: the user's own (``command``, with every override
    they gave: a custom target's too) with ``bundle=`` replaced by ``import_bundle=``."""
    words = shlex.split(command or f"python -m nas.profile conf={target.name}")
    words = [w for w in words if not w.startswith(("bundle=", "held_out=", "progress=", "budget_min="))]
    return shell_join([*words, f"import_bundle={bundle}/results.json"])


def check_budget(budget_min: float | None, *, measuring: bool = True) -> None:
    """``budget_min`` must be None (no budget) or a positive number of minutes, and only for measuring."""
    if budget_min is None:
        return
    if isinstance(budget_min, bool) or not isinstance(budget_min, (int, float)) or not budget_min > 0:
        number = isinstance(budget_min, (int, float)) and not isinstance(budget_min, bool)
        shown = f"{budget_min:g}" if number else budget_min
        raise ValueError(f"budget_min={shown}: the minutes to spend measuring, a number > 0 "
                         "(leave it out, or null, for no budget)")
    if not measuring:
        raise ValueError(f"budget_min={budget_min:g} applies to measuring (here, or on the device through "
                         "bundle=); import_bundle=, refresh= and recalibrate= take no budget")


def call_ms_of(target: Target, overhead_ms: float | None) -> Callable[[Any, str], float]:
    """An item's expected time per call, for planning: the target's roofline plus the call overhead
    (the table's ``call_overhead_ms``; 0.05 ms when not measured)."""
    over = float(overhead_ms or 0.05)
    try:
        roof = Roofline.from_target(target)
    except (ValueError, TypeError):
        return lambda item, kind: over + (1.0 if kind == "network" else 0.05)
    return lambda item, kind: over + (roof.predict_arch(item) if kind == "network" else roof.predict_key(item))


def _network_seconds(call_ms: Callable[[Any, str], float], settings: ProfileSettings) -> Callable[[Arch], float]:
    """A calibration network's expected seconds of measuring (``expected_seconds``), for the order."""
    return lambda a: expected_seconds(a, "network", settings, call_ms(a, "network"))


def _measure_table(jobs, table: LatencyTable, out: Path, runtime, settings: ProfileSettings, *, freq,
                   budget_min: float | None, progress: bool, say: Callable[[str], None]) -> dict[str, Any]:
    budget_s = 60.0 * budget_min if budget_min else None
    watch = Watch() if settings.watch else Unwatched()
    try:
        jr = run_jobs(jobs, runtime, table, settings, path=out, progress=progress, budget_s=budget_s, watch=watch)
    except KeyboardInterrupt as e:
        raise Interrupted(f"{len(table)} block entries and {len(table.networks)} networks are saved in {out}; "
                          "run the same command again to continue") from e
    rep, nrep = jr.blocks, jr.networks
    # the counts are the file's as last saved: other runs' entries merged in, not just this run's
    others = f" ({table.others_added} of them saved by other runs meanwhile)" if table.others_added else ""
    say(f"{rep.measured} block measurements in {rep.seconds:.1f}s ({rep.entries_per_minute:.0f}/min), "
        f"{rep.remeasured} re-measured for noise; {nrep.measured} network measurements in {nrep.seconds:.1f}s; "
        f"table: {table.describe()}{others}, {len(table.networks)} networks -> {out}")
    earlier = (table.metadata.get("profile_log") or [])[:-1]
    for line in (watch.stopped or watch.summary(), noise_note(earlier, rep.measured + nrep.measured,
                                                               rep.remeasured + nrep.remeasured)):
        if line:
            say(line)
    repro = None
    if rep.measured + nrep.measured and not watch.stopped:  # not on a machine that misled the run
        try:
            repro = reproducibility.record(table, runtime, settings, progress=progress, say=say)
        except KeyboardInterrupt as e:
            raise Interrupted(f"the table is saved in {out} (without its reproducibility record); run the same "
                              "command again to continue") from e
        table.save(out, runtime=runtime)
    total = sum(freq.values())
    covered = sum(n for k, n in freq.items() if k in table.entries) / total if total else 1.0
    if jr.stopped_by_budget:
        rest = ("the learned model predicts the rest (nas.predict shows each prediction's measured / learned "
                "blocks)" if covered < 1 else "the rounds left make their figures steadier")
        say(f"budget of {budget_min:g} min spent: {jr.left} of {jr.planned} measurements left; the measured blocks "
            f"make up {100 * covered:.1f}% of the layers of the spaces' sampled networks, {rest}. Run again "
            f"(with a larger budget_min, or none) to continue where this stopped; nas.validate shows what these "
            f"minutes bought and what more would")
    return {"table": str(out), "measured": rep.measured, "remeasured": rep.remeasured, "seconds": rep.seconds,
            "entries": len(table), "others_added": table.others_added, "requested": rep.requested,
            "networks": len(table.networks), "network_seconds": nrep.seconds, "rounds": settings.rounds,
            "left": jr.left, "stopped_by_budget": jr.stopped_by_budget, "coverage": covered,
            "reproducibility": repro, "timing": runtime.timing, "graph_fallbacks": dict(runtime.graph_fallbacks),
            "watch": jr.watch}


def remeasure_calibration(table: LatencyTable, runtime, settings: ProfileSettings, *, per_space: int | None,
                          cache: Path | None = None, progress: bool = True) -> tuple[dict, list[tuple[Arch, float]]]:
    """Re-measure ``per_space`` of the table's calibration networks per space (None: all), in
    the validation's interleaved rounds; their (now, table) pairs per space and their figures now."""
    vs = measure_held_out([], [], runtime, settings, cache=cache, progress=progress, table=table,
                          anchors_per_group=per_space, desc="calibration networks")
    return vs.anchors or {}, vs.remeasured or []


def _refresh(table: LatencyTable, out: Path, runtime, settings: ProfileSettings, per_space: int, *,
             progress: bool, say: Callable[[str], None] = log.info) -> dict[str, Any]:
    """Re-measure ``per_space`` of the table's calibration networks per space now and store the
    median now/table ratio in its metadata (``refresh``); the predictor scales by it.  Entries
    and networks are left as measured; only the ``refresh`` record is replaced."""
    if not table.networks:
        raise ValueError(f"refresh={per_space}: {out} holds no calibration networks to re-measure; build the table "
                         "first (nas.profile without refresh=)")
    say(f"refresh: re-measuring {per_space} of the table's calibration networks per space ({settings.rounds} "
        f"round(s)) with {runtime.name} {runtime.version()}")
    try:  # the drift check of nas.validate, without held-out networks
        anchors, _ = remeasure_calibration(table, runtime, settings, per_space=per_space, progress=progress)
    except KeyboardInterrupt as e:
        raise Interrupted(f"{out} is unchanged") from e
    scale, per, n = drift_ratios(anchors)
    rec = {"now_over_table": scale, "networks": n, "per_space": per,
           "measured_at": now_iso(), "rounds": settings.rounds,
           "previous": (table.metadata.get("refresh") or {}).get("now_over_table")}
    table.metadata["refresh"] = rec
    table.save(out)
    say(f"refresh: the table's calibration networks now run at {rec['now_over_table']:.3f}x their table figures "
        f"({', '.join(f'{g} {v:.3f}x' for g, v in per.items())}); predictions from {out} are scaled by it "
        f"(the entries themselves are unchanged)")
    return {"table": str(out), "refresh": rec}


def _recalibrate(table: LatencyTable, out: Path, runtime, settings: ProfileSettings, *, progress: bool,
                 say: Callable[[str], None] = log.info) -> dict[str, Any]:
    """Re-measure every calibration network of the table now (interleaved rounds, resumable from
    ``<table>.recalibrate.json``) and store their figures in its metadata (``recalibration``); the
    predictor fits its calibration (linear and network residual) on them instead of the table's
    figures.  Entries and networks are left as measured."""
    if not table.networks:
        raise ValueError(f"recalibrate=true: {out} holds no calibration networks to re-measure; build the table "
                         "first (nas.profile without recalibrate=)")
    cache = out.with_suffix(".recalibrate.json")
    say(f"recalibrate: re-measuring all {len(table.networks)} calibration networks ({settings.rounds} round(s)) "
        f"with {runtime.name} {runtime.version()}; progress kept in {cache}")
    try:
        anchors, remeasured = remeasure_calibration(table, runtime, settings, per_space=None, cache=cache,
                                                    progress=progress)
    except KeyboardInterrupt as e:
        raise Interrupted(f"{out} is unchanged; the networks measured so far are kept in {cache}: run the same "
                          "command again to continue") from e
    scale, per, n = drift_ratios(anchors)
    figs = {a.digest(): ms for a, ms in remeasured}
    rec = {"measured_at": now_iso(), "rounds": settings.rounds, "networks": len(figs), "now_over_table": scale,
           "per_space": per, "runtime": runtime.info(), "network_ms": figs}
    previous = table.metadata.get("recalibration")
    if previous:
        rec["previous"] = {k: previous.get(k) for k in ("measured_at", "now_over_table")}
    as_built = LatencyPredictor(refresh=False).fit(table)
    table.metadata["recalibration"] = rec
    now = LatencyPredictor().fit(table)
    archs, y = [a for a, _ in remeasured], [ms for _, ms in remeasured]
    before, after = score(as_built.predict(archs), y), score(now.predict(archs), y)
    table.save(out)
    cache.unlink(missing_ok=True)
    say(f"recalibrate: the table's calibration networks now run at {scale:.3f}x their table figures "
        f"({', '.join(f'{g} {v:.3f}x' for g, v in per.items())}); on them (in-sample) the predictor as built was "
        f"within ±5% for {100 * before['within_5pct']:.1f}%, recalibrated {100 * after['within_5pct']:.1f}% "
        f"(MAPE {before['mape']:.2f}% -> {after['mape']:.2f}%). Predictions from {out} now use this calibration "
        "(the entries and networks themselves are unchanged); `nas.validate recalibrate=true` scores it on "
        "held-out networks")
    return {"table": str(out), "recalibration": {k: v for k, v in rec.items() if k != "network_ms"},
            "in_sample": {"as_built": before, "recalibrated": after}}
