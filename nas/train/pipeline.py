"""Train the Pareto front of a search: full training, latency-aware pruning, QAT, ONNX export, report.

``train_front(settings)`` (behind ``python -m nas.train``) reads a search run dir
(``pareto.json``; the dataset settings from the study record or Hydra's ``.hydra/config.yaml``),
and for each selected architecture, in ``<out>/<id>/`` (``id`` = pareto index + Arch digest):

1. **fp32**: trains it from scratch (or, with ``supernet``, fine-tunes the weights it inherits from
   that weight-sharing supernet: ``nas.supernet``) on the search's dataset (all training images unless
   ``train_samples``), resized to the resolution the search predicted its latency at (the
   target's deployment resolution, ``pareto.json``'s ``search.deploy_resolution``; ``resolution``
   overrides it); ``fp32.ckpt`` after every epoch.  The search scored accuracy at the dataset's
   resolution only as a cheap ranking signal: the network that ships takes the deployed input, so
   it is trained, pruned, quantized and exported at that input, and every exported file has the
   input shape whose latency the Pareto front shows.  With ``resolution`` set to another size
   (e.g. the dataset's, to train faster) the report states both latencies, the front's at the
   searched shape and the files' at theirs, and which one the files have.
2. **prune** (``prune.enabled``): channel importance, a latency-aware plan toward
   ``prune.target_ms`` (or ``prune.ratio`` x the unpruned prediction) scored by the target's
   latency model (``prune_plan.json``), the kept weights copied into the pruned ``Arch``
   (``pruned_arch.json``: the Arch of ``pruned.ckpt`` and ``qat.ckpt``), then fine-tuning
   (``pruned.ckpt``).
3. **qat** (``qat.enabled``): BN folded, activation ranges calibrated on training batches,
   fake-quant fine-tuning (``qat.ckpt``).
4. **export**: ONNX models in ``export/`` — ``fp32``, ``pruned``, ``ptq_int8`` (onnxruntime static
   QDQ quantization of the final float model, calibrated on training images: the baseline) and
   ``qat_int8`` — each scored by onnxruntime on the test split (the exact deployed bytes), its
   latency predicted at its input shape and, when the target is this machine, measured.  For an
   ExecuTorch, OpenVINO or LiteRT target the same variants are also written in its format (``.pte``, an
   IR ``.xml`` + ``.bin``, or a ``.tflite``; ``results.json``'s ``edge_variants``), run against torch,
   predicted and, on the target's CPU, measured with that runtime.

Every checkpoint is written atomically at the end of each epoch; re-running the same command
resumes each stage at its last finished epoch and skips finished stages (Ctrl-C loses at most
the running epoch).  Resuming with settings that change a stage's result is an error naming the
differences.  The report (``report.json``, ``report.md``) goes to ``<out>/``.

The modules beside this one: ``settings`` (what can be set), ``search_run`` (reading the search),
``records`` (the typed result records the stages fill), ``prune_stage``, ``deploy`` (``export_checkpoint``),
``report``; below them, ``nas.fit`` (the training loop, its settings and checkpoints).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nas._io import atomic_write_bytes, atomic_write_json, atomic_write_text, exclusive
from nas.arch import Arch
from nas.builder import build
from nas.compress.qat import calibrate, export_qdq, prepare_qat, quant_settings_for, set_observers
from nas.cost import arch_cost
from nas.data import Dataset, DataSettings, adapt_arch, load_data
from nas.export import EDGE_FORMATS
from nas.export.edge import SUFFIXES
from nas.export.onnx import export_onnx
from nas.export.qdq import quantize_qdq
from nas.export.verify import calibration_inputs, eval_split, onnx_accuracy, scored_images, split_note
from nas.fit.checkpoint import dataset_record, resume_meta
from nas.fit.loop import accuracy, fit
from nas.latency.predict import load_latency_model
from nas.latency.runtimes import measure_onnx
from nas.space import SpaceError, load_space
from nas.stats import wilson_interval
from nas.supernet.checkpoint import check_matches, load_supernet
from nas.target import precision_targets, runs_here
from nas.train.card import card_path, deployment_card, write_card, write_test_files
from nas.train.context import PipelineContext
from nas.train.deploy_edge import export_model, report_path
from nas.train.prune_stage import stage_prune, train_batches
from nas.train.records import ExportRecord, History, InputRecord, ModelResult, TorchAccuracy
from nas.train.report import REPORT_SCHEMA, accuracy_uncertainty, deployment_choice, quantization_record, write_report
from nas.train.search_run import SearchRun, load_search_run, model_id, search_finished, select_entries
from nas.train.settings import SEED_OFFSETS, PipelineSettings

__all__ = ["train_front"]

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# the pipeline


def _resolution(run: SearchRun, s: PipelineSettings) -> int:
    """The input resolution to train and export at: ``s.resolution``, else the search's deployment one."""
    r = s.resolution or run.resolution
    if r is None:
        raise ValueError(f"{run.path / 'pareto.json'}: the search records no deployment resolution and its front "
                         f"mixes resolutions; give the one to train and export at with resolution=<px>")
    return r


