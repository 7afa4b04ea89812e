"""Latency predictor = measured table + learned per-block model + whole-network calibration.

scikit-learn style: ``LatencyPredictor(...).fit(table)`` then ``predict(archs)``.

1. **Table.**  A network is the sum of its layers' table entries, each less the runtime's
   per-call overhead (measured by the profiler on an empty graph), plus one overhead.
2. **Learned model** for keys the table lacks: a scikit-learn pipeline fitted on the table's
   entries (``BlockFeaturizer`` -> ``_ResidualOverOps``): a non-negative linear cost per kind
   of kernel (``nas.latency.ops``: MACs, elements and launches of dense / pointwise /
   depthwise convolutions, activations, pools, adds, attention), then gradient boosting on
   ``log(measured / linear)``.  The linear stage is physical and additive, so far from the
   data it extrapolates like the device's kernels do.  Refit whenever a table is loaded;
   nothing is pickled.
3. **Calibration** on whole-network measurements stored in the table (``networks``, measured
   by the profiler on architectures the validation never uses):
   a linear model of additive per-layer features (``layer_features``: block time, layer count,
   activations crossing layer boundaries, weight bytes, time in SE blocks, depthwise channel
   padding, log block time), fitted by least squares on *relative* error (weights 1/ms^2).  Why these:
   a block measured on its own converts its input and output between layouts (onnxruntime's
   NCHWc) and keeps its weights in cache; inside a network it does neither.  After
   ``python -m nas.profile recalibrate=true`` (every calibration network re-measured later, a
   ``recalibration`` record in the table's metadata) steps 3 and 4 are fitted on those figures.
4. **Network residual** (with >= ``MIN_RESIDUAL_NETWORKS`` calibration networks): gradient
   boosting (scikit-learn) on ``log(measured / calibrated)`` of the calibration networks, from
   the network's mix (``network_mix``: the share of its table time in each block kind, in SE
   blocks, in 5x5+ kernels and under each activation; its layer count, log time, log MACs and
   weight megabytes).  It carries what is not additive over layers (how kinds of kernel
   interleave); shallow trees saturate outside the data, so the factor stays bounded.  On the
   EPYC fp32 table, 5-fold CV within ±5%: 85.0% -> 90.6%.

Throughput: ``predict`` on Arch objects costs ~30-50 us an Arch; ``compile(space)`` returns a
``SpacePredictor`` that predicts straight from parameter-index arrays, vectorised over
hundreds of thousands of architectures.

``load_latency_model(target)`` returns a fitted predictor when the target's table exists and
a ``RooflineModel`` (labelled ``estimated``, with a warning naming the command to measure the
table) when it does not.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, TransformerMixin
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.linear_model import LinearRegression
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import check_is_fitted

from nas.arch import ACTIVATIONS, Arch, BlockKey
from nas.cost import block_cost
from nas.latency.base import LatencyModel, Prediction
from nas.latency.ops import N_OPS, SIMD_CHANNELS, op_features, padding_elems
from nas.latency.roofline import Roofline
from nas.latency.table import LatencyTable, TableError, resolve_table_path

__all__ = ["BlockFeaturizer", "LatencyPredictor", "RooflineModel", "SpacePredictor", "load_latency_model"]

log = logging.getLogger(__name__)

KINDS = ("conv", "ds", "ir", "fused", "attn", "head")
# a fixed roofline whose log is one more feature of the learned model (shape, not scale)
_REF_ROOFLINE = Roofline(peak_gflops=100.0, mem_bandwidth_gbs=20.0, overhead_us=5.0)


class BlockFeaturizer(BaseEstimator, TransformerMixin):
    """BlockKey -> numeric features: kind, shapes, kernel, expansion, SE, heads, MACs, bytes,
    then the per-kind-of-kernel work of ``nas.latency.ops.op_features``, as counted and with
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


class _ResidualOverOps(BaseEstimator, RegressorMixin):
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

    def fit(self, X: np.ndarray, y: np.ndarray) -> _ResidualOverOps:
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
    return Pipeline([("features", BlockFeaturizer()), ("model", _ResidualOverOps(random_state=random_state))])


