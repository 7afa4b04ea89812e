"""Train the Pareto front of a search: full training, latency-aware pruning, QAT, ONNX export, report.

``train_front(settings)`` (behind ``python -m nas.train``) reads a search run dir
(``pareto.json``; the dataset settings from the study record or Hydra's ``.hydra/config.yaml``),
and for each selected architecture, in ``<out>/<id>/`` (``id`` = pareto index + Arch digest):

1. **fp32**: trains it from scratch on the search's dataset (all training images unless
   ``train_samples``), at the dataset's resolution; ``fp32.ckpt`` after every epoch.
2. **prune** (``prune.enabled``): channel importance, a latency-aware plan toward
   ``prune.target_ms`` (or ``prune.ratio`` x the unpruned prediction) scored by the target's
   latency model (``prune_plan.json``), the kept weights copied into the pruned ``Arch``, then
   fine-tuning (``pruned.ckpt``).
3. **qat** (``qat.enabled``): BN folded, activation ranges calibrated on training batches,
   fake-quant fine-tuning (``qat.ckpt``).
4. **export**: ONNX models in ``export/`` — ``fp32``, ``pruned``, ``ptq_int8`` (onnxruntime static
   QDQ quantization of the final float model, calibrated on training images: the baseline) and
   ``qat_int8`` — each scored by onnxruntime on the test split (the exact deployed bytes), its
   latency predicted at its input shape and, when the target is this machine, measured.

Every checkpoint is written atomically at the end of each epoch; re-running the same command
resumes each stage at its last finished epoch and skips finished stages (Ctrl-C loses at most
the running epoch).  Resuming with settings that change a stage's result is an error naming the
differences.  The report (``report.json``, ``report.md``) goes to ``<out>/``.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from nas._io import atomic_write_bytes, atomic_write_json, atomic_write_text
from nas.arch import Arch
from nas.build import build
from nas.compress.prune import (
    CRITERIA,
    LossProbe,
    PrunePlan,
    apply_plan,
    channel_importance,
    channel_units,
    plan_pruning,
)
from nas.compress.qat import QATNet, QuantSettings, calibrate, export_qdq, prepare_qat, set_observers
from nas.cost import arch_cost
from nas.data import Dataset, DataSettings, adapt_arch, load_data
from nas.search.evaluate import TrainingDiverged

__all__ = [
    "CKPT_FORMAT",
    "PRECISIONS",
    "ExportSettings",
    "FitSettings",
    "PipelineSettings",
    "SearchRun",
    "accuracy",
    "fit",
    "load_checkpoint",
    "load_search_run",
    "load_target",
    "measure_onnx",
    "model_from_checkpoint",
    "onnx_accuracy",
    "precision_targets",
    "runs_here",
    "select_entries",
    "train_front",
    "write_report",
]

log = logging.getLogger(__name__)

CKPT_FORMAT = "hwnas.checkpoint"
CKPT_VERSION = 1
PRECISIONS = ("fp32", "int8")
REPORT_SCHEMA = "hwnas.train_report"


# --------------------------------------------------------------------------------------------
# settings


def _pos(name: str, v: Any, *, integer: bool = False, zero: bool = False) -> None:
    ok = not isinstance(v, bool) and isinstance(v, int if integer else (int, float))
    if not ok or (v < 0 if zero else v <= 0) or (not integer and not math.isfinite(v)):
        kind = "integer" if integer else "number"
        raise ValueError(f"{name} must be a {'non-negative' if zero else 'positive'} {kind}, got {v!r}")


@dataclass(frozen=True)
class FitSettings:
    """One training run (full training, pruning fine-tune or QAT): optimizer and schedule."""

    epochs: int = 30
    batch_size: int = 128
    optimizer: str = "adamw"
    lr: float = 0.005
    weight_decay: float = 0.05
    momentum: float = 0.9
    label_smoothing: float = 0.1
    warmup_epochs: float = 1.0
    grad_clip: float | None = 5.0
    eval_batch_size: int = 512
    bn_recalibration_batches: int = 8  # BN statistics re-estimated with the final weights of each epoch

    def __post_init__(self) -> None:
        _pos("train.epochs", self.epochs, integer=True, zero=True)
        _pos("train.bn_recalibration_batches", self.bn_recalibration_batches, integer=True, zero=True)
        _pos("train.batch_size", self.batch_size, integer=True)
        _pos("train.eval_batch_size", self.eval_batch_size, integer=True)
        _pos("train.lr", self.lr)
        _pos("train.weight_decay", self.weight_decay, zero=True)
        _pos("train.momentum", self.momentum, zero=True)
        _pos("train.warmup_epochs", self.warmup_epochs, zero=True)
        if self.grad_clip is not None:
            _pos("train.grad_clip", self.grad_clip)
        if self.optimizer not in ("adamw", "sgd"):
            raise ValueError(f"train.optimizer must be adamw or sgd, got {self.optimizer!r}")
        if not 0 <= self.label_smoothing < 1:
            raise ValueError(f"train.label_smoothing must be in [0, 1), got {self.label_smoothing!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ExportSettings:
    calib_samples: int = 256
    eval_samples: int | None = None
    measure: bool = True
    rounds: int = 3
    warmup: int = 10
    repeats: int = 50
    min_time_s: float = 0.1

    def __post_init__(self) -> None:
        _pos("export.calib_samples", self.calib_samples, integer=True)
        if self.eval_samples is not None:
            _pos("export.eval_samples", self.eval_samples, integer=True)
        for k in ("rounds", "repeats"):
            _pos(f"export.{k}", getattr(self, k), integer=True)
        _pos("export.warmup", self.warmup, integer=True, zero=True)
        _pos("export.min_time_s", self.min_time_s, zero=True)


@dataclass(frozen=True)
class PipelineSettings:
    """Everything ``train_front`` needs (built from the Hydra config by ``nas.train``)."""

    run: str
    target: dict[str, Any]
    out: str | None = None
    select: Any = "all"
    max_ms: float | None = None
    data_root: str | None = None
    train_samples: int | None = None
    seed: int = 0
    allow_mismatch: bool = False
    train: FitSettings = field(default_factory=FitSettings)
    prune: dict[str, Any] = field(default_factory=dict)
    qat: dict[str, Any] = field(default_factory=dict)
    export: ExportSettings = field(default_factory=ExportSettings)
    targets: dict[str, str | None] = field(default_factory=dict)

    PRUNE_DEFAULTS: ClassVar[dict[str, Any]] = {
        "enabled": True, "target_ms": None, "ratio": 0.7, "criterion": "loss", "multiple": None, "min_keep": 0.25,
        "lookahead": 4, "measure_steps": 3, "taylor_batches": 16, "loss_samples": 512, "structural": True,
        "epochs": 10, "lr": 0.002, "distill": 0.0, "temperature": 4.0}
    QAT_DEFAULTS: ClassVar[dict[str, Any]] = {
        "enabled": True, "epochs": 4, "lr": 0.0005, "freeze_epochs": 1, "reduce_range": True, "ema": 0.01,
        "calib_batches": 16, "distill": 0.0, "temperature": 4.0}

    def __post_init__(self) -> None:
        for name, given, defaults in (("prune", self.prune, self.PRUNE_DEFAULTS), ("qat", self.qat, self.QAT_DEFAULTS)):
            unknown = sorted(set(given) - set(defaults))
            if unknown:
                raise ValueError(f"{name}: unknown setting(s) {unknown}; valid settings: {sorted(defaults)}")
        p = {**self.PRUNE_DEFAULTS, **self.prune}
        q = {**self.QAT_DEFAULTS, **self.qat}
        if p["criterion"] not in CRITERIA:
            raise ValueError(f"prune.criterion must be one of {', '.join(CRITERIA)}, got {p['criterion']!r}")
        if p["target_ms"] is not None:
            _pos("prune.target_ms", p["target_ms"])
        if not 0 < p["ratio"] <= 1:
            raise ValueError(f"prune.ratio must be in (0, 1], got {p['ratio']!r}")
        if p["multiple"] is not None:
            _pos("prune.multiple", p["multiple"], integer=True)
        _pos("prune.epochs", p["epochs"], integer=True, zero=True)
        _pos("prune.lr", p["lr"])
        _pos("prune.taylor_batches", p["taylor_batches"], integer=True)
        _pos("prune.loss_samples", p["loss_samples"], integer=True)
        if not isinstance(p["structural"], bool):
            raise ValueError(f"prune.structural must be true or false, got {p['structural']!r}")
        _pos("prune.lookahead", p["lookahead"], integer=True)
        _pos("prune.measure_steps", p["measure_steps"], integer=True, zero=True)
        _pos("qat.epochs", q["epochs"], integer=True, zero=True)
        _pos("qat.lr", q["lr"])
        _pos("qat.freeze_epochs", q["freeze_epochs"], integer=True, zero=True)
        _pos("qat.calib_batches", q["calib_batches"], integer=True)
        QuantSettings(q["reduce_range"], q["ema"])
        for name, d in (("prune", p), ("qat", q)):
            if isinstance(d["distill"], bool) or not isinstance(d["distill"], (int, float)) or not 0 <= d["distill"] <= 1:
                raise ValueError(f"{name}.distill must be a weight in [0, 1] (0: no distillation), got {d['distill']!r}")
            _pos(f"{name}.temperature", d["temperature"])
        object.__setattr__(self, "prune", p)
        object.__setattr__(self, "qat", q)
        if self.max_ms is not None:
            _pos("max_ms", self.max_ms)
        if self.train_samples is not None:
            _pos("train_samples", self.train_samples, integer=True)


# --------------------------------------------------------------------------------------------
# the search run


@dataclass(frozen=True)
class SearchRun:
    path: Path
    entries: tuple[dict[str, Any], ...]  # pareto.json's front, in its order (by latency)
    metric: str
    data: dict[str, Any]  # DataSettings fields
    search_space: str | None
    record: dict[str, Any]


def load_search_run(run: str | Path) -> SearchRun:
    """Read a search run dir; a clear error if it holds no search result."""
    p = Path(run).expanduser()
    if not p.is_dir():
        raise FileNotFoundError(f"run={run}: no such folder; give the run dir of `python -m nas.search` "
                                f"(it holds pareto.json)")
    pj = p / "pareto.json"
    if not pj.is_file():
        raise FileNotFoundError(f"run={run}: no pareto.json here, so not a finished search run dir; run "
                                f"`python -m nas.search ...` first (it writes pareto.json into its run dir)")
    try:
        doc = json.loads(pj.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{pj}: not valid JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != "hwnas.pareto" or not isinstance(doc.get("pareto"), list):
        raise ValueError(f"{pj}: not an hwnas search result (expected schema 'hwnas.pareto' with a 'pareto' list)")
    entries = tuple(doc["pareto"])
    if not entries:
        raise ValueError(f"{pj}: the Pareto front is empty (no feasible evaluated trial); nothing to train")
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or "arch" not in e:
            raise ValueError(f"{pj}: pareto[{i}] has no 'arch'")
    record = doc.get("search") or {}
    data = dict(record.get("data") or {})
    space = (record.get("search_space") or {}).get("name")
    hydra_cfg = p / ".hydra" / "config.yaml"
    if hydra_cfg.is_file():  # the full data settings (root included) and the space as the user named it
        from omegaconf import OmegaConf

        cfg = OmegaConf.to_container(OmegaConf.load(hydra_cfg), resolve=False)
        if isinstance(cfg, dict):
            if isinstance(cfg.get("data"), dict):
                data = {**cfg["data"], **data}
            space = cfg.get("search_space") or space
    if not data.get("name"):
        raise ValueError(f"{pj}: the search record names no dataset ('search.data.name')")
    return SearchRun(p, entries, str(doc.get("metric", "score")), data, space, record)


def select_entries(run: SearchRun, select: Any = "all", max_ms: float | None = None) -> list[int]:
    """Indices into the front: ``all``, an index, or a list of indices; then ``latency_ms <= max_ms``."""
    n = len(run.entries)
    if select is None or select == "all":
        idx = list(range(n))
    else:
        items = list(select) if isinstance(select, (list, tuple)) else [select]
        idx = []
        for s in items:
            if isinstance(s, bool) or not isinstance(s, int):
                raise ValueError(f"select must be 'all', an index or a list of indices into the {n} Pareto "
                                 f"architectures, got {select!r}")
            if not -n <= s < n:
                raise ValueError(f"select: index {s} is out of range; {run.path / 'pareto.json'} has {n} "
                                 f"architectures (0..{n - 1})")
            idx.append(s % n)
        idx = list(dict.fromkeys(idx))
    if max_ms is not None:
        idx = [i for i in idx if float(run.entries[i].get("latency_ms") or math.inf) <= max_ms]
        if not idx:
            fastest = min(float(e.get("latency_ms") or math.inf) for e in run.entries)
            raise ValueError(f"max_ms={max_ms}: no selected architecture is predicted that fast (the fastest "
                             f"is {fastest:.4g} ms)")
    return idx


def model_id(index: int, arch: Arch) -> str:
    return f"{index:02d}_{arch.digest()[:8]}"


# --------------------------------------------------------------------------------------------
# targets


def load_target(name: str) -> dict[str, Any]:
    """A target config (conf/conf/<name>.yaml) checked against ``TargetConfig``, as a dict."""
    from omegaconf import OmegaConf

    from nas.config import CONF_DIR, TargetConfig

    path = CONF_DIR / "target" / f"{name}.yaml"
    if not path.is_file():
        have = ", ".join(sorted(p.stem for p in (CONF_DIR / "target").glob("*.yaml")))
        raise ValueError(f"unknown target {name!r}: no {path}; targets: {have}")
    raw = OmegaConf.load(path)
    raw.pop("defaults", None)
    cfg = OmegaConf.merge(OmegaConf.structured(TargetConfig), raw)
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def precision_targets(target: dict[str, Any], names: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """The target predicting each exported precision (see ``PrecisionTargets``); None if there is none."""
    names = dict(names or {})
    out: dict[str, Any] = {}
    base = str(target.get("name", ""))
    for prec in PRECISIONS:
        name = names.get(prec)
        if name:
            t = load_target(name)
            if t.get("precision") != prec:
                raise ValueError(f"targets.{prec}={name!r} is a {t.get('precision')} target; name a {prec} one")
            out[prec] = t
            continue
        if target.get("precision") == prec:
            out[prec] = target
            continue
        sib = f"{base}_int8" if prec == "int8" else base.removesuffix("_int8")
        try:
            t = load_target(sib)
        except ValueError:
            out[prec] = None
            continue
        out[prec] = t if t.get("precision") == prec else None
    return out


def runs_here(target: dict[str, Any]) -> bool:
    """Whether ``target`` is this machine's CPU with onnxruntime (so its latency can be measured here)."""
    from nas.latency.runtimes import device_identity, device_mismatch

    dev = target.get("device") or {}
    return (target.get("runtime") == "onnxruntime" and target.get("provider") == "CPUExecutionProvider"
            and dev.get("kind") == "cpu" and device_mismatch(dev, device_identity("cpu")) is None)


