"""The ``Runtime`` interface every inference runtime implements, and the registry of runtimes.

``nas.latency.runtimes.core`` (onnxruntime, torch, torch.compile, TensorRT) and
``nas.latency.runtimes.edge`` (ExecuTorch, OpenVINO) register theirs with ``register``;
``nas.latency.runtimes.get_runtime`` picks one for a target.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from nas.latency.tables import EAGER, GRAPH
from nas.machine import RuntimeUnavailable
from nas.registry import Registry

__all__ = ["RUNTIMES", "Runtime", "Tiny", "register"]

log = logging.getLogger(__name__)

RUNTIMES: Registry[type[Runtime]] = Registry("runtime")


def register(name: str):
    """A class decorator registering a ``Runtime`` in ``RUNTIMES``.

    Args:
        name: the runtime's name in a target (``runtime: <name>``); set as the class's ``name`` too.

    Raises:
        ValueError: ``name`` is registered already.
    """

    def deco(cls):
        RUNTIMES.add(name, cls)
        cls.name = name
        return cls

    return deco


# --------------------------------------------------------------------------------------------


class Runtime(ABC):
    """One way to run a network on a device.  Construct via ``get_runtime(target)``."""

    name: str = ""
    precisions: tuple[str, ...] = ("fp32",)

    def __init__(self, *, provider: str = "", precision: str = "fp32", threads: int = 1, batch: int = 1,
                 device_kind: str = "cpu", cuda_graph: bool = False) -> None:
        if precision not in self.precisions:
            raise RuntimeUnavailable(
                f"runtime {self.name!r} does not support precision {precision!r}; it supports "
                f"{', '.join(self.precisions)}"
            )
        self.provider, self.precision, self.threads, self.batch = provider, precision, threads, batch
        self.device_kind, self.cuda_graph = device_kind, cuda_graph
        # blocks that could not be captured as a CUDA graph, timed eager instead: label -> reason
        self.graph_fallbacks: dict[str, str] = {}
        self.check()

    @abstractmethod
    def check(self) -> None:
        """Raise ``RuntimeUnavailable`` (naming what to install) if this cannot run here."""

    @abstractmethod
    def version(self) -> str: ...

    @abstractmethod
    def prepare(self, module: nn.Module, in_shape: tuple[int, int, int], *, key: Any = None) -> Callable[[], Any]:
        """A zero-argument callable running one synchronous inference at batch ``self.batch``.

        ``key`` (hashable, e.g. a BlockKey or Arch) lets a runtime reuse work between calls
        for the same graph (the profiler's rounds)."""

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version(), "provider": self.provider, "timing": self.timing}

    @property
    def timer(self) -> str:
        """What times a call (the table's ``measurement.timer``)."""
        return "perf_counter_ns"

    @property
    def timing(self) -> str:
        """``cuda_graph`` when this runtime replays captured graphs, else ``eager``."""
        return GRAPH if self.cuda_graph else EAGER

    def _fell_back(self, key: Any, reason: str) -> None:
        label = str(key) if key is not None else "an unnamed graph"
        self.graph_fallbacks[label] = reason
        log.warning("CUDA graph capture failed for %s, timed eager instead: %s", label, reason)

    def overhead_runner(self, in_shape: tuple[int, int, int] = (8, 8, 8)) -> Callable[[], Any]:
        """A runner for an (almost) empty graph: the fixed cost of one call."""
        return self.prepare(Tiny(), in_shape)

    def _input(self, in_shape: tuple[int, int, int]) -> torch.Tensor:
        g = torch.Generator().manual_seed(0)
        return torch.randn(self.batch, *in_shape, generator=g)


class Tiny(nn.Module):
    """The smallest graph every runtime accepts: one elementwise op."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1.5
