"""The dataset registry (``data=<name>``): its names, what a loader returns, and the file readers the
loaders share.

The built-in loaders are in ``nas.data.loaders`` (they load scikit-learn, timm and torchvision), so a
config names and checks a dataset without them.  The module docs of ``nas.data`` describe each dataset
and where it is looked for.
"""

from __future__ import annotations

import gzip
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nas.registry import Registry

__all__ = ["BUILT_IN_DATASETS", "DEBIAN_FASHION_MNIST", "DatasetNotFoundError", "dataset_names", "read_idx", "register_dataset"]

log = logging.getLogger(__name__)

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")  # apt-get install dataset-fashion-mnist
CACHE_DIR = Path(os.environ.get("HWNAS_DATA", Path.home() / ".cache" / "hwnas" / "datasets"))


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are not where hwnas looked: the message names every place, and how to get them.

    A ``FileNotFoundError``; nothing is downloaded unless ``DataSettings.download`` is true.
    """


@dataclass
class RawArrays:
    """What a loader returns: native-resolution uint8 images (N x C x H x W) and labels."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray | None
    test_y: np.ndarray | None
    classes: tuple[str, ...]
    source: str
    val_x: np.ndarray | None = None  # an explicit validation split
    val_y: np.ndarray | None = None


# a loader takes the command's nas.data.settings.DataSettings (which reads the names registered here)
DATASET_LOADERS: Registry[Callable[[Any], Any]] = Registry("dataset")


def register_dataset(name: str) -> Callable:
    """Register a dataset loader under ``name`` (a decorator): ``data=<name>`` then selects it.

    The loader is ``fn(settings: DataSettings)`` and returns the images in memory (``RawArrays``: uint8
    arrays ``N x C x H x W`` and labels) or a file list to stream (``DatasetFiles``); it raises
    ``DatasetNotFoundError`` when the files are missing.

    Args:
        name: The dataset's name.

    Returns:
        The decorator, which returns the loader unchanged.

    Raises:
        ValueError: ``name`` is registered already (when the decorator is applied).
    """
    return DATASET_LOADERS.register(name)


# the loaders nas.data.loaders registers (a test checks the two agree)
BUILT_IN_DATASETS = ("cifar10", "digits", "fashion_mnist", "imagefolder")


def dataset_names() -> list[str]:
    """The datasets' names (``data=<name>``), sorted: the built-in ones and those registered."""
    return sorted(set(BUILT_IN_DATASETS) | set(DATASET_LOADERS.names()))


FASHION_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                   "Ankle boot")
FASHION_FILES = {
    "train_x": "train-images-idx3-ubyte", "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte", "test_y": "t10k-labels-idx1-ubyte",
}


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (the MNIST / Fashion-MNIST format), plain or gzipped.

    Args:
        path: The file (``.gz``: gzipped).

    Returns:
        Its uint8 array, in the shape its header gives.

    Raises:
        ValueError: The file is not an unsigned-byte IDX file, or holds fewer or more bytes than
            its header says.
    """
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{p}: not an unsigned-byte IDX file (bad magic {data[:4]!r})")
    nd = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(nd)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * nd)
    if arr.size != int(np.prod(dims)):
        raise ValueError(f"{p}: IDX header says {dims} but the file holds {arr.size} bytes")
    return arr.reshape(dims)


def idx_files(folder: Path) -> dict[str, Path] | None:
    """The four Fashion-MNIST files in ``folder`` (plain or .gz), or None if any is missing."""
    found = {}
    for k, stem in FASHION_FILES.items():
        for cand in (folder / stem, folder / f"{stem}.gz"):
            if cand.is_file():
                found[k] = cand
                break
        else:
            return None
    return found


@dataclass
class DatasetFiles:
    """What a streamed loader returns: torchvision datasets (images decoded per item, labels in
    ``targets``) and how to normalise them."""

    train: Any
    val: Any | None
    test: Any | None
    classes: tuple[str, ...]
    source: str
    channels: int
    mean: tuple[float, ...]
    std: tuple[float, ...]


