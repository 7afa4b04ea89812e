"""The search: seeded studies, failures, budgets, the cache, resume, Ctrl-C, two workers, outputs.

Most tests drive the library with a counting fake evaluator and the roofline latency model
(fast, no table needed); one test trains for real.  Its config and command line are in
test_search_cli.py.  Run as a script (``python tests/test_search.py worker ...``), this file is
one worker of the two-process test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import forked
import optuna
import pytest
import torch
from optuna.trial import TrialState

from nas.arch import Arch
from nas.config import compose_app
from nas.config.search import register_search_configs
from nas.data import load_data
from nas.latency.predict.load import RooflineModel
from nas.search.budget import Budgets
from nas.search.evaluate import EvalResult, Evaluator, make_evaluator
from nas.search.results import pareto_front, write_outputs
from nas.search.rundir import RunDirTaken
from nas.search.samplers import RandomSettings, make_sampler, sampler_settings
from nas.search.storage import fail_stale_trials, make_storage
from nas.search.study import count_trials, prepare_search, run_search
from nas.target import Target

REPO = Path(__file__).resolve().parent.parent
register_search_configs()
optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass(eq=False)
class FakeEvaluator(Evaluator):
    """Deterministic score from the Arch's size; counts calls; can fail or be interrupted on given calls."""

    fail_on: tuple[int, ...] = ()  # 1-based call numbers that raise RuntimeError
    interrupt_on: int | None = None  # the call number that raises KeyboardInterrupt
    sleep_s: float = 0.0
    calls: list[str] = field(default_factory=list)  # digests evaluated

    name = "fake"

    @property
    def metric(self) -> str:
        return "val_accuracy"

    def settings(self) -> dict:
        return {"name": "fake"}

    def evaluate(self, arch: Arch, data, *, seed: int) -> EvalResult:
        self.calls.append(arch.digest())
        n = len(self.calls)
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.interrupt_on == n:
            raise KeyboardInterrupt
        if n in self.fail_on:
            raise RuntimeError(f"boom on call {n}")
        from nas.cost import arch_cost

        p = arch_cost(arch).params
        return EvalResult(1.0 - 1.0 / (1.0 + p / 2e4) + (seed % 97) * 1e-5, self.metric, 0.0, {"seed": float(seed)})


def _target(name: str = "cpu") -> Target:
    return Target.coerce(compose_app("search", [f"conf={name}"]).target)  # as the command does, once


@pytest.fixture(scope="module")
def target():
    return _target()


@pytest.fixture(scope="module")
def digits():
    return load_data({"name": "digits", "resolution": 8, "train_samples": 120, "val_samples": 60})


def _prepare(run_dir, target, data, evaluator, *, sampler="random", seed=0, budgets=None, study_name="t",
             storage=None, space="tiny", command=None, **skw):
    return prepare_search(target=target, search_space=space, data=data, evaluator=evaluator,
                          sampler=sampler_settings({"name": sampler, **skw}), budgets=budgets or Budgets(), seed=seed,
                          run_dir=run_dir, storage=storage, study_name=study_name, latency=RooflineModel(target),
                          command=command)


def _search(run_dir, target, data, evaluator, *, n_trials, **kw):
    s = _prepare(run_dir, target, data, evaluator, **kw)
    rep = run_search(s.study, s.problem, n_trials=n_trials, storage=s.storage)
    return s, rep


def _summary(study):
    return [(t.number, t.state.name, t.params, t.values, t.user_attrs.get("status")) for t in study.trials]


def _reload(journal: Path, name: str = "t") -> optuna.Study:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return optuna.load_study(study_name=name, storage=JournalStorage(JournalFileBackend(str(journal))))


# ------------------------------------------------------------------------------------------- library


