"""The latency budget a search runs under (placed among the space's sampled networks, kept on
resume) and the words every search output uses for how a latency figure was obtained."""

from __future__ import annotations

import csv
import json

import numpy as np
import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from nas.latency.predict.load import RooflineModel
from nas.search import study as study_mod
from nas.search.budget import BUDGET_ATTR, Budgets, LatencySpread, choose_latency_budget, kept, sampled_latencies
from nas.search.results import SHORT_HOW, latency_how, write_outputs
from nas.search.samplers import RandomSettings
from nas.search.storage import STUDY_ATTR, open_study
from nas.search.study import prepare_search, run_search
from nas.space import load_space
from tests import test_search
from tests.test_search import FakeEvaluator

target, digits = test_search.target, test_search.digits  # the search tests' fixtures


def _prepare(run_dir, target, data, *, budget_ms, given, study_name="t"):
    return prepare_search(target=target, search_space="tiny", data=data, evaluator=FakeEvaluator(),
                          sampler=RandomSettings(),
                          budgets=Budgets(latency_budget_ms=budget_ms, latency_budget_given=given), seed=0,
                          run_dir=run_dir, study_name=study_name, latency=RooflineModel(target))


def _sampled(s) -> np.ndarray:
    return sampled_latencies(s.problem.space, s.problem.latency, s.problem.deployed)


def _record(run_dir, name="t") -> dict:
    st = JournalStorage(JournalFileBackend(str(run_dir / "study.journal")))
    return st.get_study_user_attrs(st.get_study_id_from_name(name))


# ------------------------------------------------------------------------------------------- choosing


MS = np.linspace(0.05, 0.15, 200)


def test_a_target_budget_that_binds_no_network_becomes_the_sampled_median():
    b = choose_latency_budget(15.0, given=False, latencies=MS + 0.0001234, where="tiny on cpu", source="measured")
    assert (b.rule, b.ms) == ("median", 0.101)  # the median, 0.1001234 ms, rounded up: the median network meets it
    b = choose_latency_budget(15.0, given=False, latencies=np.full(5, 0.04434), where="x", source="measured")
    assert b.ms == 0.0444  # networks that all take one time: all feasible, never none
    b = choose_latency_budget(15.0, given=False, latencies=MS, where="tiny on cpu", source="measured")
    assert b.note == (f"latency budget {b.ms:g} ms: the median predicted latency of 200 sampled networks of tiny on "
                      "cpu (the target's own 15 ms would bind no network); latency_budget_ms= to set it")
    assert b.to_dict()["sampled"] == {"n": 200, "min_ms": 0.05, "median_ms": pytest.approx(0.1), "max_ms": 0.15}


@pytest.mark.parametrize("budget, says", [(0.1, "100 of 200 sampled networks of tiny on cpu meet it"),
                                          (0.01, "none of 200 sampled networks of tiny on cpu meets it")])
def test_a_target_budget_that_binds_or_is_below_all_is_kept(budget, says):
    b = choose_latency_budget(budget, given=False, latencies=MS, where="tiny on cpu", source="measured")
    assert (b.rule, b.ms) == ("target", budget) and says in b.note and "the target's" in b.note


@pytest.mark.parametrize("budget, says", [
    (15.0, "binds none of 200 sampled networks of tiny on cpu (roofline-estimated 0.05-0.15 ms): the latency "
           "constraint is inactive"),
    (0.15, "the latency constraint is inactive"),
    (0.01, "none of 200 sampled networks of tiny on cpu meets it (roofline-estimated 0.05-0.15 ms): only networks "
           "faster than all of them are feasible"),
    (0.05, "1 of 200 sampled networks of tiny on cpu meets it"),
])
def test_a_given_budget_is_kept_and_said_to_bind_or_not(budget, says):
    b = choose_latency_budget(budget, given=True, latencies=MS, where="tiny on cpu", source="estimated")
    assert (b.rule, b.ms) == ("given", budget) and says in b.note and "\n" not in b.note


