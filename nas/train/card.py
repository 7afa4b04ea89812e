"""Deployment cards: everything a user needs to run an exported network without this package.

``card.json`` beside each exported file (``<variant>.card.json``; ``<variant>.tflite.card.json`` and the
like for the edge formats) says what goes in (input name, shape, layout, dtype and, for an int8 ``.tflite``,
its quantization; colour mode), how an image becomes that input (resize, crop, scale, mean,
std, interpolation: exactly what the data loader did), what comes out (logits, the class names in
output order), how accurate it is and on which split, how fast and how that figure was obtained
(measured here, predicted from a measured table, estimated, or a REHEARSAL's), and which runtime and
precision it was made for.  A figure of another precision than the file's (the fp16 engine TensorRT
builds from an fp32 file) says so in its ``precision`` and ``for``.  The dataset record each checkpoint
stores (``nas.fit.checkpoint.dataset_record``) lets ``nas.export`` write the same card, and reload the
same data, from the checkpoint alone.

The recipe in ``preprocess`` is the loader's: a streamed dataset (ImageFolder, CIFAR-10) scores with
timm's eval transform (resize the shorter side to ``floor(resolution / crop_pct)``, centre crop
``resolution``, bilinear, on a PIL image); an in-memory one (digits, Fashion-MNIST) resizes the whole
image to ``resolution`` x ``resolution`` (bilinear, antialiased).  docs/train.md has a short
program that reads a card and classifies an image with onnxruntime, numpy and Pillow alone.

When the accuracy is the test split's, ``<variant>.test_files.txt`` beside the card lists the images
it was scored on, in order (``write_test_files``; the card's ``accuracy.files``), so a deployed
model can be checked on exactly those images.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nas._io import atomic_write_json, atomic_write_text
from nas.latency.tables import how_measured, how_predicted

__all__ = ["CARD_SCHEMA", "card_path", "deployment_card", "preprocess", "test_files_path",
           "write_card", "write_test_files"]

CARD_SCHEMA = "hwnas.deployment_card"


def preprocess(rec: Mapping[str, Any]) -> dict[str, Any]:
    """How an image becomes the network's input, from a dataset record (``nas.fit.checkpoint.dataset_record``)."""
    r = int(rec["resolution"])
    s = rec["settings"]
    if rec["streamed"]:
        resize = {"to": "shorter_side", "size": math.floor(r / float(s.get("crop_pct", 0.875))),
                  "interpolation": "bilinear"}
        crop: dict[str, Any] | None = {"to": "center", "size": r}
    else:
        resize = {"to": "square", "size": r, "interpolation": "bilinear"}
        crop = None
    return {"colour": "L" if rec["in_chans"] == 1 else "RGB", "resize": resize, "crop": crop, "scale": 1 / 255,
            "mean": list(rec["mean"]), "std": list(rec["std"]),
            "steps": ["convert to the colour mode", "resize", "crop (if any)", "to float, x scale (0..1)",
                      "subtract mean, divide by std (per channel)", "HWC -> CHW, add the batch axis"]}


