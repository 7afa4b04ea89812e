"""Lazy package exports (PEP 562): a package names what it offers, and the module that defines a
name is imported on the name's first use.  Importing a package (a command's config, a settings
module that names one constant) then loads no torch, timm or scikit-learn it does not use.

Our own because the standard library defers whole modules (``importlib.util.LazyLoader``), not a
package's names, and the ``lazy_loader`` package would be a dependency for twenty lines."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``homes`` maps each exported name to the module
    that defines it: a dotted path (``nas.narrow``), or a bare name for a submodule of ``package``
    (``prune``).  Nothing is cached in
    the package: a name always resolves to its module's current object (a test's monkeypatch included)."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home if "." in home else f"{package}.{home}"), name)

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(homes))

    return __getattr__, __dir__
