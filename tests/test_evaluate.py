"""Evaluators: short training learns and is reproducible; zero-cost proxies are finite and seeded."""

import math

import pytest
import torch

from nas.data import adapt_arch, load_data
from nas.fit.loop import TrainingDiverged
from nas.search.evaluate import TrainEvaluator, ZeroCostEvaluator, evaluator_names, make_evaluator
from nas.space import load_space


@pytest.fixture(scope="module")
def digits():
    torch.set_num_threads(1)
    return load_data({"name": "digits", "resolution": 16, "train_samples": 400, "val_samples": 200})


@pytest.fixture(scope="module")
def archs(digits):
    space = load_space("tiny")
    return [adapt_arch(space.random(i), digits) for i in range(2)]


def test_registry_and_settings():
    assert set(evaluator_names()) >= {"train", "zero_cost"}
    assert isinstance(make_evaluator({"name": "train", "epochs": 2}), TrainEvaluator)
    assert make_evaluator({"name": "zero_cost", "proxy": "synflow"}).metric == "synflow"
    with pytest.raises(ValueError, match="unknown evaluator 'nope'.*train"):
        make_evaluator({"name": "nope"})
    with pytest.raises(ValueError, match=r"unknown setting\(s\) \['epoch'\]"):
        make_evaluator({"name": "train", "epoch": 2})
    with pytest.raises(ValueError, match="epochs must be a positive integer, got 0"):
        TrainEvaluator(epochs=0)
    with pytest.raises(ValueError, match="optimizer must be one of adamw, sgd"):
        TrainEvaluator(optimizer="lion")
    with pytest.raises(ValueError, match="proxy must be one of naswot, synflow"):
        ZeroCostEvaluator(proxy="grasp")


def test_arch_must_match_the_data(digits):
    a = load_space("tiny").random(0)  # 3 channels, 32 px
    with pytest.raises(ValueError, match="adapt_arch"):
        TrainEvaluator(epochs=1).evaluate(a, digits, seed=0)


def test_short_training_learns_and_is_reproducible(digits, archs):
    ev = TrainEvaluator(epochs=1, batch_size=32, device="cpu")
    r = ev.evaluate(archs[0], digits, seed=0)
    assert r.metric == "val_accuracy" and 0.5 < r.score <= 1.0  # chance is 0.1
    assert r.metrics["steps"] == 400 // 32 and math.isfinite(r.metrics["val_loss"])
    assert r.metrics["val_images"] == len(digits.val)  # what the score's interval is counted on
    state = torch.random.get_rng_state()
    again = ev.evaluate(archs[0], digits, seed=0)
    assert again.score == r.score and again.metrics["val_loss"] == r.metrics["val_loss"]
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG is left alone


def test_sgd_and_no_recalibration_run(digits, archs):
    r = TrainEvaluator(epochs=1, batch_size=64, optimizer="sgd", lr=0.05, bn_recalibration_batches=0,
                       device="cpu").evaluate(archs[1], digits, seed=1)
    assert 0.0 <= r.score <= 1.0


def test_divergence_is_a_clear_error(digits, archs):
    with pytest.raises(TrainingDiverged, match="lower evaluator.lr"):
        TrainEvaluator(epochs=1, lr=1e30, grad_clip=None, label_smoothing=0.0, device="cpu").evaluate(
            archs[0], digits, seed=0)


@pytest.mark.parametrize("proxy", ["naswot", "synflow"])
def test_zero_cost(digits, archs, proxy):
    ev = ZeroCostEvaluator(proxy=proxy, batch_size=32, device="cpu")
    scores = [ev.evaluate(a, digits, seed=0).score for a in archs]
    assert all(math.isfinite(s) for s in scores)
    assert ev.evaluate(archs[0], digits, seed=0).score == scores[0]
    assert scores[0] != scores[1]


def test_cuda_device_without_cuda_is_a_clear_error(digits, archs):
    if torch.cuda.is_available():
        pytest.skip("has CUDA")
    with pytest.raises(ValueError, match="no CUDA device"):
        TrainEvaluator(epochs=1, device="cuda").evaluate(archs[0], digits, seed=0)


@pytest.mark.gpu
def test_train_on_gpu_with_amp(digits, archs):
    r = TrainEvaluator(epochs=1, device="cuda", amp=True).evaluate(archs[0], digits, seed=0)
    assert 0.3 < r.score <= 1.0
