import json
import sys

import forked
import numpy as np
import pytest
import torch

from nas.latency.profile import profiler as profiler_mod
from nas.latency.profile.profiler import calibration_archs, new_metadata, profile_blocks, profile_networks, pruned_archs
from nas.latency.runtimes.base import RUNTIMES
from nas.latency.runtimes.core import get_runtime
from nas.latency.runtimes.device import device_identity
from nas.latency.runtimes.loop import ProfileSettings, measure, summarize_times
from nas.latency.tables.table import LatencyTable
from nas.machine import RuntimeUnavailable, device_mismatch
from nas.space import load_space
from nas.target import Target

FAST = ProfileSettings(warmup=1, repeats=3, min_time_s=0.0, max_spread=10.0, remeasure=0, rounds=1, save_every_s=0.0)
CPU_FIELDS = {"name": "cpu", "runtime": "onnxruntime", "provider": "CPUExecutionProvider", "precision": "fp32",
              "batch": 1, "threads": 1, "latency_budget_ms": 10.0,
              "device": {"name": None, "kind": "cpu", "peak_gflops": 50.0, "mem_bandwidth_gbs": 10.0}}
CPU = Target.from_dict(CPU_FIELDS)
GPU_DEVICE = {**CPU_FIELDS["device"], "kind": "gpu"}


@pytest.fixture(scope="module")
def keys():
    return load_space("tiny").unique_blocks()[:6]


def new_table(rt, path):
    return LatencyTable(metadata=new_metadata(CPU, rt, FAST), path=path)


def test_profile_writes_entries_and_metadata(tmp_path, keys):
    rt = get_runtime(CPU)
    t = new_table(rt, tmp_path / "t.json")
    rep = profile_blocks(keys, rt, t, settings=FAST, progress=False)
    assert rep.measured == len(keys) and rep.already == 0
    back = LatencyTable.load(tmp_path / "t.json")
    assert set(back.entries) == set(keys)
    m = back.metadata
    assert m["source"] == "measured" and m["runtime"]["version"] and m["device"]["cpu"]
    assert m["call_overhead_ms"] > 0 and m["measurement"]["repeats"] == 3
    for e in back.entries.values():
        assert 0 < e.p10_ms <= e.median_ms <= e.p90_ms and e.n >= 3


def test_rounds_interleave_and_resume(tmp_path, keys, monkeypatch):
    rt = get_runtime(CPU)
    two = ProfileSettings(**{**FAST.__dict__, "rounds": 2})
    t = new_table(rt, tmp_path / "t.json")
    profile_blocks(keys[:3], rt, t, settings=two, progress=False, round_=1)
    assert all(t.entries[k].rounds == 1 for k in keys[:3])
    seen = []
    real = profiler_mod.measure_key
    monkeypatch.setattr(profiler_mod, "measure_key", lambda k, *a, **kw: seen.append(k) or real(k, *a, **kw))
    rep = profile_blocks(keys[:3], rt, LatencyTable.load(tmp_path / "t.json"), settings=two, progress=False,
                         path=tmp_path / "t.json")
    assert seen == keys[:3] and rep.measured == 3  # only round 2 was missing
    back = LatencyTable.load(tmp_path / "t.json")
    for k in keys[:3]:
        e = back.entries[k]
        assert e.rounds == 2 and e.median_ms == pytest.approx(sorted(e.rounds_ms)[0] / 2 + sorted(e.rounds_ms)[1] / 2)


def test_rerun_measures_only_missing(tmp_path, keys, monkeypatch):
    rt = get_runtime(CPU)
    t = new_table(rt, tmp_path / "t.json")
    profile_blocks(keys[:2], rt, t, settings=FAST, progress=False)
    seen = []
    real = profiler_mod.measure_key
    monkeypatch.setattr(profiler_mod, "measure_key", lambda k, *a, **kw: seen.append(k) or real(k, *a, **kw))
    t2 = LatencyTable.load(tmp_path / "t.json")
    rep = profile_blocks(keys, rt, t2, settings=FAST, progress=False, path=tmp_path / "t.json")
    assert seen == keys[2:] and rep.already == 2 and rep.measured == len(keys) - 2


