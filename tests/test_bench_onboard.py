"""What ``python -m benchmarks onboard`` computes: the tables it holds out, the order its simulated
budget measures in, and the setting it picks for each table without that table's processor."""

import numpy as np
import pytest

from benchmarks import onboard


def test_bench_onboard_holds_out_every_cpu_table_with_held_out_measurements():
    """The default held-out tables: every shipped CPU table with a held-out report; not the GPU's
    (the simulated job times are a CPU's)."""
    from nas.latency.tables.table import LatencyTable
    from nas.resources import tables_dir

    ob = onboard
    tables = {p.stem: LatencyTable.load(p) for p in sorted(tables_dir().glob("*.json"))}
    devices = ob.default_devices(tables)
    assert {"cpu", "cpu_int8", "epyc_zen5", "executorch_cpu", "openvino_cpu_int8"} <= set(devices)
    assert "gpu_h200" not in devices and ob.held_out_report("gpu_h200") is not None


def test_bench_onboard_takes_calibration_networks_in_nas_profiles_order():
    """The simulated budget measures the calibration networks in ``nas.profile``'s order
    (``calibration_order`` by expected seconds, on the table's own figures): one from each space
    first, each space's smallest network first (its pruned networks among them), not the first space's only."""
    from nas.cost import arch_cost
    from nas.latency.profile.jobs import expected_seconds
    from nas.latency.profile.profiler import calibration_archs, calibration_order
    from nas.latency.runtimes.loop import ProfileSettings
    from nas.latency.tables.table import LatencyTable, resolve_table_path
    from nas.space import list_calibration_spaces, list_spaces, load_space

    ob = onboard
    table = LatencyTable.load(resolve_table_path("epyc_zen5.json"))  # 100 calibration + 160 pruned networks
    settings = ProfileSettings()
    jobs, cum = ob.simulated_profile(table, settings, {"block": 1.0, "network": 1.0})
    bundle = LatencyTable.load(resolve_table_path("executorch_cpu.json"))  # 40 calibration + 20 pruned networks
    assert ob.calibration_count(bundle, [load_space("tiny")]) == 40
    nets = [j.item for j in jobs if j.kind == "network" and j.round == 1]
    names = {a.name for a in table.networks}
    sps = [sp for sp in map(load_space, list_spaces() + list_calibration_spaces()) if sp.name in names]
    n = ob.calibration_count(table, sps)
    assert n == 100  # epyc_zen5.json: 100 calibration networks of each of its spaces
    seeded = {a for sp in sps for a in calibration_archs(sp, n)}
    pruned = [a for a in table.networks if a not in seeded]  # other draws: they join their space's spread
    assert pruned and all(a.name in names for a in pruned)
    # the table lacks some seeded networks of a space (and lcnetlike's since it was redefined): their
    # seconds are None, and calibration_order leaves them out rather than count them in the turns
    order = calibration_order(sps, n, None, seconds=lambda a: expected_seconds(
        a, "network", settings, table.networks[a].median_ms) if a in table.networks else None, pruned=pruned)
    assert nets[:len(order)] == order and len(order) == len(table.networks)
    assert {a.name for a in nets[:len(sps)]} == names
    for sp in sps:
        own = calibration_archs(sp, n) + [a for a in pruned if a.name == sp.name]
        first = next(a for a in nets if a.name == sp.name)
        assert arch_cost(first).macs == min(arch_cost(a).macs for a in own)
    assert len(jobs) == len(cum) and np.all(np.diff(cum) > 0)


def test_bench_onboard_picks_each_tables_setting_without_its_processor():
    """Leave one processor out: a table's setting is picked on the tables of the other processors only
    (never on its own score, nor on its processor's other runtimes'); a tie keeps the default."""
    ob = onboard

    def res(share):
        return {"budgets": [{"minutes": m, "after": {"all": {"within_10pct": share}, "under_1ms": {"within_10pct": share}}}
                            for m in ob.SELECT_MINUTES]}

    default, other = ob.DEFAULT.name, next(s.name for s in ob.SETTINGS if s != ob.DEFAULT)
    out = {"devices": {
        "xeon_ort": {"processor": "Xeon", "scored_on": "held_out", "settings": {default: res(0.9), other: res(0.5)}},
        "xeon_ov": {"processor": "Xeon", "scored_on": "held_out", "settings": {default: res(0.5), other: res(0.9)}},
        "epyc": {"processor": "EPYC", "scored_on": "held_out", "settings": {default: res(0.6), other: res(0.99)}},
    }}
    picks = ob.pick_settings(out)
    # epyc's own scores favour `other`; the Xeon tables' mean does not decide for it either way here (0.7 each): a tie
    assert picks["epyc"]["picked_on"] == ["xeon_ort", "xeon_ov"] and picks["epyc"]["setting"] == default
    assert picks["xeon_ort"]["picked_on"] == ["epyc"] and picks["xeon_ort"]["setting"] == other
    assert picks["xeon_ort"]["selection_scores"][other] == pytest.approx(0.99)
    from nas.latency.tables.table import LatencyTable, resolve_table_path

    tiny_only = LatencyTable.load(resolve_table_path("executorch_cpu.json"))  # one space, no calibration-only spaces
    assert {ob.effective(s, tiny_only) for s in ob.SETTINGS} == {ob.Setting()}
