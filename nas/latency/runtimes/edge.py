"""CPU runtimes for edge deployment: ExecuTorch (XNNPACK delegate), OpenVINO (CPU plugin) and LiteRT
(XNNPACK delegate).

Registered in ``nas.latency.runtimes.RUNTIMES`` (``runtime: executorch`` / ``openvino`` / ``litert`` in
a target) and timed by the one measuring loop (``nas.latency.runtimes.loop``) like every other runtime:
``prepare(module, in_shape, key=...)`` converts the block once (cached per ``key``: lowering is the
slow part, seconds per block) and returns a zero-argument callable running one inference.

- ``executorch``: ``provider: XNNPACK``; fp32, or int8 by PT2E quantization (``XNNPACKQuantizer``,
  symmetric per-channel weights), run by the ExecuTorch Python runtime.  ``threads`` sizes its CPU
  thread pool, which is process-wide: two ExecuTorch runtimes with different thread counts in one
  process share the last one set.  Outputs are allocated per call (the Python runtime has no output
  binding), a cost a program running the network once per frame pays too.
- ``openvino``: ``provider: CPU``; fp32 from the project's ONNX export, int8 by NNCF post-training
  quantization, compiled with ``INFERENCE_NUM_THREADS=threads``, ``INFERENCE_PRECISION_HINT=f32`` (float
  layers in f32, never bf16 on CPUs with AMX) and ``PERFORMANCE_HINT=LATENCY``; one
  infer request with its input set once (its outputs are the request's own buffers).
- ``litert``: ``provider: XNNPACK``; a ``.tflite`` graph converted by litert-torch with NHWC at its
  edges (as a block sits inside a converted network), fp32, or full-integer int8 by ai-edge-quantizer
  (``nas.export.litert.INT8_SCHEME``: the block's input and output are int8 too, as between the
  blocks of an int8 network), run by ``ai_edge_litert``'s interpreter on ``threads`` threads with
  XNNPACK, LiteRT's default CPU delegate (ops it does not take run on LiteRT's own kernels, as they
  do on a phone); the input set once, the outputs in the interpreter's own buffers.

Converters live in ``nas.export.edge`` and ``nas.export.litert`` (shared with ``nas.export
format=pte|openvino|tflite``); ``require`` checks that a runtime's packages are installed.  Int8 blocks
are calibrated on a few seeded random inputs, as the onnxruntime int8 tables are.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np
import torch
from torch import nn

from nas._optional import missing, try_import
from nas.export import edge, litert
from nas.latency.runtimes.base import Runtime, register
from nas.machine import RuntimeUnavailable

__all__ = ["ExecuTorchRuntime", "LiteRTRuntime", "OpenVINORuntime", "require"]

_CALIB = 4  # random input batches calibrating an int8 block
_CACHE_ITEMS = 512  # converted blocks kept for the profiler's later rounds


# what each runtime needs, and the extra that installs it
_NEEDS = {
    "executorch": ("executorch.runtime", "executorch.exir", "executorch.backends.xnnpack.partition.xnnpack_partitioner"),
    "openvino": ("openvino",),
    "openvino-int8": ("openvino", "nncf"),
    "litert": ("litert_torch", "ai_edge_litert.interpreter"),
    "litert-int8": ("litert_torch", "ai_edge_litert.interpreter", "ai_edge_quantizer"),
}
_FIND_ONLY = {"litert_torch"}  # found, not imported: importing it loads jax (seconds), done where a graph converts
_PACKAGES = {"litert": "ai-edge-litert"}  # a runtime's distribution, where its name differs


def require(what: str) -> None:
    """Check that the packages a runtime (and its converter) needs are installed.

    Args:
        what: ``"executorch"``, ``"openvino"``, ``"litert"``, or ``"openvino-int8"`` / ``"litert-int8"`` (with
            the int8 quantizer: NNCF, ai-edge-quantizer).

    Raises:
        RuntimeUnavailable: one line naming the missing module and the command that installs it.
    """
    extra = what.split("-")[0]
    for mod in _NEEDS[what]:
        if mod in _FIND_ONLY:
            try:
                found = importlib.util.find_spec(mod) is not None
            except ValueError:  # find_spec of a module set to None (not importable)
                found = False
            if not found:
                raise missing(mod, f"{extra} runtime")
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try_import(mod, f"{extra} runtime")



def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


class _EdgeRuntime(Runtime):
    """What both share: CPU only, one provider name, a per-key cache of converted blocks."""

    precisions = ("fp32", "int8")
    provider_name = ""
    package = ""
    io = ""

    def check(self) -> None:
        if self.device_kind != "cpu":
            raise RuntimeUnavailable(f"runtime {self.name!r} runs on the CPU; the target's device.kind is "
                                     f"{self.device_kind!r}: set device.kind: cpu")
        if self.provider != self.provider_name:
            raise RuntimeUnavailable(f"runtime {self.name!r} takes provider {self.provider_name!r}, the target "
                                     f"names {self.provider!r}: set conf.provider={self.provider_name}")
        require(self.package + ("-int8" if self.precision == "int8" and self.package in ("openvino", "litert") else ""))

    def version(self) -> str:
        return _version(_PACKAGES.get(self.package, self.package))

    def info(self) -> dict[str, Any]:
        """Name, version and provider (what a table is matched on), and how a timed call does its I/O:
        the table metadata's ``measurement.io`` too."""
        return {**super().info(), "io": self.io}

    def calibration(self, in_shape: tuple[int, int, int]) -> list[torch.Tensor]:
        """Seeded random input batches (distinct from the timed input) calibrating an int8 block."""
        g = torch.Generator().manual_seed(1)
        return [torch.randn(self.batch, *in_shape, generator=g) for _ in range(_CALIB)]

    def _cached(self, key: Any, in_shape: tuple[int, int, int], make: Callable[[], Any]) -> Any:
        cache: dict = self.__dict__.setdefault("_cache", {})
        if key is not None and (key, in_shape) in cache:
            return cache[(key, in_shape)]
        value = make()
        if key is not None and len(cache) < _CACHE_ITEMS:
            cache[(key, in_shape)] = value
        return value


