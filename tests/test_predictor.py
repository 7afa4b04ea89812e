"""Predictor logic on synthetic tables (the real tables are validated by python -m benchmarks predictor)."""

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from nas.latency import LatencyPredictor, RooflineModel, load_latency_model
from nas.latency.predict.roofline import Roofline
from nas.latency.tables.table import Entry, LatencyTable, TableMismatchError
from nas.space import list_spaces, load_space
from nas.timm_arch import from_timm

SYNTH = Roofline(peak_gflops=40.0, mem_bandwidth_gbs=8.0, overhead_us=4.0)
META = {
    "source": "measured", "target": "cpu", "device": {"name": "Synthetic CPU", "kind": "cpu"},
    "runtime": {"name": "onnxruntime", "version": "x", "provider": "CPUExecutionProvider"},
    "precision": "fp32", "batch": 1, "threads": 1, "measurement": {}, "call_overhead_ms": 0.004,
}
TARGET = {"name": "cpu", "runtime": "onnxruntime", "provider": "CPUExecutionProvider", "precision": "fp32",
          "batch": 1, "threads": 1, "latency_budget_ms": 10.0, "device": {"name": "Synthetic CPU", "kind": "cpu", "peak_gflops": 40.0,
                                              "mem_bandwidth_gbs": 8.0, "overhead_us": 4.0}}


def synth_ms(key) -> float:
    # a deterministic "device": roofline plus a kind-dependent factor
    f = {"conv": 1.3, "ds": 1.1, "ir": 1.0, "fused": 1.2, "attn": 1.6, "head": 0.9}[key.block.kind]
    return SYNTH.predict_key(key) * f + 0.004


def synth_table(space_names=("tiny",), frac=1.0, networks=0, seed=0) -> LatencyTable:
    rng = np.random.default_rng(seed)
    t = LatencyTable(metadata=dict(META))
    for n in space_names:
        keys = load_space(n).unique_blocks()
        for k in keys:
            if rng.random() < frac:
                ms = synth_ms(k)
                t.add(k, Entry(ms, ms * 0.98, ms * 1.03, 50))
    for n in space_names:
        sp = load_space(n)
        for _ in range(networks):
            a = sp.random(rng)
            ms = sum(synth_ms(k) - 0.004 for k in a.keys())
            t.networks[a] = Entry(1.1 * ms + 0.01 * len(a.keys()) + 0.05, 0, 0, 50)  # a known calibration
    return t


def test_table_sum_and_provenance():
    t = synth_table(frac=1.0)
    p = LatencyPredictor(calibrate=False).fit(t)
    a = load_space("tiny").random(3)
    expected = sum(synth_ms(k) - 0.004 for k in a.keys()) + 0.004
    assert p.raw_sum(a) == pytest.approx(expected)
    e = p.explain(a)
    assert e.ms == pytest.approx(expected) and e.source == "measured" and not e.calibrated
    assert e.n_measured == len(a.keys()) and e.n_learned == 0
    assert "measured table on Synthetic CPU" in e.label()
    assert [r["source"] for r in p.breakdown(a)] == ["table"] * len(a.keys())


def test_calibration_recovers_a_known_relation():
    t = synth_table(networks=30)
    p = LatencyPredictor().fit(t)
    assert p.coef_[0] == pytest.approx(1.1, rel=1e-5)  # block time
    assert p.coef_[1] == pytest.approx(0.01, abs=1e-6)  # per layer
    np.testing.assert_allclose(p.coef_[2:], 0.0, atol=1e-6)  # no boundary / weight / SE effect here
    assert p.n_calibration_ == 30
    held_out = [load_space("tiny").random(1000 + i) for i in range(10)]
    truth = [1.1 * sum(synth_ms(k) - 0.004 for k in a.keys()) + 0.01 * len(a.keys()) + 0.05 for a in held_out]
    np.testing.assert_allclose(p.predict(held_out), truth, rtol=1e-6)
    assert p.explain(held_out[0]).calibrated


