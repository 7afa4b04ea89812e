"""What every stage of the train pipeline reads: the settings, the data, the search run, the targets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nas.data import Dataset
from nas.latency.tables import LatencyModel
from nas.target import Target
from nas.train.search_run import SearchRun
from nas.train.settings import PipelineSettings

__all__ = ["PipelineContext"]


@dataclass
class PipelineContext:
    """One run of ``nas.train``'s pipeline, as its stages (train, prune, QAT, export) see it.

    Attributes:
        s: the run's settings.
        data: the full training data, at the deployment resolution.
        run: the search run whose front is trained.
        multiple: the channel multiple pruning keeps (the search space's).
        se_ratio: the space's squeeze-excitation ratio (pruning keeps it), None without one.
        targets: precision (``fp32``, ``int8``) -> the target its exports are predicted and measured for.
        models: precision -> its target's latency model, None where it has none.
        guide: the latency model guiding pruning (the conf target's).
        measure_here: precision -> whether this machine is that target (its exports are measured here).
        supernet: the supernet and its record, where the networks start from its weights.
    """

    s: PipelineSettings
    data: Dataset
    run: SearchRun
    multiple: int
    se_ratio: float | None
    targets: dict[str, Target]
    models: dict[str, LatencyModel | None]
    guide: LatencyModel
    measure_here: dict[str, bool]
    supernet: tuple[Any, dict[str, Any]] | None = None