@register("executorch")
class ExecuTorchRuntime(_EdgeRuntime):
    provider_name = "XNNPACK"
    package = "executorch"
    io = "inputs bound once; outputs allocated by every Method.execute (no output binding in its Python runtime)"

    def pte(self, module: nn.Module, in_shape: tuple[int, int, int], *, key: Any = None) -> bytes:
        """The ExecuTorch program this runtime runs for ``module`` (cached per ``key``)."""
        return self._cached(key, in_shape, lambda: edge.pte_bytes(
            module, self._input(in_shape), precision=self.precision,
            calib=self.calibration(in_shape) if self.precision == "int8" else ()))

    def prepare(self, module: nn.Module, in_shape: tuple[int, int, int], *, key: Any = None) -> Callable[[], Any]:
        return self.runner_for_pte(self.pte(module, in_shape, key=key), in_shape)

    def runner_for_pte(self, data: bytes, in_shape: tuple[int, int, int],
                       x: torch.Tensor | None = None) -> Callable[[], Any]:
        """A runner for an ExecuTorch program; ``runner.output()`` is its last output (numpy)."""
        method = edge.pte_method(data, threads=self.threads)
        inputs = (self._input(in_shape) if x is None else x,)
        last: list[Any] = list(method.execute(inputs))

        def runner() -> None:
            last[0] = method.execute(inputs)[0]

        runner.output = lambda: last[0].numpy()  # type: ignore[attr-defined]
        return runner


