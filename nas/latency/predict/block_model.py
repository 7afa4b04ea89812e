"""The learned per-block model of the latency predictor: ``BlockFeaturizer`` -> ``ResidualOverOps``
(a non-negative linear cost per kind of kernel, then gradient boosting on the log ratio), for
block shapes the table lacks; see ``nas.latency.predict.predictor``."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, TransformerMixin
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.linear_model import LinearRegression
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import check_is_fitted

from nas.arch import ACTIVATIONS, BlockKey
from nas.cost import block_cost
from nas.latency.predict.ops import N_OPS, SIMD_CHANNELS, op_features
from nas.latency.predict.roofline import Roofline

log = logging.getLogger(__name__)

KINDS = ("conv", "ds", "ir", "fused", "attn", "head")
# a fixed roofline whose log is one more feature of the learned model (shape, not scale)
_REF_ROOFLINE = Roofline(peak_gflops=100.0, mem_bandwidth_gbs=20.0, overhead_us=5.0)


class BlockFeaturizer(BaseEstimator, TransformerMixin):
    """BlockKey -> numeric features: kind, shapes, kernel, expansion, SE, heads, MACs, bytes,
    then the per-kind-of-kernel work of ``nas.latency.predict.ops.op_features``, as counted and with
    channels padded to the SIMD block (the last ``N_LINEAR`` columns)."""

    def fit(self, X: Sequence[BlockKey], y: Any = None) -> BlockFeaturizer:
        self.n_features_ = len(self._row(X[0])) if len(X) else 0
        return self

    def transform(self, X: Sequence[BlockKey]) -> np.ndarray:
        return np.array([self._row(k) for k in X], dtype=np.float64)

    @staticmethod
    def _row(k: BlockKey) -> list[float]:
        b = k.block
        c = block_cost(k)
        out_c, out_h, out_w = k.out_shape
        se = getattr(b, "se", None)
        act = getattr(b, "act", "relu")
        return [
            *(float(b.kind == kd) for kd in KINDS),
            *(float(act == a) for a in ACTIVATIONS),
            k.in_ch, k.in_h * k.in_w, out_c, out_h * out_w,
            getattr(b, "kernel", 1), getattr(b, "stride", 1), getattr(b, "mid_ch", 0),
            se.channels if se is not None else 0,
            getattr(b, "heads", 0), getattr(b, "mlp_hidden", 0),
            float(b.has_skip(k.in_ch)),
            math.log1p(c.macs), math.log1p(c.bytes_moved), math.log1p(c.params), c.ops,
            math.log(_REF_ROOFLINE.predict_key(k)),
            *op_features(k),
            *op_features(k, pad=SIMD_CHANNELS),
        ]


N_LINEAR = 2 * N_OPS


class ResidualOverOps(BaseEstimator, RegressorMixin):
    """Two stages on ``BlockFeaturizer`` columns (the last ``N_LINEAR`` are ``op_features``):

    1. a non-negative linear model of the per-kind-of-kernel work (each kind of kernel gets a
       cost per MAC, per element and per launch), fitted on relative error.  It is additive and
       physical, so it extrapolates to shapes the table never measured;
    2. gradient boosting on ``log(measured / linear)`` over all the columns, for what a linear
       cost misses (kernel efficiency that varies with shape).
    """

    def __init__(self, max_iter: int = 400, learning_rate: float = 0.05, random_state: int = 0) -> None:
        self.max_iter, self.learning_rate, self.random_state = max_iter, learning_rate, random_state

    def _base(self, X: np.ndarray) -> np.ndarray:
        return np.maximum(self.linear_.predict(X[:, -N_LINEAR:]), 1e-6)

    def fit(self, X: np.ndarray, y: np.ndarray) -> ResidualOverOps:
        y = np.asarray(y, dtype=np.float64)
        self.linear_ = LinearRegression(positive=True, fit_intercept=False).fit(
            X[:, -N_LINEAR:], y, sample_weight=1.0 / y**2)
        base = self._base(X)
        self.gbm_ = HistGradientBoostingRegressor(
            max_iter=self.max_iter, learning_rate=self.learning_rate, random_state=self.random_state,
            min_samples_leaf=5,
        ).fit(np.column_stack([X, np.log(base)]), np.log(y) - np.log(base))
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        check_is_fitted(self, "gbm_")
        base = self._base(X)
        return base * np.exp(self.gbm_.predict(np.column_stack([X, np.log(base)])))


def make_block_model(random_state: int = 0) -> Pipeline:
    return Pipeline([("features", BlockFeaturizer()), ("model", ResidualOverOps(random_state=random_state))])


# --------------------------------------------------------------------------------------------
