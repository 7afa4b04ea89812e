"""A profile that knows when the machine misled it: contention readings, anchors re-timed through the run,
measurements the machine misled kept out of the table, and a real profile beside a CPU hog."""

import os
import subprocess
import sys
import time

import pytest

from nas.arch import BlockKey, ConvBlock
from nas.latency.profile import jobs as profile_jobs
from nas.latency.profile import watch
from nas.latency.profile import workflow as profile_workflow
from nas.latency.profile.watch import Contention, Watch, contended, noise_note, read_steal_s, read_wait_s
from nas.latency.runtimes.loop import ProfileSettings
from nas.latency.tables.table import Entry, LatencyTable

META = {"source": "measured", "target": "cpu", "device": {"name": "Test CPU", "kind": "cpu"},
        "runtime": {"name": "onnxruntime", "version": "1.0", "provider": "CPUExecutionProvider"},
        "precision": "fp32", "batch": 1, "threads": 1, "measurement": {}, "call_overhead_ms": 0.005}
S = ProfileSettings(warmup=1, repeats=3, min_time_s=0.0, rounds=1, save_every_s=0.0)
KEYS = [BlockKey(ConvBlock(c, 3, 1, "relu"), 3, 8, 8) for c in range(8, 48)]


def test_wait_is_summed_over_threads_and_steal_read_for_own_cpus(tmp_path):
    for tid, line in (("11", "500 2000000000 7\n"), ("12", "100 500000000 3\n")):
        (tmp_path / tid).mkdir()
        (tmp_path / tid / "schedstat").write_text(line)
    (tmp_path / "13").mkdir()  # a thread without the file (gone, or no schedstats): left out
    assert read_wait_s(tmp_path) == pytest.approx(2.5)
    assert read_wait_s(tmp_path / "absent") is None  # no /proc (macOS): unknown, never an error
    stat = tmp_path / "stat"
    tick = os.sysconf("SC_CLK_TCK")
    stat.write_text(f"cpu  1 2 3 4 5 6 7 {3 * tick} 0 0\ncpu0 1 2 3 4 5 6 7 {tick} 0 0\n"
                    f"cpu1 1 2 3 4 5 6 7 {2 * tick} 0 0\nintr 5\n")
    assert read_steal_s({0}, stat) == pytest.approx(1.0)
    assert read_steal_s({0, 1}, stat) == pytest.approx(1.5)  # averaged over the CPUs it may run on
    assert read_steal_s({0}, tmp_path / "nope") is None
    if os.path.isdir("/proc/self/task"):  # the real readers
        assert read_wait_s() >= 0.0


def test_anchors_are_cheap_blocks_of_every_size_else_two_networks():
    jobs = [profile_jobs.Job(k, "block", 1, 0.1 * i) for i, k in enumerate(KEYS[:9])]
    assert watch.pick_anchors(jobs) == [(KEYS[i], "block") for i in (0, 2, 4, 6)]  # the priciest quarter left out
    assert watch.pick_anchors(jobs[:2]) == [(KEYS[0], "block"), (KEYS[1], "block")]
    nets = [profile_jobs.Job(f"net{i}", "network", 1, 3.0 - i) for i in range(3)]
    assert watch.pick_anchors(nets) == [("net2", "network"), ("net1", "network")]
    assert watch.pick_anchors([]) == []


class FakeMachine:
    """A fake clock and run queue: ``busy`` is the share of wall time waited while measuring."""

    def __init__(self):
        self.t = self.waited = 0.0
        self.busy = 0.0

    def run(self, seconds):
        self.t += seconds
        self.waited += self.busy * seconds

    def contention(self, known=True):
        return Contention(wait=lambda: self.waited if known else None, steal=lambda: None, clock=lambda: self.t)


def test_contention_share_and_threshold():
    m = FakeMachine()
    c = m.contention()
    c.start()
    m.run(0.2)
    assert c.since() == (pytest.approx(0.2), 0.0) and not contended(*c.since())
    m.busy = 0.5
    c.start()
    m.run(0.2)
    assert c.since() == (pytest.approx(0.2), pytest.approx(0.1)) and contended(*c.since())
    assert not contended(0.01, 0.001)  # one preemption in a short measurement is not judged
    assert contended(0.01, 0.005)
    unknown = m.contention(known=False)
    unknown.start()
    m.run(0.2)
    assert unknown.since()[1] is None and not contended(*unknown.since())
    with pytest.raises(RuntimeError, match="before start"):
        m.contention().since()


