#!/usr/bin/env python
"""How soon each command answers: the wall time of ``python -m nas.<command> --help``, of a
config typo (``python -m nas.<command> no_such_option=1``) and of a value the config accepts but
the command refuses (``REFUSED``: a missing file, a count of 0 ...), each refused in one line.

Both are what a user waits for before anything is measured, trained or searched, and what every
end-to-end test pays per process.  Each call is a fresh process; the rounds are interleaved
(every command once per round) and the median is reported, with the modules each command's
import loads (torch, scikit-learn, timm ...: ``--help`` should need none of the work's libraries).

    taskset -c 1 python scripts/bench_startup.py                 # all commands, 5 rounds
    taskset -c 1 python scripts/bench_startup.py --commands search profile --rounds 9

Writes ``scripts/results/startup.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nas._io import atomic_write_json  # noqa: E402

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
    times: dict[tuple[str, str], list[float]] = {(c, k): [] for c in commands for k in cases}
    codes: dict[tuple[str, str], int] = {}
    _call(commands[0], CASES["help"])  # the first process after a while also reads the files from disk
    for r in range(rounds):
        for (c, k), v in times.items():
            s, codes[(c, k)] = _call(c, _args(c, k))
            v.append(s)
        print(f"round {r + 1}/{rounds}", flush=True)
    return [{"command": c, **{f"{k}_s": statistics.median(times[(c, k)]) for k in cases},
             **{f"{k}_exit": codes[(c, k)] for k in cases}, "refused_args": REFUSED[c], "rounds": rounds,
             "import_loads": loaded_by_import(c)} for c in commands]


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--commands", nargs="+", default=list(COMMANDS), choices=COMMANDS)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default=str(ROOT / "scripts" / "results"))
    a = p.parse_args(argv)
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
    rows = measure(a.commands, a.rounds)
    from nas.latency.device import device_identity

    result = {"command": "python scripts/bench_startup.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "machine": device_identity("cpu")["name"], "python": sys.version.split()[0], "rows": rows}
    if a.commands == list(COMMANDS):
        atomic_write_json(Path(a.out) / "startup.json", result)
    print(f"\n{'command':<10} {'--help s':>9} {'typo s':>7} {'refused s':>10}  {'refused value':<28} import loads")
    for r in rows:
        print(f"{r['command']:<10} {r['help_s']:>9.2f} {r['typo_s']:>7.2f} {r['refused_s']:>10.2f}  "
              f"{' '.join(r['refused_args']):<28} {', '.join(r['import_loads']) or '-'}")
    return rows


if __name__ == "__main__":
    main()
