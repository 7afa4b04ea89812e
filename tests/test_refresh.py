"""Refresh on the fly (nas.latency.profile.refresh) and the repeatability of a network's measurement
(nas.latency.profile.repeatability), with a fake timer: nothing here depends on how fast the host runs."""

import numpy as np
import pytest
from test_predictor import META, SYNTH, synth_table
from test_predictor import TARGET as TARGET_FIELDS

from nas.latency import LatencyPredictor
from nas.latency.predict.scoring import drift_warning
from nas.latency.profile.refresh import MIN_ANCHORS, Refresh, pick_anchors, refresh_model, retime, why_not_retimed
from nas.latency.profile.repeatability import repeatability
from nas.latency.profile.validate import AS_BUILT, RESCALED, ValidationSet, validate
from nas.space import load_space
from nas.target import Target

# this machine, as the fake identity a table's metadata records (META's device)
HERE = {"kind": "cpu", "name": "Synthetic CPU", "machine": "x86_64"}
ELSEWHERE = {"kind": "cpu", "name": "Another CPU", "machine": "x86_64"}
TARGET = Target.coerce({**TARGET_FIELDS, "name": "synth"})


class Quiet:
    """A ``Contention`` that never waited (or always did)."""

    def __init__(self, busy=False):
        self.busy = busy

    def start(self):
        pass

    def since(self):
        return 1.0, 0.5 if self.busy else 0.0


def table2(n=20):
    t = synth_table(("tiny", "mbv3"), frac=0.3, networks=n, seed=1)
    t.metadata = {**META, "device": dict(HERE), "measurement": {"warmup": 1, "repeats": 5, "min_time_s": 0.0}}
    return t


def slower(by):
    """A fake timer: each network runs ``by[space]`` times its calibration figure now."""
    def measure(figures):
        return lambda a: figures[a] * by[a.name]
    return measure


def test_anchors_take_turns_nearest_each_spaces_median_within_the_budget():
    t = table2()
    p = LatencyPredictor(refresh=False).fit(t)
    figs = p.calibration_figures()
    settings = type("S", (), {"warmup": 1, "repeats": 5, "min_time_s": 0.0})()
    taken, cost = pick_anchors(t, figs, settings, budget_s=100.0)
    assert [a.name for a in taken[:4]] == ["mbv3", "tiny", "mbv3", "tiny"]  # the spaces take turns
    tiny = sorted(figs[a] for a in t.networks if a.name == "tiny")
    med = float(np.median(tiny))
    first_tiny = next(a for a in taken if a.name == "tiny")
    assert abs(np.log(figs[first_tiny] / med)) == pytest.approx(min(abs(np.log(v / med)) for v in tiny))
    few, cost_few = pick_anchors(t, figs, settings, budget_s=cost / 4)
    assert 0 < len(few) < len(taken) and cost_few <= cost / 4
    only, _ = pick_anchors(t, figs, settings, spaces=["tiny", "not_in_table"], budget_s=100.0)
    assert {a.name for a in only} == {"tiny"}


def test_refresh_rescales_every_prediction_and_says_so():
    t = table2()
    built = LatencyPredictor(refresh=False).fit(t)
    p = LatencyPredictor(refresh=False).fit(t)
    figs = p.calibration_figures()
    arch = load_space("tiny").random(123)
    ref = refresh_model(p, TARGET, here=HERE, budget_s=1e6, measure=slower({"tiny": 0.96, "mbv3": 0.96})(figs),
                        contention=Quiet())
    assert ref is not None and ref.applied and ref.ratio == pytest.approx(0.96)
    assert p.predict(arch)[0] == pytest.approx(0.96 * built.predict(arch)[0])
    space = load_space("tiny")
    P = space.sample_indices(20, rng=0)  # the search's vectorised path follows too
    np.testing.assert_allclose(p.compile(space).predict_indices(P),
                               0.96 * built.predict([space.decode_indices(row) for row in P]), rtol=1e-9)
    label = p.explain(arch).label()
    assert "rescaled x0.960 by re-timing" in label and "refresh on the fly" in label
    assert "refreshed on the fly" in ref.line() and "-4.0%" in ref.line()
    assert "rescaled x0.960 by re-timing" in p.describe()


def test_a_search_space_gets_its_own_factor():
    t = table2()
    p = LatencyPredictor(refresh=False).fit(t)
    figs = p.calibration_figures()
    measure = slower({"tiny": 0.95, "mbv3": 0.85})(figs)  # the machine moved unevenly
    ref = refresh_model(p, TARGET, spaces=["tiny"], here=HERE, budget_s=1e6, measure=measure, contention=Quiet())
    assert ref.ratio == pytest.approx(0.95) and p.rescale_ == pytest.approx(0.95)
    both = refresh_model(LatencyPredictor(refresh=False).fit(t), TARGET, here=HERE, budget_s=1e6, measure=measure,
                         apply=False, contention=Quiet())
    assert both.ratio_for("tiny") == pytest.approx(0.95) and both.ratio_for("mbv3") == pytest.approx(0.85)
    assert both.ratio_for("mobilenetv2_100") == pytest.approx(both.ratio)  # no space: the median over all


