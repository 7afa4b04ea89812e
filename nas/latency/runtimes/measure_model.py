"""Blocks, networks and exported files timed on a runtime, by the one measuring loop
(``nas.latency.runtimes.loop``): ``measure_key`` / ``measure_arch`` build a block or a network and time it;
``time_onnx_stats`` / ``measure_onnx`` time exported ONNX bytes, a fresh session each round.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from nas.arch import Arch, BlockKey
from nas.builder import build, build_layer
from nas.latency.runtimes.core import get_runtime
from nas.latency.runtimes.device import device_identity
from nas.latency.runtimes.loop import MeasureSettings, ProfileSettings, measure, summarize_times, time_runner
from nas.latency.tables import Entry, how_measured
from nas.target import Target, require_target

__all__ = ["measure_arch", "measure_key", "measure_onnx", "measure_overhead", "time_onnx", "time_onnx_stats"]


def measure_key(key: BlockKey, runtime, settings: ProfileSettings) -> Entry:
    """Build one block, prepare it on ``runtime`` and time it (re-measured while its spread is too high).

    Args:
        key: the block.
        runtime: a ``Runtime`` (``get_runtime(target)``).
        settings: the measuring loop's settings.

    Returns:
        The table entry: median, p10, p90, calls, rounds, when.
    """
    run = runtime.prepare(build_layer(key), key.in_shape, key=key)
    return time_runner(run, settings)


def measure_arch(arch: Arch, runtime, settings: ProfileSettings | None = None) -> Entry:
    """Build a whole network, prepare it on ``runtime`` and time it end to end, as ``measure_key`` does a block.

    Args:
        arch: the network.
        runtime: a ``Runtime``.
        settings: the measuring loop's settings (default: ``ProfileSettings()``).

    Returns:
        The table entry.
    """
    settings = settings or ProfileSettings()
    torch.manual_seed(0)
    run = runtime.prepare(build(arch), (arch.in_chans, arch.resolution, arch.resolution), key=arch)
    return time_runner(run, settings)


def measure_overhead(runtime, settings: ProfileSettings) -> float:
    """The fixed cost of one call on a runtime.

    Args:
        runtime: a ``Runtime``.
        settings: the measuring loop's settings.

    Returns:
        The median time of an almost empty graph, in ms.
    """
    return time_runner(runtime.overhead_runner(), settings).median_ms


def time_onnx_stats(model_bytes: bytes, in_shape: tuple[int, int, int], target: Target, *, rounds: int, warmup: int,
                    repeats: int, min_time_s: float) -> dict[str, Any]:
    """Time exported ONNX bytes on the target's runtime, each round in a fresh session.

    Args:
        model_bytes: the ONNX model (its graph decides the precision: a QDQ graph runs int8).
        in_shape: ``(channels, height, width)`` of one input.
        target: the ``Target`` whose runtime and provider time it.
        rounds, warmup, repeats, min_time_s: the measuring loop's settings.

    Returns:
        ``median_ms``, ``p10_ms``, ``p90_ms`` (each the median over ``rounds``), ``rounds`` and
        ``how`` they were obtained (``how_measured``).
    """
    t = require_target(target)
    rt = get_runtime(t.replace(precision="fp32"))
    meds, p10, p90 = [], [], []
    for _ in range(rounds):
        s = summarize_times(measure(rt.runner_for_onnx(model_bytes, in_shape), warmup=warmup, repeats=repeats,
                                    min_time_s=min_time_s))
        meds.append(s["median_ms"])
        p10.append(s["p10_ms"])
        p90.append(s["p90_ms"])
    return {"median_ms": float(np.median(meds)), "p10_ms": float(np.median(p10)),
            "p90_ms": float(np.median(p90)), "rounds": rounds,
            "how": how_measured(t.device.name or device_identity(t.device.kind)["name"])}


def time_onnx(model_bytes: bytes, in_shape: tuple[int, int, int], target, *, rounds: int, warmup: int,
              repeats: int, min_time_s: float) -> float:
    """The median latency of exported ONNX bytes on the target's runtime (``time_onnx_stats``'s ``median_ms``).

    Args:
        model_bytes, in_shape, target, rounds, warmup, repeats, min_time_s: as for ``time_onnx_stats``.

    Returns:
        Milliseconds: the median over ``rounds`` rounds, a fresh session each.
    """
    return time_onnx_stats(model_bytes, in_shape, target, rounds=rounds, warmup=warmup, repeats=repeats,
                           min_time_s=min_time_s)["median_ms"]


def measure_onnx(model: bytes, in_shape: tuple[int, int, int], target, settings: MeasureSettings) -> dict[str, Any]:
    """Time exported ONNX bytes on ``target``'s runtime with ``settings`` (``time_onnx_stats``).

    Args:
        model: the ONNX model.
        in_shape: ``(channels, height, width)`` of one input.
        target: the target whose runtime times it.
        settings: rounds, warm-up, repeats and minimum time (``ExportSettings`` is one).

    Returns:
        ``median_ms``, ``p10_ms``, ``p90_ms`` (each the median over ``settings.rounds`` rounds, a
        fresh session each), ``rounds`` and ``how``.
    """
    return time_onnx_stats(model, in_shape, target, rounds=settings.rounds, warmup=settings.warmup,
                           repeats=settings.repeats, min_time_s=settings.min_time_s)


