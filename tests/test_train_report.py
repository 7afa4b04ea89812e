"""The training report: labelled estimates, the targets behind each precision, a Deploy section; the export record."""

import json

import pytest

from nas.train.report import deployment_choice, quantization_record, write_report


def _var(name, prec, pred):
    return {"variant": name, "precision": prec, "accuracy": 0.9, "params": 10, "file_bytes": 2048,
            "measured": None, "predicted": pred}


def _report(latency_targets, variants):
    m = {"id": "m0", "variants": variants}
    return {"run": "r", "target": "jetson_int8", "data": "d", "accuracy_split": "val",
            "latency_targets": latency_targets, "measured_here": {"fp32": False, "int8": False},
            "quantization": {"qat": {}, "ptq": {}}, "models": [m], "deploy": {"m0": deployment_choice(m)}}


def test_estimates_are_labelled_and_deploy_is_chosen(tmp_path):
    est = {"ms": 0.5, "source": "estimated", "outside": ""}
    rep = _report({"fp32": "gpu", "int8": "gpu_int8"},
                  [_var("fp32", "fp32", est), _var("qat_int8", "int8", {**est, "ms": 0.3})])
    write_report(tmp_path, rep)
    md = (tmp_path / "report.md").read_text()
    assert "| 0.5000 (est.) |" in md and "| 0.3000 (est.) |" in md
    assert "Predicted latency: fp32 by target `gpu`, int8 by target `gpu_int8`;" in md
    assert "- m0: **qat_int8**, 90.00%, 0.3000 ms predicted (estimate)" in md
    rep["models"][0]["variants"][0]["predicted"]["how"] = "estimated (roofline, Jetson AGX Orin)"
    write_report(tmp_path, rep)  # the shared words for how the figures were obtained
    assert "int8 by target `gpu_int8` (estimated (roofline, Jetson AGX Orin));" in (tmp_path / "report.md").read_text()


def test_a_precision_without_target_is_named_and_deploy_says_why(tmp_path):
    est = {"ms": 0.3, "source": "estimated", "outside": ""}
    rep = _report({"fp32": None, "int8": "jetson_int8"},
                  [_var("fp32", "fp32", None), _var("qat_int8", "int8", est)])
    write_report(tmp_path, rep)
    md = (tmp_path / "report.md").read_text()
    assert "Predicted latency: int8 by target `jetson_int8` (no target predicts fp32: name one with " \
           "`targets.fp32=<target>`);" in md
    assert "Deploy (" in md and "- m0: not chosen (no latency for fp32)" in md
    rep["latency_targets"] = {"fp32": None, "int8": None}
    write_report(tmp_path, rep)
    assert "Predicted latency: none (no target predicts fp32, int8" in (tmp_path / "report.md").read_text()


def test_quantization_record_follows_the_runtime():
    from nas.target import load_target

    cpu = quantization_record(True, 64, load_target("cpu_int8"))
    assert cpu["ptq"]["activation_type"] == "QUInt8" and cpu["qat"]["activations"].startswith("uint8")
    trt = quantization_record(True, 64, load_target("jetson_int8"))
    assert trt["ptq"]["activation_type"] == "QInt8" and trt["ptq"]["extra_options"]["ActivationSymmetric"]
    assert "zero point 0" in trt["qat"]["activations"] and "[-127, 127]" in trt["qat"]["weights"]
    assert quantization_record(True, 64) == cpu


def _input(shape, searched, as_searched, ms=0.0413):
    return {"shape": shape, "searched_shape": searched, "as_searched": as_searched, "searched_ms": ms,
            "searched_target": "cpu", "searched_precision": "fp32"}


def test_the_report_says_what_input_the_files_take(tmp_path):
    """The exported input shape is always stated; when it is not the searched network's, both
    latencies are given and the files' is named."""
    from nas.train.report import input_line

    pred = {"ms": 0.0145, "source": "measured", "outside": ""}
    rep = _report({"fp32": "cpu"}, [_var("fp32", "fp32", pred)])
    rep["models"][0]["input"] = _input([1, 3, 32, 32], [1, 3, 32, 32], True)
    write_report(tmp_path, rep)
    md = (tmp_path / "report.md").read_text()
    assert "Exported input (every file of the model, batch 1, NCHW):" in md
    assert "- m0: input 1x3x32x32; the fp32 file is the network the search scored: the front's 0.0413 ms " \
           "(fp32, target `cpu`) is for this input" in md
    m = {"id": "m0", "variants": rep["models"][0]["variants"], "input": _input([1, 3, 16, 16], [1, 3, 32, 32], False)}
    assert input_line(m) == ("- m0: input 1x3x16x16, NOT the searched 1x3x32x32: the front's 0.0413 ms (fp32, target "
                             "`cpu`) is for 1x3x32x32; the files have the latency of 1x3x16x16 (fp32 file: 0.0145 ms "
                             "predicted)")
    m["input"] = _input([1, 3, 32, 32], [1, 3, 32, 32], False, ms=None)
    m["variants"] = []
    assert input_line(m) == ("- m0: input 1x3x32x32, the searched input shape but not the searched Arch: the front's "
                             "latency is for 1x3x32x32; the files have the latency of 1x3x32x32")
    assert input_line({"id": "old", "variants": []}) is None  # a report written before inputs were recorded



