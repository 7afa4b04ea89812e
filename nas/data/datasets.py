"""The registered dataset loaders (``data=<name>``): each returns native-resolution uint8 images and labels.

``nas.data.load_data`` resizes, splits and normalises what they return; the module docs of ``nas.data``
describe each dataset and where it is looked for.
"""

from __future__ import annotations

import gzip
import logging
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from nas.registry import Registry

if TYPE_CHECKING:
    from nas.data import DataSettings

__all__ = ["DEBIAN_FASHION_MNIST", "DatasetNotFoundError", "dataset_names", "read_idx", "register_dataset"]

log = logging.getLogger(__name__)

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
CACHE_DIR = Path(os.environ.get("HWNAS_DATA", Path.home() / ".cache" / "hwnas" / "datasets"))
_IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


class DatasetNotFoundError(FileNotFoundError):
    """The dataset's files are not where we looked: the message says where, and how to get them."""


@dataclass
class _Raw:
    """What a loader returns: native-resolution uint8 images (N x C x H x W) and labels."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray | None
    test_y: np.ndarray | None
    classes: tuple[str, ...]
    source: str
    val_x: np.ndarray | None = None  # an explicit validation split (imagefolder train/ + val/)
    val_y: np.ndarray | None = None


_DATASETS: Registry[Callable[[DataSettings], _Raw]] = Registry("dataset")


def register_dataset(name: str) -> Callable:
    """Decorator registering a loader ``fn(settings) -> _Raw`` under ``name``."""
    return _DATASETS.register(name)


def dataset_names() -> list[str]:
    return _DATASETS.names()


# --------------------------------------------------------------------------------------------
# loaders


@register_dataset("digits")
def _digits(s: DataSettings) -> _Raw:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = np.round(d.images * (255.0 / 16.0)).astype(np.uint8)[:, None]  # 0..16 -> 0..255, N x 1 x 8 x 8
    return _Raw(x, d.target.astype(np.int64), None, None, tuple(str(c) for c in range(10)),
                "scikit-learn load_digits (embedded)")


FASHION_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                   "Ankle boot")
_FASHION_FILES = {
    "train_x": "train-images-idx3-ubyte", "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte", "test_y": "t10k-labels-idx1-ubyte",
}


def read_idx(path: str | Path) -> np.ndarray:
    """An IDX ("Pascal Vincent" / MNIST) file, plain or gzipped, as a uint8 array."""
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


def _idx_files(folder: Path) -> dict[str, Path] | None:
    """The four Fashion-MNIST files in ``folder`` (plain or .gz), or None if any is missing."""
    found = {}
    for k, stem in _FASHION_FILES.items():
        for cand in (folder / stem, folder / f"{stem}.gz"):
            if cand.is_file():
                found[k] = cand
                break
        else:
            return None
    return found


@register_dataset("fashion_mnist")
def _fashion_mnist(s: DataSettings) -> _Raw:
    # torchvision's FashionMNIST keeps its files in <root>/FashionMNIST/raw (uncompressed); the Debian
    # package ships the same four files gzipped in /usr/share/datasets/fashion-mnist.  Both are read in
    # place (no copy); torchvision's class is used to download, and only when asked.
    roots = [Path(s.root).expanduser()] if s.root else [DEBIAN_FASHION_MNIST, CACHE_DIR]
    looked = []
    for r in roots:
        for folder in (r, r / "FashionMNIST" / "raw"):
            looked.append(str(folder))
            files = _idx_files(folder)
            if files:
                return _fashion_from(files, folder)
    if s.download:
        target = Path(s.root).expanduser() if s.root else CACHE_DIR
        from torchvision.datasets import FashionMNIST

        log.info("downloading Fashion-MNIST into %s", target)
        FashionMNIST(str(target), train=True, download=True)
        folder = target / "FashionMNIST" / "raw"
        files = _idx_files(folder)
        if files:
            return _fashion_from(files, folder)
        looked.append(str(folder))
    where = f" under data.root={s.root}" if s.root else ""
    raise DatasetNotFoundError(
        f"Fashion-MNIST not found{where}: looked for {', '.join(_FASHION_FILES.values())} (or .gz) in "
        f"{', '.join(looked)}. Get it with `apt-get install dataset-fashion-mnist` (Debian/Ubuntu: files in "
        f"{DEBIAN_FASHION_MNIST}), or point data.root at a folder holding the four IDX files, or pass "
        f"data.download=true to download it with torchvision into {s.root or CACHE_DIR}"
    )


def _fashion_from(files: dict[str, Path], folder: Path) -> _Raw:
    arrs = {k: read_idx(p) for k, p in files.items()}
    for split in ("train", "test"):
        if len(arrs[f"{split}_x"]) != len(arrs[f"{split}_y"]):
            raise ValueError(f"{folder}: {split} images and labels differ in count")
    return _Raw(arrs["train_x"][:, None], arrs["train_y"].astype(np.int64), arrs["test_x"][:, None],
                arrs["test_y"].astype(np.int64), FASHION_CLASSES, str(folder))


@register_dataset("cifar10")
def _cifar10(s: DataSettings) -> _Raw:
    if not s.root:
        raise DatasetNotFoundError(
            "cifar10 needs data.root: the folder holding cifar-10-batches-py/ (the CIFAR-10 python version from "
            "https://www.cs.toronto.edu/~kriz/cifar.html), or add data.download=true to download it there "
            "with torchvision"
        )
    root = Path(s.root).expanduser()
    cands = [root / "cifar-10-batches-py", root]
    folder = next((c for c in cands if (c / "data_batch_1").is_file()), None)
    if folder is None and s.download:
        from torchvision.datasets import CIFAR10

        log.info("downloading CIFAR-10 into %s", root)
        CIFAR10(str(root), train=True, download=True)
        folder = root / "cifar-10-batches-py"
    if folder is None:
        raise DatasetNotFoundError(
            f"CIFAR-10 not found: looked for data_batch_1..5 and test_batch in {', '.join(map(str, cands))}. "
            f"Download the python version from https://www.cs.toronto.edu/~kriz/cifar.html and extract it under "
            f"data.root, or add data.download=true to download it with torchvision"
        )

    def batch(name: str) -> tuple[np.ndarray, np.ndarray]:
        p = folder / name
        if not p.is_file():
            raise DatasetNotFoundError(f"CIFAR-10 in {folder} is incomplete: {p} is missing")
        with open(p, "rb") as f:
            d = pickle.load(f, encoding="latin1")  # the official python format is pickled numpy
        return np.asarray(d["data"], dtype=np.uint8).reshape(-1, 3, 32, 32), np.asarray(d["labels"], dtype=np.int64)

    parts = [batch(f"data_batch_{i}") for i in range(1, 6)]
    tx, ty = batch("test_batch")
    classes: tuple[str, ...] = tuple(str(i) for i in range(10))
    meta = folder / "batches.meta"
    if meta.is_file():
        with open(meta, "rb") as f:
            classes = tuple(pickle.load(f, encoding="latin1").get("label_names", classes))
    return _Raw(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), tx, ty, classes,
                str(folder))


def _list_class_folder(folder: Path) -> tuple[list[str], list[tuple[Path, int]]]:
    classes = sorted(d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
    items = []
    for i, c in enumerate(classes):
        for p in sorted((folder / c).rglob("*")):
            if p.suffix.lower() in _IMAGE_EXTS and p.is_file():
                items.append((p, i))
    return classes, items


def _load_images(items: list[tuple[Path, int]], channels: int, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Resize (shorter side to r) + centre crop each image to r x r; N x C x r x r uint8."""
    from PIL import Image

    mode = "L" if channels == 1 else "RGB"
    xs = np.empty((len(items), channels, r, r), dtype=np.uint8)
    ys = np.empty(len(items), dtype=np.int64)
    for j, (p, label) in enumerate(items):
        try:
            with Image.open(p) as im:
                im = im.convert(mode)
                w, h = im.size
                sc = r / min(w, h)
                nw, nh = max(r, round(w * sc)), max(r, round(h * sc))
                im = im.resize((nw, nh), Image.BILINEAR)
                left, top = (nw - r) // 2, (nh - r) // 2
                a = np.asarray(im.crop((left, top, left + r, top + r)), dtype=np.uint8)
        except OSError as e:
            raise ValueError(f"cannot read image {p}: {e}") from None
        xs[j] = a[None] if channels == 1 else a.transpose(2, 0, 1)
        ys[j] = label
    return xs, ys