def test_learned_model_fills_missing_keys():
    t = synth_table(frac=0.6, seed=1)
    p = LatencyPredictor(calibrate=False).fit(t)
    keys = load_space("tiny").unique_blocks()
    missing = [k for k in keys if k not in t]
    assert missing
    pred = np.array([p._block_ms(k)[0] + 0.004 for k in missing])
    truth = np.array([synth_ms(k) for k in missing])
    err = np.abs(pred - truth) / truth
    assert np.median(err) < 0.10, np.median(err)  # unseen blocks of the same space: close
    a = next(a for a in (load_space("tiny").random(i) for i in range(100)) if any(k not in t for k in a.keys()))
    e = p.explain(a)
    assert e.n_learned > 0 and e.n_measured + e.n_learned == len(a.keys()) and "learned" in e.label()
    # a timm model: every block is outside the table; still a figure, and it says so
    e = p.explain(from_timm("mobilenetv2_050", resolution=64))
    assert e.n_measured == 0 and e.n_learned > 0 and e.ms > 0


def test_fit_is_deterministic_and_needs_no_pickle():
    t = synth_table(frac=0.5, networks=10)
    archs = [load_space("tiny").random(i) for i in range(20)]
    a = LatencyPredictor().fit(t).predict(archs)
    b = LatencyPredictor().fit(LatencyTable.from_dict(t.to_dict())).predict(archs)  # refit from the JSON form
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", list_spaces())
def test_compiled_space_predictor_matches(name):
    t = synth_table((name,), frac=0.7, networks=30)
    p = LatencyPredictor().fit(t)
    space = load_space(name)
    sp = p.compile(space)
    P = space.sample_indices(200, rng=0)
    fast = sp.predict_indices(P)
    slow = p.predict([space.decode_indices(row) for row in P])
    np.testing.assert_allclose(fast, slow, rtol=1e-9)
    with pytest.raises(ValueError, match="expected an index array of shape"):
        sp.predict_indices(P[:, :3])


def test_errors():
    with pytest.raises(NotFittedError):
        LatencyPredictor().predict([load_space("tiny").random(0)])
    with pytest.raises(ValueError, match="empty table"):
        LatencyPredictor().fit(LatencyTable(metadata=dict(META)))
    t = synth_table(frac=0.5)
    p = LatencyPredictor(learned=False, calibrate=False).fit(t)
    a = next(a for a in (load_space("tiny").random(i) for i in range(100)) if any(k not in t for k in a.keys()))
    with pytest.raises(KeyError, match="not in the latency table and the learned model is disabled"):
        p.explain(a)


def test_load_latency_model(tmp_path):
    # no table: a labelled estimate whose warning names the command that builds the table
    m = load_latency_model({**TARGET, "name": "jetson", "table": str(tmp_path / "none.json")})
    assert isinstance(m, RooflineModel) and m.source == "estimated"
    assert "python -m nas.profile conf=jetson" in m.warning and "ESTIMATE" in m.warning
    e = m.explain(load_space("tiny").random(0))
    assert e.source == "estimated" and "ESTIMATE" in e.label() and e.n_estimated > 0
    # a table: measured
    path = synth_table(networks=10).save(tmp_path / "t.json")
    m = load_latency_model({**TARGET, "table": str(path)})
    assert isinstance(m, LatencyPredictor) and m.warning is None and m.source == "measured"
    # mismatched: an error, unless allowed, and then the predictions say so
    with pytest.raises(TableMismatchError, match="precision"):
        load_latency_model({**TARGET, "table": str(path), "precision": "int8"})
    m = load_latency_model({**TARGET, "table": str(path), "precision": "int8"}, allow_mismatch=True)
    assert "TABLE MISMATCH" in m.explain(load_space("tiny").random(0)).label()


def test_shipped_jetson_and_gpu_targets_are_estimates():
    from omegaconf import OmegaConf

    from nas.config import compose_app

    for name in ("jetson", "gpu"):
        cfg = compose_app("predict", [f"conf={name}"])
        target = OmegaConf.to_container(cfg.target, resolve=True)
        m = load_latency_model(target)
        assert m.source == "estimated" and f"conf={name}" in m.warning


