"""Every target composes under every app; config mistakes fail at composition with clear errors."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

from nas.config import CONF_DIR, compose_app, register_configs
from nas.config.search import register_search_configs
from nas.config.train import register_train_configs

register_configs()
register_search_configs()
register_train_configs()
TARGETS = sorted(p.stem for p in (CONF_DIR / "target").glob("*.yaml"))
APPS = ["space", "profile", "predict", "validate", "search", "train", "export", "supernet"]


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
    for k in ("kind", "peak_gflops", "mem_bandwidth_gbs"):
        assert t["device"][k] not in (None, "???")
    assert t["device"]["name"] != "???"  # null: whatever machine runs the command (no identity check)


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


def test_conf_dir_is_the_top_level_conf():
    """In a source tree the configs are the repository's conf/, beside nas/ (a wheel maps them into it)."""
    import nas

    assert CONF_DIR == Path(nas.__file__).resolve().parent.parent / "conf"


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


# ---- one home per value: dataclass defaults vs the YAML files -------------------------------------

# app -> its schema's registered name; groups (target, data, ...) are checked by the group test below
APP_SCHEMAS = {"space": "_space_schema", "profile": "_profile_schema", "predict": "_predict_schema",
               "validate": "_validate_schema", "search": "_search_schema", "train": "_train_schema",
               "export": "_export_schema", "supernet": "_supernet_schema"}
GROUPS = {"target", "data", "evaluator", "sampler", "pruner"}
# values a primary YAML computes at composition, so they cannot be a dataclass default
INTERPOLATED = {
    ("search", "latency_budget_ms"): "the selected target's budget: ${target.latency_budget_ms}",
    ("search", "out"): "a run dir stamped with the start time: runs/search/${now:...}",
    ("supernet", "out"): "named by the dataset and the space: runs/supernet/${data.name}-${search_space}",
}


def _schema_node(schema_name):
    from hydra.core.config_store import ConfigStore

    return ConfigStore.instance().load(f"{schema_name}.yaml").node


@pytest.mark.parametrize("app", APPS)
def test_app_values_are_the_schema_defaults(app):
    cfg = OmegaConf.to_container(_compose(app, []), resolve=False)
    schema = OmegaConf.to_container(_schema_node(APP_SCHEMAS[app]), resolve=False)
    for key, default in schema.items():
        if key in GROUPS or (app, key) in INTERPOLATED:
            continue
        assert cfg[key] == default, f"{app}.yaml: {key}={cfg[key]!r}, its dataclass default is {default!r}"


@pytest.mark.parametrize("app", APPS)
def test_primary_yaml_repeats_no_default(app):
    raw = OmegaConf.to_container(OmegaConf.load(CONF_DIR / f"{app}.yaml"), resolve=False)
    schema = OmegaConf.to_container(_schema_node(APP_SCHEMAS[app]), resolve=False)
    repeated = sorted(k for k in raw if k not in ("defaults", "hydra") and (app, k) not in INTERPOLATED
                      and schema.get(k) != "???")
    assert not repeated, f"{app}.yaml sets {repeated}: keep each value in the dataclass or the YAML, not both"


def _library_defaults(cls):
    import dataclasses

    out = {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.type if isinstance(f.type, type) else None):
            out[f.name] = _library_defaults(f.type)
            continue
        if f.default is not dataclasses.MISSING:
            v = f.default
        elif f.default_factory is not dataclasses.MISSING:
            v = f.default_factory()
        elif f.name == "device":  # annotations are strings under `from __future__ import annotations`
            from nas.target import Device

            v = _library_defaults(Device)
        else:
            v = "???"
        out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


def _group_pairs():
    from nas.config import DeviceConfig, MeasureConfig, TargetConfig
    from nas.config.search import (
        DataConfig,
        NSGA2SamplerConfig,
        RandomSamplerConfig,
        TPESamplerConfig,
        TrainEvaluatorConfig,
        ZeroCostEvaluatorConfig,
    )
    from nas.data import DataSettings
    from nas.latency.runtimes.loop import ProfileSettings
    from nas.search.evaluate import TrainEvaluator, ZeroCostEvaluator
    from nas.search.samplers import NSGA2Settings, RandomSettings, TPESettings
    from nas.target import Device, Target

    return [(TargetConfig, Target, None), (DeviceConfig, Device, None), (MeasureConfig, ProfileSettings, None),
            (DataConfig, DataSettings, None), (TrainEvaluatorConfig, TrainEvaluator, "train"),
            (ZeroCostEvaluatorConfig, ZeroCostEvaluator, "zero_cost"), (NSGA2SamplerConfig, NSGA2Settings, "nsga2"),
            (TPESamplerConfig, TPESettings, "tpe"), (RandomSamplerConfig, RandomSettings, "random")]


def test_group_schemas_are_the_library_dataclasses():
    for schema, cls, option in _group_pairs():
        got = OmegaConf.to_container(OmegaConf.structured(schema), resolve=False)
        if option is not None:
            assert got.pop("name") == option
        want = _library_defaults(cls)
        if option is not None:
            want.pop("name", None)
        assert got == want, f"{schema.__name__} differs from {cls.__module__}.{cls.__name__}"


def test_schema_from_nested_tuple_and_required():
    import dataclasses

    from nas.config import schema_from

    @dataclasses.dataclass(frozen=True)
    class Inner:
        size: int
        tags: tuple[str, ...] = ("a",)

    @dataclasses.dataclass(frozen=True)
    class Outer:
        inner: Inner
        scale: float | None = None

    node = OmegaConf.structured(schema_from(Outer, name="x", schema_name="OuterConfig"))
    assert OmegaConf.to_container(node) == {"name": "x", "inner": {"size": "???", "tags": ["a"]}, "scale": None}
    with pytest.raises(ValidationError):
        node.inner.size = "big"
    with pytest.raises(ConfigAttributeError):
        node.inner.sise = 1
