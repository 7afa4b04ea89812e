"""Structured pruning in spec space: units, exactness of the weight copy, the latency-aware plan."""

import numpy as np
import pytest
import torch

from nas.arch import SE, Arch, ConvBlock, DSConvBlock, FusedMBConvBlock, Head, MBConvBlock
from nas.builder import build
from nas.compress.prune import apply_plan, channel_importance, prune_model
from nas.compress.prune_plan import LossProbe, PrunePlan, plan_pruning
from nas.cost import arch_cost
from nas.narrow import channel_units, drop_layers, droppable, resize_arch
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


def test_plan_stops_before_a_step_that_does_not_pay():
    """prune.min_gain: on a latency model whose every step saves next to nothing (a roofline
    dominated by a fixed overhead), the plan takes no step instead of cutting the network to its floor
    for a fraction of a percent."""
    arch = _arch()
    model = build(arch)
    _random_bn(model)
    imp = channel_importance(model, channel_units(arch), "l1")

    def flat(archs):  # 1 ms of overhead, 0.1 us per MMAC
        return 1.0 + 1e-4 * _macs_ms(archs)

    before = float(flat([arch])[0])
    greedy = plan_pruning(arch, imp, flat, target_ms=0.99 * before, multiple=8)
    assert len(greedy.steps) > 5  # without the rule it prunes on and on
    plan = plan_pruning(arch, imp, flat, target_ms=0.99 * before, multiple=8, min_gain_ms=0.001 * before)
    assert plan.steps == () and plan.arch == arch and not plan.reached
    ok = plan_pruning(arch, imp, _macs_ms, target_ms=0.7 * float(_macs_ms([arch])[0]), multiple=8,
                      min_gain_ms=0.001 * float(_macs_ms([arch])[0]))
    assert ok.reached  # steps that pay are taken as before


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
    from nas.target import load_target

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
    import nas.train.prune_stage as tl

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


def _batches(arch, n=2, bs=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(bs, arch.in_chans, arch.resolution, arch.resolution, generator=g),
             torch.randint(0, 10, (bs,), generator=g)) for _ in range(n)]


def _ce(model, batches):
    with torch.no_grad():
        return float(sum(torch.nn.functional.cross_entropy(model(x), y, reduction="sum") for x, y in batches)
                     / sum(len(y) for _, y in batches))


def test_loss_probe_measures_what_apply_plan_builds():
    """The probe masks; apply_plan slices, folds the dropped SE's mean gate and removes the dropped
    block: the two networks must compute the same loss (channels, SE and blocks at once)."""
    arch = _arch()
    model = build(arch).eval()
    _random_bn(model, 3)
    batches = _batches(arch)
    units = [u for u in channel_units(arch) if u.prunable]
    imp = channel_importance(model, units, "loss")
    order = {u.name: np.argsort(imp[u.name], kind="stable") for u in units}
    probe = LossProbe(model, batches, order=order)
    assert probe.loss({}) == pytest.approx(_ce(model, batches), rel=1e-5)
    se_ok, blocks_ok = droppable(arch)
    assert se_ok == [1, 4, 6] and blocks_ok == [1, 4, 5]
    sizes = {"mid:blocks.2": 64, "chain2:blocks.2..blocks.4": 40, "mid:blocks.5": 64}  # (32 would add a residual)
    _, gates = probe.gates(sizes, blocks=[5])
    assert set(gates) == {1, 4, 6} and gates[4].shape == (144,) and np.all((gates[4] >= 0) & (gates[4] <= 1))
    loss = probe.loss(sizes, {4: gates[4], 1: gates[1]}, [5])
    new = drop_layers(_freeze_se(resize_arch(arch, units, sizes, multiple=8), arch), se=[1, 4], blocks=[5])
    assert len(new.blocks) == len(arch.blocks) - 1 and new.blocks[0].se is None and new.blocks[3].se is None
    keep = tuple((u, tuple(sorted(int(i) for i in order[u][-s:]))) for u, s in sizes.items())
    plan = PrunePlan(arch, new, keep, "loss", 8, None, 1.0, 1.0, 1.0, True, (),
                     ((1, tuple(gates[1])), (4, tuple(gates[4]))), (5,))
    pruned = apply_plan(model, plan)
    assert pruned.arch == new
    skips = [k.block.has_skip(k.in_ch) for k in arch.keys()]
    assert [k.block.has_skip(k.in_ch) for k in pruned.arch.keys()] == skips[:5] + skips[6:]  # residuals kept
    assert _ce(pruned, batches) == pytest.approx(loss, rel=1e-5)
    assert PrunePlan.from_dict(plan.to_dict()) == plan
    old = plan.to_dict()
    del old["dropped_se"], old["dropped_blocks"]  # a plan written before structural steps existed
    assert PrunePlan.from_dict(old).dropped_blocks == ()
    with pytest.raises(ValueError, match="layers \\[2\\] have no squeeze-excite"):
        drop_layers(arch, se=[2])
    with pytest.raises(ValueError, match="not residual blocks"):
        drop_layers(arch, blocks=[6])


