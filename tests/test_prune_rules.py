"""nas.train's pruning rules end to end on digits (``search_run``: a real zero-cost search with roofline
latency): no pruning toward an estimate unless asked, a pruned network that costs more than
``prune.max_drop`` is not kept, and pruning by MACs is labelled so."""

import json
from pathlib import Path

import pytest


def _pruning_run(search_run, tmp_path, **prune):
    from nas.target import load_target
    from nas.train.pipeline import train_front
    from nas.train.settings import PipelineSettings

    s = PipelineSettings(run=str(search_run), target=load_target("cpu").replace(table=None), out=str(tmp_path),
                         select=0, train_samples=128, train={"epochs": 1, "batch_size": 64,
                                                             "bn_recalibration_batches": 1},
                         prune={"epochs": 1, "ratio": 0.5, **prune}, qat={"enabled": False},
                         export={"measure": False, "calib_samples": 16, "eval_samples": 32})
    return train_front(s), tmp_path


def test_no_pruning_toward_an_estimate_unless_asked(search_run, tmp_path):
    """conf.table=null: the latency is a roofline estimate, so nas.train does not prune toward it, says
    why in the report, and ships (and quantizes) the unpruned network."""
    rep, out = _pruning_run(search_run, tmp_path)
    m = rep["models"][0]
    assert not m["prune"]["kept"] and "no measured latency table" in m["prune"]["skipped"]
    assert [v["variant"] for v in m["variants"]] == ["fp32", "ptq_int8"]
    assert all(v["arch"] == m["arch"] for v in m["variants"])  # int8 from the network that ships
    md = (out / "report.md").read_text()
    assert "pruning skipped: target 'cpu' has no measured latency table" in md and "prune.by=macs" in md
    # the shared words for how each figure was obtained, in results.json, report.md and the card
    assert m["variants"][0]["predicted"]["how"].startswith("estimated (roofline")
    assert "(estimated (roofline" in md and "Deployment cards" in md
    card = json.loads(Path(m["variants"][0]["card"]).read_text())
    assert card["latency"]["predicted"]["how"] == m["variants"][0]["predicted"]["how"]


def test_pruning_that_costs_too_much_is_not_kept(search_run, tmp_path, monkeypatch):
    """prune.max_drop: fine-tuned, the pruned network scores 5 points below the unpruned one on val
    (made so: the check is the rule, not how well one epoch trains), so it is not exported and the
    int8 variants are built from the unpruned network."""
    import nas.train.prune_stage as ps

    real, seen = ps.accuracy, []

    def accuracy(model, data, split):
        seen.append(model)
        return 0.90 if len(seen) % 2 else 0.85  # unpruned first, then pruned

    monkeypatch.setattr(ps, "accuracy", lambda m, d, s: accuracy(m, d, s) if s == "val" else real(m, d, s))
    rep, out = _pruning_run(search_run, tmp_path, on_estimate=True, min_gain=0.0)
    m = rep["models"][0]
    d = m["prune"]["decision"]
    assert d["drop_points"] == pytest.approx(5.0) and d["max_drop"] == 1.0 and not m["prune"]["kept"]
    assert "more than prune.max_drop=1" in m["prune"]["rejected"]
    assert [v["variant"] for v in m["variants"]] == ["fp32", "ptq_int8"]
    assert all(v["arch"] == m["arch"] for v in m["variants"])
    assert "NOT KEPT" in (out / "report.md").read_text()


def test_pruning_by_macs_is_labelled_as_such(search_run, tmp_path):
    rep, out = _pruning_run(search_run, tmp_path, by="macs", max_drop=100.0)
    m = rep["models"][0]
    p = m["prune"]
    assert p["kept"] and p["by"] == "macs" and p["unit"] == "MMACs"
    assert p["predicted_ms_after"] < p["predicted_ms_before"]  # MMACs, toward 0.5x (min_keep may stop it first)
    pruned = next(v for v in m["variants"] if v["variant"] == "pruned")
    ptq = next(v for v in m["variants"] if v["variant"] == "ptq_int8")
    assert ptq["arch"] == pruned["arch"] != m["arch"]  # kept: int8 from the pruned network
    assert "MACs (prune.by=macs)" in (out / "report.md").read_text()
