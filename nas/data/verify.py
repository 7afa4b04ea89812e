"""Unreadable images of a folder dataset, found before a batch reads them (``data.skip_bad``).

A streamed dataset of image files (``data=imagefolder``) is checked when it loads: every image a
split will read is decoded once with PIL (once per set of files: the result is kept under
``$HWNAS_HOME/cache/image_check/``, keyed by their paths, sizes and modification times), and one
PIL cannot decode (a truncated JPEG, a file that is not an image) is named with PIL's own reason.  With ``data.skip_bad=true`` (the default) such
images are left out of their split and counted in the dataset's summary, up to ``max_bad(n)`` of
the ``n`` checked (``MAX_BAD_FRACTION`` of them, at least ``MIN_MAX_BAD``); more than that, or any
with ``data.skip_bad=false``, and loading stops with a ``ValueError`` naming the first ones.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from nas._io import atomic_write_json
from nas.resources import user_home

__all__ = ["MAX_BAD_FRACTION", "MIN_MAX_BAD", "BadImage", "ImageCheck", "image_problem", "max_bad", "skipped_note"]

log = logging.getLogger(__name__)

MAX_BAD_FRACTION = 0.01  # of the images checked, at most this many may be skipped ...
MIN_MAX_BAD = 10  # ... or this many, whichever is more
_NAMED = 3  # unreadable images named in a message


@dataclass(frozen=True)
class BadImage:
    """An image file PIL cannot decode, and PIL's reason."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path} ({self.reason})"


def image_problem(path: str) -> str | None:
    """Why PIL cannot decode the image file at ``path`` (in PIL's words), or None when it can.

    The file is decoded as torchvision's ImageFolder reads it (``Image.open`` then every pixel)."""
    try:
        with Image.open(path) as im:
            im.load()
    except UnidentifiedImageError:
        return "not an image PIL can identify"
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def max_bad(n: int) -> int:
    """How many of ``n`` checked images ``data.skip_bad=true`` may skip."""
    return max(MIN_MAX_BAD, int(n * MAX_BAD_FRACTION))


@dataclass
class ImageCheck:
    """The images of one dataset's splits, checked split by split (``keep``), then judged (``done``).

    Args:
        skip: ``data.skip_bad``: leave unreadable images out (up to ``max_bad``) rather than stop.
        source: the dataset's folder, for messages.
        workers: threads decoding at once (PIL decodes outside Python's lock).
    """

    skip: bool
    source: str
    workers: int = 1
    checked: set[str] = field(default_factory=set)
    bad: dict[str, BadImage] = field(default_factory=dict)

    def keep(self, base: Any, idx: np.ndarray) -> np.ndarray:
        """``idx`` (indices into ``base``, a torchvision dataset with ``samples``) without its unreadable
        images; a dataset without files (``samples``) is returned as it is.

        Raises:
            ValueError: an image is unreadable and ``skip`` is False.
        """
        samples: Sequence[tuple[str, int]] | None = getattr(base, "samples", None)
        if samples is None:
            return idx
        paths = [str(samples[int(i)][0]) for i in idx]
        new = list(dict.fromkeys(p for p in paths if p not in self.checked))
        reasons = self._reasons(new)
        self.checked.update(new)
        for path, reason in zip(new, reasons):
            if reason is None:
                continue
            if not self.skip:
                raise ValueError(f"unreadable image {path}: {reason}; remove or replace it, or set "
                                 f"data.skip_bad=true to leave such images out")
            self.bad[path] = BadImage(path, reason)
            log.warning("skipping unreadable image %s: %s", path, reason)
        out = [i for i, p in zip(idx, paths) if p not in self.bad]
        return np.asarray(out, dtype=idx.dtype)

    def _reasons(self, paths: list[str]) -> list[str | None]:
        """``image_problem`` of each path, decoded in ``workers`` threads, or read from the record of an
        earlier check of exactly these files (same paths, sizes and modification times:
        ``$HWNAS_HOME/cache/image_check/``), so a folder is decoded once, not at every load."""
        if not paths:
            return []
        key = hashlib.sha1()
        for p in paths:
            try:
                st = os.stat(p)
                key.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode(errors="surrogateescape"))
            except OSError:
                key.update(f"{p}\0missing\n".encode(errors="surrogateescape"))
        record = user_home() / "cache" / "image_check" / f"{key.hexdigest()}.json"
        try:
            bad = json.loads(record.read_text())
            return [bad.get(p) for p in paths]
        except (OSError, ValueError):
            pass
        with ThreadPoolExecutor(max(1, self.workers)) as pool:
            reasons = list(pool.map(image_problem, paths))
        try:  # a record that cannot be written only costs the next load its decoding
            atomic_write_json(record, {p: r for p, r in zip(paths, reasons) if r is not None})
        except OSError:
            pass
        return reasons

    def done(self) -> tuple[BadImage, ...]:
        """The unreadable images skipped, in the order found.

        Raises:
            ValueError: more than ``max_bad`` of the checked images are unreadable (the first ones named).
        """
        bad, n = list(self.bad.values()), len(self.checked)
        if len(bad) > max_bad(n):
            first = "; ".join(map(str, bad[:_NAMED]))
            raise ValueError(f"{len(bad)} of {n} images in {self.source} are unreadable, more than data.skip_bad "
                             f"leaves out ({max_bad(n)}); first: {first}")
        return tuple(bad)


def skipped_note(bad: Sequence[BadImage]) -> str:
    """``"; 2 unreadable images skipped (first: <path> (<reason>))"`` for a dataset's summary, or ``""``."""
    if not bad:
        return ""
    return f"; {len(bad)} unreadable image{'s' if len(bad) > 1 else ''} skipped (first: {bad[0]})"
