"""hwnas: hardware-aware neural architecture search.

The public API, imported on first use (``import nas`` stays light: no torch, timm or Optuna until a
name is used)::

    nas.Arch, nas.load_space, nas.SearchSpace        the architecture spec and search spaces
    nas.build, nas.from_timm, nas.arch_cost          Arch -> nn.Module, timm model -> Arch, costs
    nas.Target, nas.load_target                      deployment targets (conf/target/*.yaml)
    nas.load_latency_model, nas.profile_target,      latency: predictor for a target, measuring a
    nas.validate_target                              target's blocks, validating the predictor
    nas.prepare_search, nas.run_search               the Optuna search
    nas.train_front, nas.export_checkpoint           train the Pareto front, export a checkpoint
"""

from __future__ import annotations

from nas._lazy import lazy_exports
from nas._version import __version__

# name -> the module that defines it (nas.latency's: the face of the room that holds it)
_HOMES: dict[str, str] = {
    "Arch": "nas.arch",
    "SearchSpace": "nas.space",
    "load_space": "nas.space",
    "build": "nas.builder",
    "from_timm": "nas.timm_arch",
    "arch_cost": "nas.cost",
    "Target": "nas.target",
    "load_target": "nas.latency.predict",
    "load_latency_model": "nas.latency",
    "profile_target": "nas.latency",
    "validate_target": "nas.latency",
    "prepare_search": "nas.search.study",
    "run_search": "nas.search.study",
    "train_front": "nas.train.pipeline",
    "export_checkpoint": "nas.train.deploy",
}

__all__ = ["__version__", *_HOMES]


__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
