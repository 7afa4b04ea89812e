"""Hydra schemas generated from the library's dataclasses: ``schema_from(cls)`` copies a settings
class's fields, types and defaults into a mutable schema (tuples as lists, nested dataclasses as nested
schemas, a field without a default required, ``???``), so each setting is written once, in the library.
``TargetConfig`` (the ``target`` group) and ``MeasureConfig`` (``profile.<key>``) are made here.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from dataclasses import field
from typing import Any

from omegaconf import MISSING

from nas.latency.runtimes import ProfileSettings
from nas.target import Device, Target

__all__ = ["DeviceConfig", "MeasureConfig", "TargetConfig", "ValidateMeasureConfig", "defaults_of", "schema_from"]


def _hydra_type(tp: Any) -> Any:
    """``tp`` as OmegaConf types it: tuples become lists (``tuple[str, ...]`` -> ``list[str]``)."""
    args = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if origin is tuple:
        return list[args[0]] if args else list  # type: ignore[valid-type]
    if origin in (typing.Union, types.UnionType):
        out = None
        for a in args:
            a = _hydra_type(a)
            out = a if out is None else out | a
        return out
    return tp


def _nested_dataclass(tp: Any) -> type | None:
    """The dataclass ``tp`` names (``Device`` or ``Device | None``), else None."""
    for t in (tp, *typing.get_args(tp)):
        if isinstance(t, type) and dataclasses.is_dataclass(t):
            return t
    return None


def _default(f: dataclasses.Field) -> Any:
    """A schema field's default: the library's own, tuples as lists; no default -> ``MISSING`` (``???``)."""
    if f.default is not dataclasses.MISSING:
        v = f.default
        return field(default_factory=lambda v=v: list(v)) if isinstance(v, tuple) else field(default=v)
    if f.default_factory is not dataclasses.MISSING:
        make = f.default_factory
        return field(default_factory=lambda: (lambda v: list(v) if isinstance(v, tuple) else v)(make()))
    return field(default=MISSING)


def schema_from(cls: type, *, name: str | None = None, schema_name: str, exclude: tuple[str, ...] = ()) -> type:
    """A mutable Hydra schema with ``cls``'s fields, types and defaults.

    A field typed by a dataclass gets a nested schema (``Device`` -> ``DeviceConfig``) built by its
    ``default_factory``; a tuple becomes a list; a field without a default is required (``???``).

    Args:
        cls: the library's settings dataclass.
        name: a group option's name (``"nsga2"``): the schema is led by a ``name`` field with this default.
        schema_name: the generated class's name.
        exclude: fields left out (settings that do nothing in this command: typing one is refused).

    Returns:
        The schema class, for ``ConfigStore.store``; a composed node of it reads back into ``cls``
        with ``cls(**node)`` (or the class's own ``from_dict``).

    Example:
        >>> from nas.search.samplers import NSGA2Settings
        >>> NSGA2Config = schema_from(NSGA2Settings, name="nsga2", schema_name="NSGA2Config")
        >>> NSGA2Config().name
        'nsga2'
    """
    hints = typing.get_type_hints(cls)
    fields: list[tuple[str, Any, Any]] = []
    if name is not None:
        fields.append(("name", str, field(default=name)))
    for f in dataclasses.fields(cls):
        if (f.name == "name" and name is not None) or f.name in exclude:
            continue
        nested = _nested_dataclass(hints[f.name])
        if nested is not None:
            sub = schema_from(nested, schema_name=f"{nested.__name__}Config")
            fields.append((f.name, sub, field(default_factory=sub)))
            continue
        fields.append((f.name, _hydra_type(hints[f.name]), _default(f)))
    schema = dataclasses.make_dataclass(schema_name, fields)
    schema.__module__ = __name__
    schema.__doc__ = f"Hydra schema generated from {cls.__module__}.{cls.__name__}."
    return schema


DeviceConfig = schema_from(Device, schema_name="DeviceConfig")
TargetConfig = schema_from(Target, schema_name="TargetConfig")


MeasureConfig = schema_from(ProfileSettings, schema_name="MeasureConfig")
#: nas.validate's ``profile`` group: how it times networks; ``watch`` guards a table's measurements, which
#: nas.validate does not write, so ``profile.watch=`` is refused there
ValidateMeasureConfig = schema_from(ProfileSettings, schema_name="ValidateMeasureConfig", exclude=("watch",))


def defaults_of(fn: Any) -> dict[str, Any]:
    """The defaults of what a command calls, for its schema's fields: a command's setting keeps the
    library's default instead of a copy of it.

    Args:
        fn: a function (its keyword defaults) or a dataclass (its fields' defaults).

    Returns:
        ``{name: default}`` for every parameter or field that has one.

    Example:
        >>> from nas.search.study import run_search
        >>> defaults_of(run_search)["max_consecutive_failures"]
        10
    """
    if dataclasses.is_dataclass(fn):
        return {f.name: f.default for f in dataclasses.fields(fn) if f.default is not dataclasses.MISSING}
    return {k: p.default for k, p in inspect.signature(fn).parameters.items() if p.default is not inspect.Parameter.empty}
