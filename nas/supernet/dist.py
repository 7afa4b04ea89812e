"""The processes of a ``torchrun`` supernet training: where this one stands, gradient averaging, and
the start-up check that every process runs with the same settings.  Light on imports (torch only),
so it loads fast in every process."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as td
from torch import nn

__all__ = ["Dist", "allreduce_grads", "check_same_settings", "digest_of", "process_group"]


def digest_of(obj: Any) -> str:
    """A stable digest of a JSON-able record."""
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _leaf_diffs(a: Any, b: Any, path: str) -> list[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in [*a, *(k for k in b if k not in a)]
                for d in _leaf_diffs(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}" if path else str(k))]
    return [] if a == b else [(path, a, b)]


@dataclass(frozen=True)
class Dist:
    """This process's place among the ``torchrun`` processes (rank 0 of 1 without torchrun)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def active(self) -> bool:
        return self.world > 1

    @classmethod
    def current(cls) -> Dist:
        if td.is_available() and td.is_initialized():
            return cls(td.get_rank(), td.get_world_size(), int(os.environ.get("LOCAL_RANK", td.get_rank())))
        return cls()


def allreduce_grads(params: list[nn.Parameter], world: int) -> None:
    """Average the gradients over the processes (one flat all-reduce)."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    td.all_reduce(flat)
    flat /= world
    i = 0
    for p, g in zip(params, grads):
        n = g.numel()
        p.grad = flat[i:i + n].view_as(p)
        i += n


def check_same_settings(record: dict[str, Any], dist: Dist) -> None:
    """Refuse to train when the processes were started with different settings (all ranks raise)."""
    if not dist.active:
        return

    mine = digest_of(record)
    got: list[Any] = [None] * dist.world
    td.all_gather_object(got, (mine, record))
    for r, (d, rec) in enumerate(got):
        if d != got[0][0]:
            diffs = [f"{k}: {a!r} on rank 0, {b!r} on rank {r}" for k, a, b in _leaf_diffs(got[0][1], rec, "")]
            raise ValueError(f"torchrun: rank {r} runs with other settings than rank 0 ({'; '.join(diffs[:3])}); "
                             f"start every process with the same command")


@contextlib.contextmanager
def process_group(device: str) -> Iterator[None]:
    """Under ``torchrun`` (``WORLD_SIZE`` > 1): the default process group for this run, destroyed after."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        yield
        return

    gpu = device != "cpu" and torch.cuda.is_available()
    if gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    td.init_process_group(backend="nccl" if gpu else "gloo")
    try:
        yield
    finally:
        td.destroy_process_group()
