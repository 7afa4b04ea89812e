"""One interface for every latency source (table predictor, roofline estimate, live measurement)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from nas.arch import Arch

__all__ = ["EAGER", "GRAPH", "LatencyModel", "Prediction", "SOURCES", "how_measured", "how_predicted", "on_device",
           "timing_label", "unmeasured_words"]

GRAPH = "cuda_graph"
EAGER = "eager"

# where a latency figure comes from: a table measured on the target device, a roofline estimate, or a
# table measured through a device bundle's rehearsal on another machine (standing in for the device)
SOURCES = ("measured", "estimated", "rehearsal")


@dataclass(frozen=True, kw_only=True)  # a dozen fields: built by name, never by position
class Prediction:
    """A latency figure and where it came from (``LatencyModel.explain``).

    Attributes:
        ms: the predicted latency in milliseconds.
        source: ``"measured"`` when it derives from a table measured on the target device (its
            entries, the learned model fitted on them, the calibration fitted on whole networks),
            ``"estimated"`` for a roofline estimate from published or measured peak figures,
            ``"rehearsal"`` for a table a device bundle's rehearsal measured on another machine
            (``device``), standing in for the target's device.
        device: the device the figure is for (a rehearsal's: the machine that measured it).
        n_measured, n_learned, n_estimated: layers looked up in the table, filled in by the learned
            per-block model, estimated by the roofline.
        calibrated, mismatched, rescale, outside, recalibrated, timing, rehearsal, rescaled_by: see the fields' comments.

    Raises:
        ValueError: ``source`` is not one of ``SOURCES``.

    Example::

        p = nas.load_latency_model(nas.load_target("cpu")).explain(arch)
        p.ms, p.source, p.label()      # 0.081, "measured", "0.081 ms (measured: 12 measured, ...)"
    """

    ms: float
    source: str
    device: str
    n_measured: int = 0  # layers looked up in the measured table
    n_learned: int = 0  # layers the learned per-block model filled in
    n_estimated: int = 0  # layers estimated by the roofline
    calibrated: bool = False
    mismatched: bool = False  # the table's metadata did not match the target (allowed explicitly)
    rescale: float = 1.0  # the table's refresh: calibration networks re-measured now over their table figure
    outside: str = ""  # set when the network lies outside what the calibration was fitted on (an extrapolation)
    recalibrated: str = ""  # when the calibration networks were re-measured (nas.profile recalibrate), if they were
    timing: str = ""  # a GPU table's timing: "CUDA graph" or "eager (host-bound)" (empty on a CPU)
    # a rehearsal table's words (LatencyTable.rehearsal_label): "REHEARSAL of <target> (<runtime>, <precision>)
    # on <machine> (<its runtime>)"; empty for the other sources
    rehearsal: str = ""
    rescaled_by: str = ""  # what set ``rescale``: "its refresh" (nas.profile refresh=N) or a refresh on the fly

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"Prediction.source must be one of {SOURCES}, got {self.source!r}")

    @property
    def how(self) -> str:
        """How this figure was obtained, in the words every output uses (``how_predicted``)."""
        return how_predicted(self.source, self.device, self.rehearsal)

    def label(self) -> str:
        """The figure and how it was obtained, in one line (what ``nas.predict`` prints)."""
        if self.source == "estimated":
            return f"{self.ms:.3f} ms (ESTIMATE: roofline for {self.device})"
        parts = [f"{self.n_measured} measured"]
        if self.n_learned:
            parts.append(f"{self.n_learned} learned")
        cal = ", calibrated" if self.calibrated else ""
        mm = ", TABLE MISMATCH allowed" if self.mismatched else ""
        rs = f", rescaled x{self.rescale:.3f} by {self.rescaled_by or 'its refresh'}" if self.rescale != 1.0 else ""
        rs += f", recalibrated {self.recalibrated}" if self.recalibrated else ""
        out = f", EXTRAPOLATED: {self.outside}" if self.outside else ""
        how = f", {self.timing}" if self.timing else ""
        table = self.how if self.source == "rehearsal" else f"measured table on {self.device}"
        return f"{self.ms:.3f} ms ({table}{how}: {' + '.join(parts)} blocks{cal}{rs}{mm}{out})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def record(self, target: str) -> dict[str, Any]:
        """What every output stores for a predicted figure: the fields, ``label``, ``how`` and ``target``."""
        return {**self.to_dict(), "label": self.label(), "how": self.how, "target": target}


def how_predicted(source: str, device: str, rehearsal: str = "") -> str:
    """The words for a predicted figure (beside ``how_measured``).

    Args:
        source: one of ``SOURCES``.
        device: the device the figure is for (a rehearsal's: the machine that measured it).
        rehearsal: a rehearsal table's words (``Prediction.rehearsal``).

    Returns:
        ``predicted from a measured table (<device>)``, ``estimated (roofline, <device>)``, or for a
        rehearsal its words (``REHEARSAL of <target> (...) on <machine> (...)``).
    """
    if source == "estimated":
        return f"estimated (roofline, {device})"
    if source == "rehearsal":
        return rehearsal or f"REHEARSAL on {device}"
    return f"predicted from a measured table ({device})"


def on_device(source: str | None) -> bool:
    """Whether figures of ``source`` come from the target's own device (a measured table): what
    pruning and the deployment choice trust; an estimate and a rehearsal do not."""
    return source == "measured"


def unmeasured_words(source: str | None) -> str:
    """What a figure that is not from the device is, in the words warnings use: ``a roofline
    ESTIMATE`` or ``a REHEARSAL (measured on another machine through a device bundle)``."""
    if source == "rehearsal":
        return "a REHEARSAL (measured on another machine through a device bundle, not on the device)"
    return "a roofline ESTIMATE"


def timing_label(timing: str | None, kind: str = "gpu") -> str:
    """How a table was timed, in the words every label uses: ``CUDA graph`` or ``eager (host-bound)``
    on a GPU; nothing on a CPU, where eager is the only way."""
    if kind == "cpu":
        return ""
    return "CUDA graph" if timing == GRAPH else "eager (host-bound)"


def how_measured(device: str) -> str:
    """The words for a latency measured on this machine (beside ``Prediction.how``)."""
    return f"measured here ({device})"


class LatencyModel(ABC):
    """The one interface of every latency source (a fitted predictor, the roofline estimate).

    Subclasses implement ``explain`` (one ``Arch`` -> a ``Prediction``) and ``describe``; ``predict``
    maps ``explain`` over many.  ``source`` (one of ``SOURCES``), ``device`` and ``how`` say where the
    figures come from; ``warning`` and ``note`` are what to show beside them.

    Example::

        model = nas.load_latency_model(nas.load_target("cpu"))
        model.predict([a, b])   # array of milliseconds
        model.explain(a)        # Prediction
    """

    source: str = "estimated"
    device: str = ""

    @abstractmethod
    def explain(self, arch: Arch) -> Prediction:
        """Predict one Arch.

        Args:
            arch: the network.

        Returns:
            Its latency and where the figure came from.
        """

    def predict(self, archs: Sequence[Arch] | Arch) -> np.ndarray:
        """Predict many Archs.

        Args:
            archs: the networks (a single Arch gives a 1-element array).

        Returns:
            Milliseconds, one per Arch, as float64.
        """
        if isinstance(archs, Arch):
            archs = [archs]
        return np.array([self.explain(a).ms for a in archs], dtype=np.float64)

    @property
    def how(self) -> str:
        """How this model's figures are obtained, in the words every output uses (``how_predicted``)."""
        return how_predicted(self.source, self.device)

    @property
    def warning(self) -> str | None:
        """A message to show the user when the figures are not measured (else None)."""
        return None

    @property
    def note(self) -> str | None:
        """A one-line note to show beside the figures, not a warning (else None): a measured table's
        runtime version that differs from the one installed here."""
        return None

    @abstractmethod
    def describe(self) -> str: ...
