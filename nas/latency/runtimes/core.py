"""Inference runtimes behind one interface, for measuring blocks and whole networks.

``get_runtime(target)`` returns a ``Runtime`` for a target config.  ``Runtime.prepare(module,
in_shape)`` returns a zero-argument callable that runs one inference (synchronously: GPU work is
waited for), which ``measure`` times.  Runtimes:

- ``onnxruntime``: CPU, CUDA or TensorRT execution provider; fp32, fp16 (TensorRT EP) or int8
  (QDQ static quantization, u8 activations / s8 per-channel weights, reduce_range).
- ``torch``: eager on CPU or CUDA (fp32, fp16 on CUDA).
- ``torch_compile``: ``torch.compile`` of the same.
- ``tensorrt``: a TensorRT engine built from the ONNX graph (needs ``tensorrt`` and CUDA).

A runtime that is not installed (or has no device) raises ``RuntimeUnavailable`` naming what
to install.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from nas._optional import try_import
from nas.export.onnx import export_onnx, ort_session
from nas.export.qdq import QDQ_SETTINGS, TENSORRT_QDQ_SETTINGS, quantize_qdq
from nas.latency.runtimes import edge, hwnas_trt  # noqa: F401  # edge registers executorch, openvino and litert
from nas.latency.runtimes.base import RUNTIMES, Runtime, register
from nas.latency.runtimes.cuda_graph import capture
from nas.latency.tables import EAGER, GRAPH
from nas.machine import RuntimeUnavailable
from nas.target import Target, require_target

__all__ = ["OnnxRuntime", "TensorRTRuntime", "TorchCompileRuntime", "TorchRuntime", "get_runtime", "trt_ep_options"]

log = logging.getLogger(__name__)

_GPU_EP_HINT = {
    "CUDAExecutionProvider": "pip install onnxruntime-gpu (with a CUDA GPU and its driver)",
    "TensorrtExecutionProvider": "pip install onnxruntime-gpu tensorrt (TensorRT's libraries on LD_LIBRARY_PATH)",
}
_CACHE_BYTES = 4 << 30  # exported graphs kept for later rounds (export + quantization are slow)


def _exported(rt: Runtime, module: nn.Module, in_shape: tuple[int, int, int], key: Any) -> bytes:
    """``module`` exported to ONNX at ``rt``'s batch, QDQ-quantized with ``rt.qdq_settings()`` for
    int8 (calibrated on four seeded batches); cached on ``rt`` per ``key`` when given."""
    cache: dict = rt.__dict__.setdefault("_onnx_cache", {})
    if key is not None and (key, in_shape) in cache:
        return cache[(key, in_shape)]
    data = export_onnx(module, rt._input(in_shape))
    if rt.precision == "int8":
        data = quantize_qdq(data, [rt._input(in_shape).numpy() for _ in range(4)], **rt.qdq_settings())
    if key is not None and sum(map(len, cache.values())) + len(data) <= _CACHE_BYTES:
        cache[(key, in_shape)] = data
    return data


def trt_ep_options(precision: str) -> dict[str, Any]:
    """onnxruntime's TensorRT provider options for ``precision``: fp16 sets its FP16 flag; int8 runs the
    QDQ graph with TensorRT's INT8 (and FP16) flags and no calibration table (explicit quantization)."""
    return {"trt_fp16_enable": precision in ("fp16", "int8"), "trt_int8_enable": precision == "int8"}