def test_calibration_recovers_a_boundary_effect():
    from nas.latency.predict.calibration import boundary_feature

    t = synth_table(networks=0)
    rng = np.random.default_rng(5)
    for _ in range(40):
        a = load_space("tiny").random(rng)
        ms = sum(synth_ms(k) - 0.004 for k in a.keys())
        b = sum(boundary_feature(k) for k in a.keys())
        t.networks[a] = Entry(ms + 0.002 * len(a.keys()) - 0.2 * b + 0.03, 0, 0, 50)
    p = LatencyPredictor().fit(t)
    assert p.coef_[1] == pytest.approx(0.002, abs=1e-6) and p.coef_[2] == pytest.approx(-0.2, rel=1e-4)
    assert p.intercept_ == pytest.approx(0.03, abs=1e-6)
    sp = p.compile(load_space("tiny"))
    P = load_space("tiny").sample_indices(50, rng=1)
    np.testing.assert_allclose(sp.predict_indices(P), p.predict([load_space("tiny").decode_indices(r) for r in P]))


def test_contributions_never_negative():
    t = synth_table(networks=0)
    rng = np.random.default_rng(7)
    for _ in range(30):  # a device whose boundary term is strongly negative
        a = load_space("tiny").random(rng)
        from nas.latency.predict.calibration import boundary_feature

        ms = sum(synth_ms(k) - 0.004 for k in a.keys())
        t.networks[a] = Entry(max(ms - 5.0 * sum(boundary_feature(k) for k in a.keys()), 1e-3) + 0.01, 0, 0, 50)
    p = LatencyPredictor().fit(t)
    far = [load_space("mbv3").random(i) for i in range(5)]  # far outside the calibration data
    assert (p.predict(far) > 0).all()
    assert all(p._contribution(k) >= 0 for a in far for k in a.keys())


def test_calibration_fit_keeps_every_layer_non_negative():
    from nas.latency.predict.calibration import fit_calibration

    # networks of layers [ms, 1]: y = ms - 0.5 * layers + 2 fits exactly, but a 0.2-ms layer would cost -0.3
    X = np.array([[1.2, 2], [2.0, 2], [0.4, 2], [2.2, 3], [3.0, 3], [1.4, 3]])
    y = X[:, 0] - 0.5 * X[:, 1] + 2.0
    layers = np.array([[0.2, 1.0], [1.0, 1.0]])
    coef, b = fit_calibration(X, y, np.empty((0, 2)))
    assert np.allclose(coef, [1.0, -0.5]) and np.isclose(b, 2.0)  # unconstrained: the exact fit
    coef, b = fit_calibration(X, y, layers)
    assert (layers @ coef).min() >= -1e-9
    assert np.mean(np.abs((X @ coef + b) / y - 1)) < 0.2  # still a fit, not just a feasible point
    coef, b = fit_calibration(X, y, np.array([[1.0, 1.0]]))  # feasible already: returned unchanged
    assert np.allclose(coef, [1.0, -0.5]) and np.isclose(b, 2.0)


def test_shipped_openvino_table_predicts_what_its_calibration_fitted():
    """OpenVINO's lone blocks do not add up to its networks; a fit with negative layers, clamped at
    prediction, put every network ~15 us high.  The predictor must predict what it fitted."""
    from nas.latency.predict.calibration import layer_features, table_networks
    from nas.target import load_target

    p = load_latency_model(load_target("openvino_cpu"), allow_mismatch=True, refresh=False)
    layers = np.array([layer_features(k, p._block_ms(k)[0]) for k in p.table_.entries])
    assert (layers @ p.coef_).min() >= -1e-9
    archs = [a for a, _ in table_networks(p.table_)]
    fitted = p.intercept_ + np.array([p.features(a) for a in archs]) @ p.coef_
    raw = np.array([p.raw_sum(a) for a in archs])
    assert np.allclose(p.predict(archs), p.below_range(fitted, raw), rtol=1e-6)


