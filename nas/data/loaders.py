"""The built-in dataset loaders (``data=digits``, ``fashion_mnist``, ``cifar10``, ``imagefolder``).

The small datasets (digits, fashion_mnist) return native-resolution uint8 images and labels
(``RawArrays``), which ``nas.data.load_data`` resizes, splits and keeps in memory; cifar10 and
imagefolder return torchvision datasets (``DatasetFiles``) that ``nas.data.stream`` reads per batch.
Apart from the registry (``nas.data.datasets``), so that a config names and checks a dataset without
loading scikit-learn, timm or torchvision; ``nas.data.load`` imports this module, which registers them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from torchvision.datasets import CIFAR10, FashionMNIST, ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS

from nas.data.datasets import (
    CACHE_DIR,
    DEBIAN_FASHION_MNIST,
    FASHION_CLASSES,
    FASHION_FILES,
    DatasetFiles,
    DatasetNotFoundError,
    RawArrays,
    idx_files,
    read_idx,
    register_dataset,
)
from nas.data.settings import DataSettings

__all__ = ["CIFAR10_MEAN", "CIFAR10_STD", "FolderWalk"]

log = logging.getLogger(__name__)


@register_dataset("digits")
def _digits(s: DataSettings) -> RawArrays:
    d = load_digits()
    x = np.round(d.images * (255.0 / 16.0)).astype(np.uint8)[:, None]  # 0..16 -> 0..255, N x 1 x 8 x 8
    return RawArrays(x, d.target.astype(np.int64), None, None, tuple(str(c) for c in range(10)),
                "scikit-learn load_digits (embedded)")


@register_dataset("fashion_mnist")
def _fashion_mnist(s: DataSettings) -> RawArrays:
    # torchvision's FashionMNIST keeps its files in <root>/FashionMNIST/raw (uncompressed); the Debian
    # package ships the same four files gzipped in /usr/share/datasets/fashion-mnist.  Both are read in
    # place (no copy); torchvision's class is used to download, and only when asked.
    roots = [Path(s.root).expanduser()] if s.root else [DEBIAN_FASHION_MNIST, CACHE_DIR]
    looked = []
    for r in roots:
        for folder in (r, r / "FashionMNIST" / "raw"):
            looked.append(str(folder))
            files = idx_files(folder)
            if files:
                return _fashion_from(files, folder)
    if s.download:
        target = Path(s.root).expanduser() if s.root else CACHE_DIR

        log.info("downloading Fashion-MNIST into %s", target)
        FashionMNIST(str(target), train=True, download=True)
        folder = target / "FashionMNIST" / "raw"
        files = idx_files(folder)
        if files:
            return _fashion_from(files, folder)
        looked.append(str(folder))
    where = f" under data.root={s.root}" if s.root else ""
    raise DatasetNotFoundError(
        f"Fashion-MNIST not found{where}: looked for {', '.join(FASHION_FILES.values())} (or .gz) in "
        f"{', '.join(looked)}. Get it with `apt-get install dataset-fashion-mnist` (Debian/Ubuntu: files in "
        f"{DEBIAN_FASHION_MNIST}), or point data.root at a folder holding the four IDX files, or pass "
        f"data.download=true to download it with torchvision into {s.root or CACHE_DIR}"
    )


def _fashion_from(files: dict[str, Path], folder: Path) -> RawArrays:
    arrs = {k: read_idx(p) for k, p in files.items()}
    for split in ("train", "test"):
        if len(arrs[f"{split}_x"]) != len(arrs[f"{split}_y"]):
            raise ValueError(f"{folder}: {split} images and labels differ in count")
    return RawArrays(arrs["train_x"][:, None], arrs["train_y"].astype(np.int64), arrs["test_x"][:, None],
                arrs["test_y"].astype(np.int64), FASHION_CLASSES, str(folder))


CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)  # the training set's per-channel statistics


CIFAR10_STD = (0.2470, 0.2435, 0.2616)


@register_dataset("cifar10")
def _cifar10(s: DataSettings) -> DatasetFiles:
    if not s.root:
        raise DatasetNotFoundError(
            "cifar10 needs data.root: the folder holding cifar-10-batches-py/ (the CIFAR-10 python version from "
            "https://www.cs.toronto.edu/~kriz/cifar.html), or add data.download=true to download it there "
            "with torchvision"
        )
    root = Path(s.root).expanduser()
    if root.name == CIFAR10.base_folder and (root / "data_batch_1").is_file():
        root = root.parent  # data.root named the batches folder itself
    folder = root / CIFAR10.base_folder
    if not (folder / "data_batch_1").is_file() and not s.download:
        raise DatasetNotFoundError(
            f"CIFAR-10 not found: looked for data_batch_1..5 and test_batch in {folder}. Download the python version "
            f"from https://www.cs.toronto.edu/~kriz/cifar.html and extract it under data.root, or add "
            f"data.download=true to download it with torchvision"
        )
    if s.download:
        log.info("CIFAR-10 into %s (downloaded if missing)", root)
    try:
        train = CIFAR10(str(root), train=True, download=s.download)
        test = CIFAR10(str(root), train=False, download=False)
    except RuntimeError as e:  # torchvision: "Dataset not found or corrupted" (a file missing or damaged)
        raise DatasetNotFoundError(f"CIFAR-10 in {folder}: {e}; extract the python version there again, or add "
                                   f"data.download=true") from None
    return DatasetFiles(train, None, test, tuple(train.classes), str(folder), 3, CIFAR10_MEAN, CIFAR10_STD)


def _key(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


class FolderWalk:
    """The image files under class folders, each folder walked once however many links lead to it (a
    link back to a parent, ``a/loop -> ..``, is not followed into a loop) and each file listed once
    (the same file reached through a link again, in this split or an earlier one, is left out).

    Args:
        reserved: folders never entered from below (the dataset's root, its split folders and every
            class folder), so one class's link never walks into another class.
    """

    def __init__(self, reserved: Iterable[Path]) -> None:
        self.dirs = {_key(os.stat(d)) for d in reserved}
        self.files: set[tuple[int, int]] = set()
        self.again: list[str] = []  # files reached a second time, left out

    def _scan(self, folder: str) -> list[os.DirEntry]:
        try:
            with os.scandir(folder) as it:
                return list(it)
        except OSError as e:
            raise ValueError(f"imagefolder: cannot read the folder {folder} ({e.strerror or e}); its images would be "
                             f"left out of the dataset without a word: make it readable (chmod -R u+rX {folder}), or "
                             f"move it out of data.root") from None

    def images(self, top: str, is_valid: Callable[[str], bool]) -> list[str]:
        """The files under ``top`` that ``is_valid``, in torchvision's order (by folder path, then name)."""
        found: dict[str, list[tuple[str, tuple[int, int]]]] = {}
        todo = [top]
        while todo:
            folder = todo.pop()
            found[folder] = []
            for e in self._scan(folder):
                try:
                    st = e.stat()  # follows a link; a broken or looping one is no folder nor file
                except OSError:
                    continue
                if e.is_dir() and _key(st) not in self.dirs:
                    self.dirs.add(_key(st))
                    todo.append(e.path)
                elif not e.is_dir() and is_valid(e.path):
                    found[folder].append((e.name, _key(st)))
        out = []
        for folder in sorted(found):
            for name, key in sorted(found[folder]):
                path = os.path.join(folder, name)
                if key in self.files:
                    self.again.append(path)
                    continue
                self.files.add(key)
                out.append(path)
        return out


