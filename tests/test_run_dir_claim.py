"""Two searches started together in one new ``out=`` folder: the folder is claimed by one start at a
time, and a refused start removes nothing another start wrote.

The deterministic tests put two starts in a fixed order with events (no timing): the winner is held
inside its preparation until the loser has arrived (the loser says it waits, or, where no start lock
exists, it reaches its own preparation), so the loser always looks at the folder while the winner is
preparing it, which is the order that lost a run's files."""

from __future__ import annotations

import io
import sys
import threading
from pathlib import Path

import forked
import optuna
import pytest
from omegaconf import OmegaConf
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

import nas.search
from nas.cli import search as search_cli
from nas.config import compose_app

REPO = Path(__file__).resolve().parent.parent
SEARCH = ["evaluator=zero_cost", "search_space=tiny", "n_trials=1", "progress=false"]
WAIT = 120  # seconds an event is waited for before the test gives up (a safety net, never reached when it passes)


class _Stderr(io.StringIO):
    """Standard error that sets ``event`` when a start says it waits for another."""

    def __init__(self, event: threading.Event) -> None:
        super().__init__()
        self.event = event

    def write(self, s: str) -> int:
        if "waiting: another search is starting" in s:
            self.event.set()
        return super().write(s)


def _files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*"))
            if p.is_file() and ".locks" not in p.parts}


def _race(monkeypatch, run_dir: Path, winner: list[str], loser: list[str], *, winner_fails: bool = False):
    """The winner's start held inside its preparation until the loser arrives; the loser's preparation
    runs once the winner's start has ended.  Returns (the loser's search or exception, the winner's)."""
    real = nas.search.prepare_search
    w_in, l_arrived, w_done = threading.Event(), threading.Event(), threading.Event()
    out: dict[str, object] = {}

    def prepare(**kw):
        if threading.current_thread().name == "winner":
            w_in.set()
            assert l_arrived.wait(WAIT), "the loser never arrived"
            if winner_fails:
                raise ValueError("the winner's start failed")
        else:
            l_arrived.set()  # no start lock: the loser prepares while the winner does
            assert w_done.wait(WAIT), "the winner never ended"
        return real(**kw)

    def start(name: str, args: list[str]) -> None:
        try:
            out[name] = search_cli._prepare(compose_app("search", [*SEARCH, *args]), run_dir)
        except BaseException as e:  # noqa: BLE001 - the test looks at what each start raised
            out[name] = e
        finally:
            if name == "winner":
                w_done.set()

    monkeypatch.setattr(nas.search, "prepare_search", prepare)
    monkeypatch.setattr(sys, "stderr", _Stderr(l_arrived))
    run_dir.mkdir()  # Hydra makes the run dir of both before either starts
    w = threading.Thread(target=start, args=("winner", winner), name="winner")
    w.start()
    assert w_in.wait(WAIT)
    start("loser", loser)
    w.join(WAIT)
    return out["loser"], out["winner"]


def test_two_starts_in_one_new_folder_leave_it_to_the_one_that_claimed_it(monkeypatch, tmp_path):
    """The loser (other settings) is refused and the winner's folder stays whole; a winner that fails removes
    what it wrote, and the start that waited then claims the folder."""
    run_dir = tmp_path / "k4"
    lost, won = _race(monkeypatch, run_dir, ["evaluator.proxy=naswot"], ["evaluator.proxy=synflow"])
    assert isinstance(won, nas.search.Search), won
    assert isinstance(lost, ValueError) and "\n" not in str(lost) and "evaluator" in str(lost), lost
    assert {"run.json", "study.journal", ".hydra/config.yaml"} <= set(_files(run_dir))
    storage = JournalStorage(JournalFileBackend(str(run_dir / "study.journal")))
    assert [s.study_name for s in optuna.get_all_study_summaries(storage)] == [won.study.study_name]
    assert "naswot" in (run_dir / ".hydra" / "config.yaml").read_text()

    run_dir = tmp_path / "k5"
    second, first = _race(monkeypatch, run_dir, ["evaluator.proxy=naswot"], ["evaluator.proxy=synflow"],
                          winner_fails=True)
    assert isinstance(first, ValueError) and isinstance(second, nas.search.Search), (first, second)
    assert {"run.json", "study.journal", ".hydra/config.yaml"} <= set(_files(run_dir))
    assert "synflow" in (run_dir / ".hydra" / "config.yaml").read_text()


@pytest.mark.slow
def test_two_processes_started_together(tmp_path):
    """A real race (its order is the machine's): one search runs, the other is refused in one line, and the
    folder holds the first one's study, run.json and .hydra/ whole."""
    out = tmp_path / "k4"
    procs = [forked.Popen([sys.executable, "-m", "nas.search", *SEARCH, "n_trials=2", f"evaluator.proxy={proxy}",
                           f"out={out}"], cwd=REPO)
             for proxy in ("naswot", "synflow")]
    results = [(p.wait(600), *p.communicate()) for p in procs]
    codes = sorted(r[0] for r in results)
    assert codes == [0, 2], [r[2][-2000:] for r in results]
    err = next(r[2] for r in results if r[0] == 2)
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("waiting: ")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert {"run.json", "study.journal", ".hydra/config.yaml", "pareto.json", "trials.csv"} <= set(_files(out))
    storage = JournalStorage(JournalFileBackend(str(out / "study.journal")))
    (summary,) = optuna.get_all_study_summaries(storage)
    assert summary.n_trials == 2


def test_multirun_jobs_go_under_out():
    """``-m n_trials=1,2 out=runs/mr``: each job's run dir is ``runs/mr/<job number>`` (they went to
    ``multirun/<date>/<time>/<n>``, ``out=`` ignored)."""
    from hydra import compose, initialize_config_dir

    from nas.config import CONF_DIR
    from nas.config.common import normalize_overrides

    compose_app("search", [])  # registers the schemas
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="search", overrides=normalize_overrides(["out=runs/mr"]), return_hydra_config=True)
    sweep = OmegaConf.to_container(cfg.hydra.sweep, resolve=False)
    assert cfg.hydra.sweep.dir == "runs/mr" and sweep["subdir"] == "${hydra.job.num}"


@pytest.mark.slow
def test_multirun_honours_out(tmp_path):
    r = forked.run([sys.executable, "-m", "nas.search", "-m", "n_trials=1,2", *SEARCH[:2], "progress=false",
                    f"out={tmp_path / 'mr'}"], cwd=REPO, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    for job, n in (("0", 1), ("1", 2)):
        storage = JournalStorage(JournalFileBackend(str(tmp_path / "mr" / job / "study.journal")))
        assert optuna.get_all_study_summaries(storage)[0].n_trials == n
        assert (tmp_path / "mr" / job / "pareto.json").is_file()
    assert not (REPO / "multirun").exists() or not any((REPO / "multirun").rglob("study.journal"))