def _per_op_ms(archs):
    """MACs plus a fixed cost per layer and per squeeze-excite: a small network on a CPU."""
    return np.array([arch_cost(a).macs / 1e6 + sum(1.0 + 2.0 * (getattr(b, "se", None) is not None)
                                                   for b in a.layers()) for a in archs])


def test_loss_criterion_takes_free_structural_steps_first():
    """A squeeze-excite whose gate is constant and a residual block whose branch is dead cost nothing
    to drop (the probe measures exactly that); the planner, given those costs, drops them before
    narrowing anything; l1 cannot drop them at all."""
    arch = _arch()
    model = build(arch).eval()
    _random_bn(model, 4)
    with torch.no_grad():
        model.blocks[3].se.conv_expand.weight.zero_()  # layer 4's SE: a constant gate
        model.blocks[4].bn3.weight.zero_()  # layer 5: its branch outputs 0
        model.blocks[4].bn3.bias.zero_()
    batches = _batches(arch, seed=1)
    units = channel_units(arch)
    imp = channel_importance(model, units, "loss")
    probe = LossProbe(model, batches, order={u.name: np.argsort(imp[u.name]) for u in units})
    base, gates = probe.gates({})
    assert probe.loss({}, {4: gates[4]}) == pytest.approx(base, abs=1e-6)
    assert probe.loss({}, blocks=[5]) == pytest.approx(base, abs=1e-6)

    class Costs(LossProbe):  # the real probe, but every step other than the two free ones costs 1
        def loss(self, sizes, se=None, blocks=()):
            real = super().loss(sizes, se, blocks)
            free = any(s < self.units[n].size for n, s in sizes.items()) or set(se or {}) - {4} or set(blocks) - {5}
            return real + (1.0 if free else 0.0)

    before = float(_per_op_ms([arch])[0])
    plan = plan_pruning(arch, imp, _per_op_ms, target_ms=0.7 * before, multiple=8, criterion="loss",
                        probe=Costs(model, batches))
    names = [s.unit for s in plan.steps]
    assert set(names[:2]) == {"se:blocks.3", "block:blocks.4"}, names
    assert [s.importance_removed for s in plan.steps[:2]] == pytest.approx([0.0, 0.0], abs=1e-6)
    assert plan.reached and 5 in plan.dropped_blocks and 4 in dict(plan.dropped_se)
    assert len(plan.arch.blocks) == len(arch.blocks) - len(plan.dropped_blocks)
    pruned = apply_plan(model, plan)
    assert pruned(torch.randn(2, 3, 16, 16)).shape == (2, 10)
    # re-planning with the same probe (nas.train's measured loop) passes no image twice
    probe = LossProbe(model, batches)
    first = plan_pruning(arch, imp, _per_op_ms, target_ms=0.8 * before, multiple=8, criterion="loss", probe=probe)
    n = probe.evaluations
    assert plan_pruning(arch, imp, _per_op_ms, target_ms=0.8 * before, multiple=8, criterion="loss",
                        probe=probe) == first and probe.evaluations == n
    deeper = plan_pruning(arch, imp, _per_op_ms, target_ms=0.7 * before, multiple=8, criterion="loss", probe=probe)
    assert deeper.steps[:len(first.steps)] == first.steps and probe.evaluations > n
    # prune_model builds the probe from batches
    pruned, plan2 = prune_model(model, _per_op_ms, target_ms=0.7 * before, multiple=8, criterion="loss",
                                batches=batches)
    assert plan2.reached and pruned.arch == plan2.arch
    l1 = plan_pruning(arch, channel_importance(model, units, "l1"), _per_op_ms, target_ms=0.7 * before, multiple=8)
    assert not l1.dropped_se and not l1.dropped_blocks and len(l1.arch.blocks) == len(arch.blocks)
    with pytest.raises(ValueError, match="criterion=loss needs a LossProbe"):
        plan_pruning(arch, imp, _per_op_ms, target_ms=1.0, multiple=8, criterion="loss")


