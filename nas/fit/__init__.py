"""The training service: the one training loop, its settings and its checkpoints, used by the search's
evaluators (``nas.search.evaluate``), the weight-sharing supernet (``nas.supernet``) and the front's
pipeline (``nas.train``).

``settings`` (``FitSettings``: optimizer and schedule of one training run, without torch), ``loop``
(``train_epochs``, the loop every training runs; ``fit``, the loop with validation, BatchNorm
recalibration, a checkpoint after every epoch and resuming; ``accuracy``), ``checkpoint`` (save / load /
resume checks, the dataset record a checkpoint keeps, a model rebuilt from a checkpoint).
"""

from __future__ import annotations

from nas._lazy import lazy_exports

_HOMES = {
    "FitSettings": "settings",
    "check_fit": "settings",
    "Schedule": "loop",
    "TrainingDiverged": "loop",
    "accuracy": "loop",
    "build_optimizer": "loop",
    "fit": "loop",
    "recalibrate_batchnorm": "loop",
    "resolve_device": "loop",
    "train_epochs": "loop",
    "dataset_record": "checkpoint",
    "load_checkpoint": "checkpoint",
    "model_from_checkpoint": "checkpoint",
    "save_checkpoint": "checkpoint",
}

__all__ = sorted(_HOMES)


# torch loads with the first use of the loop or the checkpoints: the settings alone load none
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
