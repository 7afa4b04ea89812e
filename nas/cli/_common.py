"""Hydra glue shared by the entry points: config registration, user-facing errors, tables."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import errno
import functools
import io
import logging
import os
import re
import signal
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from hydra.errors import HydraException, OverrideParseException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

import nas.config  # its compose_app (every command's schemas) loads on a config error only
from nas._io import Busy, hide_passwords, shell_join
from nas._yaml import YamlError, check_yaml
from nas.cli._help import annotate_help
from nas.config import CONF_DIR, alias_override, normalize_overrides, register_configs, user_search_path
from nas.machine import OtherProcessorWarning, RuntimeUnavailable
from nas.resources import user_home
from nas.target import removed_field_error

__all__ = [
    "VERBOSE_FLAGS", "Stopped", "check_counts", "config_error_line", "environment_error_line", "file_error",
    "fmt_table", "folder_error", "hydra_app", "interruption", "is_full", "unexpected_error_lines", "unknown_option_line",
    "user_errors", "user_override", "writing_into",
]

#: Command-line flags that show the full traceback of a failure and turn on debug logging.
VERBOSE_FLAGS = ("-v", "--verbose")
_TRACEBACK_HINT = "(add -v to the command, or set HYDRA_FULL_ERROR=1, for the full traceback)"

register_configs()


class Stopped(KeyboardInterrupt):
    """A SIGTERM (``kill``, a scheduler ending the job), raised in the main thread as Ctrl-C's
    ``KeyboardInterrupt`` is, so a command stops as it does for Ctrl-C: what it finished is kept, and
    it says how to continue."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def interruption(e: KeyboardInterrupt) -> tuple[str, int]:
    """How a command reports ``e``: (``interrupted`` or ``stopped by SIGTERM``, its exit code: 130 for
    Ctrl-C, 128 + the signal's number for a ``Stopped``)."""
    if isinstance(e, Stopped):
        return str(e), 128 + e.signum
    return "interrupted", 130


@contextlib.contextmanager
def _stop_on_sigterm() -> Any:
    """While the block runs, a SIGTERM raises ``Stopped`` in the main thread (once: a second SIGTERM
    ends the process at once, as by default)."""
    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Stopped(signum)

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread (a command called from a thread): the default stands
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def user_errors(fn: Callable) -> Callable:
    """Turn the library's ValueError/FileNotFoundError (and ``Busy``: another process writes the same
    run or table) into a one-line message and exit 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ValueError, FileNotFoundError, KeyError, RuntimeUnavailable, Busy) as e:
            logging.getLogger("nas").debug("error", exc_info=True)
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)

    return wrapper


def unexpected_error_lines(e: BaseException) -> str:
    """An unexpected failure as ``error: <Type>: <first line of its message>`` and how to see the traceback."""
    first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
    return f"error: {type(e).__name__}: {first}".rstrip(": ") + f"\n       {_TRACEBACK_HINT}"


#: options one command has and another refuses: why, for the one that refuses
_ELSEWHERE = {"profile.watch": "it is nas.profile's: it keeps what the machine misled out of the table it writes, and "
                               "this command writes no table"}


def unknown_option_line(key: str, valid: Iterable[str], *, asked: str | None = None) -> str:
    """``unknown option 'n_trial'; did you mean n_trials=?`` for ``key`` (dotted: the last part is
    matched within its group) among the ``valid`` names at its level.  ``asked``: the option the
    user gave when ``key`` is a level above it that does not exist (``data`` of ``data.num_workers``
    where the command has no ``data`` group): the line names both, and lists ``key``'s level."""
    if key in _ELSEWHERE:
        return f"unknown option {key!r}; {_ELSEWHERE[key]}"
    group, _, last = key.rpartition(".")
    valid = sorted(set(valid))
    close = difflib.get_close_matches(last, valid, n=1, cutoff=0.6)
    where = f"{group}." if group else ""
    head = (f"unknown option {key!r}" if asked is None or asked == key
            else f"unknown option {asked!r} (no option {key!r} here)")
    if close:
        return f"{head}; did you mean {where}{close[0]}=?"
    return f"{head}; {'options of ' + group if group else 'options'}: {', '.join(valid)}"


