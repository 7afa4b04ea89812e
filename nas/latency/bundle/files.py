"""What a device bundle's files are and cost: the graph format per runtime, each graph's size, the
bundle's size and measuring time estimated before writing (``bundle_cost``), and the README.md that
explains a bundle to whoever measures it (``bundle_readme``).  ``nas.latency.bundle.roundtrip`` writes them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nas.arch import Arch, BlockKey
from nas.cost import arch_cost, block_cost
from nas.latency.runtimes import ProfileSettings, trtexec_command, trtexec_flags
from nas.target import Target, require_target

__all__ = ["GRAPH_BYTES", "SUFFIX", "TRT_BUILD_S", "BundleCost", "bundle_cost", "bundle_readme", "graph_bytes"]

#: the file each runtime's script loads: ONNX (onnxruntime, TensorRT), an ExecuTorch program, an OpenVINO IR,
#: a LiteRT flatbuffer
SUFFIX = {"onnxruntime": ".onnx", "tensorrt": ".onnx", "executorch": ".pte", "openvino": ".xml", "litert": ".tflite"}

#: a graph file's bytes per parameter and per primitive op (``nas.cost``), by runtime and int8 weights:
#: least squares over 30-40 blocks and 14 calibration networks of the shipped spaces as ``write_bundle``
#: writes them (torch 2.14, ONNX opset 17, onnxruntime's QDQ quantizer with each runtime's scheme,
#: ExecuTorch 1.5): the totals of the graphs fitted on within 1%, one small graph within 20% (60% for
#: a small QDQ graph, whose Q/DQ nodes weigh more than its weights).  ExecuTorch int8, OpenVINO and
#: LiteRT were not fitted (their exports are slow here): they take the ONNX figures.  tests/test_bundle_cost.py
#: checks written bundles.
GRAPH_BYTES = {("onnxruntime", False): (4.0, 216.0), ("tensorrt", False): (4.0, 216.0),
               ("onnxruntime", True): (1.06, 2910.0), ("tensorrt", True): (1.03, 1940.0),
               ("executorch", False): (4.0, 496.0), ("executorch", True): (1.03, 1940.0),
               ("openvino", False): (4.0, 216.0), ("openvino", True): (1.03, 1940.0),
               ("litert", False): (4.0, 216.0), ("litert", True): (1.03, 1940.0)}
#: TensorRT's engine build for one graph, in seconds: a fixed part and a part per layer.  ASSUMED, not
#: measured (no TensorRT here): builds time the tactics of every layer, seconds for a block, tens of
#: seconds for a network; the script's own ETA on the device is the measured figure.
TRT_BUILD_S = (2.0, 0.5)


def graph_bytes(item: BlockKey | Arch, target: Target) -> int:
    """The estimated size of the file ``write_bundle`` writes for a block or a network on ``target``."""
    cost = block_cost(item) if isinstance(item, BlockKey) else arch_cost(item)
    per_param, per_op = GRAPH_BYTES[(target.runtime, target.precision == "int8")]
    return int(per_param * cost.params + per_op * cost.ops)


@dataclass(frozen=True)
class BundleCost:
    """What a bundle costs, estimated before it is written: its files and the device's measuring time.

    ``measure_s`` and ``build_s`` cover every round of every graph (``rounds``); ``build_s`` is
    TensorRT's engine builds (0 for other runtimes; ``TRT_BUILD_S``, assumed).  ``by_space``: each
    space's blocks, networks and bytes (a block shared by spaces counts in each)."""

    target: str
    runtime: str
    precision: str
    blocks: int
    networks: dict[str, int]
    bytes: int
    largest_bytes: int
    largest: str
    measure_s: float
    build_s: float
    rounds: int
    by_space: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    @property
    def graphs(self) -> int:
        return self.blocks + sum(self.networks.values())

    @property
    def gb(self) -> float:
        return self.bytes / 1e9

    def lines(self) -> list[str]:
        """The estimate as printed before writing, one line each: counts and size, time, per space."""
        nets = ", ".join(f"{n} {r.replace('_', '-')}" for r, n in self.networks.items() if n)
        build = (f" + {_duration(self.build_s)} of TensorRT engine builds (assumed {TRT_BUILD_S[0]:g} s a graph + "
                 f"{TRT_BUILD_S[1]:g} s a layer, every round)") if self.build_s else ""
        out = [f"bundle for {self.target} ({self.runtime}, {self.precision}): {self.blocks} blocks and "
               f"{sum(self.networks.values())} networks ({nets or 'none'}), {self.graphs} graphs: about "
               f"{_size(self.bytes)}, the largest file about {_size(self.largest_bytes)} ({self.largest}) (estimated "
               "from the graphs' parameters)",
               f"measuring it on the device: about {_duration(self.measure_s + self.build_s)} ({self.rounds} "
               f"round(s): {_duration(self.measure_s)} of timing, estimated from the target's roofline{build}); "
               "measure_bundle.py --budget-min N stops after N minutes, the most useful graphs first"]
        if len(self.by_space) > 1:
            out.append("by space: " + "; ".join(f"{n} {_size(b)} ({k} blocks, {m} networks)"
                                                 for n, (k, m, b) in self.by_space.items()))
        return out


