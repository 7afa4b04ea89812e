"""Latency: measured tables, runtimes, the profiler, the predictor and the roofline estimate.

Every latency source implements ``LatencyModel`` (``nas.latency.tables``): ``predict(archs)`` returns
milliseconds, ``explain(arch)`` a ``Prediction`` saying where the number came from.
``load_latency_model(target)`` gives the right one for a target: a predictor fitted on the
target's measured table, or a roofline estimate labelled ``estimated`` when no table exists.
"""

from __future__ import annotations

from nas._lazy import lazy_exports

__all__ = ["SOURCES", "LatencyModel", "LatencyPredictor", "Prediction", "RooflineModel", "load_latency_model",
           "profile_target", "validate_target", "ensure_here_target", "refresh_model"]

_HOMES = {"SOURCES": "nas.latency.tables", "LatencyModel": "nas.latency.tables", "Prediction": "nas.latency.tables",
          "LatencyPredictor": "nas.latency.predict",
          "RooflineModel": "nas.latency.predict", "load_latency_model": "nas.latency.predict", "profile_target": "profile_workflow",
          "validate_target": "validate", "ensure_here_target": "nas.latency.predict", "refresh_model": "refresh",
          # what nas.validate prints a report with
          "RESCALED": "validate", "reproducibility_lines": "reproducibility",
          "summary_line": "reproducibility",
          # nas.predict breakdown=true: per-layer time beside the roofline's verdict, and its chart
          **{n: "nas.latency.predict" for n in ("layer_breakdown", "breakdown_chart", "ridge_point")}}


# scikit-learn and torch load with the first use, not with every submodule: a command refuses a bad value
# before they load
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
