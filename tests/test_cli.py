"""The commands' shell surface: --help per command, one-line config errors, bash completion."""

import os
import sys
from pathlib import Path

import forked
import pytest

from nas.target import target_names

ROOT = Path(__file__).resolve().parents[1]
SEARCH_GROUPS = ("data:", "evaluator:", "sampler:")


def _cli(module, *args, env=None):
    """``python -m <module> args`` from this checkout (console scripts may point at another install)."""
    return forked.run([sys.executable, "-m", module, *args], cwd=ROOT, timeout=300, env={**os.environ, **(env or {})})


def test_commands_start_without_the_heavy_libraries():
    """A command's help, a config typo or a refused start answer in about a second: the command
    modules import torch, scikit-learn, timm and the runtimes only when the work needs them
    (``python -m benchmarks startup`` times it and lists what each import loads)."""
    from benchmarks import startup as bench

    loaded = {m: bench.loaded_by_import(m) for m in ("profile", "predict", "search", "train", "supernet", "export")}
    assert loaded["profile"] == [] and loaded["predict"] == [] and loaded["train"] == []
    # search, supernet and export compose their schemas with the search's groups (the data, the evaluators,
    # Optuna's samplers and pruners): Optuna (a few tens of ms), no torch
    for cmd in ("search", "supernet", "export"):
        assert loaded[cmd] == ["optuna"], (cmd, loaded[cmd])


def test_a_bad_value_is_refused_before_the_heavy_libraries_load(tmp_path):
    """A value the config accepts but the command refuses: one line, exit code 2, nothing written, and
    no torch loaded to say so (python -m benchmarks startup times these)."""
    probe = ("import runpy, sys\n"
             "sys.argv = sys.argv[1:]\n"
             "runpy.run_module(sys.argv[0], run_name='__main__')\n")
    for args, words in [(["nas.export", "conf=cpu"], "give weights=<checkpoint>"),
                        (["nas.export", "conf=cpu", f"weights={tmp_path / 'none.ckpt'}"], "none.ckpt: no such file"),
                        (["nas.profile", "conf=cpu", "search_space=no_such_space"], "unknown search space"),
                        (["nas.train", "conf=cpu", f"run={tmp_path / 'none'}"], "no such folder"),
                        (["nas.search", "conf=cpu", "n_trials=-1", f"out={tmp_path / 's'}"], "0 or more")]:
        r = forked.run([sys.executable, "-c", probe, *args], cwd=ROOT, timeout=120)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and lines[0].startswith("error: ") and words in lines[0], (args, r.stderr)
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("cmd,takes_target", [("profile", True), ("predict", True), ("validate", True),
                                              ("export", True), ("supernet", True), ("space", False)])
def test_help_lists_only_what_the_command_uses(cmd, takes_target):
    r = _cli(f"nas.{cmd}", "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"nas.{cmd}:")
    own = ("data:",) if cmd in ("export", "supernet") else ()  # nas.export and nas.supernet take a dataset
    assert not any(g in r.stdout for g in SEARCH_GROUPS if g not in own), r.stdout
    assert "Configuration groups" not in r.stdout
    if takes_target:
        assert f"conf=<name>, one of: {', '.join(target_names())}" in r.stdout
    else:
        assert "conf=" not in r.stdout
    # nas.export takes a dataset (its calibration / verification images), nas.supernet one to train on
    datasets = next((ln for ln in r.stdout.splitlines() if ln.startswith("data=<name>, one of: ")), None)
    if cmd in ("export", "supernet"):
        assert datasets and {"digits", "fashion_mnist"} <= set(datasets.split(": ", 1)[1].split(" (")[0].split(", "))
    else:
        assert datasets is None


@pytest.mark.slow
def test_help_lists_the_users_targets_beside_the_shipped_ones(tmp_path):
    """A target of the user's own joins the list; the shipped ones stay (whatever else a user added)."""
    from nas.config import CONF_DIR

    (tmp_path / "target").mkdir()
    src = (CONF_DIR / "target" / "cpu.yaml").read_text()
    (tmp_path / "target" / "mybox.yaml").write_text(src.replace("name: cpu", "name: mybox"))
    r = _cli("nas.profile", "--help", env={"HWNAS_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("conf=<name>, one of: "))
    listed = set(line.split(": ", 1)[1].split(", "))
    assert {"cpu", "jetson", "gpu", "here", "mybox"} <= listed
    assert not list(CONF_DIR.glob("target/here_*.yaml"))  # conf=here writes to $HWNAS_HOME, never the package


@pytest.mark.slow
def test_search_help_lists_its_groups():
    r = _cli("nas.search", "--help")
    assert r.returncode == 0, r.stderr
    assert all(g in r.stdout for g in (*SEARCH_GROUPS, "target:"))


def test_config_mistakes_are_one_line():
    r = _cli("nas.predict", "conf=nope")
    assert r.returncode == 2
    assert r.stderr.strip() == f"error: unknown conf 'nope'; conf= one of: {', '.join(target_names())}"


@pytest.mark.parametrize("overrides,words", [
    (["conf.threads=two"], ["threads", "two"]),
    (["bogus=1"], ["bogus"]),
    (["search_space"], ["search_space"]),
    (["conf.thredas=2"], ["thredas", "did you mean conf.threads=?"]),
    (["data=nope"], ["unknown data 'nope'", "digits"]),
])
def test_config_error_line(overrides, words):
    from nas.cli._common import config_error_line
    from nas.config import compose_app

    with pytest.raises(Exception) as e:
        compose_app("search", overrides)
    line = config_error_line(e.value)
    assert "\n" not in line and all(w in line for w in words), line


@pytest.mark.slow
def test_bash_completion_offers_the_users_own_targets(tmp_path):
    """A target of the user's own ($HWNAS_HOME/target/<name>.yaml) completes as the shipped ones do."""
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "mybox.yaml").write_text((ROOT / "conf" / "target" / "cpu.yaml").read_text()
                                                    .replace("name: cpu", "name: mybox"))
    r = _cli("nas.cli.search", "-sc", "query=bash", env={"COMP_LINE": "python -m nas.search conf=my",
                                                          "HWNAS_HOME": str(tmp_path)})
    assert r.returncode == 0 and r.stdout.split() == ["conf=mybox"], (r.stdout, r.stderr)


def test_bash_completion_install_and_query():
    r = _cli("nas.cli.search", "-sc", "install=bash")
    assert r.returncode == 0 and "hydra_bash_completion" in r.stdout and "complete " in r.stdout
    for line in ("hwnas-search conf=", "python -m nas.search conf="):
        r = _cli("nas.cli.search", "-sc", "query=bash", env={"COMP_LINE": line})
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == [f"conf={t}" for t in target_names()]
