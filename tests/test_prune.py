"""Structured pruning in spec space: units, exactness of the weight copy, the latency-aware plan."""

import numpy as np
import pytest
import torch

from nas.arch import SE, Arch, ConvBlock, DSConvBlock, FusedMBConvBlock, Head, MBConvBlock
from nas.build import build
from nas.compress.prune import (
    PrunePlan,
    apply_plan,
    channel_importance,
    channel_units,
    plan_pruning,
    resize_arch,
)
from nas.cost import arch_cost
from nas.space import load_space, make_divisible

torch.set_num_threads(1)


def _arch(head_style: str = "pool") -> Arch:
    """Every unit kind: a stem chain with a residual DS (with SE), fused and IR mids, an IR residual chain
    of three, SE, and a head with or without a hidden layer."""
    hidden = 0 if head_style == "pool" else 64
    return Arch(
        in_chans=3, resolution=16,
        stem=ConvBlock(32, 3, 2, "relu"),
        blocks=(
            DSConvBlock(32, 3, 1, "relu", se=SE(8)),  # residual: in the stem's chain
            FusedMBConvBlock(32, 64, 3, 2, "relu"),
            MBConvBlock(48, 96, 3, 1, "hard_swish"),
            MBConvBlock(48, 144, 5, 1, "relu", se=SE(40, "hard_sigmoid")),  # residual
            MBConvBlock(48, 96, 3, 1, "relu"),  # residual
            MBConvBlock(64, 128, 3, 2, "relu", se=SE(32)),
        ),
        head=Head(10, hidden, head_style, "hard_swish"),
    )


