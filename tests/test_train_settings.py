"""nas.train's settings: one source of defaults (the dataclasses), validation naming the field."""

import dataclasses
import warnings

import pytest
from omegaconf import OmegaConf

from nas.config import compose_app
from nas.fit.settings import FitSettings
from nas.supernet.settings import SupernetSettings
from nas.train.settings import (
    ExportSettings,
    PipelineSettings,
    PruneSettings,
    QATSettings,
    TargetNames,
)

GROUPS = {"train": FitSettings, "prune": PruneSettings, "qat": QATSettings, "export": ExportSettings,
          "targets": TargetNames}


@pytest.mark.parametrize("app", ["train", "export"])
def test_composed_defaults_are_the_dataclass_defaults(app):
    """conf/<app>.yaml and the generated schemas repeat no default of their own: every value a user gets
    without overrides is the settings dataclass's."""
    cfg = OmegaConf.to_container(compose_app(app, ["run=x"] if app == "train" else ["arch=a", "weights=w"]))
    groups = GROUPS if app == "train" else {"export": ExportSettings}
    for group, cls in groups.items():
        assert cfg[group] == dataclasses.asdict(cls()), group


def test_pipeline_settings_convert_dicts_and_refuse_unknown_names():
    from nas.target import load_target

    t = load_target("cpu")
    s = PipelineSettings(run="r", target=t, prune={"ratio": 0.5}, qat={"epochs": 2})
    assert s.target == t and s.prune == PruneSettings(ratio=0.5) and s.qat.epochs == 2
    with pytest.raises(ValueError, match=r"prune: unknown setting\(s\) \['ratoi'\]"):
        PipelineSettings(run="r", target=t, prune={"ratoi": 0.5})


@pytest.mark.parametrize("cls, kw, msg", [
    (PruneSettings, {"ratio": 1.5}, r"prune.ratio must be in \(0, 1\], got 1.5"),
    (PruneSettings, {"criterion": "x"}, "prune.criterion must be one of l1, bn, taylor, loss, got 'x'"),
    (PruneSettings, {"distill": 2}, r"prune.distill must be a weight in \[0, 1\]"),
    (QATSettings, {"ema": 0}, r"qat.ema must be in \(0, 1\]"),
    (QATSettings, {"epochs": -1}, "qat.epochs must be a non-negative integer, got -1"),
    (FitSettings, {"optimizer": "adam"}, "train.optimizer must be one of adamw, sgd, got 'adam'"),
    (ExportSettings, {"rounds": 0}, "export.rounds must be a positive integer, got 0"),
    (SupernetSettings, {"epochs": 0}, "supernet.epochs must be a positive integer, got 0"),
])
def test_errors_name_field_value_and_what_is_allowed(cls, kw, msg):
    with pytest.raises(ValueError, match=msg):
        cls(**kw)


def test_train_app_options_default_as_the_pipeline_settings():
    """The command's top-level options that PipelineSettings also holds keep one default."""
    from nas.config.train import TrainAppConfig
    from nas.train.settings import PipelineSettings

    app = {f.name: f.default for f in dataclasses.fields(TrainAppConfig) if f.default is not dataclasses.MISSING}
    lib = {f.name: f.default for f in dataclasses.fields(PipelineSettings) if f.default is not dataclasses.MISSING}
    shared = sorted(set(app) & set(lib))
    assert {"select", "latency_budget_ms", "seed", "allow_mismatch", "train_samples"} <= set(shared)
    assert {k: app[k] for k in shared} == {k: lib[k] for k in shared}


def test_train_takes_data_num_workers_from_the_data_settings():
    """docs/data.md tells 2-core users to set data.num_workers: nas.train takes it (the code before
    refused it), checked where DataSettings checks it; only settings that change no result."""
    from nas.cli.train import settings_from_config
    from nas.data.settings import DataSettings

    base = ["conf=cpu", "run=x"]
    assert settings_from_config(compose_app("train", base)).data == {"num_workers": DataSettings().num_workers}
    assert settings_from_config(compose_app("train", [*base, "data.num_workers=1"])).data == {"num_workers": 1}
    with pytest.raises(ValueError, match=r"data.num_workers must be an integer >= 0"):
        settings_from_config(compose_app("train", [*base, "data.num_workers=-1"]))
    from nas.target import load_target

    with pytest.raises(ValueError, match=r"data.seed: nas.train reads the search's dataset as the search did"):
        PipelineSettings(run="r", target=load_target("cpu"), data={"seed": 1})


def test_resume_ignores_how_the_images_are_read(tmp_path):
    """data.num_workers (and the folder) change no result: a checkpoint resumes under another value
    (the code before refused it: its meta holds the dataset's settings)."""
    from nas.builder import build
    from nas.data import DataSettings, load_data
    from nas.fit.loop import fit
    from nas.fit.settings import FitSettings
    from nas.space import load_space

    data = load_data(DataSettings(name="digits", resolution=16, train_samples=64, val_samples=32))
    arch = load_space("tiny").random(4).with_head(in_chans=1).with_resolution(16)
    kw = dict(settings=FitSettings(batch_size=32, bn_recalibration_batches=1), lr=0.005, seed=3, epochs=2,
              ckpt=tmp_path / "a.ckpt")
    rec = data.settings.to_dict()

    def stop_at_1(model, epoch):
        if epoch == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fit(build(arch), data, meta={"data": {**rec, "num_workers": 4}}, on_epoch_start=stop_at_1, **kw)
    with pytest.raises(ValueError, match="resuming with other settings.*data"):
        fit(build(arch), data, meta={"data": {**rec, "seed": 5}}, **kw)
    hist = fit(build(arch), data, meta={"data": {**rec, "num_workers": 1, "root": "/elsewhere"}}, **kw)
    assert len(hist) == 2


def test_nas_train_refuses_epochs_0_without_a_supernet(tmp_path, capsys):
    """epochs=0 pruned, QAT-trained and exported the untrained network (10% accuracy) with exit 0."""
    from nas.cli.train import run
    from nas.target import load_target

    with warnings.catch_warnings():  # cpu's processor is not this machine's: not what is tested
        warnings.simplefilter("ignore")
        cpu = load_target("cpu")
    with pytest.raises(ValueError, match="epochs=0"):
        PipelineSettings(run="r", target=cpu, train={"epochs": 0})
    with pytest.raises(SystemExit) as e:  # before the run dir is read
        run(compose_app("train", [f"run={tmp_path}", "epochs=0"]))
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: epochs=0: "), err
    assert "never be trained" in err and not list(tmp_path.iterdir())
    s = PipelineSettings(run="r", target=cpu, train={"epochs": 0}, supernet="sn.ckpt")
    assert s.train.epochs == 0  # a supernet's weights are trained: exporting them as they are is a choice


def test_each_stage_draws_from_a_stream_of_its_own():
    from nas.train.settings import SEED_OFFSETS

    assert len(set(SEED_OFFSETS.values())) == len(SEED_OFFSETS) and 0 not in SEED_OFFSETS.values()
