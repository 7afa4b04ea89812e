"""Targets: the device, runtime and precision a network is deployed on, and the table measured there.

``Target`` is what every library function takes; the Hydra schema of the ``target`` group
(``conf/target/<name>.yaml``, ``conf=<name>`` on the command line) is generated from it, and a
command turns its composed ``target`` node into a ``Target`` once (``Target.coerce``); a library
function takes that ``Target`` (``require_target`` refuses anything else).
``load_target(name)`` reads a target file by name (the user's ``$HWNAS_HOME/target/`` first, then the
shipped ones) with PyYAML; ``here`` (this machine's own target, measured on first use) is made by
``nas.latency.predict.here``, whose ``load_target`` is the public ``nas.load_target``.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from nas._checks import check_resolution
from nas._yaml import load_yaml
from nas.machine import OtherProcessorWarning, cpu_identity, device_mismatch
from nas.resources import conf_dir, user_home

__all__ = ["HERE_NAMES", "PRECISIONS", "REMOVED_FIELDS", "RUNTIME_NAMES", "Device", "Target", "load_target",
           "precision_targets", "removed_field_error", "require_target", "runs_here", "target_names"]

PRECISIONS = ("fp32", "int8")
DEVICE_KINDS = ("cpu", "gpu", "jetson")
RUNTIME_NAMES = ("onnxruntime", "torch", "torch_compile", "tensorrt", "executorch", "openvino", "litert")
TORCH_RUNTIMES = ("torch", "torch_compile")
HERE_NAMES = ("here", "here_gpu")  # this machine's own targets, made by nas.latency.predict.here
# fields a target no longer has, with why: a config, a target file or a call naming one is refused
REMOVED_FIELDS = {
    "transfer_from": "filling a briefly measured table from other devices' tables added 1.5 points of held-out "
                     "networks within ±10% to a 1-minute profile with the default method (2.7 at best), short of "
                     "the 5 points it had to add",
}


def removed_field_error(name: str) -> str | None:
    """The one-line error for a target field that was removed (``REMOVED_FIELDS``), else None."""
    why = REMOVED_FIELDS.get(name)
    return f"target.{name} was removed: {why}; drop it (see CHANGELOG.md)" if why else None


@dataclass(frozen=True)
class Device:
    """The target device, and its published peak figures for the roofline estimate."""

    # e.g. "Jetson AGX Orin 64GB"; None = whatever machine runs the command (no identity check)
    name: str | None
    kind: str  # cpu | gpu | jetson
    peak_gflops: float  # at the target precision, from the vendor's spec sheet or the microbenchmark
    mem_bandwidth_gbs: float
    # CPU ISA flags the device must have (e.g. [avx512f, avx512_vnni]), checked even when name is None
    cpu_flags: tuple[str, ...] = ()
    description: str = ""
    overhead_us: float = 5.0  # fixed cost per layer (kernel launch, dispatch)
    spec_source: str = ""  # where the peak figures come from

    def __post_init__(self) -> None:
        if self.kind not in DEVICE_KINDS:
            raise ValueError(f"device.kind must be one of {', '.join(DEVICE_KINDS)}, got {self.kind!r}")
        for f in ("peak_gflops", "mem_bandwidth_gbs"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ValueError(f"device.{f} must be a positive number, got {v!r}")
        object.__setattr__(self, "cpu_flags", tuple(self.cpu_flags or ()))


@dataclass(frozen=True)
class Target:
    """One deployment target (``conf=<name>``): the device, how a network runs there, and its latency table.

    Args:
        name: the target's name (its file's stem).
        device: the device and its roofline figures (a ``Device``, or a dict of its fields).
        latency_budget_ms: the latency a searched network may spend on this target (a search's default budget).
        runtime: ``onnxruntime``, ``torch``, ``torch_compile``, ``tensorrt``, ``executorch``, ``openvino`` or ``litert``.
        provider: onnxruntime's execution provider (torch's device for the torch runtimes).
        precision: ``fp32``, ``fp16`` or ``int8``.
        batch: the deployment batch size.
        threads: the runtime's intra-op threads.
        resolution: the deployment input resolution; None: the space's own.
        table: the measured latency table (a file in the tables dirs, or a path); None: roofline estimate.
        cuda_graph: blocks and networks are timed as CUDA-graph replays (a GPU target only).

    Raises:
        ValueError: a field out of range, named with the value received and what is allowed.

    Example:
        >>> import nas
        >>> t = nas.load_target("cpu")
        >>> t.replace(threads=2).threads
        2
    """

    name: str
    device: Device
    latency_budget_ms: float
    runtime: str = "onnxruntime"  # onnxruntime | torch | torch_compile | tensorrt | executorch | openvino | litert
    provider: str = "CPUExecutionProvider"  # onnxruntime execution provider
    precision: str = "fp32"  # fp32 | fp16 | int8
    batch: int = 1
    threads: int = 1
    resolution: int | None = None  # deployment resolution; None = the space's own
    table: str | None = None  # a file in the tables dirs (or a path); None = roofline estimate
    # the deployment replays CUDA graphs (TensorRT, onnxruntime's enable_cuda_graph, torch.compile's
    # reduce-overhead): blocks and networks are timed as graph replays on the GPU; false times eager calls,
    # which at batch 1 measure the host's dispatch ("eager (host-bound)" in every label)
    cuda_graph: bool = False

    def __post_init__(self) -> None:
        if self.precision not in ("fp32", "fp16", "int8"):
            raise ValueError(f"target.precision must be fp32, fp16 or int8, got {self.precision!r}")
        for f in ("batch", "threads"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"target.{f} must be a positive integer, got {v!r}")
        if self.resolution is not None:
            check_resolution("target.resolution", self.resolution)
        if isinstance(self.device, Mapping):
            object.__setattr__(self, "device", Device(**dict(self.device)))
        gpu = self.device.kind in ("gpu", "jetson")
        if self.runtime in TORCH_RUNTIMES and self.provider in ("", None, "CPUExecutionProvider"):
            object.__setattr__(self, "provider", "cuda" if gpu else "cpu")  # torch's "provider" is its device
        if not isinstance(self.cuda_graph, bool):
            raise ValueError(f"target.cuda_graph must be true or false, got {self.cuda_graph!r}")
        if self.cuda_graph and not (gpu and (self.runtime in TORCH_RUNTIMES or (
                self.runtime == "onnxruntime" and self.provider == "CUDAExecutionProvider"))):
            raise ValueError(
                f"target.cuda_graph=true needs a GPU (device.kind gpu or jetson) with runtime torch, torch_compile "
                f"or onnxruntime's CUDAExecutionProvider; target {self.name!r} has {self.device.kind}, "
                f"{self.runtime}{f' ({self.provider})' if self.runtime == 'onnxruntime' else ''}: "
                "set cuda_graph=false")

    @property
    def timing(self) -> str:
        """How this target's latency is timed: ``cuda_graph`` (replays) or ``eager``."""
        return "cuda_graph" if self.cuda_graph else "eager"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Target:
        """A Target from its fields (``to_dict``'s form; ``device`` a dict).

        Raises:
            ValueError: an unknown or removed field (listing the valid ones; a removed one with why) or a
                value out of range.
        """
        d = dict(d)
        for name in d:
            if removed_field_error(name):
                raise ValueError(removed_field_error(name))
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"target: unknown field(s) {unknown}; valid fields: {sorted(known)}")
        dev = d.get("device")
        if isinstance(dev, Mapping):
            dknown = {f.name for f in dataclasses.fields(Device)}
            bad = sorted(set(dev) - dknown)
            if bad:
                raise ValueError(f"target.device: unknown field(s) {bad}; valid fields: {sorted(dknown)}")
            d["device"] = Device(**dict(dev))
        return cls(**d)

    @classmethod
    def coerce(cls, t: Target | Mapping[str, Any] | DictConfig) -> Target:
        """A Target from a Target (returned as it is), a dict or a composed Hydra/OmegaConf node: what a
        command does once with its config's ``target`` before calling the library.

        Raises:
            ValueError: as ``from_dict``.
        """
        if isinstance(t, Target):
            return t
        if isinstance(t, DictConfig):
            t = OmegaConf.to_container(t, resolve=True)
        return cls.from_dict(t)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data (lists for tuples), as ``from_dict`` reads them back."""
        d = dataclasses.asdict(self)
        d["device"]["cpu_flags"] = list(self.device.cpu_flags)
        return d

    def replace(self, **changes: Any) -> Target:
        """A copy with ``changes`` applied (checked as a new Target is)."""
        return dataclasses.replace(self, **changes)


def require_target(target: object, what: str = "target") -> Target:
    """``target`` itself, when it is a ``Target``: what a library function checks its argument with.

    Args:
        target: the value given.
        what: the argument's name, for the message.

    Returns:
        ``target``.

    Raises:
        TypeError: ``target`` is not a ``Target`` (the message names ``nas.load_target``, which makes one
            from a name).
    """
    if not isinstance(target, Target):
        raise TypeError(f"{what} must be a Target (nas.load_target(name)), got {type(target).__name__}")
    return target


def _target_dirs() -> list[Path]:
    return [user_home() / "target", conf_dir() / "target"]


def target_names() -> list[str]:
    """Every target name: the shipped ones, the user's own (``$HWNAS_HOME/target/``), ``here`` (this
    machine's CPU) and ``here_gpu`` (its GPU)."""
    return sorted(set(HERE_NAMES) | {p.stem for d in _target_dirs() if d.is_dir() for p in d.glob("*.yaml")})