def test_ctrl_c_loses_nothing(tmp_path, keys, monkeypatch):
    rt = get_runtime(CPU)
    path = tmp_path / "t.json"
    t = new_table(rt, path)
    real, calls = profiler_mod.measure_key, []

    def flaky(k, *a, **kw):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(k)
        return real(k, *a, **kw)

    monkeypatch.setattr(profiler_mod, "measure_key", flaky)
    with pytest.raises(KeyboardInterrupt):
        profile_blocks(keys, rt, t, settings=ProfileSettings(**{**FAST.__dict__, "save_every_s": 3600.0}),
                       progress=False)
    saved = LatencyTable.load(path)  # the file is complete JSON with everything measured so far
    assert set(saved.entries) == set(keys[:3])
    monkeypatch.setattr(profiler_mod, "measure_key", real)
    profile_blocks(keys, rt, saved, settings=FAST, progress=False)
    assert set(LatencyTable.load(path).entries) == set(keys)


def test_networks_for_calibration(tmp_path):
    rt = get_runtime(CPU)
    t = new_table(rt, tmp_path / "t.json")
    space = load_space("tiny")
    archs = calibration_archs(space, 2)
    assert archs == calibration_archs(space, 2)  # seeded
    rep = profile_networks(archs, rt, t, settings=FAST, progress=False)
    assert rep.measured == 2
    back = LatencyTable.load(tmp_path / "t.json")
    assert set(back.networks) == set(archs) and all(e.median_ms > 0 for e in back.networks.values())


def test_pruned_networks_leave_the_space_as_pruning_does():
    """Narrowed networks: channel groups of the space's multiple, residuals kept, blocks the space lacks."""
    from nas.builder import build
    from nas.narrow import channel_units

    space = load_space("tiny")
    archs = pruned_archs(space, 12)
    assert archs == pruned_archs(space, 12)  # seeded
    assert not set(archs) & set(calibration_archs(space, 40))
    own = set(space.unique_blocks())
    new_blocks = {k for a in archs for k in a.keys()} - own
    assert len(new_blocks) > 20
    narrow = [k for k in new_blocks if k.block.kind == "ir" and k.block.mid_ch < 2 * k.in_ch]  # expansion < 2
    assert narrow, "pruning cuts expansion channels below the space's smallest expansion"
    for a in archs:
        for k in a.keys():
            for f in ("out_ch", "mid_ch"):
                v = getattr(k.block, f, None)
                assert v is None or v % space.channel_multiple == 0, (a, k)
            se = getattr(k.block, "se", None)
            assert se is None or se.channels % space.channel_multiple == 0
        assert all(u.size >= space.channel_multiple for u in channel_units(a))
    x = torch.randn(1, 3, 32, 32)
    assert build(archs[0]).eval()(x).shape == (1, 10)