def test_noise_note_compares_with_earlier_runs():
    assert noise_note([], 87, 59).startswith("noise: 59 of 87 measurements (68%) were re-measured for noise")
    assert noise_note([], 87, 10) is None
    earlier = [{"measured": 100, "remeasured": 5}, {"measured": 50, "remeasured": 4}]
    assert "against 6% in earlier runs into this table" in noise_note(earlier, 100, 30)
    assert noise_note(earlier, 100, 10) is None
    assert noise_note(earlier, 5, 5) is None  # too few to say


class Device(FakeMachine):
    """Fake measurements on the fake machine: a block takes 1 s and measures ``speed`` times its
    own figure; ``slow(t0, t1, factor)`` makes the machine that much slower in that window."""

    def __init__(self, monkeypatch):
        super().__init__()
        self.seen, self.windows = [], []
        monkeypatch.setattr(profile_jobs, "measure_key", self.measure)

    def truth(self, k):
        return 0.01 * k.block.out_ch

    def speed(self):
        return next((f for a, b, f in self.windows if a <= self.t < b), 1.0)

    def measure(self, k, rt, s):
        ms = self.truth(k) * self.speed()
        self.run(1.0)
        self.seen.append(k)
        return Entry(ms, 0.98 * ms, 1.02 * ms, 3)


def _run(dev, path, budget_s=None, **kw):
    table = LatencyTable(metadata=dict(META), path=path)
    jobs = profile_jobs.plan_jobs(KEYS, [], table, S, call_ms=lambda i, k: 0.1)
    w = Watch(contention=dev.contention(), clock=lambda: dev.t, every_s=10.0, **kw)
    rep = profile_jobs.run_jobs(jobs, None, table, S, path=path, progress=False, clock=lambda: dev.t,
                                budget_s=budget_s, watch=w)
    return rep, w, LatencyTable.load(path)


def test_anchors_that_moved_keep_their_window_out_and_measure_it_again(tmp_path, monkeypatch):
    dev = Device(monkeypatch)
    dev.windows = [(22.0, 36.0, 1.6)]  # the machine 1.6x slower from mid-run to just after the second check
    rep, w, saved = _run(dev, tmp_path / "t.json")
    checks = w.record()["checks"]
    assert [c["moved"] for c in checks].count(True) == 1 and checks[1]["ratio"] == pytest.approx(1.6)
    assert w.counts["affected"] == w.counts["requeued"] == 10  # the window since the last good check
    assert rep.left == 0 and len(saved) == len(KEYS) and w.summary().startswith(
        "the machine misled the profile: anchors moved to 1.60x their first timing at")
    # every figure saved is the quiet machine's: the slow window's were measured again, not saved
    assert all(e.median_ms == pytest.approx(dev.truth(k)) for k, e in saved.entries.items())
    assert len(dev.seen) == len(KEYS) + 10 + 4 * (2 + len(checks))  # anchors: twice at the start, once a check
    run = saved.metadata["profile_log"][-1]
    assert run["watch"]["affected"] == 10 and run["watch"]["checks"] == checks and run["measured"] == len(KEYS) + 10
    # the log lists each saved measurement once, in the order saved
    assert len(run["jobs"]) == len(KEYS) and len({j[0] for j in run["jobs"]}) == len(KEYS)


def test_a_quiet_run_saves_everything_and_says_nothing(tmp_path, monkeypatch):
    dev = Device(monkeypatch)
    rep, w, saved = _run(dev, tmp_path / "t.json")
    assert w.summary() is None and w.counts == {"contended": 0, "retried": 0, "affected": 0, "requeued": 0}
    assert len(saved) == len(KEYS) and rep.left == 0 and len(w.record()["checks"]) >= 4
    # a few measurements quiet on their retry (a preemption): the table holds only quiet figures, so nothing to say
    w.counts["retried"] = 3
    assert w.summary() is None and w.measured == len(KEYS)
    # many retried, every retry quiet: the core was shared, and the run says so though it saved them all
    w.counts["retried"] = 5
    assert w.summary() == ("the machine misled the profile: 5 measurements waited for the CPU and were retried, 0 of "
                           "them again (run-queue wait 0% of the measuring time)")
    w.counts.update(contended=1, affected=2, requeued=2)
    assert w.summary().endswith("2 measurements not saved (2 put back in the plan), each measured again since")
    w.missing = {"b1"}  # one not measured well again before the budget ran out
    assert w.summary().endswith("2 measurements not saved (2 put back in the plan), 1 of them not measured well "
                                "since: left for the next run")