def test_calibration_recovers_a_concave_relation_and_falls_back_below_its_range():
    """A network whose layers cost more in it than alone by a term concave in their time (a fixed
    per-operator share): the log-time feature carries it.  Far below the calibration networks'
    range the prediction is the raw table sum times the smallest calibration networks' measured /
    raw ratio instead (on real networks the concave terms doubled a 15 us one), blended in
    continuously, and labelled an extrapolation; every path agrees."""
    import math

    from nas.latency.predict.predictor import EXTRAPOLATION_MARGIN, LOG_FLOOR_MS, LOW_NETWORKS

    t = synth_table(networks=0)
    sp = load_space("tiny")
    rng = np.random.default_rng(5)

    def truth(a):
        return sum(s + 0.002 * math.log(max(s, LOG_FLOOR_MS)) + 0.015 for s in (synth_ms(k) - 0.004 for k in a.keys()))

    archs = sorted({sp.random(rng) for _ in range(200)}, key=truth)
    calib, inside = archs[-80::2], archs[-79::2]  # calibrated on every other of the slowest 80
    for a in calib:
        t.networks[a] = Entry(truth(a), 0, 0, 50)
    p = LatencyPredictor().fit(t)
    assert p.coef_[6] == pytest.approx(0.002, rel=1e-4) and p.coef_[1] == pytest.approx(0.015, rel=1e-4)
    lo = p.calibration_range_[0]
    raw = np.array([p.raw_sum(a) for a in archs])
    within = [a for a, r in zip(inside, raw[-79::2]) if r >= lo]
    np.testing.assert_allclose(p.predict(within), [truth(a) for a in within], rtol=1e-6)  # the calibration itself
    small = sorted(calib, key=p.raw_sum)[:LOW_NETWORKS]
    assert p.low_ratio_ == pytest.approx(np.median([truth(a) / p.raw_sum(a) for a in small]))
    below = [a for a, r in zip(archs, raw) if r < EXTRAPOLATION_MARGIN * lo]
    assert len(below) > 10
    np.testing.assert_allclose(p.predict(below), [p.raw_sum(a) * p.low_ratio_ for a in below], rtol=1e-9)
    assert all("EXTRAPOLATED" in p.explain(a).label() for a in below[:5])
    # continuous: a blend between EXTRAPOLATION_MARGIN * lo and lo
    cal = (p.intercept_ + p._sums(below[:1])[:, 0])
    for f, w in ((1.0, 1.0), (EXTRAPOLATION_MARGIN, 0.0), (0.9, 0.5)):
        r = np.array([f * lo])
        assert p.below_range(cal, r)[0] == pytest.approx(w * cal[0] + (1 - w) * r[0] * p.low_ratio_)
    # the Arch path, explain and the compiled space predictor agree, below the range too
    P = sp.sample_indices(300, rng=6)
    decoded = [sp.decode_indices(row) for row in P]
    assert sum(p.raw_sum(a) < lo for a in decoded) > 50
    np.testing.assert_allclose(p.compile(sp).predict_indices(P), p.predict(decoded), rtol=1e-9)
    np.testing.assert_allclose([p.explain(a).ms for a in decoded[:20]], p.predict(decoded[:20]), rtol=1e-12)


def test_predictions_outside_the_calibration_range_say_so():
    t = synth_table(networks=30)
    p = LatencyPredictor().fit(t)
    lo, hi = p.calibration_range_
    inside = next(a for a in t.networks if lo < p.raw_sum(a) < hi)
    assert p.explain(inside).outside == "" and "EXTRAPOLATED" not in p.explain(inside).label()
    tiny = load_space("tiny").random(3).with_resolution(8)  # 16x fewer pixels than any calibration network
    e = p.explain(tiny)
    assert p.raw_sum(tiny) < 0.8 * lo
    assert "below the calibration networks'" in e.outside and "EXTRAPOLATED" in e.label()
    assert e.to_dict()["outside"] == e.outside
    assert LatencyPredictor(calibrate=False).fit(t).explain(tiny).outside == ""  # no calibration, nothing to leave


