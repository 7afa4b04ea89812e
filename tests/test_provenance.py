"""Every latency figure says where it comes from: a table measured through a device bundle's
rehearsal (on another machine, standing in for the device) is a fourth source beside measured,
predicted and estimated, carried by the search's outputs, the training report, the cards,
``nas.predict`` and ``nas.validate``; pruning and the deployment choice treat it like an estimate."""

from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import pytest

from nas.latency import LatencyPredictor
from nas.latency.profile.validate import validated_spaces
from nas.latency.tables.provenance import SOURCES, Prediction, on_device
from nas.search import results as results_mod
from nas.search.budget import Budgets
from nas.search.results import write_outputs
from nas.search.samplers import RandomSettings
from nas.search.study import prepare_search, run_search
from nas.space import list_spaces, load_space
from nas.target import load_target
from nas.train.card import deployment_card
from nas.train.prune_stage import prune_guide
from nas.train.report import deployment_choice, input_line, report_rows, write_report
from nas.train.settings import PruneSettings
from tests import test_search
from tests.test_predictor import synth_table
from tests.test_search import FakeEvaluator

target, digits = test_search.target, test_search.digits  # the search tests' fixtures

REHEARSAL = {"target": "jetson", "runtime": "tensorrt", "precision": "fp16"}
WORDS = "REHEARSAL of jetson (tensorrt, fp16) on Synthetic CPU (onnxruntime CPUExecutionProvider)"


def _rehearsal_model(learned: bool = False) -> LatencyPredictor:
    """A predictor on a table as a bundle's rehearsal imports it: measured here, labelled a rehearsal."""
    t = synth_table()
    t.metadata["rehearsal"] = {**REHEARSAL, "measured_on": "Synthetic CPU"}
    return LatencyPredictor(calibrate=False, learned=learned).fit(t)


def test_a_rehearsal_table_predicts_rehearsal_figures():
    model = _rehearsal_model()
    a = load_space("tiny").random(1)
    p = model.explain(a)
    assert "rehearsal" in SOURCES and p.source == model.source == "rehearsal" and not on_device(p.source)
    assert p.how == model.how == WORDS and WORDS in p.label()
    assert p.record("jetson")["how"] == WORDS and p.record("jetson")["rehearsal"] == WORDS
    assert model.table_.describe().startswith("REHEARSAL of jetson (tensorrt, fp16), measured on Synthetic CPU")
    measured = LatencyPredictor(calibrate=False, learned=False).fit(synth_table())  # the same table unlabelled: measured
    m = measured.explain(a)
    assert m.source == "measured" and on_device(m.source) and "REHEARSAL" not in m.label() + measured.how
    with pytest.raises(ValueError, match="source must be one of"):
        Prediction(ms=1.0, source="guessed", device="x")
    with pytest.raises(TypeError):  # built by name: twelve positional fields were read wrongly too easily
        Prediction(1.0, "measured", "x")


def test_search_outputs_carry_the_rehearsal(tmp_path, target, digits, monkeypatch):
    """pareto.json (its latency model and each point's latency_source / latency_how), trials.csv and
    the plot's axis say REHEARSAL; the code before labelled them 'measured' / 'predicted from a
    measured table'."""
    labels = []
    real_close = results_mod.plt.close

    def close(fig):
        labels.append(fig.axes[0].get_xlabel())
        real_close(fig)

    monkeypatch.setattr(results_mod.plt, "close", close)
    s = prepare_search(target=target, search_space="tiny", data=digits, evaluator=FakeEvaluator(),
                       sampler=RandomSettings(), budgets=Budgets(latency_budget_ms=None), seed=0, run_dir=tmp_path,
                       study_name="t", latency=_rehearsal_model(learned=True))
    run_search(s.study, s.problem, n_trials=4)
    out = write_outputs(s.study, tmp_path, info=s.info())
    pj = json.loads(out["pareto_json"].read_text())
    assert pj["latency_model"]["source"] == "rehearsal" and pj["latency_model"]["how"] == WORDS
    assert pj["search"]["latency_source"] == "rehearsal" and pj["pareto"]
    assert all(e["latency_source"] == "rehearsal" and e["latency_how"] == WORDS for e in pj["pareto"])
    rows = list(csv.DictReader(out["trials_csv"].open()))
    assert rows and all(r["latency_source"] == "rehearsal" and r["latency_how"] == WORDS for r in rows)
    assert labels and WORDS in labels[-1] and "not the device" in labels[-1]


def _ctx(guide, **prune):
    return SimpleNamespace(s=SimpleNamespace(prune=PruneSettings(**prune), target=load_target("jetson")), guide=guide)


def test_pruning_does_not_prune_toward_a_rehearsal():
    model = _rehearsal_model()
    predict, unit, why = prune_guide(_ctx(model))
    assert predict is None and why.startswith("pruning skipped: the latency table of target 'jetson' is a " + WORDS)
    assert "prune.on_estimate=true" in why
    predict, _, why = prune_guide(_ctx(model, on_estimate=True))  # asked for: pruned toward it
    assert predict is not None and why == ""
    measured = LatencyPredictor(calibrate=False, learned=False).fit(synth_table())
    assert prune_guide(_ctx(measured))[0] is not None


