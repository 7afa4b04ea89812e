"""The search run ``nas.train`` starts from: its Pareto front, dataset settings and search space."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nas._io import SEARCH_WORK, Busy, wait_for_workers, workers
from nas._yaml import load_yaml_config
from nas.arch import Arch

__all__ = ["SearchRun", "load_search_run", "model_id", "search_finished", "select_entries"]


@dataclass(frozen=True)
class SearchRun:
    path: Path
    entries: tuple[dict[str, Any], ...]  # pareto.json's front, in its order (by latency)
    metric: str
    data: dict[str, Any]  # DataSettings fields
    search_space: str | None
    record: dict[str, Any]
    resolution: int | None  # the deployment resolution the search predicted every front latency at

    def searched_shape(self, index: int) -> list[int]:
        """The input shape (batch 1) of the network the search scored at ``index`` of the front."""
        a = self.entries[index]["arch"]
        return [1, int(a["in_chans"]), int(a["resolution"]), int(a["resolution"])]


def load_search_run(run: str | Path) -> SearchRun:
    """Read a search run dir; a clear error if it holds no search result."""
    p = Path(run).expanduser()
    if not p.is_dir():
        raise FileNotFoundError(f"run={run}: no such folder; give the run dir of `python -m nas.search` "
                                f"(it holds pareto.json)")
    pj = p / "pareto.json"
    if not pj.is_file():
        raise FileNotFoundError(f"run={run}: no pareto.json here, so not a finished search run dir; run "
                                f"`python -m nas.search ...` first (it writes pareto.json into its run dir)")
    try:
        doc = json.loads(pj.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{pj}: not valid JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != "hwnas.pareto" or not isinstance(doc.get("pareto"), list):
        raise ValueError(f"{pj}: not an hwnas search result (expected schema 'hwnas.pareto' with a 'pareto' list)")
    entries = tuple(doc["pareto"])
    if not entries:
        raise ValueError(f"{pj}: the Pareto front is empty (no feasible evaluated trial); nothing to train")
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or "arch" not in e:
            raise ValueError(f"{pj}: pareto[{i}] has no 'arch'")
    record = doc.get("search") or {}
    data = dict(record.get("data") or {})
    space = (record.get("search_space") or {}).get("name")
    hydra_cfg = p / ".hydra" / "config.yaml"
    if hydra_cfg.is_file():  # the full data settings (root included) and the space as the user named it
        cfg = load_yaml_config(hydra_cfg, resolve=False)
        if isinstance(cfg, dict):
            if isinstance(cfg.get("data"), dict):
                data = {**cfg["data"], **data}
            space = cfg.get("search_space") or space
    if not data.get("name"):
        raise ValueError(f"{pj}: the search record names no dataset ('search.data.name')")
    return SearchRun(p, entries, str(doc.get("metric", "score")), data, space, record, _resolution(record, entries))


def _resolution(record: dict[str, Any], entries: tuple[dict[str, Any], ...]) -> int | None:
    """The search's deployment resolution: its record's, else (older runs) the front's Arch resolution,
    which is the deployed network's; None when neither says."""
    r = record.get("deploy_resolution")
    if r is None:
        res = {e["arch"].get("resolution") if isinstance(e["arch"], dict) else None for e in entries}
        r = res.pop() if len(res) == 1 else None
    return r if isinstance(r, int) and not isinstance(r, bool) and r > 0 else None


def select_entries(run: SearchRun, select: Any = "all", latency_budget_ms: float | None = None) -> list[int]:
    """Indices into the front: ``all``, an index, or a list of indices; then ``latency_ms <= latency_budget_ms``."""
    n = len(run.entries)
    if select is None or select == "all":
        idx = list(range(n))
    else:
        items = list(select) if isinstance(select, (list, tuple)) else [select]
        idx = []
        for s in items:
            if isinstance(s, bool) or not isinstance(s, int):
                raise ValueError(f"select must be 'all', an index or a list of indices into the {n} Pareto "
                                 f"architectures, got {select!r}")
            if not -n <= s < n:
                raise ValueError(f"select: index {s} is out of range; {run.path / 'pareto.json'} has {n} "
                                 f"architectures (0..{n - 1})")
            idx.append(s % n)
        idx = list(dict.fromkeys(idx))
    if latency_budget_ms is not None:
        idx = [i for i in idx if float(run.entries[i].get("latency_ms") or math.inf) <= latency_budget_ms]
        if not idx:
            fastest = min(float(e.get("latency_ms") or math.inf) for e in run.entries)
            raise ValueError(f"latency_budget_ms={latency_budget_ms}: no selected architecture is predicted that fast (the fastest "
                             f"is {fastest:.4g} ms)")
    return idx


def model_id(index: int, arch: Arch) -> str:
    return f"{index:02d}_{arch.digest()[:8]}"


def search_finished(run: str | Path, *, wait: bool = False, say: Callable[[str], None] | None = None) -> None:
    """Make sure no search still writes the run dir ``run`` (a resumed one would change its front after
    the networks were chosen): refuse, or with ``wait`` wait for every search in it to end.

    Args:
        run: the search run dir.
        wait: wait for the searches to end (saying so once through ``say``) instead of raising ``Busy``.
        say: where the waiting message goes (default: standard error).

    Raises:
        nas._io.Busy: a search still writes ``run`` and ``wait`` is false; nothing was trained.
    """
    running = workers(run, SEARCH_WORK)
    if not running:
        return
    who = running[0] + (f" and {len(running) - 1} more" if len(running) > 1 else "")
    if not wait:
        raise Busy(f"run={run}: a search is still writing it ({who}); its Pareto front is not final, so nothing was "
                   f"trained: train when the search ends, or add wait=true to start then")
    (say or (lambda m: print(m, file=sys.stderr, flush=True)))(
        f"waiting: a search is still writing {run} ({who}); training starts when it ends, on its final front")
    wait_for_workers(run, SEARCH_WORK)
