"""The profile as one planned job: its whole-job total, the time budget and its order, a re-run continuing."""

from collections import Counter

import pytest

from nas.arch import BlockKey, ConvBlock
from nas.latency.profile import jobs as profile_jobs
from nas.latency.profile import profiler
from nas.latency.profile.workflow import check_budget, profile_target
from nas.latency.runtimes.loop import ProfileSettings
from nas.latency.tables.table import Entry, LatencyTable
from nas.space import load_space

META = {"source": "measured", "target": "cpu", "device": {"name": "Test CPU", "kind": "cpu"},
        "runtime": {"name": "onnxruntime", "version": "1.0", "provider": "CPUExecutionProvider"},
        "precision": "fp32", "batch": 1, "threads": 1, "measurement": {}, "call_overhead_ms": 0.005}
S = ProfileSettings(warmup=1, repeats=3, min_time_s=0.0, rounds=3, save_every_s=0.0)
KEYS = [BlockKey(ConvBlock(c, 3, 1, "relu"), 3, 8, 8) for c in range(8, 28)]


@pytest.fixture(scope="module")
def nets():
    return profiler.calibration_archs(load_space("tiny"), 3)


def call_ms(item, kind):
    return 2.0 if kind == "network" else 0.1


class FakeDevice:
    """A fake clock and measurements: a block takes 1 s, a network 4 s; every measurement is logged."""

    def __init__(self, monkeypatch):
        self.t, self.seen = 0.0, []
        monkeypatch.setattr(profile_jobs, "measure_key", lambda k, rt, s: self._take(k, 1.0))
        monkeypatch.setattr(profile_jobs, "measure_arch", lambda a, rt, s: self._take(a, 4.0))

    def _take(self, item, seconds):
        self.t += seconds
        self.seen.append(item)
        return Entry(0.1, 0.09, 0.12, 3)

    def clock(self):
        return self.t


def test_plan_covers_every_round_of_every_block_and_network(nets):
    table = LatencyTable(metadata=dict(META))
    table.entries[KEYS[0]] = Entry(0.1, 0.09, 0.12, 3)  # one round measured already
    table.networks[nets[0]] = Entry(1.0, 0.9, 1.2, 3, rounds_ms=(1.0, 1.1))  # two rounds
    jobs = profile_jobs.plan_jobs(KEYS, nets, table, S, call_ms=call_ms)
    assert sum(j.kind == "block" for j in jobs) == 3 * len(KEYS) - 1
    assert sum(j.kind == "network" for j in jobs) == 3 * len(nets) - 2
    assert [j.round for j in jobs] == sorted(j.round for j in jobs)  # round by round
    assert (KEYS[0], 1) not in {(j.item, j.round) for j in jobs}
    # the bar's total is the whole plan's expected time, every round included
    eta = profile_jobs._Eta(jobs)
    assert eta.remaining() == pytest.approx(sum(j.cost_s for j in jobs))
    net_s = profile_jobs.expected_seconds(nets[1], "network", S, 2.0)
    assert net_s > profile_jobs.expected_seconds(KEYS[1], "block", S, 0.1)  # a network costs more than a block
    # exporting a graph is planned once: the runtime keeps its bytes for the later rounds
    cost = {(j.item, j.round): j.cost_s for j in jobs}
    assert cost[(KEYS[1], 1)] > cost[(KEYS[1], 2)] == cost[(KEYS[1], 3)]
    assert cost[(KEYS[0], 2)] > cost[(KEYS[0], 3)]  # its first round in this run
    # round 1's networks are spread over the first quarter of its blocks' time, not left to its end
    r1 = [j for j in jobs if j.round == 1]
    assert r1[0].kind == "block" and r1[1].kind == "network"
    last = max(i for i, j in enumerate(r1) if j.kind == "network")
    blocks_before = sum(j.cost_s for j in r1[:last] if j.kind == "block")
    assert blocks_before <= 0.3 * sum(j.cost_s for j in r1 if j.kind == "block")


