"""Compression of trained networks: latency-aware structured pruning and quantization-aware training.

``nas.compress.prune``: channel groups of the space's multiple (and, with the measured-loss
criterion, whole squeeze-excites and residual blocks), removed in spec space (an ``Arch`` in, a
smaller ``Arch`` out), guided by the target's latency model; the planner in ``nas.compress.prune_plan``,
the narrowing of an ``Arch`` (channel units, resizing, dropping layers) in ``nas.narrow``.
``nas.compress.qat``: BN folding, fake-quant fine-tuning and export to QDQ ONNX.
"""

from nas.compress.prune import apply_plan, channel_importance, prune_model
from nas.compress.prune_plan import LossProbe, PrunePlan, plan_pruning
from nas.compress.qat import QATNet, QuantSettings, calibrate, export_qdq, fold_bn, prepare_qat
from nas.narrow import ChannelUnit, channel_units, drop_layers, droppable, resize_arch

__all__ = [
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
