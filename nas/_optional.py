"""One way to load an optional dependency: ``try_import(module)`` imports it where it is used, or raises
``MissingDependency`` whose one line names what is missing and the command that installs it.

The optional runtimes (onnxruntime's GPU builds, ExecuTorch, OpenVINO and NNCF, LiteRT, TensorRT, the
PostgreSQL driver) are imported only where they run, through it, so a command that does not need one
starts without it and one that does says how to get it.  The device bundles' scripts (``bundle_*.py``)
run on the device without this package and keep their own imports.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from nas.machine import RuntimeUnavailable

__all__ = ["INSTALL", "MissingDependency", "install_hint", "missing", "try_import"]

_TRT_BUNDLE = ("or write a device bundle with `python -m nas.profile ... bundle=<dir>` and run it with trtexec")

# the command that installs each optional top-level module (an extra where hwnas has one)
INSTALL = {
    "onnxruntime": "pip install onnxruntime (onnxruntime-gpu for the CUDA / TensorRT providers)",
    "executorch": 'pip install "hwnas[executorch]"',
    "torchao": 'pip install "hwnas[executorch]"',
    "openvino": 'pip install "hwnas[openvino]"',
    "nncf": 'pip install "hwnas[openvino]"',
    "litert_torch": 'pip install "hwnas[litert]"',
    "ai_edge_litert": 'pip install "hwnas[litert]"',
    "ai_edge_quantizer": 'pip install "hwnas[litert]"',
    "tensorrt": f"pip install tensorrt (or use JetPack's python3-libnvinfer), {_TRT_BUNDLE}",
    "psycopg": 'pip install "hwnas[postgres]"',
    "redis": "pip install redis",
    "modelopt": "pip install nvidia-modelopt (benchmarks/modelopt.py only)",
}


class MissingDependency(RuntimeUnavailable, ImportError):
    """An optional dependency is not installed (a ``RuntimeUnavailable`` and an ``ImportError``)."""


def install_hint(module: str) -> str:
    """The command that installs top-level ``module`` (``pip install <module>`` when it has no extra)."""
    top = module.split(".")[0]
    return INSTALL.get(top, f"pip install {top}")


def try_import(module: str, what: str = "") -> ModuleType:
    """``module`` imported, or ``MissingDependency``: "[<what>: ]<missing module> is not installed: <install>".

    Args:
        module: the module's dotted name (``"onnxruntime"``, ``"executorch.runtime"``).
        what: what needs it, said first (``"openvino runtime"``); nothing by default.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise missing(e.name if e.name and module.startswith(e.name.split(".")[0]) else module, what) from None


def missing(module: str, what: str = "") -> MissingDependency:
    """The error for ``module`` not installed: "[<what>: ]<module> is not installed: <install>"."""
    head = f"{what}: " if what else ""
    err = MissingDependency(f"{head}{module} is not installed: {install_hint(module)}")
    err.name = module
    return err
