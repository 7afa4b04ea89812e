"""``python -m nas.supernet conf=<target> search_space=<space> data=<dataset>``: train the supernet.

Thin Hydra entry point: parse the config into ``nas.supernet.settings.SupernetSettings``, start the
process group when run by ``torchrun`` (gloo on CPUs, NCCL on GPUs), call
``nas.supernet.train.train_supernet``, print the per-epoch table (process 0).  ``<out>/supernet.ckpt``
is written after every epoch; re-running the same command resumes; Ctrl-C is safe.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

import nas.data  # nas.data.load_data and nas.supernet.*: lazy exports, loaded when training starts
import nas.supernet
from nas._io import atomic_write_json
from nas.cli._common import fmt_table, folder_error, hydra_app, user_errors
from nas.config.supernet import register_supernet_configs
from nas.space import load_space
from nas.supernet.schedule import phases
from nas.supernet.settings import SupernetSettings

register_supernet_configs()


def settings_from_config(cfg: DictConfig):
    c = OmegaConf.to_container(cfg, resolve=True)
    train = dict(c["train"])
    if c["epochs"] is not None:
        train["epochs"] = c["epochs"]
    return SupernetSettings.from_dict(train)


def _rows(history: list[dict[str, Any]]) -> list[list[str]]:
    return [[str(h["epoch"]), h.get("phase", "sandwich"), f"{h['train_loss']:.4f}",
             f"{100 * h['val_accuracy_largest']:.2f}%", f"{100 * h['val_accuracy_smallest']:.2f}%",
             f"{h['seconds']:.1f}"] for h in history]


def _training(s) -> str:
    """The schedule in words, for the start-up lines."""
    per_step = f"largest + smallest + {s.random_subnets} random subnets per step"
    if s.schedule == "sandwich":
        return f"sandwich rule: {per_step}"

    table = ", ".join(f"{p.name} from epoch {p.start + 1}" for p in phases(s))
    return f"progressive shrinking ({table}): {per_step}, the smaller ones along the unlocked dimensions"


@user_errors
def run(cfg: DictConfig) -> dict:
    s = settings_from_config(cfg)
    problem = folder_error("out", cfg.out)
    if problem:
        raise ValueError(problem)
    space = load_space(cfg.search_space)
    data = nas.data.load_data(OmegaConf.to_container(cfg.data, resolve=True))
    with nas.supernet.process_group(s.device):
        rank0 = nas.supernet.Dist.current().rank == 0
        if rank0:
            print(f"space    {space.name} ({space.source}, 10^{space.log10_size():.1f} architectures)\n"
                  f"data     {data.describe()}\n"
                  f"training {_training(s)}, {s.epochs} epochs -> {Path(cfg.out) / 'supernet.ckpt'}", flush=True)
        try:
            rec = nas.supernet.train_supernet(space, data, s, cfg.out, extra={"target": cfg.target.name})
        except KeyboardInterrupt:
            print("\ninterrupted: finished epochs are checkpointed; run the same command to resume", file=sys.stderr)
            sys.exit(130)
    if rank0:
        rec["target"] = cfg.target.name
        atomic_write_json(Path(cfg.out) / "supernet.json", rec)
        print(fmt_table(_rows(rec["history"]), ["epoch", "phase", "loss", "largest val", "smallest val", "s"]))
        print(f"supernet: {rec['path']} ({rec['params'] / 1e6:.2f}M shared parameters, {rec['world_size']} "
              f"process{'es' if rec['world_size'] > 1 else ''})\n"
              f"search with it: python -m nas.search search_space={cfg.search_space} data={data.name} "
              f"evaluator=supernet supernet={rec['path']}")
    return rec


@hydra_app("supernet")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