def _data_settings(run: SearchRun, s: PipelineSettings) -> DataSettings:
    d = {k: v for k, v in run.data.items() if k in DataSettings.__dataclass_fields__}
    d["train_samples"] = s.train_samples  # full training: all training images unless capped
    d["resolution"] = _resolution(run, s)  # the images the deployed network takes
    d.update(s.data)  # data.num_workers: how the images are read, not which
    if s.data_root:
        d["root"] = s.data_root
    return DataSettings.from_dict(d)


def _space_params(run: SearchRun, multiple: int | None) -> tuple[int, float | None]:
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


def _card(ctx: PipelineContext, rec: ExportRecord, arch: Arch) -> None:
    """The deployment card beside an exported ONNX file (``nas.train.card``), with the list of the
    test images it was scored on."""
    files = write_test_files(ctx.data, rec.onnx, limit=ctx.s.export.eval_samples)
    write_card(deployment_card(
        file=rec.onnx, variant=rec.variant, precision=rec.precision, arch=arch, data=dataset_record(ctx.data),
        accuracy=rec.accuracy, split=rec.accuracy_split, split_note=split_note(ctx.data),
        predicted=rec.predicted, measured=rec.measured, target=ctx.targets.get(rec.precision) or ctx.s.target,
        files=files), rec.onnx)


def _predict(ctx: PipelineContext, prec: str, arch: Arch) -> dict[str, Any] | None:
    m = ctx.models.get(prec)
    if m is None:
        return None
    p = m.explain(arch)
    return p.record(ctx.targets[prec].name)


def _cached_export(cache: Path) -> tuple[ExportRecord, bool] | None:
    """An export's cached record and whether it holds its accuracy's interval, or None when there is none or it
    cannot be read back (damaged, or written by a much older version): the variant is then exported again and
    its cache rewritten."""
    try:
        data = json.loads(cache.read_text())
        return ExportRecord.from_dict(data), "accuracy_ci95" in data
    except (OSError, ValueError, TypeError, AttributeError):  # json's errors are ValueErrors
        return None