def test_eta_rescales_each_kind_by_what_it_took(nets):
    jobs = profile_jobs.plan_jobs(KEYS[:4], nets[:1], LatencyTable(metadata=dict(META)), S, call_ms=call_ms)
    eta = profile_jobs._Eta(jobs)
    b = next(j for j in jobs if j.kind == "block")
    eta.done(b, 2 * b.cost_s)  # blocks take twice the plan; networks, unseen, are assumed to as well
    left = [j for j in jobs if j is not b]
    assert eta.remaining() == pytest.approx(2 * sum(j.cost_s for j in left))


def test_budget_stops_early_most_used_blocks_and_networks_first(tmp_path, nets, monkeypatch):
    dev = FakeDevice(monkeypatch)
    path = tmp_path / "t.json"
    table = LatencyTable(metadata=dict(META), path=path)
    freq = Counter({KEYS[-1]: 50, KEYS[-2]: 40, KEYS[5]: 30})
    jobs = profile_jobs.plan_jobs(KEYS, nets, table, S, call_ms=call_ms, freq=freq)
    rep = profile_jobs.run_jobs(jobs, None, table, S, path=path, progress=False, budget_s=12.0, clock=dev.clock)
    assert rep.stopped_by_budget and 0 < rep.left < len(jobs) and dev.t <= 12.0
    blocks = [x for x in dev.seen if isinstance(x, BlockKey)]
    assert blocks[:3] == [KEYS[-1], KEYS[-2], KEYS[5]]  # the most used first
    assert any(x in nets for x in dev.seen)  # and calibration networks among the first
    saved = LatencyTable.load(path)  # what was measured is saved
    assert set(saved.entries) == set(blocks) and set(saved.networks) == {x for x in dev.seen if x in nets}

    # a second run with a larger budget continues where the first stopped: nothing measured twice
    dev.seen.clear()
    again = profile_jobs.plan_jobs(KEYS, nets, saved, S, call_ms=call_ms, freq=freq)
    assert len(again) == rep.left
    rep2 = profile_jobs.run_jobs(again, None, saved, S, path=path, progress=False, budget_s=1e6, clock=dev.clock)
    assert not rep2.stopped_by_budget and rep2.left == 0
    done1 = {(j.item, j.round) for j in rep.done}
    assert not done1 & {(j.item, j.round) for j in rep2.done}
    final = LatencyTable.load(path)
    assert all(e.rounds == 3 for e in final.entries.values()) and len(final) == len(KEYS)
    assert all(e.rounds == 3 for e in final.networks.values()) and len(final.networks) == len(nets)


def test_ctrl_c_keeps_what_was_measured(tmp_path, nets, monkeypatch):
    dev = FakeDevice(monkeypatch)
    real = profile_jobs.measure_key

    def stop_at_fifth(k, rt, s):
        if len(dev.seen) == 5:
            raise KeyboardInterrupt
        return real(k, rt, s)

    monkeypatch.setattr(profile_jobs, "measure_key", stop_at_fifth)
    path = tmp_path / "t.json"
    table = LatencyTable(metadata=dict(META), path=path)
    jobs = profile_jobs.plan_jobs(KEYS, nets, table, ProfileSettings(**{**S.__dict__, "save_every_s": 3600.0}),
                              call_ms=call_ms)
    with pytest.raises(KeyboardInterrupt):
        profile_jobs.run_jobs(jobs, None, table, S, path=path, progress=False, clock=dev.clock)
    saved = LatencyTable.load(path)
    assert len(saved) + len(saved.networks) == 5


@pytest.mark.parametrize("bad,shown", [(0, "0"), (0.0, "0"), (-1, "-1"), (-0.5, "-0.5"), ("ten", "ten"),
                                       (True, "True")])
def test_bad_budget_is_refused(bad, shown):
    with pytest.raises(ValueError, match=f"^budget_min={shown}: the minutes to spend measuring, a number > 0"):
        check_budget(bad)


