import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

# one thread per worker where pytest-xdist runs several (they share the CPUs), else up to two
torch.set_num_threads(1 if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1
                      else max(1, min(2, os.cpu_count() or 1)))

# subprocesses (python -m nas.<command>, run from temporary dirs) import this checkout's nas, not
# whatever install the interpreter has
_ROOT = str(Path(__file__).resolve().parent.parent)
os.environ["PYTHONPATH"] = os.pathsep.join([_ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])

settings.register_profile(
    "default",
    deadline=None,
    max_examples=6,
    derandomize=True,  # CI runs the same examples every time
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile("thorough", deadline=None, max_examples=60)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per CPU this process may run on (its affinity, so ``taskset -c 0`` gives one),
    at most 8 (each worker loads torch)."""
    return max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def _has_cuda() -> bool:
    return torch.cuda.is_available()


# the test files that take a minute or more: collected first, so that pytest-xdist (which hands out files in
# collection order) starts them first and its workers end together rather than one waiting on the last long file
LONG_FILES = ("test_predict_validate_cli.py", "test_train_export.py", "test_rehearsal.py", "test_search_value.py",
              "test_profiler.py", "test_benchmarks.py", "test_search_cli.py", "test_edge_bundle.py",
              "test_benchmarks_logic.py", "test_edge_runtimes.py", "test_search.py", "test_input_errors.py")


def pytest_collection_modifyitems(config, items):
    first = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: first.get(item.path.name, len(LONG_FILES)))  # stable: a file keeps its order
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch sees none)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A GPU test on a GPU machine that lacks the runtime it needs (tensorrt, onnxruntime-gpu's
    providers) is skipped with the runtime's own reason, which names what to install."""
    try:
        return (yield)
    except Exception as e:
        from nas.machine import RuntimeUnavailable

        if "gpu" in item.keywords and isinstance(e, RuntimeUnavailable):
            pytest.skip(str(e))
        raise


@pytest.fixture
def snapshot():
    """``snapshot(folder)``: every file under ``folder`` and its bytes, lock files left out (a refused
    start must leave a run dir as it was)."""

    def take(folder: Path) -> dict[str, bytes]:
        return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
                and not p.name.endswith((".lock", ".flock"))}

    return take


@pytest.fixture(autouse=True, scope="session")
def _no_user_targets(tmp_path_factory):
    """The tests see the shipped targets and tables only, whatever the user keeps in ~/.hwnas."""
    home = tmp_path_factory.mktemp("hwnas_home")
    old = os.environ.get("HWNAS_HOME")
    os.environ["HWNAS_HOME"] = str(home)
    yield
    if old is None:
        os.environ.pop("HWNAS_HOME", None)
    else:
        os.environ["HWNAS_HOME"] = old


@pytest.fixture(scope="session")
def search_run(tmp_path_factory):
    """A real zero-cost search on digits (3 trials, roofline latency: ``conf.table=null``): the run dir
    ``nas.train`` reads (tests/test_train_export.py, tests/test_prune_rules.py)."""
    import sys

    import forked

    d = tmp_path_factory.mktemp("search")
    r = forked.run([sys.executable, "-m", "nas.search", "conf=cpu", "conf.table=null", "data=digits",
                    "evaluator=zero_cost", "n_trials=3", f"out={d / 'run'}", "progress=false"],
                   cwd=d, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    assert (d / "run" / "pareto.json").is_file()
    return d / "run"
