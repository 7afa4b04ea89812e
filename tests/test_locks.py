"""One writer per thing: a run's training and a table's profile take a writer's lock (a second process
is refused in one line, or waits with ``wait``), runs sharing a table never time one item at once
(claims), and lock files stay in a hidden folder beside what they guard."""

import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nas._io import LOCK_DIR, Busy, exclusive, file_lock, lock_path
from nas.arch import BlockKey, ConvBlock
from nas.latency.profile import jobs as profile_jobs
from nas.latency.profile.claims import Claims
from nas.latency.runtimes.loop import ProfileSettings
from nas.latency.tables.table import Entry, LatencyTable
from nas.search.journal import journal_lock_path
from nas.target import load_target
from nas.train.pipeline import train_front
from nas.train.settings import PipelineSettings

CTX = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
ROOT = Path(__file__).resolve().parents[1]
META = {"source": "measured", "target": "cpu", "device": {"name": "Test CPU", "kind": "cpu"},
        "runtime": {"name": "onnxruntime", "version": "1.0", "provider": "CPUExecutionProvider"},
        "precision": "fp32", "batch": 1, "threads": 1, "measurement": {}, "call_overhead_ms": 0.005}


def _hold(path, what, held, release):
    with exclusive(path, what=what, command="python -m nas.train conf=cpu run=r"):
        held.set()
        release.wait(timeout=900)  # until the test ends (a command started on a busy core may take minutes to ask)


@pytest.fixture
def holder(tmp_path):
    """``holder(path, what)``: another process holding ``path``'s writer's lock until the test ends."""
    procs = []

    def start(path, what="training into r"):
        held, release = CTX.Event(), CTX.Event()
        p = CTX.Process(target=_hold, args=(path, what, held, release))
        p.start()
        assert held.wait(timeout=60)
        procs.append((p, release))
        return p, release

    yield start
    for p, release in procs:
        if p.is_alive():  # a killed one may have died holding the event's own lock
            release.set()
            p.join(timeout=30)


def test_a_second_writer_is_refused_in_one_line_naming_the_first(tmp_path, holder):
    out = tmp_path / "run" / "train"
    p, _ = holder(out)
    with pytest.raises(Busy) as e:
        with exclusive(out, what="training into r"):
            pass
    msg = str(e.value)
    assert "\n" not in msg and f"process {p.pid} on {socket.gethostname()}" in msg
    assert "python -m nas.train conf=cpu run=r" in msg and "wait=true" in msg


def test_with_wait_a_second_writer_says_so_and_starts_when_the_first_ends(tmp_path, holder):
    out = tmp_path / "run" / "train"
    p, release = holder(out)
    said = []

    def say(line):
        said.append(line)
        release.set()  # the first ends once the second is queued

    with exclusive(out, what="training into r", wait=True, say=say):
        assert not p.is_alive() or p.join(timeout=30) is None
        assert p.exitcode == 0
    assert len(said) == 1 and said[0].startswith("waiting: training into r is in progress in process")


def test_a_killed_writer_frees_the_lock(tmp_path, holder):
    out = tmp_path / "t.json"
    p, _ = holder(out)
    p.kill()
    p.join(timeout=30)
    with exclusive(out, what="x"):  # an OS lock: gone with its process
        pass


def test_train_front_refuses_a_second_training_of_one_run_before_anything(tmp_path, holder):
    run = tmp_path / "run"
    run.mkdir()
    holder(run / "train")
    before = sorted(p.relative_to(run) for p in run.rglob("*") if LOCK_DIR not in p.parts)
    with pytest.raises(Busy, match="wait=true"):
        train_front(PipelineSettings(run=str(run), target=load_target("cpu")))
    assert sorted(p.relative_to(run) for p in run.rglob("*") if LOCK_DIR not in p.parts) == before


