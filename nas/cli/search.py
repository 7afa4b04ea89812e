"""``python -m nas.search conf=<target>``: hardware-aware search, accuracy vs latency on the target.

Thin Hydra entry point: parse the config, turn it into the library's objects once (``Target``,
``Budgets``, the group settings), call ``nas.search.study``, show progress and the final table.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

import nas.search  # the search's modules load with the search (lazy exports): --help and a refused value answer first
from nas._io import SEARCH_WORK, atomic_write_text, hide_passwords, working
from nas.cli._common import (
    check_counts,
    environment_error_line,
    fmt_table,
    hydra_app,
    interruption,
    is_full,
    typed_command,
    user_errors,
    user_override,
    writing_into,
)
from nas.config.search import register_search_configs, search_inputs
from nas.latency.tables import check_target_table
from nas.search.storage import check_storage, redact_url
from nas.space import SearchSpace, load_space
from nas.stats import fmt_interval
from nas.target import Target

register_search_configs()
log = logging.getLogger("nas.search")


def _user_args() -> list[str] | None:
    """The command-line arguments as the user writes them (``conf=`` rather than ``target=``), a
    URL's password masked (``storage=``, quoted or not)."""
    if not HydraConfig.initialized():
        return None

    return [hide_passwords(user_override(a)) for a in HydraConfig.get().overrides.task]


def _save_config(cfg: DictConfig, run_dir: Path, args: list[str] | None) -> None:
    """The composed config into ``<run dir>/.hydra/`` (as Hydra would, password masked), once the search
    has started."""
    if cfg.storage and "://" in cfg.storage:  # never a password on disk
        cfg = cfg.copy()
        cfg.storage = redact_url(cfg.storage)
    atomic_write_text(run_dir / ".hydra" / "config.yaml", OmegaConf.to_yaml(cfg))
    if args is not None:
        atomic_write_text(run_dir / ".hydra" / "overrides.yaml", OmegaConf.to_yaml(OmegaConf.create(args)))


def _prepare(cfg: DictConfig, run_dir: Path) -> Any:
    """The study and search problem the config names (``nas.search.study.prepare_search``); a failed
    start leaves no trace in a run dir it found empty, and never touches one another start claimed
    (``nas.search.starting_in``)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:  # refused before the libraries that do the work (torch, scikit-learn) load, and before the run dir
        # is claimed: a bad count, an unknown or malformed space, a table no predictor can use
        check_counts(cfg, {"n_trials": "trials", "max_consecutive_failures": "failed trials in a row (0: never stop)"})
        check_storage(cfg.storage)
        space = load_space(cfg.search_space)
        check_target_table(Target.coerce(cfg.target))
    except BaseException:
        with contextlib.suppress(OSError):  # the folder Hydra made for this run, if it is still empty (rmdir
            run_dir.rmdir()  # removes nothing else: a folder another start wrote in stays)
        raise
    with nas.search.starting_in(run_dir) as fresh:  # a new folder: this start alone, removing what it wrote on failure
        if cfg.n_trials == 0 and fresh and not cfg.storage:  # the study would be new, and stay empty
            raise ValueError(f"n_trials=0 in a new run dir ({run_dir}): there is no study to report on, and none is "
                             f"started; give n_trials=N (1 or more), or out= a run dir to rewrite its outputs")
        search = _prepare_search(cfg, run_dir, space)
        _save_config(cfg, run_dir, _user_args())
    return search


def _prepare_search(cfg: DictConfig, run_dir: Path, space: SearchSpace) -> Any:
    # the config as the library's typed objects, once: DataSettings.from_dict, make_evaluator, sampler_settings,
    # pruner_settings, and Budgets saying whether latency_budget_ms is the user's
    s = search_inputs(cfg)
    return nas.search.prepare_search(
        target=s.target,
        search_space=space,
        data=s.data,
        evaluator=s.evaluator,
        sampler=s.sampler,
        pruner=s.pruner,
        budgets=s.budgets,
        seed=cfg.seed,
        run_dir=run_dir,
        storage=cfg.storage,
        study_name=cfg.study_name,
        allow_mismatch=cfg.allow_mismatch,
        command=_user_args(),
        retime=cfg.retime,
    )


def _model_how(latency: Any) -> str:
    """How the latency model's figures are obtained, in the shared words (``LatencyModel.how``)."""
    return latency.how


