"""``nas.predict breakdown=true``: every layer's time beside the roofline's verdict (arithmetic intensity
against the device's ridge point), the GFLOP/s and GB/s it achieves against the device's peaks, its share
of the network, and the bar chart; for a measured table and for the roofline estimate alike."""

from __future__ import annotations

import dataclasses
import json

import pytest

from nas.latency import layer_breakdown, load_latency_model, ridge_point
from nas.latency.predict.breakdown import breakdown_chart
from nas.space import load_space
from nas.target import load_target


@pytest.fixture
def arch():
    return load_space("tiny").random(3).with_head(in_chans=3, num_classes=10).with_resolution(32)


def _estimate_target(tmp_path, monkeypatch, name="litert_cpu"):
    """A target with no table here: its latency is the roofline estimate."""
    monkeypatch.setenv("HWNAS_HOME", str(tmp_path))
    return load_target(name).replace(table=None)


def test_verdict_follows_the_ridge_point_and_shares_add_up(tmp_path, monkeypatch, arch):
    t = _estimate_target(tmp_path, monkeypatch)
    model = load_latency_model(t)
    rows = layer_breakdown(arch, model, t)
    assert len(rows) == len(arch.keys()) and {r.source for r in rows} == {"estimated"}
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    ridge = ridge_point(t)
    assert ridge == pytest.approx(t.device.peak_gflops / t.device.mem_bandwidth_gbs)
    for r in rows:
        assert (r.bound == "compute-bound") == (r.intensity >= ridge)
        assert r.gflops == pytest.approx(r.flops / (r.ms * 1e6)) and r.gbs == pytest.approx(r.bytes / (r.ms * 1e6))
        assert r.compute_pct == pytest.approx(100 * r.gflops / t.device.peak_gflops)
        assert r.roof_pct <= 100.0 + 1e-9  # the estimate is the roofline plus per-op costs: never above its roof
    # the same layers on a device with ten times the bandwidth: the ridge moves, and so do the verdicts
    fast = t.replace(device=dataclasses.replace(t.device, mem_bandwidth_gbs=10 * t.device.mem_bandwidth_gbs))
    again = layer_breakdown(arch, load_latency_model(fast), fast)
    assert sum(r.bound == "compute-bound" for r in again) > sum(r.bound == "compute-bound" for r in rows)


def test_int8_moves_a_byte_per_element(tmp_path, monkeypatch, arch):
    fp32 = _estimate_target(tmp_path, monkeypatch, "litert_cpu")
    int8 = _estimate_target(tmp_path, monkeypatch, "litert_cpu_int8")
    a = layer_breakdown(arch, load_latency_model(fp32), fp32)
    b = layer_breakdown(arch, load_latency_model(int8), int8)
    assert all(y.bytes < x.bytes and y.flops == x.flops and y.intensity > x.intensity for x, y in zip(a, b))


def test_measured_table_rows_and_chart(tmp_path, arch):
    t = load_target("cpu")
    model = load_latency_model(t, allow_mismatch=True)
    rows = layer_breakdown(arch, model, t)
    assert {r.source for r in rows} <= {"table", "learned"}
    assert [r.ms for r in rows] == [r["ms"] for r in model.breakdown(arch)]
    path = breakdown_chart(rows, tmp_path / "c" / "breakdown.png", title="t", ridge=ridge_point(t))
    assert (tmp_path / "c" / "breakdown.png").stat().st_size > 1000 and path.endswith("breakdown.png")


def test_predict_cli_prints_the_verdicts_and_writes_the_chart(tmp_path, capsys, arch):
    from nas.cli.predict import run
    from nas.config import compose_app

    (tmp_path / "arch.json").write_text(json.dumps(arch.to_dict()))
    png = tmp_path / "bd.png"
    out = run(compose_app("predict", ["conf=cpu", f"arch={tmp_path / 'arch.json'}", "breakdown=true",
                                      f"breakdown_png={png}", "allow_mismatch=true"]))
    text = capsys.readouterr().out
    assert "ridge point" in text and "GFLOP/s (% peak)" in text and "GB/s (% peak)" in text and "FLOP/B" in text
    assert ("memory-bound" in text or "compute-bound" in text) and f"chart: {png}" in text
    assert png.is_file() and out["chart"] == str(png) and len(out["breakdown"]) == len(arch.keys())
    assert {"intensity", "bound", "gflops", "gbs", "share"} <= set(out["breakdown"][0])
