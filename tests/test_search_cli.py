"""The search's config and command line: composed defaults and overrides, mistakes caught when the
config is composed, and ``python -m nas.search`` end to end in a subprocess (help, a run and its
resume, an estimated target, refused starts, user errors)."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import forked
import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf

from nas.cli.search import run as search_run
from nas.config import compose_app
from nas.config.search import search_inputs
from nas.search.samplers import make_sampler

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------- config


def _compose(overrides):
    return compose_app("search", overrides)


def test_config_defaults_and_overrides():
    cfg = _compose([])
    assert (cfg.target.name, cfg.search_space, cfg.data.name, cfg.evaluator.name, cfg.sampler.name) == (
        "cpu", "tiny", "digits", "train", "nsga2")
    assert cfg.latency_budget_ms == cfg.target.latency_budget_ms and cfg.memory_budget_kb is None
    cfg = _compose(["conf=jetson", "search_space=mbv3", "data=fashion_mnist", "evaluator=zero_cost", "sampler=tpe",
                    "n_trials=7", "latency_budget_ms=3.5", "memory_budget_kb=512", "seed=4",
                    "storage=postgresql://u@h/db", "study_name=s", "out=runs/x", "evaluator.proxy=synflow",
                    "sampler.n_startup_trials=5", "data.train_samples=100"])
    assert cfg.target.name == "jetson" and cfg.latency_budget_ms == 3.5 and cfg.memory_budget_kb == 512
    assert (cfg.n_trials, cfg.seed, cfg.storage, cfg.study_name, cfg.out) == (7, 4, "postgresql://u@h/db", "s", "runs/x")
    assert cfg.evaluator.proxy == "synflow" and cfg.sampler.n_startup_trials == 5 and cfg.data.train_samples == 100
    assert _compose(["conf=gpu"]).latency_budget_ms == 1.0  # the target's budget by default
    for name in ("random", "nsga2", "tpe"):
        make_sampler(OmegaConf.to_container(_compose([f"sampler={name}"]).sampler), seed=0)


def test_a_budget_is_given_only_by_latency_budget_ms():
    """Without ``latency_budget_ms=`` the search places the target's budget among the space's networks."""
    def given(overrides):
        return search_inputs(_compose(overrides)).budgets.latency_budget_given

    assert not given([]) and not given(["conf.latency_budget_ms=5"])
    for budget in ("latency_budget_ms=15", "latency_budget_ms=null", "latency_budget_ms=0.1"):
        assert given([budget]), budget


@pytest.mark.parametrize(
    "overrides, exc, match",
    [
        (["n_trial=5"], ConfigCompositionException, "n_trial"),
        (["evaluator.epoch=2"], ConfigCompositionException, "evaluator.epoch"),
        (["evaluator=zero_cost", "evaluator.epochs=2"], ConfigCompositionException, "evaluator.epochs"),
        (["sampler.popsize=3"], ConfigCompositionException, "sampler.popsize"),
        (["n_trials=many"], ConfigCompositionException, "n_trials=many"),
        (["evaluator.lr=fast"], ConfigCompositionException, "evaluator.lr=fast"),
        (["data.resolution=big"], ConfigCompositionException, "data.resolution=big"),
        (["sampler=cmaes"], MissingConfigException, "nsga2"),
        (["evaluator=nope"], MissingConfigException, "zero_cost"),
        (["data=mnist"], MissingConfigException, "fashion_mnist"),
    ],
)
def test_config_mistakes_fail_at_start(overrides, exc, match):
    with pytest.raises(exc, match=match) as e:
        _compose(overrides)
    if "=" in match and "many" in match:
        assert "could not be converted to Integer" in str(e.value.__cause__)


# ------------------------------------------------------------------------------------------- CLI


def _cli(args, cwd, timeout=300):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
    return forked.run([sys.executable, "-m", "nas.search", *args], cwd=cwd, timeout=timeout, env=env)


def test_cli_help_lists_groups():
    r = _cli(["--help"], REPO)
    assert r.returncode == 0
    assert "n_trials" in r.stdout
    # the shipped options of each group are listed, whatever else the user added (a copied target file...);
    # the target group as users type it
    shipped = {"data": {"cifar10", "digits", "fashion_mnist", "imagefolder"}, "evaluator": {"train", "zero_cost"},
               "sampler": {"nsga2", "random", "tpe"}, "conf": {"cpu", "jetson"}}
    for group, names in shipped.items():
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith(f"{group}: "))
        assert names <= set(line.removeprefix(f"{group}: ").split(", ")), line


@pytest.mark.slow
def test_cli_end_to_end(tmp_path):
    out = tmp_path / "run"
    r = _cli(["conf=cpu", "n_trials=3", "evaluator.epochs=1", "data.train_samples=200", "data.val_samples=100",
              "sampler.population_size=2", f"out={out}", "progress=false"], REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    for f in ("pareto.json", "trials.csv", "pareto.png", "study.journal"):
        assert (out / f).is_file(), f
    assert "Pareto front of" in r.stdout and "val_accuracy" in r.stdout and "predicted (table)" in r.stdout
    assert "budget   latency budget " in r.stdout and "the median predicted latency of 200 sampled" in r.stdout
    pj = json.loads((out / "pareto.json").read_text())
    assert pj["trials"]["total"] == 3 and all(e["latency_source"] == "measured" for e in pj["pareto"])
    assert all(e["latency_how"].startswith("predicted from a measured table (") for e in pj["pareto"])
    assert all(math.isfinite(e["val_accuracy"]) for e in pj["pareto"])
    # resume: the same command with more trials continues the same study
    r = _cli(["conf=cpu", "n_trials=4", "evaluator.epochs=1", "data.train_samples=200", "data.val_samples=100",
              "sampler.population_size=2", f"out={out}", "progress=false"], REPO)
    assert r.returncode == 0 and "resumed: 3 trials done" in r.stdout and "the study's own, kept" in r.stdout
    assert json.loads((out / "pareto.json").read_text())["trials"]["total"] == 4


def test_cli_jetson_says_it_is_an_estimate(tmp_path):
    out = tmp_path / "run"
    r = _cli(["conf=jetson", "evaluator=zero_cost", "n_trials=3", f"out={out}", "progress=false"], REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "WARNING: latency for target 'jetson' is an ESTIMATE" in r.stdout
    assert "python -m nas.profile conf=jetson" in r.stdout
    assert "budget   latency budget " in r.stdout and "the median roofline-estimated latency of 200" in r.stdout
    assert "ESTIMATE (roofline)" in r.stdout and "latency: ESTIMATE (roofline) = estimated (roofline, " in r.stdout
    assert "measured" not in r.stdout.split("study ")[-1]  # the summary calls nothing measured
    pj = json.loads((out / "pareto.json").read_text())
    assert pj["latency_model"]["source"] == "estimated" and pj["latency_budget"]["rule"] == "median"
    assert all(e["latency_source"] == "estimated" and e["latency_how"].startswith("estimated (roofline, ")
               for e in pj["pareto"])
    assert pj["search"]["budgets"]["latency_budget_ms"] == pj["latency_budget"]["ms"] < 2.0  # jetson's own: 2 ms


def test_cli_says_when_a_budget_binds_nothing_and_a_resume_keeps_it(tmp_path, capsys):
    args = ["conf=cpu", "evaluator=zero_cost", "n_trials=1", "progress=false"]
    search_run(_compose([*args, "latency_budget_ms=15"]), run_dir=tmp_path)
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("budget "))
    assert "latency budget 15 ms (" not in line and "binds none of 200 sampled networks of tiny on cpu" in line
    assert line.endswith("the latency constraint is inactive")
    assert "latency  predicted from a measured table (" in out and "predicted (table)" in out
    assert "latency: predicted (table) = predicted from a measured table (" in out
    search_run(_compose([*args[:2], "n_trials=2", "progress=false"]), run_dir=tmp_path)  # no budget given
    out = capsys.readouterr().out
    assert "latency budget 15 ms: the study's own, kept from its start (latency_budget_ms=15; " in out
    assert json.loads((tmp_path / "pareto.json").read_text())["search"]["budgets"]["latency_budget_ms"] == 15.0


@pytest.mark.slow
def test_cli_refused_starts_change_nothing(tmp_path, snapshot):
    out = tmp_path / "run"
    args = ["evaluator=zero_cost", "n_trials=1", "progress=false"]
    r = _cli([*args, f"out={out}"], REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / ".hydra" / "config.yaml").is_file() and (out / ".hydra" / "overrides.yaml").is_file()
    before = snapshot(out)
    for bad in (["search_space=mbv3"], ["evaluator.batch_size=7"]):  # another search; other settings
        r = _cli([*args, *bad, f"out={out}"], REPO)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (bad, r.stderr)
        assert f"out={out}-2" in lines[0]
        assert snapshot(out) == before, f"{bad} changed the run dir"
    r = _cli([*args, "data=cifar10", f"data.root={tmp_path / 'nowhere'}", f"out={tmp_path / 'fresh'}"], REPO)
    assert r.returncode == 2 and not (tmp_path / "fresh").exists(), "a failed start left a folder"
    for bad in ("n_trials=-1", "max_consecutive_failures=-1"):  # refused before the study is opened
        r = _cli([*args, bad, f"out={tmp_path / 'fresh'}"], REPO)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and "0 or more" in lines[0], (bad, r.stderr)
        assert not (tmp_path / "fresh").exists(), f"{bad} left a folder"


@pytest.mark.slow
def test_cli_user_errors(tmp_path):
    r = _cli(["n_trials=many", f"out={tmp_path / 'a'}"], REPO)
    assert r.returncode != 0 and "n_trials" in r.stderr and "many" in r.stderr
    r = _cli(["data=cifar10", f"data.root={tmp_path / 'nowhere'}", f"out={tmp_path / 'b'}"], REPO)
    assert r.returncode == 2 and "CIFAR-10 not found" in r.stderr and "data.download=true" in r.stderr