def _print_setup(cfg: DictConfig, target: Target, search: Any, done: int) -> None:
    p, study, budgets = search.problem, search.study, search.problem.budgets
    if p.latency.warning:
        print(f"WARNING: {p.latency.warning}", flush=True)
    if p.latency.note:
        print(p.latency.note, flush=True)
    b = [f"latency <= {budgets.latency_budget_ms:g} ms" if budgets.latency_budget_ms else "no latency budget",
         f"peak activations <= {budgets.memory_budget_kb:g} KiB" if budgets.memory_budget_kb else "no memory budget"]
    print(f"target   {target.name}: {p.latency.describe()}\n"
          f"latency  {_model_how(p.latency)}, at {p.deploy_resolution}x{p.deploy_resolution} ({', '.join(b)})\n"
          + (f"refresh  {search.refresh.line()}\n" if search.refresh is not None else "")
          + (f"budget   {search.latency_budget.note}\n" if search.latency_budget is not None else "") +
          f"space    {p.space.name} ({p.space.source}, 10^{p.space.log10_size():.1f} architectures)\n"
          f"data     {p.data.describe()}\n"
          f"score    {p.evaluator.describe()}\n"
          f"sampler  {cfg.sampler.name} (seed {cfg.seed})\n"
          f"pruner   {p.pruner.describe() if p.pruner is not None else 'none'}\n"
          f"study    {study.study_name!r} in {search.storage_desc} "
          f"({'new' if search.created else f'resumed: {done} trials done'}); run dir {search.run_dir}", flush=True)


def _run_trials(cfg: DictConfig, search: Any, todo: int, aborted: list[str]) -> tuple[int, Any]:
    """Run the study up to ``cfg.n_trials`` with a progress bar (``progress=false``: a line per failed
    trial instead): (exit code, ``SearchReport`` or None); a ``SearchAborted`` search's error line into
    ``aborted[0]``."""
    quiet = None if cfg.progress else nas.search.TrialProgress(todo, search.problem.evaluator.metric, bar=False)
    code, rep = 0, None
    try:
        rep = nas.search.run_search(search.study, search.problem, n_trials=cfg.n_trials, storage=search.storage,
                         max_consecutive_failures=cfg.max_consecutive_failures, callback=quiet,
                         progress=cfg.progress)
    except KeyboardInterrupt as e:  # Ctrl-C, or a SIGTERM (``Stopped``)
        word, code = interruption(e)
        print(f"\n{word}: finished trials are saved in {search.storage_desc}; run the same command "
              f"(out={search.run_dir}) to continue (the interrupted trial is redone)", file=sys.stderr)
    except nas.search.SearchAborted as e:  # printed last, after the results (``run``)
        code, rep, aborted[0] = 1, e.report, f"error: {e}"
    if rep is not None and rep.exhausted:
        print(f"\nstopped early: the sampler proposed only architectures already in the study ({rep.duplicates} "
              f"repeats in a row); the space looks exhausted ({search.problem.space.name}: "
              f"{search.problem.space.size()} parameter combinations)", flush=True)
    return code, rep