def _export_variant(ctx: PipelineContext, mdir: Path, name: str, prec: str, arch: Arch, make: Callable[[], bytes],
                    torch_acc: float | None) -> ExportRecord:
    """One exported ONNX variant (``export/<name>.onnx``), scored, predicted, (here) measured and given its
    card; its record is cached as ``export/<name>.json`` and read back from there on a re-run (a cache
    written before intervals were recorded gets its interval then)."""
    path = mdir / "export" / f"{name}.onnx"
    cache = mdir / "export" / f"{name}.json"
    cached = _cached_export(cache) if path.is_file() else None
    if cached is not None:
        rec, has_interval = cached
        if not card_path(path).is_file():
            _card(ctx, rec, arch)
        return rec if has_interval else dataclasses.replace(rec, **_interval(ctx, rec))
    data = make()
    atomic_write_bytes(path, data)
    in_shape = (arch.in_chans, arch.resolution, arch.resolution)
    split = eval_split(ctx.data)
    rec = ExportRecord(variant=name, precision=prec, arch=arch, onnx=str(path), file_bytes=len(data),
                       input_shape=[1, *in_shape], params=arch_cost(arch).params,
                       accuracy=onnx_accuracy(data, ctx.data, split, limit=ctx.s.export.eval_samples),
                       accuracy_split=split, torch_accuracy=torch_acc, predicted=_predict(ctx, prec, arch))
    rec = dataclasses.replace(rec, **_interval(ctx, rec))
    t = ctx.targets.get(prec)
    if ctx.s.export.measure and t is not None and ctx.measure_here.get(prec):
        rec.measured = measure_onnx(data, in_shape, t, ctx.s.export)
    if rec.predicted and rec.measured:
        rec.error_pct = 100.0 * (rec.predicted["ms"] - rec.measured["median_ms"]) / rec.measured["median_ms"]
    rec.card = str(card_path(path))
    atomic_write_json(cache, rec.to_dict())
    _card(ctx, rec, arch)
    log.info("%s %s: accuracy %.4f, %d bytes%s", mdir.name, name, rec.accuracy, len(data),
             f", measured {rec.measured['median_ms']:.4f} ms" if rec.measured else "")
    return rec


def _interval(ctx: PipelineContext, rec: ExportRecord) -> dict[str, Any]:
    """A variant's accuracy's Wilson 95% interval on the images it was scored on: its ``accuracy_images``
    and ``accuracy_ci95``."""
    n = scored_images(ctx.data, rec.accuracy_split, ctx.s.export.eval_samples)
    return {"accuracy_images": n, "accuracy_ci95": wilson_interval(rec.accuracy, n).to_dict() if n else None}


def _stage_fp32(ctx: PipelineContext, index: int, arch0: Arch, mdir: Path, base_meta: dict[str, Any],
                inp: InputRecord) -> tuple[nn.Module, ModelResult]:
    """1. Full training from scratch (``fp32.ckpt``); the model and the start of its result record
    (``inp``: its input record)."""
    s, data = ctx.s, ctx.data
    mid = mdir.name
    entry = ctx.run.entries[index]
    torch.manual_seed(s.seed)
    model = build(arch0)
    meta = {**base_meta, "stage": "fp32"}
    if ctx.supernet is not None:  # the weights it inherits from the supernet, fine-tuned
        sn, sn_meta = ctx.supernet
        model.load_state_dict(sn.subnet(arch0).state_dict())
        meta["init"] = {"supernet": sn_meta["space"]["digest"], "epoch": sn_meta["epoch"],
                        "settings": sn_meta["settings"]}
    hist = fit(model, data, settings=s.train, epochs=s.train.epochs, lr=s.train.lr, ckpt=mdir / "fp32.ckpt",
               seed=s.seed, meta=meta, stage=f"{mid} fp32", target=s.target)
    search = {k: entry.get(k) for k in (ctx.run.metric, "latency_ms", "trial", "digest")}
    res = ModelResult(id=mid, index=index, search=search, arch=arch0, history=History(fp32=hist),
                      torch_accuracy=TorchAccuracy(fp32=accuracy(model, data, eval_split(data))), input=inp)
    return model, res


