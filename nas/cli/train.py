"""``python -m nas.train conf=<target> run=<search run dir>``: train the Pareto front, prune, QAT, export.

Thin Hydra entry point: parse the config into ``nas.train.settings.PipelineSettings``, call
``nas.train.pipeline.train_front``, print the report
table.  Everything goes to ``<run>/train/`` (or ``out=``): per model its checkpoints (every
epoch), pruning plan and ONNX exports; ``report.md`` and ``report.json`` for all of them.
Re-running the same command resumes; Ctrl-C is safe.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nas import train as train_lib
from nas._io import refuse_if_busy
from nas.cli._common import fmt_table, folder_error, hydra_app, typed_command, user_errors, writing_into
from nas.config.train import register_train_configs, train_latency_budget
from nas.fit.settings import FitSettings
from nas.target import Target
from nas.train.search_run import load_search_run, search_finished
from nas.train.settings import (
    ExportSettings,
    PipelineSettings,
    PruneSettings,
    QATSettings,
    TargetNames,
)

register_train_configs()


def settings_from_config(cfg: DictConfig) -> PipelineSettings:
    c = OmegaConf.to_container(cfg, resolve=True)
    train = dict(c["train"])
    if c["epochs"] is not None:
        train["epochs"] = c["epochs"]
    return PipelineSettings(
        run=c["run"], target=Target.coerce(c["target"]), out=c["out"], select=c["select"], latency_budget_ms=train_latency_budget(c),
        data_root=c["data_root"], train_samples=c["train_samples"], resolution=c["resolution"],
        seed=c["seed"], supernet=c["supernet"], data=c["data"],
        allow_mismatch=c["allow_mismatch"], train=FitSettings(**train), prune=PruneSettings(**c["prune"]),
        qat=QATSettings(**c["qat"]), export=ExportSettings(**c["export"]), targets=TargetNames(**c["targets"]),
    )


@user_errors
def run(cfg: DictConfig) -> dict:
    s = settings_from_config(cfg)
    problem = folder_error("out", s.out) if s.out else None
    if problem:
        raise ValueError(problem)
    load_search_run(s.run)  # a run dir that is not a search's is refused before the pipeline's libraries load
    search_finished(s.run, wait=cfg.wait)  # a search still writing it: refused (or waited for) as early
    if not cfg.wait:  # and so is a second writer (the pipeline takes the lock itself)
        refuse_if_busy(s.out_dir, what=s.writing)
    try:
        # torch and timm load here, once the run dir is read
        with writing_into(s.out_dir):  # a full disk is named: the output folder
            report = train_lib.train_front(s, wait=cfg.wait, command=typed_command("nas.train"))
    except KeyboardInterrupt:
        print("\ninterrupted: finished epochs are checkpointed; run the same command to resume", file=sys.stderr)
        sys.exit(130)
    print(fmt_table(train_lib.report_rows(report), train_lib.REPORT_HEADER))
    out = Path(s.out or Path(s.run) / "train")
    print(f"report: {out / 'report.md'}\n        {out / 'report.json'}")
    return report


@hydra_app("train")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
