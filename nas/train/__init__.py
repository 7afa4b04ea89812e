"""Train the Pareto front of a search: full training, pruning, QAT, export and the report.

``settings`` (the stages' frozen dataclasses: the one source of the Hydra schemas), ``deploy`` and
``deploy_edge`` (a checkpoint -> an exported, verified, timed file and its card: ``export_checkpoint``,
``export_edge``), ``card`` (deployment cards), ``search_run`` (reading a search run dir), ``context``
(``PipelineContext``: what every stage reads), ``records`` (``ModelResult``: what the stages find for each
model, typed; ``results.json``; ``ExportRecord``: each exported ONNX variant), ``prune_stage``, ``pipeline``
(``train_front`` and its per-model stages), ``report`` (report rows, the deployment choice, report.json /
report.md).  The training loop, its settings and checkpoints are the layer below: ``nas.fit``.
"""

from __future__ import annotations

from nas._lazy import lazy_exports

__all__ = ["REPORT_HEADER", "edge_summary", "export_checkpoint", "export_edge", "report_rows", "train_front"]

_HOMES = {"train_front": "pipeline", "export_checkpoint": "deploy", "export_edge": "deploy_edge",
          "edge_summary": "deploy_edge", "REPORT_HEADER": "report", "report_rows": "report"}


# torch, timm and the runtimes load with the first use: a command refuses a bad value before they do
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
