"""Property tests over every shipped space: sample -> build -> forward -> ONNX parity -> JSON -> keys."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from nas.arch import Arch, BlockKey
from nas.builder import build, build_layer
from nas.export.onnx import export_onnx, ort_session
from nas.space import list_calibration_spaces, list_spaces, load_space

SPACES = {n: load_space(n) for n in list_spaces()}
CALIBRATION = {n: load_space(n) for n in list_calibration_spaces()}  # measured by nas.profile, never searched


@pytest.mark.parametrize("name", sorted(SPACES) + sorted(CALIBRATION))
@given(seed=st.integers(0, 2**32 - 1))
def test_sample_build_forward_onnx_roundtrip(name, seed):
    space = SPACES.get(name) or CALIBRATION[name]
    arch = space.random(seed)
    torch.manual_seed(0)
    model = build(arch).eval()
    x = torch.randn(1, arch.in_chans, arch.resolution, arch.resolution)
    with torch.no_grad():
        y = model(x)
        assert y.shape == (1, arch.head.num_classes)
        small = max(8, arch.resolution // 2)  # runs at a smaller resolution too
        assert model(torch.randn(1, arch.in_chans, small, small)).shape == y.shape
    # ONNX export runs in onnxruntime with outputs matching torch
    sess = ort_session(export_onnx(model, x))
    out = sess.run(None, {"input": x.numpy()})[0]
    assert np.abs(out - y.numpy()).max() <= 1e-4
    # JSON round trip and key stability
    back = Arch.from_json(arch.to_json())
    assert back == arch and back.digest() == arch.digest()
    assert [k.digest() for k in back.keys()] == [k.digest() for k in arch.keys()]
    assert [BlockKey.from_dict(k.to_dict()) for k in arch.keys()] == arch.keys()


@pytest.mark.parametrize("name", sorted(SPACES))
def test_every_unique_block_builds_standalone(name):
    """The profiler measures each unique block as its own graph: all of them must build and run."""
    space = SPACES[name]
    keys = space.unique_blocks(resolution=min(space.resolution, 64))
    rng = np.random.default_rng(0)
    for i in rng.choice(len(keys), size=min(40, len(keys)), replace=False):
        k = keys[int(i)]
        m = build_layer(k).eval()
        with torch.no_grad():
            y = m(torch.randn(1, *k.in_shape))
        if k.block.kind == "head":
            assert tuple(y.shape) == (1, k.out_shape[0])
        else:
            assert tuple(y.shape[1:]) == k.out_shape


def test_train_step_runs():
    arch = SPACES["tiny"].random(0)
    model = build(arch, drop_rate=0.1, drop_path_rate=0.1).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, t = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    loss = torch.nn.functional.cross_entropy(model(x), t)
    loss.backward()
    opt.step()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