def _option_names(schema: Any) -> list[str] | None:
    """The option names of a schema dataclass (``conf`` beside ``target``), else None."""
    if not (isinstance(schema, type) and dataclasses.is_dataclass(schema)):
        return None
    names = [f.name for f in dataclasses.fields(schema)]
    return names + ["conf"] if "target" in names else names


def _quote_hint(e: BaseException) -> str | None:
    """An override Hydra's grammar cannot read (unquoted non-ASCII letters, spaces, brackets) as one
    line that shows it quoted, else None."""
    if not isinstance(e, OverrideParseException):
        return None
    shown = hide_passwords(e.override)  # never a password on the screen
    key, eq, value = shown.partition("=")
    why = (str(e.message).strip().splitlines() or ["cannot parse it"])[0].split(":")[0]
    quoted = f"\"{key}='{value}'\"" if eq and "'" not in value else "the value in quotes"
    if shown != e.override:
        quoted += " (with your password in place of ***)"
    return (f"cannot read the option {shown!r} ({why}); a value with characters other than ASCII letters, "
            f"digits and _-+./: must be quoted for Hydra, inside the shell's quotes: {quoted}")


def _removed_field_line(text: str) -> str | None:
    """A target file (``In 'target/<name>'``) that sets a removed field: its one-line error, else None."""
    m = re.search(r"Key '(\w+)' not in 'TargetConfig'", text)
    line = removed_field_error(m.group(1)) if m else None
    where = re.search(r"In '(target/[^']+)'", text)
    return f"{where.group(1)}.yaml: {line}" if line and where else line


def config_error_line(e: BaseException) -> str:
    """A Hydra / OmegaConf composition error as one line: an unknown option lists the valid ones,
    a mistyped key names the closest one, an override the grammar cannot read shows how to quote it."""
    hint = _quote_hint(e)
    if hint:
        return hint
    text = str(e)
    cause = e.__cause__
    removed = _removed_field_line(text)
    if removed:
        return removed
    m = re.match(r"Could not override '([^']+)'", text)
    names = _option_names(getattr(cause, "object_type", None))
    if m and names is not None and "not in" in str(cause):
        asked = user_override(m.group(1))
        missing = user_override(str(getattr(cause, "full_key", "") or m.group(1)))  # the level that lacks it
        return unknown_option_line(missing, names, asked=asked)
    m = re.search(r"Could not find '(\w+)/([^']*)'.*?Available options in '\w+':\n((?:\t[^\n]*\n?)*)", text, re.S)
    if m:
        group, value, options = m.groups()
        shown = "conf" if group == "target" else group
        return f"unknown {shown} {value!r}; {shown}= one of: {', '.join(options.split())}"
    hints = ("To append", "See https", "Set the environment", "full_key", "object_type", "reference_type")
    parts = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(hints)][:2]
    if cause is not None and str(cause):
        parts.append(str(cause).splitlines()[0])
    parts = parts or [type(e).__name__]
    return ": ".join(p.rstrip(".") for p in parts)


def _complete(app: Callable) -> Any:
    """Hydra's bash completion query (``COMP_LINE=... hwnas-<cmd> -sc query=bash``), with ``conf=``
    completed as the ``target`` group (the user's own targets in ``$HWNAS_HOME/target/`` too) and
    ``python -m nas.<cmd> ...`` lines understood."""
    words = os.environ.get("COMP_LINE", "").split(" ")
    if len(words) > 2 and words[1] == "-m":  # python -m nas.search ...
        words = words[2:]
    as_conf = words[-1].startswith(("conf=", "conf."))
    home = user_search_path(words[1:])  # the user's own targets complete too
    os.environ["COMP_LINE"] = " ".join([words[0], *([home] if home else []), *(alias_override(w) for w in words[1:])])
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            return app()
    finally:
        out = buf.getvalue()
        if as_conf:
            out = re.sub(r"(^|\s)target([=.])", r"\1conf\2", out)
        sys.stdout.write(out)


