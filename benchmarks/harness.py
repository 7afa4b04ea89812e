"""What every benchmark shares: where results go, the machine a figure was measured on, pinning to a
core, interleaved rounds with their medians, the command that reproduces a result, and writing it
(JSON, a markdown table beside it, a plot).

A benchmark records ``command(name)`` and ``machine()`` in its JSON so that a figure says how to get it
again and where it came from; ``write_result`` writes the JSON atomically, with ``name.md`` and
``name.png`` next to it when given a table and a plot.
"""

from __future__ import annotations

import math
import os
import platform
import shlex
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from nas._io import atomic_write_json, atomic_write_text
from nas.config import compose_app
from nas.target import Target

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
LIBRARIES = ("torch", "onnxruntime", "onnx", "timm", "numpy", "scikit-learn", "optuna")


def command(name: str, argv: Sequence[str] | None = None, *, cores: Sequence[int] | None = None) -> str:
    """The shell command that reruns benchmark ``name`` with ``argv`` (this process's arguments when
    ``None``), behind ``taskset -c`` when ``cores`` is given."""
    args = list(sys.argv[1:] if argv is None else argv)
    pin = ["taskset", "-c", ",".join(map(str, cores))] if cores else []
    return shlex.join([*pin, "python", "-m", "benchmarks", name, *args])


def pinned_cores() -> list[int] | None:
    """The cores this process may run on when that is fewer than the machine has (``taskset``,
    ``pin``), else ``None``."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    return cores if len(cores) < (os.cpu_count() or len(cores)) else None


def pin(cores: Iterable[int]) -> list[int]:
    """Pins this process (and the processes it starts) to ``cores``, as ``taskset -c`` does; returns them."""
    want = sorted(set(cores))
    os.sched_setaffinity(0, want)
    return want


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``), or what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags(wanted: Sequence[str] = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "neon")) -> list[str]:
    """Which of ``wanted`` the processor reports (the ones that change a kernel's speed)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    line = next((x for x in text.splitlines() if x.startswith(("flags", "Features"))), "")
    have = set(line.split(":", 1)[-1].split())
    return [f for f in wanted if f in have]


def gpu_name() -> str | None:
    """The first CUDA device's name when torch is loaded and sees one, else ``None`` (loads nothing)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(0)


def usable_device(device: str) -> str:
    """``device`` (cpu, cuda, cuda:<i>) when torch can run on it here, else a one-line ``--device`` error."""
    from nas.fit.loop import resolve_device  # heavy: loads torch, which startup (a harness user) never needs

    try:
        resolve_device(device)
    except ValueError:
        raise SystemExit(f"--device takes cpu, cuda or cuda:<i> of a CUDA device torch sees here, got {device!r}") from None
    return device


def versions(libraries: Sequence[str] = LIBRARIES) -> dict[str, str]:
    """The installed version of each of ``libraries`` that is installed."""
    out = {"python": platform.python_version()}
    for lib in libraries:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            pass
    return out


def machine() -> dict[str, Any]:
    """The machine a figure is measured on: processor, its flags, cores, pinning, GPU and library versions."""
    return {"cpu": cpu_model(), "cpu_flags": cpu_flags(), "cores": os.cpu_count(), "pinned": pinned_cores(),
            "gpu": gpu_name(), "versions": versions()}


def interleaved(cases: Mapping[str, Callable[[], float]], rounds: int, *,
                progress: Callable[[int], None] | None = None) -> dict[str, list[float]]:
    """Calls every case once per round, ``rounds`` rounds, so that a slow spell of the machine falls
    on all cases alike; returns each case's values in round order."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, not {rounds}")
    out: dict[str, list[float]] = {k: [] for k in cases}
    for r in range(rounds):
        for k, fn in cases.items():
            out[k].append(fn())
        if progress is not None:
            progress(r)
    return out


def medians(values: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """The median of each case's values."""
    return {k: statistics.median(v) for k, v in values.items()}


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The mean of ``values`` and the half-width of its ``level`` confidence interval (Student's t over
    the values: seeds, runs); the half-width is NaN for a single value."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float(x.mean()), float("nan")
    return float(x.mean()), float(stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))


def diff_ci(x: Sequence[float], y: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """``mean(x) - mean(y)`` and the bounds of its ``level`` confidence interval (Welch's t: independent
    runs of each, their variances not assumed equal); no spread in either gives the difference itself
    as both bounds."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    d = float(x.mean() - y.mean())
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    se = math.sqrt(vx + vy)
    if se == 0:
        return d, d, d
    dof = (vx + vy) ** 2 / (vx ** 2 / (len(x) - 1) + vy ** 2 / (len(y) - 1))
    h = float(stats.t.ppf(0.5 + level / 2, dof) * se)
    return d, d - h, d + h


def markdown_table(rows: Iterable[Sequence[Any]], header: Sequence[str]) -> str:
    """A GitHub markdown table of ``rows`` under ``header``."""
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def text_table(rows: Iterable[Sequence[Any]], header: Sequence[str]) -> str:
    """A plain-text table of ``rows`` under ``header`` for the terminal: columns two spaces apart, the
    first aligned left and the others right, a dashed rule under the header."""
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(r: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))

    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths), *map(line, cells[1:])])


def write_result(path: Path | str, result: Mapping[str, Any], *, table: str | None = None,
                 plot: Callable[[Path], None] | None = None) -> Path:
    """Writes ``result`` to ``path`` (JSON, atomically), ``table`` to the ``.md`` beside it and the plot
    drawn by ``plot(png_path)`` to the ``.png`` beside it; returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, dict(result))
    if table is not None:
        atomic_write_text(path.with_suffix(".md"), table.rstrip("\n") + "\n")
    if plot is not None:
        plot(path.with_suffix(".png"))
    return path


def composed_target(name: str) -> Target:
    """The target of config ``conf=name`` as the commands compose it (and coerce it, once)."""
    return Target.coerce(compose_app("predict", [f"conf={name}"]).target)