def test_pruning_that_raised_accuracy_says_gained(tmp_path):
    """The decision line says how accuracy moved in words: the code before printed '-9.44 points lost'
    for a network that gained 9.44 points."""
    from nas.train.report import accuracy_change

    rep = _report({"fp32": "cpu"}, [_var("fp32", "fp32", {"ms": 0.5, "source": "measured", "outside": ""})])
    plan = {"predicted_ms_before": 0.5, "predicted_ms_after": 0.4, "unit": "ms", "target_ms": 0.35,
            "criterion": "loss", "steps": [1, 2], "reached": False, "kept": True}
    rep["models"][0]["prune"] = {**plan, "decision": {"split": "val", "unpruned": 0.5185, "pruned": 0.6130,
                                                      "drop_points": -9.44, "max_drop": 1.0}}
    write_report(tmp_path, rep)
    md = (tmp_path / "report.md").read_text()
    assert "val accuracy 51.85% → 61.30% (9.44 points gained, at most 1 may be lost): kept" in md
    assert accuracy_change(0.5) == "0.50 points lost" and accuracy_change(0.001) == "no change"


def test_deployment_choice_is_the_fastest_within_tolerance():
    from nas.train.report import deployment_choice

    def var(name, acc, measured, predicted=None):
        return {"variant": name, "accuracy": acc, "measured": {"median_ms": measured} if measured else None,
                "predicted": {"ms": predicted or measured}}

    # int8 slower than fp32 on a small network: the pruned fp32 network is the one to ship
    m = {"variants": [var("fp32", 0.90, 1.0), var("pruned", 0.895, 0.7), var("ptq_int8", 0.893, 1.3),
                      var("qat_int8", 0.896, 1.2)]}
    d = deployment_choice(m)
    assert d["variant"] == "pruned" and d["by"] == "measured" and d["vs_fp32"]["qat_int8"] == pytest.approx(1.2)
    # a faster variant that loses more than a point is not a candidate
    m["variants"][3] = var("qat_int8", 0.88, 0.4)
    assert deployment_choice(m)["variant"] == "pruned" and "qat_int8" not in deployment_choice(m)["vs_fp32"]
    assert deployment_choice(m, tolerance=0.05)["variant"] == "qat_int8"
    # not every candidate measured here: chosen by prediction, and it says so
    m["variants"][1] = var("pruned", 0.9, None, predicted=0.5)
    d = deployment_choice(m)
    assert d["by"] == "predicted" and d["variant"] == "pruned"
    assert deployment_choice({"variants": [var("pruned", 0.9, 0.5)]}) is None  # no fp32 to compare with


def test_report_marks_estimates_and_extrapolations(tmp_path):
    from nas.train.report import report_rows, write_report

    def var(name, pred):
        return {"variant": name, "accuracy": 0.9, "params": 10, "file_bytes": 2048, "measured": {"median_ms": 0.01},
                "predicted": pred, "error_pct": 1.0}

    rep = {"run": "r", "target": "t", "data": "d", "accuracy_split": "val", "latency_targets": {"fp32": "t"},
           "measured_here": {"fp32": True}, "quantization": {"qat": {}, "ptq": {}},
           "models": [{"id": "m", "variants": [
               var("fp32", {"ms": 0.02, "source": "measured", "outside": "its raw table sum is below ..."}),
               var("pruned", {"ms": 0.02, "source": "estimated", "outside": ""}),
               var("ptq_int8", {"ms": 0.02, "source": "measured", "outside": ""})]}]}
    cols = {r[1]: r[5] for r in report_rows(rep)}
    assert cols == {"fp32": "0.0200 (extrap.)", "pruned": "0.0200 (est.)", "ptq_int8": "0.0200"}
    write_report(tmp_path, rep)
    assert "*(extrap.)* a network outside the range" in (tmp_path / "report.md").read_text()