def test_no_budget_and_bad_input():
    assert choose_latency_budget(None, given=True, latencies=MS, where="x", source="measured").ms is None
    assert choose_latency_budget(None, given=False, latencies=MS, where="x", source="measured").rule == "none"
    with pytest.raises(ValueError, match="no sampled latencies"):
        LatencySpread.of(np.array([]))
    with pytest.raises(ValueError, match="not a number"):
        kept("fast", None)
    with pytest.raises(ValueError, match="positive integer"):
        sampled_latencies(load_space("tiny"), None, lambda a: a, n=0)


def test_sampled_latencies_are_deterministic_and_batched(target):
    space, model = load_space("tiny"), RooflineModel(target)
    a = sampled_latencies(space, model, lambda arch: arch)
    assert a.shape == (200,) and np.array_equal(a, sampled_latencies(space, model, lambda arch: arch))
    assert np.allclose(a[:3], [model.explain(space.random(i)).ms for i in range(3)])


# ------------------------------------------------------------------------------------------- in a study


def test_the_default_budget_binds_the_space_and_is_recorded(tmp_path, target, digits):
    s = _prepare(tmp_path, target, digits, budget_ms=15.0, given=False)
    median = s.problem.budgets.latency_budget_ms
    assert s.latency_budget.rule == "median" and np.median(_sampled(s)) <= median < 1.01 * np.median(_sampled(s))
    assert float(f"{median:.3g}") == median
    assert max(_sampled(s)) < 15.0  # the target's own would have bound nothing
    rec = _record(tmp_path)
    assert rec[STUDY_ATTR]["budgets"]["latency_budget_ms"] == median and rec[BUDGET_ATTR]["rule"] == "median"
    run_search(s.study, s.problem, n_trials=8)
    statuses = {t.user_attrs["status"] for t in s.study.trials}
    assert {"over_budget", "evaluated"} <= statuses  # the constraint acts
    pj = json.loads(write_outputs(s.study, tmp_path, info=s.info(), plot=False)["pareto_json"].read_text())
    assert pj["latency_budget"]["ms"] == median and pj["latency_budget"]["note"].startswith(f"latency budget {median:g}")
    # the same settings elsewhere give the same budget
    assert _prepare(tmp_path / "again", target, digits, budget_ms=15.0, given=False).problem.budgets.latency_budget_ms == median


def test_a_resumed_study_keeps_its_budget(tmp_path, target, digits, monkeypatch):
    s = _prepare(tmp_path, target, digits, budget_ms=15.0, given=False)
    started = s.problem.budgets.latency_budget_ms
    run_search(s.study, s.problem, n_trials=2)
    # the space's networks now predict otherwise (a refreshed table): the study keeps its own budget
    monkeypatch.setattr(study_mod, "sampled_latencies", lambda *a, **k: np.linspace(1.0, 2.0, 200))
    s2 = _prepare(tmp_path, target, digits, budget_ms=15.0, given=False)
    assert not s2.created and s2.problem.budgets.latency_budget_ms == started and s2.latency_budget.rule == "kept"
    assert s2.latency_budget.note.startswith(f"latency budget {started:g} ms: the study's own, kept from its start "
                                             "(the median roofline-estimated latency of 200 sampled")
    pj = json.loads(write_outputs(s2.study, tmp_path, info=s2.info(), plot=False)["pareto_json"].read_text())
    assert pj["latency_budget"]["rule"] == "median" and pj["latency_budget"]["ms"] == started  # as chosen at start
    with pytest.raises(ValueError, match="budgets.latency_budget_ms"):  # a budget given on resume must be the study's
        _prepare(tmp_path, target, digits, budget_ms=1.5, given=True)


