"""Exported ONNX models checked against torch: outputs and accuracy with onnxruntime (batch 1, as
deployed), and the images they are checked and calibrated on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from nas.data import Dataset
from nas.export.onnx import ort_session

__all__ = ["batch1", "calibration_inputs", "check_finite_outputs", "eval_split", "onnx_accuracy", "scored_images",
           "split_note", "verify_onnx"]


def eval_split(data: Dataset) -> str:
    """The split accuracy is reported on: the test split when the dataset has one, else val."""
    return "test" if data.test is not None else "val"


def split_note(data: Dataset) -> str:
    """Where the reported split comes from, in words: the dataset's own test split, the hold-out carved
    from its training images (``data.test_fraction``), or val, which the search chose on (not held out)."""
    if data.test is not None:
        return data.test_source or "the dataset's own test split"
    return ("val: the split the search chose the front on, so NOT held out; set data.test_fraction=0.1 (before "
            "searching) for a test split nothing was chosen on")


def batch1(data: Dataset, split: str, limit: int | None) -> Iterator[tuple[np.ndarray, int]]:
    """Single images (numpy, batch 1) and labels of ``split``, at most ``limit``."""
    n = 0
    for x, y in data.batches(split, batch_size=256):
        for i in range(len(y)):
            if limit is not None and n >= limit:
                return
            yield x[i: i + 1].numpy(), int(y[i])
            n += 1


def scored_images(data: Dataset, split: str, limit: int | None = None) -> int:
    """How many images ``batch1`` (and so ``onnx_accuracy``) scores of ``split``, at most ``limit``."""
    n = len(data.test if split == "test" else data.val if split == "val" else data.train)
    return n if limit is None else min(n, limit)


def onnx_accuracy(model: bytes, data: Dataset, split: str, *, limit: int | None = None) -> float:
    """Top-1 accuracy of an ONNX model (batch 1, as deployed) with onnxruntime on the CPU."""
    sess = ort_session(model, threads=1)
    name = sess.get_inputs()[0].name
    correct = n = 0
    for x, y in batch1(data, split, limit):
        correct += int(np.argmax(sess.run(None, {name: x})[0]) == y)
        n += 1
    return correct / max(n, 1)


def calibration_inputs(data: Dataset, n: int, *, seed: int) -> list[np.ndarray]:
    """``n`` training images (seeded choice), batch 1, normalised as in training."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(data.train), generator=g)[: min(n, len(data.train))]
    x = data.images("train", idx)
    return [x[i: i + 1].numpy() for i in range(len(x))]


def check_finite_outputs(ref: np.ndarray, got: np.ndarray, *, runtime: str) -> None:
    """Refuse (``ValueError``) outputs of the torch model (``ref``) or of the exported one run by ``runtime``
    (``got``) that are not all finite: NaN compares as no difference at all, and such a network gives no
    answer on the device."""
    for who, out in (("the torch model", ref), (f"the exported model ({runtime})", got)):
        bad = int((~np.isfinite(out.reshape(len(out), -1))).any(axis=1).sum())
        if bad:
            raise ValueError(f"{who} gives NaN or infinite outputs on {bad} of {len(out)} inputs, so the export "
                             f"cannot be verified and would give no answer on the device; train the network again "
                             f"(a lower train.lr), or export an earlier checkpoint")


def verify_onnx(onnx: bytes, model: nn.Module, in_shape: tuple[int, int, int], *, data: Dataset | None,
                samples: int, is_qat: bool) -> dict[str, Any]:
    """Compare an ONNX model run by onnxruntime with the torch model it was exported from.

    Args:
        onnx: the exported model.
        model: the torch model (the fake-quant network for a QAT export).
        in_shape: ``(channels, height, width)`` of one input.
        data: images to compare on (its evaluation split, ``eval_split``); None: seeded random inputs.
        samples: how many inputs, each run at batch 1.
        is_qat: whether ``model`` is a QAT network (recorded under ``against``).

    Returns:
        ``samples``, ``inputs``, ``max_abs_diff``, ``top1_agreement``, ``against``, and
        ``onnx_accuracy`` when ``data`` has labels.

    Raises:
        ValueError: the torch model's or the ONNX model's outputs are not all finite (NaN or infinite):
            nothing to verify against, and nothing worth deploying.
    """
    if data is not None:
        pairs = list(batch1(data, eval_split(data), samples))
        xs, labels = [x for x, _ in pairs], [y for _, y in pairs]
    else:
        g = torch.Generator().manual_seed(0)
        xs = [torch.randn(1, *in_shape, generator=g).numpy() for _ in range(samples)]
        labels = None
    sess = ort_session(onnx, threads=1)
    name = sess.get_inputs()[0].name
    with torch.no_grad():
        ref = np.concatenate([model(torch.from_numpy(x)).numpy() for x in xs])
    got = np.concatenate([sess.run(None, {name: x})[0] for x in xs])
    check_finite_outputs(ref, got, runtime="onnxruntime")
    verify: dict[str, Any] = {"samples": len(xs),
                              "inputs": f"{eval_split(data)} images" if data is not None else "random inputs",
                              "max_abs_diff": float(np.abs(ref - got).max()),
                              "top1_agreement": float((ref.argmax(1) == got.argmax(1)).mean()),
                              "against": "the float torch model" if not is_qat else "the fake-quant torch model"}
    if labels is not None:
        verify["onnx_accuracy"] = float((got.argmax(1) == np.asarray(labels)).mean())
    return verify
