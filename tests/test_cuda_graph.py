"""CUDA-graph timing on a CPU: the capture / replay / CUDA-event logic of ``nas.latency.runtimes.cuda_graph``
and ``TorchRuntime`` run against ``FakeCuda``, a stand-in for ``torch.cuda`` that keeps a simulated
GPU timeline on a simulated host clock (``SimClock``: it moves only by what the fake charges the host,
so no figure depends on how busy the machine running the tests is).  Then the target, table and
label plumbing, onnxruntime's ``enable_cuda_graph`` option, and ``nas.profile``'s reproducibility record.

``FakeCuda`` mirrors what the real thing does (sources cited where they are modelled):

- Kernels run on the GPU in stream order; the host only queues them.  An op starts when the GPU
  is free and the host has queued it, so a GPU that finishes before the host queues the next op
  sits idle (the host-bound gap that eager timing at batch 1 measures).
- ``Event.record()`` is stamped when the GPU reaches it; ``elapsed_time`` is the difference of two
  stamps in ms (CUDA Runtime API, cudaEventElapsedTime).
- ``torch.cuda._sleep(cycles)`` spins the GPU for that many clock cycles (torch/cuda/__init__.py).
- Synchronising while a stream captures fails with "operation not permitted when stream is
  capturing" (cudaErrorStreamCaptureUnsupported; torch's CUDA graph notes,
  https://pytorch.org/docs/stable/notes/cuda.html#constraints), and ``torch.cuda.graph`` synchronises
  before it begins to capture (torch/cuda/graphs.py, ``graph.__enter__``).
- ``CUDAGraph.replay()`` costs the host one launch and the GPU the captured kernels' time.
"""

import numpy as np
import pytest
import torch
from torch import nn

from nas.builder import build_layer
from nas.latency.profile.profiler import new_metadata, profile_blocks
from nas.latency.profile.reproducibility import reproducibility_warning, retime_sample, table_ceiling
from nas.latency.runtimes import cuda_graph
from nas.latency.runtimes import loop as measure_module
from nas.latency.runtimes.core import OnnxRuntime, TorchRuntime, get_runtime
from nas.latency.runtimes.cuda_graph import GraphRunner, capture
from nas.latency.runtimes.loop import ProfileSettings, measure, summarize_times
from nas.latency.tables.provenance import Prediction
from nas.latency.tables.table import LatencyTable, TableMismatchError
from nas.space import load_space
from nas.target import Target

FAST = ProfileSettings(warmup=2, repeats=20, min_time_s=0.0, max_spread=10.0, remeasure=0, rounds=1, save_every_s=0.0)
GPU = {"name": None, "kind": "gpu", "peak_gflops": 1000.0, "mem_bandwidth_gbs": 100.0}
CPU_DEV = {**GPU, "kind": "cpu"}


def gpu_target(**kw):
    return {"name": "g", "runtime": "torch", "precision": "fp32", "batch": 1, "threads": 1,
            "latency_budget_ms": 1.0, "device": GPU, **kw}


def gpu(**kw) -> Target:
    return Target.from_dict(gpu_target(**kw))


class SimClock:
    """The host's clock in simulated milliseconds, read through ``time``'s names: it advances only when
    the fake charges the host (a launch, a wait for the GPU), never with the real time Python takes."""

    def __init__(self) -> None:
        self.ms = 0.0

    def perf_counter(self) -> float:
        return self.ms / 1e3

    def perf_counter_ns(self) -> int:
        return int(round(self.ms * 1e6))

    monotonic = perf_counter


