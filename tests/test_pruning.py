"""Multi-fidelity search: Optuna's pruners stop hopeless ``train`` trials early (``nas.search.pruners``)."""

from __future__ import annotations

import csv

import optuna
import pytest
import torch
from optuna.trial import TrialState

from nas.data import load_data
from nas.latency.predict.load import RooflineModel
from nas.search.budget import Budgets
from nas.search.evaluate import make_evaluator
from nas.search.pruners import INTERMEDIATE_ATTR, ScoreView, intermediate_values, make_pruner, pruner_settings
from nas.search.results import pareto_front, trial_records, write_outputs
from nas.search.samplers import sampler_settings
from nas.search.study import count_trials, prepare_search, run_search
from tests import test_cli_errors
from tests.test_search import FakeEvaluator, _target

cli = test_cli_errors.cli  # the fixture: a command's exit code and stderr

EV = {"name": "train", "epochs": 3, "batch_size": 32, "device": "cpu"}


@pytest.fixture(scope="module")
def target():
    return _target()


@pytest.fixture(scope="module")
def digits():
    return load_data({"name": "digits", "resolution": 8, "train_samples": 120, "val_samples": 60})


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _prepare(run_dir, target, data, evaluator, *, pruner, sampler="random", **skw):
    """A search with the typed settings ``prepare_search`` takes, read from the dicts the tests write."""
    return prepare_search(target=target, search_space="tiny", data=data, evaluator=evaluator,
                          sampler=sampler_settings({"name": sampler, **skw}), budgets=Budgets(), seed=0,
                          run_dir=run_dir, study_name="t", latency=RooflineModel(target),
                          pruner=None if pruner is None else pruner_settings(pruner))


def _run(run_dir, target, data, *, pruner, n_trials, sampler="random", **kw):
    s = _prepare(run_dir, target, data, make_evaluator(EV), sampler=sampler, pruner=pruner, **kw)
    rep = run_search(s.study, s.problem, n_trials=n_trials, storage=s.storage)
    return s, rep


def test_a_pruner_stops_trials_without_changing_the_others(tmp_path, target, digits):
    pruned, rep = _run(tmp_path / "sha", target, digits, pruner={"name": "sha"}, n_trials=8)
    full, _ = _run(tmp_path / "none", target, digits, pruner=None, n_trials=8)
    trials = pruned.study.trials
    stopped = [t for t in trials if t.state == TrialState.PRUNED]
    assert stopped and rep.statuses.get("pruned") == len(stopped) and count_trials(pruned.study) == 8
    for t in stopped:  # no score, the epochs it trained kept
        assert t.values is None and t.user_attrs["status"] == "pruned"
        assert 1 <= len(intermediate_values(t)) < EV["epochs"]
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert done
    others = {t.number: t for t in full.study.trials}
    for t in done:  # scoring between epochs leaves the training run as it was
        steps = intermediate_values(t)
        assert sorted(steps) == [1, 2, 3] and steps[3] == t.values[0]
        assert t.values == others[t.number].values
    assert not any(t.intermediate_values for t in trials)  # kept in user attrs, not Optuna's (see the module)


def test_pruned_trials_show_in_the_results_and_never_on_the_front(tmp_path, target, digits):
    s, _ = _run(tmp_path, target, digits, pruner={"name": "median", "n_startup_trials": 1}, n_trials=6)
    recs = trial_records(s.study)
    pr = [r for r in recs if r["status"] == "pruned"]
    assert pr and all(r["score"] is None and r["epochs_trained"] < 3 and r["epoch_scores"] for r in pr)
    assert not {r["number"] for r in pr} & {r["number"] for r in pareto_front(recs)}
    outs = write_outputs(s.study, tmp_path, info=s.info(), plot=False)
    assert outs["statuses"]["pruned"] == len(pr)
    with open(outs["trials_csv"]) as f:
        rows = list(csv.DictReader(f))
    assert sum(r["status"] == "pruned" for r in rows) == len(pr)