class _ImageFolder(ImageFolder):
    """torchvision's ``ImageFolder`` listing its files with a ``FolderWalk`` (torchvision's own walk
    follows links for ever: a link to a parent listed the same images thousands of times)."""

    def __init__(self, root: Path, walk: FolderWalk) -> None:
        self.walk = walk
        super().__init__(str(root), allow_empty=True)

    def make_dataset(self, directory: str, class_to_idx: dict[str, int], extensions: tuple[str, ...] | None = None,
                     is_valid_file: Callable[[str], bool] | None = None,
                     allow_empty: bool = False) -> list[tuple[str, int]]:
        valid = is_valid_file or (lambda p: p.lower().endswith(tuple(extensions or ())))
        return [(path, idx) for cls, idx in sorted(class_to_idx.items())
                for path in self.walk.images(os.path.join(directory, cls), valid)]


def _class_dirs(folder: Path) -> list[Path]:
    return [d for d in folder.iterdir() if d.is_dir()]


def _warn_empty(data: ImageFolder, folder: Path) -> None:
    """A class folder without images is named: the network would learn a class it never saw."""
    counts = np.bincount(np.asarray(data.targets, dtype=np.int64), minlength=len(data.classes))
    for c in (c for c, n in zip(data.classes, counts) if n == 0 and not c.startswith(".")):
        log.warning("imagefolder: the class folder %s holds no image (%s): a class with no example",
                    folder / c, ", ".join(IMG_EXTENSIONS))


@register_dataset("imagefolder")
def _imagefolder(s: DataSettings) -> DatasetFiles:
    if not s.root:
        raise DatasetNotFoundError("imagefolder needs data.root: a folder of class folders (root/<class>/*.png), "
                                   "or root/train/<class>/... and root/val/<class>/...")
    root = Path(s.root).expanduser()
    if not root.is_dir():
        raise DatasetNotFoundError(f"imagefolder: data.root={root} is not a folder; it must hold one folder per "
                                   f"class (root/<class>/*.png), or train/ and val/ folders of class folders")
    channels = s.channels or 3
    val_dir = next((root / v for v in ("val", "validation") if (root / v).is_dir()), None)
    split_dirs = (root / "train").is_dir() and val_dir is not None
    tr_dir = root / "train" if split_dirs else root
    test_dir = root / "test" if split_dirs and (root / "test").is_dir() else None  # the user's own test split
    splits = [d for d in (tr_dir, val_dir if split_dirs else None, test_dir) if d is not None]
    walk = FolderWalk([root, *splits, *(c for d in splits for c in _class_dirs(d))])
    classes = sorted(d.name for d in _class_dirs(tr_dir) if not d.name.startswith("."))
    train = _ImageFolder(tr_dir, walk)
    if len(classes) < 2 or not train.samples:
        raise DatasetNotFoundError(
            f"imagefolder: found {len(classes)} class folder(s) and {len(train.samples)} images "
            f"({', '.join(IMG_EXTENSIONS)}) in {tr_dir}; expected at least two class folders of images: "
            f"root/<class>/*.png"
        )
    _warn_empty(train, tr_dir)
    val = None
    if split_dirs:
        val = _ImageFolder(val_dir, walk)
        if val.classes != train.classes:
            raise ValueError(f"imagefolder: {tr_dir} has classes {train.classes} but {val_dir} has {val.classes}")
    test = None
    if test_dir is not None:
        test = _ImageFolder(test_dir, walk)
        if test.classes != train.classes:
            raise ValueError(f"imagefolder: {tr_dir} has classes {train.classes} but {test_dir} has {test.classes}")
    if walk.again:
        log.warning("imagefolder: %d file(s) reached again through links were listed once (the first: %s)",
                    len(walk.again), walk.again[0])

    mean, std = ((0.5,), (0.5,)) if channels == 1 else (IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD)
    return DatasetFiles(train, val, test, tuple(train.classes), str(root), channels, tuple(mean), tuple(std))

