"""Supernet checkpoints: what the supernet was trained for, its weights, and the checks that refuse
a supernet for another space, dataset or resolution.

A checkpoint (``torch.save`` of plain types, written atomically after every epoch) holds ``format``
= ``SUPERNET_FORMAT``, the space (name, digest and its definition, so it rebuilds without the YAML),
the dataset (its settings, name, input channels, classes, resolution), the training settings, the
schedule's phases (name, first epoch and elastic dimensions of each; ``nas.supernet.schedule``), the
finished epoch count, the weights, the optimizer state and the per-epoch history (with each epoch's
phase).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas.fit.checkpoint import diff_messages, read_torch_file, save_checkpoint
from nas.space import SPACES_DIR, SearchSpace
from nas.supernet.model import Supernet

if TYPE_CHECKING:
    from nas.supernet.model import Supernet

__all__ = ["SUPERNET_FORMAT", "SUPERNET_VERSION", "check_matches", "data_record", "load_supernet",
           "read_checkpoint", "save_supernet", "space_record"]

SUPERNET_FORMAT = "hwnas.supernet"
SUPERNET_VERSION = 1
# data settings that do not change what the supernet learned (where the files are, loader workers)
_DATA_FREE = ("root", "download", "num_workers")


def space_record(space: SearchSpace) -> dict[str, Any]:
    return {"name": space.name, "digest": space.digest(), "source": space.source, "config": space.config}


def data_record(data: Any) -> dict[str, Any]:
    """The dataset as the supernet saw it (a ``nas.data.Dataset``)."""
    settings = {k: v for k, v in data.settings.to_dict().items() if k not in _DATA_FREE}
    return {"name": data.name, "in_chans": data.in_chans, "num_classes": data.num_classes,
            "resolution": data.resolution, "settings": settings}


def save_supernet(path: str | Path, *, supernet: Supernet, data: dict[str, Any], settings: dict[str, Any],
                  epoch: int, opt: dict[str, Any] | None, history: list[dict[str, Any]],
                  phases: list[dict[str, Any]] | None = None) -> None:
    save_checkpoint(Path(path), {
        "format": SUPERNET_FORMAT, "version": SUPERNET_VERSION, "space": space_record(supernet.space),
        "data": data, "settings": settings, "phases": phases, "epoch": epoch, "model": supernet.net.state_dict(),
        "opt": opt, "history": history})


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """A supernet checkpoint as written by ``save_supernet``; a missing, truncated or foreign file is a
    one-line error."""
    p, c = read_torch_file(path, not_found="supernet checkpoint not found: {p}; train one with python -m nas.supernet",
                           unreadable="{p}: not a readable supernet checkpoint ({first}); the file is damaged or "
                                      "truncated: re-run python -m nas.supernet to write it again")
    if not isinstance(c, dict) or c.get("format") != SUPERNET_FORMAT:
        raise ValueError(f"{p}: not a supernet checkpoint (format {c.get('format') if isinstance(c, dict) else None!r}"
                         f", expected {SUPERNET_FORMAT!r}); give the supernet.ckpt that python -m nas.supernet wrote")
    if c.get("version") != SUPERNET_VERSION:
        raise ValueError(f"{p}: supernet checkpoint version {c.get('version')!r}; this hwnas reads version "
                         f"{SUPERNET_VERSION}: train the supernet again")
    return c


@functools.lru_cache(maxsize=4)
def _load(path: str, mtime_ns: int, size: int) -> tuple[Supernet, dict[str, Any]]:
    c = read_checkpoint(path)
    space = SearchSpace(c["space"]["config"], source=c["space"]["source"])
    sn = Supernet(space, in_chans=c["data"]["in_chans"], num_classes=c["data"]["num_classes"])
    missing, unexpected = sn.net.load_state_dict(c["model"], strict=False)
    if missing or unexpected:
        raise ValueError(f"{path}: the weights do not fit the space the checkpoint names (missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}); train the supernet again")
    sn.eval()
    meta = {k: v for k, v in c.items() if k not in ("model", "opt")}
    return sn, meta


def load_supernet(path: str | Path) -> tuple[Supernet, dict[str, Any]]:
    """The supernet (eval mode, on the CPU) and its record (space, data, settings, epoch, history);
    loaded once per process and file version (a rewritten file is read again)."""
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise FileNotFoundError(f"supernet checkpoint not found: {p}; train one with python -m nas.supernet")
    st = p.stat()
    return _load(str(p), st.st_mtime_ns, st.st_size)


def check_matches(meta: dict[str, Any], path: str | Path, *, space: SearchSpace, data: Any,
                  resolution: bool = True) -> None:
    """Refuse a supernet trained for another space, dataset (its split included: scoring on images it
    trained on would flatter it) or, with ``resolution``, another input resolution."""
    got = meta["space"]

    shipped = Path(space.source).parent == SPACES_DIR and (SPACES_DIR / f"{space.name}.yaml").is_file()
    if got["digest"] != space.digest():
        raise ValueError(f"supernet {path} was trained on space {got['name']!r} (digest {got['digest']}), this run "
                         f"uses {space.name!r} (digest {space.digest()}): train a supernet for it with "
                         f"python -m nas.supernet search_space={space.name if shipped else space.source}")
    want = data_record(data)
    have = meta["data"]
    for key in ("name", "in_chans", "num_classes"):
        if have[key] != want[key]:
            raise ValueError(f"supernet {path} was trained on dataset {have['name']!r} ({have['in_chans']} channels, "
                             f"{have['num_classes']} classes), this run uses {want['name']!r} ({want['in_chans']} "
                             f"channels, {want['num_classes']} classes): train a supernet with data={want['name']}")
    if resolution and have["resolution"] != want["resolution"]:
        raise ValueError(f"supernet {path} was trained at {have['resolution']}px, this run scores at "
                         f"{want['resolution']}px: set data.resolution={have['resolution']} or train a supernet "
                         f"at {want['resolution']}px")
    split = ("val_fraction", "test_fraction", "seed")  # what decides which images are held out
    d = diff_messages({k: have["settings"].get(k) for k in split}, {k: want["settings"].get(k) for k in split})
    if d:
        raise ValueError(f"supernet {path} was trained on another split of {want['name']} ({'; '.join(d)}), so its "
                         f"validation images may be ones it trained on: use the same data settings")

