"""``train_supernet(init=)``: a supernet of a sub-space started from a trained supernet's weights."""

import copy

import pytest
import torch

from nas.space import SearchSpace, load_space
from nas.supernet.model import Supernet

# the same tiny supernet as tests/test_supernet.py's (2 epochs of 4 steps on 128 digits images)
from tests.test_supernet import _settings, digits, trained  # noqa: F401  (fixtures)


def test_a_supernet_of_a_sub_space_starts_from_the_weights_its_parent_gives_it(trained, digits, tmp_path):  # noqa: F811
    """``init=``: a supernet of a space that restricts the parent's starts from the weights the parent gives
    the sub-space's largest architecture (few-shot NAS); one the parent does not hold is a one-line error."""
    from nas.supernet.checkpoint import load_supernet
    from nas.supernet.train import train_supernet

    path, _ = trained
    space = load_space("tiny")
    c = copy.deepcopy(space.config)
    c["stages"][1]["width"] = [min(c["stages"][1]["width"])]  # the narrowest width of a stage alone
    sub = SearchSpace(c, source=space.source)
    parent, _ = load_supernet(path)
    want = parent.subnet(Supernet(sub, in_chans=1).largest).state_dict()
    rec = train_supernet(sub, digits, _settings(epochs=1, lr=1e-12, weight_decay=0.0), tmp_path / "sub", init=path)
    got, _ = load_supernet(rec["path"])
    # a step at a vanishing rate moves nothing; the channels are sorted once by the same importance
    for k, v in want.items():
        if k.endswith("num_batches_tracked") or "running" in k:
            continue
        g = got.net.state_dict()[k]
        assert g.shape == v.shape, k
        assert torch.allclose(g.abs().sum(), v.abs().sum(), rtol=1e-4), k
    wide = copy.deepcopy(space.config)
    wide["stages"][1]["width"] = [max(wide["stages"][1]["width"]) + 16]
    with pytest.raises(ValueError, match="init=.*does not hold this space's largest architecture"):
        train_supernet(SearchSpace(wide, source=space.source), digits, _settings(epochs=1), tmp_path / "wide", init=path)