def load_target(name: str) -> Target:
    """A target file by name, read with PyYAML and checked field by field.

    The user's ``$HWNAS_HOME/target/<name>.yaml`` comes first, then the shipped
    ``conf/target/<name>.yaml``; a file's Hydra ``defaults`` list is skipped.  A CPU target naming
    another processor than this machine's warns (``OtherProcessorWarning``).

    Args:
        name: a target's name (``target_names()``).  ``here`` / ``here_gpu`` (this machine's own, measured
            on first use) are made by ``nas.load_target``; a ``here_<slug>`` already made is read here.

    Returns:
        The ``Target``.

    Raises:
        ValueError: an unknown name (listing the targets), ``here`` / ``here_gpu``, or a file whose fields
            are unknown or out of range.

    Example:
        >>> from nas.target import load_target
        >>> load_target("cpu_int8").precision
        'int8'
    """
    if name in HERE_NAMES:
        raise ValueError(f"target {name!r} is this machine's own, made on first use: call nas.load_target({name!r}) "
                         "(nas.latency.predict.here.load_target)")
    path = next((d / f"{name}.yaml" for d in _target_dirs() if (d / f"{name}.yaml").is_file()), None)
    if path is None:
        raise ValueError(f"unknown target {name!r}; targets: {', '.join(target_names())}")
    raw = load_yaml(path) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"target file {path} is not a mapping of fields")
    raw.pop("defaults", None)
    target = Target.from_dict(_typed(raw))
    _warn_other_processor(target)
    return target


