"""Prediction: latency for any architecture, from a measured table or, without one, a roofline estimate.

    predictor.py    LatencyPredictor = table + learned per-block model + whole-network calibration
    block_model.py  the learned per-block model (a linear cost per kind of kernel, then gradient boosting)
    ops.py          what a layer runs, by kind of kernel: the block model's physical features
    calibration.py  the whole-network calibration's features and fit; the networks a table holds
    roofline.py     the roofline estimate from a device's peak compute and bandwidth; measure_peaks
    load.py         load_latency_model: the predictor on a target's table, else RooflineModel (the estimate)
    versions.py     runtime_note: a table measured with another version of its runtime than the one here
    here.py         this machine as a target (conf=here, conf=here_gpu), its roofline figures measured here
    scoring.py      predicted against measured: within ±5% / ±10%, MAPE, Kendall tau; a machine's drift
    breakdown.py    where a network's time goes, layer by layer, with the roofline's verdict on each
"""

from __future__ import annotations

from nas._lazy import lazy_exports

_HOMES = {
    "LatencyPredictor": "predictor",
    "recorded": "calibration",
    "table_networks": "calibration",
    "Roofline": "roofline",
    "RooflineModel": "load",
    "load_latency_model": "load",
    "resolve_target": "load",
    "ensure_here_target": "here",
    "load_target": "here",
    "NOISY_SPREAD": "scoring",
    "drift_ratios": "scoring",
    "drift_verdict": "scoring",
    "drift_warning": "scoring",
    "score": "scoring",
    "score_by_range": "scoring",
    "table_noise": "scoring",
    "breakdown_chart": "breakdown",
    "layer_breakdown": "breakdown",
    "ridge_point": "breakdown",
}

__all__ = sorted(_HOMES)

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