def _random_bn(model: torch.nn.Module, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            n = m.num_features
            m.weight.data = torch.rand(n, generator=g) + 0.5
            m.bias.data = torch.randn(n, generator=g) * 0.1
            m.running_mean = torch.randn(n, generator=g) * 0.1
            m.running_var = torch.rand(n, generator=g) + 0.5


def test_units_follow_residual_chains():
    units = {u.name: u for u in channel_units(_arch("conv_pool"))}
    chains = [u for u in units.values() if u.kind == "chain"]
    # stem + residual DS share a chain; the three IR blocks of width 48 share one
    assert [(u.layers, u.size) for u in chains] == [((0, 1), 32), ((2,), 32), ((3, 4, 5), 48), ((6,), 64)]
    assert {u.name for u in units.values() if u.kind == "mid"} == {f"mid:blocks.{i}" for i in range(1, 6)}
    assert units["hidden:head"].size == 64
    # a chain's readers include the DS residual member's depthwise and SE, and the next block's input
    t = dict(units[chains[0].name].tensors)
    assert t["blocks.0.conv_dw.weight"] == 0 and t["blocks.0.se.conv_reduce.weight"] == 1
    assert t["blocks.1.conv_exp.weight"] == 1 and t["stem.conv.weight"] == 0


@pytest.mark.parametrize("head_style", ["pool", "pool_conv", "conv_pool"])
def test_removing_dead_channels_is_exact(head_style):
    """Channels whose writers output exact zeros can be removed without changing the output: checks that
    every tensor a unit touches is sliced consistently (residual chains, SE, head)."""
    torch.manual_seed(0)
    arch = _arch(head_style)
    model = build(arch).eval()
    _random_bn(model)
    units = [u for u in channel_units(arch) if u.prunable]
    rng = np.random.default_rng(0)
    state = model.state_dict()
    importance = {}
    for u in units:
        dead = torch.as_tensor(rng.choice(u.size, 16, replace=False))
        imp = np.ones(u.size)
        imp[dead.numpy()] = 0.0
        importance[u.name] = imp
        # zero every BatchNorm scale and shift on these channels: each conv writing them then outputs 0
        for key, _ in u.tensors:
            if key.endswith((".weight", ".bias")) and key.rsplit(".", 1)[0] + ".running_var" in state:
                state[key][dead] = 0.0
        if u.kind == "hidden" and head_style == "pool_conv":  # no BN there: zero the conv (hard-swish(0) = 0)
            state["head.conv_head.weight"][dead] = 0.0
            state["head.conv_head.bias"][dead] = 0.0
    model.load_state_dict(state)
    def lat(archs):
        return np.array([arch_cost(a).macs / 1e6 for a in archs])

    sizes = {u.name: u.size - 16 for u in units}
    new_arch = resize_arch(arch, units, sizes, multiple=8)
    plan = PrunePlan(arch, _freeze_se(new_arch, arch), tuple(
        (u.name, tuple(int(i) for i in np.flatnonzero(importance[u.name] > 0))) for u in units),
        "l1", 8, None, float(lat([arch])[0]), float(lat([new_arch])[0]), 1.0, True)
    pruned = apply_plan(model, plan)
    x = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(pruned(x), model(x), atol=1e-5, rtol=1e-4)
    assert arch_cost(plan.arch).params < arch_cost(arch).params


def _freeze_se(new: Arch, old: Arch) -> Arch:
    """``new`` with the original SE channel counts (so a dead-channel removal is exact)."""
    import dataclasses

    blocks = tuple(dataclasses.replace(nb, se=ob.se) if getattr(ob, "se", None) else nb
                   for nb, ob in zip(new.blocks, old.blocks))
    return dataclasses.replace(new, blocks=blocks)


def _macs_ms(archs):
    return np.array([arch_cost(a).macs / 1e6 for a in archs])


@pytest.mark.parametrize("criterion", ["l1", "bn", "taylor"])
def test_plan_reaches_target_aligned_and_keeps_residuals(criterion):
    torch.manual_seed(1)
    space = load_space("tiny")
    arch = space.random(11).with_head(in_chans=1).with_resolution(16)
    model = build(arch)
    _random_bn(model, 1)
    batches = [(torch.randn(8, 1, 16, 16), torch.randint(0, 10, (8,))) for _ in range(2)]
    imp = channel_importance(model, channel_units(arch), criterion, batches=batches)
    before = float(_macs_ms([arch])[0])
    plan = plan_pruning(arch, imp, _macs_ms, target_ms=0.7 * before, multiple=space.channel_multiple,
                        se_ratio=space.se_ratio, criterion=criterion)
    assert plan.reached and plan.predicted_ms_after <= 0.7 * before
    assert plan.predicted_ms_after == pytest.approx(float(_macs_ms([plan.arch])[0]))
    ms = [s.predicted_ms for s in plan.steps]
    assert all(b < a for a, b in zip([before, *ms], ms))  # every step lowers the prediction
    for ob, nb in zip(arch.layers(), plan.arch.layers()):
        for f in ("out_ch", "mid_ch"):
            if hasattr(nb, f) and getattr(nb, f) != getattr(ob, f):
                assert getattr(nb, f) % space.channel_multiple == 0
                assert getattr(nb, f) >= 0.25 * getattr(ob, f)
        if isinstance(nb, MBConvBlock) and nb.se is not None and nb.mid_ch != ob.mid_ch:  # SE follows the space's rule
            assert nb.se.channels == min(ob.se.channels, make_divisible(nb.mid_ch * space.se_ratio, 8))
    keys_old, keys_new = arch.keys(), plan.arch.keys()
    assert [k.block.has_skip(k.in_ch) for k in keys_old] == [k.block.has_skip(k.in_ch) for k in keys_new]
    pruned = apply_plan(model, plan)
    assert pruned(torch.randn(2, 1, 16, 16)).shape == (2, 10)
    assert PrunePlan.from_dict(plan.to_dict()) == plan


def _tiled_ms(archs, tile=32):
    """A device whose kernels work on channels padded to ``tile``: MACs with every channel count
    rounded up to the tile, so narrowing a layer by one group of 8 often changes nothing."""
    def up(c):
        return -(-c // tile) * tile

    out = []
    for a in archs:
        ms = 0.0
        for k in a.keys():
            b = k.block
            mid = getattr(b, "mid_ch", 0) or 0
            ms += (up(k.in_ch) * up(mid or b.out_ch) + up(mid) * up(b.out_ch)) * k.in_h * k.in_w / 1e6 \
                if hasattr(b, "out_ch") else 1e-3
        out.append(ms)
    return np.array(out)


def test_lookahead_gets_past_tiles_wider_than_the_channel_group():
    arch = _arch()
    model = build(arch)
    _random_bn(model)
    imp = channel_importance(model, channel_units(arch), "l1")
    before = float(_tiled_ms([arch])[0])
    stuck = plan_pruning(arch, imp, _tiled_ms, target_ms=0.7 * before, multiple=8, lookahead=1)
    assert not stuck.reached  # one group of 8 at a time never crosses a 32-channel tile
    plan = plan_pruning(arch, imp, _tiled_ms, target_ms=0.7 * before, multiple=8)  # default lookahead=4
    assert plan.reached and plan.predicted_ms_after <= 0.7 * before
    ms = [s.predicted_ms for s in plan.steps]
    assert all(b < a for a, b in zip([before, *ms], ms))  # every step still lowers the prediction
    assert all(getattr(b, "out_ch", 8) % 8 == 0 and getattr(b, "mid_ch", 0) % 8 == 0 for b in plan.arch.blocks)
    with pytest.raises(ValueError, match="lookahead must be a positive integer"):
        plan_pruning(arch, imp, _tiled_ms, target_ms=0.7 * before, multiple=8, lookahead=0)


def test_importance_ranks_dead_channels_last():
    arch = _arch()
    model = build(arch).eval()
    _random_bn(model)
    units = {u.name: u for u in channel_units(arch)}
    u = units["mid:blocks.2"]
    with torch.no_grad():
        model.blocks[2].bn1.weight[:8] = 0.0
        model.blocks[2].bn2.weight[:8] = 0.0
        model.blocks[2].conv_pw.weight[:8] = 0.0
        model.blocks[2].conv_dw.weight[:8] = 0.0
        model.blocks[2].conv_pwl.weight[:, :8] = 0.0
    for crit in ("l1", "bn"):
        imp = channel_importance(model, [u], crit)[u.name]
        assert set(np.argsort(imp)[:8]) == set(range(8)), crit
    batches = [(torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,)))]
    imp = channel_importance(model, [u], "taylor", batches=batches)[u.name]
    assert np.all(imp[:8] == 0) and np.all(imp[8:] > 0)