def test_an_interrupted_budgeted_profile_resumes(tmp_path, nets, monkeypatch):
    """Ctrl-C in a budgeted run keeps what was measured and its log; the same command again
    measures only what is missing, and a budget of its own applies to that run."""
    dev = FakeDevice(monkeypatch)
    real = profile_jobs.measure_key

    def stop_at_sixth(k, rt, s):  # the first block measurement after six items
        if len(dev.seen) >= 6:
            raise KeyboardInterrupt
        return real(k, rt, s)

    monkeypatch.setattr(profile_jobs, "measure_key", stop_at_sixth)
    path = tmp_path / "t.json"
    table = LatencyTable(metadata=dict(META), path=path)
    jobs = profile_jobs.plan_jobs(KEYS, nets, table, S, call_ms=call_ms)
    with pytest.raises(KeyboardInterrupt):
        profile_jobs.run_jobs(jobs, None, table, S, path=path, progress=False, budget_s=30.0, clock=dev.clock)
    saved = LatencyTable.load(path)
    first = {(x, 1) for x in dev.seen}
    n = len(dev.seen)
    assert n >= 6 and len(saved) + len(saved.networks) == n
    run = saved.metadata["profile_log"][0]
    assert run["budget_min"] == 0.5 and len(run["jobs"]) == n and not run["stopped_by_budget"]
    assert run["left"] == len(jobs) - n

    monkeypatch.setattr(profile_jobs, "measure_key", real)
    dev.seen.clear()
    again = profile_jobs.plan_jobs(KEYS, nets, saved, S, call_ms=call_ms)
    assert len(again) == len(jobs) - n
    rep = profile_jobs.run_jobs(again, None, saved, S, path=path, progress=False, budget_s=20.0, clock=dev.clock)
    assert rep.stopped_by_budget and 0 < len(rep.done) < len(again)
    assert not first & {(j.item, j.round) for j in rep.done}  # nothing measured twice
    log = LatencyTable.load(path).metadata["profile_log"]
    assert [r["budget_min"] for r in log] == [0.5, pytest.approx(1 / 3)] and log[1]["stopped_by_budget"]


def test_budget_with_bundle_or_refresh_is_refused():
    check_budget(None, measuring=False)
    check_budget(2.5)
    with pytest.raises(ValueError, match="applies to measuring"):
        check_budget(5, measuring=False)
    cpu = {"name": "cpu", "runtime": "onnxruntime", "provider": "CPUExecutionProvider", "precision": "fp32",
           "batch": 1, "threads": 1, "latency_budget_ms": 10.0,
           "device": {"name": None, "kind": "cpu", "peak_gflops": 50.0, "mem_bandwidth_gbs": 10.0}}
    with pytest.raises(ValueError, match="budget_min=0"):
        profile_target(cpu, spaces="tiny", budget_min=0, progress=False)