def test_nothing_is_re_timed_on_another_machine_or_over_budget():
    t = table2()
    p = LatencyPredictor(refresh=False).fit(t)
    before = p.predict(list(t.networks)[:3])

    def boom(a):
        raise AssertionError("re-timed a network on a machine that is not the table's")

    assert refresh_model(p, TARGET, here=ELSEWHERE, measure=boom) is None
    assert "not 'Synthetic CPU'" in why_not_retimed(t, TARGET, ELSEWHERE)
    t.metadata["bundle"] = {"id": "x"}
    assert why_not_retimed(t, TARGET, HERE) == "the table was measured through a device bundle"
    del t.metadata["bundle"]
    ref = refresh_model(p, TARGET, here=HERE, budget_s=1e-6, measure=boom)
    assert ref is not None and not ref.applied and f"re-timing {MIN_ANCHORS}" in ref.note
    assert ref.line().startswith("table not refreshed on the fly")
    np.testing.assert_allclose(p.predict(list(t.networks)[:3]), before)


def test_a_re_timing_the_machine_misled_is_not_applied():
    t = table2()
    p = LatencyPredictor(refresh=False).fit(t)
    figs = p.calibration_figures()
    anchors = list(figs)[:8]
    busy = retime(anchors, figs, lambda a: figs[a] * 0.9, contention=Quiet(busy=True))
    assert not busy.applied and "another process" in busy.note and busy.ratio_for("tiny") == 1.0
    jitter = dict(zip(anchors, [0.8, 1.2, 0.85, 1.15, 0.9, 1.1, 0.82, 1.18]))  # ±15% around 1
    noisy = retime(anchors, figs, lambda a: figs[a] * jitter[a], record={"median_dev_pct": 1.0}, contention=Quiet())
    assert not noisy.applied and "noisy" in noisy.note and "not refreshed" in noisy.line()
    ok = retime(anchors, figs, lambda a: figs[a] * 1.03, record={"median_dev_pct": 1.0}, contention=Quiet())
    assert ok.applied and ok.ratio == pytest.approx(1.03)


def test_repeatability_takes_out_each_rounds_machine_speed():
    rounds = [[1.0, 1.0, 1.0]] * 6 + [[1.0, 1.0, 1.2]]  # one network's third session 20% slower
    r = repeatability(rounds)
    assert r.left_out() == [6] and r.spread_pct[6] == pytest.approx(20.0)
    slow = [[1.0, 1.0, 1.12]] * 7  # the whole third round 12% slower: the machine, not the networks
    f = repeatability(slow).round_factors
    assert repeatability(slow).left_out() == [] and f[2] / f[0] == pytest.approx(1.12) and f[0] == pytest.approx(f[1])
    assert not repeatability([[1.0]] * 7).judged and repeatability([[1.0]] * 7).left_out() == []


def _validation_set(t, p, by, rounds=None):
    sp = load_space("tiny")
    rng = np.random.default_rng(5)
    held = [a for a in {sp.random(rng) for _ in range(30)} if a not in t.networks][:12]
    truth = p.predict(held) * by["tiny"]
    anchors = {g: [(e.median_ms * by[g], e.median_ms) for a, e in t.networks.items() if a.name == g][:6]
               for g in ("tiny", "mbv3")}
    return ValidationSet(held, list(truth), ["tiny"] * len(held), anchors=anchors,
                         rounds_ms=rounds or [[ms, ms, ms] for ms in truth])


def test_validation_scores_the_refreshed_predictor_and_the_verdict_says_what_was_done():
    t = table2()
    p = LatencyPredictor(refresh=False).fit(t)
    by = {"tiny": 0.95, "mbv3": 0.85}
    vs = _validation_set(t, p, by)
    ref = Refresh(0.9, {"tiny": 0.95, "mbv3": 0.85}, (("tiny", 0.95, 1.0), ("tiny", 0.95, 1.0)), 2.0, "now")
    rep = validate(p, SYNTH, vs, refresh=ref, target_name="here")
    assert rep["methods"]["predictor"]["within_5pct"] == 1.0  # each space by its own factor
    assert rep["methods"][AS_BUILT]["within_5pct"] == 0.0  # the table as built: 5% off
    assert all(pt["predictor"] == pytest.approx(0.95 * pt[AS_BUILT]) for pt in rep["points"])
    assert all(pt[RESCALED] == pytest.approx(pt[AS_BUILT] * rep["drift_scale"]["now_over_table"]) for pt in rep["points"])
    assert rep["refresh"]["per_space"] == {"tiny": 0.95, "mbv3": 0.85}
    v = rep["drift_verdict"]  # judged against the refreshed figures: nothing moved since
    assert v["median"] == pytest.approx(1.0) and not v["drifted"] and v["refreshed"] == 0.9
    assert "drift_warning" not in rep
    # without the refresh, a machine 5% faster is called drift, and the fix named
    plain = validate(p, SYNTH, _validation_set(t, p, {"tiny": 0.95, "mbv3": 0.95}), target_name="here")
    assert AS_BUILT not in plain["methods"] and plain["drift_verdict"]["drifted"]
    assert "conf=here refresh=10" in plain["drift_warning"]


