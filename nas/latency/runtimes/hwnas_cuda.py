"""The CUDA runtime through ctypes and a GPU-side timer: standalone, for device bundles.

Copied into a device bundle as ``hwnas_cuda.py`` beside ``hwnas_trt.py`` (TensorRT's engines), where
neither torch nor this package may be installed: it imports only the standard library and numpy.
Device memory, streams and events come from the CUDA runtime library (``libcudart``) through ctypes,
the way Polygraphy's ``cuda`` module does it, so no pycuda, cupy or torch is needed.

- ``Cudart``: the few runtime calls a timing loop needs, each checked.
- ``GpuTimer``: batches of runs queued behind a GPU-side wait, each run's GPU time from CUDA events.
- ``time_runs(timer, warmup, repeats, min_time_s)``: the timing loop; ``timing_stats(ms)``: median / p10 / p90 / n.

Python: 3.6 and later (JetPack 4.6 ships 3.6): annotations that are not 3.6's are strings.
"""

import ctypes
import glob
import math
import os
import sys
import time
from typing import Any, Callable, Sequence  # typing's (not collections.abc's): Python 3.6

import numpy as np

__all__ = ["MAX_REPEATS", "Cudart", "GpuTimer", "time_runs", "timing_stats"]

INSTALL_CUDART = ("the CUDA runtime library (libcudart) was not found: install the CUDA toolkit or JetPack, "
                  "or pip install nvidia-cuda-runtime-cu12, or put its folder on LD_LIBRARY_PATH")
MAX_REPEATS = 2000  # as nas.latency.runtimes.loop: a sub-millisecond engine stops here, not at min_time_s


# --------------------------------------------------------------------------------------------
# CUDA runtime through ctypes


def _cudart_candidates() -> "list[str]":
    """Where libcudart may be: the loader's own path first, then the CUDA toolkit, JetPack and pip's
    nvidia-cuda-runtime wheels (which tensorrt's wheels depend on)."""
    if sys.platform.startswith("win"):
        dirs = [os.path.join(os.environ.get("CUDA_PATH", ""), "bin"), *os.environ.get("PATH", "").split(os.pathsep)]
        pattern = "cudart64_*.dll"
    else:
        dirs = [*os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep), "/usr/local/cuda/lib64",
                *glob.glob("/usr/local/cuda/targets/*/lib"), "/usr/lib/aarch64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                "/usr/lib64", "/usr/lib"]
        for p in sys.path:
            dirs += glob.glob(os.path.join(p, "nvidia", "cuda_runtime", "lib")) + glob.glob(
                os.path.join(p, "nvidia", "cu*", "lib"))
        pattern = "libcudart.so*"
    found = [f for d in dirs if d for f in sorted(glob.glob(os.path.join(d, pattern)), reverse=True)]
    return ["libcudart.so", *found] if not sys.platform.startswith("win") else found


