"""Small I/O helpers: atomic writes, so an interruption never leaves a half-written file; an
inter-process file lock, so two processes never interleave a read-modify-write of one file; and a
writer's lock (``exclusive``), so one process at a time writes a run or a table.

Lock files live out of the user's way, in a hidden folder beside what they guard
(``lock_path``: ``<folder>/.locks/<name>.lock``)."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

__all__ = ["LOCK_DIR", "SEARCH_WORK", "Busy", "atomic_write_bytes", "atomic_write_json", "atomic_write_text", "exclusive",
           "file_lock", "hide_passwords", "lock_path", "not_a_torch_file", "pid_alive", "refuse_if_busy", "shell_join",
           "wait_for_workers", "workers", "working"]

#: The hidden folder, beside the files they guard, that holds lock and claim files.
LOCK_DIR = ".locks"
#: What a running search marks its run dir with (``working``), one mark per worker: nas.train waits for them.
SEARCH_WORK = "search"


# a URL's password: ``scheme://user:<pw>@``, or a query parameter ``?password=<pw>`` (``&passwd=``, ``&pwd=``)
_USERINFO_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")
_QUERY_PASSWORD = re.compile(r"(?i)([?&](?:password|passwd|pwd)=)[^&#\s'\"]*")


def hide_passwords(text: str) -> str:
    """``text`` with every URL password in it shown as ``***``: the ``user:password@`` form and the
    query-parameter form (``?password=``, as libpq, PyMySQL and redis-py accept it)."""
    return _QUERY_PASSWORD.sub(r"\1***", _USERINFO_PASSWORD.sub(r"\1***@", text))


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` as UTF-8 via a temporary file in the same folder, then rename (a path
    an ASCII locale decoded to surrogate escapes is written as its own bytes)."""
    atomic_write_bytes(path, text.encode(errors="surrogateescape"))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder, then rename."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file normal permissions
        os.replace(tmp, p)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, OSError) and e.filename is None:  # a write to a full disk names no file: name it
            raise OSError(e.errno, e.strerror, str(p)) from e
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_json(path: str | os.PathLike, data: Any, *, indent: int | None = 1) -> None:
    atomic_write_text(path, json.dumps(data, indent=indent) + "\n")


def lock_path(path: str | os.PathLike, suffix: str = ".lock") -> Path:
    """The lock file guarding ``path``: ``<path's folder>/.locks/<path's name><suffix>`` (the hidden
    folder is made if missing)."""
    p = Path(path)
    folder = p.parent / LOCK_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return folder / (p.name + suffix)


@contextmanager
def file_lock(path: str | os.PathLike, *, timeout: float = -1, what: str | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path(path)`` (``filelock``: an OS lock, released when the
    process dies, so a killed holder never stalls the next one).  ``timeout`` seconds (-1: wait for
    ever); past it, a ``TimeoutError`` that names ``what`` (default: the file)."""
    p = Path(path)
    lock = FileLock(str(lock_path(p)), timeout=timeout)
    try:
        lock.acquire()
    except Timeout:
        raise TimeoutError(f"{what or p} is locked by another process (lock file {lock.lock_file}); "
                           f"waited {timeout:g} s") from None
    try:
        yield
    finally:
        lock.release()


class Busy(RuntimeError):
    """Another process holds the writer's lock of a run or a table (``exclusive``); the message is one
    line naming that process and how to queue behind it."""


def _holder(info: Path) -> str:
    """Who holds a writer's lock, from its holder file: ``process 123 on host (since ...: command)``."""
    try:
        h = json.loads(info.read_text())
        cmd = f": {h['command']}" if h.get("command") else ""
        return f"process {h['pid']} on {h['host']} (since {h['since']}{cmd})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


@contextmanager
def exclusive(path: str | os.PathLike, *, what: str, wait: bool = False, option: str = "wait=true",
              command: str | None = None, say: Any = None) -> Iterator[None]:
    """Be the one writer of ``path`` (a run's output folder, a table) while the block runs.

    The lock is an OS lock on ``lock_path(path, ".writer.lock")`` (released when its holder dies, so a
    killed writer never blocks the next); a holder file beside it names the holding process.

    Args:
        path: what is written.
        what: how messages name it (``"training of runs/a"``).
        wait: when another process holds it, wait for it (saying so once through ``say``) instead of
            raising.
        option: the option that queues, named in the refusal.
        command: this process's command line, for the holder file (another process's message names it).
        say: where the waiting message goes (default: standard error).

    Raises:
        Busy: another process holds it and ``wait`` is false; nothing was changed.
    """
    lock_file, info = _writer_files(path)
    lock = FileLock(str(lock_file), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        holder = _holder(info)
        if not wait:
            raise _busy(what, holder, option) from None
        (say or (lambda m: print(m, file=sys.stderr, flush=True)))(f"waiting: {what} is in progress in {holder}; "
                                                                   "this one starts when it ends")
        lock = FileLock(str(lock_file), timeout=-1)
        lock.acquire()
    try:
        atomic_write_json(info, {"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%d %H:%M:%S"),
                                 "command": command})
        yield
    finally:
        try:
            info.unlink()
        except FileNotFoundError:
            pass
        lock.release()


def _mark(folder: Path, kind: str) -> tuple[Path, Path]:
    lock_file = lock_path(folder / f"{kind}.{socket.gethostname()}.{os.getpid()}", ".lock")
    return lock_file, lock_file.with_name(lock_file.name[:-len(".lock")] + ".holder.json")


@contextmanager
def working(folder: str | os.PathLike, kind: str, *, command: str | None = None) -> Iterator[None]:
    """Mark that this process works in ``folder`` as a ``kind`` while the block runs (one of any number:
    many search workers share a run dir), for ``workers`` to see.

    The mark is an OS lock on this process's own ``.locks/<kind>.<host>.<pid>.lock`` (released when the
    process dies, so a killed worker leaves no live mark) and a holder file naming it.

    Args:
        folder: the folder worked in (a search's run dir).
        kind: what the work is (``SEARCH_WORK``).
        command: this process's command line, for the holder file.
    """
    lock_file, info = _mark(Path(folder), kind)
    lock = FileLock(str(lock_file), timeout=0)
    lock.acquire()
    try:
        atomic_write_json(info, {"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%d %H:%M:%S"), "command": command})
        yield
    finally:
        info.unlink(missing_ok=True)
        lock.release()
        lock_file.unlink(missing_ok=True)