def _print_results(target: Target, search: Any, outs: dict) -> None:
    p, metric = search.problem, search.problem.evaluator.metric
    front, statuses = outs["front"], outs["statuses"]
    rows = [[f"#{r['number']}", nas.search.fmt_score(metric, r["score"]), f"{r['latency_ms']:.3f}",
             nas.search.short_how(r["_latency"]),
             f"{r['params'] / 1e3:.1f}K", f"{r['macs'] / 1e6:.2f}M", f"{r['peak_activation_kb']:.0f}", r["arch"]]
            for r in front]
    counts = ", ".join(f"{v} {k}" for k, v in sorted(statuses.items()) if k not in nas.search.NOT_RUN)
    skipped = f"; {statuses['duplicate']} repeats skipped" if statuses.get("duplicate") else ""
    if statuses.get("surplus"):
        skipped += f"; {statuses['surplus']} surplus not run (n_trials reached by other workers)"
    running = sum(r["state"] == "RUNNING" for r in outs["records"])
    print(f"\n{len(outs['records']) - sum(statuses.get(k, 0) for k in nas.search.NOT_RUN)} trials ({counts}{skipped}); "
          f"Pareto front of {len(front)} ({metric} vs latency on {target.name}, {_model_how(p.latency)}):")
    if running:
        print(f"({running} trials still running in other workers: the last worker to finish rewrites these files)")
    if rows:
        print(fmt_table(*_with_intervals(rows, ["trial", metric, "ms", "latency", "params", "MACs", "peak KiB",
                                                "architecture"], front, outs["within_noise"])))
        hows = sorted({(nas.search.short_how(r["_latency"]), nas.search.latency_how(r["_latency"], extrapolation=False)
                        + ("; EXTRAPOLATED: outside the range of the networks the prediction was calibrated on, "
                           "so less certain (why, per trial: latency_how in trials.csv)" if r["_latency"].get("outside")
                           else "")) for r in front if r["latency_how"]})
        print("\n".join(f"latency: {short} = {how}" for short, how in hows))
    else:
        print("  (no feasible evaluated trial yet)")
    ns = sorted({r["_ci"].n for r in front if r["_ci"]})
    if ns:
        print(f"95% CI: Wilson interval of each accuracy on the {'/'.join(map(str, ns))} validation images it was "
              f"scored on (one evaluation per network); within noise of: a front neighbour whose difference's 95% "
              f"interval (Newcombe) holds 0")
    print("\n".join(_baseline_lines(metric, outs["baseline"], p.budgets)
                    + _roomy_lines(metric, outs["largest_within_noise"], outs["baseline"])))
    if p.latency.source == "estimated":
        print(f"NOTE: latencies are roofline ESTIMATES for {p.latency.device}; measure the table on the device: "
              f"python -m nas.profile conf={target.name}")
    elif p.latency.source == "rehearsal":
        print(f"NOTE: latencies are from a {p.latency.how}, not from {target.name}'s device; measure the bundle "
              f"there and import its results.json (docs/devices.md)")


def _with_intervals(rows: list[list[str]], header: list[str], front: list[dict],
                    ties: dict[int, list[int]]) -> tuple[list[list[str]], list[str]]:
    """The front's table with each accuracy's 95% interval beside it, and the neighbours it is within noise of."""
    if not any(r["_ci"] for r in front):
        return rows, header
    rows = [row[:2] + [fmt_interval(r["_ci"]), " ".join(f"#{n}" for n in ties.get(r["number"], [])) or "-"] + row[2:]
            for row, r in zip(rows, front)]
    return rows, header[:2] + ["95% CI", "within noise of"] + header[2:]


_VERDICTS = {"beats": "beats it beyond noise", "ties": "ties with it, within noise",
             "loses": "loses to it beyond noise", "higher": "scores higher", "lower": "scores lower", "equal": "scores the same"}


def _baseline_lines(metric: str, b: Any, budgets: Any) -> list[str]:
    """The network to beat (``nas.search.uncertainty.baseline_to_beat``) and the search's pick against it."""
    if b is None:
        return []

    def score(v: float, iv: Any) -> str:
        return nas.search.fmt_score(metric, v) + (f" {fmt_interval(iv)}" if iv is not None else "")

    where = "within the budget" if budgets.latency_budget_ms or budgets.memory_budget_kb else "(no budget)"
    line = (f"baseline: #{b.trial}, the largest-MACs network {where} among the study's {b.candidates} evaluated trials "
            f"({b.macs / 1e6:.2f}M MACs, {b.latency_ms:.3f} ms): {score(b.score, b.interval)}")
    if b.verdict == "same":
        return [line, "  the search's most accurate network is this one: it found nothing better than the largest "
                      "network that fits"]
    d = b.difference
    diff = (f": {100 * d.value:+.2f} points (95% CI {100 * d.low:+.2f} to {100 * d.high:+.2f})" if d is not None
            else f" ({metric} is a proxy score: no interval)")
    return [line, f"  the search's pick #{b.pick} ({score(b.pick_score, b.pick_interval)}) {_VERDICTS[b.verdict]}{diff}"]


