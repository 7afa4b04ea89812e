"""Runtimes: one interface, one measuring loop, and every way a graph is timed.

    base.py           the Runtime interface, its registry (RUNTIMES, register) and Tiny, the smallest graph
    core.py           onnxruntime (CPU, CUDA, TensorRT providers), torch, torch.compile, TensorRT; get_runtime
    edge.py           ExecuTorch, OpenVINO and LiteRT (CPU, edge deployment)
    cuda_graph.py     CUDA-graph capture and replay timing (GPU tables)
    loop.py           the one measuring loop (measure, time_runner, measure_items) and its ProfileSettings
    measure_model.py  a block, a network or exported ONNX bytes built, prepared on a runtime and timed
    device.py         this machine's identity with its GPU (name, driver, CUDA; read through torch)
    hwnas_trt.py      TensorRT engines from ONNX and their GPU timer (the tensorrt runtime builds with it)
    hwnas_cuda.py     the CUDA runtime through ctypes and a GPU-side timer, for hwnas_trt.py
    hwnas_litert.py   LiteRT graphs timed by ai-edge-litert's interpreter or, on a phone, benchmark_model

The ``hwnas_*.py`` modules are standalone (standard library and numpy only): device bundles carry them
under these names beside ``measure_bundle.py`` (``nas.latency.bundle.SCRIPTS``).
"""

from __future__ import annotations

from nas._lazy import lazy_exports

_HOMES = {
    "RUNTIMES": "base",
    "Runtime": "base",
    "Tiny": "base",
    "register": "base",
    "get_runtime": "core",
    "ExecuTorchRuntime": "edge",
    "LiteRTRuntime": "edge",
    "OpenVINORuntime": "edge",
    "require": "edge",
    "Interrupted": "loop",
    "MeasureSettings": "loop",
    "ProfileReport": "loop",
    "ProfileSettings": "loop",
    "measure": "loop",
    "measure_items": "loop",
    "summarize_times": "loop",
    "measure_arch": "measure_model",
    "measure_key": "measure_model",
    "measure_onnx": "measure_model",
    "measure_overhead": "measure_model",
    "device_identity": "device",
    "trtexec_command": "hwnas_trt",
    "trtexec_flags": "hwnas_trt",
    "VIA": "hwnas_litert",
}

__all__ = sorted(_HOMES)

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