def test_a_study_started_with_the_target_budget_resumes_with_it(tmp_path, target, digits):
    """A study that ran under the target's own budget (as every study did before budgets were placed
    among the space's networks, and as a user may still ask) keeps it when resumed without one."""
    s = _prepare(tmp_path, target, digits, budget_ms=15.0, given=True)
    run_search(s.study, s.problem, n_trials=1)
    s.study.set_user_attr(BUDGET_ATTR, None)  # as a study from before the attribute existed
    s2 = _prepare(tmp_path, target, digits, budget_ms=15.0, given=False)
    assert s2.problem.budgets.latency_budget_ms == 15.0 and s2.latency_budget.note == (
        "latency budget 15 ms: the study's own, kept from its start")


# ------------------------------------------------------------------------------------------- labels


def test_latency_how_uses_the_shared_words():
    assert latency_how({"ms": 1.0, "source": "measured", "device": "Xeon"}) == "predicted from a measured table (Xeon)"
    assert latency_how({"source": "estimated", "device": "Orin"}) == "estimated (roofline, Orin)"
    assert latency_how({}) is None and latency_how({"source": "guessed"}) is None
    assert set(SHORT_HOW) == {"measured", "estimated", "rehearsal"} and "measured" not in SHORT_HOW["measured"]
    words = "REHEARSAL of jetson (tensorrt, fp16) on Xeon (onnxruntime CPUExecutionProvider)"
    assert latency_how({"source": "rehearsal", "device": "Xeon", "rehearsal": words}) == words


def test_outputs_say_how_each_latency_was_obtained(tmp_path, target, digits):
    s = _prepare(tmp_path, target, digits, budget_ms=None, given=True)
    run_search(s.study, s.problem, n_trials=4)
    out = write_outputs(s.study, tmp_path, info=s.info())
    pj = json.loads(out["pareto_json"].read_text())
    how = "estimated (roofline, Intel(R) Xeon(R) Processor)"
    assert pj["latency_model"]["how"] == how and pj["pareto"]
    assert all(e["latency_how"] == how and e["latency_source"] == "estimated" for e in pj["pareto"])
    rows = list(csv.DictReader(out["trials_csv"].open()))
    assert rows and all(r["latency_how"] == how and r["latency_source"] == "estimated" for r in rows)
    assert pj["latency_budget"]["rule"] == "none"


def test_budgets_take_their_config_names_and_read_the_old_ones():
    """``Budgets`` is named as the config and the results are (``latency_budget_ms``, ``memory_budget_kb``);
    the old keywords warn, and a study recorded under the old names resumes."""
    with pytest.warns(DeprecationWarning, match=r"Budgets\(latency_ms=\) is now Budgets\(latency_budget_ms=\)"):
        assert Budgets(latency_ms=3.0) == Budgets(latency_budget_ms=3.0)
    assert Budgets.from_record({"latency_ms": 2.0, "memory_kb": None}) == Budgets(latency_budget_ms=2.0)
    with pytest.raises(TypeError, match="latency_msec"):
        Budgets(latency_msec=1.0)
    storage = optuna.storages.InMemoryStorage()
    old = {"objectives": ["val_accuracy", "latency_ms"], "budgets": {"latency_ms": 5.0, "memory_kb": None}}
    open_study(storage=storage, study_name="s", sampler=optuna.samplers.RandomSampler(), record=old)
    new = {"objectives": ["val_accuracy", "latency_ms"], "budgets": Budgets(latency_budget_ms=5.0).to_dict()}
    assert open_study(storage=storage, study_name="s", sampler=optuna.samplers.RandomSampler(), record=new)


def test_whose_latency_budget_it_is_is_part_of_the_budgets_not_of_the_record():
    """``Budgets.latency_budget_given`` (the user's budget, the default; False: the target's own) says how
    ``prepare_search`` treats the latency budget; the study's record (``to_dict``) holds the budgets only."""
    assert Budgets().latency_budget_given and Budgets(latency_budget_ms=2.0).latency_budget_given
    own = Budgets(latency_budget_ms=2.0, latency_budget_given=False)
    assert not own.latency_budget_given and own.to_dict() == Budgets(latency_budget_ms=2.0).to_dict()
    with pytest.raises(TypeError, match="latency_budget_given must be True or False, got 'no'"):
        Budgets(latency_budget_ms=2.0, latency_budget_given="no")
