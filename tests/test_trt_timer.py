"""The device bundle's TensorRT Python-API timer (``nas.latency.runtimes.hwnas_trt.measure_factory``, its
``GpuTimer`` in ``nas.latency.runtimes.hwnas_cuda``) against ``FakeCudart``, a stand-in for the CUDA runtime
calls it makes through ctypes, on a simulated GPU and
a simulated host clock, with an engine whose ``execute_async_v3`` costs the host more than the GPU
(a small block at batch 1 on a Jetson's ARM cores).  The timer before (``tests/frozen/bundle_trt_83087d3.py``, kept
as it was) is shown reading the host's enqueue time; the timer now reads the GPU's.

``FakeCudart`` follows the CUDA Runtime API's documented behaviour:

- work on a stream runs in the order it was queued; the host only queues it (kernel launches,
  ``cudaMemsetAsync`` and ``cudaEventRecord`` are asynchronous with respect to the host: "API
  synchronization behavior" and the cudaMemsetAsync / cudaEventRecord entries); an op starts when
  the GPU is free and the host has queued it, so a GPU that finishes before the host queues the
  next op sits idle;
- ``cudaEventRecord`` is stamped when the GPU reaches it; ``cudaEventElapsedTime`` is the difference
  of two stamps in ms; ``cudaEventSynchronize`` / ``cudaStreamSynchronize`` block the host until the
  event / all work of the stream is done;
- every runtime call costs the host ``call_ms``; ``execute_async_v3`` costs it ``launch_ms`` (pybind
  and TensorRT's enqueue) and the GPU ``kernel_ms``.
"""

from types import SimpleNamespace

import numpy as np
import pytest
from old_code import frozen_module

from nas.latency.runtimes import hwnas_cuda, hwnas_trt

frozen_bundle_trt = frozen_module("nas/latency/bundle_trt.py", at="83087d3")  # the timer before


class SimClock:
    """The host's clock in simulated ms, read through ``time``'s names; it moves only by what the fakes
    charge the host, never with the real time Python takes (no test depends on a quiet core)."""

    def __init__(self) -> None:
        self.ms = 0.0

    def perf_counter(self) -> float:
        return self.ms / 1e3


class FakeCudart:
    """The calls ``hwnas_cuda.Cudart`` makes, on one simulated stream (see the module docstring)."""

    def __init__(self, clock: SimClock, *, memset_ms: float = 0.4, call_ms: float = 0.002) -> None:
        self.clock, self.memset_ms, self.call_ms = clock, memset_ms, call_ms
        self.gpu_free = 0.0  # host-clock ms when the GPU has finished what is queued
        self.stamps: dict[int, float] = {}
        self.handles = 0
        self.memsets = 0

    def enqueue(self, gpu_ms: float) -> float:
        start = max(self.gpu_free, self.clock.ms)
        self.gpu_free = start + gpu_ms
        return self.gpu_free

    def call(self, name: str, *args) -> None:
        v = [getattr(a, "value", a) for a in args]
        self.clock.ms += self.call_ms
        if name == "cudaEventRecord":
            self.stamps[v[0]] = self.enqueue(0.0)
        elif name == "cudaMemsetAsync":
            self.memsets += 1
            self.enqueue(self.memset_ms)
        elif name == "cudaEventSynchronize":
            self.clock.ms = max(self.clock.ms, self.stamps[v[0]])
        elif name == "cudaStreamSynchronize":
            self.clock.ms = max(self.clock.ms, self.gpu_free)
        else:
            raise NotImplementedError(name)

    def new(self, what: str) -> int:
        self.handles += 1
        return self.handles

    def malloc(self, nbytes: int) -> int:
        return self.new("memory")

    def to_device(self, dst: int, host) -> None:
        pass

    def release(self, buffers, stream, events) -> None:
        pass

    def elapsed_ms(self, start: int, end: int) -> float:
        return self.stamps[end] - self.stamps[start]

    def device_count(self) -> int:
        return 1


class SlowHostContext:
    """An execution context whose ``execute_async_v3`` costs the host ``launch_ms`` and the GPU ``kernel_ms``."""

    def __init__(self, cuda: FakeCudart, kernel_ms: float, launch_ms: float) -> None:
        self.cuda, self.kernel_ms, self.launch_ms = cuda, kernel_ms, launch_ms
        self.runs = 0

    def set_tensor_address(self, name, address) -> None:
        pass

    def execute_async_v3(self, stream) -> bool:
        self.cuda.clock.ms += self.launch_ms
        self.cuda.enqueue(self.kernel_ms)
        self.runs += 1
        return True


