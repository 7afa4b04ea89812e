"""The latency model for a target: ``load_latency_model`` picks a predictor fitted on the target's
measured table or, without a table, the roofline estimate (``RooflineModel``), and warns when a CPU
table was measured on another processor.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nas.arch import Arch
from nas.latency import runtimes
from nas.latency.predict.here import is_here_name, load_target, profile_command
from nas.latency.predict.predictor import LatencyPredictor
from nas.latency.predict.roofline import Roofline
from nas.latency.predict.versions import runtime_note
from nas.latency.tables import LatencyModel, LatencyTable, Prediction, TableError, require_entries, resolve_table_path
from nas.machine import OtherProcessorWarning
from nas.target import Target, removed_field_error, require_target

__all__ = ["RooflineModel", "elsewhere_warning", "load_latency_model", "resolve_target"]


def resolve_target(target: Target | str | Mapping[str, Any]) -> Target:
    """The ``Target`` a public entry point was given: a ``Target`` as it is, a name read with
    ``nas.load_target`` (``here`` included), or a dict of its fields (``Target.to_dict``'s form).

    Raises:
        TypeError: anything else.
        ValueError: an unknown name, or fields unknown or out of range.
    """
    if isinstance(target, str):
        return load_target(target)
    if isinstance(target, Mapping):
        return Target.coerce(target)
    return require_target(target)


class RooflineModel(LatencyModel):
    """The roofline ESTIMATE for a target without a measured table (``source = "estimated"``).

    Args:
        target: the ``Target``; its device's peak figures drive the estimate.
        reason: why there is no measured table, shown in ``warning``.
    """

    source = "estimated"

    def __init__(self, target: Target, *, reason: str = "") -> None:
        self.target = require_target(target)
        self.roofline = Roofline.from_target(self.target)
        self.device = self.roofline.device
        self.reason = reason

    def explain(self, arch: Arch) -> Prediction:
        return Prediction(ms=self.roofline.predict_arch(arch), source="estimated", device=self.device,
                          n_estimated=len(arch.keys()))

    @property
    def warning(self) -> str:
        name = self.target.name
        why = f" ({self.reason})" if self.reason else ""
        if is_here_name(name):
            return (f"latency for this machine (conf=here, target {name!r}) is an ESTIMATE (roofline from the "
                    f"peak figures measured here){why}. Measure its table: `{profile_command(name)}`.")
        return (
            f"latency for target {name!r} is an ESTIMATE (roofline from {self.device}'s published specs){why}. "
            f"Build the measured table on the device: `{profile_command(name)}` "
            f"(or, without torch there, `{profile_command(name)} bundle=<dir>`)."
        )

    def describe(self) -> str:
        return self.roofline.describe()


def load_latency_model(target: Target | str | Mapping[str, Any], *, allow_mismatch: bool = False,
                       table_path: str | Path | None = None, **predictor_kw: Any) -> LatencyModel:
    """The latency model for a target: a predictor fitted on its measured table, else a roofline estimate.

    Args:
        target: the deployment target: a ``Target``, a target name (read with ``nas.load_target``) or
            a dict of its fields.
        allow_mismatch: accept a table whose runtime, provider or device differs from the target's
            (the differences are kept in the model's ``warning``).
        table_path: a table to use instead of the target's own ``table``.
        **predictor_kw: ``LatencyPredictor`` parameters.

    Returns:
        A fitted ``LatencyPredictor``; a ``RooflineModel`` labelled
        ``estimated`` when the target names no table or its file is missing.

    Raises:
        TypeError: ``target`` is none of those.
        ValueError: an unknown target name, target fields unknown or out of range, or a removed
            option (``transfer_from``).
        TableError: the table does not fit the target (and ``allow_mismatch`` is not set).

    Warns:
        OtherProcessorWarning: a CPU target's table was measured on another processor than this
            machine's (also in the model's ``warning``).

    Example::

        model = nas.load_latency_model(nas.load_target("cpu"))
        model.predict([arch])           # milliseconds
        model.explain(arch).label       # where the number came from
    """
    for k in predictor_kw:
        if removed_field_error(k):
            raise ValueError(removed_field_error(k))
    target = resolve_target(target)
    name = table_path or target.table
    if not name:
        return RooflineModel(target, reason="the target names no table")
    path = resolve_table_path(name)
    if not path.is_file():
        return RooflineModel(target, reason=f"no measured table at {path}")
    table = require_entries(LatencyTable.load(path), target=target)
    try:
        diffs = table.check_target(target, allow_mismatch=allow_mismatch)
    except TableError:
        raise
    model = LatencyPredictor(**predictor_kw).fit(table, mismatched=bool(diffs))
    model.annotate(warning=elsewhere_warning(target, table), note=runtime_note(target, table.metadata))
    if model.warning:
        warnings.warn(model.warning, OtherProcessorWarning, stacklevel=2)
    return model


def _cpu_line(dev: Mapping[str, Any]) -> str:
    fam = f"family {dev['cpu_family']} model {dev['cpu_model']}; " if dev.get("cpu_family") is not None else ""
    return f"{dev.get('name') or dev.get('cpu') or '?'} ({fam}{', '.join(dev.get('cpu_flags') or ()) or 'no ISA flags'})"


def elsewhere_warning(target: Target, table: LatencyTable, here: Mapping[str, Any] | None = None) -> str | None:
    """The warning for a CPU target whose table was measured on another processor than this machine's.

    Only a table recording this machine's CPU architecture (``device.machine``, e.g. x86_64) counts:
    one of another kind of device (a Jetson, a GPU) or another architecture (an ARM board measured
    through a bundle) describes a remote device, which a search from here is expected to use, and one
    recording no architecture cannot be judged.

    Args:
        target: the target.
        table: its measured table.
        here: this machine's identity (default: ``device_identity("cpu")``).

    Returns:
        The warning's text, or None.
    """
    meta = table.metadata.get("device") or {}
    if target.device.kind != "cpu" or meta.get("kind", "cpu") != "cpu":
        return None
    if here is None:
        here = runtimes.device_identity("cpu")  # looked up at call time: tests stand in for this machine
    if not meta.get("machine") or meta["machine"] != here.get("machine"):
        return None
    why = table.measured_elsewhere(dict(here))
    if why is None:
        return None
    where = table.path.name if table.path else "the latency table"
    return (f"{where} (target {target.name!r}) was measured on ANOTHER PROCESSOR than the one this runs on:\n"
            f"  table: {_cpu_line(meta)}\n"
            f"  here:  {_cpu_line(here)}\n"
            f"  Its latencies are that processor's ({why}); rankings and budgets may not hold on this one.\n"
            f"  Measure this machine's own table: {_own_table(target)}.")


def _own_table(target: Target) -> str:
    """How to measure this machine's own table: for a target naming no device (any CPU), the same
    target (its table goes to the user's tables folder, read before the shipped one); else conf=here."""
    if target.device.name is None:
        return f"`{profile_command(target.name)}` (written to your tables folder, used before the shipped table)"
    return f"`{profile_command('here')}`, then use conf=here"
