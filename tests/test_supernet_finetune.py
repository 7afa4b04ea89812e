"""``evaluator=supernet`` with ``finetune_steps``: a few training steps of each subnet's copy before scoring."""

from __future__ import annotations

import pytest
import torch

from nas.space import load_space

# the same tiny supernet as tests/test_supernet.py's (2 epochs of 4 steps on 128 digits images)
from tests.test_supernet import digits, trained  # noqa: F401  (fixtures)


def test_the_evaluator_fine_tunes_a_copy_for_the_steps_asked_then_scores_it(trained, digits, monkeypatch):  # noqa: F811
    from nas.data import adapt_arch
    from nas.fit import loop
    from nas.search.evaluate import make_evaluator
    from nas.supernet.checkpoint import load_supernet

    kw = {"name": "supernet", "checkpoint": str(trained[0]), "bn_recalibration_batches": 2, "batch_size": 16,
          "device": "cpu"}
    arch = adapt_arch(load_space("tiny").random(3), digits)
    sn, _ = load_supernet(trained[0])
    before = {k: v.clone() for k, v in sn.net.state_dict().items()}
    plain = make_evaluator(kw).evaluate(arch, digits, seed=4)
    steps, real = [], loop.train_epochs

    def counting(*a, **k):
        loss, n = real(*a, **k)
        steps.append(n)
        return loss, n

    monkeypatch.setattr("nas.search.evaluate.train_epochs", counting)
    per_epoch = len(digits.train) // 16
    tuned = make_evaluator({**kw, "finetune_steps": per_epoch + 3, "finetune_lr": 0.01}).evaluate(arch, digits, seed=4)
    assert steps == [per_epoch + 3]  # across an epoch's end, and no further
    assert tuned.score != plain.score  # the weights it scored moved ...
    assert all(torch.equal(v, sn.net.state_dict()[k]) for k, v in before.items())  # ... the supernet's did not
    with pytest.raises(ValueError, match="finetune_steps"):
        make_evaluator({**kw, "finetune_steps": -1})
