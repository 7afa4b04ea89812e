"""Run a benchmark's independent parts as processes, each pinned to a core of its own.

A benchmark whose parts are independent (``benchmarks supernet``: each score of every architecture is
its own cache) can be split across cores by hand, ``taskset -c 0 ... --scores a b &`` and
``taskset -c 1 ... --scores c``. ``run_parts`` does that split itself: each part runs as its own
process on a free core, a part that others need first, then the dearest part that is ready (a part
waits for the parts it ``needs``), so the cores stay busy to the end. Each part writes its output to
a log of its own; a failed part stops the rest from starting and names its log; Ctrl-C interrupts every
part (each keeps what it finished, so the same command resumes).

Written here because ``concurrent.futures`` and ``multiprocessing`` neither pin a worker to a core nor
start work by readiness, and the parts are whole processes (one torch thread each) rather than
functions.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from benchmarks.harness import pin


@dataclass(frozen=True)
class Part:
    """One independently runnable piece of a benchmark.

    Args:
        name: what the part computes (its log is ``<name>.log``).
        cost: its estimated cost, in any unit shared by the parts: only the order depends on it.
        needs: the names of the parts that must have finished before this one starts.
    """

    name: str
    cost: float
    needs: tuple[str, ...] = ()


def job_cores(jobs: int) -> list[int]:
    """The ``jobs`` cores the parts run on: the first of those this process may use.

    Raises:
        SystemExit: ``jobs`` is below 1 or above the cores this process may use.
    """
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if not 1 <= jobs <= len(cores):
        raise SystemExit(f"--jobs {jobs}: this process may run on {len(cores)} core(s) ({', '.join(map(str, cores))}); "
                         f"give 1 to {len(cores)}")
    return cores[:jobs]


def next_part(waiting: Sequence[Part], done: set[str]) -> Part | None:
    """The part to start next: among those whose needs are all ``done``, one that another waiting part
    needs, then the dearest (the first given on a tie); None while none is ready."""
    needed = {n for p in waiting for n in p.needs}
    ready = [p for p in waiting if set(p.needs) <= done]
    return max(ready, key=lambda p: (p.name in needed, p.cost), default=None)


def _check(parts: Sequence[Part]) -> None:
    names = [p.name for p in parts]
    if len(set(names)) != len(names):
        raise ValueError(f"parts: a name given twice in {names}")
    unknown = sorted({n for p in parts for n in p.needs} - set(names))
    if unknown:
        raise ValueError(f"parts: needs {unknown}, which no part provides")


def _start(part: Part, core: int, command: Callable[[Part], list[str]], log_dir: Path) -> subprocess.Popen:
    def prepare() -> None:  # in the child: its core, and Ctrl-C (which a background parent ignores) reaches it
        if hasattr(os, "sched_setaffinity"):
            pin([core])
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    with open(log_dir / f"{part.name}.log", "ab") as log:  # the child holds its own descriptor
        return subprocess.Popen(command(part), stdout=log, stderr=subprocess.STDOUT, preexec_fn=prepare)


def _stop(running: dict[int, tuple[Part, subprocess.Popen]]) -> None:
    """Interrupt every running part as Ctrl-C would, and wait for it (each saves what it finished)."""
    for _, proc in running.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    for _, proc in running.values():
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_parts(parts: Sequence[Part], command: Callable[[Part], list[str]], cores: Sequence[int], log_dir: Path,
              *, poll_s: float = 1.0) -> dict[str, float]:
    """Run every part as the process ``command(part)`` gives, one at a time on each of ``cores``.

    Args:
        parts: what to run; each starts once the parts it needs have finished.
        command: the argument list of a part's process.
        cores: where the parts run, each process pinned to one.
        log_dir: where each part's output goes (``<name>.log``, appended).
        poll_s: how often finished processes are looked for.

    Returns:
        Each part's wall seconds.

    Raises:
        ValueError: two parts share a name, or a part needs one that is not given.
        SystemExit: a part failed (after the running ones finished), naming it and its log.
    """
    _check(parts)
    log_dir.mkdir(parents=True, exist_ok=True)
    waiting, done, failed = list(parts), set(), []
    running: dict[int, tuple[Part, subprocess.Popen]] = {}
    started: dict[str, float] = {}
    seconds: dict[str, float] = {}
    bar = tqdm(total=len(parts), unit="part", desc="parts")
    try:
        while waiting or running:
            for core in cores:
                part = None if core in running or failed else next_part(waiting, done)
                if part is not None:
                    waiting.remove(part)
                    started[part.name] = time.perf_counter()
                    running[core] = (part, _start(part, core, command, log_dir))
            for core, (part, proc) in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[core]
                seconds[part.name] = time.perf_counter() - started[part.name]
                if proc.returncode == 0:
                    done.add(part.name)
                else:
                    failed.append(part.name)
                bar.update()
            now = ", ".join(p.name for p, _ in running.values())
            if now != bar.postfix:
                bar.set_postfix_str(now)
            if failed and not running:
                break
            if waiting and not running and next_part(waiting, done) is None:
                raise ValueError(f"parts: {[p.name for p in waiting]} wait on each other")
            time.sleep(poll_s if running else 0)
    except KeyboardInterrupt:
        _stop(running)
        raise
    finally:
        bar.close()
    if failed:
        raise SystemExit(f"part {failed[0]} failed (its output: {log_dir / (failed[0] + '.log')}); "
                         f"{len(waiting)} part(s) not started; run the same command again to resume")
    return seconds
