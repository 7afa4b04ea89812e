"""Transfer: a predictor for a device measured only briefly, helped by tables of other devices.

A few minutes of ``nas.profile budget_min=`` on a new device measure its most used blocks and
a few calibration networks.  Its own predictor then fills the other blocks with a block model
fitted on those few entries, and that model extrapolates poorly.  Tables measured on other
devices with the same runtime and precision know how every block costs *relative to the
others*; what differs between CPU generations is how each kind of block scales (AVX-512 and
AMX speed dense convolutions far more than depthwise ones), so one network-level factor is not
enough.  ``TransferPredictor`` learns, per block, the new device's latency from the source
devices' latencies of the same block:

1. each source table gets its own block model (``nas.latency.block_model``) that imputes its
   figure of blocks it never measured;
2. a regression on log latency, fitted on the blocks the new device measured, maps
   ``[log source latencies, block descriptors]`` to the new device's log latency
   (``method``: ``scale`` a median log ratio per kind of block; ``ridge`` ridge regression of
   the log ratio on the source latencies and the block model's featurizer columns, its
   penalty chosen by leave-one-out; ``gbm`` the per-kind scale, then shallow gradient
   boosting on what it leaves; ``stack`` ridge regression of the log ratio on the new device's
   own block model (out-of-fold predictions on its measured blocks, 5 folds) beside the source
   latencies and the kind of block: it learns how far to trust each);
3. the new device's measured blocks, plus every source block transferred this way, make a
   completed table, on which ``LatencyPredictor`` fits its calibration on the new device's own
   networks.  Blocks in no table are transferred too (from the sources' imputed figures).

It is a ``LatencyPredictor`` (``predict``, ``explain``, ``compile``, ``describe``), so anything
that takes a fitted predictor takes it; ``explain`` counts transferred layers as learned.
``python -m benchmarks onboard`` measures what it reaches, offline, from the shipped tables.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.linear_model import RidgeCV
from sklearn.model_selection import KFold
from sklearn.preprocessing import StandardScaler
from sklearn.utils.validation import check_is_fitted

from nas.arch import Arch, BlockKey
from nas.latency.base import Prediction
from nas.latency.block_model import KINDS, BlockFeaturizer, make_block_model
from nas.latency.predictor import LatencyPredictor
from nas.latency.table import Entry, LatencyTable, _field, resolve_table_path
from nas.resources import tables_dir, user_tables_dir

__all__ = ["AUTO", "COMPATIBLE_FIELDS", "METHODS", "TransferPredictor", "check_compatible", "find_sources",
           "resolve_sources"]

log = logging.getLogger(__name__)

# metadata fields a source table must share with the new device's table: block latencies of
# another runtime, provider or precision follow other kernels, so their ratios do not transfer
COMPATIBLE_FIELDS = ("runtime.name", "runtime.provider", "precision", "batch", "threads")
METHODS = ("scale", "ridge", "gbm", "stack")
MIN_PER_KIND = 3  # fewer measured blocks of a kind: its scale is the global one
_FLOOR_MS = 1e-4
AUTO = "auto"  # in transfer_from: every compatible table found (find_sources)


def check_compatible(table: LatencyTable, source: LatencyTable) -> None:
    """Raise ``ValueError`` naming the first field of ``COMPATIBLE_FIELDS`` where ``source``'s
    metadata differs from ``table``'s."""
    for f in COMPATIBLE_FIELDS:
        mine, theirs = _field(table.metadata, f), _field(source.metadata, f)
        if mine != theirs:
            raise ValueError(f"cannot transfer from {_name(source)}: its {f} is {theirs!r}, the new device's table "
                             f"has {mine!r}; transfer needs source tables of the same runtime and precision")


def _compatible(table: LatencyTable, source: LatencyTable) -> bool:
    return all(_field(table.metadata, f) == _field(source.metadata, f) for f in COMPATIBLE_FIELDS)


def _same_file(a: Path | None, b: Path | None) -> bool:
    try:
        return a is not None and b is not None and a.resolve() == b.resolve()
    except OSError:
        return False


