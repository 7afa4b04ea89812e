"""Exported ONNX models checked and timed: accuracy with onnxruntime (batch 1, as deployed),
calibration images for PTQ, latency measured on this machine."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np
import torch

from nas.data import Dataset
from nas.target import Target

__all__ = ["MeasureSettings", "batch1", "calibration_inputs", "eval_split", "measure_onnx", "onnx_accuracy", "split_note"]


class MeasureSettings(Protocol):
    """How exported models are timed (``nas.train.settings.ExportSettings`` is one)."""

    rounds: int
    warmup: int
    repeats: int
    min_time_s: float


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


def onnx_accuracy(model: bytes, data: Dataset, split: str, *, limit: int | None = None) -> float:
    """Top-1 accuracy of an ONNX model (batch 1, as deployed) with onnxruntime on the CPU."""
    from nas.export.onnx import ort_session

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


def measure_onnx(model: bytes, in_shape: tuple[int, int, int], target: Target,
                 settings: MeasureSettings) -> dict[str, Any]:
    """Median latency (ms; p10 / p90 too) over ``settings.rounds`` rounds, each in a fresh session:
    the latency package's one measuring loop."""
    from nas.latency.measure import time_onnx_stats

    return time_onnx_stats(model, in_shape, target, rounds=settings.rounds, warmup=settings.warmup,
                           repeats=settings.repeats, min_time_s=settings.min_time_s)