def _marks(folder: Path, kind: str) -> list[tuple[Path, Path]]:
    d = folder / LOCK_DIR
    return [(f, f.with_name(f.name[:-len(".lock")] + ".holder.json")) for f in sorted(d.glob(f"{kind}.*.lock"))]


def workers(folder: str | os.PathLike, kind: str) -> list[str]:
    """The processes working in ``folder`` as a ``kind`` (``working``), each named as ``process 123 on host
    (since ...: command)``; the marks of processes that died are removed."""
    out = []
    for lock_file, info in _marks(Path(folder), kind):
        lock = FileLock(str(lock_file), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            out.append(_holder(info))
            continue
        lock.release()  # nobody held it: its process died
        lock_file.unlink(missing_ok=True)
        info.unlink(missing_ok=True)
    return out


def wait_for_workers(folder: str | os.PathLike, kind: str) -> None:
    """Return once no process works in ``folder`` as a ``kind`` (``working``): each live mark is waited
    on (its OS lock), then the folder is looked at again, for workers that started meanwhile."""
    while workers(folder, kind):
        for lock_file, _ in _marks(Path(folder), kind):
            lock = FileLock(str(lock_file), timeout=-1)
            lock.acquire()
            lock.release()


def _writer_files(path: str | os.PathLike) -> tuple[Path, Path]:
    """The writer's lock file of ``path`` and the holder file beside it."""
    lock_file = lock_path(path, ".writer.lock")
    return lock_file, lock_file.with_name(lock_file.name[:-len(".lock")] + ".holder.json")


def _busy(what: str, holder: str, option: str) -> Busy:
    return Busy(f"{what} is in progress in {holder}; nothing was changed: add {option} to start when it ends")


def refuse_if_busy(path: str | os.PathLike, *, what: str, option: str = "wait=true") -> None:
    """Raise ``Busy`` now when another process holds the writer's lock of ``path`` (``exclusive``): a
    command checks it before it loads the libraries its work needs, and takes the lock itself later
    (``exclusive``, which refuses a writer that came between).  The lock is not kept.

    Args:
        path: what is written.
        what: how the message names it.
        option: the option that queues, named in the refusal.

    Raises:
        Busy: another process holds it; nothing was changed.
    """
    p = Path(path)
    if not (p.parent / LOCK_DIR / f"{p.name}.writer.lock").is_file():  # never written: no holder (and no folder made)
        return
    lock_file, info = _writer_files(p)
    lock = FileLock(str(lock_file), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise _busy(what, _holder(info), option) from None
    lock.release()


def not_a_torch_file(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be a file ``torch.save`` wrote, read from its first bytes (no torch needed:
    a command refuses it before torch loads), else None.  ``torch.save`` writes a zip archive (its
    default since PyTorch 1.6) or, in the legacy format, a pickle (``\x80``, the protocol byte)."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head.startswith(b"PK\x03\x04"):  # a zip archive whose end (its central directory) is there, or cut off
        return None if zipfile.is_zipfile(path) else "a zip archive cut off or damaged (its end is missing)"
    if head[:1] == b"\x80":
        return None
    return "an empty file" if not head else "neither the zip archive nor the pickle that torch.save writes"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def shell_join(words: list[str]) -> str:
    """A command line to copy into a shell: like ``shlex.join``, but a word holding single quotes (a
    Hydra string override such as ``conf.device.name='Jetson AGX Orin'``) goes in double quotes."""
    out = []
    for w in words:
        q = shlex.quote(w)
        out.append(q if q == w or any(c in w for c in '"$`\\!') else f'"{w}"')
    return " ".join(out)