def test_pruned_networks_are_cut_deep_and_take_the_structural_steps(monkeypatch):
    """Every other network has every unit cut to <= 60% (as pruning a fast network to 0.7x does), and,
    as prune.criterion=loss does, some lose a squeeze-excite, some a residual block."""
    import nas.latency.profile.profiler as prune  # where pruned_archs looks them up (nas.narrow's functions)

    resized, dropped = [], []
    real_resize, real_drop = prune.resize_arch, prune.drop_layers

    def spy_resize(arch, units, sizes, **kw):
        resized.append(({u.name: u.size for u in units}, dict(sizes)))
        return real_resize(arch, units, sizes, **kw)

    def spy_drop(arch, *, se=(), blocks=()):
        dropped.append((list(se), list(blocks)))
        return real_drop(arch, se=se, blocks=blocks)

    monkeypatch.setattr(prune, "resize_arch", spy_resize)
    monkeypatch.setattr(prune, "drop_layers", spy_drop)
    space = load_space("mbv3")
    archs = pruned_archs(space, 16)
    assert len(resized) == len(dropped) == 16
    m = space.channel_multiple
    for full, sizes in resized[1::2]:
        for name, size in full.items():
            floor = max(m, -(-int(np.ceil(0.25 * size)) // m) * m)
            if floor < size:  # a unit that can shrink at all is cut to at most 60% (or to its floor)
                assert sizes[name] <= max(floor, int(0.6 * size) // m * m), (name, size, sizes[name])
    assert any(se for se, _ in dropped) and any(b for _, b in dropped)
    assert min(len(a.blocks) for a in archs) < max(len(a.blocks) for a in archs)


def test_runtime_interface():
    assert {"onnxruntime", "torch", "torch_compile", "tensorrt"} <= set(RUNTIMES)
    with pytest.raises(TypeError, match=r"target must be a Target \(nas.load_target\(name\)\), got dict"):
        get_runtime(CPU_FIELDS)  # the library takes a Target: a command coerces its config once
    with pytest.raises(ValueError, match="unknown runtime 'tvm'; valid runtimes:"):
        get_runtime(Target.from_dict({**CPU_FIELDS, "runtime": "tvm"}))
    with pytest.raises(ValueError, match="precision must be fp32, fp16 or int8, got 'int4'"):
        get_runtime(Target.from_dict({**CPU_FIELDS, "precision": "int4"}))
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeUnavailable, match="CUDAExecutionProvider is not available here.*onnxruntime-gpu"):
            get_runtime(Target.from_dict({**CPU_FIELDS, "provider": "CUDAExecutionProvider"}))
        with pytest.raises(RuntimeUnavailable, match="no CUDA device"):
            get_runtime(Target.from_dict({**CPU_FIELDS, "runtime": "torch", "device": GPU_DEVICE}))
    rt = get_runtime(Target.from_dict({**CPU_FIELDS, "runtime": "torch"}))
    k = load_space("tiny").unique_blocks()[3]
    from nas.builder import build_layer

    stats = summarize_times(measure(rt.prepare(build_layer(k), k.in_shape), warmup=1, repeats=5, min_time_s=0))
    assert stats["median_ms"] > 0 and stats["n"] == 5


@pytest.mark.slow
def test_torch_compile_runtime(keys):
    """torch.compile behind the same interface (inductor compiles for the CPU here: ~20 s)."""
    rt = get_runtime(Target.from_dict({**CPU_FIELDS, "runtime": "torch_compile"}))
    from nas.builder import build_layer

    k = keys[5]
    stats = summarize_times(measure(rt.prepare(build_layer(k), k.in_shape), warmup=3, repeats=5, min_time_s=0))
    assert stats["median_ms"] > 0 and stats["n"] == 5
    assert rt.info()["name"] == "torch_compile"


def test_int8_runtime_quantizes(keys):
    rt = get_runtime(Target.from_dict({**CPU_FIELDS, "precision": "int8"}))
    from nas.builder import build_layer

    k = keys[4]
    data = rt.onnx_bytes(build_layer(k), k.in_shape)
    import onnx

    ops = {n.op_type for n in onnx.load_from_string(data).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    assert summarize_times(measure(rt.runner_for_onnx(data, k.in_shape), warmup=1, repeats=3))["median_ms"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("runtime", ["torch", "onnxruntime"])
def test_gpu_runtimes(runtime, keys):  # pragma: no cover - needs a GPU
    target = Target.from_dict({**CPU_FIELDS, "runtime": runtime, "device": GPU_DEVICE,
                               "provider": "CUDAExecutionProvider" if runtime == "onnxruntime" else ""})
    rt = get_runtime(target)
    from nas.builder import build_layer

    k = keys[3]
    assert summarize_times(measure(rt.prepare(build_layer(k), k.in_shape), warmup=2, repeats=5))["median_ms"] > 0


# the shipped `cpu` target names the machine its table was measured on; tests measure on whatever
# machine runs them, so they clear the device name and its required ISA flags ("this machine, whatever it is")
HERE = ("conf.device.name=null", "conf.device.cpu_flags=[]")


def _cli(*args, cwd):
    return forked.run([sys.executable, "-m", "nas.profile", *args], cwd=cwd, timeout=600)


@pytest.mark.slow
def test_cli_end_to_end(tmp_path):
    out = tmp_path / "t.json"
    fast = ["profile.warmup=1", "profile.repeats=3", "profile.min_time_s=0", "profile.rounds=1", "progress=false",
            "profile.watch=false"]  # not about timing: a busy machine must not fail it
    r = _cli("conf=cpu", *HERE, "search_space=tiny", f"out={out}", "limit=4", "calibration_networks=1", "pruned_networks=1",
             *fast, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # tiny's 248 blocks + its 2 stems for 1-channel inputs (in_chans=[1,3] by default) + the blocks
    # of one narrowed network that the space lacks
    space = load_space("tiny")
    extra = {k for a in pruned_archs(space, 1) for k in a.keys()} - set(space.unique_blocks(in_chans=[1, 3]))
    assert extra
    assert f"{250 + len(extra)} unique blocks in tiny at their own resolutions + the blocks of 1 pruned networks" \
        in r.stdout and "4 block measurements" in r.stdout
    t = LatencyTable.load(out)
    assert len(t) == 4 and len(t.networks) == 2 and t.metadata["target"] == "cpu"
    assert set(t.networks) == {*calibration_archs(space, 1), *pruned_archs(space, 1)}
    r = _cli("conf=cpu", *HERE, "search_space=tiny", f"out={out}", "limit=2", "calibration_networks=1", *fast, cwd=tmp_path)
    assert "4 already in" in r.stdout and "2 block measurements" in r.stdout
    # a target for another device is refused here, with the way out
    r = _cli("conf=jetson", "search_space=tiny", f"out={tmp_path / 'j.json'}", cwd=tmp_path)
    assert r.returncode == 2 and "not 'Jetson AGX Orin', so it is not target 'jetson'" in r.stderr
    assert "bundle=" in r.stderr
    # ... and so is one whose name matches but whose ISA flags this CPU lacks
    r = _cli("conf=cpu", HERE[0], "conf.device.cpu_flags=[avx2,no_such_isa]", "search_space=tiny",
             f"out={tmp_path / 'f.json'}", cwd=tmp_path)
    assert r.returncode == 2 and "lacks ['no_such_isa']" in r.stderr and not (tmp_path / "f.json").exists()
    # a config typo fails at start
    r = _cli("conf=cpu", "conf.thredas=2", cwd=tmp_path)
    assert r.returncode != 0 and "thredas" in r.stderr
    r = _cli("conf=cpu", "pruned_networks=-1", f"out={tmp_path / 'neg.json'}", cwd=tmp_path)
    assert r.returncode == 2 and "pruned_networks=-1" in r.stderr and not (tmp_path / "neg.json").exists()
    # the table is checked against the target when resuming
    r = _cli("conf=cpu_int8", *HERE, "search_space=tiny", f"out={out}", "limit=1", cwd=tmp_path)
    assert r.returncode == 2 and "precision: table has 'fp32'" in r.stderr
    # a table measured on another processor of the same name is not resumed here: two machines' timings
    # would mix in one table
    data = json.loads(out.read_text())
    data["metadata"]["device"]["cpu_flags"] = ["avx", "avx2", "fma", "made_up_isa"]
    out.write_text(json.dumps(data))
    before = out.read_bytes()
    r = _cli("conf=cpu", *HERE, "search_space=tiny", f"out={out}", "limit=1", *fast, cwd=tmp_path)
    assert r.returncode == 2 and "another processor" in r.stderr and "made_up_isa" in r.stderr
    assert out.read_bytes() == before


@pytest.mark.slow
def test_cli_calibration_spaces(tmp_path):
    # calibration-only spaces add their blocks and seeded networks (calibration and pruned) to the table
    out = tmp_path / "t.json"
    fast = ["profile.warmup=1", "profile.repeats=3", "profile.min_time_s=0", "profile.rounds=1", "progress=false",
            "profile.watch=false"]  # not about timing: a busy machine must not fail it
    r = _cli("conf=cpu", *HERE, "search_space=tiny", "calibration_spaces=[lcnetlike]", f"out={out}", "limit=2",
             "calibration_networks=1", "pruned_networks=1", *fast, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "tiny at their own resolutions + calibration-only spaces lcnetlike" in r.stdout
    cal = load_space("calibration/lcnetlike")
    t = LatencyTable.load(out)
    assert {*calibration_archs(cal, 1), *pruned_archs(cal, 1)} <= set(t.networks) and len(t.networks) == 4
    r = _cli("conf=cpu", *HERE, "calibration_spaces=[nope]", f"out={tmp_path / 'n.json'}", cwd=tmp_path)
    assert r.returncode == 2 and "unknown calibration space 'nope'" in r.stderr and "mbv2like" in r.stderr
    assert not (tmp_path / "n.json").exists()


def test_calibration_space_names():
    from nas.latency.profile.workflow import calibration_space_names

    assert calibration_space_names(None, default=True) == ["calibration/effnetlike", "calibration/lcnetlike",
                                                            "calibration/mbv2like", "calibration/mbv3smalllike"]
    assert calibration_space_names(None, default=False) == []  # search_space= or resolution= given
    assert calibration_space_names([], default=True) == []
    assert calibration_space_names("mbv2like", default=False) == ["calibration/mbv2like"]


def test_spread_order_spans_the_range_first():
    # a budget reaches a space's first calibration networks only: they span its range of MACs, the
    # smallest and the largest first, then the median; the set itself is the seeded one
    from nas.cost import arch_cost
    from nas.latency.profile.profiler import spread_order

    archs = calibration_archs(load_space("mbv3"), 21)
    got = spread_order(archs)
    macs = sorted(arch_cost(a).macs for a in archs)
    first = [arch_cost(a).macs for a in got[:3]]
    assert first == [macs[0], macs[-1], macs[10]]
    assert sorted(a.digest() for a in got) == sorted(a.digest() for a in archs)
    assert spread_order(archs[:2]) and spread_order([]) == []


def test_calibration_order_levels_the_time_of_each_space():
    # a space whose networks take 3x the seconds gets a third of the networks in any prefix (its
    # share of the budget is its time, not its count), while one of cheaper networks gets no more
    # turns than a typical space (a network counts at least the median's time); the set is the same
    from nas.latency.profile.profiler import calibration_order

    spaces = [load_space("tiny"), load_space("mbv3"), load_space("calibration/effnetlike")]
    cost = {"tiny": 0.25, "mbv3": 1.0, "effnetlike": 3.0}
    got = calibration_order(spaces, 12, None, seconds=lambda a: cost[a.name])
    first = [a.name for a in got[:14]]
    assert first.count("tiny") == first.count("mbv3") == 6 and first.count("effnetlike") == 2
    plain = calibration_order(spaces, 12, None)
    assert [a.name for a in plain[:6]] == ["tiny", "mbv3", "effnetlike"] * 2
    assert sorted(a.digest() for a in got) == sorted(a.digest() for a in plain)
    # a network whose seconds are None is left out, and takes no turn: mbv3 keeps its 1-second turns
    mbv3 = [a for a in plain if a.name == "mbv3"]
    gone = set(mbv3[::2])
    part = calibration_order(spaces, 12, None, seconds=lambda a: None if a in gone else cost[a.name])
    assert not gone & set(part) and len(part) == len(plain) - len(gone)
    assert [a.name for a in part[:14]].count("mbv3") == 6


def test_pruned_networks_join_their_spaces_spread_so_a_short_budget_spans_each_space():
    # a space's pruned networks are its smallest: merged into its spread order, the first turns of that
    # space reach them, where listed after the calibration networks no budget short of all reaches them
    from nas.cost import arch_cost
    from nas.latency.profile.profiler import calibration_archs, calibration_order, pruned_archs

    spaces = [load_space("mbv3"), load_space("calibration/effnetlike")]
    pruned = [a for sp in spaces for a in pruned_archs(sp, 6)]
    got = calibration_order(spaces, 12, None, pruned=pruned)
    eff = [a for a in got if a.name == "effnetlike"]
    small = min(arch_cost(a).macs for a in eff)
    assert arch_cost(eff[0]).macs == small and any(a in pruned for a in eff[:2])
    assert min(arch_cost(a).macs for a in calibration_archs(spaces[1], 12)) > 1.5 * small
    plain = calibration_order(spaces, 12, None)
    assert sorted(a.digest() for a in got) == sorted(a.digest() for a in plain + pruned)
    with pytest.raises(ValueError, match="pruned networks of spaces not given: \\['tiny'\\]"):
        calibration_order(spaces, 12, None, pruned=pruned_archs(load_space("tiny"), 2))


def test_device_mismatch():
    here = {"name": "AMD EPYC", "kind": "cpu", "cpu_flags": ["avx2", "avx512f", "fma"], "cpu_family": "26",
            "cpu_model": "2"}
    assert device_mismatch({"name": "AMD EPYC", "cpu_flags": ["avx512f"]}, here) is None
    assert device_mismatch({"name": None}, here) is None and device_mismatch(None, here) is None
    assert "not 'Intel" in device_mismatch({"name": "Intel Xeon"}, here)
    assert "lacks ['avx512_vnni']" in device_mismatch({"name": "AMD EPYC", "cpu_flags": ["avx512_vnni"]}, here)
    # against a table's recorded device, everything recorded must be the same
    zen3 = {"name": "AMD EPYC", "cpu_flags": ["avx2", "fma"], "cpu_family": "25", "cpu_model": "1"}
    assert "ISA flags" in device_mismatch(zen3, here, exact=True)
    assert "family 26" in device_mismatch({**here, "cpu_family": "25"}, here, exact=True)
    assert device_mismatch(dict(here), here, exact=True) is None
    old_table = {"name": "AMD EPYC", "cpu_flags": ["avx2", "avx512f", "fma"]}  # recorded before family/model were
    assert device_mismatch(old_table, here, exact=True) is None
    ident = device_identity()  # this machine is its own device
    assert device_mismatch(ident, ident, exact=True) is None
    # a table answers for the machine it was measured on
    t = LatencyTable(metadata={"device": dict(ident)})
    assert t.measured_elsewhere(ident) is None
    t.metadata["device"]["cpu_flags"] = ["made_up_isa"]
    assert "made_up_isa" in t.measured_elsewhere(ident)