def test_a_machine_that_stays_slow_stops_the_run(tmp_path, monkeypatch):
    dev = Device(monkeypatch)
    dev.windows = [(25.0, 1e9, 2.0)]
    rep, w, saved = _run(dev, tmp_path / "t.json")
    assert w.stopped.startswith("the machine changed under the profile: its anchors ran at 2.00x their "
                                "first timing at 3 checks in a row, so the profile stopped; 30 measurements the "
                                "machine misled were not saved")
    assert all(e.median_ms == pytest.approx(dev.truth(k)) for k, e in saved.entries.items())  # none slow saved
    assert len(saved) == 10 and rep.left == len(KEYS) - 10 and saved.metadata["profile_log"][-1]["watch"]["stopped"]


def test_contended_measurements_are_retried_then_put_back_then_stop_the_run(tmp_path, monkeypatch):
    dev = Device(monkeypatch)
    real, hogged = dev.measure, set()

    def hog_for_some(k, rt, s):  # a hog comes and goes: the first try of every 7th block waits, then all from 30 s
        dev.busy = 0.5 if dev.t >= 30 or (KEYS.index(k) % 7 == 5 and dev.seen.count(k) == 0) else 0.0
        if dev.t >= 30:
            hogged.add(k)
        return real(k, rt, s)

    monkeypatch.setattr(profile_jobs, "measure_key", hog_for_some)
    rep, w, saved = _run(dev, tmp_path / "t.json")
    assert w.counts["retried"] >= 2 + watch.STOP_AFTER and w.counts["contended"] == watch.STOP_AFTER
    assert w.stopped.startswith("another process shared this CPU: 50% of the last 5 measurements' time was spent "
                                "waiting for the core")
    assert "then the same command again" in w.stopped
    # nothing measured while the hog ran is saved (the anchors' timings never are)
    hogged -= {item for item, _ in w.anchors.items}
    assert hogged and not hogged & set(saved.entries) and 0 < len(saved) < len(KEYS)
    assert rep.left == len(KEYS) - len(saved)


def test_ctrl_c_keeps_the_measurements_held_back(tmp_path, monkeypatch):
    dev = Device(monkeypatch)
    real = dev.measure

    def stop_at_26th(k, rt, s):  # mid-window: 3 jobs measured since the last check, not checked yet
        if len(dev.seen) == 25:
            raise KeyboardInterrupt
        return real(k, rt, s)

    monkeypatch.setattr(profile_jobs, "measure_key", stop_at_26th)
    with pytest.raises(KeyboardInterrupt):
        _run(dev, tmp_path / "t.json")
    saved = LatencyTable.load(tmp_path / "t.json")
    assert len(saved) == 10 + 3  # every job measured: 10 checked, 3 held back (anchor timings are never saved)
    assert not list((tmp_path / ".locks").rglob("b*"))  # and no claim left behind


def test_a_save_keeps_the_claims_of_measurements_held_back(tmp_path):
    from nas.latency.profile.claims import Claims

    c = Claims(tmp_path / "t.json")
    assert c.take("b1") and c.take("b2")
    c.release(keep=["b2"])  # b1 saved; b2 measured, held back: another run must not take it meanwhile
    assert c.mine == {"b2"} and not (c.folder / "b1").exists() and (c.folder / "b2").exists()
    c.release()
    assert not c.mine and not list(c.folder.glob("b*"))


# -- the real thing: a profile on a core another process keeps busy


def _busy_share(seconds=0.3):
    """This process's run-queue wait as a share of a busy loop's wall time (None: unknown)."""
    c = Contention()
    c.start()
    t = time.monotonic()
    while time.monotonic() - t < seconds:
        pass
    wall, waited = c.since()
    return None if waited is None else waited / wall


