"""``python -m nas.<command>`` for tests, forked from a process that has the heavy libraries loaded.

A command's process spends seconds importing torch, timm (which loads torchvision) and scikit-learn
before it does anything, and the tests start hundreds of them.  ``run`` starts the same command in a
process of its own, as ``subprocess.run`` does, but forks it from a *zygote*: a process (one per test
process and startup environment: ``PYTHON*``, the locale, the thread counts the libraries read when
imported; started on first use) that has imported those libraries and nothing of ``nas``,
so the command still imports this checkout's ``nas`` itself, reads its environment at import time, and
exits through the interpreter's normal shutdown (atexit handlers, flushed files).  The child gets the
working directory, environment, arguments and standard streams it asks for; its exit status, output and
a timeout come back as ``subprocess.run`` gives them.  ``Popen`` starts commands that must run at the
same time (workers of one study, two runs racing for one folder) the same way, without waiting.

What a command must not get from a warm process stays with ``subprocess.run``: a run that needs its
own Python (``python -I``, another interpreter), an installed wheel outside the checkout, a signal sent
to it while it runs, or the libraries left unimported (the import-time tests).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

# what the zygote imports before forking: the libraries every command loads (and matplotlib, which the
# commands that plot load: about 0.4 s each), none of nas, and none that
# starts a thread when imported (onnxruntime does: a child forked beside a thread can wait forever on a
# lock that thread held); the zygote refuses to fork once it has a second thread
PRELOAD = ("numpy", "torch", "timm", "torchvision", "sklearn.ensemble", "sklearn.datasets", "scipy.stats", "onnx",
           "optuna", "hydra", "omegaconf", "matplotlib", "matplotlib.pyplot")

_ZYGOTE_CODE = r"""
import importlib, json, os, runpy, signal, sys, time
for name in sys.argv[1].split(","):
    try:
        importlib.import_module(name)
    except Exception:
        pass
if len(os.listdir("/proc/self/task")) > 1 if os.path.isdir("/proc/self/task") else False:
    raise SystemExit("a preloaded library started a thread: forking beside it is not safe")
import gc
gc.freeze()  # the preloaded objects are shared with every child, not copied on the first collection
requests, replies = sys.stdin, sys.stdout
replies.write("ready\n"); replies.flush()
detached = set()  # the processes waiting for a command started with Popen (reaped once done)
def command(req):  # in the forked child: the command, then the interpreter's shutdown
    os.setpgid(0, 0)  # its own group: a timeout ends the command and whatever it started
    for fd, path, mode in ((0, req["stdin"], os.O_RDONLY), (1, req["stdout"], os.O_WRONLY), (2, req["stderr"], os.O_WRONLY)):
        f = os.open(path, mode)
        os.dup2(f, fd)
        os.close(f)
    sys.stdin = os.fdopen(0, "r", closefd=False)  # the zygote's own hold its request pipe's buffers
    sys.stdout = sys.__stdout__ = os.fdopen(1, "w", closefd=False, **({"buffering": 1} if os.environ.get("PYTHONUNBUFFERED") else {}))
    sys.stderr = sys.__stderr__ = os.fdopen(2, "w", buffering=1, closefd=False)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    argv = req["argv"]
    sys.argv = list(argv)
    code = 0
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            sys.path.insert(0, "")
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        code = e.code
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    raise SystemExit(code)  # the interpreter's own shutdown: atexit handlers, flushed files


for line in requests:
    req = json.loads(line)
    for waiter in list(detached):
        if os.waitpid(waiter, os.WNOHANG)[0]:
            detached.discard(waiter)
    sys.stdout.flush(); sys.stderr.flush()
    if req.get("status"):  # Popen: a process of ours waits for the command and writes its exit status
        r, w = os.pipe()
        waiter = os.fork()
        if waiter == 0:
            os.close(r)
            pid = os.fork()
            if pid == 0:
                os.close(w)
                command(req)
            os.write(w, str(pid).encode())
            os.close(w)
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            with open(req["status"] + ".part", "w") as f:
                f.write(str(code))
            os.replace(req["status"] + ".part", req["status"])
            os._exit(0)
        os.close(w)
        pid = int(os.read(r, 32))
        os.close(r)
        detached.add(waiter)
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
        continue
    pid = os.fork()
    if pid == 0:
        command(req)
    deadline = None if req["timeout"] is None else time.monotonic() + req["timeout"]
    status, timed_out = None, False
    while status is None:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
        elif deadline is not None and time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, status = os.waitpid(pid, 0)
            timed_out = True
        else:
            time.sleep(0.01)
    replies.write(json.dumps({"code": os.waitstatus_to_exitcode(status), "timed_out": timed_out}) + "\n")
    replies.flush()