def test_nas_profile_of_a_taken_table_exits_2_in_one_line(tmp_path, holder):
    out = tmp_path / "t.json"
    holder(out.with_name(f"t.json@{socket.gethostname()}"), what=f"profiling into {out}")
    r = subprocess.run([sys.executable, "-m", "nas.profile", "conf=cpu", "search_space=tiny", f"out={out}",
                        "calibration_networks=0", "pruned_networks=0", "progress=false"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "wait=true" in r.stderr
    assert not out.exists()


def test_lock_files_live_in_a_hidden_folder(tmp_path):
    with file_lock(tmp_path / "pareto.json"):
        pass
    assert journal_lock_path(tmp_path / "study.journal") == tmp_path / LOCK_DIR / "study.journal.flock"
    assert lock_path(tmp_path / "run.json") == tmp_path / LOCK_DIR / "run.json.lock"
    assert [p.name for p in tmp_path.iterdir()] == [LOCK_DIR]


# ---- claims: runs sharing a table never time one item at once -------------------------------------

def _fake_measure(log):
    def measure(key, runtime, settings):
        t0 = time.time()
        time.sleep(0.005)
        with open(log, "a") as f:
            f.write(json.dumps([os.getpid(), key.block.out_ch, t0, time.time()]) + "\n")
        return Entry(0.1 + key.block.out_ch / 1000, 0.09, 0.12, 3)
    return measure


def _profile(out, log, start, results):
    """One run measuring the same 30 blocks (2 rounds) as the other, into one table file."""
    profile_jobs.measure_key = _fake_measure(log)
    keys = [BlockKey(ConvBlock(c, 3, 1, "relu"), 3, 8, 8) for c in range(8, 38)]
    table = LatencyTable(metadata=dict(META), path=out)
    settings = ProfileSettings(rounds=2, save_every_s=0.0)
    jobs = profile_jobs.plan_jobs(keys, [], table, settings, call_ms=lambda item, kind: 0.1)
    start.wait(timeout=60)
    rep = profile_jobs.run_jobs(jobs, None, table, settings, path=out, progress=False)
    results.put((len(rep.done), rep.by_others, rep.left))


def test_two_runs_of_the_same_blocks_never_time_one_at_once(tmp_path):
    out, log = tmp_path / "t.json", tmp_path / "timings.jsonl"
    start, results = CTX.Barrier(2), CTX.Queue()
    procs = [CTX.Process(target=_profile, args=(out, log, start, results)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    reps = [results.get(timeout=10) for _ in procs]
    spans = [json.loads(line) for line in log.read_text().splitlines()]
    for pid, ch, t0, t1 in spans:
        for pid2, ch2, s0, s1 in spans:
            assert not (ch == ch2 and pid != pid2 and s0 < t1 and t0 < s1), f"block {ch} timed by two at once"
    assert len(spans) == 60  # each round of each block measured once, by one run or the other
    assert sum(done for done, _, _ in reps) == 60 and all(done + others == 60 for done, others, _ in reps)
    assert all(left == 0 for _, _, left in reps)
    table = LatencyTable.load(out)
    assert len(table) == 30 and all(e.rounds == 2 for e in table.entries.values())
    assert not list((tmp_path / LOCK_DIR / "t.json.claims").glob("b*"))  # every claim went with its save


def test_a_dead_or_stale_claim_is_taken_over_a_live_one_is_not(tmp_path):
    claims = Claims(tmp_path / "t.json", stale_s=60)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    f = claims.folder / "b1"
    f.write_text(json.dumps({"host": claims.host, "pid": int(dead.stdout), "since": 0}))
    assert claims.take("b1")  # its process is gone
    g = claims.folder / "b2"
    g.write_text(json.dumps({"host": "elsewhere", "pid": 1, "since": time.time()}))
    assert not claims.take("b2") and claims.holder("b2") == "process 1 on elsewhere"
    os.utime(g, (time.time() - 120, time.time() - 120))
    assert claims.take("b2")  # another host's claim older than stale_s
    h = claims.folder / "b3"
    h.write_text(json.dumps({"host": claims.host, "pid": os.getppid(), "since": 0}))
    assert not claims.take("b3")  # a live process on this host, however old
    claims.release()
    assert sorted(p.name for p in claims.folder.iterdir() if p.name.startswith("b")) == ["b3"]


def test_an_item_another_run_is_timing_waits_to_the_end_and_is_skipped_once_saved(tmp_path, caplog, monkeypatch):
    """A block another live run has claimed is put off; once that run saves it and drops its claim,
    this run skips it (never timing it) and says once that it waited."""
    out = tmp_path / "t.json"
    keys = [BlockKey(ConvBlock(c, 3, 1, "relu"), 3, 8, 8) for c in (8, 16, 24)]
    timed = []
    monkeypatch.setattr(profile_jobs, "measure_key", lambda key, runtime, settings: timed.append(key)
                        or Entry(0.1, 0.09, 0.12, 3))
    table = LatencyTable(metadata=dict(META), path=out)
    settings = ProfileSettings(rounds=1, save_every_s=0.0)
    jobs = profile_jobs.plan_jobs(keys, [], table, settings, call_ms=lambda item, kind: 0.1)
    claims = Claims(out)
    taken = claims.folder / profile_jobs.job_id(keys[1], "block")
    taken.write_text(json.dumps({"host": claims.host, "pid": os.getppid(), "since": time.time()}))  # a live run

    def other_run_saves():  # once this run has seen the claim and waits for it (no host timing involved)
        deadline = time.monotonic() + 120
        while not any("waiting for 1 measurement" in r.getMessage() for r in caplog.records) \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        theirs = LatencyTable(metadata=dict(META), path=out)
        theirs.entries[keys[1]] = Entry(0.2, 0.19, 0.22, 3)
        theirs.save(out)
        taken.unlink()

    other = threading.Thread(target=other_run_saves)
    other.start()
    with caplog.at_level("WARNING", logger="nas.latency.profile.jobs"):
        rep = profile_jobs.run_jobs(jobs, None, table, settings, path=out, progress=False)
    other.join()
    assert timed == [keys[0], keys[2]] and rep.by_others == 1 and rep.left == 0
    assert [r.message.count("waiting for 1 measurement") for r in caplog.records] == [1]
    assert LatencyTable.load(out).entries[keys[1]].median_ms == 0.2


def test_a_block_another_run_saves_between_a_look_and_a_claim_is_not_timed_again(tmp_path, monkeypatch):
    # this run looks (not in the file yet), the other run saves the block and lets its claim go, this run
    # claims it: it must look again rather than time what is saved (two runs measured one block twice)
    out = tmp_path / "t.json"
    keys = [BlockKey(ConvBlock(c, 3, 1, "relu"), 3, 8, 8) for c in (8, 16)]
    table = LatencyTable(metadata=dict(META), path=out)
    table.save(out)
    settings = ProfileSettings(rounds=1, save_every_s=0.0)
    jobs = profile_jobs.plan_jobs(keys, [], table, settings, call_ms=lambda item, kind: 0.1)
    shared = profile_jobs._Shared(table, out, {"block": table.entries, "network": table.networks}, stale_s=600)
    take = shared.claims.take

    def take_after_the_other_saved(name):
        if name == profile_jobs.job_id(keys[0], "block"):
            other = LatencyTable.load(out)
            other.entries[keys[0]] = Entry(0.2, 0.19, 0.21, 3)
            other.save(out)
        return take(name)

    monkeypatch.setattr(shared.claims, "take", take_after_the_other_saved)
    skipped = []
    assert [j.item for j in shared.schedule(list(jobs), skipped.append)] == [keys[1]]
    assert [j.item for j in skipped] == [keys[0]] and shared.by_others == 1
    assert not (shared.claims.folder / profile_jobs.job_id(keys[0], "block")).exists()  # the claim let go