class Cudart:
    """The few CUDA runtime calls a timing loop needs, each checked (RuntimeError with CUDA's message)."""

    def __init__(self) -> None:
        self.lib = None
        for cand in _cudart_candidates():
            try:
                self.lib = ctypes.CDLL(cand)
                break
            except OSError:
                continue
        if self.lib is None:
            raise RuntimeError(INSTALL_CUDART)
        vp, pvp = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
        sigs = {"cudaGetDeviceCount": [ctypes.POINTER(ctypes.c_int)], "cudaMalloc": [pvp, ctypes.c_size_t],
                "cudaFree": [vp], "cudaMemcpy": [vp, vp, ctypes.c_size_t, ctypes.c_int],
                "cudaMemsetAsync": [vp, ctypes.c_int, ctypes.c_size_t, vp],
                "cudaStreamCreate": [pvp], "cudaStreamSynchronize": [vp], "cudaStreamDestroy": [vp],
                "cudaEventCreate": [pvp], "cudaEventRecord": [vp, vp], "cudaEventSynchronize": [vp],
                "cudaEventElapsedTime": [ctypes.POINTER(ctypes.c_float), vp, vp], "cudaEventDestroy": [vp]}
        for name, args in sigs.items():
            fn = getattr(self.lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        self.lib.cudaGetErrorString.argtypes, self.lib.cudaGetErrorString.restype = [ctypes.c_int], ctypes.c_char_p

    def call(self, name: str, *args: Any) -> None:
        status = getattr(self.lib, name)(*args)
        if status != 0:
            msg = (self.lib.cudaGetErrorString(status) or b"").decode(errors="replace")
            raise RuntimeError(f"CUDA error {status} in {name}: {msg}")

    def device_count(self) -> int:
        n = ctypes.c_int(0)
        self.call("cudaGetDeviceCount", ctypes.byref(n))
        return n.value

    def new(self, what: str) -> int:
        """A new stream (``what="Stream"``) or event (``"Event"``) handle."""
        h = ctypes.c_void_p()
        self.call(f"cuda{what}Create", ctypes.byref(h))
        return h.value or 0

    def malloc(self, nbytes: int) -> int:
        p = ctypes.c_void_p()
        self.call("cudaMalloc", ctypes.byref(p), ctypes.c_size_t(max(int(nbytes), 1)))
        return p.value or 0

    def to_device(self, dst: int, host: "np.ndarray") -> None:
        host = np.ascontiguousarray(host)
        self.call("cudaMemcpy", ctypes.c_void_p(dst), ctypes.c_void_p(host.ctypes.data), ctypes.c_size_t(host.nbytes),
                  1)  # cudaMemcpyHostToDevice

    def release(self, buffers: Sequence[int], stream: int, events: Sequence[int]) -> None:
        """Free device memory, events and the stream (statuses ignored: this runs at garbage collection)."""
        for p in buffers:
            self.lib.cudaFree(ctypes.c_void_p(p))
        for e in events:
            self.lib.cudaEventDestroy(ctypes.c_void_p(e))
        self.lib.cudaStreamDestroy(ctypes.c_void_p(stream))

    def elapsed_ms(self, start: int, end: int) -> float:
        ms = ctypes.c_float()
        self.call("cudaEventElapsedTime", ctypes.byref(ms), ctypes.c_void_p(start), ctypes.c_void_p(end))
        return float(ms.value)


# --------------------------------------------------------------------------------------------
# timing


def timing_stats(ms: Sequence[float]) -> "dict[str, float]":
    a = np.asarray(ms, dtype=np.float64)
    return {"median_ms": float(np.median(a)), "p10_ms": float(np.percentile(a, 10)),
            "p90_ms": float(np.percentile(a, 90)), "n": int(a.size)}


class GpuTimer:
    """Times batches of runs on the GPU with CUDA events, none of them holding the host's enqueue time.

    ``timed(k)`` queues, on ``stream``, a GPU-side wait (memsets of a scratch buffer that keep the GPU
    busy for about twice what queuing the batch takes the host, at most ``MAX_WAIT_MS``), then ``k``
    runs with a CUDA event before the first and after each; it synchronises once, at the end.  The GPU
    reaches the first run only after the host has queued them all, so the runs execute back to back
    and each interval between two events is one run's GPU time.  Timed one at a time between events
    on an idle stream instead, a run whose kernels finish before the host has queued the next ones
    is timed at the host's speed (pybind and enqueue), the usual case for a small block at batch 1.

    ``run()`` queues one run; ``once()`` runs it untimed and synchronises (warm-up), learning what
    queuing one run costs the host.
    """

    #: runs queued behind one GPU-side wait
    BATCH = 32
    #: the longest GPU-side wait, in ms (a stalled host call must not make every batch wait long)
    MAX_WAIT_MS = 20.0
    #: the scratch buffer the wait writes: large enough that one memset keeps any GPU busy far longer
    #: than queuing it takes the host
    WAIT_BYTES = 64 << 20
    #: at most this many memsets per wait
    MAX_MEMSETS = 512

    def __init__(self, cuda: Any, stream: int, run: Callable[[], None]) -> None:
        self.cuda, self.stream, self.run = cuda, stream, run
        self.events = [cuda.new("Event") for _ in range(self.BATCH + 1)]
        self.scratch = cuda.malloc(self.WAIT_BYTES)
        self.memset_ms = 0.0  # one memset of the scratch buffer on the GPU, measured once
        self.calls: "list[float]" = []  # the host's seconds to queue one run, from the untimed runs
        self.queue_s = 0.0  # per run and its event, from the last timed batch

    def _record(self, event: int) -> None:
        self.cuda.call("cudaEventRecord", ctypes.c_void_p(event), ctypes.c_void_p(self.stream))

    def _memset(self) -> None:
        self.cuda.call("cudaMemsetAsync", ctypes.c_void_p(self.scratch), ctypes.c_int(0),
                       ctypes.c_size_t(self.WAIT_BYTES), ctypes.c_void_p(self.stream))

    def _sync(self, event: int) -> None:
        self.cuda.call("cudaEventSynchronize", ctypes.c_void_p(event))

    def once(self) -> None:
        """One untimed run, synchronised."""
        t0 = time.perf_counter()
        self.run()
        self.calls = [*self.calls[-15:], time.perf_counter() - t0]
        self.cuda.call("cudaStreamSynchronize", ctypes.c_void_p(self.stream))

    def _wait_ms(self) -> float:
        """One memset's GPU time (measured on first use, after one to load it)."""
        if not self.memset_ms:
            a, b = self.events[0], self.events[1]
            self._memset()
            self._record(a)
            self._memset()
            self._record(b)
            self._sync(b)
            self.memset_ms = max(self.cuda.elapsed_ms(a, b), 1e-4)
        return self.memset_ms

    def _host_s(self) -> float:
        """What queuing one run and its event costs the host (a typical call, not the worst)."""
        if self.queue_s:
            return self.queue_s
        return 2 * float(np.median(self.calls)) if self.calls else 1e-4

    def timed(self, k: int) -> "list[float]":
        """``k`` (at most ``BATCH``) runs queued behind a GPU-side wait; each one's GPU time in ms."""
        k = max(1, min(int(k), self.BATCH))
        wait_ms = min(2 * k * self._host_s() * 1e3, self.MAX_WAIT_MS)
        for _ in range(min(self.MAX_MEMSETS, max(1, math.ceil(wait_ms / self._wait_ms())))):
            self._memset()
        t0 = time.perf_counter()
        self._record(self.events[0])
        for i in range(k):
            self.run()
            self._record(self.events[i + 1])
        self.queue_s = (time.perf_counter() - t0) / k
        self._sync(self.events[k])
        return [self.cuda.elapsed_ms(self.events[i], self.events[i + 1]) for i in range(k)]


def time_runs(timer: GpuTimer, warmup: int, repeats: int, min_time_s: float) -> "dict[str, float]":
    """``warmup`` untimed runs, then batches of timed ones until at least ``repeats`` and ``min_time_s``
    (at most ``MAX_REPEATS``); their median / p10 / p90 / n."""
    for _ in range(warmup):
        timer.once()
    times: "list[float]" = []
    t_end = time.perf_counter() + min_time_s
    while len(times) < repeats or (time.perf_counter() < t_end and len(times) < MAX_REPEATS):
        left = repeats - len(times) if len(times) < repeats else MAX_REPEATS - len(times)
        times += timer.timed(min(GpuTimer.BATCH, max(1, left)))
    return timing_stats(times)