def test_loss_probe_is_exact_for_fused_blocks_too():
    arch = Arch(in_chans=3, resolution=16, stem=ConvBlock(32, 3, 2, "relu"),
                blocks=(FusedMBConvBlock(32, 64, 3, 1, "relu", se=SE(16)),  # residual, with SE
                        FusedMBConvBlock(32, 96, 3, 1, "relu", se=SE(24, "hard_sigmoid")),  # residual, with SE
                        MBConvBlock(48, 96, 3, 2, "relu")),
                head=Head(10, 0, "pool", "relu"))
    model = build(arch).eval()
    _random_bn(model, 5)
    batches = _batches(arch, seed=2)
    units = [u for u in channel_units(arch) if u.prunable]
    imp = channel_importance(model, units, "loss")
    order = {u.name: np.argsort(imp[u.name], kind="stable") for u in units}
    probe = LossProbe(model, batches, order=order)
    assert droppable(arch) == ([1, 2], [1, 2])
    sizes = {"mid:blocks.0": 32}
    _, gates = probe.gates(sizes)
    for se, blocks in (({1: gates[1]}, [2]), ({2: gates[2]}, [1]), ({1: gates[1], 2: gates[2]}, [])):
        loss = probe.loss(sizes, se, blocks)
        new = drop_layers(_freeze_se(resize_arch(arch, units, sizes, multiple=8), arch), se=list(se), blocks=blocks)
        keep = tuple((u, tuple(sorted(int(i) for i in order[u][-s:]))) for u, s in sizes.items())
        plan = PrunePlan(arch, new, keep, "loss", 8, None, 1.0, 1.0, 1.0, True, (),
                         tuple((i, tuple(g)) for i, g in sorted(se.items())), tuple(blocks))
        assert _ce(apply_plan(model, plan), batches) == pytest.approx(loss, rel=1e-4), (se.keys(), blocks)


def test_last_step_is_the_cheapest_that_reaches_the_target():
    """Narrowing layer 2 saves 5 ms for 1/8 of its importance, layer 3 1.5 ms for 1/12: the first has the
    better ratio but overshoots a target 1 ms away, which the second reaches for less."""
    arch = _arch()
    imp = {u.name: np.ones(u.size) for u in channel_units(arch) if u.prunable}

    def ms(archs):
        return np.array([10.0 - 5.0 * (a.blocks[1].mid_ch < 64) - 1.5 * (a.blocks[2].mid_ch < 96) for a in archs])

    plan = plan_pruning(arch, imp, ms, target_ms=9.0, multiple=8, lookahead=1)
    assert [s.unit for s in plan.steps] == ["mid:blocks.2"] and plan.predicted_ms_after == 8.5
    far = plan_pruning(arch, imp, ms, target_ms=6.0, multiple=8, lookahead=1)  # out of one step's reach:
    assert far.steps[0].unit == "mid:blocks.1"  # the best ratio goes first