def test_a_drift_after_the_refresh_is_reported_as_what_was_done():
    verdict = {"median": 1.05, "spread": 0.005, "n": 20, "table_noise": 0.01, "threshold": 0.02,
               "drifted": True, "noisy": False}
    msg = drift_warning(verdict, "here", refreshed=0.97)
    assert "refreshed on the fly" in msg and "0.970x" in msg and "1.050x" in msg and "predictor_rescaled" in msg
    assert "refresh=" not in msg and "recalibrate=true" not in msg  # what it did, not what to run


def test_unrepeatable_networks_are_left_out_of_the_score_and_named():
    t = table2()
    p = LatencyPredictor(refresh=False).fit(t)
    by = {"tiny": 1.0, "mbv3": 1.0}
    vs = _validation_set(t, p, by)
    bad = 3
    vs.measured_ms[bad] *= 1.3  # predicted 23% high: a miss ...
    vs.rounds_ms[bad] = [vs.measured_ms[bad], vs.measured_ms[bad] / 1.3, vs.measured_ms[bad] * 1.1]  # ... that does not repeat
    rep = validate(p, SYNTH, vs)
    assert rep["methods"]["predictor"]["n"] == len(vs.archs) - 1 and rep["methods"]["predictor"]["within_10pct"] == 1.0
    assert rep["repeatability"]["left_out"] == [vs.archs[bad].name] and rep["repeatability"]["rounds"] == 3
    assert rep["with_unrepeatable"]["predictor"]["n"] == len(vs.archs)
    assert rep["with_unrepeatable"]["predictor"]["within_10pct"] < 1.0
    pt = rep["points"][bad]
    assert pt["repeatable"] is False and pt["rounds_spread_pct"] > 10


def test_a_search_refreshes_its_table_and_prints_by_how_much(tmp_path, monkeypatch, capsys):
    """prepare_search re-times its space's calibration networks (a fake timer: 3% faster than the table)
    on the table's machine and the command prints one line saying so; retime=False leaves it as measured."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    import nas.latency.profile.refresh as refresh_mod
    from nas.cli.search import _print_setup
    from nas.data import load_data
    from nas.search import study as study_mod
    from nas.search.budget import Budgets
    from nas.search.samplers import RandomSettings
    from nas.search.study import prepare_search
    from tests.test_search import FakeEvaluator

    t = table2()
    figs = LatencyPredictor(refresh=False).fit(t).calibration_figures()
    monkeypatch.setattr(study_mod, "load_latency_model",
                        lambda target, allow_mismatch: LatencyPredictor(refresh=False).fit(t))
    monkeypatch.setattr(refresh_mod, "device_identity", lambda kind: dict(HERE))
    timed = []

    def fake_measure(a, runtime, settings):
        timed.append(a.name)
        return SimpleNamespace(median_ms=0.97 * figs[a])

    monkeypatch.setattr(refresh_mod, "measure_arch", fake_measure)
    monkeypatch.setattr(refresh_mod, "Contention", Quiet)  # a busy test machine must not make it decline
    data = load_data({"name": "digits", "resolution": 8, "train_samples": 60, "val_samples": 30})

    def prepare(run_dir, **kw):
        return prepare_search(target=TARGET, search_space="tiny", data=data, evaluator=FakeEvaluator(),
                              sampler=RandomSettings(), budgets=Budgets(), seed=0, run_dir=run_dir, **kw)

    s = prepare(tmp_path / "a")
    assert timed and set(timed) == {"tiny"}  # the search's own space only
    assert s.refresh.applied and s.refresh.ratio == pytest.approx(0.97) and s.problem.latency.rescale_ == pytest.approx(0.97)
    assert s.info()["latency_model"]["refresh"]["ratio"] == pytest.approx(0.97)
    cfg = OmegaConf.create({"sampler": {"name": "random"}, "seed": 0})
    _print_setup(cfg, TARGET, s, 0)
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("refresh  "))
    assert "table refreshed on the fly" in line and "0.970x" in line and "-3.0%" in line
    timed.clear()
    off = prepare(tmp_path / "b", retime=False)
    assert not timed and off.refresh is None and off.problem.latency.rescale_ == 1.0
    _print_setup(cfg, TARGET, off, 0)
    assert "refresh  " not in capsys.readouterr().out


def test_one_round_judges_no_network_and_the_report_stays_plain_json():
    import json

    t = table2()
    p = LatencyPredictor(refresh=False).fit(t)
    vs = _validation_set(t, p, {"tiny": 1.0, "mbv3": 1.0}, rounds=None)
    vs.rounds_ms = [[ms] for ms in vs.measured_ms]  # profile.rounds=1
    rep = validate(p, SYNTH, vs)
    assert not rep["repeatability"]["judged"] and rep["repeatability"]["left_out"] == []
    assert all(pt["rounds_spread_pct"] is None and pt["repeatable"] for pt in rep["points"])
    json.dumps(rep["points"], allow_nan=False)  # no NaN in the report's points
