"""Train the Pareto front of a search: full training, pruning, QAT, export and the report.

``settings`` (frozen dataclasses: the one source of the Hydra schemas), ``fit`` (the one training
loop, also the search evaluator's), ``checkpoint`` (save / load / resume checks; ``export_checkpoint``),
``search_run`` (reading a search run dir), ``pipeline`` (``train_front`` and its per-model stages),
``report`` (report rows, the deployment choice, report.json / report.md).
"""