@pytest.mark.parametrize("sampler", ["nsga2", "tpe", "random"])
def test_same_seed_same_trials(tmp_path, target, digits, sampler):
    kw = {"population_size": 4} if sampler == "nsga2" else {"n_startup_trials": 3} if sampler == "tpe" else {}
    a, _ = _search(tmp_path / "a", target, digits, FakeEvaluator(), n_trials=9, sampler=sampler, seed=3, **kw)
    b, _ = _search(tmp_path / "b", target, digits, FakeEvaluator(), n_trials=9, sampler=sampler, seed=3, **kw)
    assert _summary(a.study) == _summary(b.study)
    c, _ = _search(tmp_path / "c", target, digits, FakeEvaluator(), n_trials=9, sampler=sampler, seed=4, **kw)
    assert [t.params for t in c.study.trials] != [t.params for t in a.study.trials]
    assert all(t.state == TrialState.COMPLETE for t in a.study.trials)
    assert a.study.metric_names == ["val_accuracy", "latency_ms"]


def test_real_training_same_seed_same_trials(tmp_path, target, digits):
    torch.set_num_threads(1)
    ev = {"name": "train", "epochs": 1, "batch_size": 32, "device": "cpu"}
    a, _ = _search(tmp_path / "a", target, digits, make_evaluator(ev), n_trials=2, sampler="nsga2", population_size=4)
    b, _ = _search(tmp_path / "b", target, digits, make_evaluator(ev), n_trials=2, sampler="nsga2", population_size=4)
    assert _summary(a.study) == _summary(b.study)
    assert all(0 <= t.values[0] <= 1 and t.values[1] > 0 for t in a.study.trials)


def test_failing_trial_is_recorded_and_the_search_goes_on(tmp_path, target, digits):
    ev = FakeEvaluator(fail_on=(2,))
    s, rep = _search(tmp_path, target, digits, ev, n_trials=5)
    states = [t.state for t in s.study.trials]
    assert len(states) == 5 and states.count(TrialState.FAIL) == 1 and states.count(TrialState.COMPLETE) == 4
    failed = next(t for t in s.study.trials if t.state == TrialState.FAIL)
    assert failed.user_attrs["status"] == "error" and "RuntimeError: boom on call 2" in failed.user_attrs["error"]
    assert failed.user_attrs["arch"] and failed.user_attrs["latency"]["ms"] > 0  # what failed is on record
    assert rep.statuses == {"evaluated": 4, "error": 1}
    out = write_outputs(s.study, tmp_path)
    assert "boom on call 2" in out["trials_csv"].read_text()


@pytest.mark.parametrize("which", ["latency", "memory"])
def test_over_budget_is_never_trained(tmp_path, target, digits, which):
    budgets = _median_budget(tmp_path / "probe", target, digits, which)
    ev = FakeEvaluator()
    s, _ = _search(tmp_path / "run", target, digits, ev, n_trials=16, budgets=budgets, seed=1)
    trials = s.study.trials
    over = [t for t in trials if t.user_attrs["status"] == "over_budget"]
    evaluated = [t for t in trials if t.user_attrs["status"] == "evaluated"]
    assert over and evaluated
    assert len(ev.calls) == len(evaluated)  # exactly the feasible, uncached ones were trained
    assert not {t.user_attrs["digest"] for t in over} & set(ev.calls)
    for t in over:
        assert t.constraints[which] > 0 and t.state == TrialState.COMPLETE
    for t in evaluated:
        assert t.constraints[which] <= 0
    recs = write_outputs(s.study, tmp_path / "run", plot=False)["records"]
    assert all(r["score"] is None and r["feasible"] is False for r in recs if r["status"] == "over_budget")
    assert all(r["number"] in {t.number for t in evaluated} for r in pareto_front(recs))