def _roomy_lines(metric: str, r: dict[str, Any] | None, b: Any) -> list[str]:
    """The largest network within noise of the most accurate one (``largest_within_noise``), where it is
    another network than the search's pick and the baseline (whose line says as much)."""
    if r is None or r["_ci"] is None or b is None or r["number"] in (b.pick, b.trial):
        return []
    return [f"largest within noise of the pick: #{r['number']} ({r['macs'] / 1e6:.2f}M MACs, {r['latency_ms']:.3f} ms): "
            f"{nas.search.fmt_score(metric, r['score'])} {fmt_interval(r['_ci'])}; the scores cannot tell the two apart, "
            f"and the larger network may train better on the full data (docs/search.md, \"Search quality\")"]


@contextlib.contextmanager
def _storage_lost(search: Any) -> Iterator[None]:
    """The study's database going away during the search: one line (exit 1) saying so, and how to resume."""
    try:
        yield
    except Exception as e:
        line = nas.search.lost_storage(e)
        if line is None:
            raise
        log.debug("lost the storage", exc_info=True)
        print(f"\nerror: the study's database went away: {search.storage_desc}: {line}; the finished trials are "
              f"saved in it: when it is back, run the same command (out={search.run_dir}) to continue (the "
              f"interrupted trial is redone)", file=sys.stderr)
        sys.exit(1)


@user_errors
def run(cfg: DictConfig, run_dir: str | Path | None = None) -> dict:
    """Search as the config says; print the setup, progress and the Pareto front; return a summary."""
    t_start = time.perf_counter()
    run_dir = Path(run_dir if run_dir is not None else HydraConfig.get().runtime.output_dir)
    try:
        with writing_into(run_dir):  # a full disk is named: the run dir
            search = _prepare(cfg, run_dir)
            # nas.train waits for a search that still writes the run dir
            with working(search.run_dir, SEARCH_WORK, command=typed_command("nas.search")), _storage_lost(search):
                return _search(cfg, search, t_start)
    except OSError as e:
        if not is_full(e):
            raise
        print(environment_error_line(e, then=_journal_repair(cfg, run_dir)), file=sys.stderr)
        sys.exit(2)


def _journal_repair(cfg: DictConfig, run_dir: Path) -> str:
    """After a full disk: the repair the study journal needs when the failed write left its last line cut
    (``nas.repair`` keeps every intact record), as a step of the error's advice; else nothing."""
    journal = nas.search.storage_description(cfg.storage, run_dir=run_dir)
    if "://" in journal:
        return ""
    try:
        nas.search.check_journal(journal)
    except ValueError:
        return f"repair the study journal, whose last write was cut off (python -m nas.repair {journal}), "
    return ""


def _search(cfg: DictConfig, search: Any, t_start: float) -> dict:
    """``run`` once the search is prepared."""
    target = search.problem.target
    done = nas.search.count_trials(search.study)
    _print_setup(cfg, target, search, done)
    aborted = [""]
    code, rep = _run_trials(cfg, search, todo=max(0, cfg.n_trials - done), aborted=aborted)
    ran = rep.ran if rep is not None else 0
    repeats = f" ({rep.duplicates} repeats skipped, not counted)" if rep is not None and rep.duplicates else ""
    outs = nas.search.write_outputs(search.study, search.run_dir, info=search.info())
    _print_results(target, search, outs)
    wall = time.perf_counter() - t_start
    print(f"pareto:  {outs['pareto_json']}\ntrials:  {outs['trials_csv']}\nplot:    {outs['pareto_png']}\n"
          f"study:   {search.study.study_name!r} in {search.storage_desc}\n"
          f"this run: {ran} trials{repeats}, {search.problem.evaluations} evaluator calls, {wall:.0f}s wall")
    if aborted[0]:
        print(aborted[0], file=sys.stderr)
    if code:
        sys.exit(code)
    return {"run_dir": str(search.run_dir), "study": search.study.study_name, "front": len(outs["front"]),
            "statuses": outs["statuses"], "wall_s": wall, "ran": ran}


@hydra_app("search")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
