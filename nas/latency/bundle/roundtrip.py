"""Device bundles: build a calibrated latency table on a device without torch (a Jetson, a phone, a board).

``write_bundle`` exports everything ``nas.profile`` measures on a local device: every block, the
calibration and pruned networks of each space (and of the calibration-only spaces), optional
held-out networks for validation, the empty-graph overhead and the measurement settings, as ONNX
files (QDQ-quantized with the target runtime's int8 scheme for int8 targets), ExecuTorch programs
(``.pte``), OpenVINO IRs (``.xml`` + ``.bin``) or LiteRT flatbuffers (``.tflite``) for those runtimes'
targets, plus a
``manifest.json`` and ``measure_bundle.py``, a standalone script that needs only numpy and one
runtime (onnxruntime with any execution provider, TensorRT's Python API, ``trtexec``, ExecuTorch,
OpenVINO, LiteRT's Python interpreter or, on an Android phone, LiteRT's ``benchmark_model`` over adb).  On the
device, ``python3 measure_bundle.py`` writes ``results.json``; ``import_bundle`` turns it into a
table whose metadata is what the script recorded *on the device*: its identity, runtime and precision.

Import is right by construction: results are accepted only from the runtime, provider and
precision the target names (``trtexec`` and TensorRT's Python API are both ``tensorrt``), from a
device the target describes, and from the bundle the results belong to; a mismatch is refused
naming the field and the command that fixes it.
"""

from __future__ import annotations

import json
import shlex
import shutil
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

import nas.latency.runtimes
import nas.machine
from nas._io import atomic_write_json, shell_join
from nas._version import __version__
from nas.arch import Arch, BlockKey
from nas.builder import build, build_layer
from nas.export.edge import openvino_model, pte_bytes, write_openvino
from nas.export.litert import tflite_bytes
from nas.export.onnx import export_onnx
from nas.export.qdq import quantize_qdq
from nas.latency.bundle.files import SUFFIX, BundleCost, bundle_readme
from nas.latency.runtimes import ProfileSettings, Tiny, require
from nas.latency.tables import Entry, LatencyTable, TableError, now_iso
from nas.machine import device_mismatch
from nas.target import Target, require_target

__all__ = ["BUNDLE_SCHEMA", "BUNDLE_VERSION", "MEASURE_SETTINGS", "SCRIPTS", "BundleError", "bundle_manifest", "bundle_networks", "bundle_results",
           "import_bundle", "write_bundle"]

BUNDLE_SCHEMA = "hwnas.bundle"
RESULTS_SCHEMA = "hwnas.bundle_results"
BUNDLE_VERSION = 2
#: network roles: the predictor's calibration set (sampled, pruned) and networks only for validation
ROLES = ("calibration", "pruned", "held_out")
_LEAD = ("calibration", "pruned")  # the roles a budget measures before the blocks, in the manifest's ``order``
_HERE, _RUNTIMES, _MACHINE = (Path(f).parent for f in (__file__, nas.latency.runtimes.__file__, nas.machine.__file__))
#: the standalone scripts every bundle carries, each under its own name: the script and its statistics (here),
#: the runtimes' timers and the machine's identity
SCRIPTS = {p.name: p for p in (_HERE / "measure_bundle.py", _HERE / "hwnas_stats.py", _RUNTIMES / "hwnas_trt.py",
                               _RUNTIMES / "hwnas_cuda.py", _RUNTIMES / "hwnas_litert.py", _MACHINE / "hwnas_device.py")}
#: the measuring settings a bundle records in its manifest (and a re-run of its script must match)
MEASURE_SETTINGS = ("warmup", "repeats", "min_time_s", "max_spread", "remeasure", "rounds")


class BundleError(TableError):
    """A bundle or its results that cannot be written or imported as asked."""


def _calib(in_shape: Sequence[int], target: Target, gen) -> list:
    """Seeded random input batches calibrating an int8 graph (four, as the in-process runtimes use)."""
    return [torch.randn(target.batch, *in_shape, generator=gen) for _ in range(4)]