def _help(app: Callable, config_name: str) -> Any:
    """Hydra's ``--help``, as users type the command (``nas.cli._help.annotate_help``)."""
    node = ConfigStore.instance().load(f"_{config_name}_schema.yaml").node
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            return app()
    finally:
        sys.stdout.write(annotate_help(buf.getvalue(), OmegaConf.get_type(node)))


def user_override(arg: str) -> str:
    """An override key or ``key=value`` as the user types it: ``target``/``target.x`` as the documented
    alias ``conf``/``conf.x`` (``+`` prefixes kept)."""
    return re.sub(r"^(\+{0,2})target(?=$|[=.])", r"\1conf", arg)


def typed_command(module: str) -> str:
    """This run's command line as the user typed it (``python -m <module>`` and its overrides, with the
    documented ``conf`` alias, a URL's password masked), quoted to copy into a shell: for hints that repeat it."""
    args = (hide_passwords(user_override(a)) for a in sys.argv[1:] if a not in VERBOSE_FLAGS)
    return shell_join(["python", "-m", module, *args])


def _added_key_error(cfg: Any, overrides: Iterable[str]) -> str | None:
    """``+key=value`` / ``++key=value`` adding a key a schema does not have (Hydra accepts it
    silently): the one-line error, else None."""
    for o in overrides:
        if not o.startswith("+") or "=" not in o:
            continue
        key = o.lstrip("+").split("=", 1)[0]
        if key.startswith("hydra."):
            continue
        *parents, last = key.split(".")
        node = cfg
        with contextlib.suppress(Exception):
            for part in parents:
                node = node[part]
            names = _option_names(node._metadata.object_type)
            if names is not None and last not in names:
                return unknown_option_line(user_override(key), names)
    return None


def _added_key_check(config_name: str, args: Sequence[str]) -> str | None:
    """With ``+key=`` overrides: compose the config (before Hydra makes a run dir) and check them."""
    if not any(a.startswith("+") for a in args):
        return None

    overrides = [a for a in args if "=" in a and not a.startswith("-")]
    return _added_key_error(nas.config.compose_app(config_name, overrides), [a for a in overrides if a.startswith("+")])


def _run_dir_from_out(config_name: str) -> bool:
    """Whether the command's Hydra run dir is its ``out=`` option (``hydra.run.dir: ${out}``)."""
    try:
        text = (Path(CONF_DIR) / f"{config_name}.yaml").read_text()
    except OSError:
        return False
    return re.search(r"^\s+dir:\s*\$\{out\}\s*$", text, re.M) is not None


def folder_error(option: str, value: str) -> str | None:
    """``<option>=<value>`` naming a file, or a path under a file, or a folder this process cannot
    write in (a read-only disk, no permission), where a folder is to be made: the one-line error,
    else None."""
    out = Path(value)
    for p in (out, *out.parents):
        if p.exists():
            if p.is_dir():
                return _unwritable(option, value, p)
            what = "is a file" if p == out else f"is under {p}, a file"
            return f"{option}={value} {what}, not a folder; give a folder (a new one, or one to resume)"
    return None


def file_error(option: str, value: str) -> str | None:
    """``<option>=<value>``, a file to write, under a path that is a file, or in a folder this process
    cannot write in: the one-line error, else None."""
    for p in Path(value).expanduser().parents:
        if p.exists():
            if p.is_dir():
                return _unwritable(option, value, p)
            return f"{option}={value} is under {p}, a file, not a folder; give a path in a folder"
    return None


def _unwritable(option: str, value: str, folder: Path) -> str | None:
    """``<option>=<value>`` whose nearest existing ``folder`` this process cannot write in: the
    one-line error, else None."""
    if os.access(folder, os.W_OK | os.X_OK):
        return None
    ro = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    why = "is on a read-only file system" if ro else "is not writable for this user"
    return f"{option}={value}: cannot write there: {folder} {why}; give a folder you can write in"


