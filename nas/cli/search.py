"""``python -m nas.search conf=<target>``: hardware-aware search, accuracy vs latency on the target.

Thin Hydra entry point: parse the config, call ``nas.search.study``, show progress and the final table.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nas.cli._common import fmt_table, hydra_app, user_errors
from nas.config.search import register_search_configs

register_search_configs()
log = logging.getLogger("nas.search")


def _fmt_score(metric: str, v: float | None) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.2f}%" if metric == "val_accuracy" else f"{v:.2f}"


@user_errors
def run(cfg: DictConfig, run_dir: str | Path | None = None) -> dict:
    import optuna

    from nas.search.study import Budgets, SearchAborted, count_trials, prepare_search, run_search, write_outputs

    t_start = time.perf_counter()
    target = OmegaConf.to_container(cfg.target, resolve=True)
    if run_dir is None:
        from hydra.core.hydra_config import HydraConfig

        run_dir = HydraConfig.get().runtime.output_dir
    budgets = Budgets(latency_ms=cfg.latency_budget_ms, memory_kb=cfg.memory_budget_kb)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    search = prepare_search(
        target=target,
        search_space=cfg.search_space,
        data=OmegaConf.to_container(cfg.data, resolve=True),
        evaluator=OmegaConf.to_container(cfg.evaluator, resolve=True),
        sampler=OmegaConf.to_container(cfg.sampler, resolve=True),
        budgets=budgets,
        seed=cfg.seed,
        run_dir=run_dir,
        storage=cfg.storage,
        study_name=cfg.study_name,
        allow_mismatch=cfg.allow_mismatch,
    )
    p, study = search.problem, search.study
    metric = p.evaluator.metric
    if p.latency.warning:
        print(f"WARNING: {p.latency.warning}", flush=True)
    done = count_trials(study)
    b = [f"latency <= {budgets.latency_ms:g} ms" if budgets.latency_ms else "no latency budget",
         f"peak activations <= {budgets.memory_kb:g} KiB" if budgets.memory_kb else "no memory budget"]
    print(f"target   {target['name']}: {p.latency.describe()}\n"
          f"latency  {'MEASURED table' if p.latency.source == 'measured' else 'ESTIMATE (roofline)'}, predicted at "
          f"{p.deploy_resolution}x{p.deploy_resolution} ({', '.join(b)})\n"
          f"space    {p.space.name} ({p.space.source}, 10^{p.space.log10_size():.1f} architectures)\n"
          f"data     {p.data.describe()}\n"
          f"score    {p.evaluator.describe()}\n"
          f"sampler  {cfg.sampler.name} (seed {cfg.seed})\n"
          f"study    {study.study_name!r} in {search.storage_desc} "
          f"({'new' if search.created else f'resumed: {done} trials done'}); run dir {search.run_dir}", flush=True)

    bar = None
    todo = max(0, cfg.n_trials - done)
    best: list[float] = []
    ran: list[str] = []
    if cfg.progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=todo, desc="search", unit="trial", dynamic_ncols=True)

    def on_trial(o) -> None:
        ran.append(o.status)
        if o.feasible and o.score is not None:
            best.append(o.score)
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(f"#{o.number} {o.status} best {_fmt_score(metric, max(best) if best else None)}")
        elif o.status == "error":
            print(f"trial {o.number} failed: {o.error}", file=sys.stderr)

    code = 0
    try:
        run_search(study, p, n_trials=cfg.n_trials, storage=search.storage,
                         max_consecutive_failures=cfg.max_consecutive_failures, callback=on_trial)
    except KeyboardInterrupt:
        code = 130
        if bar is not None:
            bar.close()
        print(f"\ninterrupted: finished trials are saved in {search.storage_desc}; run the same command "
              f"(out={search.run_dir}) to continue", file=sys.stderr)
    except SearchAborted as e:
        code = 1
        print(f"\nerror: {e}", file=sys.stderr)
    finally:
        if bar is not None:
            bar.close()
    outs = write_outputs(study, search.run_dir, info=search.info())
    front, statuses = outs["front"], outs["statuses"]
    rows = [[f"#{r['number']}", _fmt_score(metric, r["score"]), f"{r['latency_ms']:.3f}", r["latency_source"],
             f"{r['params'] / 1e3:.1f}K", f"{r['macs'] / 1e6:.2f}M", f"{r['peak_activation_kb']:.0f}", r["arch"]]
            for r in front]
    counts = ", ".join(f"{v} {k}" for k, v in sorted(statuses.items()))
    print(f"\n{len(outs['records'])} trials ({counts}); Pareto front of {len(front)} "
          f"({metric} vs latency predicted on {target['name']}"
          f"{', ESTIMATED' if p.latency.source == 'estimated' else ''}):")
    if rows:
        print(fmt_table(rows, ["trial", metric, "ms", "latency", "params", "MACs", "peak KiB", "architecture"]))
    else:
        print("  (no feasible evaluated trial yet)")
    if p.latency.source == "estimated":
        print(f"NOTE: latencies are roofline ESTIMATES for {p.latency.device}; measure the table on the device: "
              f"python -m nas.profile conf={target['name']}")
    wall = time.perf_counter() - t_start
    print(f"pareto:  {outs['pareto_json']}\ntrials:  {outs['trials_csv']}\nplot:    {outs['pareto_png']}\n"
          f"study:   {study.study_name!r} in {search.storage_desc}\n"
          f"this run: {len(ran)} trials, {p.evaluations} evaluator calls, {wall:.0f}s wall")
    if code:
        sys.exit(code)
    return {"run_dir": str(search.run_dir), "study": study.study_name, "front": len(front), "statuses": statuses,
            "wall_s": wall, "ran": len(ran)}


@hydra_app("search")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
