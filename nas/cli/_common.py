"""Hydra glue shared by the entry points: config registration, user-facing errors, tables."""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nas.config import CONF_DIR, alias_override, normalize_overrides, register_configs
from nas.latency.runtimes import RuntimeUnavailable

__all__ = ["check_counts", "config_error_line", "fmt_table", "hydra_app", "user_errors"]

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


def config_error_line(e: BaseException) -> str:
    """A Hydra / OmegaConf composition error as one line: an unknown option lists the valid ones."""
    text = str(e)
    m = re.search(r"Could not find '(\w+)/([^']*)'.*?Available options in '\w+':\n((?:\t[^\n]*\n?)*)", text, re.S)
    if m:
        group, value, options = m.groups()
        shown = "conf" if group == "target" else group
        return f"unknown {shown} {value!r}; {shown}= one of: {', '.join(options.split())}"
    hints = ("To append", "See https", "Set the environment", "full_key", "object_type", "reference_type")
    parts = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(hints)][:2]
    if e.__cause__ is not None and str(e.__cause__):
        parts.append(str(e.__cause__).splitlines()[0])
    parts = parts or [type(e).__name__]
    return ": ".join(p.rstrip(".") for p in parts)


def _complete(app: Callable) -> Any:
    """Hydra's bash completion query (``COMP_LINE=... hwnas-<cmd> -sc query=bash``), with ``conf=``
    completed as the ``target`` group and ``python -m nas.<cmd> ...`` lines understood."""
    words = os.environ.get("COMP_LINE", "").split(" ")
    if len(words) > 2 and words[1] == "-m":  # python -m nas.search ...
        words = words[2:]
    as_conf = words[-1].startswith(("conf=", "conf."))
    os.environ["COMP_LINE"] = " ".join([words[0], *(alias_override(w) for w in words[1:])])
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            return app()
    finally:
        out = buf.getvalue()
        if as_conf:
            out = re.sub(r"(^|\s)target([=.])", r"\1conf\2", out)
        sys.stdout.write(out)


def hydra_app(config_name: str) -> Callable:
    """``hydra.main`` over the package's conf/, with the user's targets ($HWNAS_HOME/target/) on
    the search path, ``conf=<name>`` / ``conf.<key>=`` accepted for ``target=`` / ``target.<key>=``,
    and a config mistake (an unknown option, a typo, a wrong type) reported in one line (exit 2;
    ``HYDRA_FULL_ERROR=1`` shows Hydra's full report)."""
    import hydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    def deco(fn: Callable) -> Callable:
        app = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)(fn)

        @functools.wraps(fn)
        def main() -> Any:
            sys.argv[1:] = normalize_overrides(sys.argv[1:])
            if "query=bash" in sys.argv and {"-sc", "--shell-completion"} & set(sys.argv):
                return _complete(app)
            full = os.environ.get("HYDRA_FULL_ERROR")
            os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises instead of printing its report
            try:
                return app()
            except (HydraException, OmegaConfBaseException) as e:
                if full == "1":
                    raise
                print(f"error: {config_error_line(e)}", file=sys.stderr)
                sys.exit(2)
            finally:
                if full is None:
                    os.environ.pop("HYDRA_FULL_ERROR", None)
                else:
                    os.environ["HYDRA_FULL_ERROR"] = full

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
