"""Every target composes under every app; config mistakes fail at composition with clear errors."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from nas.config import CONF_DIR, register_configs
from nas.search_config import register_search_configs
from nas.train_config import register_train_configs

register_configs()
register_search_configs()
register_train_configs()
TARGETS = sorted(p.stem for p in (CONF_DIR / "conf").glob("*.yaml"))
APPS = ["space", "profile", "predict", "validate", "search", "train", "export"]


def _compose(app, overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name=app, overrides=overrides)


def test_shipped_targets():
    assert {"cpu", "cpu_int8", "jetson", "gpu"} <= set(TARGETS)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("app", [a for a in APPS if a != "space"])
def test_every_target_composes(app, target):
    cfg = _compose(app, [f"conf={target}"])
    t = OmegaConf.to_container(cfg.conf, resolve=True)
    assert t["name"] == target
    for k in ("runtime", "precision", "batch", "threads", "latency_budget_ms"):
        assert t[k] is not None
    for k in ("name", "kind", "peak_gflops", "mem_bandwidth_gbs"):
        assert t["device"][k] not in (None, "???")


def test_override_and_typos():
    cfg = _compose("profile", ["conf=cpu", "conf.threads=2", "search_space=[mbv3,tiny]"])
    assert cfg.conf.threads == 2 and list(cfg.search_space) == ["mbv3", "tiny"]
    with pytest.raises(ConfigCompositionException, match="thredas"):
        _compose("profile", ["conf=cpu", "conf.thredas=2"])
    with pytest.raises((ConfigCompositionException, ValidationError), match="two"):
        _compose("profile", ["conf=cpu", "conf.threads=two"])
    with pytest.raises(ConfigCompositionException, match="nope"):
        _compose("profile", ["conf=nope"])


def test_a_typo_inside_a_target_file_is_caught(tmp_path):
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    p = conf / "conf" / "cpu.yaml"
    p.write_text(p.read_text().replace("threads: 1", "thread: 1"))
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        with pytest.raises((ConfigCompositionException, ConfigKeyError), match="thread"):
            compose(config_name="profile", overrides=["conf=cpu"])


def test_conf_dir_is_the_repo_conf():
    assert CONF_DIR == Path(__file__).resolve().parent.parent / "conf"