"""


# what an interpreter or a preloaded library reads once, when it starts or is imported: a command whose
# environment differs in any of these gets a zygote started with its values
_STARTUP_PREFIXES = ("PYTHON", "LC_", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "TORCH", "CUDA", "MPL")
_ZYGOTES_MAX = 3  # per test process (each holds the libraries, ~1 GB); past them: subprocess.run


def _startup_env(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(_STARTUP_PREFIXES) or k in ("LANG", "LANGUAGE")))


class _Zygote:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.lock = threading.Lock()
        self.log = tempfile.TemporaryFile()  # its own messages (a child's go to the files it is given)
        self.proc = subprocess.Popen([sys.executable, "-c", _ZYGOTE_CODE, ",".join(PRELOAD)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env={**{k: v for k, v in env.items() if not k.startswith("PYTEST_")},
                                          # numpy's and scipy's OpenBLAS start their threads when loaded, one per
                                          # CPU: in the zygote, none (a command's own BLAS work is small)
                                          "OPENBLAS_NUM_THREADS": env.get("OPENBLAS_NUM_THREADS", "1")})
        if self.proc.stdout.readline().strip() != "ready":
            self.log.seek(0)
            raise RuntimeError("the zygote process for forked test commands did not start: "
                               + self.log.read().decode(errors="replace")[-2000:])

    def ask(self, req: dict) -> dict:
        with self.lock:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            reply = self.proc.stdout.readline()
        if not reply:
            raise RuntimeError("the zygote process for forked test commands died")
        return json.loads(reply)


_ZYGOTES: dict[tuple, _Zygote] = {}
_LOCK = threading.Lock()


def _zygote(env: Mapping[str, str]) -> _Zygote | None:
    key = _startup_env(env)
    with _LOCK:
        z = _ZYGOTES.get(key)
        if z is not None and z.proc.poll() is not None:  # it died: start another
            del _ZYGOTES[key]
            z = None
        if z is None and len(_ZYGOTES) < _ZYGOTES_MAX:
            z = _ZYGOTES[key] = _Zygote(env)
        return z


def _forkable(args: list[str]) -> bool:
    """A ``python -m``, ``-c`` or script command of this interpreter, on a system that forks."""
    return (args[0] == sys.executable and len(args) >= 2 and (args[1] in ("-m", "-c") or not args[1].startswith("-"))
            and hasattr(os, "fork"))


def _ask(zygote: _Zygote, tmp: str, args: list[str], cwd: str | os.PathLike | None, env: dict[str, str], *,
         input: str | None = None, timeout: float | None = None, status: bool = False) -> tuple[dict, dict[str, Path]]:
    """Start ``args`` in a child of ``zygote``, its standard streams in files under ``tmp`` (and, with ``status``,
    its exit status, written once it ends: the child is not waited for); the zygote's reply and the files."""
    files = {k: Path(tmp) / k for k in ("stdin", "stdout", "stderr", *(("status",) if status else ()))}
    files["stdin"].write_text(input or "")
    for k in ("stdout", "stderr"):
        files[k].touch()
    reply = zygote.ask({"argv": args[1:], "cwd": os.fspath(cwd or os.getcwd()), "env": env, "timeout": timeout,
                        **{k: str(p) for k, p in files.items()}})
    return reply, files


def run(args: Sequence[str | os.PathLike], *, cwd: str | os.PathLike | None = None,
        env: Mapping[str, str] | None = None, timeout: float | None = None, input: str | None = None,
        capture_output: bool = True, text: bool = True, check: bool = False) -> subprocess.CompletedProcess:
    """``subprocess.run(args, cwd=..., env=..., timeout=..., input=..., capture_output=True, text=True)`` for
    ``args = [sys.executable, "-m", <module>, ...]`` (or a script, or ``-c``), forked from the zygote;
    anything else goes to ``subprocess.run`` as given."""
    args = [os.fspath(a) for a in args]
    env = dict(os.environ if env is None else env)
    zygote = _zygote(env) if capture_output and _forkable(args) else None  # None past _ZYGOTES_MAX environments
    if zygote is None:
        return subprocess.run(args, cwd=cwd, env=env, timeout=timeout, input=input, capture_output=capture_output,
                              text=text, check=check)
    with tempfile.TemporaryDirectory(prefix="forked-") as tmp:
        reply, files = _ask(zygote, tmp, args, cwd, env, input=input, timeout=timeout)
        out, err = (files[k].read_bytes() for k in ("stdout", "stderr"))
    if text:
        out, err = out.decode(errors="replace"), err.decode(errors="replace")
    if reply["timed_out"]:
        raise subprocess.TimeoutExpired(args, timeout, output=out, stderr=err)
    done = subprocess.CompletedProcess(args, reply["code"], out, err)
    if check:
        done.check_returncode()
    return done


class Popen:
    """``subprocess.Popen(args, cwd=..., env=..., stdout=PIPE, stderr=PIPE, text=True)`` for commands a test
    starts together (workers of one study, two runs racing for one folder): forked from the zygote as
    ``run``'s are, without waiting for the command; a process of the zygote's waits for it and writes its
    exit status.  ``pid`` is the command's (its own process group); ``poll``, ``wait``, ``communicate`` and
    ``kill`` as ``subprocess.Popen``'s.  Anything ``run`` would not fork goes to ``subprocess.Popen``."""

    def __init__(self, args: Sequence[str | os.PathLike], *, cwd: str | os.PathLike | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        args = [os.fspath(a) for a in args]
        env = dict(os.environ if env is None else env)
        self.args, self._returncode = args, None
        zygote = _zygote(env) if _forkable(args) else None
        if zygote is None:
            self._proc: subprocess.Popen | None = subprocess.Popen(
                args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.pid = self._proc.pid
            return
        self._proc = None
        self._tmp = tempfile.TemporaryDirectory(prefix="forked-")
        reply, self._files = _ask(zygote, self._tmp.name, args, cwd, env, status=True)
        self.pid = reply["pid"]

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc is not None else self._returncode

    def poll(self) -> int | None:
        if self._proc is not None:
            return self._proc.poll()
        if self._returncode is None and self._files["status"].is_file():
            self._returncode = int(self._files["status"].read_text())
        return self._returncode

    def wait(self, timeout: float | None = None) -> int:
        if self._proc is not None:
            return self._proc.wait(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.01)
        return self._returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        if self._proc is not None:
            return self._proc.communicate(timeout=timeout)
        self.wait(timeout)
        out, err = (self._files[k].read_bytes().decode(errors="replace") for k in ("stdout", "stderr"))
        self._tmp.cleanup()
        return out, err

    def kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            return
        try:
            os.killpg(self.pid, signal.SIGKILL)  # the command and whatever it started
        except ProcessLookupError:  # not yet its own group (or gone): the command itself
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
