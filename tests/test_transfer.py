"""TransferPredictor on synthetic tables: a partial table of a new device plus a full source table."""

import hashlib

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from nas.latency import LatencyPredictor
from nas.latency.roofline import Roofline
from nas.latency.table import Entry, LatencyTable
from nas.latency.transfer import METHODS, TransferPredictor
from nas.space import load_space

ROOF = Roofline(peak_gflops=40.0, mem_bandwidth_gbs=8.0, overhead_us=4.0)
META = {
    "source": "measured", "target": "cpu", "device": {"name": "Source CPU", "kind": "cpu"},
    "runtime": {"name": "onnxruntime", "version": "x", "provider": "CPUExecutionProvider"},
    "precision": "fp32", "batch": 1, "threads": 1, "measurement": {}, "call_overhead_ms": 0.004,
}
KEYS = load_space("tiny").unique_blocks()
# the new device runs each kind of block at its own speed relative to the source
NEW_OVER_SOURCE = {"conv": 0.5, "ds": 1.6, "ir": 0.9, "fused": 0.7, "attn": 1.3, "head": 1.1}


def quirk(key) -> float:
    """A per-block kernel efficiency that both devices share and no block descriptor predicts
    (a hash of the block): what only a table of another device can carry over."""
    u = int(hashlib.md5(str(key).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return float(np.exp(0.8 * (u - 0.5)))


def source_ms(key) -> float:
    return ROOF.predict_key(key) * quirk(key)


def new_ms(key) -> float:
    return source_ms(key) * NEW_OVER_SOURCE[key.block.kind]


def table(ms, keys, *, networks=0, seed=0, **meta) -> LatencyTable:
    t = LatencyTable(metadata={**META, **meta})
    for k in keys:
        t.add(k, Entry(ms(k), ms(k), ms(k), 50))
    rng = np.random.default_rng(seed)
    for _ in range(networks):
        a = load_space("tiny").random(rng)
        t.networks[a] = Entry(1.05 * sum(ms(k) for k in a.keys()), 0, 0, 50)
    return t


@pytest.fixture(scope="module")
def tables():
    rng = np.random.default_rng(0)
    measured = [k for k in KEYS if rng.random() < 0.3]
    return (table(source_ms, KEYS, networks=20), table(new_ms, measured, networks=20, seed=1, device={"name": "New"}),
            [k for k in KEYS if k not in set(measured)])


def _log_err(pred, keys) -> float:
    return float(np.median(np.abs(np.log(np.asarray(pred) / [new_ms(k) for k in keys]))))


@pytest.mark.parametrize("method", METHODS)
def test_transfer_beats_the_partial_tables_own_block_model(tables, method):
    src, part, missing = tables
    own = LatencyPredictor(calibrate=False).fit(part).block_model_.predict(missing)
    tp = TransferPredictor(sources=[src], method=method, calibrate=False).fit(part)
    moved = tp.transfer(missing)
    assert _log_err(moved, missing) < 0.5 * _log_err(own, missing)
    assert tp.n_transferred_ == len(missing)


def test_predicts_networks_and_counts_transferred_layers_as_learned(tables):
    src, part, _ = tables
    tp = TransferPredictor(sources=[src], method="scale").fit(part)
    own = LatencyPredictor().fit(part)
    archs = [load_space("tiny").random(500 + i) for i in range(30)]
    truth = np.array([1.05 * sum(new_ms(k) for k in a.keys()) for a in archs])
    assert np.median(np.abs(tp.predict(archs) / truth - 1)) < np.median(np.abs(own.predict(archs) / truth - 1))
    e = tp.explain(archs[0])
    assert e.n_measured == sum(k in part.entries for k in archs[0].keys())
    assert e.n_measured + e.n_learned == len(archs[0].keys()) and e.calibrated
    assert {r["source"] for r in tp.breakdown(archs[0])} <= {"table", "transferred"}
    assert "transferred (scale) from" in tp.describe()


def test_blocks_in_no_table_are_transferred(tables):
    src, part, _ = tables
    tp = TransferPredictor(sources=[src], method="ridge", calibrate=False).fit(part)
    other = [k for k in load_space("mbv3").unique_blocks() if k not in src.entries][:20]
    assert len(other) == 20
    assert np.all(np.isfinite(tp.layer_ms(other))) and np.all(tp.layer_ms(other) > 0)


@pytest.mark.parametrize("field,meta", [
    ("precision", {"precision": "int8"}),
    ("runtime.name", {"runtime": {"name": "tensorrt", "version": "x", "provider": "CPUExecutionProvider"}}),
    ("runtime.provider", {"runtime": {"name": "onnxruntime", "version": "x", "provider": "CUDAExecutionProvider"}}),
    ("threads", {"threads": 4}),
])
def test_refuses_another_runtime_or_precision(tables, field, meta):
    _, part, _ = tables
    other = table(source_ms, KEYS[:30], **meta)
    with pytest.raises(ValueError, match=f"its {field} is .*same runtime and precision"):
        TransferPredictor(sources=[other]).fit(part)


def test_bad_parameters_and_not_fitted(tables):
    src, part, _ = tables
    with pytest.raises(ValueError, match="method must be one of"):
        TransferPredictor(sources=[src], method="magic").fit(part)
    with pytest.raises(ValueError, match="sources is empty"):
        TransferPredictor().fit(part)
    with pytest.raises(ValueError, match="empty table"):
        TransferPredictor(sources=[src]).fit(LatencyTable(metadata=dict(META)))
    with pytest.raises(NotFittedError):
        TransferPredictor(sources=[src]).predict(load_space("tiny").random(0))
    assert TransferPredictor(sources=[src], method="gbm").get_params()["method"] == "gbm"
    one = TransferPredictor(sources=src, method="scale", calibrate=False).fit(part)  # one table, not a list
    assert len(one.source_models_) == 1


def test_load_latency_model_transfer_from(tables, tmp_path):
    from nas.latency import load_latency_model

    src, part, _ = tables
    src.save(tmp_path / "source.json")
    part.save(tmp_path / "new.json")
    target = {"name": "new", "runtime": "onnxruntime", "provider": "CPUExecutionProvider", "precision": "fp32",
              "batch": 1, "threads": 1, "latency_budget_ms": 10.0,
              "device": {"name": "New", "kind": "cpu", "peak_gflops": 40.0, "mem_bandwidth_gbs": 8.0}}
    m = load_latency_model(target, table_path=tmp_path / "new.json", transfer_from=[str(tmp_path / "source.json")],
                           method="scale")
    assert isinstance(m, TransferPredictor) and m.source_names_ == ["source.json"]
    assert m.predict(load_space("tiny").random(3))[0] > 0


def test_compiled_space_predictor_agrees(tables):
    """The vectorised search path (``compile``) sees the transferred blocks as ``predict`` does."""
    src, part, _ = tables
    tp = TransferPredictor(sources=[src], method="scale").fit(part)
    space = load_space("tiny")
    P = space.sample_indices(20, 0)
    np.testing.assert_allclose(tp.compile(space).predict_indices(P),
                               tp.predict([space.decode_indices(p) for p in P]), rtol=1e-9)


def _target(**kw):
    return {"name": "new", "runtime": "onnxruntime", "provider": "CPUExecutionProvider", "precision": "fp32",
            "batch": 1, "threads": 1, "latency_budget_ms": 10.0,
            "device": {"name": "New", "kind": "cpu", "peak_gflops": 40.0, "mem_bandwidth_gbs": 8.0}, **kw}


def test_the_targets_transfer_from_and_auto(tables, monkeypatch, tmp_path):
    """``conf.transfer_from`` reaches every command through the Target; ``auto`` finds the
    compatible tables of other devices in the tables folders, not the table itself nor an int8 one."""
    from nas.latency import load_latency_model
    from nas.resources import user_tables_dir
    from nas.target import Target

    src, part, _ = tables
    monkeypatch.setenv("HWNAS_HOME", str(tmp_path))
    folder = user_tables_dir()
    folder.mkdir(parents=True, exist_ok=True)
    src.save(folder / "src_fp32.json")
    table(source_ms, KEYS[:40], precision="int8", device={"name": "Other"}).save(folder / "src_int8.json")
    part.save(folder / "new.json")
    monkeypatch.setattr("nas.latency.transfer.tables_dir", lambda: folder.parent / "none")  # the shipped ones left out
    m = load_latency_model(_target(table="new.json", transfer_from=["src_fp32.json"]), method="scale")
    assert isinstance(m, TransferPredictor) and m.source_names_ == ["src_fp32.json"]
    auto = load_latency_model(_target(table="new.json", transfer_from=["auto"]), method="scale")
    assert auto.source_names_ == ["src_fp32.json"]
    assert not isinstance(load_latency_model(_target(table="new.json")), TransferPredictor)
    with pytest.raises(ValueError, match="no table 'missing.json'"):
        load_latency_model(_target(table="new.json", transfer_from=["missing.json"]))
    with pytest.raises(ValueError, match="names only new.json itself"):
        load_latency_model(_target(table="new.json", transfer_from=["new.json"]))
    with pytest.raises(ValueError, match="its precision is 'int8'"):
        load_latency_model(_target(table="new.json", transfer_from=["src_int8.json"]))
    with pytest.raises(ValueError, match="transfer_from must be a list"):
        Target.coerce(_target(transfer_from="auto"))
    assert Target.coerce(_target(transfer_from=["auto"])).to_dict()["transfer_from"] == ["auto"]


def test_validate_scores_the_table_without_transfer_too(tables):
    """With transfer, nas.validate's report has the device's own table beside it, and the budget
    curve both, each point refitted on the same minutes."""
    from nas.latency.budget_curve import budget_report
    from nas.latency.validate import WITHOUT_TRANSFER, ValidationSet, validate

    src, part, _ = tables
    tp = TransferPredictor(sources=[src], method="scale").fit(part)
    rng = np.random.default_rng(5)
    archs = [load_space("tiny").random(rng) for _ in range(30)]
    vs = ValidationSet(archs, [1.05 * sum(new_ms(k) for k in a.keys()) for a in archs], ["tiny"] * 30)
    report = validate(tp, ROOF, vs)
    assert WITHOUT_TRANSFER in report["methods"]
    assert report["methods"]["predictor"]["mape"] < report["methods"][WITHOUT_TRANSFER]["mape"]
    b = budget_report(tp, vs, space_keys=KEYS, reached=report["methods"]["predictor"])
    assert b["blocks"]["measured"] == len(part.entries) < len(KEYS)
    assert b["curve"] and all("without_transfer" in p for p in b["curve"])
