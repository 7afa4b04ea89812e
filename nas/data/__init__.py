"""Image classification datasets for the search: loaded once, held in memory as uint8 tensors.

Datasets are registered by name (``data=<name>`` on the command line):

    digits         scikit-learn's 8x8 handwritten digits (1797 images, 10 classes); ships with
                   scikit-learn, so it is always available: the default.
    fashion_mnist  Zalando's 28x28 grayscale clothing images (60k train + 10k test).  Found in
                   ``root``, else in the Debian package's folder (``apt-get install
                   dataset-fashion-mnist``: /usr/share/datasets/fashion-mnist/), else in the
                   download cache; downloaded with torchvision's ``FashionMNIST`` only when
                   ``download`` is true.
    cifar10        the CIFAR-10 python batches (``cifar-10-batches-py``) under ``root``
                   (``download=true`` fetches them with torchvision's ``CIFAR10``).
    imagefolder    ``root/<class>/*.png|jpg`` (split into train/val here), or
                   ``root/train/<class>/...`` + ``root/val/<class>/...``.

Where the images live:

- digits and fashion_mnist are **held in memory**: resized once to ``resolution`` (bilinear,
  antialiased) as uint8 tensors, normalised per channel with the training split's mean and std;
  ``augment`` is a seeded random translation (``crop``) and flip (``crop_flip``) on the tensors.
- cifar10 and imagefolder are **streamed** (``nas.data.stream``): torchvision's ``CIFAR10`` /
  ``ImageFolder`` read the files, timm's transforms make each image ``resolution`` px as it is
  loaded (training: RandomResizedCrop from ``crop_scale`` of the area, a flip with ``crop_flip``,
  RandAugment with ``auto_augment``; scoring: resize + centre crop by ``crop_pct``), and a
  ``DataLoader`` with ``num_workers`` persistent workers batches them.  Only the file list and the
  labels stay in RAM (CIFAR-10's torchvision class also keeps its 32x32 uint8 pixels: 180 MB).

Every dataset gets a stratified, seeded validation split held out of the training images (the
official test split, when there is one, is kept apart as ``test`` and never used by the search)
and may be subsampled (``train_samples`` / ``val_samples``).  ``Dataset.batches`` yields
normalised float batches of either kind.

The registry is ``nas.data.datasets``, the built-in loaders ``nas.data.loaders``, the loading in ``nas.data.load``, the settings in
``nas.data.settings``.  A dataset that cannot be found raises ``DatasetNotFoundError`` naming every
place it looked and how to get it.  Nothing is downloaded unless ``download`` is true.
"""

from __future__ import annotations

from nas._lazy import lazy_exports

__all__ = [
    "AUGMENTS",
    "DEBIAN_FASHION_MNIST",
    "DataSettings",
    "Dataset",
    "DatasetNotFoundError",
    "Split",
    "StreamSplit",
    "adapt_arch",
    "dataset_names",
    "load_data",
    "read_idx",
    "register_dataset",
]

# each name's module, imported on first use: the settings (a command's config schema) load no torch
_HOMES = {"AUGMENTS": "settings", "DataSettings": "settings",
          "DEBIAN_FASHION_MNIST": "datasets", "DatasetNotFoundError": "datasets", "dataset_names": "datasets",
          "read_idx": "datasets", "register_dataset": "datasets",
          "Dataset": "load", "Split": "load", "adapt_arch": "load", "load_data": "load", "StreamSplit": "stream"}

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