class FakeCuda:
    """``torch.cuda``'s names used by ``nas.latency.runtimes.cuda_graph`` on a simulated GPU (see the module
    docstring).  ``kernel_ms``: what one replay of a captured graph costs the GPU; ``launch_ms``: what
    queuing it costs the host (on ``clock``)."""

    CYCLES_PER_MS = 1.0e6

    def __init__(self, kernel_ms: float = 0.02, launch_ms: float = 0.06, clock: SimClock | None = None):
        self.kernel_ms, self.launch_ms = kernel_ms, launch_ms
        self.clock = clock or SimClock()
        self.gpu_free = 0.0  # ms on the host's clock when the GPU has finished what is queued
        self.capturing = False
        self.replays = 0
        fake = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self, stream=None):
                self.t = fake._enqueue(0.0)

            def elapsed_time(self, end):
                return end.t - self.t

        class Stream:
            def wait_stream(self, other):
                pass

        class CUDAGraph:
            def replay(self):
                fake.clock.ms += fake.launch_ms  # the host's launch
                fake._enqueue(fake.kernel_ms)
                fake.replays += 1

        self.Event, self.Stream, self.CUDAGraph = Event, Stream, CUDAGraph

    def _enqueue(self, duration_ms: float) -> float:
        """Queue an op of ``duration_ms``: it starts when the GPU is free and the host has queued it."""
        start = max(self.gpu_free, self.clock.ms)
        self.gpu_free = start + duration_ms
        return start + duration_ms

    def _sleep(self, cycles: int) -> None:
        self._enqueue(cycles / self.CYCLES_PER_MS)

    def synchronize(self) -> None:
        if self.capturing:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nCUDA kernel errors "
                               "might be asynchronously reported at some other API call")
        self.clock.ms = max(self.clock.ms, self.gpu_free)  # the host waits for the GPU

    def current_stream(self):
        return self.Stream()

    def stream(self, s):
        from contextlib import nullcontext

        return nullcontext()

    def graph(self, g):
        from contextlib import contextmanager

        @contextmanager
        def capturing():
            self.synchronize()  # torch.cuda.graph.__enter__ synchronises first
            self.capturing = True
            try:
                yield
            finally:
                self.capturing = False

        return capturing()


class _Syncs(nn.Module):
    """A module that waits for the GPU inside forward (as ``.item()`` or ``.cpu()`` would)."""

    def __init__(self, cuda):
        super().__init__()
        self.cuda = cuda

    def forward(self, x):
        self.cuda.synchronize()
        return x + 1


@pytest.fixture
def fake_cuda(monkeypatch):
    """A TorchRuntime for a GPU target that runs its module on the CPU and its CUDA calls on FakeCuda."""
    fake = FakeCuda()
    # every host time the code under test reads is the simulated clock's
    monkeypatch.setattr(cuda_graph, "time", fake.clock)
    monkeypatch.setattr(measure_module, "time", fake.clock)
    monkeypatch.setattr(TorchRuntime, "device", property(lambda self: "cpu"))
    info = TorchRuntime.info
    monkeypatch.setattr(TorchRuntime, "info", lambda self: {**info(self), "provider": "cuda"})
    monkeypatch.setattr(TorchRuntime, "cuda_api", fake)
    monkeypatch.setattr(cuda_graph, "_CYCLES", {})
    return fake


def test_graph_replays_are_timed_by_events_not_the_host(fake_cuda):
    """A block whose launch costs the host 3x what it costs the GPU: replay intervals measured by the
    CUDA events after the GPU-side spin are the GPU's time; the old timing (the host's clock around a
    synchronised call, as every runner was timed before) reads the launch."""
    runner, why = capture(lambda: None, cuda=fake_cuda)
    assert why == "" and isinstance(runner, GraphRunner) and runner.timing == "cuda_graph"
    for _ in range(3):
        runner()  # warm-up: learns what a launch costs the host
    ms = runner.timed(40)
    assert len(ms) == 40 and np.allclose(ms, fake_cuda.kernel_ms, rtol=1e-6), ms
    host = measure(lambda: runner(), warmup=2, repeats=20, min_time_s=0.0)  # the host-timed loop
    assert np.median(host) > 2 * fake_cuda.kernel_ms

    # without the spin the GPU idles between replays and each interval holds the host's launch
    naive = GraphRunner(runner.graph, fake_cuda)
    naive._queue_s = lambda: 0.0
    assert np.median(naive.timed(40)) > 2 * fake_cuda.kernel_ms


def test_measure_uses_the_runners_own_timer(fake_cuda):
    runner, _ = capture(lambda: None, cuda=fake_cuda)
    ms = measure(runner, warmup=3, repeats=120, min_time_s=0.0)
    assert len(ms) == 120 and np.allclose(np.median(ms), fake_cuda.kernel_ms, rtol=1e-6)


def test_a_capture_that_synchronises_falls_back_to_eager(fake_cuda):
    syncs = _Syncs(fake_cuda)
    runner, why = capture(lambda: syncs(torch.zeros(1)), cuda=fake_cuda)
    assert runner is None and "operation not permitted when stream is capturing" in why and "\n" not in why
    assert not fake_cuda.capturing  # the device is usable again


def test_torch_runtime_captures_each_block_and_names_the_ones_it_cannot(fake_cuda):
    rt = get_runtime(gpu(cuda_graph=True))
    assert rt.timing == "cuda_graph" and rt.timer.startswith("CUDA events")
    k = load_space("tiny").unique_blocks()[3]
    run = rt.prepare(build_layer(k), k.in_shape, key=k)
    assert run.timing == "cuda_graph" and summarize_times(measure(run, warmup=2, repeats=10, min_time_s=0))["n"] == 10
    eager = rt.prepare(_Syncs(fake_cuda), (3, 4, 4), key="syncs")
    assert eager.timing == "eager" and "operation not permitted" in rt.graph_fallbacks["syncs"]
    eager()
    assert get_runtime(gpu()).prepare(build_layer(k), k.in_shape).timing == "eager"  # cuda_graph=false


