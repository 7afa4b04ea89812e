"""The whole-network calibration of the latency predictor: additive per-layer features
(``layer_features``), the network mix the residual model reads (``layer_mix`` / ``network_mix``),
and the calibration networks a table holds (``table_networks``; its refresh / recalibration
records: ``recorded``, ``recalibrated_networks``); see ``nas.latency.predict.predictor``."""

from __future__ import annotations

import logging
import math

import numpy as np
from scipy.optimize import minimize
from sklearn.linear_model import LinearRegression

from nas.arch import ACTIVATIONS, Arch, BlockKey
from nas.cost import block_cost
from nas.latency.predict.block_model import KINDS
from nas.latency.predict.ops import padding_elems
from nas.latency.tables import LatencyTable, TableError

log = logging.getLogger(__name__)


def boundary_feature(key: BlockKey) -> float:
    """Millions of activation elements entering and leaving a layer (batch 1)."""
    ci, h, w = key.in_shape
    co, ho, wo = key.out_shape
    return (ci * h * w + co * ho * wo) / 1e6


N_FEATURES = 8
EXTRAPOLATION_MARGIN = 0.8  # a raw table sum below 0.8x the smallest calibration network's (or above
# 1/0.8 x the largest) makes the prediction an extrapolation, and its label says so: 16-px digits
# networks of 16 us (all their layers learned) were over-predicted by 50% there
LOW_NETWORKS = 10  # the smallest calibration networks whose measured / raw ratio predicts below the range
LOG_FLOOR_MS = 1e-3  # the log-time feature's floor (1 us: below it a lone block is call-overhead noise)


def layer_features(key: BlockKey, ms: float) -> np.ndarray:
    """Additive per-layer calibration features (a network's are their sum).

    ``[ms, 1, boundary, weight MB, ms if squeeze-excite else 0, padding, log ms, MMACs]``: the block's
    table figure, the layer count, the activations entering and leaving it (M elements: a lone block
    converts them between layouts, a block inside a network does not), its weight megabytes (a
    network streams weights that a lone block keeps in cache), its time again when it gates
    with SE, and the padding its depthwise convolution reads and writes when its channels are
    not a multiple of the SIMD block (``nas.latency.predict.ops.padding_elems``, ``SIMD_CHANNELS`` =
    16), and the log of its time (floored at ``LOG_FLOOR_MS``): what a layer costs inside a
    network is concave in what it costs alone (its fixed per-operator share does not shrink
    with it), which a constant per layer cannot express.  Without the log term, 60 networks
    pruned below the calibration set's range (21-54 us Fashion-MNIST networks) were
    under-predicted by 14% (median); with it, by 4%.  No feature is specific to a block kind:
    per-kind scales fit the calibration set better but do not carry over to a family the
    calibration never saw (checked by leave-one-space-out).  Last, its millions of MACs: where a
    runtime compiles a whole network into something its separately compiled blocks do not add up
    to (OpenVINO fuses across block boundaries, and each lone block pays fixed costs of its own),
    arithmetic carries what the block figures lose.  With it, 30 held-out ``tiny`` networks of
    the ``openvino_cpu`` table came within ±10% for 87% (73% without, MAPE 5.8% against 6.5%),
    and the onnxruntime and ExecuTorch tables moved by at most one network of 30-300.
    """
    f = np.empty(N_FEATURES)
    f[0] = ms
    f[1] = 1.0
    f[2] = boundary_feature(key)
    cost = block_cost(key)
    f[3] = cost.weight_bytes / 1e6
    f[4] = ms if getattr(key.block, "se", None) is not None else 0.0
    f[5] = padding_elems(key)
    f[6] = math.log(max(ms, LOG_FLOOR_MS))
    f[7] = cost.macs / 1e6
    return f


def fit_calibration(X: np.ndarray, y: np.ndarray, layers: np.ndarray) -> tuple[np.ndarray, float]:
    """The calibration's coefficients and intercept: least squares on relative error (weights
    ``1/y^2``) of networks' summed features ``X`` against their measured ``y``, with every layer's
    contribution ``layers @ coef`` kept >= 0 (``layers``: the ``layer_features`` of the table's
    blocks and of the calibration networks' layers).

    A prediction sums ``max(layer contribution, 0)`` (a layer never costs less than nothing), so a
    fit whose contributions go negative on the table's own layers predicts something other than
    what was fitted: on the ``openvino_cpu`` table such clamping added ~15 us to every network
    (held-out MAPE 22% where the same fit unclamped scored 6.5%).  When the plain fit keeps every
    contribution >= 0 it is returned as is; otherwise the constrained problem is solved with
    scipy's SLSQP (scikit-learn's linear models and ``scipy.optimize.lsq_linear`` take bounds on
    coefficients only, not inequalities on their combinations)."""
    w = 1.0 / y**2
    plain = LinearRegression().fit(X, y, sample_weight=w)
    if len(layers) == 0 or (layers @ plain.coef_).min() >= -1e-12:
        return plain.coef_.astype(np.float64), float(plain.intercept_)
    scale = np.abs(np.r_[X, layers]).max(axis=0)
    scale[scale == 0] = 1.0
    sw = np.sqrt(w) / np.sqrt(w).max()
    A = np.c_[X / scale, np.ones(len(X))] * sw[:, None]
    t = y * sw
    C = np.c_[layers / scale, np.zeros(len(layers))]
    norm = float(t @ t) or 1.0
    z0 = np.zeros(A.shape[1])  # every contribution 0: feasible
    res = minimize(lambda z: float((A @ z - t) @ (A @ z - t)) / norm, z0, method="SLSQP",
                   jac=lambda z: 2.0 * A.T @ (A @ z - t) / norm,
                   constraints=[{"type": "ineq", "fun": lambda z: C @ z, "jac": lambda z: C}],
                   options={"maxiter": 1000, "ftol": 1e-14})
    if not res.success:
        log.warning("the constrained calibration did not converge (%s); using the plain fit", res.message)
        return plain.coef_.astype(np.float64), float(plain.intercept_)
    return res.x[:-1] / scale, float(res.x[-1])