def _stage_qat(ctx: PipelineContext, final: nn.Module, final_arch: Arch, teacher: nn.Module, mdir: Path,
               base_meta: dict[str, Any], res: ModelResult) -> nn.Module:
    """3. QAT: BN folded, ranges calibrated, fake-quant fine-tuning (``qat.ckpt``)."""
    s, data, q = ctx.s, ctx.data, ctx.s.qat
    qs = quant_settings_for(ctx.targets.get("int8") or s.target, reduce_range=q.reduce_range, ema=q.ema)
    qat_model = prepare_qat(final, qs)
    ck = mdir / "qat.ckpt"
    if not ck.is_file():
        calibrate(qat_model, train_batches(data, q.calib_batches, s.train.batch_size, s.seed + SEED_OFFSETS["qat_calibration"]))
    freeze_from = q.epochs - q.freeze_epochs

    def observers(m: nn.Module, epoch: int) -> None:
        set_observers(m, "frozen" if epoch >= freeze_from else "ema")

    hist = fit(qat_model, data, settings=s.train, epochs=q.epochs, lr=q.lr, ckpt=ck, seed=s.seed + SEED_OFFSETS["qat"],
               meta={**base_meta, "stage": "qat", "float": final_arch.digest(), "quant": {k: v for k, v in dataclasses.asdict(qs).items() if k != "symmetric" or v},
                     "freeze_epochs": q.freeze_epochs, "calib_batches": q.calib_batches},
               on_epoch_start=observers, stage=f"{mdir.name} qat", teacher=teacher, distill=q.distill,
               temperature=q.temperature, target=ctx.targets.get("int8") or s.target)
    set_observers(qat_model, "frozen")
    res.history.qat = hist
    res.torch_accuracy.qat_int8_fakequant = accuracy(qat_model, data, eval_split(data))
    return qat_model


def _onnx_of(m: nn.Module, a: Arch) -> bytes:
    return export_onnx(m.eval(), torch.zeros(1, a.in_chans, a.resolution, a.resolution), exporter="torchscript")


def _stage_export(ctx: PipelineContext, mdir: Path, models: dict[str, tuple[nn.Module, Arch]], res: ModelResult
                  ) -> list[ExportRecord]:
    """4. The ONNX variants (``export/``): fp32, pruned, the PTQ int8 baseline of the final float
    network and qat_int8, each scored, predicted and (here) measured."""
    acc = res.torch_accuracy
    model, arch0 = models["fp32"]
    final, final_arch = models["final"]
    variants = [_export_variant(ctx, mdir, "fp32", "fp32", arch0, lambda: _onnx_of(model, arch0), acc.fp32)]
    if "pruned" in models:
        variants.append(_export_variant(ctx, mdir, "pruned", "fp32", final_arch,
                                        lambda: _onnx_of(final, final_arch), acc.pruned))
    calib = calibration_inputs(ctx.data, ctx.s.export.calib_samples, seed=ctx.s.seed + SEED_OFFSETS["export_calibration"])
    variants.append(_export_variant(ctx, mdir, "ptq_int8", "int8", final_arch,
                                    lambda: quantize_qdq(_onnx_of(final, final_arch), calib,
                                                                target=ctx.targets.get("int8") or ctx.s.target), None))
    if "qat" in models:
        qat_model = models["qat"][0]
        in_shape = (final_arch.in_chans, final_arch.resolution, final_arch.resolution)
        variants.append(_export_variant(ctx, mdir, "qat_int8", "int8", final_arch,
                                        lambda: export_qdq(qat_model, in_shape), acc.qat_int8_fakequant))
    return variants


