import json

import pytest

from nas.arch import BlockKey, ConvBlock, MBConvBlock
from nas.latency.tables.table import (
    SCHEMA_VERSION,
    TABLES_DIR,
    Entry,
    LatencyTable,
    TableError,
    TableMismatchError,
    resolve_table_path,
)
from nas.target import Target

META = {
    "source": "measured",
    "target": "cpu",
    "device": {"name": "Test CPU", "kind": "cpu"},
    "runtime": {"name": "onnxruntime", "version": "1.0", "provider": "CPUExecutionProvider"},
    "precision": "fp32",
    "batch": 1,
    "threads": 1,
    "measurement": {"warmup": 1, "repeats": 3},
    "call_overhead_ms": 0.005,
}
DEVICE = {"name": "Test CPU", "kind": "cpu", "peak_gflops": 50.0, "mem_bandwidth_gbs": 10.0}
TARGET_FIELDS = {"name": "cpu", "runtime": "onnxruntime", "provider": "CPUExecutionProvider", "precision": "fp32",
                 "batch": 1, "threads": 1, "latency_budget_ms": 10.0, "device": DEVICE}
TARGET = Target.from_dict(TARGET_FIELDS)


def small_table() -> LatencyTable:
    t = LatencyTable(metadata=dict(META))
    t.add(BlockKey(ConvBlock(16, 3, 2, "relu"), 3, 32, 32), Entry(0.1, 0.09, 0.12, 50))
    t.add(BlockKey(MBConvBlock(24, 48, 5, 1, "hard_swish"), 16, 16, 16), Entry(0.2, 0.19, 0.25, 50, 1))
    return t


def test_round_trip(tmp_path):
    t = small_table()
    p = t.save(tmp_path / "t.json")
    back = LatencyTable.load(p)
    assert back.entries == t.entries
    assert back.metadata["device"]["name"] == "Test CPU" and "updated" in back.metadata
    assert json.loads(p.read_text())["schema_version"] == SCHEMA_VERSION


def test_corrupt_file(tmp_path):
    p = small_table().save(tmp_path / "t.json")
    p.write_text(p.read_text()[:-40])  # truncated
    with pytest.raises(TableError, match="corrupt latency table .not valid JSON"):
        LatencyTable.load(p)


def test_wrong_schema_version(tmp_path):
    p = small_table().save(tmp_path / "t.json")
    d = json.loads(p.read_text())
    d["schema_version"] = 99
    p.write_text(json.dumps(d))
    with pytest.raises(TableError, match="schema version 99 is not supported"):
        LatencyTable.load(p)


def test_not_a_table_and_malformed_entries(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("[1, 2, 3]")
    with pytest.raises(TableError, match="not a hwnas latency table"):
        LatencyTable.load(p)
    d = small_table().to_dict()
    d["entries"][1]["median_ms"] = "fast"
    p.write_text(json.dumps(d))
    with pytest.raises(TableError, match="entry 1 is malformed"):
        LatencyTable.load(p)
    d = small_table().to_dict()
    del d["metadata"]["device"]
    p.write_text(json.dumps(d))
    with pytest.raises(TableError, match="metadata lacks \\['device'\\]"):
        LatencyTable.load(p)
    with pytest.raises(FileNotFoundError, match="latency table not found"):
        LatencyTable.load(tmp_path / "missing.json")


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("precision", "int8", "precision: table has 'fp32', target 'cpu' wants 'int8'"),
        ("threads", 4, "threads: table has 1, target 'cpu' wants 4"),
        ("provider", "CUDAExecutionProvider", "runtime.provider"),
        ("device", {**DEVICE, "name": "Other CPU"}, "device.name: table has 'Test CPU'"),
    ],
)
def test_mismatched_target(field, value, message):
    t = small_table()
    target = Target.from_dict({**TARGET_FIELDS, field: value})
    with pytest.raises(TableMismatchError, match=message.replace("(", r"\(")):
        t.check_target(target)
    # explicitly overridable, and then the difference is reported, not hidden
    diffs = t.check_target(target, allow_mismatch=True)
    assert len(diffs) == 1 and message.split(":")[0] in diffs[0]


def test_matching_target_passes():
    assert small_table().check_target(TARGET) == []


def test_entry_spread_and_missing():
    t = small_table()
    k = next(iter(t))
    assert t.get(k).spread == pytest.approx((0.12 - 0.09) / 0.1)
    other = BlockKey(ConvBlock(8, 3, 1, "relu"), 3, 8, 8)
    assert t.missing([k, other]) == [other]


def test_resolve_table_path(tmp_path):
    assert resolve_table_path("cpu.json") == TABLES_DIR / "cpu.json"  # not in $HWNAS_HOME/latency_tables
    assert resolve_table_path(tmp_path / "t.json") == tmp_path / "t.json"