SETTINGS = {"warmup": 5, "repeats": 50, "min_time_s": 0.05}


def _timer(module, monkeypatch, *, kernel_ms: float, launch_ms: float):
    """``module.measure_factory``'s ``once`` on the fakes, and the fakes."""
    clock = SimClock()
    cuda = FakeCudart(clock)
    ctx = SlowHostContext(cuda, kernel_ms, launch_ms)
    io = [("input", True, (1, 3, 8, 8), np.dtype(np.float32)), ("output", False, (1, 8, 8, 8), np.dtype(np.float32))]
    fakes = {"available": lambda: None, "build_plan": lambda data, precision: b"plan",
             "Engine": lambda plan: SimpleNamespace(context=ctx), "io_tensors": lambda built, shape: io}
    if module is frozen_bundle_trt:  # the CUDA helpers and the timer were in the module then
        fakes.update(time=clock, _Cudart=lambda: cuda)
    else:
        fakes.update(Cudart=lambda: cuda)
        monkeypatch.setattr(hwnas_cuda, "time", clock)
    for name, value in fakes.items():
        monkeypatch.setattr(module, name, value)
    return module.measure_factory(__file__, [1, 3, 8, 8], "fp16", SETTINGS), cuda, ctx


@pytest.mark.parametrize("kernel_ms,launch_ms", [(0.02, 0.06), (0.05, 0.3), (0.5, 0.06)])
def test_the_timer_reads_the_gpus_time_not_the_hosts_enqueue(monkeypatch, kernel_ms, launch_ms):
    once, cuda, ctx = _timer(hwnas_trt, monkeypatch, kernel_ms=kernel_ms, launch_ms=launch_ms)
    st = once()
    assert st["median_ms"] == pytest.approx(kernel_ms, rel=1e-9)
    assert st["p10_ms"] == pytest.approx(kernel_ms, rel=1e-9) and st["p90_ms"] == pytest.approx(kernel_ms, rel=1e-9)
    assert st["n"] >= SETTINGS["repeats"] and cuda.memsets > 0  # every batch queued behind the GPU-side wait
    assert once()["median_ms"] == pytest.approx(kernel_ms, rel=1e-9)  # a second round: the same


def test_the_old_timer_read_the_enqueue_time(monkeypatch):
    """Events around each run on an idle stream, a synchronise after each: a 0.02 ms block whose
    enqueue costs the host 0.06 ms was timed at the host's 0.06 ms (and the call between), 4x its GPU
    time; a block the GPU takes longer on than the host (0.5 ms) was timed right."""
    old, _, _ = _timer(frozen_bundle_trt, monkeypatch, kernel_ms=0.02, launch_ms=0.06)
    assert old()["median_ms"] == pytest.approx(0.06 + 0.02, rel=1e-6)  # the launch, then the kernel
    big, _, _ = _timer(frozen_bundle_trt, monkeypatch, kernel_ms=0.5, launch_ms=0.06)
    assert big()["median_ms"] == pytest.approx(0.5 + 0.06, rel=1e-6)  # the launch is in it too


def test_a_host_stall_longer_than_the_wait_shows_and_the_next_batch_waits_longer(monkeypatch):
    """The wait is sized from what queuing took the host: after a batch whose queuing was slow, the
    next waits longer, so its runs are GPU time again."""
    once, cuda, ctx = _timer(hwnas_trt, monkeypatch, kernel_ms=0.02, launch_ms=0.06)
    once()
    ctx.launch_ms = 0.3  # the host got slower (another process on its core)
    before = cuda.memsets
    st = once()
    assert st["median_ms"] == pytest.approx(0.02, rel=1e-9) and cuda.memsets > before


def test_time_runs_counts_repeats_and_min_time():
    """At least ``repeats`` runs and ``min_time_s`` of the host's clock, in batches of at most ``BATCH``."""
    clock = SimClock()
    cuda = FakeCudart(clock)
    ctx = SlowHostContext(cuda, 0.02, 0.06)
    timer = hwnas_cuda.GpuTimer(cuda, cuda.new("Stream"), lambda: ctx.execute_async_v3(0))
    orig = hwnas_cuda.time
    hwnas_cuda.time = clock
    try:
        st = hwnas_cuda.time_runs(timer, 2, 5, 0.0)
        assert st["n"] == 5 and ctx.runs == 2 + 5
        st = hwnas_cuda.time_runs(timer, 0, 5, 0.05)  # 50 ms of runs of about 0.1 ms of host time each
        assert 5 < st["n"] <= 2000
    finally:
        hwnas_cuda.time = orig
