"""``--help`` names the target group as users type it (``conf``) and explains every option it shows."""

import sys
from pathlib import Path

import forked
import pytest
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from nas.cli._help import annotate_help, option_help
from nas.config import compose_app

COMMANDS = ["space", "profile", "predict", "validate", "search", "train", "export", "supernet"]
ROOT = Path(__file__).resolve().parents[1]


def _schema(app):
    return OmegaConf.get_type(ConfigStore.instance().load(f"_{app}_schema.yaml").node)


@pytest.mark.parametrize("app", COMMANDS)
def test_every_option_in_the_help_is_explained(app):
    cfg = compose_app(app, ["conf=cpu"] if app != "space" else [])
    helps = option_help(_schema(app))
    unexplained = [k for k in cfg if k != "target" and not helps.get(k)]
    assert not unexplained, f"nas.{app} --help shows these options unexplained: {unexplained}"


def test_annotate_help_names_the_target_group_conf_and_explains_options():
    from nas.config import ProfileAppConfig

    text = "== Configuration groups ==\ntarget: cpu, jetson\n\n== Config ==\ntarget:\n  name: cpu\nheld_out: 0\n"
    out = annotate_help(text, ProfileAppConfig)
    assert "\nconf: cpu, jetson\n" in out and "\ntarget:" not in out
    assert "conf:  # the target: conf=<name>" in out
    assert "held_out: 0  # with bundle=: seeded networks" in out


def test_nas_profile_help_as_printed():
    r = forked.run([sys.executable, "-m", "nas.profile", "--help"], cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "target:" not in lines and any(ln.startswith("conf:  # the target") for ln in lines)
    for opt in ("held_out", "calibration_networks", "pruned_networks", "recalibrate", "progress", "wait"):
        (line,) = [ln for ln in lines if ln.startswith(f"{opt}:")]
        assert "  # " in line, line
