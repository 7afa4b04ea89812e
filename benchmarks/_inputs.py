"""What the supernet benchmarks (``benchmarks/supernet.py``, ``supernet_ablation.py``, ``supernet_cost.py``,
``supernet_search.py``) take in: their data options and the training subset they load, the test split a
reference is scored on, and the search space they rank, each bad value a one-line error."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import numpy as np

from nas.data import load_data
from nas.space import load_space


def add_subset_args(p: argparse.ArgumentParser) -> None:
    """The data options of the supernet benchmarks: one training subset, small enough for a run on one core."""
    p.add_argument("--data", default="fashion_mnist", help="dataset (fashion_mnist, digits, cifar10, imagefolder)")
    p.add_argument("--data-root", help="where the dataset's files are (data.root; cifar10 and imagefolder need it)")
    p.add_argument("--train-samples", type=int, default=2000, help="training subset (images; 0: all)")
    p.add_argument("--val-samples", type=int, default=1000, help="validation images scored (0: the whole split)")
    p.add_argument("--resolution", type=int, default=16, help="input px of training and scoring (16 keeps a run short)")
    p.add_argument("--num-workers", type=int, default=4, help="loader processes of a streamed dataset (cifar10, imagefolder)")


def load_subset(a: argparse.Namespace) -> Any:
    """The dataset ``add_subset_args``'s options name, no augmentation; says what it loaded."""
    try:
        data = load_data({"name": a.data, "root": a.data_root, "resolution": a.resolution,
                          "train_samples": a.train_samples or None, "val_samples": a.val_samples or None,
                          "augment": "none", "num_workers": a.num_workers})
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        raise SystemExit(f"--data {a.data}: {e}") from None
    subset = f"a training subset of {a.train_samples} images" if a.train_samples else "every training image"
    print(f"data: {data.describe()} ({subset})", flush=True)
    return data


def on_test_split(data: Any, samples: int = 0) -> Any:
    """``data`` with its test split in the validation split's place, so that an evaluator's score is test
    accuracy: what nothing was chosen on.

    Args:
        data: a loaded dataset.
        samples: score only the test split's first ``samples`` images (0: all; a streamed split: all).

    Returns:
        The dataset, its ``val`` the test split.

    Raises:
        SystemExit: the dataset has no test split.
    """
    if data.test is None:
        raise SystemExit(f"--data {data.name}: no test split to score the reference on; give a dataset with one "
                         "(fashion_mnist has its own 10k test images)")
    test = data.test
    if samples and samples < len(test) and hasattr(test, "subset"):
        test = test.subset(np.arange(samples))
    return dataclasses.replace(data, val=test)


def load_bench_space(name: str) -> Any:
    """The ``--space``; an unknown name or a malformed file is a one-line error."""
    try:
        return load_space(name)
    except (ValueError, FileNotFoundError, KeyError) as e:
        raise SystemExit(f"--space {name}: {e}") from None
