"""What the train pipeline finds for each model, as typed records: its stages fill a ``ModelResult``, whose
``to_dict()`` is the model's ``results.json`` and its entry in the report's ``models``.

Each record's ``to_dict()`` writes the JSON the report functions (``nas.train.report``) read, saved
reports included: a figure a stage did not produce is left out, not written as null (``torch_accuracy``'s
``pruned`` without a kept pruned network, ``prune`` when pruning is off, ``edge_variants`` without an
edge format).  The exported ONNX variants' ``ExportRecord`` writes what their files
(``export/<variant>.json``) have always held, nulls included (``predicted`` without a target for the
precision, ``measured`` where not measured here); its ``from_dict`` reads such a file back on a re-run.
The variants in a target's edge format stay the dicts their files hold (``export/<variant>.<suffix>.json``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from nas.arch import Arch
from nas.compress.prune_plan import PrunePlan

__all__ = ["ExportRecord", "History", "InputRecord", "ModelResult", "PruneDecision", "PruneRecord", "TorchAccuracy"]

Epochs = list[dict[str, float]]  # ``nas.fit.loop.fit``'s per-epoch history


@dataclass
class History:
    """Each training stage's per-epoch history (``nas.fit.loop.fit``'s).

    Attributes:
        fp32: full training (or fine-tuning from the supernet).
        pruned: the pruned network's fine-tuning, None where it was not fine-tuned.
        qat: the fake-quant fine-tuning, None without QAT.
    """

    fp32: Epochs
    pruned: Epochs | None = None
    qat: Epochs | None = None

    def to_dict(self) -> dict[str, Epochs]:
        """The stages that ran, in order."""
        return {k: v for k, v in (("fp32", self.fp32), ("pruned", self.pruned), ("qat", self.qat)) if v is not None}


@dataclass
class TorchAccuracy:
    """The torch models' accuracies on the report's split (``nas.export.verify.eval_split``).

    Attributes:
        fp32: the fully trained network's.
        pruned: the pruned network's, set only when it is kept.
        qat_int8_fakequant: the QAT network's with fake quantization, None without QAT.
    """

    fp32: float
    pruned: float | None = None
    qat_int8_fakequant: float | None = None

    def to_dict(self) -> dict[str, float]:
        """The accuracies that were scored."""
        return {k: v for k, v in (("fp32", self.fp32), ("pruned", self.pruned),
                                  ("qat_int8_fakequant", self.qat_int8_fakequant)) if v is not None}


@dataclass
class InputRecord:
    """The exported input shape against the searched one: the report's ``input``.

    Attributes:
        shape: the exported files' input shape (batch 1, NCHW).
        searched_shape: the input shape of the network the search scored.
        as_searched: the fp32 export is the very network the search scored (same Arch digest), so the
            front's latency is the file's.
        searched_ms: the front's latency of it, as the search predicted it.
        searched_target: the target the search predicted for.
        searched_precision: that target's precision.
        searched_source: where the search's latency came from (the latency model's source).
        searched_how: how it was obtained, in the shared words.
    """

    shape: list[int]
    searched_shape: list[int]
    as_searched: bool
    searched_ms: float | None
    searched_target: str | None
    searched_precision: str | None
    searched_source: str | None
    searched_how: str | None

    def to_dict(self) -> dict[str, Any]:
        """Every field, in order."""
        return dataclasses.asdict(self)


@dataclass
class PruneDecision:
    """The rule that keeps or rejects the pruned network, on the validation split.

    Attributes:
        split: the split that decides (``val``).
        unpruned: the unpruned network's accuracy on it.
        pruned: the fine-tuned pruned network's.
        drop_points: ``100 * (unpruned - pruned)``.
        max_drop: the most points pruning may cost (``prune.max_drop``).
    """

    split: str
    unpruned: float
    pruned: float
    drop_points: float
    max_drop: float

    def to_dict(self) -> dict[str, Any]:
        """Every field, in order."""
        return dataclasses.asdict(self)


@dataclass
class PruneRecord:
    """What the pruning stage did: skipped (why), rejected (why), or kept, and toward what.

    Attributes:
        by: what the plan was scored by (``prune.by``: ``latency`` or ``macs``).
        kept: the pruned network ships (the int8 variants are built from it).
        plan: the plan, None where pruning was skipped before planning; its record (less the unpruned
            Arch and the kept channels) is spread into the record.
        unit: the plan's unit (``ms`` or ``MMACs``), None without a plan.
        source: the guiding latency model's source, None by MACs or without a plan.
        skipped: why pruning was skipped, None where it was not.
        measured: the measured re-planning loop (``prune_measured.json``), None where it did not run.
        decision: the keep-or-reject rule's figures, None where nothing was fine-tuned.
        pruned_accuracy: split -> the pruned network's accuracy on it, None where nothing was fine-tuned.
        rejected: why the pruned network was rejected, None where it was not.
    """

    by: str
    kept: bool = False
    plan: PrunePlan | None = None
    unit: str | None = None
    source: str | None = None
    skipped: str | None = None
    measured: dict[str, Any] | None = None
    decision: PruneDecision | None = None
    pruned_accuracy: dict[str, float] | None = None
    rejected: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The plan's record, then what was found, the unset figures left out."""
        if self.plan is None:
            return {"kept": self.kept, **({"skipped": self.skipped} if self.skipped is not None else {}), "by": self.by}
        d = {k: v for k, v in self.plan.to_dict().items() if k not in ("original", "keep")}
        d.update(by=self.by, unit=self.unit, kept=self.kept, source=self.source)
        extra = {"skipped": self.skipped, "measured": self.measured,
                 "decision": self.decision.to_dict() if self.decision is not None else None,
                 "pruned_accuracy": self.pruned_accuracy, "rejected": self.rejected}
        d.update((k, v) for k, v in extra.items() if v is not None)
        return d