@pytest.fixture
def one_core():
    """This process (and the threads it starts) on one of its cores, torch on one thread: the core."""
    torch = pytest.importorskip("torch")
    if not hasattr(os, "sched_setaffinity") or _busy_share(0.01) is None:
        pytest.skip("needs Linux's sched_setaffinity and /proc/self/task/*/schedstat")
    before, threads = os.sched_getaffinity(0), torch.get_num_threads()
    core = min(before)
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    try:
        yield core
    finally:
        os.sched_setaffinity(0, before)
        torch.set_num_threads(threads)


def _profile(tmp_path, monkeypatch):
    """A small real profile of tiny's blocks (onnxruntime, this CPU); each block measurement's own
    contention is recorded (``(key, contended)``, in order), read beside the profile's own checks."""
    judged, real = [], profile_jobs.measure_key

    def measure_key(key, runtime, settings):
        c = Contention()
        c.start()
        entry = real(key, runtime, settings)
        judged.append((key, contended(*c.since())))
        return entry

    monkeypatch.setattr(profile_jobs, "measure_key", measure_key)
    cpu = {"name": "cpu", "runtime": "onnxruntime", "provider": "CPUExecutionProvider", "precision": "fp32",
           "batch": 1, "threads": 1, "latency_budget_ms": 10.0,
           "device": {"name": None, "kind": "cpu", "peak_gflops": 50.0, "mem_bandwidth_gbs": 10.0}}
    lines, out = [], tmp_path / "t.json"
    rep = profile_workflow.profile_target(cpu, spaces="tiny", out=out, settings=S, limit=12, calibration_networks=0,
                                          pruned_networks=0, progress=False, say=lines.append)
    return rep, lines, LatencyTable.load(out), judged


def test_a_profile_beside_a_cpu_hog_says_so_and_saves_nothing_it_misled(tmp_path, monkeypatch, one_core):
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(hog.pid, {one_core})
        time.sleep(0.2)
        rep, lines, saved, judged = _profile(tmp_path, monkeypatch)
    finally:
        hog.kill()
        hog.wait()
    # no block whose every measurement waited for the CPU is in the table
    clean = {k for k, bad in judged if not bad}
    assert any(bad for _, bad in judged) and set(saved.entries) <= clean, \
        f"{len(set(saved.entries) - clean)} blocks saved from contended measurements"
    told = [line for line in lines if "another process shared this CPU" in line or "misled the profile" in line]
    assert told, lines
    w = rep["watch"]
    # the watch saw the hog: measurements retried (a retry may fall in the profile's own time slice and be
    # quiet, so none need be contended twice) or a check that waited
    assert (w["retried"] >= 1 or any(c["busy"] for c in w["checks"])) and w["wait_share"] > 0.1, w
    assert len(saved.entries) + rep["left"] == 12 and saved.metadata["profile_log"][-1]["watch"] == w


def test_a_profile_on_a_quiet_core_reports_nothing(tmp_path, monkeypatch, one_core):
    share = _busy_share()
    if share > 0.02:
        pytest.skip(f"core {one_core} is not quiet: another process took {share:.0%} of it")
    rep, lines, saved, judged = _profile(tmp_path, monkeypatch)
    if rep["watch"]["wait_share"] > 0.1:
        pytest.skip(f"core {one_core} got busy during the test: {rep['watch']['wait_share']:.0%} waited")
    # a machine whose speed moves (a shared host's neighbours, a clock frequency) moves the anchors: the profile
    # is right to say so, and this test (the readings of a steady core) has nothing to judge
    moved = [c for c in rep["watch"]["checks"] if c["moved"] or c["busy"]]
    if moved:
        pytest.skip(f"the machine's speed moved during the test: anchors at {moved[0]['ratio']}x their first timing")
    assert not any("misled" in line or "another process" in line for line in lines), lines
    assert rep["watch"]["affected"] == 0 and len(saved.entries) == 12


def test_the_command_beside_a_cpu_hog_stops_with_exit_1(tmp_path, one_core):
    # a script chaining nas.profile && nas.search must not go on with a table the machine misled
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(hog.pid, {one_core})
        r = subprocess.run([sys.executable, "-m", "nas.profile", "conf=cpu", "conf.device.name=null",
                            "conf.device.cpu_flags=[]", "search_space=tiny", "limit=12", "progress=false",
                            f"out={tmp_path / 't.json'}"], capture_output=True, text=True, timeout=600)
    finally:
        hog.kill()
        hog.wait()
    assert r.returncode == 1, r.stdout + r.stderr
    assert "another process shared this CPU" in r.stdout and "then the same command again" in r.stdout
