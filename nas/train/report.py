"""The training report: one row per exported variant, the variant to deploy, ``report.json`` and ``report.md``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nas._io import atomic_write_json, atomic_write_text
from nas.compress.qat import quant_settings_for
from nas.export.qdq import qdq_settings_for
from nas.latency.tables import on_device
from nas.stats import AccuracyInterval, accuracy_difference, fmt_interval, wilson_interval

__all__ = ["DEPLOY_TOLERANCE", "REPORT_HEADER", "REPORT_SCHEMA", "accuracy_uncertainty", "deployment_choice",
           "input_line", "quantization_record", "report_rows", "variant_interval", "write_report"]

REPORT_SCHEMA = "hwnas.train_report"
# how the table (and, in words, the deploy line) marks a predicted figure that is not the device's, by its source
MARKS = {"estimated": "est.", "rehearsal": "REHEARSAL"}
_WORDS = {"estimated": "estimate", "rehearsal": "REHEARSAL"}


def quantization_record(reduce_range: bool, calib_samples: int, target: Any | None = None) -> dict[str, Any]:
    """How the int8 variants were quantized for ``target`` (the int8 target; None: onnxruntime's
    settings), the report's ``quantization``."""
    qs = quant_settings_for(target, reduce_range=reduce_range)
    acts = ("int8 symmetric per-tensor, zero point 0 (EMA min/max, then frozen)" if qs.symmetric else
            "uint8 asymmetric per-tensor (EMA min/max, then frozen)")
    return {"qat": {"weights": "int8 symmetric per-channel, " +
                    ("7-bit range [-64, 64] (reduce_range)" if qs.reduce_range else "[-127, 127]"),
                    "activations": acts, "biases": "float" if qs.symmetric else "int32",
                    "bn": "folded", "format": "QDQ ONNX (opset 17)"},
            "ptq": {"method": "onnxruntime quantize_static", "calib_samples": calib_samples,
                    **qdq_settings_for(target)}}


def _f(v: float | None, fmt: str = "{:.4f}") -> str:
    return "—" if v is None else fmt.format(v)


def _no_target(report: Mapping[str, Any]) -> list[str]:
    """The precisions of exported variants that no target predicts."""
    names = report.get("latency_targets") or {}
    precs = {v.get("precision", "int8" if v["variant"].endswith("int8") else "fp32")
             for m in report["models"] for v in m["variants"]}
    return sorted(p for p in precs if not names.get(p))


