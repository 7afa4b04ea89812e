"""Deployment cards: the card beside an export holds what a user needs, and docs/train.md's example,
run as written with onnxruntime, numpy and Pillow alone, classifies an image as torch does on the
image the data loader prepared."""

import json
import re
import sys
from pathlib import Path

import forked
import numpy as np
import pytest
import torch

from nas.builder import build
from nas.data import load_data
from nas.export.onnx import export_onnx
from nas.export.verify import eval_split, split_note
from nas.fit.checkpoint import dataset_record
from nas.space import load_space
from nas.target import load_target
from nas.train.card import card_path, deployment_card, write_card

DOCS = Path(__file__).resolve().parent.parent / "docs" / "train.md"


def _example() -> str:
    """The Python block of docs/train.md's deployment-card section."""
    text = DOCS.read_text()
    section = text[text.index("## Deployment cards"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _images(folder: Path, classes=("cat", "dog"), n=10) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in classes:
        (folder / c).mkdir(parents=True)
        for i in range(n):  # landscape and portrait, so the shorter-side resize is exercised both ways
            size = (23, 17) if i % 2 else (15, 26)
            Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(folder / c / f"{i}.png")


@pytest.mark.parametrize("channels", [3, 1])
def test_the_docs_example_classifies_as_torch_does(tmp_path, channels):
    _images(tmp_path / "imgs")
    data = load_data({"name": "imagefolder", "root": str(tmp_path / "imgs"), "resolution": 16, "channels": channels,
                      "num_workers": 0})
    arch = load_space("tiny").random(3).with_head(in_chans=channels, num_classes=2).with_resolution(16)
    torch.manual_seed(0)
    model = build(arch).eval()
    onnx = tmp_path / "fp32.onnx"
    onnx.write_bytes(export_onnx(model, torch.zeros(1, channels, 16, 16)))
    target = load_target("cpu")
    card = deployment_card(file=onnx, variant="fp32", precision="fp32", arch=arch, data=dataset_record(data),
                           accuracy=0.5, split=eval_split(data), split_note=split_note(data),
                           predicted={"ms": 0.1, "source": "measured", "device": "Xeon", "target": "cpu"},
                           measured=None, target=target)
    write_card(card, onnx)
    saved = json.loads(card_path(onnx).read_text())
    assert saved["input"] == {"name": "input", "shape": [1, channels, 16, 16], "layout": "NCHW", "dtype": "float32",
                              "colour": "L" if channels == 1 else "RGB"}
    assert saved["output"]["classes"] == ["cat", "dog"] and saved["output"]["meaning"].startswith("logits")
    assert saved["preprocess"]["resize"] == {"to": "shorter_side", "size": 18, "interpolation": "bilinear"}
    assert saved["accuracy"]["split"] == "test" and saved["accuracy"]["split_note"].startswith("held out")
    assert saved["latency"]["predicted"]["how"] == "predicted from a measured table (Xeon)"
    assert saved["made_for"]["runtime"] == "onnxruntime"

    script = tmp_path / "classify.py"
    script.write_text(_example())
    x, y = next(data.batches("test", batch_size=len(data.test)))
    files = [data.test.base.samples[i][0] for i in data.test.indices]
    with torch.no_grad():
        want = model(x).numpy()
    code = _example()
    ns: dict = {}
    exec(code[:code.index("model = Path(sys.argv[1])")], ns)  # the example's imports and preprocess()
    for k in (0, 1):  # the example's input is the loader's, pixel for pixel
        assert np.abs(ns["preprocess"](saved, files[k])[0] - x[k].numpy()).max() < 1e-5
    for k in (0, 1):
        r = forked.run([sys.executable, str(script), str(onnx), files[k]], timeout=120)
        assert r.returncode == 0, r.stderr
        name, logits = r.stdout.split(" ", 1)
        got = np.array(json.loads(logits))
        assert np.abs(got - want[k]).max() < 1e-4, (got, want[k])
        assert name == ["cat", "dog"][int(want[k].argmax())]


def test_cards_of_an_in_memory_dataset_resize_the_whole_image():
    data = load_data({"name": "digits"})
    rec = dataset_record(data)
    arch = load_space("tiny").random(0).with_head(in_chans=1, num_classes=10).with_resolution(16)
    card = deployment_card(file="x.onnx", variant="fp32", precision="fp32", arch=arch, data=rec, accuracy=None,
                           split="val", split_note=split_note(data), predicted=None, measured=None,
                           target=load_target("cpu"))
    assert card["preprocess"]["resize"] == {"to": "square", "size": 16, "interpolation": "bilinear"}
    assert card["preprocess"]["crop"] is None and card["output"]["classes"] == [str(i) for i in range(10)]
    assert "NOT held out" in card["accuracy"]["split_note"] and "none" in card["latency"]


def test_nas_export_takes_everything_from_the_checkpoint(tmp_path):
    """A grayscale ImageFolder network trained by nas.train's loop: nas.export needs only weights= (the
    folder, channels, resolution, classes and workers come from the checkpoint), a data= group with
    other defaults still gets the Arch's channels and the recorded folder, and the card is written."""
    from nas.fit.loop import fit
    from nas.fit.settings import FitSettings
    from nas.train.deploy import export_checkpoint

    _images(tmp_path / "imgs")
    data = load_data({"name": "imagefolder", "root": str(tmp_path / "imgs"), "resolution": 16, "channels": 1,
                      "num_workers": 0})
    arch = load_space("tiny").random(3).with_head(in_chans=1, num_classes=2).with_resolution(16)
    model = build(arch)
    fit(model, data, settings=FitSettings(epochs=1, batch_size=8, bn_recalibration_batches=1), epochs=1, lr=0.01,
        ckpt=tmp_path / "fp32.ckpt", seed=0, meta={"data": {}})
    target = load_target("cpu").replace(table=None)
    rec = export_checkpoint(weights=tmp_path / "fp32.ckpt", precision="int8", target=target,
                            verify_samples=4, export=_no_measure())
    card = json.loads(Path(rec["card"]).read_text())
    assert card["input"]["shape"] == [1, 1, 16, 16] and card["input"]["colour"] == "L"
    assert card["output"]["classes"] == ["cat", "dog"] and card["accuracy"]["split"] == "test"
    assert card["latency"]["predicted"]["how"].startswith(("estimated (roofline", "predicted from a measured table"))
    assert card["made_for"]["precision"] == "int8"
    group = {"name": "imagefolder", "root": "???", "resolution": 32, "channels": 3, "num_workers": 4}
    rec = export_checkpoint(weights=tmp_path / "fp32.ckpt", precision="fp32", target=target, data=group,
                            out=tmp_path / "g.onnx", verify_samples=4, export=_no_measure())
    assert rec["verify"]["samples"] == 2 and Path(rec["card"]).is_file()
    moved = tmp_path / "moved"
    (tmp_path / "imgs").rename(moved)
    rec = export_checkpoint(weights=tmp_path / "fp32.ckpt", precision="fp32", target=target, data_root=str(moved),
                            out=tmp_path / "m.onnx", verify_samples=4, export=_no_measure())
    assert rec["verify"]["samples"] == 2


def _no_measure():
    from nas.train.settings import ExportSettings

    return ExportSettings(measure=False, calib_samples=8)


def test_a_tflite_card_gives_its_nhwc_int8_input_and_its_own_name():
    """A .tflite's own input (``nas.export.litert.io_spec``: NHWC, int8 with scale and zero point) replaces the
    NCHW float32 default, the preprocessing says how to reach it, and its card does not take the name of the
    ONNX export's card beside it."""
    from nas.train.card import card_path

    data = load_data({"name": "digits"})
    arch = load_space("tiny").random(0).with_head(in_chans=1, num_classes=10).with_resolution(16)
    q = {"scale": 0.02, "zero_point": -3, "real_value": "scale * (q - zero_point)"}
    io = {"input": {"name": "serving_default_args_0", "shape": [1, 16, 16, 1], "dtype": "int8", "layout": "NHWC",
                    "quantization": q},
          "output": {"name": "out", "shape": [1, 10], "dtype": "int8", "layout": None, "quantization": q}}
    card = deployment_card(file="m.int8.tflite", variant="ptq_int8", precision="int8", arch=arch,
                           data=dataset_record(data), accuracy=None, split="val", split_note=split_note(data),
                           predicted=None, measured=None, target=load_target("litert_cpu_int8"), io=io)
    assert card["input"]["layout"] == "NHWC" and card["input"]["shape"] == [1, 16, 16, 1]
    assert card["input"]["dtype"] == "int8" and card["input"]["quantization"]["zero_point"] == -3
    assert card["preprocess"]["steps"][-2].startswith("keep HWC") and card["preprocess"]["steps"][-1].startswith(
        "quantize to int8")
    assert card["output"]["dtype"] == "int8" and "logits = scale * (q - zero_point)" in card["output"]["meaning"]
    plain = deployment_card(file="m.onnx", variant="fp32", precision="fp32", arch=arch, data=dataset_record(data),
                            accuracy=None, split="val", split_note=split_note(data), predicted=None, measured=None,
                            target=load_target("cpu"))
    assert plain["input"]["layout"] == "NCHW" and plain["preprocess"]["steps"][-1] == "HWC -> CHW, add the batch axis"
    assert card_path("e/fp32.onnx").name == "fp32.card.json" and card_path("e/fp32.tflite").name == "fp32.tflite.card.json"


def test_export_lists_the_test_images_and_exports_for_the_checkpoints_target(tmp_path):
    """The checkpoint records its target and nas.export exports for it (the code before used cpu
    unless told); the card says for which target and lists the test files it was scored on, each
    with its label, so a deployed model can be checked on exactly those images."""
    from nas.fit.checkpoint import load_checkpoint
    from nas.fit.loop import fit
    from nas.fit.settings import FitSettings
    from nas.train.card import test_files_path
    from nas.train.deploy import export_checkpoint

    _images(tmp_path / "imgs", n=20)
    data = load_data({"name": "imagefolder", "root": str(tmp_path / "imgs"), "resolution": 16, "channels": 1,
                      "num_workers": 0})
    arch = load_space("tiny").random(3).with_head(in_chans=1, num_classes=2).with_resolution(16)
    trained_for = load_target("cpu").replace(table=None)
    fit(build(arch), data, settings=FitSettings(epochs=1, batch_size=8, bn_recalibration_batches=1), epochs=1, lr=0.01,
        ckpt=tmp_path / "fp32.ckpt", seed=0, meta={"data": {}}, target=trained_for)
    assert load_checkpoint(tmp_path / "fp32.ckpt")["target"]["name"] == "cpu"
    rec = export_checkpoint(weights=tmp_path / "fp32.ckpt", precision="int8", verify_samples=3, export=_no_measure())
    assert rec["target"] == {"name": "cpu_int8", "from": "the checkpoint's", "of": "cpu"}
    card = json.loads(Path(rec["card"]).read_text())
    assert card["made_for"]["target"] == "cpu_int8" and card["accuracy"]["split"] == "test"
    listed = test_files_path(rec["onnx"])
    assert card["accuracy"]["files"] == listed.name
    head, *lines = listed.read_text().splitlines()
    assert head.startswith("# the 3 test images ") and len(lines) == 3 == rec["verify"]["samples"]
    for line, f, y in zip(lines, data.test_files, data.test.labels.tolist(), strict=False):
        path, label, name = line.split("\t")
        assert path == f and Path(path).is_file() and int(label) == y and Path(path).parent.name == name


def test_in_memory_test_files_are_indices_of_the_datasets_own_files():
    d = load_data({"name": "digits", "resolution": 8, "test_fraction": 0.1})
    assert len(d.test_files) == len(d.test) and all(f.startswith("train[") for f in d.test_files)
    from sklearn.datasets import load_digits

    raw = load_digits()
    first = int(d.test_files[0][len("train["):-1])
    assert raw.target[first] == int(d.test.labels[0])  # the index names the very image
    assert load_data({"name": "digits", "resolution": 8}).test_files == ()  # no test split, nothing listed