def _median_budget(tmp_path, target, digits, which) -> Budgets:
    """A budget that about half of the tiny space's deployed networks exceed."""
    from nas.cost import arch_cost
    from nas.space import load_space

    space = load_space("tiny")
    probe = _prepare(tmp_path, target, digits, FakeEvaluator())
    sample = [probe.problem.deployed(space.random(i)) for i in range(40)]
    if which == "latency":
        v = sorted(RooflineModel(target).explain(a).ms for a in sample)
        return Budgets(latency_budget_ms=v[len(v) // 2])
    v = sorted(arch_cost(a).peak_activation_bytes / 1024 for a in sample)
    return Budgets(memory_budget_kb=v[len(v) // 2])


def _two_arch_space(tmp_path) -> Path:
    p = tmp_path / "two.yaml"
    p.write_text(
        "name: two\ninput: {channels: 3, resolution: 32}\nnum_classes: 10\nchannel_multiple: 8\n"
        "stem: {width: [8, 16], kernel: 3, stride: 2, act: relu}\n"
        "stages:\n  - {kind: ds, depth: [1], width: [16], kernel: [3], se: [false], stride: 2, act: relu}\n"
        "head: {style: pool}\n"
    )
    return p


def _digests(study, *, counted=True):
    return [t.user_attrs.get("digest") for t in study.trials if not counted or _counted(t)]


def _counted(t) -> bool:
    return t.state == TrialState.COMPLETE or (t.state == TrialState.FAIL and t.user_attrs.get("status") == "error")


def test_the_same_arch_is_never_evaluated_or_counted_twice(tmp_path, target, digits):
    ev = FakeEvaluator()
    space = str(_two_arch_space(tmp_path))
    s = _prepare(tmp_path, target, digits, ev, space=space)
    seen = []
    rep = run_search(s.study, s.problem, n_trials=8, max_consecutive_duplicates=20, callback=seen.append)
    assert len(ev.calls) == len(set(ev.calls)) == 2  # the space holds two architectures
    assert rep.exhausted and rep.ran == 2 and count_trials(s.study) == 2 and rep.duplicates == 20
    dups = [t for t in s.study.trials if t.user_attrs["status"] == "duplicate"]
    assert len(dups) == 20 and all(t.state == TrialState.FAIL for t in dups)
    for t in dups:
        held = s.study.trials[t.user_attrs["duplicate_of"]]
        assert held.user_attrs["digest"] == t.user_attrs["digest"] and held.state == TrialState.COMPLETE
    assert [o.status for o in seen].count("duplicate") == 20
    # a new worker process finds them in the study too: nothing evaluated, nothing counted
    ev2 = FakeEvaluator()
    s2 = _prepare(tmp_path, target, digits, ev2, space=space, seed=5)
    rep2 = run_search(s2.study, s2.problem, n_trials=12, max_consecutive_duplicates=5)
    assert ev2.calls == [] and rep2.ran == 0 and rep2.exhausted and count_trials(s2.study) == 2
    recs = write_outputs(s2.study, tmp_path, plot=False)["records"]
    assert len(pareto_front(recs)) <= 2
    assert all(r["feasible"] is None and r["score"] is None for r in recs if r["status"] == "duplicate")


@pytest.mark.parametrize("sampler", ["random", "nsga2", "tpe"])
def test_resume_and_extension_continue_the_sampler(tmp_path, target, digits, sampler):
    """Interrupt, resume, then raise n_trials: no architecture is evaluated or counted twice."""
    kw = {"population_size": 4} if sampler == "nsga2" else {"n_startup_trials": 4} if sampler == "tpe" else {}
    evaluated: list[str] = []
    s = _prepare(tmp_path, target, digits, FakeEvaluator(interrupt_on=4, calls=evaluated), sampler=sampler, **kw)
    with pytest.raises(KeyboardInterrupt):
        run_search(s.study, s.problem, n_trials=8)
    for n in (8, 14):  # resume the interrupted study, then extend the finished one
        s = _prepare(tmp_path, target, digits, FakeEvaluator(calls=evaluated), sampler=sampler, **kw)
        rep = run_search(s.study, s.problem, n_trials=n)
        assert count_trials(s.study) == n and not rep.exhausted
    done = evaluated[:3] + evaluated[4:]  # call 4 was interrupted, so it was not scored
    assert len(done) == len(set(done)) == 14, "an architecture was evaluated twice"
    counted = _digests(s.study)
    assert len(counted) == len(set(counted)) == 14, "an architecture was counted twice"


def test_a_fresh_study_is_reproducible_and_a_resumed_one_draws_new(tmp_path, target, digits):
    """Per-trial seeding: the same seed gives the same sequence; trial n's draw does not depend on the
    process that runs it."""
    a, _ = _search(tmp_path / "a", target, digits, FakeEvaluator(), n_trials=6, sampler="random")
    b, _ = _search(tmp_path / "b", target, digits, FakeEvaluator(), n_trials=3, sampler="random")
    b, _ = _search(tmp_path / "b", target, digits, FakeEvaluator(), n_trials=6, sampler="random")
    assert [t.params for t in a.study.trials] == [t.params for t in b.study.trials]


def test_resume_by_rerunning(tmp_path, target, digits):
    s, _ = _search(tmp_path, target, digits, FakeEvaluator(), n_trials=4, sampler="nsga2", population_size=4)
    first = _summary(s.study)
    s2, rep = _search(tmp_path, target, digits, FakeEvaluator(), n_trials=7, sampler="nsga2", population_size=4)
    assert not s2.created and rep.ran == 3
    assert _summary(s2.study)[:4] == first and count_trials(s2.study) == 7
    _, rep = _search(tmp_path, target, digits, FakeEvaluator(), n_trials=7)  # already done: nothing to do
    assert rep.ran == 0


def test_resume_with_other_settings_is_refused(tmp_path, target, digits):
    _search(tmp_path, target, digits, FakeEvaluator(), n_trials=1)
    other = load_data({"name": "digits", "resolution": 12, "train_samples": 120, "val_samples": 60})
    with pytest.raises(ValueError, match=r"different settings \(data.resolution: 8 in the study, 12 now.*study_name="):
        _prepare(tmp_path, target, other, FakeEvaluator())
    with pytest.raises(ValueError, match="budgets.latency_budget_ms"):
        _prepare(tmp_path, target, digits, FakeEvaluator(), budgets=Budgets(latency_budget_ms=1.0))
    _prepare(tmp_path, target, digits, FakeEvaluator(), seed=9, sampler="tpe")  # seed and sampler may change


def test_a_run_dir_holds_one_search(tmp_path, target, digits, snapshot):
    other = str(_two_arch_space(tmp_path))
    tmp_path = tmp_path / "run"
    s, _ = _search(tmp_path, target, digits, FakeEvaluator(), n_trials=2)
    write_outputs(s.study, tmp_path, plot=False)
    owner = json.loads((tmp_path / "run.json").read_text())
    assert owner["study"] == "t" and owner["storage"] == "study.journal"
    before = snapshot(tmp_path)
    with pytest.raises(RunDirTaken, match=r"holds the search 't' .*nothing was changed.*new folder: "
                                          r"python -m nas\.search search_space=two out=.*-2"):
        _prepare(tmp_path, target, digits, FakeEvaluator(), space=other, study_name="two",
                 command=["search_space=two", f"out={tmp_path}"])
    with pytest.raises(RunDirTaken, match="in .*elsewhere.journal"):  # the same study name in another storage
        _prepare(tmp_path, target, digits, FakeEvaluator(), storage=str(tmp_path / "elsewhere.journal"))
    assert snapshot(tmp_path) == before, "a refused start changed the run dir"
    s2, rep = _search(tmp_path, target, digits, FakeEvaluator(), n_trials=3)  # the same search resumes
    assert not s2.created and rep.ran == 1


def test_a_run_dir_from_before_run_json_is_recognised(tmp_path, target, digits):
    _search(tmp_path, target, digits, FakeEvaluator(), n_trials=1)
    (tmp_path / "run.json").unlink()
    with pytest.raises(RunDirTaken, match="holds the search 't'"):
        _prepare(tmp_path, target, digits, FakeEvaluator(), study_name="other")
    _prepare(tmp_path, target, digits, FakeEvaluator())
    assert json.loads((tmp_path / "run.json").read_text())["study"] == "t"


@pytest.mark.parametrize("which", ["latency", "memory"])
def test_a_budget_no_architecture_meets_is_refused_at_the_start(tmp_path, target, digits, which):
    budgets = Budgets(latency_budget_ms=1e-6) if which == "latency" else Budgets(memory_budget_kb=1e-3)
    with pytest.raises(ValueError, match=rf"{which}_budget_.*no architecture of space 'tiny'.*smallest"):
        _prepare(tmp_path, target, digits, FakeEvaluator(), budgets=budgets)
    assert not (tmp_path / "study.journal").exists()


def test_ctrl_c_leaves_a_consistent_study(tmp_path, target, digits):
    s = _prepare(tmp_path, target, digits, FakeEvaluator(interrupt_on=3))
    with pytest.raises(KeyboardInterrupt):
        run_search(s.study, s.problem, n_trials=6)
    study = _reload(tmp_path / "study.journal")  # as a new process sees it
    states = [(t.state, t.user_attrs.get("status")) for t in study.trials]
    assert states == [(TrialState.COMPLETE, "evaluated")] * 2 + [(TrialState.FAIL, "interrupted")]
    assert count_trials(study) == 2
    write_outputs(study, tmp_path, plot=False)  # outputs from what finished
    ev = FakeEvaluator()
    s2 = _prepare(tmp_path, target, digits, ev)
    rep = run_search(s2.study, s2.problem, n_trials=6)
    assert rep.ran == 4 and count_trials(s2.study) == 6 and len(s2.study.trials) == 7


def test_trials_left_running_by_a_dead_process_are_failed(tmp_path, target, digits):
    s = _prepare(tmp_path, target, digits, FakeEvaluator())
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    import socket

    t = s.study.ask()
    t.set_user_attr("worker", f"{socket.gethostname()}:{p.pid}")
    t.set_user_attr("status", "running")
    alive = s.study.ask()
    alive.set_user_attr("worker", f"{socket.gethostname()}:{os.getppid()}")
    assert fail_stale_trials(s.study, s.storage) == [t.number]
    got = {x.number: (x.state, x.user_attrs.get("status")) for x in s.study.trials}
    assert got[t.number] == (TrialState.FAIL, "stale") and got[alive.number][0] == TrialState.RUNNING


def test_outputs(tmp_path, target, digits):
    budgets = _median_budget(tmp_path / "probe", target, digits, "latency")
    s, _ = _search(tmp_path, target, digits, FakeEvaluator(fail_on=(3,)), n_trials=10, budgets=budgets)
    out = write_outputs(s.study, tmp_path, info=s.info())
    pj = json.loads(out["pareto_json"].read_text())
    assert pj["schema"] == "hwnas.pareto" and pj["metric"] == "val_accuracy" and pj["study"] == "t"
    assert pj["search"]["budgets"]["latency_budget_ms"] == budgets.latency_budget_ms and pj["trials"]["total"] == 10
    assert pj["latency_model"]["source"] == "estimated" and "ESTIMATE" in pj["latency_model"]["warning"]
    assert pj["pareto"]
    for e in pj["pareto"]:
        arch = Arch.from_dict(e["arch"])
        assert arch.digest() == e["digest"] and arch.resolution == 32 and arch.in_chans == 1
        assert e["latency_ms"] <= budgets.latency_budget_ms and e["latency_source"] == "estimated" and e["latency"]["ms"] == e["latency_ms"]
        assert e["params"] > 0 and e["macs"] > 0 and e["peak_activation_bytes"] > 0
    front = [(e["val_accuracy"], e["latency_ms"]) for e in pj["pareto"]]
    assert all(not (a2 >= a1 and l2 <= l1 and (a2, l2) != (a1, l1)) for a1, l1 in front for a2, l2 in front)
    rows = out["trials_csv"].read_text().splitlines()
    assert rows[0].startswith("number,state,status,val_accuracy,ci95_low,ci95_high,scored_images,latency_ms") and len(rows) == 11
    assert out["pareto_png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pareto_front_keeps_one_trial_per_arch():
    def r(n, s, ms, d, feasible=True):
        return {"number": n, "state": "COMPLETE", "score": s, "latency_ms": ms, "digest": d, "feasible": feasible}

    recs = [r(0, 0.9, 2.0, "a"), r(1, 0.9, 2.0, "a"), r(2, 0.8, 1.0, "b"), r(3, 0.85, 3.0, "c"),
            r(4, 0.99, 0.5, "d", feasible=False), {**r(5, None, 0.1, "e")}]
    assert [x["number"] for x in pareto_front(recs)] == [2, 0]


def test_storage_and_sampler_errors(tmp_path):
    with pytest.raises(ValueError, match="sqlite:///"):
        make_storage(str(tmp_path / "x.db"), run_dir=tmp_path)
    with pytest.raises(ValueError, match="is a folder"):
        make_storage(str(tmp_path), run_dir=tmp_path)
    st, desc = make_storage(f"sqlite:///{tmp_path / 'x.db'}", run_dir=tmp_path)
    assert desc.startswith("sqlite") and isinstance(st, optuna.storages.RDBStorage)
    with pytest.raises(ValueError, match="unknown sampler 'cmaes'.*nsga2, random, tpe"):
        make_sampler({"name": "cmaes"}, seed=0)
    with pytest.raises(ValueError, match=r"unknown setting\(s\) \['popsize'\]"):
        make_sampler({"name": "nsga2", "popsize": 3}, seed=0)
    with pytest.raises(ValueError, match="population_size must be >= 2"):
        make_sampler({"name": "nsga2", "population_size": 1}, seed=0)
    with pytest.raises(ValueError, match="latency_budget_ms must be a positive number"):
        Budgets(latency_budget_ms=-1)


@pytest.mark.parametrize("arg,value,reader", [
    ("data", {"name": "digits"}, "nas.data.DataSettings.from_dict"),
    ("evaluator", {"name": "zero_cost"}, "nas.search.make_evaluator"),
    ("sampler", {"name": "random"}, "nas.search.samplers.sampler_settings"),
    ("pruner", {"name": "sha"}, "nas.search.pruners.pruner_settings"),
    ("budgets", {"latency_budget_ms": 5.0}, "nas.search.Budgets"),
])
def test_a_dict_of_settings_is_refused_naming_its_reader(tmp_path, target, digits, arg, value, reader):
    """``prepare_search`` takes typed settings only: a dict is refused, before the run dir is touched, with
    one line naming the function that reads it."""
    kw = {"data": digits, "evaluator": FakeEvaluator(), "sampler": RandomSettings(), "pruner": None,
          "budgets": Budgets(), arg: value}
    with pytest.raises(TypeError) as e:
        prepare_search(target=target, search_space="tiny", seed=0, run_dir=tmp_path / "run",
                       latency=RooflineModel(target), **kw)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{arg} must be ") and reader in msg and msg.endswith("got dict"), msg
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------- two workers


def _worker(journal: str, seed: int, n_trials: int, barrier: str) -> None:
    """One worker process of test_two_workers_share_one_study: prints the trial numbers and the
    architectures (digests) it evaluated.  ``barrier``: a path prefix, ``<prefix>.<pid>`` marks it ready."""
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    target = _target()
    data = load_data({"name": "digits", "resolution": 8, "train_samples": 120, "val_samples": 60})
    s = _prepare(Path(journal).parent, target, data, FakeEvaluator(sleep_s=0.05), sampler="random", seed=seed,
                 storage=journal)
    ev = s.problem.evaluator
    mine: list[int] = []
    Path(f"{barrier}.{os.getpid()}").touch()
    deadline = time.time() + 60
    while len(list(Path(barrier).parent.glob(Path(barrier).name + ".*"))) < 2 and time.time() < deadline:
        time.sleep(0.02)
    run_search(s.study, s.problem, n_trials=n_trials, storage=s.storage,
               callback=lambda o: mine.append(o.number) if o.status not in ("duplicate", "surplus") else None)
    print(json.dumps({"pid": os.getpid(), "trials": mine, "evaluated": ev.calls}))


def test_two_workers_share_one_study(tmp_path):
    journal = tmp_path / "shared" / "study.journal"
    barrier = str(tmp_path / "go")
    n = 24
    procs = [forked.Popen([sys.executable, __file__, "worker", str(journal), "1", str(n), barrier], cwd=REPO)
             for _ in range(2)]  # the same seed: the workers still draw distinct streams
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    study = _reload(journal)
    trials = [t for t in study.trials if t.user_attrs.get("status") not in ("duplicate", "surplus")]
    numbers = [t.number for t in trials]
    ran = [set(o["trials"]) for o in outs]
    assert all(ran), "both workers ran trials"
    assert not ran[0] & ran[1], "no trial was run twice"
    assert ran[0] | ran[1] == set(numbers), "every trial a worker ran is recorded, and only those"
    assert len(trials) == n == count_trials(study)  # the budget is shared exactly
    assert all(t.state == TrialState.COMPLETE for t in trials)
    workers = {t.user_attrs["worker"].rpartition(":")[2] for t in trials}
    assert workers == {str(o["pid"]) for o in outs}
    evaluated = outs[0]["evaluated"] + outs[1]["evaluated"]
    assert len(evaluated) == len(set(evaluated)), "an architecture was evaluated twice"
    counted = _digests(study)
    assert len(counted) == len(set(counted)), "an architecture was counted twice"


@pytest.mark.parametrize("other", ["completes", "repeats"])
def test_two_workers_asking_for_the_last_slot_run_one_trial(tmp_path, target, digits, monkeypatch, other):
    """Workers a and b both see one slot left; b asks first and is still running when a asks.  a's
    trial is surplus: not evaluated, not counted, not on the front.  When b's trial turns out a repeat
    (the slot is freed), a takes the slot with a new trial."""
    journal, n = tmp_path / "study.journal", 4
    a = _prepare(tmp_path, target, digits, FakeEvaluator(), storage=str(journal), seed=1)
    b = _prepare(tmp_path, target, digits, FakeEvaluator(), storage=str(journal), seed=1)
    run_search(a.study, a.problem, n_trials=n - 1)
    held: list[optuna.Trial] = []
    ask = a.study.ask

    def b_asks_first() -> optuna.Trial:
        if not held:
            held.append(b.study.ask())
        return ask()

    def on_trial(o) -> None:
        if o.status == "surplus" and other == "repeats":
            held[0].set_user_attr("status", "duplicate")
            b.study.tell(held[0], state=TrialState.FAIL)

    monkeypatch.setattr(a.study, "ask", b_asks_first)
    rep = run_search(a.study, a.problem, n_trials=n, storage=a.storage, callback=on_trial)
    assert rep.surplus == 1 and rep.ran == (other == "repeats")
    assert len(a.problem.evaluator.calls) == n - 1 + rep.ran
    if other == "completes":
        b.study.tell(held[0], b.problem(held[0]))
    study = _reload(journal)
    surplus = [t for t in study.trials if t.user_attrs.get("status") == "surplus"]
    assert [(t.number, t.state) for t in surplus] == [(n, TrialState.FAIL)] and "digest" not in surplus[0].user_attrs
    assert count_trials(study) == n == sum(t.state == TrialState.COMPLETE for t in study.trials)
    out = json.loads(Path(write_outputs(study, tmp_path, plot=False)["pareto_json"]).read_text())
    assert out["trials"]["total"] == n and out["trials"]["surplus"] == 1
    assert n not in {r["trial"] for r in out["pareto"]}


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "worker":
    _worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])


def test_run_search_shows_progress_by_default_and_is_quiet_with_progress_false(tmp_path, target, digits, capsys):
    s = _prepare(tmp_path / "a", target, digits, FakeEvaluator())
    run_search(s.study, s.problem, n_trials=3, storage=s.storage)
    err = capsys.readouterr().err
    assert "search:" in err and "3/3" in err and "best" in err  # the bar, as the CLI shows it
    s = _prepare(tmp_path / "b", target, digits, FakeEvaluator(fail_on=(1,)))
    seen = []
    run_search(s.study, s.problem, n_trials=3, storage=s.storage, progress=False, callback=seen.append)
    out = capsys.readouterr()
    assert out.err == "" and out.out == "" and len(seen) >= 3  # quiet; the caller's callback still sees every trial

