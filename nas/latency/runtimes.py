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

import os
import platform
import re
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nas.registry import Registry
from nas.target import Target

__all__ = [
    "RUNTIMES",
    "OnnxRuntime",
    "Runtime",
    "RuntimeUnavailable",
    "TensorRTRuntime",
    "TorchCompileRuntime",
    "TorchRuntime",
    "device_identity",
    "device_mismatch",
    "get_runtime",
]

RUNTIMES: Registry[type[Runtime]] = Registry("runtime")


class RuntimeUnavailable(RuntimeError):
    """The runtime, provider or device a target asks for is not available here."""


def _register(name: str):
    """Register a ``Runtime`` class under ``name`` (its ``name`` attribute too)."""

    def deco(cls):
        RUNTIMES.add(name, cls)
        cls.name = name
        return cls

    return deco


# --------------------------------------------------------------------------------------------
# device identity


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def _cpu_name(text: str) -> str:
    for line in text.splitlines():
        if line.lower().startswith(("model name", "hardware", "cpu model")):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _cpu_flags(text: str) -> list[str]:
    interesting = {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_tile",
                   "amx_int8", "amx_bf16", "asimd", "asimddp", "sve", "neon"}
    m = re.search(r"^(flags|Features)\s*:\s*(.*)$", text, re.M)
    return sorted(set(m.group(2).split()) & interesting) if m else []


def _cpu_model(text: str) -> dict[str, str]:
    """x86 CPU family / model / stepping (empty elsewhere): the same model name can hide different
    microarchitectures on cloud machines (``AMD EPYC`` is Zen 3 at family 25, Zen 5 at 26)."""
    out = {}
    for key, field in (("cpu family", "cpu_family"), ("model", "cpu_model"), ("stepping", "cpu_stepping")):
        m = re.search(rf"^{key}\s*:\s*(\S+)\s*$", text, re.M)
        if m:
            out[field] = m.group(1)
    return out


def _nvidia_smi(query: str) -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace").replace("\x00", "").strip() or None
    except OSError:
        return None


def _jetson(ident: dict[str, Any]) -> None:
    """A Jetson's board (``/proc/device-tree/model``) and L4T release (``/etc/nv_tegra_release``);
    ``measure_bundle.py`` reads them the same way."""
    tegra = _read("/etc/nv_tegra_release")
    if tegra:  # "# R36 (release), REVISION: 3.0, ..." -> L4T 36.3.0
        ident["jetpack"] = tegra.splitlines()[0]
        m = re.search(r"R(\d+) \(release\), REVISION: ([\d.]+)", tegra)
        ident["l4t"] = f"{m.group(1)}.{m.group(2)}" if m else None
    model = _read("/proc/device-tree/model")
    if model:
        ident["model"] = model


def _cuda_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"CUDA Version:\s*([\d.]+)", out)
    return m.group(1) if m else None


def device_identity(kind: str = "cpu") -> dict[str, Any]:
    """What this machine is, for table metadata: CPU model and flags, GPU name, driver and CUDA, and
    on a Jetson its board and L4T release (the board's model is its name)."""
    info = _cpuinfo()
    ident: dict[str, Any] = {
        "kind": kind,
        "cpu": _cpu_name(info),
        "cpu_flags": _cpu_flags(info),
        **_cpu_model(info),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "os": platform.platform(),
        "gpu": None,
        "driver": None,
        "jetpack": None,
    }
    _jetson(ident)
    if kind in ("gpu", "jetson"):
        if torch.cuda.is_available():
            ident["gpu"] = torch.cuda.get_device_name(0)
        ident["gpu"] = ident["gpu"] or _nvidia_smi("name")
        ident["driver"] = _nvidia_smi("driver_version")
        ident["cuda"] = _cuda_version() or torch.version.cuda
        if kind == "jetson" and ident.get("model"):
            ident["gpu"] = ident["model"]
    ident["name"] = ident["gpu"] if kind in ("gpu", "jetson") and ident["gpu"] else ident["cpu"]
    return ident


