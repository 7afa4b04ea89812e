"""``SpacePredictor``: the latency predictor compiled for one space's parameter encoding, vectorised
over many architectures, and ``CompiledTrees``, a fitted gradient-boosting model evaluated in
numpy for a few rows at a time; see ``nas.latency.predictor``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor

from nas.arch import BlockKey, ConvBlock, Head
from nas.space import STAGE_KINDS

if TYPE_CHECKING:  # the predictor compiles itself into a SpacePredictor (predictor -> space_predictor)
    from nas.latency.predictor import LatencyPredictor

log = logging.getLogger(__name__)


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