def test_profiled_table_records_graph_timing_and_fallbacks(fake_cuda, tmp_path):
    rt = get_runtime(gpu(cuda_graph=True))
    keys = load_space("tiny").unique_blocks()[:3]
    table = LatencyTable(metadata=new_metadata(gpu(cuda_graph=True), rt, FAST), path=tmp_path / "t.json")
    rt.graph_fallbacks["ir_k5_odd"] = "RuntimeError: operation not permitted when stream is capturing"
    profile_blocks(keys, rt, table, settings=FAST, path=tmp_path / "t.json", progress=False)
    saved = LatencyTable.load(tmp_path / "t.json")
    assert saved.metadata["runtime"]["timing"] == "cuda_graph"
    assert saved.metadata["measurement"]["timer"].startswith("CUDA events")
    assert saved.metadata["measurement"]["io"] == "input and outputs static in the captured CUDA graph"
    assert "ir_k5_odd" in saved.metadata["runtime"]["graph_fallbacks"]
    assert saved.timing_label == "CUDA graph, 1 block(s) eager" and "CUDA graph" in saved.describe()
    assert all(saved.entries[k].median_ms == pytest.approx(fake_cuda.kernel_ms, rel=1e-6) for k in keys)
    saved.check_target(gpu(cuda_graph=True))
    with pytest.raises(TableMismatchError, match="runtime.timing: table has 'cuda_graph'.*wants 'eager'"):
        saved.check_target(gpu())


def test_tables_without_a_timing_field_read_as_eager(tmp_path):
    from nas.latency.tables.table import _field

    assert _field({"runtime": {"name": "onnxruntime"}}, "runtime.timing") == "eager"
    meta = {"runtime": {"name": "torch", "provider": "cuda"}, "device": {"kind": "gpu"}}
    assert LatencyTable(metadata=meta).timing_label == "eager (host-bound)"
    assert LatencyTable(metadata={"device": {"kind": "cpu"}}).timing_label == ""


def test_labels_say_how_a_gpu_figure_was_timed():
    p = Prediction(ms=0.1, source="measured", device="NVIDIA H200", n_measured=10, timing="eager (host-bound)")
    assert "measured table on NVIDIA H200, eager (host-bound):" in p.label()
    assert "CUDA graph:" in Prediction(ms=0.1, source="measured", device="NVIDIA H200", n_measured=10, timing="CUDA graph").label()
    assert ", eager" not in Prediction(ms=0.1, source="measured", device="Xeon", n_measured=10).label()


@pytest.mark.parametrize("bad, msg", [
    ({"device": CPU_DEV}, "needs a GPU"),
    ({"runtime": "onnxruntime", "provider": "CPUExecutionProvider"}, "needs a GPU"),
    ({"runtime": "tensorrt"}, "tensorrt"),
    ({"cuda_graph": "yes"}, "must be true or false"),
])
def test_cuda_graph_is_refused_where_nothing_replays_graphs(bad, msg):
    with pytest.raises(ValueError, match=msg) as e:
        Target.from_dict(gpu_target(**{"cuda_graph": True, **bad}))
    assert "\n" not in str(e.value)


def test_torch_targets_name_their_device_as_provider():
    assert Target.from_dict(gpu_target()).provider == "cuda"
    assert Target.from_dict(gpu_target(device=CPU_DEV, provider="CPUExecutionProvider")).provider == "cpu"
    assert Target.from_dict(gpu_target(cuda_graph=True)).timing == "cuda_graph"


def test_onnxruntime_cuda_graph_option_and_fallback(monkeypatch):
    """onnxruntime's CUDA provider takes ``enable_cuda_graph`` as a provider option; a graph whose nodes
    are not all on the CUDA provider is refused when the session is made, with onnxruntime's own
    message (onnxruntime/core/session/inference_session.cc, "This session cannot use the CUDA Graph
    feature as requested by the user ..."), and the block is timed eager, named."""
    import nas.latency.runtimes.core as runtimes

    monkeypatch.setattr(OnnxRuntime, "check", lambda self: None)
    rt = get_runtime(gpu(cuda_graph=True, runtime="onnxruntime", provider="CUDAExecutionProvider"))
    seen = []
    class Session:
        def get_providers(self):
            return ["CUDAExecutionProvider", "CPUExecutionProvider"]

    monkeypatch.setattr(runtimes, "ort_session", lambda data, threads, providers: seen.append(providers) or Session())
    rt.session(b"", graph=True)
    assert seen == [[("CUDAExecutionProvider", {"enable_cuda_graph": "1"})]]

    def bound(data, in_shape, *, graph):
        if graph:
            raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : This session cannot use the CUDA Graph feature as "
                               "requested by the user  as all the graph nodes have not been partitioned to the "
                               "CUDA EP.")
        return "eager runner"

    monkeypatch.setattr(rt, "_bound_runner", bound)
    assert rt.runner_for_onnx(b"", (3, 8, 8), key="blk") == "eager runner"
    assert "cannot use the CUDA Graph feature" in rt.graph_fallbacks["blk"]