def _residual_table(n_nets=160, seed=3):
    """A device whose networks cost 8% more when over a third of their time is in 5x5 kernels: a
    network-level effect no sum of per-layer terms can carry."""
    from nas.latency.predict.predictor import MIN_RESIDUAL_NETWORKS

    assert n_nets >= MIN_RESIDUAL_NETWORKS
    t = synth_table(networks=0)
    sp = load_space("tiny")
    rng = np.random.default_rng(seed)

    def truth(a):
        ms = [synth_ms(k) - 0.004 for k in a.keys()]
        k5 = sum(m for m, k in zip(ms, a.keys()) if getattr(k.block, "kernel", 3) >= 5) / sum(ms)
        return (sum(ms) + 0.01) * (1.08 if k5 > 1 / 3 else 1.0)

    archs = list({sp.random(rng) for _ in range(2 * n_nets)})
    for a in archs[:n_nets]:
        t.networks[a] = Entry(truth(a), 0, 0, 50)
    return t, archs[n_nets:], truth


def test_network_residual_carries_a_network_level_effect():
    t, held, truth = _residual_table()
    y = np.array([truth(a) for a in held])
    linear = LatencyPredictor(residual=False).fit(t)
    full = LatencyPredictor().fit(t)
    assert linear.residual_ is None and full.residual_ is not None
    assert "network residual" in full.describe()
    err_lin = np.abs(linear.predict(held) / y - 1)
    err = np.abs(full.predict(held) / y - 1)
    assert err_lin.mean() > 0.02  # the linear calibration alone cannot express it
    assert err.mean() < 0.5 * err_lin.mean(), (err.mean(), err_lin.mean())
    # below MIN_RESIDUAL_NETWORKS calibration networks: the linear calibration alone
    few = synth_table(networks=0)
    for a in list(t.networks)[:40]:
        few.networks[a] = t.networks[a]
    assert LatencyPredictor().fit(few).residual_ is None


def test_network_residual_is_the_same_on_every_path():
    """One Arch, a batch (scikit-learn's predict), explain, and the compiled space predictor agree."""
    t, held, _ = _residual_table()
    p = LatencyPredictor().fit(t)
    assert p.residual_.packed
    batch = p.predict(held)  # >= 64 rows: scikit-learn
    assert len(held) >= p.residual_.BATCH
    one = np.array([p.predict(a)[0] for a in held])  # packed trees
    np.testing.assert_allclose(one, batch, rtol=1e-12)
    np.testing.assert_allclose([p.explain(a).ms for a in held[:10]], batch[:10], rtol=1e-12)
    space = load_space("tiny")
    P = space.sample_indices(300, rng=4)
    np.testing.assert_allclose(p.compile(space).predict_indices(P),
                               p.predict([space.decode_indices(r) for r in P]), rtol=1e-9)


def test_packed_trees_match_scikit_learn_or_fall_back(monkeypatch):
    from sklearn.ensemble import HistGradientBoostingRegressor

    from nas.latency.predict.predictor import CompiledTrees

    rng = np.random.default_rng(0)
    X = rng.random((300, 6))
    y = np.sin(3 * X[:, 0]) + X[:, 1] * X[:, 2]
    gbm = HistGradientBoostingRegressor(max_iter=50, max_depth=3, min_samples_leaf=10, random_state=0).fit(X, y)
    c = CompiledTrees(gbm)
    Xt = rng.random((40, 6))
    assert c.packed
    np.testing.assert_allclose(c.predict(Xt), gbm.predict(Xt), rtol=1e-12)
    X_check = rng.random((32, 6))

    def bad_pack(self):  # a scikit-learn whose trees are laid out otherwise: the check catches it
        good_pack(self)
        self.thr = self.thr + 0.25

    good_pack = CompiledTrees._pack
    monkeypatch.setattr(CompiledTrees, "_pack", bad_pack)
    c = CompiledTrees(gbm, check=X_check)
    assert not c.packed
    np.testing.assert_allclose(c.predict(Xt), gbm.predict(Xt), rtol=1e-12)  # scikit-learn's own