def _size(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


def _duration(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min" if s >= 60 else f"{s:.0f} s"


def bundle_cost(keys: Sequence[BlockKey], target: Target, networks: Mapping[str, Sequence[Arch]],
                settings: ProfileSettings, seconds: Callable[[Any, str], float], *,
                spaces: Mapping[str, Sequence[BlockKey]] | None = None) -> BundleCost:
    """Estimate what writing ``keys`` and ``networks`` (by role) for ``target`` costs, before writing.

    Args:
        keys: the blocks.
        target: the bundle's target (its runtime's file format, its precision).
        networks: the networks by role (``calibration``, ``pruned``, ``held_out``).
        settings: the measuring settings (their ``rounds``).
        seconds: one round of one item's measuring, ``seconds(item, "block" | "network")``.
        spaces: each space's blocks, for the per-space lines (networks go to the space they name).

    Returns:
        The ``BundleCost``.
    """
    target = require_target(target)
    items = [(k, "block") for k in dict.fromkeys(keys)] + [(a, "network") for v in networks.values()
                                                           for a in dict.fromkeys(v)]
    sizes = {x: graph_bytes(x, target) for x, _ in items}
    big = max(items, key=lambda t: sizes[t[0]], default=None)
    trt = target.runtime == "tensorrt"
    rounds = settings.rounds
    measure = rounds * sum(seconds(x, kind) for x, kind in items)
    build = rounds * sum(TRT_BUILD_S[0] + TRT_BUILD_S[1] * (1 if kind == "block" else len(x.keys()))
                         for x, kind in items) if trt else 0.0
    by_space: dict[str, tuple[int, int, int]] = {}
    for name, ks in (spaces or {}).items():
        ks = list(dict.fromkeys(ks))
        nets = list(dict.fromkeys(a for v in networks.values() for a in v if a.name == name))
        by_space[name] = (len(ks), len(nets), sum(sizes.get(k) or graph_bytes(k, target) for k in ks)
                          + sum(sizes[a] for a in nets))
    largest = "" if big is None else (str(big[0]) if big[1] == "block" else f"network {big[0].name or ''} "
                                      f"{big[0].digest()[:12]}".replace("  ", " "))
    return BundleCost(target.name, target.runtime, target.precision, len(dict.fromkeys(keys)),
                      {r: len(dict.fromkeys(v)) for r, v in networks.items()}, sum(sizes.values()),
                      sizes[big[0]] if big else 0, largest, measure, build, rounds, by_space)


_FORMAT = {".onnx": "an ONNX graph", ".pte": "an ExecuTorch program", ".xml": "an OpenVINO IR (.xml + .bin)",
           ".tflite": "a LiteRT flatbuffer (.tflite)"}
#: the runtimes that measure each graph format on the device: (runtime, command, what it needs)
_RUN = {
    ".onnx": [
        ("TensorRT, Python API", "python3 measure_bundle.py{rt}",
         "`import tensorrt` (JetPack's python3-libnvinfer, or pip install tensorrt), 8.5 or later; before 8.5 "
         "it measures with trtexec by itself, saying so"),
        ("TensorRT, trtexec", "python3 measure_bundle.py --runtime trtexec",
         "trtexec on PATH or in /usr/src/tensorrt/bin/ (JetPack ships it)"),
        ("onnxruntime", "python3 measure_bundle.py --runtime onnxruntime --provider CUDAExecutionProvider",
         "pip install onnxruntime-gpu (on a Jetson, the wheel for its JetPack); CPUExecutionProvider with "
         "plain onnxruntime"),
    ],
    ".pte": [("ExecuTorch", "python3 measure_bundle.py", "pip install executorch (its runtime imports torch itself)")],
    ".xml": [("OpenVINO", "python3 measure_bundle.py", "pip install openvino")],
    ".tflite": [("LiteRT on an ARM board, Python interpreter", "python3 measure_bundle.py --runtime litert",
                 "pip install numpy ai-edge-litert (Python 3.9 or later)"),
                ("LiteRT on an Android phone, benchmark_model over adb", "python3 measure_bundle.py --runtime "
                 "benchmark_model --benchmark-model <benchmark_model built for the phone's ABI>",
                 "adb on PATH with the phone connected (USB debugging on), LiteRT's benchmark_model binary")],
}


def bundle_readme(manifest: Mapping[str, Any], cost: BundleCost | None, folder: str) -> str:
    """The README.md of a bundle: what to copy, the command per runtime, what the device needs, how long
    measuring takes, the trtexec command lines, and how to bring the results back."""
    man = manifest
    fmt = "." + man["tool"]["format"]
    runs = _RUN[fmt]
    n_nets = len(man["networks"])
    size = f" (about {_size(cost.bytes)})" if cost else ""
    lines = [
        f"# hwnas device bundle: {man['target']} ({man['runtime']}, {man['precision']}, batch {man['batch']}, "
        f"{man['threads']} thread(s))", "",
        f"Written by hwnas {man['tool']['version']} for target `{man['target']}` (device: "
        f"{man.get('expected_device') or 'any ' + man['device_kind']}): {len(man['blocks'])} blocks and {n_nets} "
        f"network(s){size}, each {_FORMAT[fmt]}, and a script that measures them on the device with numpy and one "
        "runtime: no torch, no hwnas there.", "",
        "## What to copy", "",
        "The whole folder: `manifest.json`, `measure_bundle.py` and its helpers (`hwnas_*.py`), `blocks/`, "
        f"`networks/` and this file{size}, for example `scp -r {folder} device:` (`rsync -a --partial {folder} "
        "device:` resumes a broken copy).", "",
        "## What the device needs", "",
        "Python 3.6 or later (JetPack 4.6 has 3.6, JetPack 5 3.8, JetPack 6 3.10) and numpy (`pip3 install numpy`, "
        "or `sudo apt install python3-numpy`), and one runtime:", "",
        "| runtime | command, in this folder | needs |", "|---|---|---|",
        *[f"| {name} | `{cmd.format(rt='')}` | {needs} |" for name, cmd, needs in runs],
        "| a rehearsal (any machine) | `python3 measure_bundle.py --rehearse` | pip install numpy onnxruntime: the "
        "round trip with what that machine has, labelled as a rehearsal (rehearsal.json), never as the device |"
        if fmt == ".onnx" else "",
        "", "`python3 measure_bundle.py --identify` prints what the device reports (its name for the target file).",
        "", "## How long it takes", "",
    ]
    if cost:
        lines += [f"- {ln}" for ln in cost.lines()[1:]]
    lines += [f"- {man['settings'].get('rounds', 1)} round(s) of every graph, each in its own shuffled order. "
              "Results go to results.json every few seconds and on Ctrl-C; running the script again measures only "
              "what is left. `--budget-min N` stops after N minutes (calibration networks and the most used blocks "
              "first), `--limit N` after N graphs. A graph the runtime cannot run is left out with its error "
              "(results.json: `failed`); `--retry-failed` tries it again" + (f"; this bundle's default budget: {man['budget_min']:g} min"
                                                      if man.get("budget_min") else "") + "."]
    if fmt == ".onnx" and man["runtime"] == "tensorrt":
        example = _trtexec_example(man)
        lines += ["", "## The trtexec command lines", "",
                  "`python3 measure_bundle.py --print-trtexec --limit 3` prints the exact lines the run would execute "
                  "with this device's trtexec, and runs nothing. Each graph's engine is built and timed in one run "
                  "(`--saveEngine`); a re-measure of a noisy round loads it (`--loadEngine`). With TensorRT 10.3 "
                  "(JetPack 6.1 and 6.2) the first block is run as:", "", "```", example, "```"]
    imp = man.get("import_command") or f"python -m nas.profile conf={man['target']} import_bundle=<this folder>/results.json"
    lines += ["", "## Bringing the results back", "",
              "Copy `results.json` from the device into this folder where the bundle was written (the manifest "
              "beside it names the bundle), then import it there:", "", "```", imp, "```"]
    if any(n["role"] == "held_out" for n in man["networks"]):
        lines += ["", "and score the table on the held-out networks the device measured:", "", "```",
                  f"python -m nas.validate conf={man['target']} bundle={folder}/results.json", "```"]
    if fmt == ".onnx":
        lines += ["", "A rehearsal writes rehearsal.json instead and prints the command that imports it into a table "
                  "of its own; its figures are this other machine's, labelled as a rehearsal."]
    return "\n".join(ln for ln in lines if ln is not None) + "\n"


def _trtexec_example(man: Mapping[str, Any]) -> str:
    """The trtexec command line of the bundle's first block with TensorRT 10.3 (the engine build and timing)."""
    first = man["blocks"][0]["file"] if man["blocks"] else man["overhead"]
    flags = trtexec_flags(man["precision"], "10.3.0", qdq=man["precision"] == "int8")
    return " ".join(trtexec_command("/usr/src/tensorrt/bin/trtexec", first, "<tmp>/engine.plan",
                                               "<tmp>/times.json", man["settings"], flags, build=True,
                                               trt_version="10.3.0"))