_ENVIRONMENT_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
# a disk that filled up, or a file size limit reached: what to do (what was finished is kept)
_FULL_ERRNOS = {errno.ENOSPC: "free space there", errno.EDQUOT: "free space there (a disk quota is reached)",
                errno.EFBIG: "raise the file size limit (ulimit -f)"}


@contextlib.contextmanager
def writing_into(path: str | os.PathLike) -> Iterator[None]:
    """While the block writes into ``path`` (a command's output folder): a full disk or a file size limit
    met by a write that names no file (an append, a library's own write) is reported as ``path``'s."""
    try:
        yield
    except OSError as e:
        if e.errno in _FULL_ERRNOS and e.filename is None:
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise


def environment_error_line(e: OSError, *, then: str = "") -> str:
    """An ``OSError`` from the user's environment as one line: ``error: <file>: <reason>`` and, for a full
    disk or a file size limit, what to do (``then``: a step before running the command again) and that
    the command resumes."""
    line = f"error: {e.filename}: {e.strerror}" if e.filename else f"error: {e.strerror or e}"
    if e.errno in _FULL_ERRNOS:
        line += f"; {_FULL_ERRNOS[e.errno]}, {then}then run the same command again: it keeps what it finished"
    return line


def is_full(e: BaseException) -> bool:
    """Whether ``e`` is a full disk, a disk quota or a file size limit met by a write."""
    return isinstance(e, OSError) and e.errno in _FULL_ERRNOS


def _out_dir_error(args: Sequence[str]) -> str | None:
    """The last ``out=<path>`` override naming a file where the run dir is made: the error, else None."""
    outs = [a.split("=", 1)[1] for a in args if a.lstrip("+").startswith("out=")]
    return folder_error("out", outs[-1]) if outs and outs[-1] else None


MAX_CONFIG_FILES = 200  # YAML files checked in one config folder the user adds


def _user_config_dirs(args: Sequence[str]) -> list[Path]:
    """The config folders the user adds to Hydra's search path: ``--config-dir`` / ``-cd``, the
    ``hydra.searchpath=[file://...]`` entries, and ``$HWNAS_HOME`` (its ``target/``)."""
    dirs = [user_home()]
    for i, a in enumerate(args):
        if a in ("-cd", "--config-dir") and i + 1 < len(args):
            dirs.append(Path(args[i + 1]))
        elif a.startswith("--config-dir="):
            dirs.append(Path(a.split("=", 1)[1]))
        elif a.lstrip("+").startswith("hydra.searchpath="):
            dirs += [Path(m) for m in re.findall(r"file://([^,\]'\"]+)", a)]
    return [d.expanduser() for d in dict.fromkeys(dirs)]


def _user_yaml_error(args: Sequence[str]) -> str | None:
    """A YAML file of the user's that Hydra would read beyond ``nas._yaml``'s bounds (an alias bomb as
    a target): its one-line error, else None.  Checked before Hydra reads it, as Hydra would expand it."""
    targets = [a.split("=", 1)[1] for a in args if re.match(r"^\+{0,2}target=[^=]+$", a)]
    for d in _user_config_dirs(args):
        files = [(d / "target" / f"{t}.yaml", f"conf={t}") for t in targets]
        if d != user_home() and d.is_dir():  # a folder of configs: whatever Hydra may compose from it
            files += [(p, str(p)) for p in sorted(d.rglob("*.yaml"))[:MAX_CONFIG_FILES]]
        for path, what in files:
            if path.is_file():
                try:
                    check_yaml(path, what=f"{what} ({path})" if what != str(path) else what)
                except YamlError as e:
                    return str(e)
    return None


