"""An input resolution is bounded as depth is (a space with ``input.resolution: 1000000`` was searched, its
front predicted at 5.4e7 ms and 1.25e11 KiB of activations), and a latency outside what the predictor was
calibrated on is marked EXTRAPOLATED wherever it is shown: the console's front, trials.csv, pareto.json."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from nas.space import SpaceError, load_space

MAX_RESOLUTION = 4096  # nas._checks.MAX_RESOLUTION, the documented bound (docs/spaces.md, "Limits")
TINY = (Path(__file__).resolve().parent.parent / "search_spaces" / "tiny.yaml").read_text()


def _space(tmp_path: Path, resolution: int, stem: str = "[8, 16]") -> Path:
    p = tmp_path / f"tiny{resolution}.yaml"
    p.write_text(TINY.replace("resolution: 32}", f"resolution: {resolution}}}")
                 .replace("stem: {width: [8, 16]", f"stem: {{width: {stem}"))
    return p


def test_a_space_resolution_beyond_the_bound_is_refused(tmp_path):
    p = _space(tmp_path, 1_000_000)
    with pytest.raises(SpaceError) as e:
        load_space(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: input.resolution: 1000000 px is more than the limit of {MAX_RESOLUTION} px")
    assert "\n" not in msg
    load_space(_space(tmp_path, MAX_RESOLUTION))  # the bound itself is a space
    from nas import _checks

    assert _checks.MAX_RESOLUTION == MAX_RESOLUTION


def test_a_space_of_absurd_peak_memory_is_refused(tmp_path):
    p = _space(tmp_path, MAX_RESOLUTION, stem="[8, 512]")  # 4096 x 4096 x 512 fp32: 32 GiB for one activation
    with pytest.raises(SpaceError, match=r"GiB of activations at once .* more than the limit of 16 GiB"):
        load_space(p)


def test_every_resolution_a_user_gives_is_bounded():
    from nas.data import DataSettings
    from nas.target import load_target

    big = MAX_RESOLUTION + 1
    with pytest.raises(ValueError, match=f"target.resolution={big} px is more than"):
        load_target("cpu").replace(resolution=big)
    with pytest.raises(ValueError, match=f"data.resolution={big} px is more than"):
        DataSettings(name="digits", resolution=big)
    with pytest.raises(ValueError, match=f"Arch.resolution={big} px is more than"):
        load_space("tiny").random(0).with_resolution(big)


def test_an_extrapolated_latency_is_marked_in_every_form():
    from nas.search.results import latency_how, short_how

    lat = {"ms": 9.0, "source": "measured", "device": "dev", "outside": "its raw table sum 9 ms is above the "
                                                                        "calibration networks' (0.1-1 ms)"}
    assert short_how(lat) == "predicted (table), EXTRAPOLATED"
    assert latency_how(lat) == ("predicted from a measured table (dev); EXTRAPOLATED: its raw table sum 9 ms is "
                                "above the calibration networks' (0.1-1 ms)")
    inside = {**lat, "outside": ""}
    assert short_how(inside) == "predicted (table)" and latency_how(inside) == "predicted from a measured table (dev)"


@pytest.mark.slow
def test_a_search_marks_its_extrapolated_front(tmp_path, capsys):
    """A tiny space at 1024 px lies far above the cpu table's calibration networks: the console's front rows and
    legend, trials.csv and pareto.json say EXTRAPOLATED (pareto.json alone said it)."""
    from nas.cli.search import run
    from nas.config import compose_app

    space = _space(tmp_path, 1024)
    run(compose_app("search", ["evaluator=zero_cost", f"search_space={space}", "n_trials=2", "latency_budget_ms=null",
                               "progress=false"]), run_dir=tmp_path / "run")
    out = capsys.readouterr().out
    front = [ln for ln in out.splitlines() if ln.startswith("#")]
    assert front and all("predicted (table), EXTRAPOLATED" in ln for ln in front), out
    assert "latency: predicted (table), EXTRAPOLATED = " in out
    rows = list(csv.DictReader((tmp_path / "run" / "trials.csv").open()))
    assert rows and all("EXTRAPOLATED: its raw table sum" in r["latency_how"] for r in rows)