def _var(name, prec, pred, acc=0.30):
    return {"variant": name, "precision": prec, "accuracy": acc, "params": 10, "file_bytes": 2048, "measured": None,
            "predicted": pred}


def test_report_marks_rehearsal_figures_and_the_deploy_line_names_each_source(tmp_path):
    """The rehearsal fp32 figure is marked REHEARSAL (the code before marked nothing and called the
    choice an estimate because an int8 variant was one); the choice says it rests on no device figure."""
    reh = {"ms": 0.0689, "source": "rehearsal", "outside": "", "how": WORDS}
    est = {"ms": 0.2261, "source": "estimated", "outside": "", "how": "estimated (roofline, Jetson AGX Orin)"}
    m = {"id": "m0", "variants": [_var("fp32", "fp32", reh), _var("qat_int8", "int8", est, acc=0.295)],
         "input": {"shape": [1, 1, 32, 32], "searched_shape": [1, 1, 32, 32], "as_searched": True,
                   "searched_ms": 0.0689, "searched_target": "jetson", "searched_precision": "fp16",
                   "searched_source": "rehearsal", "searched_how": WORDS}}
    m["prune"] = {"predicted_ms_before": 0.0689, "predicted_ms_after": 0.0444, "unit": "ms", "target_ms": 0.0482,
                  "criterion": "loss", "steps": [1], "reached": True, "kept": False, "source": "rehearsal",
                  "rejected": "x"}  # pruned toward the rehearsal when asked (prune.on_estimate=true): said so
    d = deployment_choice(m)
    assert d["variant"] == "fp32" and d["sources"] == {"fp32": "rehearsal", "qat_int8": "estimated"}
    assert d["on_device"] is False
    rep = {"run": "r", "target": "jetson", "data": "d", "accuracy_split": "test",
           "latency_targets": {"fp32": "jetson", "int8": "jetson_int8"}, "measured_here": {"fp32": False, "int8": False},
           "quantization": {"qat": {}, "ptq": {}}, "models": [m], "deploy": {"m0": d}}
    assert {r[1]: r[5] for r in report_rows(rep)} == {"fp32": "0.0689 (REHEARSAL)", "qat_int8": "0.2261 (est.)"}
    write_report(tmp_path, rep)
    md = (tmp_path / "report.md").read_text()
    assert ("- m0: **fp32**, 30.00%, 0.0689 ms predicted (REHEARSAL) (latency vs fp32: qat_int8 3.28x (estimate))"
            in md)
    assert "(a choice by REHEARSAL and estimate figures, not the device's" in md
    assert "- m0: pruned 0.0689 → 0.0444 ms predicted (REHEARSAL, prune.on_estimate) (target 0.0482" in md
    assert f"the front's 0.0689 ms ({WORDS}, not measured on target `jetson`'s device)" in input_line(m)
    assert f"({WORDS}; estimated (roofline, Jetson AGX Orin))" in md  # how each figure was obtained


def test_cards_say_which_figure_is_which():
    """An fp32 file's card carries the fp16 engine's figure (the target's precision) and says so; a
    rehearsal's figure says it stands in for it; every figure names its source."""
    arch = load_space("tiny").random(1).with_head(in_chans=1)
    data = {"classes": [str(i) for i in range(10)], "mean": [0.5], "std": [0.5], "in_chans": 1, "resolution": 32,
            "streamed": False, "settings": {}}

    def card(pred):
        return deployment_card(file="fp32.onnx", variant="fp32", precision="fp32", arch=arch, data=data, accuracy=0.3,
                               split="test", split_note="", predicted=pred, measured=None,
                               target=load_target("jetson"))["latency"]["predicted"]

    dev = Prediction(ms=0.05, source="measured", device="Jetson AGX Orin", n_measured=10).record("jetson")
    c = card(dev)
    assert c["source"] == "measured" and c["precision"] == "fp16"
    assert c["for"] == "the fp16 engine tensorrt builds from this fp32 file (target jetson), not the file run at fp32"
    c = card(Prediction(ms=0.07, source="rehearsal", device="Synthetic CPU", n_measured=10, rehearsal=WORDS).record("jetson"))
    assert c["source"] == "rehearsal" and c["how"] == WORDS
    assert c["for"].startswith("a stand-in, measured on another machine, for the fp16 engine tensorrt builds")


def test_validation_counts_blocks_of_the_tables_own_spaces():
    """A table records the spaces it was measured for; nas.validate counts against them (the code
    before counted a bundle's one-space table against every shipped space: '248 of 868 blocks')."""
    model = LatencyPredictor(calibrate=False, learned=False).fit(synth_table())
    t = model.table_
    assert t.spaces is None and validated_spaces(model, None) == list_spaces()
    t.add_spaces(["tiny"])
    t.add_spaces(["tiny"])
    assert t.spaces == ["tiny"] and t.metadata["spaces"] == ["tiny"]
    assert validated_spaces(model, None) == ["tiny"] and validated_spaces(model, ["mbv3"]) == ["mbv3"]
