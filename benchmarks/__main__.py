"""``python -m benchmarks <name> [options]`` runs one benchmark; ``--list`` names them, each with the
first line of its docstring (read without importing it, so the list needs none of the benchmarks'
libraries); ``<name> --help`` explains its options."""

from __future__ import annotations

import argparse
import ast
import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOT_BENCHMARKS = {"__init__", "__main__", "harness"}


def names() -> list[str]:
    """Every benchmark's name: the modules of this package but the harness and the private helpers."""
    return sorted(p.stem for p in HERE.glob("*.py") if p.stem not in NOT_BENCHMARKS and not p.stem.startswith("_"))


def summary(name: str) -> str:
    """The first sentence of benchmark ``name``'s docstring, on one line."""
    doc = ast.get_docstring(ast.parse((HERE / f"{name}.py").read_text())) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    end = first.find(". ")
    return first if end < 0 else first[:end + 1]


def listing() -> str:
    """The names and summaries, one benchmark a line."""
    width = max(map(len, names()))
    return "\n".join(f"{n:<{width}}  {summary(n)}" for n in names())


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark ``argv`` names with the rest of ``argv`` as its arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                 epilog="benchmarks:\n" + listing(), formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--list", action="store_true", help="name every benchmark, with one line on what it measures")
    ap.add_argument("name", nargs="?", help="the benchmark to run (its options follow it; <name> --help)")
    if not argv or argv[0].startswith("-"):
        a = ap.parse_args(argv)
        if a.list:
            print(listing())
            return 0
        ap.print_help()
        return 2
    name, rest = argv[0].replace("-", "_"), argv[1:]
    if name not in names():
        ap.error(f"no benchmark {argv[0]!r}; python -m benchmarks --list names them")
    module = importlib.import_module(f"benchmarks.{name}")
    sys.argv = [f"python -m benchmarks {name}", *rest]
    result = module.main()
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
