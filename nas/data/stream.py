"""Streamed splits: images decoded and transformed per batch by a ``DataLoader``, never held whole.

``cifar10`` and ``imagefolder`` are read through torchvision's datasets (``CIFAR10``,
``ImageFolder``); a ``StreamSplit`` is a list of indices into one of them plus timm's transforms
(``timm.data.create_transform``): for training RandomResizedCrop (area ``data.crop_scale`` .. 1),
a horizontal flip with ``augment=crop_flip`` and RandAugment / AutoAugment with
``data.auto_augment`` (timm's strings, e.g. ``rand-m9-mstd0.5``); for scoring a resize to
``resolution / crop_pct`` and a centre crop.  Batches come from a ``DataLoader`` with
``data.num_workers`` worker processes (persistent, so a search does not start them per trial or
per epoch) and pinned memory when the batches go to a CUDA device.

The order of the samples is the caller's (``torch.randperm`` with the caller's generator, as for
the in-memory splits), and each training sample's random transform is drawn from a seed that the
same generator gives it, so the same generator gives the same batches with any ``num_workers``,
and persistent workers carry no random state from one trial or epoch to the next.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from timm.data import create_transform
from torch.utils.data import DataLoader, Sampler

__all__ = ["StreamSplit", "make_transforms"]

log = logging.getLogger(__name__)


class _Samples(torch.utils.data.Dataset):
    """``base[indices[i]]`` through ``transform`` (the image converted to ``mode`` first)."""

    def __init__(self, base: Any, indices: np.ndarray, mode: str, transform: Callable) -> None:
        self.base, self.indices, self.mode, self.transform = base, indices, mode, transform

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[torch.Tensor, int]:
        """Item ``key``, or ``(i, seed)``: item ``i`` with its random transform drawn from ``seed``
        (torch's, Python's and numpy's global RNGs, restored after, so the caller's streams are left alone)."""
        i, seed = key if isinstance(key, tuple) else (key, None)
        j = int(self.indices[i])
        try:
            img, y = self.base[j]
        except OSError as e:  # PIL's errors (an image changed since the loading checked it): the file named
            samples = getattr(self.base, "samples", None)
            raise OSError(f"unreadable image {samples[j][0] if samples else f'#{j}'}: {type(e).__name__}: {e}") from e
        if img.mode != self.mode:
            img = img.convert(self.mode)
        if seed is None:
            return self.transform(img), int(y)
        state, np_state = random.getstate(), np.random.get_state()  # timm's RandAugment draws from both
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                random.seed(seed)
                np.random.seed(seed)
                return self.transform(img), int(y)
        finally:
            random.setstate(state)
            np.random.set_state(np_state)


class _Order(Sampler):
    """Yields the order the caller set for this pass, each index with its augmentation seed when
    there are seeds (the loader's sampler; it runs in the main process)."""

    def __init__(self, n: int) -> None:
        self.order = torch.arange(n)
        self.seeds: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.order)

    def __iter__(self) -> Iterator[Any]:
        if self.seeds is None:
            return iter(self.order.tolist())
        return iter(zip(self.order.tolist(), self.seeds.tolist()))


def make_transforms(resolution: int, *, augment: str, auto_augment: str | None, crop_scale: float,
                    crop_pct: float, mean: Sequence[float], std: Sequence[float]) -> tuple[Callable, Callable]:
    """timm's (train, eval) transforms at ``resolution``; ``augment=none`` trains on the eval transform."""
    ev = create_transform(resolution, is_training=False, crop_pct=crop_pct, interpolation="bilinear",
                          mean=tuple(mean), std=tuple(std))
    if augment == "none" and not auto_augment:
        return ev, ev
    tr = create_transform(resolution, is_training=True, scale=(crop_scale, 1.0), hflip=0.5 if augment == "crop_flip"
                          else 0.0, color_jitter=None, auto_augment=auto_augment, interpolation="bilinear",
                          mean=tuple(mean), std=tuple(std))
    return tr, ev


class StreamSplit:
    """A split read from disk per batch (cifar10, imagefolder); ``load_data`` makes it.

    Only the indices and the labels stay in memory; a ``DataLoader`` with persistent workers
    decodes and transforms the images of each batch.

    Args:
        base: A torchvision dataset whose ``targets`` are the labels (``CIFAR10``, ``ImageFolder``).
        indices: This split's positions in ``base``.
        channels: 1 (read as grayscale) or 3 (RGB).
        train_tf: The training transform (augmentation, resize, normalisation).
        eval_tf: The scoring transform (resize, centre crop, normalisation).
        num_workers: ``DataLoader`` worker processes (0: load in the calling process).
    """

    def __init__(self, base: Any, indices: np.ndarray, *, channels: int, train_tf: Callable, eval_tf: Callable,
                 num_workers: int) -> None:
        self.base, self.indices, self.channels = base, np.asarray(indices, dtype=np.int64), channels
        self.num_workers = num_workers
        mode = "L" if channels == 1 else "RGB"
        self._sets = {True: _Samples(base, self.indices, mode, train_tf), False: _Samples(base, self.indices, mode,
                                                                                           eval_tf)}
        self._loaders: dict[tuple, tuple[DataLoader, _Order]] = {}

    def __len__(self) -> int:
        return len(self.indices)

    @property
    def labels(self) -> torch.Tensor:
        """The labels (from the dataset's ``targets``: no image is read)."""
        return torch.as_tensor(np.asarray(self.base.targets, dtype=np.int64)[self.indices])

    def _loader(self, batch_size: int, augment: bool, drop_last: bool, pin: bool) -> tuple[DataLoader, _Order]:
        key = (batch_size, augment, drop_last, pin)
        if key not in self._loaders:
            order = _Order(len(self))
            w = self.num_workers
            dl = DataLoader(self._sets[augment], batch_size=batch_size, sampler=order, drop_last=drop_last,
                            num_workers=w, persistent_workers=w > 0, pin_memory=pin,
                            prefetch_factor=2 if w > 0 else None,
                            generator=torch.Generator().manual_seed(0))  # its worker seeds: not from the global RNG
            self._loaders[key] = (dl, order)
        return self._loaders[key]

    def batches(self, *, batch_size: int, shuffle: bool, generator: torch.Generator | None, augment: bool,
                drop_last: bool, device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Iterate over the split in batches; ``Dataset.batches`` calls it with the same arguments.

        Returns:
            An iterator of ``(images, labels)``: normalised float32 ``N x C x H x W`` and int64 ``(N,)``;
            with ``augment`` each image's augmentation is seeded from ``generator``.
        """
        n = len(self)
        dl, order = self._loader(batch_size, augment, drop_last and n >= batch_size, device.type == "cuda")
        order.order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        order.seeds = torch.randint(0, 2**31 - 1, (n,), generator=generator) if augment else None
        for x, y in dl:
            yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    def eval_images(self, idx: Sequence[int]) -> torch.Tensor:
        """The images at positions ``idx`` through the eval transform (normalised floats)."""
        return torch.stack([self._sets[False][int(i)][0] for i in idx])
