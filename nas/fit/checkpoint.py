"""Training checkpoints: written atomically by ``nas.fit.loop.fit``, read back for resuming and export.

A checkpoint is a dict (``torch.save``) with ``format`` = ``CKPT_FORMAT``, the stage, the ``Arch``,
the QAT settings (None for a float network), the finished epoch count, ``meta`` (what defines the
run: checked on resume, differences named by ``diff_messages``), the model and optimizer states,
the per-epoch history, the dataset (``dataset_record``) and the target it was made
for (``Target.to_dict``; ``checkpoint_target``).  ``nas.train.deploy.export_checkpoint`` (``python -m nas.export``) reads one and
exports it.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nas._io import atomic_write_bytes
from nas._yaml import load_yaml
from nas.arch import Arch
from nas.builder import build, state_dict_diff
from nas.compress.qat import prepare_qat
from nas.compress.quant_settings import QuantSettings
from nas.target import Target

__all__ = ["ARCH_FILES", "CKPT_FORMAT", "CKPT_VERSION", "DATA_FREE", "arch_differences", "check_finite",
           "checkpoint_data_settings", "checkpoint_target", "dataset_record", "diff_messages", "load_arch_file", "load_checkpoint",
           "load_state", "model_from_checkpoint", "read_torch_file", "resume_meta", "save_checkpoint"]

CKPT_FORMAT = "hwnas.checkpoint"
CKPT_VERSION = 1
# data settings that change no result: where the files are, how many processes read them, whether an
# unreadable one stops the loading (a skipped one is named when it loads); never compared on resume
DATA_FREE = ("root", "download", "skip_bad", "num_workers")


def dataset_record(data: Any) -> dict[str, Any]:
    """A loaded ``nas.data.Dataset`` as a checkpoint records it: its settings (the folder included),
    class names, normalisation and test split, so an export needs nothing else."""
    return {"settings": data.settings.to_dict(), "classes": list(data.classes), "mean": list(data.mean),
            "std": list(data.std), "in_chans": data.in_chans, "resolution": data.resolution,
            "streamed": data.streamed, "test_source": getattr(data, "test_source", "")}


def save_checkpoint(path: Path, ckpt: dict[str, Any]) -> None:
    buf = io.BytesIO()
    torch.save(ckpt, buf)
    atomic_write_bytes(path, buf.getvalue())


def read_torch_file(path: str | Path, *, not_found: str, unreadable: str) -> tuple[Path, Any]:
    """``(path, object)`` of a ``torch.save`` file read on the CPU with ``weights_only``.  A missing file
    raises ``FileNotFoundError(not_found)``, one torch cannot read ``ValueError(unreadable)``; both
    templates are formatted with ``p`` (the path), ``unreadable`` also with ``err`` and ``first`` (why,
    in one line: ``_unreadable_reason``)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(not_found.format(p=p))
    try:
        return p, torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:
        reason = _unreadable_reason(e)
        raise ValueError(unreadable.format(p=p, err=reason, first=reason)) from None


def _unreadable_reason(e: Exception) -> str:
    """Why ``torch.load(weights_only=True)`` refused a file, in one line: the object it would not make
    (a file holding more than tensors and plain containers is never unpickled: none of it may run code),
    else the error's type and first line."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    if isinstance(e, pickle.UnpicklingError) and "weights_only" in text:
        m = re.search(r"Unsupported global: GLOBAL (\S+)", text)
        what = f"a {m.group(1)} object" if m else "objects"
        return (f"it holds {what} beyond tensors and plain containers, which hwnas does not unpickle "
                f"(checkpoints load with weights_only=True)")
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {first}".rstrip(": ")


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """A checkpoint written by ``fit`` (or a bare state dict, returned as ``{"model": ...}``)."""
    p, obj = read_torch_file(path, not_found="checkpoint not found: {p}",
                             unreadable="{p}: not a readable torch checkpoint ({err})")
    if isinstance(obj, dict) and obj.get("format") == CKPT_FORMAT:
        return obj
    if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return {"model": obj}
    raise ValueError(f"{p}: neither an hwnas checkpoint nor a state dict")


def checkpoint_target(ckpt: Mapping[str, Any], where: str) -> Target | None:
    """The target a checkpoint was made for (``nas.train`` records it), or None when it records none.

    Raises:
        ValueError: the record is not a target's fields (named with ``where``).
    """
    rec = ckpt.get("target")
    if not isinstance(rec, Mapping):
        return None
    try:
        return Target.coerce(dict(rec))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: the target it records cannot be read ({e}); give conf=<target>") from None


def resume_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint's ``meta`` as a resume compares it: its ``data`` without the ``DATA_FREE`` settings."""
    out = dict(meta)
    if isinstance(out.get("data"), Mapping):
        out["data"] = {k: v for k, v in out["data"].items() if k not in DATA_FREE}
    return out