def _words(name: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", name.lower())) - {"nvidia"}


def device_mismatch(want: dict[str, Any] | None, here: dict[str, Any], *, exact: bool = False) -> str | None:
    """Why the machine ``here`` (a ``device_identity``) is not the device ``want`` describes, or None.

    ``want`` is a target's ``device`` config (its ``name`` and the ``cpu_flags`` it requires) or, with
    ``exact=True``, a table's recorded ``device`` metadata, whose ISA flags and CPU family/model must all be
    the same: one model name can cover processors of different speed (``AMD EPYC`` with and without AVX-512).
    """
    want = want or {}
    name = want.get("name")
    gpu = here.get("kind", "cpu") != "cpu" and not exact
    # a GPU or board by the words of its name ("Jetson AGX Orin" is the "NVIDIA Jetson AGX Orin Developer
    # Kit"); a CPU by its exact model name
    if name and here.get("name") != name and not (gpu and _words(name) <= _words(str(here.get("name") or ""))):
        return f"this machine is {here.get('name')!r}, not {name!r}"
    if here.get("kind", "cpu") != "cpu" and want.get("kind", "cpu") != "cpu":
        return None
    need, have = set(want.get("cpu_flags") or ()), set(here.get("cpu_flags") or ())
    if exact and want.get("cpu_flags") is not None and need != have:
        return (f"this machine's CPU has ISA flags {sorted(have)}, the measured one had {sorted(need)} "
                "(same name, different processor)")
    if not exact and need - have:
        return f"this machine's CPU lacks {sorted(need - have)} (it has {sorted(have)})"
    for f in ("cpu_family", "cpu_model"):
        if exact and want.get(f) is not None and here.get(f) is not None and str(want[f]) != str(here[f]):
            return f"this machine's CPU is {f.replace('_', ' ')} {here[f]}, the measured one was {want[f]}"
    return None


# --------------------------------------------------------------------------------------------
# timing


# --------------------------------------------------------------------------------------------


class Runtime(ABC):
    """One way to run a network on a device.  Construct via ``get_runtime(target)``."""

    name: str = ""
    precisions: tuple[str, ...] = ("fp32",)

    def __init__(self, *, provider: str = "", precision: str = "fp32", threads: int = 1, batch: int = 1,
                 device_kind: str = "cpu") -> None:
        if precision not in self.precisions:
            raise RuntimeUnavailable(
                f"runtime {self.name!r} does not support precision {precision!r}; it supports "
                f"{', '.join(self.precisions)}"
            )
        self.provider, self.precision, self.threads, self.batch = provider, precision, threads, batch
        self.device_kind = device_kind
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
        return {"name": self.name, "version": self.version(), "provider": self.provider}

    def overhead_runner(self, in_shape: tuple[int, int, int] = (8, 8, 8)) -> Callable[[], Any]:
        """A runner for an (almost) empty graph: the fixed cost of one call."""
        return self.prepare(_Tiny(), in_shape)

    def _input(self, in_shape: tuple[int, int, int]) -> torch.Tensor:
        g = torch.Generator().manual_seed(0)
        return torch.randn(self.batch, *in_shape, generator=g)


class _Tiny(nn.Module):
    """The smallest graph every runtime accepts: one elementwise op."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1.5


@_register("onnxruntime")
class OnnxRuntime(Runtime):
    precisions = ("fp32", "fp16", "int8")
    _PROVIDERS = ("CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider")

    def check(self) -> None:
        try:
            import onnxruntime as ort
        except ImportError:
            raise RuntimeUnavailable("onnxruntime is not installed: pip install onnxruntime "
                                     "(onnxruntime-gpu for the CUDA / TensorRT providers)") from None
        if self.provider not in self._PROVIDERS:
            raise RuntimeUnavailable(f"unknown onnxruntime provider {self.provider!r}; use one of {self._PROVIDERS}")
        if self.provider not in ort.get_available_providers():
            hint = {"CUDAExecutionProvider": "pip install onnxruntime-gpu (and a CUDA GPU)",
                    "TensorrtExecutionProvider": "pip install onnxruntime-gpu with TensorRT libraries on the path"}
            raise RuntimeUnavailable(
                f"onnxruntime provider {self.provider} is not available here (available: "
                f"{', '.join(ort.get_available_providers())}); {hint.get(self.provider, '')}"
            )
        if self.precision == "fp16" and self.provider != "TensorrtExecutionProvider":
            raise RuntimeUnavailable("fp16 with onnxruntime is supported through the TensorRT provider only")

    def version(self) -> str:
        import onnxruntime as ort

        return ort.__version__

    _CACHE_BYTES = 4 << 30  # exported graphs kept for later rounds (export + quantization are slow)

    def onnx_bytes(self, module: nn.Module, in_shape: tuple[int, int, int], *, key: Any = None) -> bytes:
        """The graph onnxruntime runs (QDQ-quantized for int8); cached per ``key`` when given."""
        from nas.compress.ptq import quantize_qdq
        from nas.export.onnx import export_onnx

        cache: dict = self.__dict__.setdefault("_onnx_cache", {})
        if key is not None and (key, in_shape) in cache:
            return cache[(key, in_shape)]
        x = self._input(in_shape)
        data = export_onnx(module, x)
        if self.precision == "int8":
            data = quantize_qdq(data, [self._input(in_shape).numpy() for _ in range(4)])
        if key is not None and sum(map(len, cache.values())) + len(data) <= self._CACHE_BYTES:
            cache[(key, in_shape)] = data
        return data

    def session(self, data: bytes):
        from nas.export.onnx import ort_session

        providers: list[Any] = [self.provider]
        if self.provider == "TensorrtExecutionProvider":
            providers = [(self.provider, {"trt_fp16_enable": self.precision == "fp16",
                                          "trt_int8_enable": False}), "CUDAExecutionProvider"]
        return ort_session(data, threads=self.threads, providers=providers)

    def prepare(self, module: nn.Module, in_shape: tuple[int, int, int], *, key: Any = None) -> Callable[[], Any]:
        return self.runner_for_onnx(self.onnx_bytes(module, in_shape, key=key), in_shape)

    def runner_for_onnx(self, data: bytes, in_shape: tuple[int, int, int]) -> Callable[[], Any]:
        """Inputs and outputs bound once (IOBinding), so a timed call is the graph alone, not the
        per-call output allocation that a block inside a network never pays."""
        import onnxruntime as ort

        sess = self.session(data)
        x = self._input(in_shape).numpy()
        name = sess.get_inputs()[0].name
        outs = sess.run(None, {name: x})
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

        runner.keep = keep  # type: ignore[attr-defined]  # the bound buffers live as long as the runner
        return runner


@_register("torch")
class TorchRuntime(Runtime):
    precisions = ("fp32", "fp16")

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
        return {"name": self.name, "version": self.version(), "provider": self.device}

    def _module(self, module: nn.Module) -> nn.Module:
        module = module.eval().to(self.device)
        return module.half() if self.precision == "fp16" else module

    def prepare(self, module: nn.Module, in_shape: tuple[int, int, int], *, key: Any = None) -> Callable[[], Any]:
        torch.set_num_threads(self.threads)
        m = self._module(module)
        x = self._input(in_shape).to(self.device)
        x = x.half() if self.precision == "fp16" else x
        sync = torch.cuda.synchronize if self.device == "cuda" else (lambda: None)

        def run() -> None:
            with torch.inference_mode():
                m(x)
            sync()

        return run


@_register("torch_compile")
class TorchCompileRuntime(TorchRuntime):
    def _module(self, module: nn.Module) -> nn.Module:
        return torch.compile(super()._module(module), dynamic=False)


@_register("tensorrt")
class TensorRTRuntime(Runtime):
    precisions = ("fp32", "fp16", "int8")

    def check(self) -> None:
        try:
            import tensorrt  # noqa: F401
        except ImportError:
            raise RuntimeUnavailable(
                "TensorRT is not installed: pip install tensorrt (or use JetPack's python3-libnvinfer), "
                "or write a device bundle with `python -m nas.profile ... bundle=<dir>` and run it with trtexec"
            ) from None
        if not torch.cuda.is_available():
            raise RuntimeUnavailable("TensorRT needs a CUDA device, and torch sees none here")

    def version(self) -> str:
        import tensorrt

        return tensorrt.__version__

    def prepare(self, module: nn.Module, in_shape: tuple[int, int, int], *,  # pragma: no cover
                key: Any = None) -> Callable[[], Any]:
        import tensorrt as trt

        from nas.export.onnx import export_onnx

        x = self._input(in_shape)
        data = export_onnx(module, x)
        logger = trt.Logger(trt.Logger.ERROR)
        builder = trt.Builder(logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse(data):
            raise RuntimeError("TensorRT could not parse the block: " + str(parser.get_error(0)))
        config = builder.create_builder_config()
        if self.precision == "fp16":
            config.set_flag(trt.BuilderFlag.FP16)
        elif self.precision == "int8":
            config.set_flag(trt.BuilderFlag.INT8)
        engine = trt.Runtime(logger).deserialize_cuda_engine(builder.build_serialized_network(network, config))
        ctx = engine.create_execution_context()
        xin = x.cuda()
        out_name = engine.get_tensor_name(1)
        out = torch.empty(tuple(engine.get_tensor_shape(out_name)), device="cuda")
        ctx.set_tensor_address(engine.get_tensor_name(0), xin.data_ptr())
        ctx.set_tensor_address(out_name, out.data_ptr())
        stream = torch.cuda.Stream()

        def run() -> None:
            ctx.execute_async_v3(stream.cuda_stream)
            stream.synchronize()

        return run


def get_runtime(target: Target | Mapping[str, Any]) -> Runtime:
    """The runtime a target config names (``runtime``, ``provider``, ``precision``, ...)."""
    from nas.latency import runtimes_edge  # noqa: F401  # registers executorch and openvino (imports neither)

    t = Target.coerce(target)
    return RUNTIMES[t.runtime](
        provider=t.provider or "",
        precision=t.precision,
        threads=t.threads,
        batch=t.batch,
        device_kind=t.device.kind,
    )
