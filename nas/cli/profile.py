"""``python -m nas.profile conf=<target>``: build the latency table on the device.

Thin Hydra entry point: parse the config, call ``nas.latency``, print a summary.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nas import latency
from nas._io import refuse_if_busy
from nas.cli._common import check_counts, file_error, hydra_app, typed_command, user_errors
from nas.config.profile import register_profile_configs
from nas.latency.runtimes import Interrupted, ProfileSettings
from nas.latency.tables import default_table_out, profile_writer
from nas.machine import cpu_identity
from nas.space import load_space, space_names
from nas.target import Target

register_profile_configs()


@user_errors
def run(cfg: DictConfig) -> dict:
    check_counts(cfg, {**dict.fromkeys(("calibration_networks", "pruned_networks", "refresh"), "networks per space"),
                      "held_out": "held-out networks"})
    for name in space_names(cfg.search_space) if cfg.search_space else ():  # the shipped ones load fine
        load_space(name)  # an unknown or malformed space is refused before the runtimes (torch) load
    problem = file_error("out", cfg.out) if cfg.out else None
    if problem:
        raise ValueError(problem)
    _refuse_a_second_writer(cfg)
    try:
        summary = latency.profile_target(  # the runtimes (torch) load here
            OmegaConf.to_container(cfg.target, resolve=True), spaces=cfg.search_space, resolution=cfg.resolution,
            out=cfg.out, bundle=cfg.bundle, import_bundle=cfg.import_bundle,
            settings=ProfileSettings(**OmegaConf.to_container(cfg.profile)),
            calibration_spaces=cfg.calibration_spaces, calibration_networks=cfg.calibration_networks,
            pruned_networks=cfg.pruned_networks, models=list(cfg.models or ()), in_chans=list(cfg.in_chans or ()),
            num_classes=list(cfg.num_classes or ()), refresh=cfg.refresh, recalibrate=cfg.recalibrate,
            allow_mismatch=cfg.allow_mismatch, limit=cfg.limit, progress=cfg.progress, budget_min=cfg.budget_min,
            held_out=cfg.held_out, command=typed_command("nas.profile"), wait=cfg.wait, yes=cfg.yes,
            bundle_max_gb=cfg.bundle_max_gb, ask=_ask if sys.stdin.isatty() else None,
            say=lambda line: print(line, flush=True))
    except Interrupted as e:
        print(f"\ninterrupted: {e}", file=sys.stderr)
        sys.exit(130)
    if (summary.get("watch") or {}).get("stopped"):  # the machine misled the run (said above): not a success
        sys.exit(1)
    return summary


def _ask(question: str) -> bool:
    """The user's yes or no at the terminal (anything but y / yes is no; end of input is no)."""
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:
        return False


def _refuse_a_second_writer(cfg: DictConfig) -> None:
    """Another profile writing the same table on this machine: refused now, before the runtimes (torch)
    load (``profile_target`` takes the lock itself).  A device that is not this CPU is named by its
    identity only once torch is there: then the lock alone refuses it."""
    if cfg.wait or cfg.bundle:
        return
    target = Target.coerce(cfg.target)
    if cfg.out:
        out = Path(cfg.out)
    elif target.device.name is not None or target.device.kind == "cpu":
        out = default_table_out(target, cpu_identity)
    else:
        return
    lock, what = profile_writer(out)
    refuse_if_busy(lock, what=what)


@hydra_app("profile")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