@register("onnxruntime")
class OnnxRuntime(Runtime):
    precisions = ("fp32", "fp16", "int8")
    _PROVIDERS = ("CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider")

    def check(self) -> None:
        ort = try_import("onnxruntime")
        if self.provider not in self._PROVIDERS:
            raise RuntimeUnavailable(f"unknown onnxruntime provider {self.provider!r}; use one of {self._PROVIDERS}")
        if self.provider != "CPUExecutionProvider" and hasattr(ort, "preload_dlls"):
            ort.preload_dlls()  # CUDA / cuDNN from the nvidia-* wheels, when torch has not loaded them
        if self.provider not in ort.get_available_providers():
            raise RuntimeUnavailable(
                f"onnxruntime provider {self.provider} is not available here (available: "
                f"{', '.join(ort.get_available_providers())}); {_GPU_EP_HINT.get(self.provider, '')}"
            )
        if self.precision == "fp16" and self.provider != "TensorrtExecutionProvider":
            raise RuntimeUnavailable("fp16 with onnxruntime is supported through the TensorRT provider only")
        if self.cuda_graph and self.provider != "CUDAExecutionProvider":
            raise RuntimeUnavailable(f"cuda_graph=true with onnxruntime needs CUDAExecutionProvider, not {self.provider}")

    def version(self) -> str:
        ort = try_import("onnxruntime")

        return ort.__version__

    def qdq_settings(self) -> dict[str, Any]:
        """int8 QDQ settings: TensorRT's symmetric form for the TensorRT provider (it refuses a zero
        point other than 0), onnxruntime's u8/s8 form for the CPU and CUDA providers."""
        return copy.deepcopy(TENSORRT_QDQ_SETTINGS if self.provider == "TensorrtExecutionProvider" else QDQ_SETTINGS)

    def onnx_bytes(self, module: nn.Module, in_shape: tuple[int, int, int], *, key: Any = None) -> bytes:
        """The graph onnxruntime runs (QDQ-quantized for int8); cached per ``key`` when given."""
        return _exported(self, module, in_shape, key)

    def session(self, data: bytes, *, graph: bool = False):
        """An onnxruntime session on this runtime's provider; ``graph``: with the CUDA provider's
        ``enable_cuda_graph`` (its first run captures, later runs replay)."""
        providers: list[Any] = [self.provider]
        if graph:
            providers = [(self.provider, {"enable_cuda_graph": "1"})]
        elif self.provider == "TensorrtExecutionProvider":
            providers = [(self.provider, trt_ep_options(self.precision)), "CUDAExecutionProvider"]
        sess = ort_session(data, threads=self.threads, providers=providers)
        if sess.get_providers()[0] != self.provider:  # onnxruntime falls back to the CPU with a warning only
            raise RuntimeUnavailable(
                f"onnxruntime could not start {self.provider} (it fell back to {sess.get_providers()[0]}): its "
                f"CUDA / cuDNN{' / TensorRT' if 'Tensorrt' in self.provider else ''} libraries are missing or do "
                f"not match; {_GPU_EP_HINT[self.provider]}")
        return sess

    def prepare(self, module: nn.Module, in_shape: tuple[int, int, int], *, key: Any = None) -> Callable[[], Any]:
        return self.runner_for_onnx(self.onnx_bytes(module, in_shape, key=key), in_shape, key=key)

    def runner_for_onnx(self, data: bytes, in_shape: tuple[int, int, int], *, key: Any = None) -> Callable[[], Any]:
        """Inputs and outputs bound once (IOBinding), so a timed call is the graph alone, not the
        per-call output allocation that a block inside a network never pays.  With ``cuda_graph`` the
        session replays a captured CUDA graph; a graph onnxruntime cannot capture (a node outside the
        CUDA provider) runs eager, named in ``graph_fallbacks``."""
        if self.cuda_graph:
            try:
                return self._bound_runner(data, in_shape, graph=True)
            except Exception as e:  # onnxruntime raises its own Fail / RuntimeException types
                self._fell_back(key, " ".join(str(e).split())[:200])
        return self._bound_runner(data, in_shape, graph=False)

    def _bound_runner(self, data: bytes, in_shape: tuple[int, int, int], *, graph: bool) -> Callable[[], Any]:
        ort = try_import("onnxruntime")

        sess = self.session(data, graph=graph)
        x = self._input(in_shape).numpy()
        name = sess.get_inputs()[0].name
        outs = self.session(data).run(None, {name: x}) if graph else sess.run(None, {name: x})
        device = "cuda" if self.provider != "CPUExecutionProvider" else "cpu"
        binding = sess.io_binding()
        xv = ort.OrtValue.ortvalue_from_numpy(x, device, 0)
        binding.bind_ortvalue_input(name, xv)
        keep = [xv]
        for o, y in zip(sess.get_outputs(), outs):
            yv = ort.OrtValue.ortvalue_from_numpy(y, device, 0)
            binding.bind_ortvalue_output(o.name, yv)
            keep.append(yv)
        run = sess.run_with_iobinding

        def runner() -> None:
            run(binding)
            if device != "cpu":
                binding.synchronize_outputs()

        if graph:
            runner()  # the first run captures the graph: a failure shows here, not inside the timing
        runner.keep = keep  # type: ignore[attr-defined]  # the bound buffers live as long as the runner
        runner.timing = GRAPH if graph else EAGER  # type: ignore[attr-defined]
        return runner


