"""The installed version of a runtime, by the name a latency table records it under."""

from __future__ import annotations

import importlib.metadata

__all__ = ["installed_version"]

# a runtime's name in a table -> the distributions that provide it
_DISTRIBUTIONS = {"onnxruntime": ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino"),
                  "openvino": ("openvino",), "executorch": ("executorch",), "tensorrt": ("tensorrt",),
                  "litert": ("ai-edge-litert",)}


def installed_version(runtime: str) -> str | None:
    """The installed version of ``runtime`` (a table's runtime name), else None."""
    for dist in _DISTRIBUTIONS.get(runtime, (runtime,)):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None