def test_pruned_arch_is_scored_by_the_latency_model():
    from nas.latency import RooflineModel
    from nas.train_lib import load_target

    lm = RooflineModel(load_target("cpu"))  # the labelled estimate: deterministic, needs no table
    arch = _arch("pool_conv")
    model = build(arch)
    imp = channel_importance(model, channel_units(arch), "l1")
    before = float(lm.predict(arch)[0])
    plan = plan_pruning(arch, imp, lm.predict, target_ms=0.8 * before, multiple=16)
    assert lm.explain(plan.arch).ms == pytest.approx(plan.predicted_ms_after)
    assert plan.predicted_ms_after < before
    assert all(getattr(b, "out_ch", 16) % 16 == 0 for b in plan.arch.blocks)


def test_errors_name_the_problem():
    arch = _arch()
    model = build(arch)
    units = channel_units(arch)
    with pytest.raises(ValueError, match="prune.criterion must be one of l1, bn, taylor"):
        channel_importance(model, units, "random")
    with pytest.raises(ValueError, match="taylor needs training batches"):
        channel_importance(model, units, "taylor")
    with pytest.raises(ValueError, match="importance for unit .* must have"):
        plan_pruning(arch, {}, _macs_ms, target_ms=1.0, multiple=8)
    with pytest.raises(ValueError, match="unknown pruning unit 'nope'"):
        resize_arch(arch, units, {"nope": 8}, multiple=8)
    with pytest.raises(ValueError, match="prune target must be > 0"):
        plan_pruning(arch, channel_importance(model, units), _macs_ms, target_ms=0.0, multiple=8)
    other = build(load_space("tiny").random(0))
    imp = channel_importance(model, units)
    plan = plan_pruning(arch, imp, _macs_ms, target_ms=0.9 * float(_macs_ms([arch])[0]), multiple=8)
    with pytest.raises(ValueError, match="not the plan's original Arch"):
        apply_plan(other, plan)


def test_measured_pruning_replans_until_the_measurement_meets_the_ratio(monkeypatch):
    """nas.train's closed loop (the target is this machine): the 'measured' latency here carries a fixed
    per-network cost that the predictor (MACs) does not see, so the predicted 0.7x measures ~0.75x;
    the loop re-plans until the measurement is <= 0.7x."""
    import nas.train_lib as tl

    arch = _arch()
    model = build(arch)
    _random_bn(model)
    imp = channel_importance(model, channel_units(arch), "l1")
    before = float(_macs_ms([arch])[0])

    def make(ms):
        return plan_pruning(arch, imp, _macs_ms, target_ms=ms, multiple=8)

    measured = []
    monkeypatch.setattr(tl, "_measure_arch_ms",
                        lambda ctx, a: measured.append(a) or float(_macs_ms([a])[0]) + 0.2 * before)
    plan0 = make(0.7 * before)
    plan, loop = tl._measured_pruning(None, arch, plan0, make, 0.7, 3)
    assert loop["tries"][0]["measured_ratio"] > 0.72  # the prediction alone misses
    assert loop["reached"] and loop["tries"][-1]["measured_ratio"] <= 0.7 and 1 < len(loop["tries"]) <= 4
    assert plan.predicted_ms_after < plan0.predicted_ms_after and plan.original == arch
    assert measured[0] == arch and loop["unpruned_ms"] == pytest.approx(1.2 * before)
    # measure_steps=0: measured and reported, not re-planned
    plan_b, loop_b = tl._measured_pruning(None, arch, plan0, make, 0.7, 0)
    assert plan_b is plan0 and len(loop_b["tries"]) == 1 and not loop_b["reached"]