# --------------------------------------------------------------------------------------------
# training


def _lr_factor(step: int, total: int, warm: int) -> float:
    if step < warm:
        return (step + 1) / (warm + 1)
    return 0.5 * (1.0 + math.cos(math.pi * (step - warm) / max(1, total - warm)))


def _optimizer(model: nn.Module, s: FitSettings, lr: float) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    groups = [{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if s.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=s.momentum, nesterov=s.momentum > 0)
    return torch.optim.AdamW(groups, lr=lr)


def _split(data: Dataset) -> str:
    return "test" if data.test is not None else "val"


@torch.no_grad()
def accuracy(model: nn.Module, data: Dataset, split: str = "val", *, batch_size: int = 512,
             limit: int | None = None) -> float:
    """Top-1 accuracy (0..1) of a torch model on ``split``."""
    was = model.training
    model.eval()
    correct = n = 0
    for x, y in data.batches(split, batch_size=batch_size):
        if limit is not None and n >= limit:
            break
        if limit is not None:
            x, y = x[: limit - n], y[: limit - n]
        correct += int((model(x).argmax(1) == y).sum())
        n += len(y)
    model.train(was)
    return correct / max(n, 1)


def _save_ckpt(path: Path, ckpt: dict[str, Any]) -> None:
    buf = io.BytesIO()
    torch.save(ckpt, buf)
    atomic_write_bytes(path, buf.getvalue())


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """A checkpoint written by ``fit`` (or a bare state dict, returned as ``{"model": ...}``)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"checkpoint not found: {p}")
    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ValueError(f"{p}: not a readable torch checkpoint ({type(e).__name__}: {e})") from None
    if isinstance(obj, dict) and obj.get("format") == CKPT_FORMAT:
        return obj
    if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return {"model": obj}
    raise ValueError(f"{p}: neither an hwnas checkpoint nor a state dict")


def _diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    keys = sorted(set(a) | set(b))
    return [f"{k}: {a.get(k, '<absent>')!r} in the checkpoint, {b.get(k, '<absent>')!r} now"
            for k in keys if json.dumps(a.get(k), sort_keys=True) != json.dumps(b.get(k), sort_keys=True)]


def _load_state(model: nn.Module, state: Mapping[str, torch.Tensor], where: str) -> None:
    """``load_state_dict`` with an error that names what does not match."""
    from nas.build import state_dict_diff

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


def fit(
    model: nn.Module,
    data: Dataset,
    *,
    settings: FitSettings,
    epochs: int,
    lr: float,
    ckpt: str | Path,
    seed: int,
    meta: Mapping[str, Any],
    on_epoch_start: Callable[[nn.Module, int], None] | None = None,
    stage: str = "train",
    teacher: nn.Module | None = None,
    distill: float = 0.0,
    temperature: float = 4.0,
) -> list[dict[str, float]]:
    """Train ``model`` in place for ``epochs``, checkpointing after every epoch; resume from ``ckpt``.

    ``meta``: what defines this run (checked on resume).  Batches are shuffled by a generator
    seeded per epoch, so a resumed run sees exactly the batches an uninterrupted one would.
    With a ``teacher`` and ``distill`` > 0, the loss is knowledge distillation (Hinton et al.
    2015): ``(1 - distill) * cross-entropy + distill * T^2 * KL(teacher || student)`` at
    temperature ``T``, the teacher (eval mode, frozen) seeing the same augmented batch.
    Returns the per-epoch history (train loss, val accuracy, seconds).
    """
    path = Path(ckpt)
    arch = model.arch
    fit_s = {k: v for k, v in settings.to_dict().items() if k != "epochs"}  # epochs and lr are per stage
    if not 0.0 <= distill <= 1.0:
        raise ValueError(f"distill must be in [0, 1], got {distill}")
    if distill and teacher is None:
        raise ValueError("distill > 0 needs a teacher network")
    kd = {"distill": distill, "temperature": temperature} if distill else {}
    meta = json.loads(json.dumps({**meta, "epochs": epochs, "lr": lr, "seed": seed, "fit": fit_s, **kd}))
    start, history = 0, []
    opt = _optimizer(model, settings, lr)
    if path.is_file():
        c = load_checkpoint(path)
        if c.get("arch") != arch.to_dict():
            raise ValueError(f"{path}: the checkpoint is for another Arch; use another out dir or remove it")
        d = _diff(c.get("meta", {}), meta)
        if d:
            raise ValueError(f"{path}: resuming with other settings than the checkpoint's ({'; '.join(d)}); "
                             f"use the same settings, another out dir, or remove the checkpoint to start over")
        _load_state(model, c["model"], str(path))
        opt.load_state_dict(c["opt"])
        start, history = int(c["epoch"]), list(c.get("history", []))
        if start >= epochs:
            model.eval()
            return history
        log.info("%s: resuming at epoch %d/%d from %s", stage, start + 1, epochs, path)
    if epochs == 0:
        model.eval()
        return history
    n = len(data.train)
    bs = min(settings.batch_size, n)
    steps_per_epoch = max(1, n // bs)
    total = steps_per_epoch * epochs
    warm = min(total - 1, int(round(settings.warmup_epochs * steps_per_epoch)))
    loss_fn = nn.CrossEntropyLoss(label_smoothing=settings.label_smoothing)
    if teacher is not None:
        teacher.eval()
    for epoch in range(start, epochs):
        t0 = time.perf_counter()
        if on_epoch_start is not None:
            on_epoch_start(model, epoch)
        model.train()
        gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        step = epoch * steps_per_epoch
        running = count = 0
        for x, y in data.batches("train", batch_size=bs, shuffle=True, generator=gen, augment=True, drop_last=True):
            f = _lr_factor(step, total, warm)
            for g in opt.param_groups:
                g["lr"] = lr * f
            out = model(x)
            loss = loss_fn(out, y)
            if distill:
                with torch.no_grad():
                    soft = nn.functional.log_softmax(teacher(x) / temperature, dim=1)
                kl = nn.functional.kl_div(nn.functional.log_softmax(out / temperature, dim=1), soft,
                                          reduction="batchmean", log_target=True)
                loss = (1.0 - distill) * loss + distill * temperature**2 * kl
            if not torch.isfinite(loss):
                raise TrainingDiverged(f"{stage}: training diverged (loss {loss.item()}) at epoch {epoch + 1}; "
                                       f"lower the learning rate")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if settings.grad_clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
            opt.step()
            step += 1
            running += float(loss.detach()) * len(y)
            count += len(y)
        if not isinstance(model, QATNet):  # (QAT: BN is folded, and a pass in train mode would move the ranges)
            _recalibrate_bn(model, data, settings, torch.Generator().manual_seed(seed * 1_000_003 + epoch + 7))
        val = accuracy(model, data, "val", batch_size=settings.eval_batch_size)
        rec = {"epoch": epoch + 1, "train_loss": running / max(count, 1), "val_accuracy": val,
               "seconds": time.perf_counter() - t0}
        history.append(rec)
        _save_ckpt(path, {"format": CKPT_FORMAT, "version": CKPT_VERSION, "stage": stage, "arch": arch.to_dict(),
                          "qat": dataclasses.asdict(model.settings) if isinstance(model, QATNet) else None,
                          "epoch": epoch + 1, "meta": meta, "model": model.state_dict(), "opt": opt.state_dict(),
                          "history": history})
        log.info("%s epoch %d/%d: loss %.4f, val accuracy %.4f (%.1f s)", stage, epoch + 1, epochs,
                 rec["train_loss"], val, rec["seconds"])
    model.eval()
    return history


def _recalibrate_bn(model: nn.Module, data: Dataset, s: FitSettings, gen: torch.Generator) -> None:
    """BatchNorm statistics re-estimated with the current weights (``nas.search.evaluate``'s routine)."""
    from nas.search.evaluate import recalibrate_batchnorm

    recalibrate_batchnorm(model, data, batches=s.bn_recalibration_batches, batch_size=min(s.batch_size, len(data.train)),
                          generator=gen, device="cpu")
    model.eval()


def model_from_checkpoint(ckpt: Mapping[str, Any], arch: Arch, *, where: str = "checkpoint") -> nn.Module:
    """The float ``ArchNet`` or ``QATNet`` a checkpoint holds, checked against ``arch``."""
    if ckpt.get("arch") is not None and Arch.from_dict(ckpt["arch"]) != arch:
        raise ValueError(f"{where} was trained for another Arch ({Arch.from_dict(ckpt['arch'])}), not {arch}")
    model: nn.Module = build(arch)
    if ckpt.get("qat"):
        model = prepare_qat(model, QuantSettings(**ckpt["qat"]))
    _load_state(model, ckpt["model"], where)
    return model.eval()


# --------------------------------------------------------------------------------------------
# ONNX: scoring, measuring


def _batch1(data: Dataset, split: str, limit: int | None) -> Iterator[tuple[np.ndarray, int]]:
    n = 0
    for x, y in data.batches(split, batch_size=256):
        for i in range(len(y)):
            if limit is not None and n >= limit:
                return
            yield x[i: i + 1].numpy(), int(y[i])
            n += 1


def onnx_accuracy(model: bytes, data: Dataset, split: str, *, limit: int | None = None) -> float:
    """Top-1 accuracy of an ONNX model (batch 1, as deployed) with onnxruntime on the CPU."""
    from nas.export.onnx import ort_session

    sess = ort_session(model, threads=1)
    name = sess.get_inputs()[0].name
    correct = n = 0
    for x, y in _batch1(data, split, limit):
        correct += int(np.argmax(sess.run(None, {name: x})[0]) == y)
        n += 1
    return correct / max(n, 1)


def calibration_inputs(data: Dataset, n: int, *, seed: int) -> list[np.ndarray]:
    """``n`` training images (seeded choice), batch 1, normalised as in training."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(data.train), generator=g)[: min(n, len(data.train))]
    x = data.normalize(data.train.images[idx])
    return [x[i: i + 1].numpy() for i in range(len(x))]


def measure_onnx(model: bytes, in_shape: tuple[int, int, int], target: dict[str, Any],
                 settings: ExportSettings) -> dict[str, float]:
    """Median latency (ms) over ``settings.rounds`` rounds, each in a fresh session."""
    from nas.latency.runtimes import get_runtime, measure, summarize_times

    rt = get_runtime({**target, "precision": "fp32"})  # the bytes decide the precision
    meds, allp10, allp90 = [], [], []
    for _ in range(settings.rounds):
        run = rt.runner_for_onnx(model, in_shape)
        s = summarize_times(measure(run, warmup=settings.warmup, repeats=settings.repeats,
                                    min_time_s=settings.min_time_s))
        meds.append(s["median_ms"])
        allp10.append(s["p10_ms"])
        allp90.append(s["p90_ms"])
    return {"median_ms": float(np.median(meds)), "p10_ms": float(np.median(allp10)),
            "p90_ms": float(np.median(allp90)), "rounds": settings.rounds}


# --------------------------------------------------------------------------------------------
# the pipeline


@dataclass
class _Context:
    s: PipelineSettings
    data: Dataset
    run: SearchRun
    multiple: int
    se_ratio: float | None
    targets: dict[str, Any]
    models: dict[str, Any]  # precision -> LatencyModel or None
    guide: Any  # the latency model guiding pruning (the conf target's)
    measure_here: dict[str, bool]


def _data_settings(run: SearchRun, s: PipelineSettings) -> DataSettings:
    d = {k: v for k, v in run.data.items() if k in DataSettings.__dataclass_fields__}
    d["train_samples"] = s.train_samples  # full training: all training images unless capped
    if s.data_root:
        d["root"] = s.data_root
    return DataSettings.from_dict(d)


def _space_params(run: SearchRun, multiple: int | None) -> tuple[int, float | None]:
    from nas.space import SpaceError, load_space

    if run.search_space:
        try:
            sp = load_space(run.search_space)
            return multiple or sp.channel_multiple, sp.se_ratio
        except SpaceError as e:
            if multiple is None:
                raise ValueError(f"cannot load the search's space {run.search_space!r} for its channel_multiple "
                                 f"({e}); set prune.multiple") from None
    if multiple is None:
        raise ValueError("the search run names no search space; set prune.multiple (8 or 16)")
    return multiple, None


def _predict(ctx: _Context, prec: str, arch: Arch) -> dict[str, Any] | None:
    m = ctx.models.get(prec)
    if m is None:
        return None
    p = m.explain(arch)
    return {**p.to_dict(), "label": p.label(), "target": ctx.targets[prec]["name"]}


def _export_variant(ctx: _Context, mdir: Path, name: str, prec: str, arch: Arch, make: Callable[[], bytes],
                    torch_acc: float | None) -> dict[str, Any]:
    path = mdir / "export" / f"{name}.onnx"
    cache = mdir / "export" / f"{name}.json"
    if path.is_file() and cache.is_file():
        return json.loads(cache.read_text())
    data = make()
    atomic_write_bytes(path, data)
    in_shape = (arch.in_chans, arch.resolution, arch.resolution)
    split = _split(ctx.data)
    rec: dict[str, Any] = {
        "variant": name, "precision": prec, "arch": arch.to_dict(), "onnx": str(path), "file_bytes": len(data),
        "params": arch_cost(arch).params, "accuracy": onnx_accuracy(data, ctx.data, split,
                                                                     limit=ctx.s.export.eval_samples),
        "accuracy_split": split, "torch_accuracy": torch_acc, "predicted": _predict(ctx, prec, arch),
        "measured": None,
    }
    t = ctx.targets.get(prec)
    if ctx.s.export.measure and t is not None and ctx.measure_here.get(prec):
        rec["measured"] = measure_onnx(data, in_shape, t, ctx.s.export)
    if rec["predicted"] and rec["measured"]:
        rec["error_pct"] = 100.0 * (rec["predicted"]["ms"] - rec["measured"]["median_ms"]) / \
            rec["measured"]["median_ms"]
    atomic_write_json(cache, rec)
    log.info("%s %s: accuracy %.4f, %d bytes%s", mdir.name, name, rec["accuracy"], len(data),
             f", measured {rec['measured']['median_ms']:.4f} ms" if rec["measured"] else "")
    return rec


def _measure_arch_ms(ctx: _Context, arch: Arch) -> float:
    """``arch``'s fp32 latency measured here (random weights: the latency does not depend on them)."""
    from nas.export.onnx import export_onnx

    g = torch.Generator().manual_seed(0)
    shape = (arch.in_chans, arch.resolution, arch.resolution)
    data = export_onnx(build(arch).eval(), torch.randn(1, *shape, generator=g), exporter="torchscript")
    return measure_onnx(data, shape, ctx.targets["fp32"], ctx.s.export)["median_ms"]


def _measured_pruning(ctx: _Context, arch0: Arch, plan: PrunePlan, make_plan: Callable[[float], PrunePlan],
                      ratio: float, steps: int) -> tuple[PrunePlan, dict[str, Any]]:
    """When the target is this machine: measure the planned network against the unpruned one (same
    session, as a ratio) and, while it misses ``ratio``, re-plan, at most ``steps`` times.  The
    next predicted target comes from the secant through the last two (predicted ratio, measured
    ratio) points, the unpruned network (1, 1) first: exact when the predictor misses by a scale
    or an offset.  The prediction guides the plan; the measurement decides when it is done."""
    base = _measure_arch_ms(ctx, arch0)
    before = plan.predicted_ms_before
    pts = [(1.0, 1.0)]
    tries = []
    for i in range(steps + 1):
        got = _measure_arch_ms(ctx, plan.arch) / base
        pr = plan.predicted_ms_after / before
        pts.append((pr, got))
        tries.append({"target_ms": plan.target_ms, "predicted_ms": plan.predicted_ms_after,
                      "predicted_ratio": pr, "measured_ratio": got})
        log.info("pruning: predicted %.3fx, measured %.3fx of the unpruned network (want <= %.2fx)", pr, got, ratio)
        if got <= ratio or not plan.reached or i == steps:
            break
        (p0, m0), (p1, m1) = pts[-2], pts[-1]
        nxt_pr = p1 + (ratio - m1) * (p1 - p0) / (m1 - m0) if m1 < m0 and p1 < p0 else p1 * ratio / m1
        nxt = make_plan(before * min(max(nxt_pr, 0.05), 0.995 * p1))
        if nxt.arch == plan.arch:
            break
        plan = nxt
    if tries[-1]["measured_ratio"] > ratio:
        log.warning("pruning: the measured latency is %.3fx the unpruned network's, above %.2fx",
                    tries[-1]["measured_ratio"], ratio)
    return plan, {"unpruned_ms": base, "ratio": ratio, "tries": tries,
                  "reached": tries[-1]["measured_ratio"] <= ratio}


def _train_batches(data: Dataset, n: int, batch_size: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The first ``n`` shuffled (not augmented) training batches of a generator seeded with ``seed``."""
    it = data.batches("train", batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed))
    return [b for _, b in zip(range(n), it)]


def _train_one(ctx: _Context, index: int) -> dict[str, Any]:
    s, data = ctx.s, ctx.data
    entry = ctx.run.entries[index]
    arch0 = adapt_arch(Arch.from_dict(entry["arch"]), data)
    mid = model_id(index, arch0)
    mdir = Path(s.out or ctx.run.path / "train") / mid
    mdir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(mdir / "arch.json", arch0.to_json(indent=1) + "\n")
    where = ("root", "download")  # where the files are does not change the result: not checked on resume
    base_meta = {"data": {k: v for k, v in data.settings.to_dict().items() if k not in where},
                 "arch": arch0.digest()}
    seed = s.seed
    split = _split(data)
    log.info("model %s: %s", mid, arch0)

    # 1. full training
    torch.manual_seed(seed)
    model = build(arch0)
    hist = fit(model, data, settings=s.train, epochs=s.train.epochs, lr=s.train.lr, ckpt=mdir / "fp32.ckpt",
               seed=seed, meta={**base_meta, "stage": "fp32"}, stage=f"{mid} fp32")
    res: dict[str, Any] = {"id": mid, "index": index, "search": {k: entry.get(k) for k in
                                                                   (ctx.run.metric, "latency_ms", "trial", "digest")},
                           "arch": arch0.to_dict(), "history": {"fp32": hist}}
    res["torch_accuracy"] = {"fp32": accuracy(model, data, split)}
    final, final_arch = model, arch0

    # 2. pruning
    if s.prune["enabled"]:
        p = s.prune
        plan_path, loop_path = mdir / "prune_plan.json", mdir / "prune_measured.json"
        if plan_path.is_file():
            plan = PrunePlan.from_dict(json.loads(plan_path.read_text()))
            if plan.original != arch0:
                raise ValueError(f"{plan_path} is for another Arch; remove it or use another out dir")
        else:
            before = float(ctx.guide.predict(arch0)[0])
            target_ms = p["target_ms"] if p["target_ms"] is not None else p["ratio"] * before
            batches = None
            if p["criterion"] == "taylor":
                batches = _train_batches(data, p["taylor_batches"], s.train.batch_size, seed + 17)
            imp = channel_importance(model, channel_units(arch0), p["criterion"], batches=batches)
            probe = None
            if p["criterion"] == "loss":
                bs = min(s.train.eval_batch_size, p["loss_samples"])
                probe = LossProbe(model, _train_batches(data, -(-p["loss_samples"] // bs), bs, seed + 19))

            def make_plan(ms: float) -> PrunePlan:
                return plan_pruning(arch0, imp, ctx.guide.predict, target_ms=ms, multiple=ctx.multiple,
                                    se_ratio=ctx.se_ratio, criterion=p["criterion"], min_keep=p["min_keep"],
                                    lookahead=p["lookahead"], probe=probe, structural=p["structural"])

            plan = make_plan(target_ms)
            if p["measure_steps"] and p["target_ms"] is None and s.export.measure and ctx.measure_here.get("fp32"):
                plan, loop = _measured_pruning(ctx, arch0, plan, make_plan, p["ratio"], p["measure_steps"])
                atomic_write_json(loop_path, loop)
            atomic_write_json(plan_path, plan.to_dict())
        pruned = apply_plan(model, plan)
        hist = fit(pruned, data, settings=s.train, epochs=p["epochs"], lr=p["lr"], ckpt=mdir / "pruned.ckpt",
                   seed=seed + 1, meta={**base_meta, "stage": "pruned", "plan": plan.arch.digest()},
                   stage=f"{mid} pruned", teacher=model, distill=p["distill"], temperature=p["temperature"])
        res["prune"] = {k: v for k, v in plan.to_dict().items() if k not in ("original", "keep")}
        if loop_path.is_file():
            res["prune"]["measured"] = json.loads(loop_path.read_text())
        res["history"]["pruned"] = hist
        res["torch_accuracy"]["pruned"] = accuracy(pruned, data, split)
        final, final_arch = pruned, plan.arch

    # 3. QAT
    qat_model = None
    if s.qat["enabled"]:
        q = s.qat
        qs = QuantSettings(q["reduce_range"], q["ema"])
        qat_model = prepare_qat(final, qs)
        ck = mdir / "qat.ckpt"
        if not ck.is_file():
            calibrate(qat_model, _train_batches(data, q["calib_batches"], s.train.batch_size, seed + 29))
        freeze_from = q["epochs"] - q["freeze_epochs"]

        def observers(m: nn.Module, epoch: int) -> None:
            set_observers(m, "frozen" if epoch >= freeze_from else "ema")

        hist = fit(qat_model, data, settings=s.train, epochs=q["epochs"], lr=q["lr"], ckpt=ck, seed=seed + 2,
                   meta={**base_meta, "stage": "qat", "float": final_arch.digest(), "quant": dataclasses.asdict(qs),
                         "freeze_epochs": q["freeze_epochs"], "calib_batches": q["calib_batches"]},
                   on_epoch_start=observers, stage=f"{mid} qat", teacher=model, distill=q["distill"],
                   temperature=q["temperature"])
        set_observers(qat_model, "frozen")
        res["history"]["qat"] = hist
        res["torch_accuracy"]["qat_int8_fakequant"] = accuracy(qat_model, data, split)

    # 4. export
    from nas.export.onnx import export_onnx, quantize_qdq

    def onnx_of(m: nn.Module, a: Arch) -> bytes:
        return export_onnx(m.eval(), torch.zeros(1, a.in_chans, a.resolution, a.resolution), exporter="torchscript")

    variants = [_export_variant(ctx, mdir, "fp32", "fp32", arch0, lambda: onnx_of(model, arch0),
                                res["torch_accuracy"]["fp32"])]
    if s.prune["enabled"]:
        variants.append(_export_variant(ctx, mdir, "pruned", "fp32", final_arch, lambda: onnx_of(final, final_arch),
                                        res["torch_accuracy"]["pruned"]))
    calib = calibration_inputs(data, s.export.calib_samples, seed=seed + 41)
    variants.append(_export_variant(ctx, mdir, "ptq_int8", "int8", final_arch,
                                    lambda: quantize_qdq(onnx_of(final, final_arch), calib), None))
    if qat_model is not None:
        in_shape = (final_arch.in_chans, final_arch.resolution, final_arch.resolution)
        variants.append(_export_variant(ctx, mdir, "qat_int8", "int8", final_arch,
                                        lambda: export_qdq(qat_model, in_shape),
                                        res["torch_accuracy"]["qat_int8_fakequant"]))
    res["variants"] = variants
    atomic_write_json(mdir / "results.json", res)
    return res


def train_front(s: PipelineSettings) -> dict[str, Any]:
    """Run the pipeline on the selected Pareto architectures; write and return the report."""
    from nas.latency import load_latency_model

    run = load_search_run(s.run)
    idx = select_entries(run, s.select, s.max_ms)
    multiple, se_ratio = _space_params(run, s.prune.get("multiple"))
    targets = precision_targets(s.target, s.targets)
    guide = load_latency_model(s.target, allow_mismatch=s.allow_mismatch)
    models = {p: (guide if t is s.target else load_latency_model(t, allow_mismatch=s.allow_mismatch))
              if t is not None else None for p, t in targets.items()}
    for m in {id(m): m for m in [guide, *models.values()] if m is not None}.values():
        if m.warning:
            log.warning("%s", m.warning)
    data = load_data(_data_settings(run, s))
    here = {p: (t is not None and runs_here(t)) for p, t in targets.items()}
    if s.export.measure and not any(here.values()):
        log.info("the targets are not this machine: exported models are not measured here")
    ctx = _Context(s, data, run, multiple, se_ratio, targets, models, guide, here)
    out = Path(s.out or run.path / "train")
    results = []
    for i in idx:
        results.append(_train_one(ctx, i))
    report = {
        "schema": REPORT_SCHEMA, "version": 1, "run": str(run.path), "target": s.target.get("name"),
        "data": data.describe(), "accuracy_split": _split(data),
        "latency_targets": {p: (t or {}).get("name") for p, t in targets.items()},
        "measured_here": here,
        "quantization": {"qat": {"weights": "int8 symmetric per-channel, " +
                                 ("7-bit range [-64, 64] (reduce_range)" if s.qat["reduce_range"] else "[-127, 127]"),
                                 "activations": "uint8 asymmetric per-tensor (EMA min/max, then frozen)",
                                 "bn": "folded", "format": "QDQ ONNX (opset 17)"},
                         "ptq": {"method": "onnxruntime quantize_static", "calib_samples": s.export.calib_samples,
                                 **_qdq_settings()}},
        "settings": {"train": s.train.to_dict(), "prune": s.prune, "qat": s.qat,
                     "export": dataclasses.asdict(s.export), "seed": s.seed, "multiple": multiple,
                     "se_ratio": se_ratio},
        "models": results,
        "deploy": {m["id"]: deployment_choice(m) for m in results},
    }
    write_report(out, report)
    return report


def _qdq_settings() -> dict[str, Any]:
    from nas.export.onnx import QDQ_SETTINGS

    return dict(QDQ_SETTINGS)


# --------------------------------------------------------------------------------------------
# report


def _f(v: float | None, fmt: str = "{:.4f}") -> str:
    return "—" if v is None else fmt.format(v)


def report_rows(report: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for m in report["models"]:
        for v in m["variants"]:
            pred, meas = v.get("predicted"), v.get("measured")
            src = "" if not pred else (" (est.)" if pred.get("source") == "estimated" else
                                       " (extrap.)" if pred.get("outside") else "")
            rows.append([m["id"], v["variant"], f"{100 * v['accuracy']:.2f}", f"{v['params']:,}",
                         f"{v['file_bytes'] / 1024:.1f}", (_f(pred["ms"]) + src) if pred else "—",
                         _f(meas["median_ms"]) if meas else "—",
                         f"{v['error_pct']:+.1f}%" if v.get("error_pct") is not None else "—"])
    return rows


REPORT_HEADER = ["model", "variant", "acc %", "params", "KiB", "predicted ms", "measured ms", "pred. error"]


DEPLOY_TOLERANCE = 0.01  # accuracy a deployment may give up against the unpruned fp32 network (1 point)


def deployment_choice(model: Mapping[str, Any], tolerance: float = DEPLOY_TOLERANCE) -> dict[str, Any] | None:
    """The variant to deploy: the fastest whose accuracy is within ``tolerance`` of the fp32
    variant's, by measured latency where every candidate was measured here, else by prediction.

    int8 does not always pay: on small networks onnxruntime's int8 kernels can be slower than its
    fp32 ones, and the report should say which to ship rather than leave it to a reader.
    """
    vs = {v["variant"]: v for v in model.get("variants", [])}
    base = vs.get("fp32")
    if base is None:
        return None
    ok = [v for v in vs.values() if v["accuracy"] >= base["accuracy"] - tolerance]
    measured = all(v.get("measured") for v in ok)
    if not measured and not all(v.get("predicted") for v in ok):
        return None

    def ms(v: Mapping[str, Any]) -> float:
        return float(v["measured"]["median_ms"] if measured else v["predicted"]["ms"])

    best = min(ok, key=ms)
    return {"variant": best["variant"], "accuracy": best["accuracy"], "ms": ms(best),
            "by": "measured" if measured else "predicted", "tolerance": tolerance,
            "vs_fp32": {v["variant"]: ms(v) / ms(base) for v in ok}}


def write_report(out: str | Path, report: Mapping[str, Any]) -> None:
    """``report.json`` and ``report.md`` in ``out``."""
    out = Path(out)
    atomic_write_json(out / "report.json", report)
    lines = [f"# Training report: {report['run']}", "",
             f"Target `{report['target']}`; data {report['data']}; accuracy on the {report['accuracy_split']} split, "
             f"of the exported ONNX models run by onnxruntime (batch 1).", "",
             "| " + " | ".join(REPORT_HEADER) + " |", "|" + "---|" * len(REPORT_HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in report_rows(report)]
    lines += ["", "Predicted latency: " + ", ".join(f"{p} by target `{n}`" for p, n in
                                                   report["latency_targets"].items() if n)
              + "; *(est.)* marks a roofline estimate, *(extrap.)* a network outside the range of the table's "
              "calibration networks (the calibration extrapolates: profile at this resolution).  "
              "Error = (predicted − measured) / measured.",
              f"Measured on this machine: {', '.join(p for p, h in report['measured_here'].items() if h) or 'none'}.",
              "", "Quantization:", ""]
    q = report["quantization"]
    lines += [f"- QAT: {', '.join(f'{k}: {v}' for k, v in q['qat'].items())}",
              f"- PTQ baseline: {', '.join(f'{k}: {v}' for k, v in q['ptq'].items())}", ""]
    for m in report["models"]:
        if "prune" in m:
            p = m["prune"]
            lines.append(f"- {m['id']}: pruned {p['predicted_ms_before']:.4f} → {p['predicted_ms_after']:.4f} ms "
                         f"predicted (target {p['target_ms']:.4f}, criterion {p['criterion']}, "
                         f"{len(p['steps'])} steps{'' if p['reached'] else ', TARGET NOT REACHED'})")
            if p.get("measured"):
                ml = p["measured"]
                tries = " → ".join(f"{t['measured_ratio']:.3f}x" for t in ml["tries"])
                miss = "" if ml["reached"] else f", ABOVE {ml['ratio']:.2f}x"
                again = " (re-planned while the measured ratio missed prune.ratio)" if len(ml["tries"]) > 1 else ""
                lines.append(f"  measured here against the unpruned network ({ml['unpruned_ms']:.4f} ms): "
                             f"{tries}{miss}{again}")
    deploy = [(mid, d) for mid, d in (report.get("deploy") or {}).items() if d]  # train_front's choice
    if deploy:
        lines += ["", f"Deploy (the fastest variant within {100 * deploy[0][1]['tolerance']:.0f} point of the "
                      "fp32 accuracy):", ""]
        for mid, d in deploy:
            rel = ", ".join(f"{k} {r:.2f}x" for k, r in d["vs_fp32"].items() if k != "fp32")
            lines.append(f"- {mid}: **{d['variant']}**, {100 * d['accuracy']:.2f}%, {d['ms']:.4f} ms {d['by']} "
                         f"(latency vs fp32: {rel or 'no other variant within tolerance'})")
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")


# --------------------------------------------------------------------------------------------
# one checkpoint -> ONNX (python -m nas.export)


def export_checkpoint(
    *,
    arch_path: str | Path,
    weights: str | Path,
    precision: str,
    target: dict[str, Any],
    out: str | Path | None = None,
    data: Mapping[str, Any] | None = None,
    verify_samples: int = 500,
    overwrite: bool = False,
    allow_mismatch: bool = False,
    export: ExportSettings | None = None,
) -> dict[str, Any]:
    """Export a checkpoint to ONNX, verify it with onnxruntime, predict (and measure) its latency.

    Every input is checked before anything is written: an unsupported precision, a checkpoint
    that does not match the Arch, an existing output without ``overwrite``.
    """
    from nas.export.onnx import export_onnx, ort_session, quantize_qdq
    from nas.latency import load_latency_model

    export = export or ExportSettings()
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    _pos("verify_samples", verify_samples, integer=True)
    arch = Arch.load(str(arch_path))
    ckpt = load_checkpoint(weights)
    model = model_from_checkpoint(ckpt, arch, where=str(weights))
    is_qat = isinstance(model, QATNet)
    if is_qat and precision == "fp32":
        raise ValueError(f"{weights} is a QAT (int8) checkpoint: export it with precision=int8, or give the float "
                         f"checkpoint (fp32.ckpt or pruned.ckpt) for precision=fp32")
    out_path = Path(out) if out else Path(weights).with_suffix(f".{precision}.onnx")
    rep_path = out_path.with_suffix(".json")
    for p in (out_path, rep_path):
        if p.exists() and not overwrite:
            raise ValueError(f"{p} exists; pass overwrite=true or another out=")
    dsettings = dict(data) if data else (ckpt.get("meta") or {}).get("data")
    ds = load_data(DataSettings.from_dict(dsettings)) if dsettings else None
    if ds is not None and (ds.in_chans, ds.resolution) != (arch.in_chans, arch.resolution):
        raise ValueError(f"data {ds.name!r} gives {ds.in_chans}x{ds.resolution}px images but the Arch takes "
                         f"{arch.in_chans}x{arch.resolution}px")
    if precision == "int8" and not is_qat and ds is None:
        raise ValueError("int8 export of a float checkpoint calibrates onnxruntime's PTQ on training images: "
                         "give data={name: ..., resolution: ...} (the checkpoint records none)")
    in_shape = (arch.in_chans, arch.resolution, arch.resolution)
    x0 = torch.zeros(1, *in_shape)
    if precision == "fp32":
        onnx_bytes = export_onnx(model, x0, exporter="torchscript")
        how = "fp32"
    elif is_qat:
        onnx_bytes = export_qdq(model, in_shape)
        how = "QAT QDQ (int8 per-channel symmetric weights, uint8 per-tensor activations, BN folded)"
    else:
        onnx_bytes = quantize_qdq(export_onnx(model, x0, exporter="torchscript"),
                                  calibration_inputs(ds, export.calib_samples, seed=0))
        how = f"onnxruntime static PTQ ({export.calib_samples} training images)"
    # verification against torch
    if ds is not None:
        xs = [x for x, _ in _batch1(ds, _split(ds), verify_samples)]
        labels = [y for _, y in _batch1(ds, _split(ds), verify_samples)]
    else:
        g = torch.Generator().manual_seed(0)
        xs = [torch.randn(1, *in_shape, generator=g).numpy() for _ in range(verify_samples)]
        labels = None
    sess = ort_session(onnx_bytes, threads=1)
    name = sess.get_inputs()[0].name
    with torch.no_grad():
        ref = np.concatenate([model(torch.from_numpy(x)).numpy() for x in xs])
    got = np.concatenate([sess.run(None, {name: x})[0] for x in xs])
    verify: dict[str, Any] = {"samples": len(xs), "inputs": f"{_split(ds)} images" if ds is not None else "random inputs",
                              "max_abs_diff": float(np.abs(ref - got).max()),
                              "top1_agreement": float((ref.argmax(1) == got.argmax(1)).mean()),
                              "against": "the float torch model" if not is_qat else "the fake-quant torch model"}
    if labels is not None:
        verify["onnx_accuracy"] = float((got.argmax(1) == np.asarray(labels)).mean())
    t = target if target.get("precision") == precision else precision_targets(target).get(precision)
    pred = meas = None
    if t is not None:
        lm = load_latency_model(t, allow_mismatch=allow_mismatch)
        p = lm.explain(arch)
        pred = {**p.to_dict(), "label": p.label(), "target": t["name"]}
        if export.measure and runs_here(t):
            meas = measure_onnx(onnx_bytes, in_shape, t, export)
    rec = {"arch": str(arch_path), "weights": str(weights), "precision": precision, "how": how, "onnx": str(out_path),
           "file_bytes": len(onnx_bytes), "params": arch_cost(arch).params, "verify": verify, "predicted": pred,
           "measured": meas, "input_shape": [1, *in_shape]}
    if pred and meas:
        rec["error_pct"] = 100.0 * (pred["ms"] - meas["median_ms"]) / meas["median_ms"]
    atomic_write_bytes(out_path, onnx_bytes)
    atomic_write_json(rep_path, rec)
    return rec