def diff_messages(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    keys = sorted(set(a) | set(b))
    return [f"{k}: {a.get(k, '<absent>')!r} in the checkpoint, {b.get(k, '<absent>')!r} now"
            for k in keys if json.dumps(a.get(k), sort_keys=True) != json.dumps(b.get(k), sort_keys=True)]


def _leaf_diffs(a: Any, b: Any, path: str) -> list[tuple[str, Any, Any]]:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out = []
        for k in [*a, *(k for k in b if k not in a)]:
            out += _leaf_diffs(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}" if path else str(k))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _leaf_diffs(x, y, f"{path}[{i}]")]
    if isinstance(a, list) and isinstance(b, list):
        return [(f"len({path})", len(a), len(b))]
    return [] if a == b else [(path, a, b)]


def arch_differences(ckpt_arch: Mapping[str, Any], arch: Mapping[str, Any], *, now: str = "in the run",
                     limit: int = 3) -> str:
    """Where two Arch dicts differ, at most ``limit`` fields: ``blocks[3].out_ch: 48 in the checkpoint,
    56 in the run; ...`` (the Arch name is left out)."""
    diffs = [d for d in _leaf_diffs(dict(ckpt_arch), dict(arch), "") if d[0] != "name"]
    parts = [f"{k}: {a} in the checkpoint, {b} {now}" for k, a, b in diffs[:limit]]
    more = f"; and {len(diffs) - limit} more" if len(diffs) > limit else ""
    return "; ".join(parts) + more


def load_state(model: nn.Module, state: Mapping[str, torch.Tensor], where: str) -> None:
    """``load_state_dict`` with an error that names what does not match."""
    missing, extra, shapes = state_dict_diff(model.state_dict(), state)
    if missing or extra or shapes:
        parts = []
        if shapes:
            parts.append(f"{len(shapes)} tensor(s) of another shape (checkpoint vs Arch): {'; '.join(shapes[:4])}")
        if missing:
            parts.append(f"{len(missing)} missing: {', '.join(missing[:4])}")
        if extra:
            parts.append(f"{len(extra)} unexpected: {', '.join(extra[:4])}")
        raise ValueError(f"{where} does not match the Arch: " + "; ".join(parts))
    model.load_state_dict(state, strict=True)


def check_finite(state: Mapping[str, Any], where: str) -> None:
    """Refuse (``ValueError``) weights holding NaN or infinite values: a diverged training, nothing to deploy."""
    floats = {k: v for k, v in state.items() if isinstance(v, torch.Tensor) and v.is_floating_point()}
    bad = [k for k, v in floats.items() if not bool(torch.isfinite(v).all())]
    if bad:
        raise ValueError(f"{where}: {len(bad)} of its {len(floats)} weight tensors hold NaN or infinite values "
                         f"(first: {bad[0]}): the training diverged, and a network with such weights gives no "
                         f"answer worth deploying; train it again (a lower train.lr), or use an earlier checkpoint")


def model_from_checkpoint(ckpt: Mapping[str, Any], arch: Arch, *, where: str = "checkpoint") -> nn.Module:
    """The float ``ArchNet`` or ``QATNet`` a checkpoint holds, checked against ``arch``; weights that are
    not all finite are refused (``check_finite``)."""
    if ckpt.get("arch") is not None and Arch.from_dict(ckpt["arch"]) != arch:
        diff = arch_differences(ckpt["arch"], arch.to_dict(), now="in the Arch given")
        raise ValueError(f"{where} was trained for another Arch ({diff}); give the Arch it was trained with")
    check_finite(ckpt["model"], where)
    model: nn.Module = build(arch)
    if ckpt.get("qat"):
        model = prepare_qat(model, QuantSettings(**ckpt["qat"]))
    load_state(model, ckpt["model"], where)
    return model.eval()


ARCH_FILES = "arch.json, pruned_arch.json, prune_plan.json, results.json or export/<variant>.json"


def load_arch_file(path: str | Path) -> Arch:
    """The ``Arch`` in a file ``nas.train`` (or anyone) wrote: an Arch as JSON or YAML, or a record
    holding one under ``arch``: ``prune_plan.json`` (the pruned Arch), ``results.json`` (the
    unpruned one), an export record ``export/<variant>.json`` (that file's network).  So every
    checkpoint ``nas.train`` writes exports with a file beside it, without editing."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"arch={path}: no such file; give one of {ARCH_FILES} from the model's folder, "
                                f"or leave arch out to use the Arch the checkpoint records")
    if p.suffix.lower() in (".yaml", ".yml"):
        doc = load_yaml(p, what=f"arch={path}")  # bounded before anything expands it
    else:
        try:
            doc = json.loads(p.read_text())
        except Exception as e:
            raise ValueError(f"arch={path}: not valid JSON ({e})") from None
    if isinstance(doc, Mapping) and isinstance(doc.get("arch"), Mapping) and "blocks" not in doc:
        doc = doc["arch"]
    if not isinstance(doc, Mapping) or "blocks" not in doc:
        keys = sorted(doc)[:8] if isinstance(doc, Mapping) else type(doc).__name__
        raise ValueError(f"arch={path}: neither an Arch nor a record holding one under 'arch' (found {keys}); "
                         f"give one of {ARCH_FILES}")
    try:
        return Arch.from_dict(dict(doc))
    except ValueError as e:
        raise ValueError(f"arch={path}: {e}") from None


def checkpoint_data_settings(ckpt: Mapping[str, Any], arch: Arch, *, data: Mapping[str, Any] | None = None,
                             data_root: str | None = None) -> dict[str, Any] | None:
    """The data settings an export verifies and calibrates with: the checkpoint's own (its dataset
    record: folder, channels, workers, split ...), or a ``data`` group given instead (its folder
    taken from the checkpoint when the group names none), with ``data_root`` over it; the input
    channels and resolution are always the Arch's.  None when neither says anything."""
    rec = (ckpt.get("dataset") or {}).get("settings") or (ckpt.get("meta") or {}).get("data")
    d = dict(data) if data else dict(rec or {})
    if not d:
        return None
    if data and rec and d.get("name") == rec.get("name") and d.get("root") in (None, "", "???"):
        d["root"] = rec.get("root")
    if data_root:
        d["root"] = data_root
    d["resolution"] = arch.resolution
    if d.get("channels") is not None or d.get("name") == "imagefolder":
        d["channels"] = arch.in_chans
    if d.get("name") == "imagefolder" and d.get("root") in (None, "", "???"):
        raise ValueError("the checkpoint records no image folder (it was written before checkpoints kept it): "
                         "give data_root=<the folder it was trained on>")
    return d
