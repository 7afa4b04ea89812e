"""A search whose trials fail: too many in a row, or every one sent to the evaluator, ends with the
first failure's reason (``SearchAborted``), after every trial is recorded."""

import pytest

from nas.search.study import SearchAborted, run_search
from tests import test_search
from tests.test_search import FakeEvaluator, _median_budget, _prepare

target, digits = test_search.target, test_search.digits  # the search tests' fixtures


def test_consecutive_failures_abort(tmp_path, target, digits):
    s = _prepare(tmp_path, target, digits, FakeEvaluator(fail_on=tuple(range(1, 99))))
    with pytest.raises(SearchAborted, match=r"3 trials in a row failed; the first error \(trial 0\): .*boom on call 1$"):
        run_search(s.study, s.problem, n_trials=10, max_consecutive_failures=3)
    for bad in ({"n_trials": -1}, {"n_trials": 1, "max_consecutive_failures": -1}):  # before any trial
        with pytest.raises(ValueError, match="must be a non-negative integer"):
            run_search(s.study, s.problem, **bad)


def test_a_run_whose_every_trial_failed_is_aborted_with_the_first_reason(tmp_path, target, digits):
    s = _prepare(tmp_path, target, digits, FakeEvaluator(fail_on=tuple(range(1, 99))))
    with pytest.raises(SearchAborted, match=r"every trial of this run that was scored failed: 2 of 2; the first error \(trial 0\): "
                                            r".*boom on call 1$") as e:
        run_search(s.study, s.problem, n_trials=2, max_consecutive_failures=10)
    assert e.value.report.ran == 2 and e.value.report.statuses == {"error": 2}
    assert [t.user_attrs["status"] for t in s.study.trials] == ["error", "error"]  # both recorded
    s = _prepare(tmp_path / "some", target, digits, FakeEvaluator(fail_on=(2,)))
    assert run_search(s.study, s.problem, n_trials=2).statuses == {"evaluated": 1, "error": 1}  # not all: no abort
    budgets = _median_budget(tmp_path / "probe", target, digits, "latency")
    s = _prepare(tmp_path / "over", target, digits, FakeEvaluator(fail_on=tuple(range(1, 99))), budgets=budgets)
    with pytest.raises(SearchAborted, match=r"scored failed: (\d) of 8 \((?!0)\d over a budget, not scored\)") as e:
        run_search(s.study, s.problem, n_trials=8)
    assert e.value.report.statuses.get("over_budget") and e.value.report.statuses.get("error")


def test_skip_bad_does_not_define_a_study(tmp_path, target):
    """Resuming with the other ``data.skip_bad`` (a skipped image is named when the data loads) keeps the study."""
    from tests.test_data_stream import _folder, _load

    data = _load(_folder(tmp_path / "imgs"), skip_bad=False)
    s = _prepare(tmp_path / "run", target, data, FakeEvaluator())
    assert "skip_bad" not in s.problem.record()["data"] and "val_fraction" in s.problem.record()["data"]