@register("openvino")
class OpenVINORuntime(_EdgeRuntime):
    provider_name = "CPU"
    package = "openvino"

    io = "input tensor set once; outputs in the infer request's own buffers"

    def info(self) -> dict[str, Any]:
        out = {**super().info(), "config": dict(edge.OPENVINO_CONFIG)}
        if self.precision == "int8":
            out["nncf"] = _version("nncf")
        return out

    def model(self, module: nn.Module, in_shape: tuple[int, int, int], *, key: Any = None) -> Any:
        """The ``openvino.Model`` this runtime runs for ``module`` (cached per ``key``)."""
        return self._cached(key, in_shape, lambda: edge.openvino_model(
            module, self._input(in_shape), precision=self.precision,
            calib=[c.numpy() for c in self.calibration(in_shape)] if self.precision == "int8" else ()))

    def prepare(self, module: nn.Module, in_shape: tuple[int, int, int], *, key: Any = None) -> Callable[[], Any]:
        return self.runner_for_model(self.model(module, in_shape, key=key), in_shape)

    def runner_for_model(self, model: Any, in_shape: tuple[int, int, int],
                         x: np.ndarray | None = None) -> Callable[[], Any]:
        """A runner for an OpenVINO model (an ``openvino.Model`` or an IR ``.xml`` path): compiled here,
        one infer request, its input tensor set once; ``runner.output()`` is its last output (numpy)."""
        ov = try_import("openvino")

        if not isinstance(model, ov.Model):
            model = ov.Core().read_model(str(model))
        request = edge.openvino_compile(model, threads=self.threads).create_infer_request()
        xin = np.ascontiguousarray(self._input(in_shape).numpy() if x is None else x)
        request.set_input_tensor(ov.Tensor(xin))
        infer = request.infer
        infer(share_outputs=True)

        def runner() -> None:
            infer(share_outputs=True)  # results not copied out: the timed call is the graph alone

        runner.output = lambda: request.get_output_tensor(0).data.copy()  # type: ignore[attr-defined]
        runner.keep = xin  # type: ignore[attr-defined]  # the input buffer lives as long as the runner
        return runner


@register("litert")
class LiteRTRuntime(_EdgeRuntime):
    provider_name = "XNNPACK"
    package = "litert"
    io = "input tensor set once; outputs in the interpreter's own buffers"

    def info(self) -> dict[str, Any]:
        out = {**super().info(), "delegate": "XNNPACK (LiteRT's default CPU delegate)", "layout": litert.LAYOUT,
               "converter": f"litert-torch {_version('litert-torch')}"}
        if self.precision == "int8":
            out["quantizer"], out["scheme"] = f"ai-edge-quantizer {_version('ai-edge-quantizer')}", litert.INT8_SCHEME
        return out

    def tflite(self, module: nn.Module, in_shape: tuple[int, int, int], *, key: Any = None) -> bytes:
        """The ``.tflite`` graph this runtime runs for ``module`` (cached per ``key``)."""
        return self._cached(key, in_shape, lambda: litert.tflite_bytes(
            module, self._input(in_shape), precision=self.precision,
            calib=self.calibration(in_shape) if self.precision == "int8" else ()))

    def prepare(self, module: nn.Module, in_shape: tuple[int, int, int], *, key: Any = None) -> Callable[[], Any]:
        return self.runner_for_tflite(self.tflite(module, in_shape, key=key), in_shape)

    def runner_for_tflite(self, model: bytes | str, in_shape: tuple[int, int, int],
                          x: torch.Tensor | None = None) -> Callable[[], Any]:
        """A runner for a ``.tflite`` graph (bytes or a file): its interpreter on ``threads`` threads with
        XNNPACK, the (NCHW) input set once; ``runner.output()`` is its last output (float, NCHW)."""
        interp = litert.interpreter(model, threads=self.threads)
        litert.set_input(interp, self._input(in_shape) if x is None else x)
        invoke = interp.invoke
        invoke()

        def runner() -> None:
            invoke()  # outputs stay in the interpreter's buffers: the timed call is the graph alone

        runner.output = lambda: litert.output(interp)  # type: ignore[attr-defined]
        runner.partitions = litert.xnnpack_partitions(interp)  # type: ignore[attr-defined]
        runner.keep = interp  # type: ignore[attr-defined]
        return runner