@register("torch")
class TorchRuntime(Runtime):
    precisions = ("fp32", "fp16")
    cuda_api: Any = None  # torch.cuda (None) or a stand-in with its names, for tests without a GPU

    @property
    def device(self) -> str:
        return "cuda" if self.device_kind in ("gpu", "jetson") else "cpu"

    def check(self) -> None:
        if self.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeUnavailable("torch has no CUDA device here: install a CUDA build of torch on a GPU machine")
        if self.precision == "fp16" and self.device == "cpu":
            raise RuntimeUnavailable("torch fp16 is measured on CUDA only")

    def version(self) -> str:
        return torch.__version__

    def info(self) -> dict[str, Any]:
        io = ("input and outputs static in the captured CUDA graph" if self.cuda_graph else
              "input on the device once; outputs allocated by each call")
        return {**super().info(), "provider": self.device, "io": io}

    @property
    def timer(self) -> str:
        return "CUDA events around each graph replay" if self.cuda_graph else "perf_counter_ns"

    def _module(self, module: nn.Module) -> nn.Module:
        module = module.eval().to(self.device)
        return module.half() if self.precision == "fp16" else module

    def prepare(self, module: nn.Module, in_shape: tuple[int, int, int], *, key: Any = None) -> Callable[[], Any]:
        """An eager runner, or with ``cuda_graph`` the captured graph's (``nas.latency.runtimes.cuda_graph``); a
        module that cannot be captured runs eager, named in ``graph_fallbacks``."""
        cuda = self.cuda_api
        torch.set_num_threads(self.threads)
        m = self._module(module)
        x = self._input(in_shape).to(self.device)
        x = x.half() if self.precision == "fp16" else x
        if self.cuda_graph:

            def forward() -> torch.Tensor:
                with torch.no_grad():
                    return m(x)

            runner, why = capture(forward, cuda=cuda)
            if runner is not None:
                runner.keep = (m, x, runner.keep)  # the graph reads these addresses on every replay
                return runner
            self._fell_back(key, why)
        sync = (cuda or torch.cuda).synchronize if self.device == "cuda" else (lambda: None)

        def run() -> None:
            with torch.inference_mode():
                m(x)
            sync()

        run.timing = EAGER  # type: ignore[attr-defined]
        return run


@register("torch_compile")
class TorchCompileRuntime(TorchRuntime):
    def _module(self, module: nn.Module) -> nn.Module:
        return torch.compile(super()._module(module), dynamic=False)


