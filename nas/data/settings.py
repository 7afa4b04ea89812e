"""What to load: ``DataSettings`` (the ``data`` config group's names, types, defaults and checks).

Apart from the loaders (``nas.data.load``), so a command's config schema is made without torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nas._checks import check_resolution
from nas.data.datasets import dataset_names

__all__ = ["AUGMENTS", "DataSettings"]

AUGMENTS = ("none", "crop", "crop_flip")  # the values of DataSettings.augment


@dataclass(frozen=True)
class DataSettings:
    """What to load: the ``data`` config group (``data=<name>``, ``data.<field>=``).

    Each field's comment is its explanation (``--help`` shows it; docs/data.md has the table).
    ``load_data(settings)`` loads the dataset.

    Raises:
        ValueError: A field is out of range or of the wrong type, or ``name`` is not a registered
            dataset (the message names the field, the value and what is allowed).

    Example:
        >>> from nas.data import DataSettings
        >>> DataSettings(name="digits", resolution=16, train_samples=200).val_fraction
        0.2
    """

    name: str = "digits"
    root: str | None = None  # where the files are (fashion_mnist, cifar10, imagefolder)
    resolution: int = 16  # every image is resized to resolution x resolution
    channels: int | None = None  # imagefolder: 1 (grayscale) or 3 (RGB); others: their own
    val_fraction: float = 0.2  # of the training images, held out (stratified) for scoring
    # of the training images, carved once (stratified, a fixed seed) as the test split where the dataset has
    # none: never trained on, never scored by the search; nas.train reports on it.  None: 0.1 for
    # imagefolder (without a test/ folder), 0 for the others (digits then reports on val, and says so)
    test_fraction: float | None = None
    train_samples: int | None = None  # cap on training images after the split (None: all)
    val_samples: int | None = None  # cap on validation images (None: all)
    augment: str = "none"  # none | crop | crop_flip (training batches only)
    download: bool = False  # fashion_mnist / cifar10: download if not found
    seed: int = 0  # the split and the subsampling
    # streamed datasets (cifar10, imagefolder) only:
    num_workers: int = 4  # DataLoader worker processes (persistent; 0: load in the main process)
    auto_augment: str | None = None  # timm's RandAugment / AutoAugment string, e.g. rand-m9-mstd0.5
    crop_scale: float = 0.08  # RandomResizedCrop: smallest crop, as a fraction of the image area
    crop_pct: float = 0.875  # scoring: resize to resolution / crop_pct, then centre crop
    # imagefolder: an image PIL cannot decode is left out, named and counted (at most 1% of the images, or 10);
    # false: it stops the loading, named
    skip_bad: bool = True

    def __post_init__(self) -> None:
        if self.name not in dataset_names():
            raise ValueError(f"data.name: unknown dataset {self.name!r}; valid datasets: {', '.join(dataset_names())}")
        _pos_int("data.resolution", self.resolution)
        check_resolution("data.resolution", self.resolution)
        if self.channels is not None and self.channels not in (1, 3):
            raise ValueError(f"data.channels must be 1, 3 or null, got {self.channels!r}")
        if not isinstance(self.val_fraction, (int, float)) or not 0 < self.val_fraction < 1:
            raise ValueError(f"data.val_fraction must be in (0, 1), got {self.val_fraction!r}")
        tf = self.test_fraction
        if tf is not None and (isinstance(tf, bool) or not isinstance(tf, (int, float)) or not 0 <= tf < 0.5):
            raise ValueError(f"data.test_fraction must be in [0, 0.5) or null (the dataset's default), got {tf!r}")
        for k in ("train_samples", "val_samples"):
            v = getattr(self, k)
            if v is not None:
                _pos_int(f"data.{k}", v)
        if self.augment not in AUGMENTS:
            raise ValueError(f"data.augment must be one of {', '.join(AUGMENTS)}, got {self.augment!r}")
        if isinstance(self.num_workers, bool) or not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise ValueError(f"data.num_workers must be an integer >= 0 (0: load in the main process), "
                             f"got {self.num_workers!r}")
        for k in ("crop_scale", "crop_pct"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
                raise ValueError(f"data.{k} must be in (0, 1], got {v!r}")
        if not isinstance(self.skip_bad, bool):
            raise ValueError(f"data.skip_bad must be true or false, got {self.skip_bad!r}")
        if self.auto_augment is not None and not isinstance(self.auto_augment, str):
            raise ValueError(f"data.auto_augment must be a timm augmentation string (e.g. rand-m9-mstd0.5) or null, "
                             f"got {self.auto_augment!r}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DataSettings:
        """The settings of a mapping (a config's ``data`` node, a checkpoint's record).

        Args:
            d: Field values by name; missing fields take their defaults.

        Returns:
            The checked ``DataSettings``.

        Raises:
            ValueError: A key is not a field (the valid keys are listed), or a value is refused.
        """
        names = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"data: unknown key(s) {unknown}; valid keys: {sorted(names)}")
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        """Every field by name; :meth:`from_dict` reads it back."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _pos_int(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
