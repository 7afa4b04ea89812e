"""CUDA-graph timing: capture one inference once, replay it, time each replay with CUDA events.

At batch 1 a small network's eager latency on a GPU is mostly the host's Python dispatch, which
jitters from round to round; a replayed graph launches every kernel in one call, so its time is the
GPU's.  GPU deployments replay graphs too (TensorRT, onnxruntime's ``enable_cuda_graph``,
``torch.compile(mode="reduce-overhead")``), so a table meant for them is timed this way.

``capture(fn)`` follows the recipe of torch's CUDA-graph documentation (warm-up on a side stream,
then ``torch.cuda.graph``); a function that cannot be captured (a host synchronisation, a CPU
fallback, dynamic shapes) gives ``(None, reason)`` and the caller falls back to eager timing, naming
the block.  ``GraphRunner.timed(k)`` replays ``k`` times back to back between CUDA events, after a
GPU-side spin (``torch.cuda._sleep``) long enough for the host to queue every replay first, so no
interval includes the host's launch time.

Why our own loop: ``triton.testing.do_bench_cudagraph`` captures many calls in one graph and reports
one aggregate, while a table entry needs the per-replay times (median, p10, p90, the spread that
triggers a re-measure) inside ``nas.latency.runtimes.loop``'s loop.  Every CUDA call goes through the
``cuda`` argument (``torch.cuda`` by default), so the logic runs against a stand-in on a CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from nas.latency.tables import GRAPH

__all__ = ["GraphRunner", "capture"]

_WARMUP = 3  # side-stream calls before capture (cuDNN / cuBLAS pick their algorithms and workspaces there)
_SPIN_CAL_CYCLES = 2_000_000
_MAX_SPIN_MS = 20.0  # a batch's spin, at most (a stalled host call must not make every batch wait long)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:200]}"


def capture(fn: Callable[[], Any], *, cuda: Any = None) -> tuple[GraphRunner | None, str]:
    """Capture ``fn`` (one inference on CUDA tensors that stay alive) as a CUDA graph.

    Args:
        fn: a zero-argument callable that launches the inference; its inputs must be static tensors.
        cuda: ``torch.cuda`` or a stand-in with the same names (tests).

    Returns:
        ``(runner, "")`` when the capture worked, else ``(None, reason)`` with the error in one line;
        the device is synchronised either way, so eager calls can follow.
    """
    if cuda is None:
        cuda = torch.cuda
    side = cuda.Stream()
    side.wait_stream(cuda.current_stream())
    try:
        with cuda.stream(side):
            for _ in range(_WARMUP):
                fn()
        cuda.current_stream().wait_stream(side)
        cuda.synchronize()
        graph = cuda.CUDAGraph()
        with cuda.graph(graph):
            out = fn()
        cuda.synchronize()
    except RuntimeError as e:
        reason = _one_line(e)
        try:
            cuda.synchronize()
        except RuntimeError:
            pass
        return None, reason
    return GraphRunner(graph, cuda, keep=out), ""


class GraphRunner:
    """A captured inference: calling it replays once and waits; ``timed(k)`` gives ``k`` replay times
    in ms measured by CUDA events.  ``timing`` is ``"cuda_graph"``."""

    timing = GRAPH

    def __init__(self, graph: Any, cuda: Any, *, keep: Any = None) -> None:
        self.graph, self.cuda, self.keep = graph, cuda, keep  # keep: the graph's static outputs
        self._calls: list[float] = []  # the host's seconds to launch one replay, from the untimed calls
        self._launch_s = 0.0  # per replay and its event, from the last timed batch

    def __call__(self) -> None:
        t0 = time.perf_counter()
        self.graph.replay()
        self._calls = [*self._calls[-15:], time.perf_counter() - t0]
        self.cuda.synchronize()

    def _queue_s(self) -> float:
        """What queuing one replay and its event costs the host (a typical, not the worst, call)."""
        if self._launch_s:
            return self._launch_s
        return 2 * float(np.median(self._calls)) if self._calls else 2e-5

    def timed(self, k: int) -> np.ndarray:
        """``k`` back-to-back replays, each between two CUDA events; their times in ms.  The GPU first
        spins for about twice the time the host takes to queue them, so it never waits for the host."""
        cuda = self.cuda
        events = [cuda.Event(enable_timing=True) for _ in range(k + 1)]
        if hasattr(cuda, "_sleep"):
            spin_ms = min(2 * k * self._queue_s() * 1e3, _MAX_SPIN_MS)
            cuda._sleep(int(spin_ms * _cycles_per_ms(cuda)))
        t0 = time.perf_counter()
        events[0].record()
        for i in range(k):
            self.graph.replay()
            events[i + 1].record()
        self._launch_s = (time.perf_counter() - t0) / k
        cuda.synchronize()
        return np.array([events[i].elapsed_time(events[i + 1]) for i in range(k)], dtype=np.float64)


_CYCLES: dict[int, float] = {}


def _cycles_per_ms(cuda: Any) -> float:
    """GPU clock cycles per ms of ``cuda._sleep`` (measured once per process and device module)."""
    if id(cuda) not in _CYCLES:
        a, b = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        cuda._sleep(1000)  # load the kernel outside the measurement
        a.record()
        cuda._sleep(_SPIN_CAL_CYCLES)
        b.record()
        cuda.synchronize()
        _CYCLES[id(cuda)] = _SPIN_CAL_CYCLES / max(a.elapsed_time(b), 1e-3)
    return _CYCLES[id(cuda)]