@register("tensorrt")
class TensorRTRuntime(Runtime):
    """A TensorRT engine built from the block's ONNX export with the ONNX parser
    (``nas.latency.runtimes.hwnas_trt``, which also runs standalone on devices): fp32; fp16 through the FP16 builder
    flag; int8 from the QDQ export quantized with ``TENSORRT_QDQ_SETTINGS`` (explicit quantization,
    INT8 + FP16 flags, no calibrator).  Runs with ``execute_async_v3`` on torch CUDA tensors."""

    precisions = ("fp32", "fp16", "int8")

    def check(self) -> None:
        tensorrt = try_import("tensorrt")
        try:
            hwnas_trt.builder_flags(self.precision, tensorrt.__version__, qdq=self.precision == "int8")
            hwnas_trt.version()  # the Python API before 8.5 is refused, naming trtexec
        except RuntimeError as e:
            raise RuntimeUnavailable(str(e)) from None
        if not torch.cuda.is_available():
            raise RuntimeUnavailable("TensorRT needs a CUDA device, and torch sees none here")

    def version(self) -> str:
        tensorrt = try_import("tensorrt")

        return tensorrt.__version__

    def info(self) -> dict[str, Any]:
        return {**super().info(), "io": "input and outputs bound once as torch CUDA tensors"}

    def qdq_settings(self) -> dict[str, Any]:
        """TensorRT's symmetric int8 QDQ settings (zero point 0, per-channel weights, float biases)."""
        return copy.deepcopy(TENSORRT_QDQ_SETTINGS)

    def onnx_bytes(self, module: nn.Module, in_shape: tuple[int, int, int], *, key: Any = None) -> bytes:
        """The graph TensorRT builds from: the ONNX export, QDQ-quantized for int8."""
        return _exported(self, module, in_shape, key)

    def plan(self, data: bytes, *, key: Any = None) -> bytes:
        """The serialized engine for ONNX ``data`` (building takes seconds: cached per ``key``, so a
        later round deserializes a fresh engine instead of building again)."""
        cache: dict = self.__dict__.setdefault("_plan_cache", {})
        if key is not None and key in cache:
            return cache[key]
        plan = hwnas_trt.build_plan(data, self.precision)
        if key is not None and sum(map(len, cache.values())) + len(plan) <= _CACHE_BYTES:
            cache[key] = plan
        return plan

    def prepare(self, module: nn.Module, in_shape: tuple[int, int, int], *, key: Any = None) -> Callable[[], Any]:
        data = self.onnx_bytes(module, in_shape, key=key)
        return self._runner(self.plan(data, key=None if key is None else (key, in_shape)), in_shape)

    def runner_for_onnx(self, data: bytes, in_shape: tuple[int, int, int]) -> Callable[[], Any]:
        """A runner for exported ONNX bytes (a QDQ graph builds with INT8 whatever the precision)."""
        return self._runner(self.plan(data), in_shape)

    def _runner(self, plan: bytes, in_shape: tuple[int, int, int]) -> Callable[[], Any]:  # pragma: no cover - GPU
        """Bind the seeded input (``self._input``) and an output buffer per output tensor, as torch
        CUDA tensors, once; a call is ``execute_async_v3`` on a side stream, then its synchronize.
        ``runner.outputs`` holds the output tensors by name (for comparing with torch)."""
        built = hwnas_trt.Engine(plan)
        x = self._input(in_shape).cuda()
        tensors: dict[str, torch.Tensor] = {}
        inputs = set()
        for name, is_input, shape, dtype in hwnas_trt.io_tensors(built, x.shape):
            if is_input:
                inputs.add(name)
            tdtype = torch.from_numpy(np.empty(0, dtype)).dtype
            tensors[name] = x.to(tdtype).reshape(shape).contiguous() if is_input else \
                torch.empty(shape, dtype=tdtype, device="cuda")
            built.context.set_tensor_address(name, tensors[name].data_ptr())
        stream = torch.cuda.Stream()
        torch.cuda.synchronize()  # the input copy is done before the engine reads it on its stream

        def run() -> None:
            if not built.context.execute_async_v3(stream.cuda_stream):
                raise RuntimeError("TensorRT failed to run the engine")
            stream.synchronize()

        run.outputs = {n: t for n, t in tensors.items() if n not in inputs}  # type: ignore[attr-defined]
        run.keep = (built, tensors)  # type: ignore[attr-defined]  # bound buffers live as long as the runner
        return run


def get_runtime(target: Target) -> Runtime:
    """The runtime a ``Target`` names (``runtime``, ``provider``, ``precision``, ...).

    Raises:
        TypeError: ``target`` is not a ``Target``.
    """
    t = require_target(target)
    return RUNTIMES[t.runtime](
        provider=t.provider or "",
        precision=t.precision,
        threads=t.threads,
        batch=t.batch,
        device_kind=t.device.kind,
        cuda_graph=t.cuda_graph,
    )