def test_partial_table_predicts_and_says_what_was_measured():
    from nas.latency.predict.predictor import LatencyPredictor

    space = load_space("tiny")
    keys = space.unique_blocks()
    table = LatencyTable(metadata=dict(META))
    for i, k in enumerate(keys[: len(keys) // 2]):  # half the blocks measured, as a budget leaves it
        table.entries[k] = Entry(0.02 + 0.001 * i, 0.018, 0.025, 3)
    model = LatencyPredictor(calibrate=False).fit(table)
    arch = next(a for a in profiler.calibration_archs(space, 20) if not set(a.keys()) <= set(table.entries))
    p = model.explain(arch)
    assert p.ms > 0 and p.n_learned > 0 and p.n_measured + p.n_learned == len(arch.keys())
    assert f"{p.n_measured} measured + {p.n_learned} learned" in p.label()


class TrueDevice(FakeDevice):
    """``FakeDevice`` whose figures follow a fixed ground truth: each block a roofline figure times
    its own factor (0.7-1.3, so the learned model has something to learn), a network the sum of
    its blocks times 1.1."""

    def __init__(self, monkeypatch):
        from nas.latency.predict.roofline import Roofline

        self.t, self.seen = 0.0, []
        self.roof = Roofline(peak_gflops=100.0, mem_bandwidth_gbs=20.0)
        monkeypatch.setattr(profile_jobs, "measure_key", lambda k, rt, s: self._entry(k, self.block_ms(k), 1.0))
        monkeypatch.setattr(profile_jobs, "measure_arch", lambda a, rt, s: self._entry(a, self.net_ms(a), 4.0))

    def block_ms(self, k):
        return 0.01 + self.roof.predict_key(k) * (0.7 + 0.6 * (int(k.digest()[:6], 16) % 97) / 96)

    def net_ms(self, a):
        return 1.1 * sum(self.block_ms(k) for k in a.keys())

    def _entry(self, item, ms, seconds):
        self.t += seconds
        self.seen.append(item)
        return Entry(ms, 0.98 * ms, 1.02 * ms, 3)


@pytest.fixture
def budgeted(tmp_path, monkeypatch):
    """A ``tiny`` table profiled (one round) under a 150 s budget on the ``TrueDevice``, then the rest
    measured in a second run: (device, keys, nets, settings, path, first run's report, table after it)."""
    space = load_space("tiny")
    keys = space.unique_blocks()
    nets = profiler.calibration_archs(space, 20)
    one = ProfileSettings(**{**S.__dict__, "rounds": 1})
    dev = TrueDevice(monkeypatch)
    path = tmp_path / "t.json"
    table = LatencyTable(metadata={**META, "measurement": {"rounds": 1}}, path=path)
    jobs = profile_jobs.plan_jobs(keys, nets, table, one, call_ms=call_ms, freq=profiler.block_frequency([space]))
    rep = profile_jobs.run_jobs(jobs, None, table, one, path=path, progress=False, budget_s=150.0, clock=dev.clock)
    return dev, keys, nets, one, path, rep, LatencyTable.load(path)


def test_profile_log_orders_a_budgeted_table(budgeted):
    from nas.latency.profile.budget_curve import measuring_order, table_at

    dev, keys, nets, one, path, rep, saved = budgeted
    assert rep.stopped_by_budget
    run = saved.metadata["profile_log"][0]  # the run and its order are recorded in the table
    assert run["budget_min"] == 2.5 and run["stopped_by_budget"] and run["left"] == rep.left
    assert len(run["jobs"]) == len(rep.done) and run["seconds"] == pytest.approx(dev.t)
    order = measuring_order(saved)
    assert order.source == "profile log" and order.unlogged == 0 and order.block_round_s == pytest.approx(1.0)
    half = table_at(saved, order, order.seconds / 2)
    first = [j.item for j in rep.done][: len(half.entries) + len(half.networks)]
    assert set(half.entries) | set(half.networks) == set(first)  # the first minutes' measurements, no other
    # measuring the rest: a second run follows the first on the minutes axis
    n_first = len(saved.entries)
    rest = profile_jobs.plan_jobs(keys, nets, saved, one, call_ms=call_ms)
    profile_jobs.run_jobs(rest, None, saved, one, path=path, progress=False, clock=dev.clock)
    full = LatencyTable.load(path)
    assert len(full.metadata["profile_log"]) == 2 and full.metadata["profile_log"][1]["budget_min"] is None
    order = measuring_order(full)
    assert order.seconds == pytest.approx(dev.t) and len(table_at(full, order, 150.0).entries) == n_first
    # a later round of an entry: the first minutes' table holds the rounds measured by then
    e = next(iter(full.entries.values()))
    assert table_at(full, order, order.seconds).entries[next(iter(full.entries))] == e
    # without a log (a table from a bundle, or from before the log): ordered by measured_at
    del full.metadata["profile_log"]
    assert measuring_order(full).source == "measured_at"


def test_extrapolation_only_from_a_steady_rising_trend():
    from nas.latency.profile.budget_curve import _extrapolate, _sentence

    def pt(cov, w10):
        return {"time_covered": cov, "within_10pct": w10, "calibrated": True}

    rising = [pt(0.5, 0.40), pt(0.6, 0.50), pt(0.7, 0.61), pt(0.8, 0.70)]
    ex = _extrapolate(rising, 0.8)
    assert ex["within_10pct"] == pytest.approx(0.906) and ex["r2"] > 0.99  # the line read at all of the time
    steep = [pt(0.5, 0.40), pt(0.6, 0.55), pt(0.7, 0.70), pt(0.8, 0.85)]
    assert _extrapolate(steep, 0.8)["within_10pct"] == 1.0  # capped at 100%
    assert _extrapolate([pt(0.5, 0.3), pt(0.6, 0.9), pt(0.7, 0.4)], 0.7) is None  # no steady trend
    assert _extrapolate([pt(0.5, 0.6), pt(0.6, 0.5), pt(0.7, 0.4)], 0.7) is None  # falling
    assert _extrapolate(rising[:2], 0.6) is None  # too few points
    b = {"remaining": {"blocks": 40, "minutes": 12.2, "rounds": 3}, "reached": {"within_10pct": 0.7},
         "extrapolation": ex}
    s = _sentence(b)
    assert s.startswith("measuring the remaining 40 blocks (~12 min at the measured rate, 3 round(s) each) would")
    assert "an estimate from the curve's trend" in s and "from 70.0% to about 91%" in s
    assert "no steady trend" in _sentence({**b, "extrapolation": None})


@pytest.mark.slow
def test_validate_budget_report_refits_on_the_first_minutes(budgeted, tmp_path):
    from nas.latency.predict.predictor import LatencyPredictor
    from nas.latency.predict.scoring import score
    from nas.latency.profile.budget_curve import budget_plot, budget_report
    from nas.latency.profile.validate import ValidationSet, held_out_archs

    dev, keys, nets, one, path, rep, saved = budgeted
    held = held_out_archs(load_space("tiny"), 30, exclude={a.digest() for a in nets})
    truth = [dev.net_ms(a) for a in held]
    vs = ValidationSet(held, truth, ["tiny"] * len(held))
    model = LatencyPredictor(refresh=False).fit(saved)
    b = budget_report(model, vs, space_keys=keys, reached=score(model.predict(held), truth))
    assert b["blocks"]["measured"] == len(saved.entries) < len(keys) and b["budget_min"] == [2.5]
    assert 0 < b["time_covered"] < 1 and b["stopped_by_budget"]
    curve = b["curve"]
    assert len(curve) >= 3 and [p["minutes"] for p in curve] == sorted(p["minutes"] for p in curve)
    assert curve[-1]["blocks"] == len(saved.entries) and curve[-1]["within_10pct"] == b["reached"]["within_10pct"]
    assert curve[0]["blocks"] < curve[-1]["blocks"] and curve[0]["time_covered"] < curve[-1]["time_covered"]
    left = len(keys) - len(saved.entries)
    assert b["remaining"] == {"blocks": left, "rounds": 1, "minutes": pytest.approx(left / 60),
                              "seconds_per_block_round": pytest.approx(1.0)}
    assert b["sentence"].startswith(f"measuring the remaining {left} blocks (~{left / 60:.1f} min at the measured rate")
    assert ("an estimate from the curve's trend" in b["sentence"]) == (b["extrapolation"] is not None)
    assert budget_plot(b, tmp_path / "b.png") and (tmp_path / "b.png").stat().st_size > 5000
    # the complete table: no blocks left; never built under a budget (no log): no budget section
    profile_jobs.run_jobs(profile_jobs.plan_jobs(keys, nets, saved, one, call_ms=call_ms), None, saved, one, path=path,
                      progress=False, clock=dev.clock)
    full = LatencyTable.load(path)
    model = LatencyPredictor(refresh=False).fit(full)
    done = budget_report(model, vs, space_keys=keys, reached=score(model.predict(held), truth))
    assert done["blocks"]["share"] == 1.0 and done["extrapolation"] is None and "every block" in done["sentence"]
    del full.metadata["profile_log"]
    assert budget_report(LatencyPredictor(refresh=False).fit(full), vs, space_keys=keys, reached={}) is None