def report_rows(report: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for m in report["models"]:
        for v in m["variants"]:
            pred, meas = v.get("predicted"), v.get("measured")
            mark = MARKS.get((pred or {}).get("source", ""))
            src = "" if not pred else (f" ({mark})" if mark else " (extrap.)" if pred.get("outside") else "")
            iv = variant_interval(v)
            acc = f"{100 * v['accuracy']:.2f}" + (f" {fmt_interval(iv)}" if iv else "")
            rows.append([m["id"], v["variant"], acc, f"{v['params']:,}",
                         f"{v['file_bytes'] / 1024:.1f}", (_f(pred["ms"]) + src) if pred else "—",
                         _f(meas["median_ms"]) if meas else "—",
                         f"{v['error_pct']:+.1f}%" if v.get("error_pct") is not None else "—"])
    return rows


REPORT_HEADER = ["model", "variant", "acc % [95% CI]", "params", "KiB", "predicted ms", "measured ms", "pred. error"]


def variant_interval(v: Mapping[str, Any]) -> AccuracyInterval | None:
    """A variant's accuracy with its Wilson 95% interval on the ``accuracy_images`` it was scored on;
    None for a report that does not record them."""
    n = v.get("accuracy_images")
    return wilson_interval(min(1.0, max(0.0, float(v["accuracy"]))), int(n)) if n else None


def accuracy_uncertainty(models: Sequence[Mapping[str, Any]], *, seed: int) -> dict[str, Any]:
    """How the report's accuracies are uncertain: the interval's method, and the front's neighbours
    (by front index) whose fp32 accuracies are within noise of each other (report.json's
    ``accuracy_uncertainty``).

    Args:
        models: the report's models (each with its front ``index`` and its variants).
        seed: the one training seed every model was trained with.

    Returns:
        ``method``, ``level``, ``seeds``, ``note`` and ``within_noise``: one record per pair of
        neighbours whose difference's 95% interval holds 0.
    """
    fp32 = []
    for m in sorted(models, key=lambda m: m.get("index", 0)):
        v = next((v for v in m.get("variants", []) if v["variant"] == "fp32"), None)
        iv = variant_interval(v) if v else None
        if iv is not None:
            fp32.append((m["id"], iv))
    ties = []
    for (a, ia), (b, ib) in zip(fp32, fp32[1:]):
        d = accuracy_difference(ib, ia)
        if d.within_noise:
            ties.append({"models": [a, b], "difference": d.to_dict()})
    return {"method": "wilson", "level": 0.95, "seeds": [seed],
            "note": "Wilson 95% interval of each accuracy on the images it was scored on; one training run per "
                    "network (one seed), so the spread between training runs is not in it; neighbours within noise: "
                    "the 95% interval of the fp32 accuracies' difference (Newcombe's hybrid score) holds 0",
            "within_noise": ties}


DEPLOY_TOLERANCE = 0.01  # accuracy a deployment may give up against the unpruned fp32 network (1 point)


def deployment_choice(model: Mapping[str, Any], tolerance: float = DEPLOY_TOLERANCE) -> dict[str, Any] | None:
    """The variant to deploy: the fastest whose accuracy is within ``tolerance`` of the fp32
    variant's, by measured latency where every candidate was measured here, else by prediction.

    int8 does not always pay: on small networks onnxruntime's int8 kernels can be slower than its
    fp32 ones, and the report should say which to ship rather than leave it to a reader.  A choice
    by predictions records each candidate's ``sources`` and whether all of them are the device's own
    (``on_device``): an estimate and a rehearsal are not, and the report says the choice rests on them.
    """
    vs = {v["variant"]: v for v in model.get("variants", [])}
    base = vs.get("fp32")
    if base is None:
        return None
    ok = [v for v in vs.values() if v["accuracy"] >= base["accuracy"] - tolerance]
    measured = all(v.get("measured") for v in ok)
    if not measured and not all(v.get("predicted") for v in ok):
        return None

    def ms(v: Mapping[str, Any]) -> float:
        return float(v["measured"]["median_ms"] if measured else v["predicted"]["ms"])

    best = min(ok, key=ms)
    sources = {v["variant"]: "measured here" if measured else v["predicted"].get("source", "measured") for v in ok}
    return {"variant": best["variant"], "accuracy": best["accuracy"], "ms": ms(best),
            "by": "measured" if measured else "predicted", "tolerance": tolerance,
            "vs_fp32": {v["variant"]: ms(v) / ms(base) for v in ok}, "sources": sources,
            "on_device": measured or all(on_device(s) for s in sources.values())}


def write_report(out: str | Path, report: Mapping[str, Any]) -> None:
    """``report.json`` and ``report.md`` in ``out``."""
    out = Path(out)
    atomic_write_json(out / "report.json", report)
    lines = [f"# Training report: {report['run']}", "",
             f"Target `{report['target']}`; data {report['data']}; accuracy on the {report['accuracy_split']} split "
             f"({report.get('accuracy_split_note') or 'the search chose on val'}), "
             f"of the exported ONNX models run by onnxruntime (batch 1).", "",
             "| " + " | ".join(REPORT_HEADER) + " |", "|" + "---|" * len(REPORT_HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in report_rows(report)]
    lines += _uncertainty_lines(report)
    by = ", ".join(f"{p} by target `{n}`" for p, n in report["latency_targets"].items() if n) or "none"
    missing = _no_target(report)
    if missing:
        by += " (no target predicts " + ", ".join(missing) + ": name one with " + \
            " ".join(f"`targets.{p}=<target>`" for p in missing) + ")"
    lines += _input_lines(report)
    hows = _hows(report)
    lines += ["", "Predicted latency: " + by + (f" ({hows})" if hows else "") + "; *(est.)* marks a roofline estimate, "
              "*(REHEARSAL)* a figure of a table measured through a device bundle's rehearsal on another machine "
              "(not the device), *(extrap.)* a network "
              "outside the range of the table's calibration networks (the calibration extrapolates: profile at this resolution).  "
              "Error = (predicted − measured) / measured.",
              f"Measured on this machine: {', '.join(p for p, h in report['measured_here'].items() if h) or 'none'}.",
              "", "Quantization:", ""]
    q = report["quantization"]
    lines += [f"- QAT: {', '.join(f'{k}: {v}' for k, v in q['qat'].items())}",
              f"- PTQ baseline: {', '.join(f'{k}: {v}' for k, v in q['ptq'].items())}", ""]
    lines += _prune_lines(report)
    lines += _deploy_lines(report)
    lines += _card_lines(report)
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")


def _uncertainty_lines(report: Mapping[str, Any]) -> list[str]:
    """What the intervals are, and the front's neighbours within noise (``accuracy_uncertainty``)."""
    ns = sorted({iv.n for m in report["models"] for v in m["variants"] if (iv := variant_interval(v))})
    if not ns:
        return []
    u = report.get("accuracy_uncertainty") or {}
    seeds = f" (seed {', '.join(map(str, u['seeds']))})" if u.get("seeds") else ""
    lines = ["", f"Accuracy [95% CI]: the Wilson interval on the {'/'.join(map(str, ns))} {report['accuracy_split']} "
                 f"images each file was scored on; one training run per network{seeds}, so the spread between "
                 f"training runs is not in it."]
    for t in u.get("within_noise", []):
        d = t["difference"]
        lines.append(f"Within noise: {t['models'][0]} and {t['models'][1]}, front neighbours whose fp32 accuracies "
                     f"differ by {100 * d['value']:+.2f} points (95% CI {100 * d['low']:+.2f} to {100 * d['high']:+.2f}).")
    return lines


def _prune_lines(report: Mapping[str, Any]) -> list[str]:
    """What pruning did to each model: skipped (why), rejected (why), or kept, and toward what."""
    lines = []
    for m in report["models"]:
        if "prune" in m:
            p = m["prune"]
            if "predicted_ms_before" not in p:
                lines.append(f"- {m['id']}: {p.get('skipped', 'not pruned')}")
                continue
            unit = p.get("unit", "ms")
            what = ("MACs (prune.by=macs)" if unit == "MMACs" else f"ms predicted ({_WORDS[p['source']]}, prune.on_estimate)"
                    if p.get("source") in _WORDS else "ms predicted")
            verdict = ("kept" if p.get("kept", True) else f"NOT KEPT: {p.get('rejected') or p.get('skipped')}")
            d = p.get("decision")
            cost = (f"; val accuracy {100 * d['unpruned']:.2f}% → {100 * d['pruned']:.2f}% "
                    f"({accuracy_change(d['drop_points'])}, at most {d['max_drop']:g} may be lost)" if d else "")
            lines.append(f"- {m['id']}: pruned {p['predicted_ms_before']:.4f} → {p['predicted_ms_after']:.4f} {what} "
                         f"(target {p['target_ms']:.4f}, criterion {p['criterion']}, "
                         f"{len(p['steps'])} steps{'' if p['reached'] else ', target not reached'}){cost}: {verdict}")
            if p.get("measured"):
                ml = p["measured"]
                tries = " → ".join(f"{t['measured_ratio']:.3f}x" for t in ml["tries"])
                miss = "" if ml["reached"] else f", ABOVE {ml['ratio']:.2f}x"
                again = " (re-planned while the measured ratio missed prune.ratio)" if len(ml["tries"]) > 1 else ""
                lines.append(f"  measured here against the unpruned network ({ml['unpruned_ms']:.4f} ms): "
                             f"{tries}{miss}{again}")
    return ["", "Pruning:", "", *lines] if lines else []


def accuracy_change(drop_points: float) -> str:
    """An accuracy change in words: ``1.20 points lost``, ``9.44 points gained`` or ``no change``."""
    if round(drop_points, 2) == 0:
        return "no change"
    return f"{abs(drop_points):.2f} points {'lost' if drop_points > 0 else 'gained'}"


def _hows(report: Mapping[str, Any]) -> str:
    """How the report's latency figures were obtained, in the shared words (``Prediction.how``)."""
    hows = sorted({rec["how"] for m in report["models"] for v in m["variants"]
                   for rec in (v.get("predicted"), v.get("measured")) if rec and rec.get("how")})
    return "; ".join(hows)


def _vs_fp32(model: Mapping[str, Any], variant: str) -> str:
    """The chosen variant's accuracy against the fp32 file's, beyond noise or not; empty without intervals."""
    vs = {v["variant"]: variant_interval(v) for v in model["variants"]}
    a, b = vs.get(variant), vs.get("fp32")
    if variant == "fp32" or a is None or b is None:
        return ""
    d = accuracy_difference(a, b)
    word = "within noise" if d.within_noise else "beyond noise"
    return f"; accuracy vs fp32 {100 * d.value:+.2f} points (95% CI {100 * d.low:+.2f} to {100 * d.high:+.2f}), {word}"


def _card_lines(report: Mapping[str, Any]) -> list[str]:
    """The Deployment cards section: where each export's card is, and what it says a user must do."""
    lines = []
    for m in report["models"]:
        for v in m["variants"]:
            path = v.get("card")
            if not path or not Path(path).is_file():
                continue
            c = json.loads(Path(path).read_text())
            pre, i = c["preprocess"], c["input"]
            rs = pre["resize"]
            crop = f", centre crop {pre['crop']['size']}" if pre.get("crop") else ""
            size = f"shorter side to {rs['size']}" if rs["to"] == "shorter_side" else f"to {rs['size']}x{rs['size']}"
            lat = c["latency"].get("measured") or c["latency"].get("predicted") or {}
            lat_s = f"{lat['ms']:.4f} ms, {lat['how']}" if lat else "no latency"
            lines.append(f"- `{path}`: input `{i['name']}` {_shape(i['shape'])} {i['dtype']} {i['layout']} "
                         f"({i['colour']}); {pre['colour']}, resize {size} ({rs['interpolation']}){crop}, x1/255, "
                         f"mean {_nums(pre['mean'])}, std {_nums(pre['std'])}; output logits over "
                         f"{len(c['output']['classes'])} classes ({', '.join(c['output']['classes'][:4])}"
                         f"{', ...' if len(c['output']['classes']) > 4 else ''}); {lat_s}")
    return ["", "Deployment cards (everything needed to run a file without hwnas; docs/train.md has an example):",
            "", *lines] if lines else []


def _nums(xs: list[float]) -> str:
    return "[" + ", ".join(f"{x:.4f}" for x in xs) + "]"


def _shape(shape: list[int]) -> str:
    return "x".join(str(d) for d in shape)


def input_line(model: Mapping[str, Any]) -> str | None:
    """What input the model's files take, against the network the search scored; both latencies when
    they differ (the front's at the searched shape, the fp32 file's at its own), and which is the files'."""
    i = model.get("input")
    if not i:
        return None
    ms = i.get("searched_ms")
    front = (f"the front's {ms:.4f} ms ({i.get('searched_precision') or '?'}, target `{i.get('searched_target') or '?'}`)"
             if ms is not None else "the front's latency")
    if ms is not None and i.get("searched_how") and not on_device(i.get("searched_source")):  # an estimate, a rehearsal
        front = (f"the front's {ms:.4f} ms ({i['searched_how']}, not measured on target "
                 f"`{i.get('searched_target') or '?'}`'s device)")
    shape, searched = _shape(i["shape"]), _shape(i["searched_shape"])
    if i["as_searched"]:
        return f"- {model['id']}: input {shape}; the fp32 file is the network the search scored: {front} is for this input"
    fp32 = next((v for v in model.get("variants", []) if v["variant"] == "fp32"), None)
    pred = (fp32 or {}).get("predicted")
    what = "the searched input shape but not the searched Arch" if shape == searched else f"NOT the searched {searched}"
    files = f" (fp32 file: {pred['ms']:.4f} ms predicted)" if pred else ""
    return (f"- {model['id']}: input {shape}, {what}: {front} is for {searched}; the files have the latency of "
            f"{shape}{files}")


def _input_lines(report: Mapping[str, Any]) -> list[str]:
    """The Exported input section: one ``input_line`` per model that records its input."""
    got = [line for line in map(input_line, report["models"]) if line]
    return ["", "Exported input (every file of the model, batch 1, NCHW):", "", *got] if got else []


def _deploy_lines(report: Mapping[str, Any]) -> list[str]:
    """The Deploy section: each model's choice (``deployment_choice``), or why there is none."""
    choices = report.get("deploy") or {}
    if not report["models"]:
        return []
    tol = next((d["tolerance"] for d in choices.values() if d), DEPLOY_TOLERANCE)
    lines = ["", f"Deploy (the fastest variant within {100 * tol:.0f} point of the fp32 accuracy):", ""]
    for m in report["models"]:
        mid, d = m["id"], choices.get(m["id"])
        if not d:
            names = [v["variant"] for v in m["variants"] if not v.get("predicted") and not v.get("measured")]
            why = (f"no latency for {', '.join(names)}" if names else "no fp32 variant to compare with")
            lines.append(f"- {mid}: not chosen ({why})")
            continue
        lines += _choice_lines(mid, d, m["variants"], _vs_fp32(m, d["variant"]))
    return lines


def _choice_lines(mid: str, d: Mapping[str, Any], variants: list[Mapping[str, Any]], vs_fp32: str = "") -> list[str]:
    """One model's deploy line: the choice, each figure marked by its source when it is not the
    device's (an estimate, a rehearsal), its accuracy against fp32 (``vs_fp32``), and then a line
    saying the choice rests on such figures."""
    src = d.get("sources")
    if src is None:  # a report written before the choice recorded its sources
        src = {v["variant"]: (v.get("predicted") or {}).get("source", "measured") for v in variants}
    marks = {k: f" ({_WORDS[s]})" if d["by"] == "predicted" and s in _WORDS else "" for k, s in src.items()}
    rel = ", ".join(f"{k} {r:.2f}x{marks.get(k, '')}" for k, r in d["vs_fp32"].items() if k != "fp32")
    lines = [f"- {mid}: **{d['variant']}**, {100 * d['accuracy']:.2f}%, {d['ms']:.4f} ms {d['by']}"
             f"{marks.get(d['variant'], '')} (latency vs fp32: {rel or 'no other variant within tolerance'}){vs_fp32}"]
    off = sorted({_WORDS[s] for k, s in src.items() if k in d["vs_fp32"] and s in _WORDS})
    if d["by"] == "predicted" and off:
        lines.append(f"  (a choice by {' and '.join(off)} figures, not the device's: measure the variants there "
                     "before deploying)")
    return lines