# --------------------------------------------------------------------------------------------


class LatencyPredictor(LatencyModel, BaseEstimator):
    """Predicts whole-network latency from a measured table (see the module docs).

    Parameters (stored as given; ``fit`` sets the attributes ending in ``_``):
        calibrate: fit the whole-network calibration when the table has network measurements.
        learned: fit the learned per-block model (else missing keys raise ``KeyError``).
        random_state: seed of the learned model.
        refresh: apply the table's latest re-measurement of its calibration networks, and say so:
            ``python -m nas.profile refresh=N`` (some of them re-measured later; every prediction is
            scaled by their median now/table ratio) or ``recalibrate=true`` (all of them
            re-measured; the calibration is fitted on those figures instead of the table's, so it
            also follows a machine that moved unevenly).  The newer record applies, and only when
            ``fit`` calibrates on the table's own networks (no ``networks`` passed).
            ``nas.validate`` scores the table as built (False).
        residual: fit the network residual (step 4 of the module docs) when the table has at
            least ``MIN_RESIDUAL_NETWORKS`` calibration networks.
    """

    source = "measured"

    def __init__(self, *, calibrate: bool = True, learned: bool = True, random_state: int = 0,
                 refresh: bool = True, residual: bool = True) -> None:
        self.calibrate, self.learned, self.random_state = calibrate, learned, random_state
        self.refresh, self.residual = refresh, residual

    # -- fitting --------------------------------------------------------------------------
    def fit(self, table: LatencyTable, networks: Sequence[tuple[Arch, float]] | None = None,
            *, mismatched: bool = False) -> LatencyPredictor:
        """Fit on ``table``; calibrate on ``networks`` (default: the table's own network entries).

        The gradient-boosting fits run on one OpenMP thread (about 1.2 s against 1.0 s for the
        2925-entry ``epyc_zen5`` table): two processes fitting at once with a thread per core
        each (search workers starting together, a test run beside another) stalled for 8 minutes
        on a 2-core machine, spinning on each other's cores."""
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="openmp"):
            return self._fit(table, networks, mismatched=mismatched)

    def _fit(self, table: LatencyTable, networks: Sequence[tuple[Arch, float]] | None,
             *, mismatched: bool) -> LatencyPredictor:
        if len(table) == 0:
            raise ValueError("cannot fit a latency predictor on an empty table")
        self.table_ = table
        self.device = str(table.metadata.get("device", {}).get("name", "?"))
        self.overhead_ms_ = float(table.metadata.get("call_overhead_ms") or 0.0)
        self.mismatched_ = mismatched
        self.lookup_ = {k: e.median_ms - self.overhead_ms_ for k, e in table.entries.items()}
        self.block_model_ = None
        if self.learned:
            keys = list(table.entries)
            y = np.array([table.entries[k].median_ms for k in keys])
            self.block_model_ = make_block_model(self.random_state).fit(keys, y)
        self._learned_cache: dict[BlockKey, float] = {}
        self._reset_rows()
        self.residual_ = None
        self.recalibrated_ = ""  # when the calibration networks were re-measured (recalibration record)
        rf, rc = (recorded(table) if self.refresh and networks is None else (None, None))
        if rc is not None and (networks := recalibrated_networks(table, rc)) is not None:
            self.recalibrated_ = str(rc.get("measured_at", "?"))
        nets = table_networks(table) if networks is None else list(networks)
        self.calibration_ = None
        self.n_calibration_ = 0
        self.calibration_range_ = None  # (smallest, largest) raw table sum of the calibration networks
        self.low_ratio_ = 1.0  # measured / raw sum of the smallest calibration networks (below the range)
        # uncalibrated: every layer's block figure (less the call overhead), plus one call overhead
        self.coef_ = np.array([1.0] + [0.0] * (N_FEATURES - 1))
        self.intercept_ = self.overhead_ms_
        if self.calibrate and len(nets) >= 2 * N_FEATURES:
            X = np.array([self.features(a) for a, _ in nets])
            y = np.array([ms for _, ms in nets])
            self.calibration_ = LinearRegression().fit(X, y, sample_weight=1.0 / y**2)
            self.coef_ = self.calibration_.coef_.astype(np.float64)
            self.intercept_ = float(self.calibration_.intercept_)
            self.n_calibration_ = len(nets)
            raw = X[:, 0] + self.overhead_ms_  # feature 0 sums the block figures: raw_sum of each network
            self.calibration_range_ = (float(raw.min()), float(raw.max()))
            small = np.argsort(raw)[:LOW_NETWORKS]
            self.low_ratio_ = float(np.median(y[small] / raw[small]))
            if self.residual and len(nets) >= MIN_RESIDUAL_NETWORKS:
                archs = [a for a, _ in nets]
                tab = self._sums(archs)
                lin, Z = self.intercept_ + tab[:, 0], network_mix(tab[:, 2:])
                gbm = HistGradientBoostingRegressor(max_iter=100, learning_rate=0.05, max_depth=3,
                                                    min_samples_leaf=20, random_state=self.random_state)
                self.residual_ = _CompiledTrees(gbm.fit(Z, np.log(y / lin)), check=Z[:64])
        elif self.calibrate and nets:
            log.warning("only %d calibration networks in the table; calibration needs >= %d, skipped",
                        len(nets), 2 * N_FEATURES)
        self.rescale_ = float(rf["now_over_table"]) if rf else 1.0
        self.coef_ = self.coef_ * self.rescale_
        self.intercept_ = self.intercept_ * self.rescale_
        self._reset_rows()  # the residual's fit cached contributions before the rescale
        return self

    def _reset_rows(self) -> None:
        # per layer key, a row of self._rows_: [calibrated contribution, 1 if learned, *layer_mix]
        self._row: dict[BlockKey, int] = {}
        self._rows_ = np.zeros((256, 2 + N_MIX))

    # -- prediction -----------------------------------------------------------------------
    def _block_ms(self, key: BlockKey) -> tuple[float, bool]:
        v = self.lookup_.get(key)
        if v is not None:
            return v, True
        v = self._learned_cache.get(key)
        if v is None:
            if self.block_model_ is None:
                raise KeyError(f"block {key} is not in the latency table and the learned model is disabled")
            v = float(self.block_model_.predict([key])[0]) - self.overhead_ms_
            self._learned_cache[key] = v
        return v, False

    def features(self, arch: Arch) -> np.ndarray:
        """The calibration features of a network: the sum of its layers' ``layer_features``."""
        check_is_fitted(self, "lookup_")
        return np.sum([layer_features(k, self._block_ms(k)[0]) for k in arch.keys()], axis=0)

    def _contribution(self, key: BlockKey) -> float:
        """One layer's calibrated share, ``max(layer_features . coef_, 0)`` (cached per key)."""
        return float(self._rows_[self._rows([key])[0], 0])

    def _rows(self, keys: Sequence[BlockKey]) -> list[int]:
        """Each key's row of ``self._rows_`` (computed once per key): its calibrated contribution,
        1 if its block figure is learned, then its ``layer_mix``.  Index ``self._rows_`` only
        after calling this (it may grow)."""
        idx = self._row
        rows = list(map(idx.get, keys))
        if None not in rows:  # every key seen before: the common case in a search
            return rows
        rows = []
        for k in keys:
            r = idx.get(k)
            if r is None:
                r = len(idx)
                if r == len(self._rows_):
                    self._rows_ = np.concatenate([self._rows_, np.zeros_like(self._rows_)])
                ms, measured = self._block_ms(k)
                # a layer never costs less than nothing: far outside the calibration data (another
                # resolution, learned blocks) the linear terms could otherwise add up below zero
                self._rows_[r, 0] = max(float(layer_features(k, ms) @ self.coef_), 0.0)
                self._rows_[r, 1] = 0.0 if measured else 1.0
                self._rows_[r, 2:] = layer_mix(k, ms)
                idx[k] = r
            rows.append(r)
        return rows

    def _sums(self, archs: Sequence[Arch]) -> np.ndarray:
        """Per network, the sum of its layers' rows: [calibrated sum less the intercept, learned
        layers, *mix]."""
        if len(archs) == 1:
            rows = self._rows(archs[0].keys())
            return self._rows_[rows].sum(axis=0, keepdims=True)
        new = [k for k in dict.fromkeys(k for a in archs for k in a.keys()) if k not in self._row]
        if new:
            self.layer_ms(new)  # learned figures of unseen blocks in one vectorised call
        flat: list[int] = []
        starts = np.empty(len(archs), dtype=np.intp)
        for i, a in enumerate(archs):
            starts[i] = len(flat)
            flat += self._rows(a.keys())
        return np.add.reduceat(self._rows_[flat], starts, axis=0)

    def raw_sum(self, arch: Arch) -> float:
        """Uncalibrated: sum of blocks (less per-call overheads) plus one call overhead."""
        check_is_fitted(self, "lookup_")
        return sum(self._block_ms(k)[0] for k in arch.keys()) + self.overhead_ms_

    def residual_factor(self, mix: np.ndarray) -> np.ndarray:
        """The network residual's factor for rows of summed ``layer_mix`` (1 without one)."""
        if self.residual_ is None:
            return np.ones(len(mix))
        return np.exp(self.residual_.predict(network_mix(mix)))

    def explain(self, arch: Arch) -> Prediction:
        check_is_fitted(self, "lookup_")
        keys = arch.keys()
        tab = self._sums([arch])
        n_learn = round(tab[0, 1])
        raw = self.overhead_ms_ + float(tab[0, 2])  # layer_mix's first column: the block figure
        ms = float(self.finish(self.intercept_ + tab[:, 0], tab[:, 2:])[0])
        return Prediction(ms, "measured", self.device, len(keys) - n_learn, n_learn,
                          0, self.calibration_ is not None, self.mismatched_, self.rescale_, self._outside(raw),
                          self.recalibrated_)

    def _outside(self, raw: float) -> str:
        """Why a network whose raw table sum is ``raw`` lies outside the calibration set (well below
        the smallest calibration network's raw sum or above the largest's), or ""."""
        if self.calibration_range_ is None:
            return ""
        lo, hi = self.calibration_range_
        if raw < EXTRAPOLATION_MARGIN * lo:
            return f"its raw table sum {raw:.4f} ms is below the calibration networks' ({lo:.4f}-{hi:.4f} ms)"
        if raw > hi / EXTRAPOLATION_MARGIN:
            return f"its raw table sum {raw:.4f} ms is above the calibration networks' ({lo:.4f}-{hi:.4f} ms)"
        return ""

    def predict(self, archs: Sequence[Arch] | Arch) -> np.ndarray:
        check_is_fitted(self, "lookup_")
        if isinstance(archs, Arch):
            archs = [archs]
        tab = self._sums(archs)
        return self.finish(self.intercept_ + tab[:, 0], tab[:, 2:])

    def finish(self, ms: np.ndarray, mix: np.ndarray) -> np.ndarray:
        """Networks' predictions from their calibrated sums ``ms`` (intercept included) and their
        summed ``layer_mix`` rows ``mix`` (at least the first column, the block figures): the
        network residual's factor, then ``below_range``.  Every prediction path ends here."""
        if self.residual_ is not None:
            ms = ms * self.residual_factor(mix)
        return self.below_range(ms, self.overhead_ms_ + mix[:, 0])

    def below_range(self, ms: np.ndarray, raw: np.ndarray) -> np.ndarray:
        """Calibrated predictions ``ms`` of networks whose raw table sums are ``raw``, with those
        below the calibration networks' range taken from the raw sum instead.

        Below the smallest calibration network the calibration extrapolates, and its concave
        per-layer terms (log time, the per-layer constant) can double a 15 us network (a 16-px
        digits network: raw sum +11%, calibrated +84% here).  So under ``EXTRAPOLATION_MARGIN``
        times the smallest calibration network's raw sum a prediction is the raw sum times
        ``low_ratio_`` (measured / raw of the ``LOW_NETWORKS`` smallest calibration networks,
        and the refresh's rescale), blended linearly up to that smallest raw sum so that it stays
        continuous.  Such predictions are labelled EXTRAPOLATED (``Prediction.outside``)."""
        if self.calibration_range_ is None:
            return ms
        lo = self.calibration_range_[0]
        w = np.clip((raw - EXTRAPOLATION_MARGIN * lo) / ((1.0 - EXTRAPOLATION_MARGIN) * lo), 0.0, 1.0)
        if w.min() >= 1.0:
            return ms
        return w * ms + (1.0 - w) * raw * self.low_ratio_ * self.rescale_

    def layer_ms(self, keys: Sequence[BlockKey]) -> np.ndarray:
        """Calibrated per-layer contributions (a network adds ``intercept_``, then the residual
        factor of its summed ``layer_mixes``)."""
        check_is_fitted(self, "lookup_")
        missing = [k for k in dict.fromkeys(keys) if k not in self.lookup_ and k not in self._learned_cache]
        if missing and self.block_model_ is not None:  # one vectorised call for all unseen keys
            for k, v in zip(missing, self.block_model_.predict(missing)):
                self._learned_cache[k] = float(v) - self.overhead_ms_
        rows = self._rows(keys)
        return self._rows_[rows, 0]

    def layer_mixes(self, keys: Sequence[BlockKey]) -> np.ndarray:
        """Each layer's ``layer_mix`` row (a network's residual reads their sum)."""
        check_is_fitted(self, "lookup_")
        self.layer_ms(keys)  # learned figures in one vectorised call
        rows = self._rows(keys)
        return self._rows_[rows, 2:]

    def compile(self, space) -> SpacePredictor:
        """A vectorised predictor for ``space``'s parameter encoding (see ``SpacePredictor``)."""
        return SpacePredictor(self, space)

    def breakdown(self, arch: Arch) -> list[dict[str, Any]]:
        """Per-layer rows: key, ms, and whether it was measured or learned."""
        check_is_fitted(self, "lookup_")
        rows = []
        for k in arch.keys():
            ms, measured = self._block_ms(k)
            rows.append({"layer": str(k), "ms": ms, "source": "table" if measured else "learned"})
        return rows

    def describe(self) -> str:
        check_is_fitted(self, "lookup_")
        cal = f"calibrated on {self.n_calibration_} measured networks" if self.calibration_ is not None else "uncalibrated"
        if self.residual_ is not None:
            cal += " (linear per layer, then a network residual)"
        rf = self.table_.metadata.get("refresh") if self.rescale_ != 1.0 else None
        if rf:
            cal += (f"; rescaled x{self.rescale_:.3f}: {rf['networks']} of them re-measured {rf['measured_at']} "
                    f"(nas.profile refresh)")
        if self.recalibrated_:
            cal += f"; as re-measured {self.recalibrated_} (nas.profile recalibrate)"
        return f"latency predictor on table: {self.table_.describe()}; {cal}"