# ------------------------------------------------------------------------------------------- the export record

def _export_record(measured):
    from nas.space import load_space

    arch = load_space("tiny").random(4).with_head(in_chans=1).with_resolution(16)
    pred = {"ms": 0.5, "source": "estimated", "how": "estimated (roofline)", "target": "cpu"}
    r = {"variant": "fp32", "precision": "fp32", "arch": arch.to_dict(), "onnx": "m/export/fp32.onnx",
         "file_bytes": 2048, "input_shape": [1, 1, 16, 16], "params": 10, "accuracy": 0.9, "accuracy_split": "val",
         "torch_accuracy": 0.91, "predicted": pred, "measured": measured, "accuracy_images": 360,
         "accuracy_ci95": {"low": 0.86, "high": 0.93}}
    if measured:
        r["error_pct"] = 100.0 * (pred["ms"] - measured["median_ms"]) / measured["median_ms"]
    r["card"] = "m/export/fp32.card.json"
    return r


@pytest.mark.parametrize("measured", [None, {"median_ms": 0.4, "how": "measured here"}])
def test_export_record_writes_back_what_it_read(measured):
    from nas.train.records import ExportRecord

    r = _export_record(measured)
    rec = ExportRecord.from_dict(r)
    assert rec.to_dict() == r and list(rec.to_dict()) == list(r)  # key for key, in order
    assert ("error_pct" in rec.to_dict()) == bool(measured)  # only with both latencies
    ptq = ExportRecord.from_dict({**r, "torch_accuracy": None, "predicted": None})
    assert ptq.to_dict()["torch_accuracy"] is None and ptq.to_dict()["predicted"] is None  # written as null
    with pytest.raises(ValueError, match="unknown key 'extra'.*no 'accuracy'"):
        ExportRecord.from_dict({k: v for k, v in {**r, "extra": 1}.items() if k != "accuracy"})


def test_an_export_cache_without_interval_is_read_as_before(tmp_path):
    """A cache written before intervals were recorded: the interval on the images scored is added (the
    file is not rewritten); a current cache is returned as it is."""
    from types import SimpleNamespace

    from nas.arch import Arch
    from nas.stats import wilson_interval
    from nas.train.pipeline import _export_variant

    (tmp_path / "export").mkdir()
    onnx = tmp_path / "export" / "fp32.onnx"
    onnx.write_bytes(b"onnx")
    (tmp_path / "export" / "fp32.card.json").write_text("{}")  # the card is there: not written again
    r = {**_export_record({"median_ms": 0.4}), "onnx": str(onnx)}
    old = {k: v for k, v in r.items() if k not in ("accuracy_images", "accuracy_ci95")}
    cache = tmp_path / "export" / "fp32.json"
    cache.write_text(json.dumps(old))
    ctx = SimpleNamespace(data=SimpleNamespace(val=[None] * 360, test=[], train=[]),
                          s=SimpleNamespace(export=SimpleNamespace(eval_samples=200)))

    def make():
        raise AssertionError("a cached export is not made again")

    rec = _export_variant(ctx, tmp_path, "fp32", "fp32", Arch.from_dict(r["arch"]), make, 0.91)
    assert rec.to_dict() == {**old, "accuracy_images": 200, "accuracy_ci95": wilson_interval(0.9, 200).to_dict()}
    assert json.loads(cache.read_text()) == old
    cache.write_text(json.dumps(r))
    assert _export_variant(ctx, tmp_path, "fp32", "fp32", Arch.from_dict(r["arch"]), make, 0.91).to_dict() == r


@pytest.mark.parametrize("damage", ["{not json", '{"variant": "fp32"}'])
def test_an_export_cache_that_cannot_be_read_is_made_again(tmp_path, damage):
    """A damaged cache, or one far older than its record, is no reason to stop: the variant is exported again."""
    from types import SimpleNamespace

    from nas.arch import Arch
    from nas.train.pipeline import _export_variant

    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "fp32.onnx").write_bytes(b"onnx")
    (tmp_path / "export" / "fp32.json").write_text(damage)

    class MadeAgain(Exception):
        pass

    def make():
        raise MadeAgain

    with pytest.raises(MadeAgain):
        _export_variant(SimpleNamespace(), tmp_path, "fp32", "fp32", Arch.from_dict(_export_record(None)["arch"]),
                        make, 0.91)
