"""Two processes profiling disjoint blocks into one table path at once lose nothing."""

import multiprocessing as mp
import sys
import time

from nas.arch import BlockKey, ConvBlock
from nas.latency.profile import profiler
from nas.latency.runtimes.loop import ProfileSettings
from nas.latency.tables.table import Entry, LatencyTable

META = {"source": "measured", "target": "cpu", "device": {"name": "Test CPU", "kind": "cpu"},
        "runtime": {"name": "onnxruntime", "version": "1.0", "provider": "CPUExecutionProvider"},
        "precision": "fp32", "batch": 1, "threads": 1, "measurement": {}, "call_overhead_ms": 0.005}


def _fake_measure(key, runtime, settings):
    time.sleep(0.003)
    return Entry(0.1 + key.block.out_ch / 1000, 0.09, 0.12, 3)


def _run(out, first, count, start, results):
    """One profiling run of ``count`` blocks (a fast fake measurement), saving after every block."""
    profiler.measure_key = _fake_measure
    keys = [BlockKey(ConvBlock(c, 3, 1, "relu"), 3, 8, 8) for c in range(first, first + count)]
    table = LatencyTable(metadata=dict(META), path=out)
    start.wait(timeout=60)  # both runs measure, and save, at the same time
    rep = profiler.profile_blocks(keys, None, table, settings=ProfileSettings(rounds=2, save_every_s=0.0),
                                  progress=False)
    results.put((first, rep.measured, len(table), table.others_added))


def test_two_runs_into_one_table_lose_nothing(tmp_path):
    # fork starts in milliseconds (the parent has imported torch already); spawn where fork is unsafe
    ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    out, a, b = tmp_path / "t.json", 40, 30
    start, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_run, args=(out, first, n, start, results)) for first, n in ((8, a), (100, b))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    reports = {}
    for _ in procs:
        first, measured, entries, others = results.get(timeout=10)
        reports[first] = (measured, entries, others)
    table = LatencyTable.load(out)
    assert len(table) == a + b  # the union: nothing lost
    assert all(e.rounds == 2 for e in table.entries.values())  # and no round counted twice
    assert reports[8][0] == 2 * a and reports[100][0] == 2 * b
    # each run's count is the file's at its last save: its own entries and the other's so far
    for first, own in ((8, a), (100, b)):
        _, entries, others = reports[first]
        assert entries == own + others <= a + b
        assert others > 0  # they did save while the other did
    assert max(entries for _, entries, _ in reports.values()) == a + b