class RooflineModel(LatencyModel):
    """The roofline ESTIMATE for targets without a measured table."""

    source = "estimated"

    def __init__(self, target: dict[str, Any], *, reason: str = "") -> None:
        self.target = target
        self.roofline = Roofline.from_target(target)
        self.device = self.roofline.device
        self.reason = reason

    def explain(self, arch: Arch) -> Prediction:
        return Prediction(self.roofline.predict_arch(arch), "estimated", self.device, 0, 0, len(arch.keys()))

    @property
    def warning(self) -> str:
        name = self.target.get("name", "<target>")
        why = f" ({self.reason})" if self.reason else ""
        return (
            f"latency for target {name!r} is an ESTIMATE (roofline from {self.device}'s published specs){why}. "
            f"Build the measured table on the device: `python -m nas.profile conf={name}` "
            f"(or, without torch there, `python -m nas.profile conf={name} bundle=<dir>`)."
        )

    def describe(self) -> str:
        return self.roofline.describe()


def _boundary(key: BlockKey) -> float:
    """Millions of activation elements entering and leaving a layer (batch 1)."""
    ci, h, w = key.in_shape
    co, ho, wo = key.out_shape
    return (ci * h * w + co * ho * wo) / 1e6


N_FEATURES = 7
EXTRAPOLATION_MARGIN = 0.8  # a raw table sum below 0.8x the smallest calibration network's (or above
# 1/0.8 x the largest) makes the prediction an extrapolation, and its label says so: 16-px digits
# networks of 16 us (all their layers learned) were over-predicted by 50% there
LOW_NETWORKS = 10  # the smallest calibration networks whose measured / raw ratio predicts below the range
LOG_FLOOR_MS = 1e-3  # the log-time feature's floor (1 us: below it a lone block is call-overhead noise)