def test_reproducibility_scores_the_table_against_its_own_re_measurement():
    from nas.latency.predict.scoring import drift_ratios
    from nas.latency.profile.reproducibility import reproducibility

    # (now, table) ms: one network 3% slower now, two 9-10% off, one unchanged
    anchors = {"a": [(1.03, 1.0), (1.1, 1.0)], "b": [(0.9, 1.0), (2.0, 2.0)]}
    scale, _, _ = drift_ratios(anchors)
    r = reproducibility(anchors, scale)
    assert r["as_built"]["n"] == 4
    assert r["as_built"]["within_5pct"] == pytest.approx(0.5)  # 1.03 and 2.0 only
    assert r["as_built"]["within_10pct"] == pytest.approx(0.75)  # 1.1 is 9.1% off, 0.9 is 11.1% off
    assert scale == pytest.approx(1.015)  # the median ratio
    # rescaled: the table's figures x 1.015, so 1.1 is now 7.7% off and 0.9 12.8% off
    assert r["rescaled"]["within_5pct"] == pytest.approx(0.5) and r["rescaled"]["within_10pct"] == pytest.approx(0.75)


def test_recalibration_absorbs_an_uneven_drift():
    """The machine moved since the table was measured: 20% faster, less so for small networks.
    Calibrated on the calibration networks re-measured now, the predictor follows; as built it cannot."""
    from nas.latency.profile.validate import RECALIBRATED, ValidationSet, validate

    t = synth_table(networks=40)
    sp = load_space("tiny")
    rng = np.random.default_rng(11)

    def truth(a):  # the table's own calibration relation (synth_table)
        return 1.1 * sum(synth_ms(k) - 0.004 for k in a.keys()) + 0.01 * len(a.keys()) + 0.05

    def now(ms):
        return 0.8 * ms + 0.01

    held = [a for a in {sp.random(rng) for _ in range(60)} if a not in t.networks][:30]
    nets = list(t.networks.items())
    vs = ValidationSet(held, [now(truth(a)) for a in held], ["tiny"] * len(held),
                       anchors={"tiny": [(now(e.median_ms), e.median_ms) for _, e in nets]},
                       remeasured=[(a, now(e.median_ms)) for a, e in nets])
    p = LatencyPredictor(refresh=False).fit(t)
    rep = validate(p, SYNTH, vs, recalibrate=True)
    assert rep["methods"]["predictor"]["mape"] > 15  # as built: the table's state, not the machine's now
    assert rep["methods"][RECALIBRATED]["mape"] < 0.5, rep["methods"][RECALIBRATED]
    assert rep["methods"][RECALIBRATED]["mape"] < rep["methods"]["predictor_rescaled"]["mape"]  # uneven: one factor is not enough
    assert all(RECALIBRATED in pt for pt in rep["points"])
    # without the re-measured calibration networks: a clear error, not a silent skip
    few = ValidationSet(held, vs.measured_ms, vs.groups, anchors=vs.anchors, remeasured=vs.remeasured[:10])
    with pytest.raises(ValueError, match="recalibrate needs every calibration network"):
        validate(p, SYNTH, few, recalibrate=True)
    assert RECALIBRATED not in validate(p, SYNTH, vs)["methods"]  # only when asked


