"""One registry helper for every name -> object registry (block kinds, costs, datasets,
evaluators, samplers, runtimes).

A name registered twice is an error; an unknown name is a ``ValueError`` that lists the valid
ones.  ``SettingsRegistry`` adds what the samplers and pruners share: each builder registered
with its settings dataclass, a config group read into those settings, and settings mapped back to
their builder.  Written here because the registries need exactly this and nothing more (timm's and
Hydra's registries are tied to models and configs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["Registry", "SettingsRegistry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Objects by unique name: each registered once, an unknown name refused with the valid ones.

    ``reg[name]`` returns the object registered under ``name``, and raises ``ValueError`` naming
    the unknown name and listing the valid ones; ``name in reg``, ``len(reg)`` and iteration (the
    names, sorted) work as for a mapping.

    Args:
        what: What one object is, for messages (``"runtime"``).
        plural: Its plural, for messages; default ``what + "s"``.

    Example:
        >>> from nas.registry import Registry
        >>> runtimes = Registry("runtime")
        >>> @runtimes.register("onnxruntime")
        ... def ort(): ...
        >>> runtimes["onnxruntime"] is ort
        True
        >>> runtimes["onxruntime"]
        Traceback (most recent call last):
        ...
        ValueError: unknown runtime 'onxruntime'; valid runtimes: onnxruntime
    """

    def __init__(self, what: str, *, plural: str | None = None) -> None:
        self.what = what
        self.plural = plural or f"{what}s"
        self._items: dict[str, T] = {}

    def register(self, name: str, *, tag: str | None = None) -> Callable[[T], T]:
        """Register the decorated object under ``name``.

        Args:
            name: The name.
            tag: An attribute of the object to set to ``name``
                (``@BLOCKS.register("ir", tag="kind")`` gives the class ``kind = "ir"``).

        Returns:
            The decorator, which returns the object unchanged.

        Raises:
            ValueError: ``name`` is registered already (when the decorator is applied).
        """

        def deco(obj: T) -> T:
            self.add(name, obj)
            if tag is not None:
                setattr(obj, tag, name)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        """Register ``obj`` under ``name``.

        Raises:
            ValueError: ``name`` is registered already (the message names what holds it).
        """
        if name in self._items:
            have = getattr(self._items[name], "__name__", repr(self._items[name]))
            raise ValueError(f"{self.what} {name!r} is already registered by {have}")
        self._items[name] = obj

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._items)

    def __getitem__(self, name: str) -> T:
        try:
            return self._items[name]
        except (KeyError, TypeError):
            raise ValueError(f"unknown {self.what} {name!r}; valid {self.plural}: {', '.join(self.names())}") from None

    def get(self, name: str, default: T | None = None) -> T | None:
        """The object registered under ``name``, else ``default`` (no error)."""
        return self._items.get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[tuple[str, T]]:
        """``(name, object)`` pairs, sorted by name."""
        return [(n, self._items[n]) for n in self.names()]


class SettingsRegistry(Registry[tuple[type, Callable[..., Any]]]):
    """Builders by name, each with its settings: a frozen dataclass subclassing ``base`` (the samplers', the
    pruners').  A config group ``{"name": ..., <settings>}`` is read into the name's settings (``read``), and
    settings find the builder they were registered with (``builder_for``).

    Args:
        what: What one builder makes, for messages and the config group's name (``"sampler"``).
        base: The class every registered settings class subclasses.
    """

    def __init__(self, what: str, base: type) -> None:
        super().__init__(what)
        self.base = base

    def register_builder(self, name: str, settings: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register the decorated builder under ``name`` with its settings class.

        Raises:
            TypeError: ``settings`` is not a dataclass subclassing ``base``.
            ValueError: ``name`` is registered already (when the decorator is applied).
        """
        if not (isinstance(settings, type) and issubclass(settings, self.base) and dataclasses.is_dataclass(settings)):
            raise TypeError(f"{self.what} {name!r}: its settings must be a dataclass subclassing "
                            f"{self.base.__name__}, got {settings!r}")

        def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.add(name, (settings, fn))
            return fn

        return deco

    def settings_class(self, name: str) -> type:
        """The settings class registered under ``name``; an unknown name is a ``ValueError`` naming
        ``<what>.name`` and listing the valid ones."""
        try:
            return self[name][0]
        except ValueError as e:
            raise ValueError(f"{self.what}.name: {e}") from None

    def read(self, cfg: Mapping[str, Any]) -> Any:
        """The settings of a config group: ``{"name": "nsga2", "population_size": 16}`` ->
        ``NSGA2Settings(population_size=16)``; an unknown name or setting is a ``ValueError`` listing the valid ones."""
        d = dict(cfg)
        name = d.pop("name", None)
        cls = self.settings_class(name)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"{self.what} {name!r}: unknown setting(s) {unknown}; valid settings: {sorted(names)}")
        return cls(**d)

    def builder_for(self, settings: Any) -> tuple[str, Callable[..., Any]]:
        """The name and builder ``settings``' class was registered with.

        Raises:
            ValueError: settings of no registered builder.
        """
        for name, (cls, fn) in self.items():
            if cls is type(settings):
                return name, fn
        raise ValueError(f"{type(settings).__name__} is not the settings class of a registered {self.what} "
                         f"({', '.join(self.names())})")