def layer_features(key: BlockKey, ms: float) -> np.ndarray:
    """Additive per-layer calibration features (a network's are their sum).

    ``[ms, 1, boundary, weight MB, ms if squeeze-excite else 0, padding, log ms]``: the block's
    table figure, the layer count, the activations entering and leaving it (M elements: a lone block
    converts them between layouts, a block inside a network does not), its weight megabytes (a
    network streams weights that a lone block keeps in cache), its time again when it gates
    with SE, and the padding its depthwise convolution reads and writes when its channels are
    not a multiple of the SIMD block (``nas.latency.ops.padding_elems``, ``SIMD_CHANNELS`` =
    16), and the log of its time (floored at ``LOG_FLOOR_MS``): what a layer costs inside a
    network is concave in what it costs alone (its fixed per-operator share does not shrink
    with it), which a constant per layer cannot express.  Without the log term, 60 networks
    pruned below the calibration set's range (21-54 us Fashion-MNIST networks) were
    under-predicted by 14% (median); with it, by 4%.  No feature is specific to a block kind:
    per-kind scales fit the calibration set better but do not carry over to a family the
    calibration never saw (checked by leave-one-space-out).
    """
    f = np.empty(N_FEATURES)
    f[0] = ms
    f[1] = 1.0
    f[2] = _boundary(key)
    f[3] = block_cost(key).weight_bytes / 1e6
    f[4] = ms if getattr(key.block, "se", None) is not None else 0.0
    f[5] = padding_elems(key)
    f[6] = math.log(max(ms, LOG_FLOOR_MS))
    return f


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