def _stage_edge(ctx: PipelineContext, mdir: Path, models: dict[str, tuple[nn.Module, Arch]]
                ) -> list[dict[str, Any]]:
    """4b. For an ExecuTorch, OpenVINO or LiteRT target, the variants in its format too (``export/<variant>.pte``,
    ``.xml`` or ``.tflite``): fp32, pruned and int8 of the final float network (PT2E for ExecuTorch, NNCF for
    OpenVINO, ai-edge-quantizer for LiteRT; calibrated on the PTQ baseline's images), and for OpenVINO the
    QAT network's QDQ graph, each run against torch on the test split, predicted, (on this CPU) measured,
    and given its card (``<variant>.<suffix>.card.json``)."""
    fmt = {rt: f for f, rt in EDGE_FORMATS.items()}.get(ctx.s.target.runtime)
    if fmt is None:
        return []
    calib = calibration_inputs(ctx.data, ctx.s.export.calib_samples, seed=ctx.s.seed + SEED_OFFSETS["export_calibration"])
    todo = [("fp32", "fp32", models["fp32"], False)]
    if "pruned" in models:
        todo.append(("pruned", "fp32", models["final"], False))
    todo.append(("ptq_int8", "int8", models["final"], False))
    if "qat" in models and fmt == "openvino":  # ExecuTorch's and LiteRT's int8 are their own: neither reads QDQ
        todo.append(("qat_int8", "int8", models["qat"], True))
    out = []
    for name, prec, (model, arch), is_qat in todo:
        path = mdir / "export" / f"{name}{SUFFIXES[fmt]}"
        if path.is_file() and report_path(path).is_file():
            out.append(json.loads(report_path(path).read_text()))
            continue
        rec = {"variant": name, **export_model(
            fmt, model, arch, path, prec, is_qat=is_qat, calib=calib if prec == "int8" and not is_qat else [],
            data=ctx.data, verify_samples=ctx.s.export.eval_samples, target=ctx.s.target, export=ctx.s.export,
            allow_mismatch=ctx.s.allow_mismatch, variant=name)}
        atomic_write_json(report_path(path), rec)
        log.info("%s %s.%s: accuracy %.4f%s", mdir.name, name, fmt, rec["verify"].get("accuracy", float("nan")),
                 f", measured {rec['measured']['median_ms']:.4f} ms" if rec["measured"] else "")
        out.append(rec)
    return out


def _input_record(ctx: PipelineContext, index: int, searched: Arch, arch0: Arch) -> InputRecord:
    """The exported input shape against the searched one: the report's ``input``.  ``as_searched``:
    the fp32 export is the very network the search scored (same Arch digest), so the front's
    latency (``searched_ms``, predicted by the search for ``searched_target``, obtained as
    ``searched_how`` says) is the file's."""
    target = ctx.run.record.get("target") or {}
    entry = ctx.run.entries[index]
    return InputRecord(shape=[1, arch0.in_chans, arch0.resolution, arch0.resolution],
                       searched_shape=ctx.run.searched_shape(index), as_searched=arch0.digest() == searched.digest(),
                       searched_ms=entry.get("latency_ms"), searched_target=target.get("name"),
                       searched_precision=target.get("precision"), searched_source=entry.get("latency_source"),
                       searched_how=entry.get("latency_how"))


def _train_one(ctx: PipelineContext, index: int) -> dict[str, Any]:
    """Every stage for one Pareto architecture, in ``<out>/<id>/``; its result record."""
    s, data = ctx.s, ctx.data
    searched = Arch.from_dict(ctx.run.entries[index]["arch"])
    arch0 = adapt_arch(searched, data)
    mid = model_id(index, arch0)
    mdir = Path(s.out or ctx.run.path / "train") / mid
    mdir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(mdir / "arch.json", arch0.to_json(indent=1) + "\n")
    base_meta = {"data": resume_meta({"data": data.settings.to_dict()})["data"],
                 "arch": arch0.digest()}
    log.info("model %s: %s", mid, arch0)
    model, res = _stage_fp32(ctx, index, arch0, mdir, base_meta, _input_record(ctx, index, searched, arch0))
    models = {"fp32": (model, arch0), "final": (model, arch0)}
    if s.prune.enabled:
        kept = stage_prune(ctx, model, arch0, mdir, base_meta, res)
        if kept is not None:  # the int8 variants are built from the network that ships
            models["final"] = models["pruned"] = kept
    if s.qat.enabled:
        final, final_arch = models["final"]
        models["qat"] = (_stage_qat(ctx, final, final_arch, model, mdir, base_meta, res), final_arch)
    res.variants = _stage_export(ctx, mdir, models, res)
    res.edge_variants = _stage_edge(ctx, mdir, models)
    out = res.to_dict()
    atomic_write_json(mdir / "results.json", out)
    return out


