"""Latency: measured tables, runtimes, the predictor and the roofline estimate, the profiler, device bundles.

Every latency source implements ``LatencyModel`` (``nas.latency.tables``): ``predict(archs)`` returns
milliseconds, ``explain(arch)`` a ``Prediction`` saying where the number came from.
``load_latency_model(target)`` gives the right one for a target: a predictor fitted on the
target's measured table, or a roofline estimate labelled ``estimated`` when no table exists.

Rooms, lowest first (a room imports from itself and those listed before it only), each with its face
(its ``__init__``):

    tables/    the table: entries, metadata, provenance, locking, which table a command uses
    runtimes/  one interface, one measuring loop; onnxruntime, torch (CUDA graphs), TensorRT, ExecuTorch,
               OpenVINO, LiteRT, and the standalone timers device bundles carry
    predict/   predictor = table + learned block model + calibration; roofline; conf=here; scoring
    bundle/    device bundles: writer, importer, the standalone measuring script (+ rehearsal)
    profile/   nas.profile and nas.validate: budgets, watch, reproducibility, refresh on the fly
"""

from __future__ import annotations

from nas._lazy import lazy_exports

__all__ = ["SOURCES", "LatencyModel", "LatencyPredictor", "Prediction", "RooflineModel", "load_latency_model",
           "profile_target", "validate_target", "ensure_here_target", "refresh_model"]

_HOMES = {**{n: "nas.latency.tables" for n in ("SOURCES", "LatencyModel", "Prediction")},
          **{n: "nas.latency.predict" for n in ("LatencyPredictor", "RooflineModel", "load_latency_model",
                                                "ensure_here_target")},
          **{n: "nas.latency.profile" for n in ("profile_target", "validate_target", "refresh_model")},
          # what nas.validate prints a report with
          **{n: "nas.latency.profile" for n in ("RESCALED", "reproducibility_lines", "summary_line")},
          # nas.predict breakdown=true: per-layer time beside the roofline's verdict, and its chart
          **{n: "nas.latency.predict" for n in ("layer_breakdown", "breakdown_chart", "ridge_point")}}


# scikit-learn and torch load with the first use, not with every submodule: a command refuses a bad value
# before they load
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