@contextlib.contextmanager
def _unexpected_errors(show: bool):
    """An unexpected exception as one line (exit 1); an ``OSError`` from the user's environment (no
    permission, a read-only or full disk) as ``error: <file>: <reason>`` (exit 2); a Ctrl-C the command
    left unhandled as ``interrupted`` (exit 130; a SIGTERM, ``Stopped``: ``stopped by SIGTERM``, exit 143);
    ``show``: let them through with their traceback."""
    try:
        yield
    except (HydraException, OmegaConfBaseException):
        raise
    except KeyboardInterrupt as e:
        if show:
            raise
        word, code = interruption(e)
        print(f"\n{word}", file=sys.stderr)
        sys.exit(code)
    except Exception as e:
        if show:
            raise
        if isinstance(e, OSError) and e.errno in _ENVIRONMENT_ERRNOS:  # a permission, a read-only or full disk
            print(environment_error_line(e), file=sys.stderr)
            sys.exit(2)
        print(unexpected_error_lines(e), file=sys.stderr)
        sys.exit(1)


#: commands whose target has no default (nas.export's is the one its checkpoint records)
_NO_DEFAULT_TARGET = ("export",)


def _target_key_error(config_name: str, args: Sequence[str]) -> str | None:
    """``conf.<key>=`` without ``conf=`` for a command whose target has no default: one line saying
    to name the target, else None."""
    if config_name not in _NO_DEFAULT_TARGET or any(a.lstrip("+~").startswith("target=") for a in args):
        return None
    key = next((a.lstrip("+~").split("=", 1)[0] for a in args if a.lstrip("+~").startswith("target.")), None)
    if key is None:
        return None
    return (f"{user_override(key)}= changes a target, but none is named: nas.{config_name} takes the one the "
            f"checkpoint records unless given; name it too (conf=<target> {user_override(key)}=...)")


def hydra_app(config_name: str) -> Callable:
    """``hydra.main`` over the shipped conf/ (``nas.resources.conf_dir``), with the user's targets
    ($HWNAS_HOME/target/) on the search path, ``conf=<name>`` / ``conf.<key>=`` accepted for ``target=`` / ``target.<key>=``,
    and every failure reported in one line: a config mistake (an unknown option, a typo, a wrong
    type; exit 2), an unexpected error (``error: <Type>: <message>``; exit 1).  ``-v`` / ``--verbose``
    anywhere on the command line, or ``HYDRA_FULL_ERROR=1``, shows the full traceback instead; ``-v``
    also turns on debug logging.  A Ctrl-C the command does not handle itself exits 130; a SIGTERM
    stops the command as Ctrl-C does (``Stopped``), exit 143."""
    def deco(fn: Callable) -> Callable:
        state = {"verbose": False, "show": False}

        @functools.wraps(fn)
        def task(cfg: Any) -> Any:
            if state["verbose"]:
                logging.getLogger("nas").setLevel(logging.DEBUG)
            with _unexpected_errors(state["show"]):  # here, before Hydra adds its own report
                return fn(cfg)

        app = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)(task)

        @functools.wraps(fn)
        def main() -> Any:
            warnings.filterwarnings("ignore", category=OtherProcessorWarning)  # the commands print it as WARNING:
            state["verbose"] = any(a in VERBOSE_FLAGS for a in sys.argv[1:])
            try:
                sys.argv[1:] = normalize_overrides([a for a in sys.argv[1:] if a not in VERBOSE_FLAGS])
            except ValueError as e:
                print(f"error: {e}", file=sys.stderr)
                sys.exit(2)
            if "query=bash" in sys.argv and {"-sc", "--shell-completion"} & set(sys.argv):
                return _complete(app)
            if {"--help", "-h"} & set(sys.argv[1:]):
                return _help(app, config_name)
            problem = _out_dir_error(sys.argv[1:]) if _run_dir_from_out(config_name) else None
            problem = problem or _user_yaml_error(sys.argv[1:]) or _target_key_error(config_name, sys.argv[1:])
            if problem:
                print(f"error: {problem}", file=sys.stderr)
                sys.exit(2)
            full = os.environ.get("HYDRA_FULL_ERROR")
            show = state["show"] = full == "1" or state["verbose"]
            os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises instead of printing its report
            try:
                with _stop_on_sigterm(), _unexpected_errors(show):
                    problem = _added_key_check(config_name, sys.argv[1:])
                    if problem:
                        print(f"error: {problem}", file=sys.stderr)
                        sys.exit(2)
                    return app()
            except (HydraException, OmegaConfBaseException) as e:
                if show:
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
