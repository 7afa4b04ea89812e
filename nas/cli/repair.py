"""``python -m nas.repair <journal file or search run folder>``: repair a damaged study journal.

A plain argparse command, not a Hydra app: it takes one path and a flag, composes no config, and
must run when the search's own config or run folder is what is in trouble (Hydra would also open
a run folder of its own).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from nas.search.journal import RepairReport, repair_journal

__all__ = ["main"]


def _journal_path(target: str) -> Path:
    p = Path(target).expanduser()
    if p.is_dir():
        p = p / "study.journal"
    if not p.is_file():
        raise FileNotFoundError(f"no journal file at {p} (give a study journal or a search run folder)")
    return p


def _counts(c: Counter) -> str:
    return f"{sum(c.values())} trials" + (f" ({', '.join(f'{n} {s.lower()}' for s, n in sorted(c.items()))})"
                                          if c else "")


SHOWN = 8  # damaged lines named one by one; the rest are counted


def _lines_named(numbers: list[int]) -> str:
    more = f" and {len(numbers) - SHOWN} more" if len(numbers) > SHOWN else ""
    return ", ".join(map(str, numbers[:SHOWN])) + more


def _print(r: RepairReport, dry_run: bool) -> None:
    if r.intact:
        print(f"{r.path}: intact ({r.kept} records); nothing changed")
    else:
        verb = "would keep" if dry_run else "kept"
        print(f"{r.path}: {verb} {r.kept} records; dropped damaged line(s) {_lines_named(r.dropped)}"
              + (f" ({r.salvaged} whole record(s) recovered from them)" if r.salvaged else ""))
        for n in r.dropped[:SHOWN]:
            print(f"  line {n}: {r.problems.get(n, 'damaged')}")
        if r.prefix_only:
            print(f"  kept only the records before the first damaged line, as {r.reason}: "
                  f"{r.prefix_dropped} intact record(s) after it dropped")
        print(f"  original {'left as it is (dry run)' if dry_run else f'backed up as {r.backup}'}")
    for name, c in r.studies.items():
        print(f"  study {name!r}: {_counts(c)}")
    if not r.studies:
        print("  no study in it")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m nas.repair", description=(
        "Repair a damaged Optuna study journal: drop damaged lines, keep every intact record, back up the "
        "original as <file>.damaged-<timestamp>, and check that the studies load. A file that holds no "
        "journal record is refused and left as it is."))
    ap.add_argument("journal", help="a journal file (study.journal, storage=<path>.journal) or a search run folder")
    ap.add_argument("--dry-run", action="store_true", help="report what would be done; write nothing")
    ap.add_argument("--keep-prefix", action="store_true", help=(
        "when a damaged line may have created a study or trial, keep only the records before it (refused "
        "without this flag, as it drops the intact records after it)"))
    args = ap.parse_args(argv)
    try:
        report = repair_journal(_journal_path(args.journal), dry_run=args.dry_run, keep_prefix=args.keep_prefix)
    except (ValueError, FileNotFoundError, TimeoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    _print(report, args.dry_run)


if __name__ == "__main__":
    main()
