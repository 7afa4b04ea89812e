"""Train the Pareto front of a search: full training, pruning, QAT, export and the report.

``settings`` (frozen dataclasses: the one source of the Hydra schemas), ``fit`` (the one training
loop, also the search evaluator's), ``checkpoint`` (save / load / resume checks), ``deploy`` and
``deploy_edge`` (a checkpoint -> an exported, verified, timed file and its card: ``export_checkpoint``,
``export_edge``), ``search_run`` (reading a search run dir), ``pipeline`` (``train_front`` and its
per-model stages), ``report`` (report rows, the deployment choice, report.json / report.md).
"""

from __future__ import annotations

from nas._lazy import lazy_exports

__all__ = ["REPORT_HEADER", "edge_summary", "export_checkpoint", "export_edge", "report_rows", "train_front"]

_HOMES = {"train_front": "pipeline", "export_checkpoint": "deploy", "export_edge": "deploy_edge",
          "edge_summary": "deploy_edge", "REPORT_HEADER": "report", "report_rows": "report"}


# torch, timm and the runtimes load with the first use: a command refuses a bad value before they do
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
