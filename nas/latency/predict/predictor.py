"""Latency predictor = measured table + learned per-block model + whole-network calibration.

scikit-learn style: ``LatencyPredictor(...).fit(table)`` then ``predict(archs)``; ``SpacePredictor`` is
the fitted predictor compiled for one space's parameter encoding (many architectures at once), and
``CompiledTrees`` its gradient-boosting model evaluated in numpy for a few rows at a time.

1. **Table.**  A network is the sum of its layers' table entries, each less the runtime's
   per-call overhead (measured by the profiler on an empty graph), plus one overhead.
2. **Learned model** for keys the table lacks: a scikit-learn pipeline fitted on the table's
   entries (``BlockFeaturizer`` -> ``ResidualOverOps``): a non-negative linear cost per kind
   of kernel (``nas.latency.predict.ops``: MACs, elements and launches of dense / pointwise /
   depthwise convolutions, activations, pools, adds, attention), then gradient boosting on
   ``log(measured / linear)``.  The linear stage is physical and additive, so far from the
   data it extrapolates like the device's kernels do.  Refit whenever a table is loaded;
   nothing is pickled.
3. **Calibration** on whole-network measurements stored in the table (``networks``, measured
   by the profiler on architectures the validation never uses):
   a linear model of additive per-layer features (``layer_features``: block time, layer count,
   activations crossing layer boundaries, weight bytes, time in SE blocks, depthwise channel
   padding, log block time, MACs), fitted by least squares on *relative* error (weights 1/ms^2),
   every layer's contribution kept >= 0 (``fit_calibration``).  Why these:
   a block measured on its own converts its input and output between layouts (onnxruntime's
   NCHWc) and keeps its weights in cache; inside a network it does neither.  After
   ``python -m nas.profile recalibrate=true`` (every calibration network re-measured later, a
   ``recalibration`` record in the table's metadata) steps 3 and 4 are fitted on those figures.
4. **Network residual** (with >= ``MIN_RESIDUAL_NETWORKS`` calibration networks): gradient
   boosting (scikit-learn) on ``log(measured / calibrated)`` of the calibration networks, from
   the network's mix (``network_mix``: the share of its table time in each block kind, in SE
   blocks, in 5x5+ kernels and under each activation; its layer count, log time, log MACs and
   weight megabytes).  It carries what is not additive over layers (how kinds of kernel
   interleave); shallow trees saturate outside the data, so the factor stays bounded.

Throughput: ``predict`` takes Arch objects one by one; ``compile(space)`` returns a
``SpacePredictor`` that predicts straight from parameter-index arrays, vectorised over
hundreds of thousands of architectures (``python -m benchmarks predictor`` times both).

``load_latency_model(target)`` returns a fitted predictor when the target's table exists and
a ``RooflineModel`` (labelled ``estimated``, with a warning naming the command to measure the
table) when it does not.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import threadpool_limits

from nas.arch import Arch, BlockKey, ConvBlock, Head
from nas.latency.predict.block_model import KINDS, N_LINEAR, BlockFeaturizer, make_block_model  # noqa: F401
from nas.latency.predict.calibration import (  # noqa: F401
    EXTRAPOLATION_MARGIN,
    LOG_FLOOR_MS,
    LOW_NETWORKS,
    MIN_RESIDUAL_NETWORKS,
    N_FEATURES,
    N_MIX,
    fit_calibration,
    layer_features,
    layer_mix,
    network_mix,
    recalibrated_networks,
    recorded,
    table_networks,
)
from nas.latency.tables import LatencyModel, LatencyTable, Prediction, how_predicted
from nas.space import STAGE_KINDS

__all__ = ["CompiledTrees", "LatencyPredictor", "SpacePredictor"]

log = logging.getLogger(__name__)

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
        with threadpool_limits(limits=1, user_api="openmp"):
            return self._fit(table, networks, mismatched=mismatched)

    def _fit(self, table: LatencyTable, networks: Sequence[tuple[Arch, float]] | None,
             *, mismatched: bool) -> LatencyPredictor:
        if len(table) == 0:
            raise ValueError("cannot fit a latency predictor on an empty table")
        self.table_ = table
        self.device = str(table.metadata.get("device", {}).get("name", "?"))
        self.timing_ = table.timing_label
        self.source = "rehearsal" if table.rehearsal_of else "measured"  # a bundle's rehearsal: not the device's
        self.rehearsal_ = table.rehearsal_label
        self.overhead_ms_ = float(table.metadata.get("call_overhead_ms") or 0.0)
        self.mismatched_ = mismatched
        self.elsewhere_: str | None = None  # load_latency_model: the table is another processor's (see warning)
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
        self.calibration_ms_ = dict(nets)  # the figures the calibration is fitted on (a refresh compares with them)
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
            keys = set(table.entries) | {k for a, _ in nets for k in a.keys()}
            layers = np.array([layer_features(k, self._block_ms(k)[0]) for k in keys])
            self.coef_, self.intercept_ = fit_calibration(X, y, layers)
            self.calibration_ = "linear, per-layer contributions >= 0"
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
                self.residual_ = CompiledTrees(gbm.fit(Z, np.log(y / lin)), check=Z[:64])
        elif self.calibrate and nets:
            log.warning("only %d calibration networks in the table; calibration needs >= %d, skipped",
                        len(nets), 2 * N_FEATURES)
        self.rescale_ = float(rf["now_over_table"]) if rf else 1.0
        self.rescaled_by_ = "its refresh" if rf else ""
        self.coef_ = self.coef_ * self.rescale_
        self.intercept_ = self.intercept_ * self.rescale_
        self._reset_rows()  # the residual's fit cached contributions before the rescale
        return self

    def calibration_figures(self) -> dict[Arch, float]:
        """Each calibration network's figure the calibration was fitted on (the table's, or its
        recalibration record's): what a refresh on the fly compares a network's latency now with."""
        check_is_fitted(self, "lookup_")
        return dict(self.calibration_ms_)

    def rescale_now(self, ratio: float, how: str) -> LatencyPredictor:
        """Scale every prediction by ``ratio`` (calibration networks now over ``calibration_figures``),
        in place of a stored refresh's ratio; ``how`` is what the predictions' labels say about it
        (``nas.latency.profile.refresh.refresh_model`` calls this).

        Raises:
            ValueError: ``ratio`` is not a positive finite number.
        """
        check_is_fitted(self, "lookup_")
        if not (np.isfinite(ratio) and ratio > 0):
            raise ValueError(f"rescale_now: the ratio must be a positive number, got {ratio!r}")
        f = ratio / self.rescale_
        self.coef_, self.intercept_ = self.coef_ * f, self.intercept_ * f
        self.rescale_, self.rescaled_by_ = float(ratio), how
        self._reset_rows()
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
        return Prediction(ms=ms, source=self.source, device=self.device, n_measured=len(keys) - n_learn,
                          n_learned=n_learn, n_estimated=0, calibrated=self.calibration_ is not None,
                          mismatched=self.mismatched_, rescale=self.rescale_, outside=self._outside(raw),
                          recalibrated=self.recalibrated_, timing=self.timing_, rehearsal=self.rehearsal_,
                          rescaled_by=self.rescaled_by_ if self.rescale_ != 1.0 else "")

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

    @property
    def how(self) -> str:
        """How the figures are obtained (``how_predicted``): a rehearsal table says so."""
        return how_predicted(self.source, self.device, getattr(self, "rehearsal_", ""))

    def annotate(self, *, warning: str | None = None, note: str | None = None) -> LatencyPredictor:
        """Records what is said about the fitted table where it is used: ``warning`` when it was measured on
        another processor than this machine's, ``note`` when its runtime version is not the one installed
        here (``nas.latency.predict.load`` sets both); returns ``self``."""
        self.elsewhere_, self.runtime_note_ = warning, note
        return self

    @property
    def warning(self) -> str | None:
        """Set when the table was measured on another processor than this machine's (``elsewhere_warning``)."""
        return getattr(self, "elsewhere_", None)

    @property
    def note(self) -> str | None:
        """Set when the table's runtime version is not the one installed here (``nas.latency.predict.versions``)."""
        return getattr(self, "runtime_note_", None)

    def describe(self) -> str:
        check_is_fitted(self, "lookup_")
        cal = f"calibrated on {self.n_calibration_} measured networks" if self.calibration_ is not None else "uncalibrated"
        if self.residual_ is not None:
            cal += " (linear per layer, then a network residual)"
        rf = self.table_.metadata.get("refresh") if self.rescale_ != 1.0 else None
        if self.rescaled_by_ and self.rescaled_by_ != "its refresh":
            cal += f"; rescaled x{self.rescale_:.3f} by {self.rescaled_by_}"
        elif rf:
            cal += (f"; rescaled x{self.rescale_:.3f}: {rf['networks']} of them re-measured {rf['measured_at']} "
                    f"(nas.profile refresh)")
        if self.recalibrated_:
            cal += f"; as re-measured {self.recalibrated_} (nas.profile recalibrate)"
        return f"latency predictor on table: {self.table_.describe()}; {cal}"


# ------------------------------------------------------------------------------------------------
# the predictor compiled for one space's parameter encoding, and its trees evaluated in numpy


class CompiledTrees:
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