def test_resume_keeps_pruned_trials(tmp_path, target, digits):
    a, _ = _run(tmp_path, target, digits, pruner={"name": "sha"}, n_trials=5)
    before = {t.number: (t.state, t.user_attrs.get(INTERMEDIATE_ATTR)) for t in a.study.trials}
    assert any(st == TrialState.PRUNED for st, _ in before.values())
    b, rep = _run(tmp_path, target, digits, pruner={"name": "sha"}, n_trials=7)
    after = {t.number: (t.state, t.user_attrs.get(INTERMEDIATE_ATTR)) for t in b.study.trials}
    assert all(after[n] == v for n, v in before.items())  # kept, not redone
    assert rep.ran == 2 and count_trials(b.study) == 7


class _FidelityEvaluator(FakeEvaluator):
    """The fake's score, reached linearly over 4 epochs: fast, for every pruner and sampler."""

    fidelity = True
    epochs = 4

    def evaluate(self, arch, data, *, seed, on_epoch=None):
        res = FakeEvaluator.evaluate(self, arch, data, seed=seed)
        for e in range(1, 4):
            if on_epoch is not None:
                on_epoch(e, res.score * e / 4)
        return type(res)(res.score, res.metric, 0.0, {"epochs": 4.0})


@pytest.mark.parametrize("pruner", ["median", "sha", "hyperband"])
@pytest.mark.parametrize("sampler", ["tpe", "nsga2"])
def test_every_pruner_runs_with_every_sampler(tmp_path, target, digits, pruner, sampler):
    kw = {"population_size": 4} if sampler == "nsga2" else {"n_startup_trials": 3}
    s = _prepare(tmp_path, target, digits, _FidelityEvaluator(), sampler=sampler,
                 pruner={"name": pruner, **({"n_startup_trials": 1} if pruner == "median" else {})}, **kw)
    rep = run_search(s.study, s.problem, n_trials=14, storage=s.storage)
    assert rep.statuses.get("pruned", 0) > 0 and rep.statuses.get("error", 0) == 0, rep.statuses


def test_a_pruner_needs_a_training_evaluator(tmp_path, target, digits):
    with pytest.raises(ValueError, match=r"pruner=sha needs an evaluator that trains .*use pruner=none"):
        _prepare(tmp_path, target, digits, make_evaluator({"name": "zero_cost"}), pruner={"name": "sha"})


@pytest.mark.parametrize("cfg,msg", [
    ({"name": "shaa"}, r"pruner.name: unknown pruner 'shaa'; valid pruners: hyperband, median, none, sha"),
    ({"name": "sha", "reduction": 2}, r"pruner 'sha': unknown setting\(s\) \['reduction'\]"),
    ({"name": "sha", "reduction_factor": 1}, r"pruner sha: reduction_factor must be an integer >= 2, got 1"),
    ({"name": "hyperband", "min_resource": 3}, r"min_resource \(3\) must be below evaluator.epochs \(3\)"),
])
def test_bad_pruner_settings_are_refused(cfg, msg):
    with pytest.raises(ValueError, match=msg):
        make_pruner(cfg, max_resource=3)


def test_the_score_view_is_a_read_only_single_objective_study():
    study = optuna.create_study(directions=["maximize", "minimize"])
    t = study.ask()
    t.set_user_attr("status", "running")
    t.set_user_attr(INTERMEDIATE_ATTR, {"1": 0.25, "2": 0.5})
    over = study.ask()
    over.set_user_attr("status", "over_budget")
    study.tell(over, [0.0, 3.0])
    view = optuna.study.Study(study_name=study.study_name, storage=ScoreView(study._storage))
    assert view.direction == optuna.study.StudyDirection.MAXIMIZE
    (seen,) = view.get_trials()  # the untrained trial is not shown
    assert seen.number == t.number and seen.intermediate_values == {1: 0.25, 2: 0.5} and seen.last_step == 2
    with pytest.raises(RuntimeError, match="read-only"):
        view.ask()


def test_a_mistyped_pruner_is_one_line(cli):
    code, err = cli("search", "pruner=shaa")
    assert code == 2
    assert err.strip() == "error: unknown pruner 'shaa'; pruner= one of: hyperband, median, none, sha"