class _CompiledTrees:
    """A fitted ``HistGradientBoostingRegressor``, evaluated in numpy for a few rows at a time.

    scikit-learn's ``predict`` costs ~0.5 ms a call whatever the rows, which one Arch cannot
    afford.  Packed as complete binary trees, every inner node's test of every tree is one
    comparison; the tests' bits of a tree index its leaf in a lookup table (~5 us a row).  Batches of ``BATCH`` rows or more go to scikit-learn.  The packing reads the
    estimator's fitted trees (``_predictors``, a private attribute): it is checked against
    ``predict`` on random rows when built, and where it is missing or disagrees, every call
    goes to scikit-learn.
    """

    BATCH = 64

    def __init__(self, gbm: HistGradientBoostingRegressor, check: np.ndarray | None = None) -> None:
        self.gbm = gbm
        self.depth = int(gbm.max_depth)
        try:
            self._pack()
            rng = np.random.default_rng(0)
            X = check if check is not None else rng.random((32, gbm.n_features_in_))
            self.packed = bool(np.allclose(self._walk(X), gbm.predict(X), rtol=1e-9, atol=1e-12))
        except (AttributeError, IndexError, KeyError, TypeError, ValueError):
            self.packed = False
        if not self.packed:
            log.debug("network residual: scikit-learn's predict for every call")

    def _pack(self) -> None:
        d = self.depth
        inner, leaves = 2**d - 1, 2**d
        trees = [p[0].nodes for p in self.gbm._predictors]
        T = len(trees)
        feat = np.zeros((T, inner), np.intp)
        thr = np.full((T, inner), np.inf)
        val = np.zeros((T, leaves))
        for t, nodes in enumerate(trees):
            stack = [(0, 0, 0)]  # (node in sklearn's tree, position in the complete tree, depth)
            while stack:
                i, pos, depth = stack.pop()
                n = nodes[i]
                if depth == d:
                    if not n["is_leaf"]:
                        raise ValueError("tree deeper than max_depth")
                    val[t, pos - inner] = n["value"]
                elif n["is_leaf"]:  # a shallow leaf: both children are itself (threshold inf: left)
                    stack += [(i, 2 * pos + 1, depth + 1), (i, 2 * pos + 2, depth + 1)]
                else:
                    feat[t, pos], thr[t, pos] = n["feature_idx"], n["num_threshold"]
                    stack += [(int(n["left"]), 2 * pos + 1, depth + 1), (int(n["right"]), 2 * pos + 2, depth + 1)]
        # every inner node's test at once: the tests' bits (node j -> bit j) index the leaf
        self.leaf_of = np.empty(2**inner, np.intp)
        for code in range(2**inner):
            pos = 0
            for _ in range(d):
                pos = 2 * pos + 1 + ((code >> pos) & 1)
            self.leaf_of[code] = pos - inner
        self.feat, self.thr, self.pow2 = feat, thr, 1 << np.arange(inner)
        self.val = val.ravel()
        self.leaf_offsets = np.arange(T) * leaves
        self.base = float(np.ravel(self.gbm._baseline_prediction)[0])

    def _walk(self, X: np.ndarray) -> np.ndarray:
        codes = (X[:, self.feat] > self.thr) @ self.pow2  # (rows, trees)
        return self.val[self.leaf_offsets + self.leaf_of[codes]].sum(axis=1) + self.base

    def predict(self, X: np.ndarray) -> np.ndarray:
        """``X``: finite features (``network_mix`` rows; no missing values to route)."""
        if self.packed and len(X) < self.BATCH:
            return self._walk(X)
        return self.gbm.predict(X)