def test_validation_rounds_mix_held_out_and_calibration_networks(monkeypatch, tmp_path):
    """Every round measures in its own seeded order, held-out and calibration networks mixed (a
    fixed order gave them different shares of the machine's drift within a round), and an
    interrupted validation resumes without re-measuring."""
    from types import SimpleNamespace

    import nas.latency.profile.profiler as profiler
    from nas.latency.profile.profiler import round_order
    from nas.latency.profile.validate import measure_held_out

    rng = np.random.default_rng(3)
    sp = load_space("tiny")
    archs = list({a.digest(): a for a in (sp.random(rng) for _ in range(40))}.values())
    held, calib = archs[:20], archs[20:]
    table = SimpleNamespace(networks={a: SimpleNamespace(median_ms=1.0) for a in calib})
    seen: list[str] = []

    def fake(a, runtime, settings):
        seen.append(a.digest())
        if len(seen) == 50:
            raise KeyboardInterrupt
        return SimpleNamespace(median_ms=float(len(seen)), remeasured=0)

    monkeypatch.setattr(profiler, "measure_arch", fake)
    rt = SimpleNamespace(info=lambda: {"runtime": "fake"}, precision="fp32")
    settings, cache = SimpleNamespace(rounds=3), tmp_path / "m.json"
    with pytest.raises(KeyboardInterrupt):
        measure_held_out(held, ["tiny"] * 20, rt, settings, cache=cache, progress=False, table=table,
                         anchors_per_group=None)
    vs = measure_held_out(held, ["tiny"] * 20, rt, settings, cache=cache, progress=False, table=table,
                          anchors_per_group=None)
    assert len(seen) == 3 * 40 + 1  # the interrupted measurement is the only one repeated
    everything = [a.digest() for a in held + calib]
    rounds = [seen[:40], seen[40:49] + seen[50:81], seen[81:]]
    for r, order in enumerate(rounds, 1):
        assert order == [everything[i] for i in round_order(40, r)]
        first = {d for d in order[:20]}
        assert 5 <= len(first & {a.digest() for a in held}) <= 15  # mixed, not held-out first
    assert rounds[0] != rounds[1] != rounds[2]
    assert len(vs.remeasured) == 20 and len(vs.measured_ms) == 20


def test_recalibration_ablation_without_calibration_spaces():
    """With networks of calibration-only spaces in the table, validate also scores the recalibration
    fitted on the search spaces' networks alone, on the same re-measured figures."""
    from nas.latency.profile.validate import RECALIBRATED, WITHOUT_EXTRA, ValidationSet, validate

    t = synth_table(("tiny", "calibration/lcnetlike"), networks=25)
    sp = load_space("tiny")
    held = [a for a in {sp.random(s) for s in range(1000, 1020)} if a not in t.networks]
    nets = [(a, 0.9 * e.median_ms) for a, e in t.networks.items()]
    vs = ValidationSet(held, [1.0] * len(held), ["tiny"] * len(held), remeasured=nets)
    p = LatencyPredictor(refresh=False).fit(t)
    rep = validate(p, SYNTH, vs, recalibrate=True)
    assert rep["calibration_spaces"] == {"networks": 25, "of": 50, "spaces": ["lcnetlike"]}
    own = [(a, ms) for a, ms in nets if a.name == "tiny"]
    expect = LatencyPredictor(refresh=False).fit(t, own).predict(held)
    np.testing.assert_allclose([pt[WITHOUT_EXTRA] for pt in rep["points"]], expect)
    assert RECALIBRATED in rep["methods"] and WITHOUT_EXTRA in rep["methods"]
    # a table without such networks: no ablation
    t2 = synth_table(networks=25)
    vs2 = ValidationSet(held, [1.0] * len(held), ["tiny"] * len(held),
                        remeasured=[(a, e.median_ms) for a, e in t2.networks.items()])
    rep2 = validate(LatencyPredictor(refresh=False).fit(t2), SYNTH, vs2, recalibrate=True)
    assert WITHOUT_EXTRA not in rep2["methods"] and "calibration_spaces" not in rep2


def test_fit_runs_gradient_boosting_on_one_openmp_thread(monkeypatch):
    """Two processes fitting at once with a thread per core each stalled for minutes on 2 cores."""
    from threadpoolctl import threadpool_info

    from nas.latency.predict import predictor as mod

    seen = []
    real = mod.HistGradientBoostingRegressor.fit

    def fit(self, *a, **k):
        seen.append([p["num_threads"] for p in threadpool_info() if p["user_api"] == "openmp"])
        return real(self, *a, **k)

    monkeypatch.setattr(mod.HistGradientBoostingRegressor, "fit", fit)
    LatencyPredictor().fit(synth_table(networks=10))
    assert seen and all(n and n == [1] * len(n) for n in seen), seen  # openmp is loaded, on one thread
