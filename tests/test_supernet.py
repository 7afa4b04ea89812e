"""The weight-sharing supernet: subnet extraction, weight sharing rules, training, checkpoints."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from nas.space import list_spaces, load_space
from nas.supernet import ArchOutsideSpace, Supernet, locate, share


def _random_bn_stats(module: nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)


@pytest.fixture(scope="module", params=list_spaces())
def space_supernet(request):
    space = load_space(request.param)
    torch.manual_seed(0)
    sn = Supernet(space)
    _random_bn_stats(sn.net, 1)
    return space, sn.eval()


def test_subnet_computes_what_the_supernet_set_to_it_computes(space_supernet):
    space, sn = space_supernet
    r = 32 if space.resolution <= 32 else 64
    x = torch.randn(2, space.in_chans, r, r, generator=torch.Generator().manual_seed(2))
    archs = [sn.smallest, sn.largest, *(sn.sample(s) for s in range(4))]
    outs = []
    for a in archs:
        with torch.no_grad():
            sn.set_arch(a)
            y_super = sn(x)
            sub = sn.subnet(a)
            y_sub = sub(x)
        assert type(sub).__name__ == "ArchNet" and sub.arch == a
        assert torch.allclose(y_super, y_sub, atol=1e-5, rtol=1e-4), (a, (y_super - y_sub).abs().max())
        outs.append(y_sub)
    # distinct subnets compute distinct functions (the comparison above is not vacuous)
    assert not torch.allclose(outs[0], outs[1], atol=1e-3)


def test_subnet_weights_are_the_leading_channels_and_the_centre_kernel():
    space = load_space("mbv3")
    torch.manual_seed(0)
    sn = Supernet(space)
    params = {n: v[0] for n, v in space.param_choices().items()}  # the smallest choices...
    params.update(s2_b0_kernel=3, s2_width=40)  # ...but a 3x3 kernel where the supernet holds 7x7
    arch = sn.adapt(space.decode(params))
    sub = sn.subnet(arch)
    _, slots = locate(space, arch)
    k = slots.index((2, 0))
    full = sn.net.blocks[sum(st.max_depth for st in space.stages[:2])].conv_dw.weight
    got = sub.blocks[k].conv_dw.weight
    assert full.shape[-1] == 7 and got.shape[-1] == 3
    assert torch.equal(got, full[: got.shape[0], :, 2:5, 2:5])
    assert torch.equal(sub.stem.conv.weight, sn.net.stem.conv.weight[: arch.stem.out_ch])


def test_share_cuts_qkv_per_third():
    full = torch.arange(6 * 4, dtype=torch.float32).reshape(6, 4, 1, 1)  # embed 2 -> q, k, v of 2 rows each
    got = share("blocks.0.attn.attn.qkv.weight", full, (3, 1, 1, 1))
    assert got.flatten().tolist() == [0.0, 8.0, 16.0]  # the first row of q, of k and of v
    with pytest.raises(ValueError, match=r"needs shape \(8, 4, 1, 1\).*holds \(6, 4, 1, 1\)"):
        share("w", full, (8, 4, 1, 1))


def test_gradients_of_a_subnet_reach_only_its_share_of_the_weights():
    space = load_space("tiny")
    sn = Supernet(space).train()
    a = sn.smallest
    sn.set_arch(a)
    sn(torch.randn(4, 3, 16, 16)).sum().backward()
    w = sn.net.stem.conv.weight
    assert w.grad[: a.stem.out_ch].abs().sum() > 0
    assert w.grad[a.stem.out_ch:].abs().sum() == 0


@pytest.mark.parametrize("change, message", [
    (lambda a: dataclasses.replace(a, stem=dataclasses.replace(a.stem, out_ch=24)), r"stem width 24 is not one of \[8, 16\]"),
    (lambda a: dataclasses.replace(a, blocks=a.blocks[:-1] + (dataclasses.replace(a.blocks[-1], kernel=7),)),
     r"blocks\[\d+\] \(ir_k7.*\): kernel 7 is not one of \[3, 5\] \(stage 3\)"),
    (lambda a: dataclasses.replace(a, blocks=a.blocks + (a.blocks[-1],) * 2), r"beyond the last stage|depth choices"),
    (lambda a: dataclasses.replace(a, blocks=a.blocks[:1] + (dataclasses.replace(a.blocks[1], out_ch=32),) + a.blocks[2:]),
     r"width 32 is not one of stage 1's widths \[16, 24\]"),
])
def test_an_arch_outside_the_space_is_refused_by_name(change, message):
    space = load_space("tiny")
    sn = Supernet(space)
    arch = change(sn.largest)
    with pytest.raises(ArchOutsideSpace, match=message):
        sn.subnet(arch)
    with pytest.raises(ArchOutsideSpace):
        sn.set_arch(arch)


def test_locate_inverts_decode_on_every_shipped_space():
    for name in list_spaces():
        space = load_space(name)
        rng = np.random.default_rng(0)
        for _ in range(20):
            params = space.sample_params(rng)
            arch = space.decode(params)
            found, slots = locate(space, arch)
            assert space.decode(found) == arch
            assert len(slots) == len(arch.blocks)


def test_an_arch_for_other_classes_is_refused_with_the_fix():
    sn = Supernet(load_space("tiny"), in_chans=1)
    with pytest.raises(ValueError, match=r"adapt it with Supernet.adapt"):
        sn.subnet(load_space("tiny").smallest())