class SpacePredictor:
    """Predict straight from parameter-index arrays of one search space, vectorised.

    ``predict_indices(P)``: ``P`` is an integer array (n_archs x n_params), column ``j`` the index
    of the chosen value in ``space.param_choices()``'s ``j``-th list (``space.sample_indices``
    draws them).  Equal to ``LatencyPredictor.predict`` on the decoded Archs, at the space's
    own resolution.  Each layer slot (stem, stage i block j, head) is a lookup table over the
    choices it depends on, precomputed once; a prediction is a sum of gathers.
    """

    def __init__(self, predictor: LatencyPredictor, space) -> None:
        from nas.arch import ConvBlock, Head
        from nas.space import STAGE_KINDS

        self.space = space
        names = list(space.param_choices())
        self.col = {n: i for i, n in enumerate(names)}
        self.n_params = len(names)
        self.intercept = predictor.intercept_
        r = space.resolution
        hs = space.stage_resolutions(r)
        # stem: by stem width
        stem_keys = [BlockKey(ConvBlock(w, space.stem_kernel, space.stem_stride, space.stem_act), space.in_chans, r, r)
                     for w in space.stem_widths]
        self.stem = predictor.layer_ms(stem_keys)
        self.predictor = predictor
        self.residual = predictor.residual_ is not None
        # per layer: its layer_mix (the residual's input), or just its first column, the block
        # figure, whose sum is the raw table sum that predictions below the calibration range use
        mixes = predictor.layer_mixes if self.residual else (lambda keys: predictor.layer_mixes(keys)[:, :1])
        self.stem_mix = mixes(stem_keys)
        self.slots: list[tuple[int, int, int, int | None, list[int], np.ndarray, np.ndarray]] = []
        prev_widths, prev_col = space.stem_widths, self.col["stem_width"]
        for i, (st, h) in enumerate(zip(space.stages, hs)):
            h2 = (h - 1) // 2 + 1 if st.stride == 2 else h
            opts = STAGE_KINDS[st.kind]
            sizes = [len(st.options[o]) for o in opts]
            combos = st.combos()
            for j in range(st.max_depth):
                in_opts = prev_widths if j == 0 else None
                keys = []
                for w in st.width:
                    for c in (in_opts if j == 0 else [w]):
                        for o in combos:
                            hh = h if j == 0 else h2
                            keys.append(BlockKey(space._make_block(st, c, w, st.stride if j == 0 else 1, o), c, hh, hh))
                shape = (len(st.width), len(in_opts) if j == 0 else 1, len(combos))
                vals = predictor.layer_ms(keys).reshape(shape)
                opt_cols = [self.col[f"s{i}_b{j}_{o}"] for o in opts]
                self.slots.append((i, j, self.col[f"s{i}_width"], prev_col if j == 0 else None,
                                   opt_cols, vals, mixes(keys).reshape(*shape, -1)))
            self._sizes = sizes
            prev_widths, prev_col = st.width, self.col[f"s{i}_width"]
        hf = hs[-1] if space.stages[-1].stride == 1 else (hs[-1] - 1) // 2 + 1
        head_keys = [BlockKey(Head(space.num_classes, hid, space.head_style, space.head_act, space.head_bias), c, hf, hf)
                     for c in prev_widths for hid in space.head_hidden]
        self.head = predictor.layer_ms(head_keys).reshape(len(prev_widths), len(space.head_hidden))
        self.head_mix = mixes(head_keys).reshape(len(prev_widths), len(space.head_hidden), -1)
        self.head_cols = (prev_col, self.col["head_hidden"])
        self.depth_cols = [self.col[f"s{i}_depth"] for i in range(len(space.stages))]
        self.depths = [np.array(st.depth) for st in space.stages]
        self.opt_sizes = {i: [len(st.options[o]) for o in STAGE_KINDS[st.kind]] for i, st in enumerate(space.stages)}

    CHUNK = 65_536  # rows at a time (the per-layer mixes summed: rows x N_MIX floats)

    def predict_indices(self, P: np.ndarray) -> np.ndarray:
        P = np.asarray(P)
        if P.ndim != 2 or P.shape[1] != self.n_params:
            raise ValueError(f"expected an index array of shape (n, {self.n_params}), got {P.shape}")
        out = np.empty(len(P))
        for s in range(0, len(P), self.CHUNK):
            out[s:s + self.CHUNK] = self.predictor.finish(*self._predict(P[s:s + self.CHUNK]))
        return out

    def _predict(self, P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        stem, head = P[:, self.col["stem_width"]], (P[:, self.head_cols[0]], P[:, self.head_cols[1]])
        out = self.stem[stem] + self.intercept
        mix = self.stem_mix[stem] + self.head_mix[head]
        depth = [d[P[:, c]] for d, c in zip(self.depths, self.depth_cols)]
        for i, j, wcol, incol, opt_cols, vals, mixes in self.slots:
            combo = np.zeros(len(P), dtype=np.int64)
            for c, size in zip(opt_cols, self.opt_sizes[i]):
                combo = combo * size + P[:, c]
            at = (P[:, wcol], P[:, incol] if incol is not None else 0, combo)
            on = j < depth[i]
            out += np.where(on, vals[at], 0.0)
            mix += np.where(on[:, None], mixes[at], 0.0)
        out += self.head[head]
        return out, mix


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


def load_latency_model(target: dict[str, Any], *, allow_mismatch: bool = False,
                       table_path: str | Path | None = None, **predictor_kw: Any) -> LatencyModel:
    """A fitted predictor on the target's measured table, else a labelled roofline estimate."""
    name = table_path or target.get("table")
    if not name:
        return RooflineModel(target, reason="the target names no table")
    path = resolve_table_path(name)
    if not path.is_file():
        return RooflineModel(target, reason=f"no measured table at {path}")
    table = LatencyTable.load(path)
    try:
        diffs = table.check_target(target, allow_mismatch=allow_mismatch)
    except TableError:
        raise
    return LatencyPredictor(**predictor_kw).fit(table, mismatched=bool(diffs))
