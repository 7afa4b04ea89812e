"""Device bundles: measure on devices without torch (a Jetson without a matching torch, a phone).

``write_bundle`` exports every block as an ONNX file (QDQ-quantized for int8 targets), a
``manifest.json`` and ``measure_bundle.py``, a standalone script that needs only numpy plus
onnxruntime (or TensorRT's ``trtexec``).  On the device, ``python3 measure_bundle.py`` writes
``results.json``; ``import_bundle`` turns it into table entries, with the device identity and
runtime version the script recorded *on the device*.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from nas import __version__
from nas._io import atomic_write_json
from nas.arch import BlockKey
from nas.builder import build_layer
from nas.latency.measure import ProfileSettings
from nas.latency.table import Entry, LatencyTable, TableError, now_iso
from nas.target import Target

__all__ = ["BUNDLE_SCHEMA", "import_bundle", "write_bundle"]

BUNDLE_SCHEMA = "hwnas.bundle"
_SCRIPT = Path(__file__).with_name("bundle_script.py")


def write_bundle(
    keys: Iterable[BlockKey],
    target: Target | dict[str, Any],
    out_dir: str | Path,
    *,
    settings: ProfileSettings | None = None,
    progress: bool = True,
) -> Path:
    """Write the blocks, manifest and measuring script into ``out_dir``; return the manifest path."""
    settings = settings or ProfileSettings()
    from nas.compress.ptq import quantize_qdq
    from nas.export.onnx import export_onnx

    out = Path(out_dir)
    (out / "blocks").mkdir(parents=True, exist_ok=True)
    target = Target.coerce(target)
    precision, batch = target.precision, target.batch
    keys = list(dict.fromkeys(keys))
    blocks = []
    it: Iterable[BlockKey] = keys
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(keys, desc="writing bundle", unit="block")
    g = torch.Generator().manual_seed(0)
    for key in it:
        fname = f"blocks/{key.digest()}.onnx"
        if not (out / fname).is_file():
            x = torch.randn(batch, *key.in_shape, generator=g)
            data = export_onnx(build_layer(key), x)
            if precision == "int8":
                data = quantize_qdq(data, [torch.randn(batch, *key.in_shape, generator=g).numpy() for _ in range(4)])
            (out / fname).write_bytes(data)
        blocks.append({"file": fname, "label": str(key), "in": list(key.in_shape), "key": key.to_dict()})
    overhead = "blocks/_overhead.onnx"
    from nas.latency.runtimes import _Tiny

    export_onnx(_Tiny(), torch.randn(batch, 8, 8, 8), out / overhead)
    runtime = target.runtime
    manifest = {
        "schema": BUNDLE_SCHEMA,
        "schema_version": 1,
        "bundle_id": f"{target.name}-{now_iso()}",
        "target": target.name,
        "device_kind": target.device.kind,
        "expected_device": target.device.name,
        "bundle_runtime": "trtexec" if runtime == "tensorrt" else "onnxruntime",
        "provider": target.provider or "CPUExecutionProvider",
        "precision": precision,
        "batch": batch,
        "threads": target.threads,
        "settings": {k: getattr(settings, k) for k in ("warmup", "repeats", "min_time_s", "max_spread", "remeasure")},
        "overhead": overhead,
        "tool": {"name": "hwnas", "version": __version__, "torch": torch.__version__, "onnx_opset": 17},
        "blocks": blocks,
    }
    atomic_write_json(out / "manifest.json", manifest)
    shutil.copyfile(_SCRIPT, out / "measure_bundle.py")
    return out / "manifest.json"


def import_bundle(results: str | Path, table: LatencyTable | None = None) -> LatencyTable:
    """Read ``results.json`` (and the ``manifest.json`` beside it) into a table.

    A new table takes its metadata from the results (device, runtime, precision as measured on
    the device).  An existing table must have been measured with the same device and runtime.
    """
    rp = Path(results)
    mp = rp.with_name("manifest.json")
    for p in (rp, mp):
        if not p.is_file():
            raise FileNotFoundError(f"bundle file not found: {p}")
    try:
        res, man = json.loads(rp.read_text()), json.loads(mp.read_text())
    except json.JSONDecodeError as e:
        raise TableError(f"{rp.parent}: corrupt bundle file ({e})") from None
    if man.get("schema") != BUNDLE_SCHEMA or res.get("schema") != "hwnas.bundle_results":
        raise TableError(f"{rp.parent}: not a hwnas bundle (manifest.json / results.json schema)")
    if res.get("bundle_id") != man.get("bundle_id"):
        raise TableError(f"{rp}: results belong to bundle {res.get('bundle_id')!r}, not {man.get('bundle_id')!r}")
    meta = {
        "source": "measured",
        "target": man["target"],
        "device": res["device"],
        "runtime": res["runtime"],
        "precision": res["precision"],
        "batch": res["batch"],
        "threads": res["threads"],
        "measurement": {**res["settings"], "statistic": "median", "unit": "ms", "via": "device bundle"},
        "call_overhead_ms": res.get("call_overhead_ms"),
        "created": now_iso(),
        "updated": now_iso(),
        "tool": man["tool"],
    }
    if table is None:
        table = LatencyTable(metadata=meta)
    else:
        for f in ("precision", "batch", "threads"):
            if table.metadata.get(f) != meta[f]:
                raise TableError(f"bundle {f}={meta[f]!r} differs from the table's {table.metadata.get(f)!r}")
        for f in ("device", "runtime"):
            if table.metadata[f].get("name") != meta[f].get("name"):
                raise TableError(
                    f"bundle was measured on {f} {meta[f].get('name')!r}, the table on {table.metadata[f].get('name')!r}"
                )
    by_file = {b["file"]: b for b in man["blocks"]}
    for fname, e in res["entries"].items():
        if fname not in by_file:
            raise TableError(f"{rp}: entry {fname!r} is not in the manifest")
        key = BlockKey.from_dict(by_file[fname]["key"])
        table.add(key, Entry(float(e["median_ms"]), float(e["p10_ms"]), float(e["p90_ms"]), int(e["n"]),
                             int(e.get("remeasured", 0)), str(e.get("measured_at", ""))))
    return table
