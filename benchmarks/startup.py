"""How soon each command answers: the wall time of ``--help``, a config typo and a refused value.

Per command: ``python -m nas.<command> --help``, a config typo (``python -m nas.<command>
no_such_option=1``) and a value the config accepts but the command refuses (``REFUSED``: a missing
file, a count of 0 ...), each refused in one line.

Both are what a user waits for before anything is measured, trained or searched, and what every
end-to-end test pays per process.  Each call is a fresh process; the rounds are interleaved
(every command once per round) and the median is reported, with the modules each command's
import loads (torch, scikit-learn, timm ...: ``--help`` should need none of the work's libraries).

    taskset -c 1 python -m benchmarks startup                 # all commands, 5 rounds
    taskset -c 1 python -m benchmarks startup --commands search profile --rounds 9

Writes ``benchmarks/results/startup.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import RESULTS, ROOT, command, interleaved, machine, medians, pinned_cores, write_result
from nas.machine import cpu_identity

COMMANDS = ("profile", "predict", "validate", "space", "search", "supernet", "train", "export")
HEAVY = ("torch", "sklearn", "timm", "torchvision", "optuna", "scipy", "onnxruntime", "matplotlib")
CASES = {"help": ["--help"], "typo": ["no_such_option=1"]}
# per command, a value its config schema accepts and the command itself refuses (exit code 2)
REFUSED = {"profile": ["search_space=no_such_space"], "predict": ["arch=no_such_arch.json"], "validate": ["n=0"],
           "space": ["search_space=no_such_space"], "search": ["n_trials=-1"], "supernet": ["epochs=0"],
           "train": ["run=no_such_run"], "export": ["weights=no_such.ckpt"]}


def _args(cmd: str, case: str) -> list[str]:
    return REFUSED[cmd] if case == "refused" else CASES[case]


def _call(cmd: str, args: list[str]) -> tuple[float, int]:
    """Wall seconds and exit code of one ``python -m nas.<cmd> args`` from the checkout."""
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", f"nas.{cmd}", *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    return time.perf_counter() - t, r.returncode


def loaded_by_import(cmd: str) -> list[str]:
    """The heavy libraries that importing ``nas.cli.<cmd>`` loads."""
    code = ("import sys, importlib; importlib.import_module(sys.argv[1]); "
            f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code, f"nas.cli.{cmd}"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    if r.returncode:
        raise SystemExit(f"importing nas.cli.{cmd} failed: {r.stderr.strip().splitlines()[-1]}")
    return r.stdout.split()


def measure(commands: list[str], rounds: int) -> list[dict[str, Any]]:
    """Each command's help, typo and refused value, ``rounds`` interleaved rounds (one warm-up call first)."""
    cases = (*CASES, "refused")
    codes: dict[str, int] = {}

    def timed(c: str, k: str):
        def call() -> float:
            s, codes[f"{c} {k}"] = _call(c, _args(c, k))
            return s
        return call

    _call(commands[0], CASES["help"])  # the first process after a while also reads the files from disk
    times = medians(interleaved({f"{c} {k}": timed(c, k) for c in commands for k in cases}, rounds,
                                progress=lambda r: print(f"round {r + 1}/{rounds}", flush=True)))
    return [{"command": c, **{f"{k}_s": times[f"{c} {k}"] for k in cases},
             **{f"{k}_exit": codes[f"{c} {k}"] for k in cases}, "refused_args": REFUSED[c], "rounds": rounds,
             "import_loads": loaded_by_import(c)} for c in commands]


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--commands", nargs="+", default=list(COMMANDS), choices=COMMANDS)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default=str(RESULTS))
    a = p.parse_args(argv)
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
    rows = measure(a.commands, a.rounds)
    result = {"command": command("startup", argv, cores=pinned_cores()),
              "machine": cpu_identity()["name"], "machine_detail": machine(), "python": sys.version.split()[0], "rows": rows}
    if a.commands == list(COMMANDS):
        write_result(Path(a.out) / "startup.json", result)
    print(f"\n{'command':<10} {'--help s':>9} {'typo s':>7} {'refused s':>10}  {'refused value':<28} import loads")
    for r in rows:
        print(f"{r['command']:<10} {r['help_s']:>9.2f} {r['typo_s']:>7.2f} {r['refused_s']:>10.2f}  "
              f"{' '.join(r['refused_args']):<28} {', '.join(r['import_loads']) or '-'}")
    return rows


if __name__ == "__main__":
    main()