def _typed(raw: dict[str, Any]) -> dict[str, Any]:
    """A target file's fields with YAML's ints where the schema has floats (``peak_gflops: 150``)."""
    out = dict(raw)
    if isinstance(out.get("latency_budget_ms"), int) and not isinstance(out["latency_budget_ms"], bool):
        out["latency_budget_ms"] = float(out["latency_budget_ms"])
    dev = out.get("device")
    if isinstance(dev, dict):
        out["device"] = {k: float(v) if k in _DEVICE_FLOATS and isinstance(v, int) and not isinstance(v, bool) else v
                         for k, v in dev.items()}
    return out


_DEVICE_FLOATS = ("peak_gflops", "mem_bandwidth_gbs", "overhead_us")


def _warn_other_processor(target: Target) -> None:
    """Warn (``OtherProcessorWarning``) when a CPU target names a processor this machine is not: its
    latencies are that processor's.  The commands print the same as a ``WARNING:`` line instead."""
    if target.device.kind != "cpu" or not target.device.name:
        return
    why = device_mismatch(target.to_dict()["device"], cpu_identity())
    if why:
        warnings.warn(f"target {target.name!r} is {target.device.name!r} and {why}: its latencies are that "
                      "processor's; nas.load_target('here') is this machine's own target", OtherProcessorWarning,
                      stacklevel=3)


def precision_targets(target: Target, names: Mapping[str, str | None] | None = None) -> dict[str, Target | None]:
    """The target predicting each exported precision: ``names[prec]`` when given, else ``target``
    itself when its precision matches (an fp16 target predicts the fp32 export), else its sibling by
    name (cpu <-> cpu_int8, jetson <-> jetson_int8) if there is one."""
    names = dict(names or {})
    out: dict[str, Target | None] = {}
    for prec in PRECISIONS:
        name = names.get(prec)
        if name:
            t = load_target(name)
            if not _serves(t, prec):
                raise ValueError(f"targets.{prec}={name!r} is a {t.precision} target; name a {prec} one")
            out[prec] = t
            continue
        if _serves(target, prec):
            out[prec] = target
            continue
        sib = f"{target.name}_int8" if prec == "int8" else target.name.removesuffix("_int8")
        try:
            t = load_target(sib)
        except ValueError:
            out[prec] = None
            continue
        out[prec] = t if _serves(t, prec) else None
    return out


def _serves(t: Target, prec: str) -> bool:
    """Whether ``t`` predicts the exported ``prec``: its own precision, or fp16 for the fp32 export
    (TensorRT builds its fp16 engine from the fp32 ONNX file)."""
    return t.precision == prec or (prec == "fp32" and t.precision == "fp16")


def runs_here(target: Target) -> bool:
    """Whether ``target`` is this machine's CPU with onnxruntime (so its latency can be measured here)."""
    return (target.runtime == "onnxruntime" and target.provider == "CPUExecutionProvider"
            and target.device.kind == "cpu"
            and device_mismatch(target.to_dict()["device"], cpu_identity()) is None)