def _graph(module, in_shape: Sequence[int], target: Target, gen, path: Path) -> None:
    """Write the graph the device runs for ``module`` to ``path``: ONNX fp32 (fp16 is the runtime's
    flag) or QDQ int8 with the target runtime's scheme (symmetric for TensorRT); an ExecuTorch
    program (XNNPACK; int8 by PT2E); an OpenVINO IR (``.xml`` + ``.bin``; int8 by NNCF); or a LiteRT
    ``.tflite`` (NHWC at its edges; int8 full-integer by ai-edge-quantizer), as the in-process
    runtimes time them."""
    x = torch.randn(target.batch, *in_shape, generator=gen)
    int8 = target.precision == "int8"
    if target.runtime == "litert":
        calib = _calib(in_shape, target, gen) if int8 else ()
        atomic_bytes(path, tflite_bytes(module.eval(), x, precision=target.precision, calib=calib))
        return
    if target.runtime == "executorch":
        calib = _calib(in_shape, target, gen) if int8 else ()
        atomic_bytes(path, pte_bytes(module.eval(), x, precision=target.precision, calib=calib))
        return
    if target.runtime == "openvino":
        calib = [c.numpy() for c in _calib(in_shape, target, gen)] if int8 else ()
        write_openvino(openvino_model(module.eval(), x, precision=target.precision, calib=calib), path)
        return
    data = export_onnx(module.eval(), x)
    if int8:
        calib = [c.numpy() for c in _calib(in_shape, target, gen)]
        data = quantize_qdq(data, calib, target=target)
    atomic_bytes(path, data)


def _refuse_overwrite(out: Path) -> None:
    res = out / "results.json"
    if res.is_file():
        raise BundleError(f"{out} holds measurements (results.json) of the bundle there; import them first "
                          f"(nas.profile ... import_bundle={res}) or move them away, then write the new bundle")