def find_sources(table: LatencyTable) -> list[Path]:
    """Every table in the user's and the shipped tables folders that can lend ``table`` its blocks:
    measured (not an estimate), of the same runtime, provider, precision, batch and threads
    (``COMPATIBLE_FIELDS``), on another device (not ``table``'s own file, not a table of the same
    device name and CPU flags).  A file that does not load as a table is passed over."""
    mine = table.metadata.get("device") or {}
    found: dict[str, Path] = {}
    for folder in (user_tables_dir(), tables_dir()):
        for p in sorted(folder.glob("*.json")) if folder.is_dir() else ():
            if p.name in found or _same_file(p, table.path):
                continue
            try:
                src = LatencyTable.load(p)
            except Exception:  # noqa: BLE001 - a foreign or damaged file is simply not a source
                continue
            dev = src.metadata.get("device") or {}
            same_device = (dev.get("name") == mine.get("name") and dev.get("cpu_flags") == mine.get("cpu_flags")
                           and dev.get("cpu_family") == mine.get("cpu_family"))
            if src.metadata.get("source") == "measured" and _compatible(table, src) and not same_device:
                found[p.name] = p
    return list(found.values())


def resolve_sources(table: LatencyTable, names: Sequence[str | Path]) -> list[Path]:
    """``transfer_from`` as source table paths: names and paths as given (a missing one is an error
    naming what exists), ``auto`` as ``find_sources``; duplicates and ``table``'s own file dropped."""
    out: list[Path] = []
    for n in names:
        if str(n) == AUTO:
            found = find_sources(table)
            if not found:
                raise ValueError(f"transfer_from=[{AUTO}]: no table of another device with the same "
                                 f"{', '.join(COMPATIBLE_FIELDS)} as {_name(table)} was found in the tables folders; "
                                 "name the source tables instead, or leave transfer_from empty")
            out.extend(found)
            continue
        p = resolve_table_path(n)
        if not p.is_file():
            raise ValueError(f"transfer_from: no table {str(n)!r} (looked for {p}); give a table name in the tables "
                             f"folders, a path, or {AUTO}")
        out.append(p)
    uniq: list[Path] = []
    for p in out:
        if not _same_file(p, table.path) and not any(_same_file(p, q) for q in uniq):
            uniq.append(p)
    if not uniq:
        raise ValueError(f"transfer_from names only {_name(table)} itself: name tables of other devices")
    return uniq


def _name(t: LatencyTable) -> str:
    return t.path.name if t.path else str(_field(t.metadata, "device.name") or "a source table")


def _signed_log(X: np.ndarray) -> np.ndarray:
    return np.sign(X) * np.log1p(np.abs(X))