def _load_supernet(s: PipelineSettings, run: SearchRun, data: Dataset) -> tuple[Any, dict[str, Any]] | None:
    """The supernet ``s.supernet`` names, refused unless trained on the search's space and dataset (any
    resolution: its weights do not depend on the input size, and every epoch recalibrates BatchNorm)."""
    if s.supernet is None:
        return None
    if not run.search_space:
        raise ValueError(f"{run.path}: the search run names no search space, so supernet={s.supernet} cannot be "
                         f"checked against it; train from scratch (drop supernet=)")
    sn, meta = load_supernet(s.supernet)
    check_matches(meta, s.supernet, space=load_space(run.search_space), data=data, resolution=False)
    return sn, meta


def train_front(s: PipelineSettings, *, wait: bool = False, command: str | None = None,
                say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train the selected Pareto architectures of a search: full training, pruning, QAT, export.

    Each model's stages are checkpointed as they finish; the same call again resumes them.  One process at a time trains into an output folder (``<run>/train`` or ``s.out``): its lock is
    ``nas._io.exclusive``'s, in the run's hidden ``.locks/`` folder.

    Args:
        s: the pipeline's settings.
        wait: another process trains into the same folder, or a search still writes the run: wait for
            it (``say`` says so) instead of raising ``Busy``.
        command: this process's command line, named to a second process that finds the lock held.
        say: where the waiting message goes (default: standard error).

    Returns:
        The report written to ``report.json`` / ``report.md`` in the output folder: per model, its
        variants' accuracy, predicted and measured latency, and the deployment choice.

    Raises:
        nas._io.Busy: another process trains into the same folder, or a search still writes the run
            (``nas.train.search_run.search_finished``), and ``wait`` is false.
        ValueError: a run dir that is not a search's, or settings that do not fit it.

    Example::

        from nas.train.settings import PipelineSettings
        report = nas.train_front(PipelineSettings(run="runs/search", target=nas.load_target("cpu")))
    """
    search_finished(s.run, wait=wait, say=say)
    with exclusive(s.out_dir, what=s.writing, wait=wait, command=command, say=say):
        return _train_front(s)


def _train_front(s: PipelineSettings) -> dict[str, Any]:
    run = load_search_run(s.run)
    idx = select_entries(run, s.select, s.latency_budget_ms)
    multiple, se_ratio = _space_params(run, s.prune.multiple)
    targets = precision_targets(s.target, s.targets.to_dict())
    data = load_data(_data_settings(run, s))
    supernet = _load_supernet(s, run, data)  # a supernet for another space or dataset fails before anything is done
    guide = load_latency_model(s.target, allow_mismatch=s.allow_mismatch)
    models = {p: (guide if t is s.target else load_latency_model(t, allow_mismatch=s.allow_mismatch))
              if t is not None else None for p, t in targets.items()}
    for m in {id(m): m for m in [guide, *models.values()] if m is not None}.values():
        if m.warning:
            log.warning("%s", m.warning)
    here = {p: (t is not None and runs_here(t)) for p, t in targets.items()}
    if s.export.measure and not any(here.values()):
        log.info("the targets are not this machine: exported models are not measured here")
    ctx = PipelineContext(s, data, run, multiple, se_ratio, targets, models, guide, here, supernet)
    results = [_train_one(ctx, i) for i in idx]
    report = {
        "schema": REPORT_SCHEMA, "version": 1, "run": str(run.path), "target": s.target.name,
        "data": data.describe(), "accuracy_split": eval_split(data), "accuracy_split_note": split_note(data),
        "resolution": {"searched": run.resolution, "exported": data.resolution},
        "latency_targets": {p: t.name if t else None for p, t in targets.items()},
        "measured_here": here,
        "quantization": quantization_record(s.qat.reduce_range, s.export.calib_samples,
                                            targets.get("int8") or s.target),
        "settings": {"train": s.train.to_dict(), "supernet": s.supernet, "prune": s.prune.to_dict(), "qat": s.qat.to_dict(),
                     "export": s.export.to_dict(), "seed": s.seed, "multiple": multiple, "se_ratio": se_ratio},
        "models": results,
        "deploy": {m["id"]: deployment_choice(m) for m in results},
        "accuracy_uncertainty": accuracy_uncertainty(results, seed=s.seed),
    }
    write_report(Path(s.out or run.path / "train"), report)
    return report
