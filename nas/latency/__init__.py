"""Latency: measured tables, runtimes, the profiler, the predictor and the roofline estimate.

Every latency source implements ``LatencyModel`` (``nas.latency.base``): ``predict(archs)``
returns milliseconds, ``explain(arch)`` a ``Prediction`` saying where the number came from.
``load_latency_model(target)`` gives the right one for a target: a predictor fitted on the
target's measured table, or a roofline estimate labelled ``estimated`` when no table exists.
"""

from nas.latency.base import LatencyModel, Prediction
from nas.latency.predictor import LatencyPredictor, RooflineModel, load_latency_model

__all__ = ["LatencyModel", "LatencyPredictor", "Prediction", "RooflineModel", "load_latency_model"]