@register_dataset("imagefolder")
def _imagefolder(s: DataSettings) -> _Raw:
    if not s.root:
        raise DatasetNotFoundError("imagefolder needs data.root: a folder of class folders (root/<class>/*.png), "
                                   "or root/train/<class>/... and root/val/<class>/...")
    root = Path(s.root).expanduser()
    if not root.is_dir():
        raise DatasetNotFoundError(f"imagefolder: data.root={root} is not a folder; it must hold one folder per "
                                   f"class (root/<class>/*.png), or train/ and val/ folders of class folders")
    channels = s.channels or 3
    val_dir = next((root / v for v in ("val", "validation") if (root / v).is_dir()), None)
    if (root / "train").is_dir() and val_dir is not None:
        classes, tr_items = _list_class_folder(root / "train")
        vclasses, va_items = _list_class_folder(val_dir)
        if vclasses != classes:
            raise ValueError(f"imagefolder: {root / 'train'} has classes {classes} but {val_dir} has {vclasses}")
    else:
        classes, tr_items = _list_class_folder(root)
        va_items = []
    if len(classes) < 2 or not tr_items:
        raise DatasetNotFoundError(
            f"imagefolder: found {len(classes)} class folder(s) and {len(tr_items)} images ({', '.join(_IMAGE_EXTS)}) "
            f"in {root}; expected at least two class folders of images: root/<class>/*.png"
        )
    rng = np.random.default_rng(s.seed)
    tr_x, tr_y = _load_images(tr_items, channels, s.resolution)
    va_x = va_y = None
    if va_items:
        if s.val_samples is not None and s.val_samples < len(va_items):
            va_items = [va_items[i] for i in np.sort(rng.permutation(len(va_items))[: s.val_samples])]
        va_x, va_y = _load_images(va_items, channels, s.resolution)
    return _Raw(tr_x, tr_y, None, None, tuple(classes), str(root), va_x, va_y)
