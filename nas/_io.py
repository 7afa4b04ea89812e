"""Small I/O helpers: atomic writes, so an interruption never leaves a half-written file, and an
inter-process file lock, so two processes never interleave a read-modify-write of one file."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_bytes", "atomic_write_json", "atomic_write_text", "file_lock"]


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same folder, then rename."""
    atomic_write_bytes(path, text.encode())


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
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_json(path: str | os.PathLike, data: Any, *, indent: int | None = 1) -> None:
    atomic_write_text(path, json.dumps(data, indent=indent) + "\n")


@contextmanager
def file_lock(path: str | os.PathLike, *, timeout: float = -1, what: str | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``<path>.lock`` (``filelock``: an OS lock, released when the process
    dies, so a killed holder never stalls the next one).  ``timeout`` seconds (-1: wait for ever);
    past it, a ``TimeoutError`` that names ``what`` (default: the file)."""
    from filelock import FileLock, Timeout

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(p) + ".lock", timeout=timeout)
    try:
        lock.acquire()
    except Timeout:
        raise TimeoutError(f"{what or p} is locked by another process (lock file {p}.lock); "
                           f"waited {timeout:g} s") from None
    try:
        yield
    finally:
        lock.release()


def shell_join(words: list[str]) -> str:
    """A command line to copy into a shell: like ``shlex.join``, but a word holding single quotes (a
    Hydra string override such as ``conf.device.name='Jetson AGX Orin'``) goes in double quotes."""
    import shlex

    out = []
    for w in words:
        q = shlex.quote(w)
        out.append(q if q == w or any(c in w for c in '"$`\\!') else f'"{w}"')
    return " ".join(out)