def test_profile_retimes_a_sample_and_validate_reports_it(tmp_path):
    """The re-timing record on a real CPU table, then the warning ``nas.validate`` gives for a
    table that cannot support ±10%: on a GPU timed eager it names cuda_graph, on a CPU a quiet core."""
    cpu = gpu(device=CPU_DEV, runtime="onnxruntime", provider="CPUExecutionProvider")
    rt = get_runtime(cpu)
    keys = load_space("tiny").unique_blocks()[:4]
    table = LatencyTable(metadata=new_metadata(cpu, rt, FAST), path=tmp_path / "t.json")
    profile_blocks(keys, rt, table, settings=FAST, path=tmp_path / "t.json", progress=False)
    rec = retime_sample(table, rt, FAST, blocks=3, progress=False)
    assert rec["blocks"] == 3 and rec["networks"] == 0 and rec["entries"] == 3
    assert 0 <= rec["within_5pct"] <= rec["within_10pct"] <= 1 and rec["timing"] == "eager"
    low = {**rec, "within_10pct": 0.4}
    assert "cuda_graph=true" in reproducibility_warning(low, kind="gpu", timing="eager")
    assert "taskset" in reproducibility_warning(low, kind="cpu")
    assert "taskset" in reproducibility_warning(low, kind="gpu", timing="cuda_graph")
    assert reproducibility_warning({**rec, "within_10pct": 0.96}) is None
    table.metadata["reproducibility"] = low
    report: dict = {}
    table_ceiling(table, report)
    assert report["table_reproducibility"] == low and "40%" in report["reproducibility_warning"]
    report = {"reproducibility": {"as_built": {"within_10pct": 0.5, "n": 10}}}
    table_ceiling(LatencyTable(metadata={"device": {"kind": "cpu"}}), report)
    assert "calibration networks re-measured now" in report["reproducibility_warning"]


# -- on a real CUDA GPU (-m gpu; skipped without one) ---------------------------------------------------------


@pytest.mark.gpu
def test_real_graph_replays_the_block_and_reproduces():  # pragma: no cover - needs a GPU
    """On a GPU: the captured block computes what eager torch computes, and three timings of it (each a
    fresh capture) agree within 10% while eager ones of the same block need not."""
    k = load_space("tiny").unique_blocks()[40]
    rt = get_runtime(gpu(cuda_graph=True))
    torch.manual_seed(0)
    layer = build_layer(k)
    run = rt.prepare(layer, k.in_shape, key=k)
    assert run.timing == "cuda_graph" and not rt.graph_fallbacks
    run()
    out = run.keep[2]
    with torch.no_grad():
        ref = layer.eval().cuda()(rt._input(k.in_shape).cuda())
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-4)
    meds = [np.median(measure(rt.prepare(build_layer(k), k.in_shape), warmup=5, repeats=200, min_time_s=0.05))
            for _ in range(3)]
    assert max(meds) / min(meds) < 1.10, meds


@pytest.mark.gpu
def test_real_profile_records_graph_timing(tmp_path):  # pragma: no cover - needs a GPU
    target = gpu(cuda_graph=True)
    rt = get_runtime(target)
    keys = load_space("tiny").unique_blocks()[:5]
    table = LatencyTable(metadata=new_metadata(target, rt, FAST), path=tmp_path / "t.json")
    profile_blocks(keys, rt, table, settings=FAST, path=tmp_path / "t.json", progress=False)
    saved = LatencyTable.load(tmp_path / "t.json")
    assert saved.metadata["runtime"]["timing"] == "cuda_graph" and saved.timing_label == "CUDA graph"
    assert len(saved) == 5 and all(0 < e.median_ms < 5 for e in saved.entries.values())
    rec = retime_sample(saved, rt, FAST, blocks=5, progress=False)
    assert rec["timing"] == "cuda_graph" and rec["entries"] == 5