def write_bundle(keys: Iterable[BlockKey], target: Target, out_dir: str | Path, *,
                 networks: Mapping[str, Sequence[Arch]] | None = None, settings: ProfileSettings | None = None,
                 spaces: Sequence[str] = (), resolution: int | None = None, import_command: str | None = None,
                 budget_min: float | None = None, order: Sequence[Arch] | None = None,
                 cost: BundleCost | None = None, progress: bool = True) -> Path:
    """Write the blocks, the networks (by role: ``calibration``, ``pruned``, ``held_out``), the
    manifest and the measuring scripts into ``out_dir``; return the manifest path.  A folder holding
    results of a bundle is never overwritten.

    ``cost``: the estimate printed before writing (``bundle_cost``), for the bundle's README.md.

    ``order``: the calibration and pruned networks in the order a time budget measures them, before
    the blocks (``nas.profile``'s, ``calibration_order(..., pruned=)``); the manifest gives each
    its place (``order``).  Without it, a budget measures the calibration networks as listed, then
    the blocks, then the pruned and held-out networks.

    Raises:
        BundleError: the target's runtime takes no bundle, or ``out_dir`` holds measured results.
        ValueError: an unknown network role, or ``order`` not the calibration and pruned networks.
    """
    settings = settings or ProfileSettings()
    target = require_target(target)
    if target.runtime not in SUFFIX:
        raise BundleError(f"target {target.name!r} runs {target.runtime!r}; a bundle holds graphs for "
                          f"{', '.join(dict.fromkeys(SUFFIX))}: profile on the device itself (python -m "
                          f"nas.profile conf={target.name} there)")
    if target.runtime in ("executorch", "openvino", "litert"):
        require(target.runtime + ("-int8" if target.runtime in ("openvino", "litert") and target.precision == "int8"
                                  else ""))
    out = Path(out_dir)
    _refuse_overwrite(out)
    networks = {r: list(dict.fromkeys(v)) for r, v in (networks or {}).items() if v}
    if set(networks) - set(ROLES):
        raise ValueError(f"network roles must be among {ROLES}, got {sorted(set(networks) - set(ROLES))}")
    place = _places(networks, order)
    for sub in ("blocks", "networks"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    items = [("block", k) for k in dict.fromkeys(keys)] + [(r, a) for r, v in networks.items() for a in v]
    it: Iterable = items
    if progress:
        it = tqdm(items, desc="writing bundle", unit="graph")
    gen, ext = torch.Generator().manual_seed(0), SUFFIX[target.runtime]
    blocks, nets = [], []
    for role, x in it:
        if role == "block":
            fname, shape = f"blocks/{x.digest()}{ext}", list(x.in_shape)
            blocks.append({"file": fname, "label": str(x), "in": shape, "key": x.to_dict()})
        else:
            fname, shape = f"networks/{x.digest()}{ext}", [x.in_chans, x.resolution, x.resolution]
            nets.append({"file": fname, "label": x.name or x.digest()[:12], "in": shape, "role": role,
                         "arch": x.to_dict(), **({"order": place[x]} if x in place and role in _LEAD else {})})
        if not (out / fname).is_file():
            torch.manual_seed(0)
            module = build_layer(x) if role == "block" else build(x)
            _graph(module, shape, target, gen, out / fname)
    overhead = f"blocks/_overhead{ext}"
    _graph(Tiny(), (8, 8, 8), target.replace(precision="fp32"), gen, out / overhead)
    manifest = {
        "schema": BUNDLE_SCHEMA, "schema_version": BUNDLE_VERSION,
        "bundle_id": f"{target.name}-{now_iso()}-{uuid.uuid4().hex[:8]}",
        "target": target.name, "target_config": target.to_dict(),
        "device_kind": target.device.kind, "expected_device": target.device.name,
        "runtime": target.runtime, "provider": target.provider or "",
        "precision": target.precision, "batch": target.batch, "threads": target.threads,
        "settings": {k: getattr(settings, k) for k in MEASURE_SETTINGS},
        "spaces": list(spaces), "resolution": resolution,
        "overhead": overhead,
        "tool": {"name": "hwnas", "version": __version__, "torch": torch.__version__, "onnx_opset": 17, "format": ext[1:]},
        "import_command": import_command, "budget_min": budget_min,
        "blocks": blocks, "networks": nets,
    }
    for name, src in SCRIPTS.items():
        shutil.copyfile(src, out / name)
    atomic_write_json(out / "manifest.json", manifest)
    atomic_bytes(out / "README.md", bundle_readme(manifest, cost, out.name).encode())
    return out / "manifest.json"


def _places(networks: Mapping[str, Sequence[Arch]], order: Sequence[Arch] | None) -> dict[Arch, int]:
    """Each network's place in ``order`` (empty without one; a repeat keeps its first), checked to
    hold exactly the calibration and pruned networks of ``networks``."""
    if order is None:
        return {}
    place = {a: i for i, a in enumerate(dict.fromkeys(order))}
    lead = {a for r in _LEAD for a in networks.get(r, ())}
    if set(place) != lead:
        raise ValueError(f"order must list the {len(lead)} calibration and pruned networks "
                         f"(calibration_order(..., pruned=)); of its {len(place)}, {len(set(place) - lead)} are "
                         f"not among them, and {len(lead - set(place))} of them are missing")
    return place


def atomic_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _read(results: str | Path) -> tuple[Path, dict, dict]:
    """results.json and the manifest.json beside it, checked to be one bundle of this format."""
    rp = Path(results)
    if rp.is_dir():
        rp = rp / "results.json"
    mp = rp.with_name("manifest.json")
    for p in (mp, rp):
        if not p.is_file():
            what = "measure the bundle on the device first (python3 measure_bundle.py)" if p == rp else "not a bundle"
            raise BundleError(f"{p} not found: {what}")
    try:
        res, man = json.loads(rp.read_text()), json.loads(mp.read_text())
    except json.JSONDecodeError as e:
        raise BundleError(f"{rp.parent}: corrupt bundle file ({e}); measure again (results.json) or write the "
                          "bundle again (manifest.json)") from None
    if man.get("schema") != BUNDLE_SCHEMA or res.get("schema") != RESULTS_SCHEMA:
        raise BundleError(f"{rp.parent}: not a hwnas bundle (manifest.json / results.json schema)")
    if man.get("schema_version") != BUNDLE_VERSION or res.get("schema_version") != BUNDLE_VERSION:
        made = (man.get("tool") or {}).get("version", "?")
        raise BundleError(f"{rp.parent}: bundle format {man.get('schema_version')} (written by hwnas {made}); this "
                          f"hwnas {__version__} reads format {BUNDLE_VERSION}: write the bundle again with this "
                          "version (nas.profile ... bundle=<dir>) and measure it")
    if res.get("bundle_id") != man.get("bundle_id"):
        raise BundleError(f"{rp}: results belong to bundle {res.get('bundle_id')!r}, not {man.get('bundle_id')!r} "
                          "(the manifest beside them); use the results.json measured from this bundle")
    return rp, res, man


def _with(command: str | None, **overrides: Any) -> str:
    """``command`` (the user's import command) with ``key=value`` overrides set (added or replaced)."""
    words = shlex.split(command or "python -m nas.profile conf=<target> import_bundle=<bundle>/results.json")
    for k, v in overrides.items():
        k = k.replace("_", ".") if k.startswith("conf_") else k
        words = [w for w in words if not w.startswith(f"{k}=")] + ([f"{k}={v}"] if v is not None else [])
    return shell_join(words)


def _differences(res: dict, man: dict, target: Target, command: str | None) -> list[str]:
    """Each way the measured results do not fit ``target``: the field, both values and the fix."""
    rt = res.get("runtime") or {}
    out = []
    if rt.get("name") != target.runtime:
        out.append(f"runtime: measured with {rt.get('name')!r}, target {target.name!r} names {target.runtime!r} "
                   f"(import into a target whose runtime is {rt.get('name')!r}: {_with(command, conf_runtime=rt.get('name'))})")
    elif target.runtime == "onnxruntime":
        want = target.provider or "CPUExecutionProvider"
        if (rt.get("provider") or "CPUExecutionProvider") != want:
            out.append(f"provider: measured with {rt.get('provider')!r}, target {target.name!r} names {want!r} "
                       f"(measure again with `python3 measure_bundle.py --provider {want}`, or "
                       f"{_with(command, conf_provider=rt.get('provider'))})")
    if res.get("precision") != target.precision:
        out.append(f"precision: measured at {res.get('precision')!r}, target {target.name!r} is {target.precision!r} "
                   f"(the bundle was written for target {man.get('target')!r}; write one with conf={target.name} "
                   "bundle=<dir> and measure that)")
    for f in ("batch", "threads"):
        if res.get(f) != getattr(target, f):
            fix = f"`python3 measure_bundle.py --threads {target.threads}`" if f == "threads" else \
                f"a bundle written with conf={target.name}"
            out.append(f"{f}: measured with {res.get(f)!r}, target {target.name!r} has {getattr(target, f)!r} ({fix})")
    dev = res.get("device") or {}
    why = device_mismatch(target.to_dict()["device"], dev)
    if why:
        name = str(dev.get("name"))
        fix = _with(command, conf_device_name=f"'{name}'")
        out.append(f"device: {why.replace('this machine is', 'the results were measured on')} (if that is the "
                   f"device you mean, name it in the target: device.name: {name!r} in its file, or {fix})")
    return out


def _metadata(res: dict, man: dict, target: Target, measured: dict[str, str]) -> dict[str, Any]:
    """Table metadata from what the script recorded on the device: never a device, runtime or
    precision that was not measured."""
    return {
        "source": "measured", "target": target.name,
        "device": res["device"], "runtime": res["runtime"], "precision": res["precision"],
        "batch": res["batch"], "threads": res["threads"],
        "measurement": {**res["settings"], "statistic": "median", "unit": "ms", "via": "device bundle"},
        "call_overhead_ms": res.get("call_overhead_ms"),
        "created": now_iso(), "updated": now_iso(), "tool": man["tool"],
        "bundle": {"id": man["bundle_id"], **measured},
        **({"rehearsal": {**res["rehearsal"], "measured_on": res["device"].get("name")}} if res.get("rehearsal") else {}),
    }


def _check_table(table: LatencyTable, meta: dict[str, Any]) -> None:
    """An existing table takes results from the same device, runtime, precision, batch and threads only."""
    for f in ("precision", "batch", "threads"):
        if table.metadata.get(f) != meta[f]:
            raise BundleError(f"bundle measured {f}={meta[f]!r}, the table has {table.metadata.get(f)!r}: import "
                              "into a new table (out=<path>)")
    for f in ("device", "runtime"):
        got, have = meta[f].get("name"), (table.metadata.get(f) or {}).get("name")
        if got != have:
            raise BundleError(f"bundle was measured on {f} {got!r}, the table on {have!r}: import into a new table "
                              "(out=<path>)")


def _entry(e: Mapping[str, Any]) -> Entry:
    """A table entry; a percentile trtexec did not report (its summary, without --exportTimes) is the median."""
    med = float(e["median_ms"])
    p10, p90 = (med if e.get(f) is None else float(e[f]) for f in ("p10_ms", "p90_ms"))
    return Entry(med, p10, p90, int(e["n"]), int(e.get("remeasured", 0)), str(e.get("measured_at", "")),
                 tuple(e.get("rounds_ms") or ()))


def _refuse_rehearsal(rp: Path, res: dict, target: Target, command: str | None) -> None:
    """A rehearsal imports only as what it is: into a table of its own, with the user's allow_mismatch."""
    rt, dev = res.get("runtime") or {}, res.get("device") or {}
    fix = _with(command, conf_table=str(rp.parent / "rehearsal_table.json"), allow_mismatch="true")
    raise BundleError(f"{rp} is a rehearsal measured with {rt.get('name')} {rt.get('provider') or ''} on "
                      f"{dev.get('name')!r} at {res.get('precision')}, not on target {target.name!r}'s device: import "
                      f"it as what it is, into a table of its own: {fix}")


def _decode(man: dict, kind: str, d: Mapping[str, Any]):
    try:
        return BlockKey.from_dict(d) if kind == "block" else Arch.from_dict(d)
    except (KeyError, TypeError, ValueError) as e:
        made = (man.get("tool") or {}).get("version", "?")
        raise BundleError(f"bundle written by hwnas {made} holds a {kind} this hwnas {__version__} cannot read "
                          f"({e}); write the bundle again with this version") from None


def _count_kind(role: str) -> str:
    """Which count of an import a manifest item of ``role`` falls under."""
    return "blocks" if role == "block" else "held_out" if role == "held_out" else "networks"


def import_bundle(results: str | Path, target: Target, table: LatencyTable | None = None, *,
                  allow_mismatch: bool = False, command: str | None = None) -> tuple[LatencyTable, dict[str, Any]]:
    """Read ``results.json`` (or a bundle folder) into ``table`` (a new one when None) for ``target``.

    A rehearsal (``rehearsal.json``: measured elsewhere with what that machine had) imports only with
    ``allow_mismatch``, labelled as a rehearsal with the device and runtime that measured it.
    Refuses results that do not fit the target (runtime, provider, precision, batch, threads,
    device: ``BundleError`` naming each field and the command that fixes it; ``allow_mismatch``
    accepts them, recording what was measured).  A half-measured bundle imports what it has and
    says what is left.  Returns the table and a summary (counts measured / total per kind)."""
    target = require_target(target)
    rp, res, man = _read(results)
    if res.get("rehearsal") and not allow_mismatch:
        _refuse_rehearsal(rp, res, target, command)
    diffs = _differences(res, man, target, command)
    if diffs and not allow_mismatch:
        raise BundleError(f"{rp} does not fit target {target.name!r}: " + "; ".join(diffs)
                          + "; or pass allow_mismatch=true to import it as measured")
    entries = res.get("entries") or {}
    by_file = {b["file"]: ("block", b) for b in man["blocks"]} | {n["file"]: (n["role"], n) for n in man["networks"]}
    unknown = sorted(set(entries) - set(by_file))
    if unknown:
        raise BundleError(f"{rp}: entries {unknown[:3]} are not in the manifest beside it")
    count = {"blocks": [0, len(man["blocks"])], "networks": [0, sum(n["role"] != "held_out" for n in man["networks"])],
             "held_out": [0, sum(n["role"] == "held_out" for n in man["networks"])]}
    decoded = []
    for fname, e in entries.items():
        role, item = by_file[fname]
        kind = _count_kind(role)
        count[kind][0] += 1
        if kind != "held_out":
            decoded.append((role, _decode(man, "block" if role == "block" else "network",
                                          item["key"] if role == "block" else item["arch"]), _entry(e)))
    measured = {k: f"{m}/{n}" for k, (m, n) in count.items()}
    meta = _metadata(res, man, target, measured)
    if diffs:
        meta["mismatch"] = diffs
    if table is None:
        table = LatencyTable(metadata=meta)
    else:
        _check_table(table, meta)
        table.metadata.update({k: meta[k] for k in ("updated", "bundle", "call_overhead_ms") if meta[k] is not None})
    for role, x, entry in decoded:
        if role == "block":
            table.add(x, entry)
        else:
            table.networks[x] = entry
    failed = {f: x for f, x in (res.get("failed") or {}).items() if f in by_file and f not in entries}
    for f in failed:  # the device's runtime could not run them: left out, not left to measure
        count[_count_kind(by_file[f][0])][1] -= 1
    left = {k: n - m for k, (m, n) in count.items() if n > m}
    return table, {"measured": measured, "left": left, "complete": not left, "mismatch": diffs,
                   "failed": [{"file": f, "label": x.get("label"), "error": x.get("error")} for f, x in failed.items()]}


def bundle_results(results: str | Path) -> dict[str, Any]:
    """The results of a bundle (its results.json or folder), checked against the manifest beside them."""
    return _read(results)[1]


def bundle_manifest(results: str | Path) -> dict[str, Any]:
    """The manifest of the bundle ``results`` (its results.json or folder) belongs to, checked."""
    return _read(results)[2]


def bundle_networks(results: str | Path, role: str = "held_out") -> list[tuple[Arch, float]]:
    """The networks of ``role`` measured in a bundle, as (arch, median ms): the held-out networks
    ``nas.validate`` scores a bundle-built predictor on."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    _, res, man = _read(results)
    entries = res.get("entries") or {}
    return [(_decode(man, "network", n["arch"]), float(entries[n["file"]]["median_ms"]))
            for n in man["networks"] if n["role"] == role and n["file"] in entries]
