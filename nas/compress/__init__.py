"""Compression of trained networks: latency-aware structured pruning and quantization-aware training.

``nas.compress.prune``: channel groups of the space's multiple (and, with the measured-loss
criterion, whole squeeze-excites and residual blocks), removed in spec space (an ``Arch`` in, a
smaller ``Arch`` out), guided by the target's latency model; the planner in ``nas.compress.prune_plan``,
the narrowing of an ``Arch`` (channel units, resizing, dropping layers) in ``nas.narrow``.
``nas.compress.qat``: BN folding, fake-quant fine-tuning and export to QDQ ONNX.
"""

from __future__ import annotations

from nas._lazy import lazy_exports
from nas.compress.criteria import CRITERIA

__all__ = [
    "CRITERIA",
    "ChannelUnit",
    "LossProbe",
    "PrunePlan",
    "QATNet",
    "QuantSettings",
    "apply_plan",
    "calibrate",
    "channel_importance",
    "channel_units",
    "drop_layers",
    "droppable",
    "export_qdq",
    "fold_bn",
    "plan_pruning",
    "prepare_qat",
    "prune_model",
    "resize_arch",
]


_HOMES = {"apply_plan": "prune", "channel_importance": "prune", "prune_model": "prune",
          "LossProbe": "prune_plan", "PrunePlan": "prune_plan", "plan_pruning": "prune_plan",
          **{n: "qat" for n in ("QATNet", "calibrate", "export_qdq", "fold_bn", "prepare_qat")},
          "QuantSettings": "quant_settings",
          **{n: "nas.narrow" for n in ("ChannelUnit", "channel_units", "drop_layers", "droppable", "resize_arch")}}


# torch and timm load with the first use, not with the settings that name CRITERIA
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
