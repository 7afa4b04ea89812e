"""Every target composes under every app; config mistakes fail at composition with clear errors."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from nas.config import CONF_DIR, compose_app, register_configs
from nas.config.search import register_search_configs
from nas.config.train import register_train_configs

register_configs()
register_search_configs()
register_train_configs()
TARGETS = sorted(p.stem for p in (CONF_DIR / "target").glob("*.yaml"))
APPS = ["space", "profile", "predict", "validate", "search", "train", "export"]


def _compose(app, overrides):
    return compose_app(app, overrides)


def test_shipped_targets():
    assert {"cpu", "cpu_int8", "jetson", "gpu"} <= set(TARGETS)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("app", [a for a in APPS if a != "space"])
def test_every_target_composes(app, target):
    cfg = _compose(app, [f"conf={target}"])
    t = OmegaConf.to_container(cfg.target, resolve=True)
    assert t["name"] == target
    for k in ("runtime", "precision", "batch", "threads", "latency_budget_ms"):
        assert t[k] is not None
    for k in ("name", "kind", "peak_gflops", "mem_bandwidth_gbs"):
        assert t["device"][k] not in (None, "???")


def test_override_and_typos():
    cfg = _compose("profile", ["conf=cpu", "conf.threads=2", "search_space=[mbv3,tiny]"])
    assert cfg.target.threads == 2 and list(cfg.search_space) == ["mbv3", "tiny"]
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
    p = conf / "target" / "cpu.yaml"
    p.write_text(p.read_text().replace("threads: 1", "thread: 1"))
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        with pytest.raises((ConfigCompositionException, ConfigKeyError), match="thread"):
            compose(config_name="profile", overrides=["target=cpu"])


def test_conf_dir_is_the_package_conf():
    import nas

    assert CONF_DIR == Path(nas.__file__).resolve().parent / "conf"


def test_conf_alias_and_user_targets(tmp_path, monkeypatch):
    from nas.config import normalize_overrides

    assert normalize_overrides(["conf=cpu", "conf.threads=2", "+conf.x=1", "data=digits"])[:4] == [
        "target=cpu", "target.threads=2", "+target.x=1", "data=digits"]
    monkeypatch.setenv("HWNAS_HOME", str(tmp_path))
    (tmp_path / "target").mkdir()
    src = (CONF_DIR / "target" / "cpu.yaml").read_text()
    (tmp_path / "target" / "mybox.yaml").write_text(src.replace("name: cpu", "name: mybox"))
    cfg = compose_app("predict", ["conf=mybox"])
    assert cfg.target.name == "mybox"
