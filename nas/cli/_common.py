"""Hydra glue shared by the entry points: config registration, user-facing errors, tables."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nas.config import CONF_DIR, normalize_overrides, register_configs
from nas.latency.runtimes import RuntimeUnavailable

__all__ = ["check_counts", "fmt_table", "hydra_app", "user_errors"]

register_configs()


def user_errors(fn: Callable) -> Callable:
    """Turn the library's ValueError/FileNotFoundError into a one-line message and exit 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ValueError, FileNotFoundError, KeyError, RuntimeUnavailable) as e:
            logging.getLogger("nas").debug("error", exc_info=True)
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)

    return wrapper


def hydra_app(config_name: str) -> Callable:
    """``hydra.main`` over the package's conf/, with the user's targets ($HWNAS_HOME/target/) on
    the search path and ``conf=<name>`` / ``conf.<key>=`` accepted for ``target=`` / ``target.<key>=``."""
    import hydra

    def deco(fn: Callable) -> Callable:
        app = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)(fn)

        @functools.wraps(fn)
        def main() -> Any:
            sys.argv[1:] = normalize_overrides(sys.argv[1:])
            return app()

        return main

    return deco


def check_counts(cfg: Any, counts: Mapping[str, str]) -> None:
    """A clear error for a negative count option: ``counts`` maps option name -> what it counts."""
    for opt, what in counts.items():
        if cfg[opt] < 0:
            raise ValueError(f"{opt}={cfg[opt]}: a count of {what}, 0 or more")


def fmt_table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells[0], widths))), line]
    for r in cells[1:]:
        out.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(out)
