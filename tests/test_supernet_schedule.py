"""Supernet schedules: progressive shrinking's phases, the subnets each phase draws, resuming in a phase,
and the refusal to resume under another schedule."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nas.space import list_spaces, load_space
from nas.supernet import Supernet, locate
from nas.supernet.schedule import DIMENSIONS, dimension, draw, phase_at, phases, restrict
from nas.supernet.settings import SupernetSettings

DATA = {"name": "digits", "train_samples": 64, "val_samples": 64}


def _settings(**kw):
    return SupernetSettings(**{"epochs": 4, "batch_size": 32, "bn_recalibration_batches": 2,
                               "schedule": "progressive", **kw})


@pytest.fixture(scope="module")
def digits():
    from nas.data import load_data

    return load_data(DATA)


@pytest.fixture(scope="module")
def progressive(tmp_path_factory, digits):
    """A tiny supernet trained progressively for 4 epochs of 2 steps, one epoch per phase."""
    from nas.supernet.train import train_supernet

    out = tmp_path_factory.mktemp("progressive")
    return out / "supernet.ckpt", train_supernet(load_space("tiny"), digits, _settings(), out)


# ---- the phases ------------------------------------------------------------------------------


@pytest.mark.parametrize("epochs, want", [
    (20, [("largest", 0, ()), ("kernel", 6, ("kernel",)), ("depth", 10, ("kernel", "depth")),
          ("width", 15, DIMENSIONS)]),
    (10, [("largest", 0, ()), ("kernel", 3, ("kernel",)), ("depth", 5, ("kernel", "depth")), ("width", 7, DIMENSIONS)]),
    (2, [("kernel", 0, ("kernel",)), ("width", 1, DIMENSIONS)]),  # phases without an epoch are left out
])
def test_progressive_phases_unlock_kernel_then_depth_then_width(epochs, want):
    table = phases(_settings(epochs=epochs))
    assert [(p.name, p.start, p.elastic) for p in table] == want
    assert table[-1].elastic == DIMENSIONS  # the last epochs train every subnet
    if epochs == 20:
        assert [phase_at(table, e).name for e in (0, 5, 6, 9, 10, 14, 15, 19)] == \
            ["largest", "largest", "kernel", "kernel", "depth", "depth", "width", "width"]


def test_the_sandwich_rule_is_one_phase_with_every_dimension_elastic():
    table = phases(SupernetSettings(epochs=20))
    assert [(p.name, p.start, p.elastic) for p in table] == [("sandwich", 0, DIMENSIONS)]


def test_custom_phase_starts():
    table = phases(_settings(epochs=10, phase_starts=[0.0, 0.0, 0.5]))  # Hydra gives a list
    assert [(p.name, p.start) for p in table] == [("depth", 0), ("width", 5)]


@pytest.mark.parametrize("kw, message", [
    ({"schedule": "ofa"}, r"schedule must be sandwich or progressive, got 'ofa'"),
    ({"phase_starts": (0.5, 0.3, 0.75)}, r"phase_starts must be 3 fractions .*got \(0.5, 0.3, 0.75\)"),
    ({"phase_starts": (0.3, 0.5)}, r"phase_starts must be 3 fractions"),
    ({"phase_starts": (0.3, 0.5, 1.5)}, r"phase_starts must be 3 fractions"),
])
def test_bad_schedule_settings_are_refused_by_name(kw, message):
    with pytest.raises(ValueError, match=message):
        _settings(**kw)


def test_the_command_line_sets_the_schedule():
    from nas.cli.supernet import settings_from_config
    from nas.config import compose_app

    s = settings_from_config(compose_app("supernet", ["train.schedule=progressive", "train.phase_starts=[0.2,0.4,0.6]"]))
    assert s.schedule == "progressive" and s.phase_starts == (0.2, 0.4, 0.6)
    assert settings_from_config(compose_app("supernet", [])).schedule == "sandwich"  # the default


@pytest.mark.parametrize("name", list_spaces())
def test_every_parameter_of_every_shipped_space_has_a_dimension(name):
    dims = {dimension(p) for p in load_space(name).param_choices()}
    assert dims <= set(DIMENSIONS) and "width" in dims
    with pytest.raises(ValueError, match=r"no elastic dimension is known for option 'dilation'"):
        dimension("s1_b0_dilation")


# ---- the subnets a phase draws ---------------------------------------------------------------


def _varied(space, sn, archs):
    """The dimensions along which ``archs`` differ from the largest architecture."""
    big, _ = locate(space, sn.largest)
    return {dimension(n) for a in archs for n, v in locate(space, a)[0].items() if big[n] != v}


@pytest.mark.parametrize("name", list_spaces())
def test_a_phase_draws_subnets_along_its_unlocked_dimensions_only(name):
    from nas.supernet.train import Dist, SandwichStep

    space = load_space(name)
    sn = Supernet(space)
    step = SandwichStep(sn, _settings(epochs=4, random_subnets=3), Dist(), steps_per_epoch=10)
    assert [step.archs(k) for k in (0, 9)] == [[sn.largest], [sn.largest]]  # the first phase: the largest alone
    for epoch, elastic in ((1, {"kernel"}), (2, {"kernel", "depth"}), (3, set(DIMENSIONS))):
        draws = [step.archs(k) for k in range(10 * epoch, 10 * epoch + 10)]
        assert all(d[0] == sn.largest and sn.largest not in d[1:] for d in draws)
        archs = [a for d in draws for a in d]
        assert _varied(space, sn, archs) <= elastic
        if "kernel" in elastic and name != "hybrid":  # hybrid's kernels: its conv stages have one choice
            assert "kernel" in _varied(space, sn, archs)
    # the last phase draws what the sandwich rule draws at the same step
    sandwich = SandwichStep(sn, SupernetSettings(random_subnets=3), Dist(), steps_per_epoch=10)
    assert step.archs(35) == sandwich.archs(35)


def test_restrict_holds_the_locked_dimensions_at_their_largest():
    space = load_space("tiny")
    low = {n: min(c) for n, c in space.param_choices().items()}
    high = {n: max(c) for n, c in space.param_choices().items()}
    assert restrict(space, low, ()) == high
    assert restrict(space, low, DIMENSIONS) == low
    kern = restrict(space, low, ("kernel",))
    assert all(kern[n] == (low[n] if n.endswith("_kernel") else high[n]) for n in low)
    sn = Supernet(space)
    assert draw(sn, np.random.default_rng(0), ("kernel",), 0)[1].blocks == \
        sn.adapt(space.decode(kern)).blocks  # the smallest of the kernel phase: every kernel smallest


# ---- training, resuming, refusing ------------------------------------------------------------


def test_training_records_each_epochs_phase_and_the_phase_table(progressive):
    from nas.supernet.checkpoint import read_checkpoint

    path, rec = progressive
    c = read_checkpoint(path)
    assert [h["phase"] for h in c["history"]] == ["largest", "kernel", "depth", "width"]
    assert c["phases"] == rec["phases"] == [p.to_dict() for p in phases(_settings())]
    assert c["settings"]["schedule"] == "progressive" and tuple(c["settings"]["phase_starts"]) == (0.3, 0.5, 0.75)


def test_a_resumed_progressive_run_continues_in_its_phase_to_the_same_weights(progressive, digits, tmp_path):
    from nas.supernet.checkpoint import read_checkpoint
    from nas.supernet.train import train_supernet

    def stop_after_depth(rec):
        if rec["epoch"] == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_supernet(load_space("tiny"), digits, _settings(), tmp_path, on_epoch=stop_after_depth)
    assert [h["phase"] for h in read_checkpoint(tmp_path / "supernet.ckpt")["history"]] == ["largest", "kernel", "depth"]
    train_supernet(load_space("tiny"), digits, _settings(), tmp_path)  # the same command again
    done, once = read_checkpoint(tmp_path / "supernet.ckpt"), read_checkpoint(progressive[0])
    assert [h["phase"] for h in done["history"]] == ["largest", "kernel", "depth", "width"]
    for k, v in once["model"].items():
        assert torch.equal(v, done["model"][k]), k


def test_resuming_under_another_schedule_is_a_one_line_error_that_keeps_the_checkpoint(progressive, digits, tmp_path):
    import shutil

    from nas.supernet.train import train_supernet

    shutil.copy(progressive[0], tmp_path / "supernet.ckpt")
    before = (tmp_path / "supernet.ckpt").read_bytes()
    for s, message in ((_settings(schedule="sandwich"), "train.schedule: 'progressive' in the checkpoint, 'sandwich' now"),
                       (_settings(phase_starts=(0.25, 0.5, 0.75)), "train.phase_starts: (0.3, 0.5, 0.75) in the "
                                                                   "checkpoint, (0.25, 0.5, 0.75) now")):
        with pytest.raises(ValueError) as e:
            train_supernet(load_space("tiny"), digits, s, tmp_path)
        assert message in str(e.value) and "use another out= or remove it to start over" in str(e.value)
        assert "\n" not in str(e.value)
    assert (tmp_path / "supernet.ckpt").read_bytes() == before


def test_a_checkpoint_from_before_schedules_resumes_as_the_sandwich_rule(progressive, digits, tmp_path):
    from nas.fit.checkpoint import save_checkpoint
    from nas.supernet.checkpoint import read_checkpoint
    from nas.supernet.train import train_supernet

    c = read_checkpoint(progressive[0])
    c["settings"] = {k: v for k, v in c["settings"].items() if k not in ("schedule", "phase_starts")}
    c.pop("phases")
    save_checkpoint(tmp_path / "supernet.ckpt", c)
    rec = train_supernet(load_space("tiny"), digits, _settings(schedule="sandwich"), tmp_path)  # all 4 epochs done
    assert len(rec["history"]) == 4
    with pytest.raises(ValueError, match=r"train.schedule: 'sandwich' in the checkpoint, 'progressive' now"):
        train_supernet(load_space("tiny"), digits, _settings(), tmp_path)
