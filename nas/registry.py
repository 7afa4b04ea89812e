"""One registry helper for every name -> object registry (block kinds, costs, datasets,
evaluators, samplers, runtimes).

A name registered twice is an error; an unknown name is a ``ValueError`` that lists the valid
ones.  Written here because the registries need exactly this and nothing more (timm's and
Hydra's registries are tied to models and configs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

__all__ = ["Registry"]

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