def _latency(predicted: Mapping[str, Any] | None, measured: Mapping[str, Any] | None,
             target: Any, precision: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if measured:
        out["measured"] = {"ms": measured["median_ms"], "p10_ms": measured.get("p10_ms"),
                           "p90_ms": measured.get("p90_ms"), "precision": precision,
                           "how": measured.get("how") or how_measured(target.device.name or "this machine")}
    if predicted:
        source = predicted.get("source", "measured")
        how = predicted.get("how") or how_predicted(source, predicted["device"], predicted.get("rehearsal", ""))
        at = getattr(target, "precision", precision)
        out["predicted"] = {"ms": predicted["ms"], "how": how, "source": source, "target": predicted.get("target"),
                            "precision": at}
        what = (f"the {at} engine {target.runtime} builds from this {precision} file (target {target.name}), "
                f"not the file run at {precision}") if at != precision else ""
        if source == "rehearsal":  # the graphs timed elsewhere, as that machine ran them
            what = f"a stand-in, measured on another machine, for {what or f'this file on target {target.name}'}"
        if what:  # an fp16 target predicts the fp32 file: the engine its runtime builds from it
            out["predicted"]["for"] = what
    if not out:
        out["none"] = f"no target predicts this precision for {getattr(target, 'name', target)}"
    return out


def _io(card: dict[str, Any], io: Mapping[str, Any]) -> None:
    """Set the file's own input and output (a ``.tflite``: NHWC, int8 with its scale and zero point) in
    ``card``, and the preprocessing steps that reach that input."""
    i, o = io["input"], io["output"]
    card["input"].update({"name": i["name"], "shape": list(i["shape"]), "layout": i.get("layout") or "NCHW",
                          "dtype": i["dtype"]})
    card["output"].update({"name": o["name"], "shape": list(o["shape"]), "dtype": o["dtype"]})
    steps = card["preprocess"]["steps"]
    if card["input"]["layout"] == "NHWC":
        steps[-1] = "keep HWC (the file's layout is NHWC), add the batch axis"
    for key, part in (("input", i), ("output", o)):
        if part.get("quantization"):
            card[key]["quantization"] = dict(part["quantization"])
    if i.get("quantization"):
        steps.append(f"quantize to {i['dtype']}: q = round(x / scale) + zero_point, clipped to the type's range "
                     "(input.quantization)")
    if o.get("quantization"):
        card["output"]["meaning"] += f"; {o['dtype']}: logits = scale * (q - zero_point) (output.quantization)"


def deployment_card(*, file: str | Path, variant: str, precision: str, arch: Any, data: Mapping[str, Any],
                    accuracy: float | None, split: str, split_note: str, predicted: Mapping[str, Any] | None,
                    measured: Mapping[str, Any] | None, target: Any, io: Mapping[str, Any] | None = None,
                    files: str | Path | None = None) -> dict[str, Any]:
    """The card of one exported file.

    Args:
        file: the exported file (ONNX, ``.pte``, ``.tflite`` or OpenVINO ``.xml``).
        variant, precision: what it is (``fp32``, ``pruned``, ``ptq_int8`` ...; ``fp32`` / ``int8``).
        arch: its ``Arch`` (input channels and resolution).
        data: the ``dataset_record`` of the data it was trained and scored on.
        accuracy: its accuracy (0..1) on ``split`` (None: not scored).
        split, split_note: the split and where it comes from (``nas.export.verify.split_note``).
        predicted, measured: the latency records of the export (``Prediction.to_dict()`` + label, and a
            ``measure_onnx`` result), either may be None.
        target: the ``Target`` it was made for (the one predicting its precision).
        io: the file's own input and output when they are not ``[1, C, H, W]`` float32 in and float32
            logits out (``nas.export.litert.io_spec`` of a ``.tflite``: NHWC, int8 with its quantization).
        files: the list of the images ``accuracy`` was scored on (``write_test_files``), if any.

    Returns:
        The card (a JSON-ready dict).
    """
    shape = [1, arch.in_chans, arch.resolution, arch.resolution]
    classes = list(data["classes"])
    card = {
        "schema": CARD_SCHEMA, "version": 1, "file": Path(file).name, "variant": variant, "precision": precision,
        "input": {"name": "input", "shape": shape, "layout": "NCHW", "dtype": "float32",
                  "colour": "L" if arch.in_chans == 1 else "RGB"},
        "preprocess": preprocess(data),
        "output": {"name": "output", "shape": [1, len(classes)], "meaning": "logits (softmax for probabilities)",
                   "classes": classes},
        "accuracy": {"value": accuracy, "split": split, "split_note": split_note,
                     **({"files": Path(files).name} if files else {})},
        "latency": _latency(predicted, measured, target, precision),
        "made_for": {"target": target.name, "device": target.device.name or target.device.kind,
                     "runtime": target.runtime, "provider": target.provider, "precision": precision},
    }
    if io:
        _io(card, io)
    return card


def card_path(file: str | Path) -> Path:
    """Where the card of an exported file goes, beside it: ``<stem>.card.json`` for an ONNX file,
    ``<name>.card.json`` for the other formats (``fp32.tflite.card.json``), so that the cards of one
    network's ONNX and ``.tflite`` / ``.pte`` / ``.xml`` files do not overwrite each other."""
    p = Path(file)
    return p.with_name(f"{p.stem if p.suffix == '.onnx' else p.name}.card.json")


def test_files_path(file: str | Path) -> Path:
    """Where the list of the test images an exported file was scored on goes: ``<stem>.test_files.txt``."""
    p = Path(file)
    return p.with_name(f"{p.stem}.test_files.txt")


def write_test_files(data: Any, file: str | Path, *, limit: int | None = None) -> Path | None:
    """List the test images an exported file was scored on beside it (``test_files_path``).

    Args:
        data: the loaded ``nas.data.Dataset``.
        file: the exported file.
        limit: how many of the test split were scored (its first ``limit``; None: all).

    Returns:
        The list's path: a comment line saying what it is, then one line per image in the order scored:
        its file (or ``train[i]`` / ``test[i]``, its index in the dataset's own training / test files),
        label index and class name, tab-separated.  None when the dataset has no test split.
    """
    if data.test is None or not data.test_files:
        return None
    n = len(data.test_files) if limit is None else min(limit, len(data.test_files))
    labels = data.test.labels[:n].tolist()
    head = (f"# the {n} test images {Path(file).name} was scored on, in order ({data.test_source or 'the test split'}); "
            f"file (train[i] / test[i]: its index in the dataset's own training / test files), label, class")
    lines = [head] + [f"{f}\t{y}\t{data.classes[y]}" for f, y in zip(data.test_files[:n], labels, strict=True)]
    path = test_files_path(file)
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def write_card(card: Mapping[str, Any], file: str | Path) -> Path:
    """Write ``card`` beside ``file`` (atomically); its path."""
    path = card_path(file)
    atomic_write_json(path, card)
    return path
