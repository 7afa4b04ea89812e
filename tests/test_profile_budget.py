"""The profile as one planned job: its whole-job total, the time budget and its order, a re-run continuing."""

from collections import Counter

import pytest

from nas.arch import BlockKey, ConvBlock
from nas.latency import profiler
from nas.latency.measure import ProfileSettings
from nas.latency.profile_workflow import check_budget, profile_target
from nas.latency.table import Entry, LatencyTable
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
        monkeypatch.setattr(profiler, "measure_key", lambda k, rt, s: self._take(k, 1.0))
        monkeypatch.setattr(profiler, "measure_arch", lambda a, rt, s: self._take(a, 4.0))

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
    jobs = profiler.plan_jobs(KEYS, nets, table, S, call_ms=call_ms)
    assert sum(j.kind == "block" for j in jobs) == 3 * len(KEYS) - 1
    assert sum(j.kind == "network" for j in jobs) == 3 * len(nets) - 2
    assert [j.round for j in jobs] == sorted(j.round for j in jobs)  # round by round
    assert (KEYS[0], 1) not in {(j.item, j.round) for j in jobs}
    # the bar's total is the whole plan's expected time, every round included
    eta = profiler._Eta(jobs)
    assert eta.remaining() == pytest.approx(sum(j.cost_s for j in jobs))
    net_s = profiler.expected_seconds(nets[1], "network", S, 2.0)
    assert net_s > profiler.expected_seconds(KEYS[1], "block", S, 0.1)  # a network costs more than a block
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
    jobs = profiler.plan_jobs(KEYS[:4], nets[:1], LatencyTable(metadata=dict(META)), S, call_ms=call_ms)
    eta = profiler._Eta(jobs)
    b = next(j for j in jobs if j.kind == "block")
    eta.done(b, 2 * b.cost_s)  # blocks take twice the plan; networks, unseen, are assumed to as well
    left = [j for j in jobs if j is not b]
    assert eta.remaining() == pytest.approx(2 * sum(j.cost_s for j in left))


def test_budget_stops_early_most_used_blocks_and_networks_first(tmp_path, nets, monkeypatch):
    dev = FakeDevice(monkeypatch)
    path = tmp_path / "t.json"
    table = LatencyTable(metadata=dict(META), path=path)
    freq = Counter({KEYS[-1]: 50, KEYS[-2]: 40, KEYS[5]: 30})
    jobs = profiler.plan_jobs(KEYS, nets, table, S, call_ms=call_ms, freq=freq)
    rep = profiler.run_jobs(jobs, None, table, S, path=path, progress=False, budget_s=12.0, clock=dev.clock)
    assert rep.stopped_by_budget and 0 < rep.left < len(jobs) and dev.t <= 12.0
    blocks = [x for x in dev.seen if isinstance(x, BlockKey)]
    assert blocks[:3] == [KEYS[-1], KEYS[-2], KEYS[5]]  # the most used first
    assert any(x in nets for x in dev.seen)  # and calibration networks among the first
    saved = LatencyTable.load(path)  # what was measured is saved
    assert set(saved.entries) == set(blocks) and set(saved.networks) == {x for x in dev.seen if x in nets}

    # a second run with a larger budget continues where the first stopped: nothing measured twice
    dev.seen.clear()
    again = profiler.plan_jobs(KEYS, nets, saved, S, call_ms=call_ms, freq=freq)
    assert len(again) == rep.left
    rep2 = profiler.run_jobs(again, None, saved, S, path=path, progress=False, budget_s=1e6, clock=dev.clock)
    assert not rep2.stopped_by_budget and rep2.left == 0
    done1 = {(j.item, j.round) for j in rep.done}
    assert not done1 & {(j.item, j.round) for j in rep2.done}
    final = LatencyTable.load(path)
    assert all(e.rounds == 3 for e in final.entries.values()) and len(final) == len(KEYS)
    assert all(e.rounds == 3 for e in final.networks.values()) and len(final.networks) == len(nets)


def test_ctrl_c_keeps_what_was_measured(tmp_path, nets, monkeypatch):
    dev = FakeDevice(monkeypatch)
    real = profiler.measure_key

    def stop_at_fifth(k, rt, s):
        if len(dev.seen) == 5:
            raise KeyboardInterrupt
        return real(k, rt, s)

    monkeypatch.setattr(profiler, "measure_key", stop_at_fifth)
    path = tmp_path / "t.json"
    table = LatencyTable(metadata=dict(META), path=path)
    jobs = profiler.plan_jobs(KEYS, nets, table, ProfileSettings(**{**S.__dict__, "save_every_s": 3600.0}),
                              call_ms=call_ms)
    with pytest.raises(KeyboardInterrupt):
        profiler.run_jobs(jobs, None, table, S, path=path, progress=False, clock=dev.clock)
    saved = LatencyTable.load(path)
    assert len(saved) + len(saved.networks) == 5


@pytest.mark.parametrize("bad", [0, -1, -0.5, "ten", True])
def test_bad_budget_is_refused(bad):
    with pytest.raises(ValueError, match="budget_min"):
        check_budget(bad)


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
    from nas.latency.predictor import LatencyPredictor

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