@pytest.mark.parametrize("name", ["cpu.json", "cpu_int8.json"])
def test_shipped_tables_are_measured_and_valid(name):
    """The committed tables load, say they were measured, and name this project's CPU."""
    p = TABLES_DIR / name
    t = LatencyTable.load(p)
    m = t.metadata
    assert m["source"] == "measured" and m["runtime"]["name"] == "onnxruntime"
    assert m["precision"] == ("int8" if "int8" in name else "fp32")
    assert m["batch"] == 1 and m["threads"] == 1
    assert m["device"]["kind"] == "cpu" and m["device"]["name"]
    import statistics

    rounds = m["measurement"]["rounds"]
    assert all(e.rounds == rounds for e in t.entries.values())  # every block has all its rounds
    for e in list(t.entries.values()) + list(t.networks.values()):
        # median of the rounds' medians (a slow round is outvoted); p10/p90 are the rounds' means
        assert 1 <= e.rounds <= rounds and min(e.rounds_ms) > 0
        assert e.median_ms == statistics.median(e.rounds_ms) and 0 < e.p10_ms <= e.p90_ms
    assert len(t.networks) >= 150  # the calibration set
    from nas.space import list_spaces, load_space

    for s in list_spaces():  # covers the shipped spaces at their default resolutions, with the
        # stems and heads of 1-channel, 10-class datasets (nas.profile's in_chans / num_classes)
        assert not t.missing(load_space(s).unique_blocks(in_chans=[1, 3], num_classes=[10])), s


def _key(c: int) -> BlockKey:
    return BlockKey(ConvBlock(c, 3, 1, "relu"), 3, 8, 8)


def test_save_merges_with_the_file(tmp_path):
    """Two tables saved to one path (two runs into one file): the union, nothing dropped."""
    p = tmp_path / "t.json"
    a, b = LatencyTable(metadata=dict(META), path=p), LatencyTable(metadata=dict(META), path=p)
    for c in (8, 16, 24):
        a.add(_key(c), Entry(0.1, 0.09, 0.11, 10, measured_at="2024-01-01T00:00:00+00:00"))
    for c in (24, 32):  # 24 measured by both, independently
        b.add(_key(c), Entry(0.3, 0.2, 0.4, 10, measured_at="2024-01-02T00:00:00+00:00"))
    a.save()
    b.save()
    a.save()  # a's view of 24 is unchanged since it saved: the merged figure stays
    on_disk = LatencyTable.load(p)
    assert set(on_disk) == {_key(c) for c in (8, 16, 24, 32)}
    both = on_disk.entries[_key(24)]
    assert both.rounds_ms == (0.1, 0.3) and both.n == 20 and both.median_ms == pytest.approx(0.2)
    assert a.entries == b.entries == on_disk.entries  # each object holds the union too
    assert a.others_added == 1 and b.others_added == 2
    # each side adds a round to the same entry: both rounds kept, none twice
    a.entries[_key(8)] = a.entries[_key(8)].merged(Entry(0.2, 0.18, 0.22, 10))
    b.entries[_key(8)] = b.entries[_key(8)].merged(Entry(0.4, 0.36, 0.44, 10))
    a.save()
    b.save()
    e = LatencyTable.load(p).entries[_key(8)]
    assert e.rounds_ms == (0.1, 0.2, 0.4) and e.n == 30
    assert e.p10_ms == pytest.approx((0.09 + 0.18 + 0.36) / 3) and e.p90_ms == pytest.approx((0.11 + 0.22 + 0.44) / 3)
    a.save()  # and saving again adds nothing
    assert LatencyTable.load(p).entries[_key(8)] == e


def test_save_merges_networks_and_metadata(tmp_path):
    from nas.arch import Arch

    p = tmp_path / "t.json"
    a = LatencyTable(metadata={**META, "created": "2024-01-02T00:00:00+00:00", "call_overhead_ms": None}, path=p)
    b = LatencyTable(metadata={**META, "created": "2024-01-01T00:00:00+00:00",
                               "refresh": {"now_over_table": 1.1, "measured_at": "2024-01-03T00:00:00+00:00"}}, path=p)
    net = Arch.from_dict(json.loads((TABLES_DIR / "cpu.json").read_text())["networks"][0]["arch"])
    b.networks[net] = Entry(1.0, 0.9, 1.1, 10)
    b.save()
    a.save()
    back = LatencyTable.load(p)
    assert set(back.networks) == {net} and back.metadata["created"] == "2024-01-01T00:00:00+00:00"
    assert back.metadata["call_overhead_ms"] == 0.005 and back.metadata["refresh"]["now_over_table"] == 1.1


def test_save_never_overwrites_a_corrupt_or_foreign_file(tmp_path):
    p = tmp_path / "t.json"
    p.write_text("{not json")
    with pytest.raises(TableError, match=r"t\.json: corrupt latency table .*not overwriting it: this table was "
                                         r"saved to .*t\.\d+\.json instead"):
        small_table().save(p)
    assert p.read_text() == "{not json"
    aside = next(tmp_path.glob("t.*.json"))
    assert len(LatencyTable.load(aside)) == 2
    small_table().save(tmp_path / "int8.json")
    other = LatencyTable(metadata={**META, "precision": "int8"})
    with pytest.raises(TableMismatchError, match="int8.json holds the latency table of another target "
                                                 r"\(precision: file has 'fp32', this table 'int8'\)"):
        other.save(tmp_path / "int8.json")
    assert LatencyTable.load(tmp_path / "int8.json").metadata["precision"] == "fp32"