MIN_RESIDUAL_NETWORKS = 100  # fewer calibration networks: the linear calibration alone
_MIX_KINDS = KINDS
_MIX_ACTS = tuple(ACTIVATIONS)
# layer_mix columns: ms, ms per block kind, ms in SE blocks, ms in 5x5+ kernels, ms per activation,
# then 1 (layers), weight MB and MMACs
N_MIX = 1 + len(_MIX_KINDS) + 2 + len(_MIX_ACTS) + 3


def layer_mix(key: BlockKey, ms: float) -> np.ndarray:
    """A layer's additive share of ``network_mix`` (a network's mix is a function of their sum)."""
    b = key.block
    c = block_cost(key)
    f = np.zeros(N_MIX)
    f[0] = ms
    f[1 + _MIX_KINDS.index(b.kind)] = ms
    i = 1 + len(_MIX_KINDS)
    f[i] = ms if getattr(b, "se", None) is not None else 0.0
    f[i + 1] = ms if getattr(b, "kernel", 1) >= 5 else 0.0
    act = getattr(b, "act", None)
    if act in _MIX_ACTS:
        f[i + 2 + _MIX_ACTS.index(act)] = ms
    f[-3:] = (1.0, c.weight_bytes / 1e6, c.macs / 1e6)
    return f


def network_mix(mix: np.ndarray) -> np.ndarray:
    """Rows of summed ``layer_mix`` -> the residual's features: each time column as a share of
    the network's table time, then layers, log time, log MACs, weight MB.

    Rounded to 1e-9, so that sums taken in another order (``SpacePredictor``, a batch) fall on
    the same side of every split: a network all under one activation has a share of 1 or of
    1 - 1 ulp otherwise."""
    mix = np.atleast_2d(mix)
    if len(mix) == 1:  # one Arch: fewer numpy calls (the same arithmetic)
        v = mix[0].tolist()
        ms = max(v[0], 1e-6)
        lg = np.log([ms, max(v[-1], 1e-6)]).tolist()
        return np.round([[*(x / ms for x in v[1:-3]), v[-3], lg[0], lg[1], v[-2]]], 9)
    ms = np.maximum(mix[:, 0], 1e-6)
    z = np.empty((len(mix), N_MIX))
    np.divide(mix[:, 1:-3], ms[:, None], out=z[:, :-4])
    z[:, -4] = mix[:, -3]
    z[:, -3] = np.log(ms)
    z[:, -2] = np.log(np.maximum(mix[:, -1], 1e-6))
    z[:, -1] = mix[:, -2]
    return np.round(z, 9, out=z)


def table_networks(table: LatencyTable) -> list[tuple[Arch, float]]:
    """The whole-network measurements stored in a table (for calibration)."""
    return [(a, e.median_ms) for a, e in table.networks.items()]


def recorded(table: LatencyTable) -> tuple[dict | None, dict | None]:
    """The table's re-measurement that applies, as ``(refresh, recalibration)`` with at most one
    set: the newer of its ``refresh`` record (``nas.profile refresh=N``: a ratio) and its
    ``recalibration`` record (``nas.profile recalibrate=true``: every calibration network's
    figure now).  ISO timestamps compare as strings."""
    rf, rc = table.metadata.get("refresh"), table.metadata.get("recalibration")
    if rf and rc:
        return (rf, None) if str(rf.get("measured_at", "")) > str(rc.get("measured_at", "")) else (None, rc)
    return rf or None, rc or None


def recalibrated_networks(table: LatencyTable, rc: dict) -> list[tuple[Arch, float]] | None:
    """The table's calibration networks with their figures from the recalibration record ``rc``;
    ``None`` (with a warning) when it does not cover them all: the table gained networks since."""
    figs = rc.get("network_ms")
    if not isinstance(figs, dict):
        raise TableError(f"{table.path}: corrupt recalibration record (no 'network_ms' mapping)")
    missing = [a for a in table.networks if a.digest() not in figs]
    if missing:
        log.warning("%s: its recalibration (%s) lacks %d of its %d calibration networks (networks were added "
                    "since), so it is not applied: run `python -m nas.profile conf=<target> recalibrate=true` "
                    "again", table.path, rc.get("measured_at"), len(missing), len(table.networks))
        return None
    bad = [d for d, v in figs.items() if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0)]
    if bad:
        raise TableError(f"{table.path}: corrupt recalibration record: {len(bad)} figures are not positive numbers")
    return [(a, float(figs[a.digest()])) for a in table.networks]