class TransferPredictor(LatencyPredictor):
    """``LatencyPredictor`` for a partial table, its missing blocks transferred from ``sources``.

    Parameters (stored as given; ``fit`` sets the attributes ending in ``_``):
        sources: source tables (``LatencyTable`` objects, or names / paths that
            ``resolve_table_path`` finds) of other devices, same runtime and precision.
        method: the per-block transfer model, one of ``METHODS`` (see the module docs).  ``stack``
            (default) was the most even in ``python -m benchmarks onboard``: it keeps the new device's
            own block model and weighs the sources by how well they fit, so it is rarely worse than
            the partial table alone.
        calibrate, random_state, refresh, residual: as for ``LatencyPredictor``.
    """

    # no block model on the completed table: blocks outside it are transferred (``_Transferred``)
    learned = False

    def __init__(self, *, sources: Sequence[LatencyTable | str | Path] = (), method: str = "stack",
                 calibrate: bool = True, random_state: int = 0, refresh: bool = True,
                 residual: bool = True) -> None:
        self.sources, self.method = sources, method
        self.calibrate, self.random_state, self.refresh, self.residual = calibrate, random_state, refresh, residual

    # -- fitting --------------------------------------------------------------------------
    def _fit(self, table: LatencyTable, networks, *, mismatched: bool) -> TransferPredictor:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if len(table) == 0:
            raise ValueError("cannot transfer to an empty table: measure a few blocks on the new device first "
                             "(python -m nas.profile budget_min=2)")
        given = [self.sources] if isinstance(self.sources, (str, Path, LatencyTable)) else list(self.sources)
        srcs = [s if isinstance(s, LatencyTable) else LatencyTable.load(resolve_table_path(s)) for s in given]
        if not srcs:
            raise ValueError("sources is empty: give at least one table of another device with the same runtime "
                             "and precision (e.g. sources=['epyc_zen5.json'])")
        for s in srcs:
            check_compatible(table, s)
        self.partial_ = table
        self.source_names_ = [_name(s) for s in srcs]
        self.source_lookup_ = [{k: e.median_ms for k, e in s.entries.items()} for s in srcs]
        self.source_models_ = [make_block_model(self.random_state).fit(list(s.entries),
                                                                       [e.median_ms for e in s.entries.values()])
                               for s in srcs]
        keys = list(table.entries)
        self._fit_transfer(keys, np.log(np.maximum([table.entries[k].median_ms for k in keys], _FLOOR_MS)))
        wanted = dict.fromkeys(k for s in srcs for k in s.entries)
        wanted.update(dict.fromkeys(k for a in (networks and [a for a, _ in networks] or table.networks)
                                    for k in a.keys()))
        new = [k for k in wanted if k not in table.entries]
        completed = LatencyTable(dict(table.metadata), dict(table.entries), table.path, dict(table.networks))
        for k, ms in zip(new, self.transfer(new)):
            completed.entries[k] = Entry(float(ms), float(ms), float(ms), 0)
        self.n_transferred_ = len(new)
        super()._fit(completed, networks, mismatched=mismatched)
        self.block_model_ = _Transferred(self)  # blocks in no table: transferred, not the completed table's model
        return self

    def _source_logs(self, keys: Sequence[BlockKey]) -> tuple[np.ndarray, np.ndarray]:
        """Per key and source: log latency (measured, else the source's block model) and 1 if measured."""
        S = np.empty((len(keys), len(self.source_models_)))
        M = np.zeros_like(S)
        for j, (look, model) in enumerate(zip(self.source_lookup_, self.source_models_)):
            miss = [i for i, k in enumerate(keys) if k not in look]
            for i, k in enumerate(keys):
                if k in look:
                    S[i, j], M[i, j] = look[k], 1.0
            if miss:
                S[miss, j] = model.predict([keys[i] for i in miss])
        return np.log(np.maximum(S, _FLOOR_MS)), M

    def _design(self, keys: Sequence[BlockKey], S: np.ndarray, M: np.ndarray) -> np.ndarray:
        """Ridge / boosting features: source log latencies relative to their mean, which were
        measured, the kind one-hots times the mean (a per-kind slope) and the featurizer columns."""
        F = BlockFeaturizer().transform(keys)
        kind = F[:, :len(KINDS)]
        base = S.mean(axis=1, keepdims=True)
        return np.column_stack([S - base, M, kind * base, base, _signed_log(F)])

    @staticmethod
    def _stack_design(keys: Sequence[BlockKey], S: np.ndarray, M: np.ndarray, own: np.ndarray) -> np.ndarray:
        kind = np.array([[float(k.block.kind == kd) for kd in KINDS] for k in keys])
        base = S.mean(axis=1, keepdims=True)
        return np.column_stack([own[:, None] - base, S - base, M, kind])

    def _kind_offsets(self, keys: Sequence[BlockKey], r: np.ndarray) -> None:
        kinds = np.array([k.block.kind for k in keys])
        self.global_offset_ = float(np.median(r))
        self.kind_offset_ = {}
        for kd in KINDS:
            sel = r[kinds == kd]
            if len(sel) >= MIN_PER_KIND:  # shrunk towards the global offset by the kind's count
                w = len(sel) / (len(sel) + MIN_PER_KIND)
                self.kind_offset_[kd] = w * float(np.median(sel)) + (1 - w) * self.global_offset_

    def _offsets(self, keys: Sequence[BlockKey]) -> np.ndarray:
        return np.array([self.kind_offset_.get(k.block.kind, self.global_offset_) for k in keys])

    def _fit_transfer(self, keys: list[BlockKey], y: np.ndarray) -> None:
        S, M = self._source_logs(keys)
        r = y - S.mean(axis=1)  # log(new device / sources): what the model learns
        self._kind_offsets(keys, r)
        self.ridge_ = self.gbm_ = self.own_ = None
        if self.method == "stack" and len(keys) >= 10:
            own = np.empty(len(keys))
            for train, test in KFold(5, shuffle=True, random_state=self.random_state).split(keys):
                m = make_block_model(self.random_state).fit([keys[i] for i in train], np.exp(y[train]))
                own[test] = m.predict([keys[i] for i in test])
            X = self._stack_design(keys, S, M, np.log(np.maximum(own, _FLOOR_MS)))
            self.scaler_ = StandardScaler().fit(X)
            self.ridge_ = RidgeCV(alphas=np.logspace(-2, 4, 25)).fit(self.scaler_.transform(X), r)
            self.own_ = make_block_model(self.random_state).fit(keys, np.exp(y))
        elif self.method in ("ridge", "stack") and len(keys) >= 5:
            X = self._design(keys, S, M)
            self.scaler_ = StandardScaler().fit(X)
            self.ridge_ = RidgeCV(alphas=np.logspace(-2, 4, 25)).fit(self.scaler_.transform(X), r)
        elif self.method == "gbm" and len(keys) >= 20:
            X = self._design(keys, S, M)
            leaf = max(5, len(keys) // 20)
            self.gbm_ = HistGradientBoostingRegressor(max_iter=150, learning_rate=0.05, max_depth=3,
                                                      min_samples_leaf=leaf, random_state=self.random_state)
            self.gbm_.fit(X, r - self._offsets(keys))

    def transfer(self, keys: Sequence[BlockKey]) -> np.ndarray:
        """The new device's latency (ms, per-call overhead included, as a table entry) of each key,
        transferred from the sources; measured keys are not looked up here."""
        check_is_fitted(self, "kind_offset_")
        keys = list(keys)
        if not keys:
            return np.zeros(0)
        S, M = self._source_logs(keys)
        if self.own_ is not None:
            own = np.log(np.maximum(self.own_.predict(keys), _FLOOR_MS))
            r = self.ridge_.predict(self.scaler_.transform(self._stack_design(keys, S, M, own)))
        elif self.ridge_ is not None:
            r = self.ridge_.predict(self.scaler_.transform(self._design(keys, S, M)))
        else:
            r = self._offsets(keys)
            if self.gbm_ is not None:
                r = r + self.gbm_.predict(self._design(keys, S, M))
        return np.exp(S.mean(axis=1) + r)

    def without_transfer(self, **changes) -> LatencyPredictor:
        """An unfitted ``LatencyPredictor`` with this predictor's settings (``changes`` override them):
        fitted on the new device's table alone, what the sources are compared against."""
        kept = {k: getattr(self, k) for k in ("calibrate", "random_state", "refresh", "residual")}
        return LatencyPredictor(**{**kept, **changes})

    # -- reporting ------------------------------------------------------------------------
    def explain(self, arch: Arch) -> Prediction:
        """As ``LatencyPredictor.explain``; layers the new device did not measure count as learned."""
        p = super().explain(arch)
        keys = arch.keys()
        n = sum(k in self.partial_.entries for k in keys)
        return replace(p, n_measured=n, n_learned=len(keys) - n)

    def breakdown(self, arch: Arch) -> list[dict]:
        rows = super().breakdown(arch)
        for k, row in zip(arch.keys(), rows):
            if k not in self.partial_.entries:
                row["source"] = "transferred"
        return rows

    def describe(self) -> str:
        check_is_fitted(self, "kind_offset_")
        base = super().describe().replace(f"{len(self.table_)} entries",
                                          f"{len(self.partial_)} entries measured + {self.n_transferred_} transferred")
        return f"{base}; blocks transferred ({self.method}) from {', '.join(self.source_names_)}"


class _Transferred:
    """Stands in for ``LatencyPredictor.block_model_``: blocks in no table, transferred."""

    def __init__(self, owner: TransferPredictor) -> None:
        self.owner = owner

    def predict(self, keys: Sequence[BlockKey]) -> np.ndarray:
        return self.owner.transfer(keys)