@dataclass
class ExportRecord:
    """One exported ONNX variant, scored, predicted and (here) measured: ``export/<variant>.json``, read
    back from there on a re-run, and an entry of ``results.json``'s ``variants``.

    Attributes:
        variant: the variant's name (``fp32``, ``pruned``, ``ptq_int8``, ``qat_int8``).
        precision: its precision (``fp32`` or ``int8``): the target that predicts and measures it.
        arch: the Arch exported.
        onnx: the ONNX file's path.
        file_bytes: the file's size.
        input_shape: its input shape (batch 1, NCHW).
        params: the Arch's parameter count.
        accuracy: onnxruntime's accuracy of the file on ``accuracy_split``.
        accuracy_split: the split it was scored on (``nas.export.verify.eval_split``).
        torch_accuracy: the torch network's accuracy on that split, None for the PTQ baseline.
        predicted: the latency prediction's record (``Prediction.record``), None where no target predicts
            the precision.
        measured: the measured latency (``nas.latency.runtimes.measure_onnx``), None where not measured here.
        accuracy_images: how many images were scored, None in a record written before it was counted
            (then it and ``accuracy_ci95`` are left out).
        accuracy_ci95: the accuracy's Wilson 95% interval on them, None without images.
        error_pct: ``100 * (predicted - measured) / measured``, None unless both exist (then left out).
        card: the deployment card's path (``nas.train.card.card_path``), None in a record written before
            cards (then left out).
    """

    variant: str
    precision: str
    arch: Arch
    onnx: str
    file_bytes: int
    input_shape: list[int]
    params: int
    accuracy: float
    accuracy_split: str
    torch_accuracy: float | None = None
    predicted: dict[str, Any] | None = None
    measured: dict[str, Any] | None = None
    accuracy_images: int | None = None
    accuracy_ci95: dict[str, Any] | None = None
    error_pct: float | None = None
    card: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The file's record, in order: the interval only where it was counted, ``error_pct`` and ``card`` only
        where set."""
        d: dict[str, Any] = {"variant": self.variant, "precision": self.precision, "arch": self.arch.to_dict(),
                             "onnx": self.onnx, "file_bytes": self.file_bytes, "input_shape": self.input_shape,
                             "params": self.params, "accuracy": self.accuracy, "accuracy_split": self.accuracy_split,
                             "torch_accuracy": self.torch_accuracy, "predicted": self.predicted,
                             "measured": self.measured}
        if self.accuracy_images is not None:
            d.update(accuracy_images=self.accuracy_images, accuracy_ci95=self.accuracy_ci95)
        if self.error_pct is not None:
            d["error_pct"] = self.error_pct
        if self.card is not None:
            d["card"] = self.card
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExportRecord:
        """The record that :meth:`to_dict` wrote (``export/<variant>.json``), an older file's included.

        Args:
            data: the record; ``accuracy_images``, ``accuracy_ci95``, ``error_pct`` and ``card`` may be missing.

        Returns:
            The record; its ``to_dict()`` is ``data``.

        Raises:
            ValueError: a key that is not a field, a missing field, or a malformed Arch.
        """
        fields = dataclasses.fields(cls)
        unknown = sorted(set(data) - {f.name for f in fields})
        missing = [f.name for f in fields if f.default is dataclasses.MISSING and f.name not in data]
        if unknown or missing:
            raise ValueError("an export record with " + ", ".join(
                [*(f"unknown key {k!r}" for k in unknown), *(f"no {k!r}" for k in missing)]))
        return cls(**{**data, "arch": Arch.from_dict(data["arch"])})


@dataclass
class ModelResult:
    """One trained architecture of the front: ``results.json`` and its entry in the report's ``models``.

    Attributes:
        id: the model's id (pareto index + Arch digest), its folder's name.
        index: its index in the search's front.
        search: the search's figures of it (the metric, ``latency_ms``, ``trial``, ``digest``).
        arch: the Arch trained (the searched one, adapted to the data).
        history: each training stage's per-epoch history.
        torch_accuracy: the torch models' accuracies.
        input: the exported input shape against the searched one.
        prune: what pruning did, None where it is off.
        variants: the exported ONNX variants' records (``export/<variant>.json``).
        edge_variants: the variants in the target's edge format (``<variant>.<suffix>.json``), empty without one.
    """

    id: str
    index: int
    search: dict[str, Any]
    arch: Arch
    history: History
    torch_accuracy: TorchAccuracy
    input: InputRecord
    prune: PruneRecord | None = None
    variants: list[ExportRecord] = field(default_factory=list)
    edge_variants: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON record; ``prune`` and ``edge_variants`` only where there are some."""
        d: dict[str, Any] = {"id": self.id, "index": self.index, "search": self.search, "arch": self.arch.to_dict(),
                             "history": self.history.to_dict(), "torch_accuracy": self.torch_accuracy.to_dict(),
                             "input": self.input.to_dict()}
        if self.prune is not None:
            d["prune"] = self.prune.to_dict()
        d["variants"] = [v.to_dict() for v in self.variants]
        if self.edge_variants:
            d["edge_variants"] = self.edge_variants
        return d
