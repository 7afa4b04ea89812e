import itertools
from pathlib import Path

import numpy as np
import optuna
import pytest
import yaml

from nas.arch import Arch
from nas.space import SPACES_DIR, SpaceError, list_calibration_spaces, list_spaces, load_space

SHIPPED = list_spaces()
CALIBRATION = list_calibration_spaces()

MINI = {
    "name": "mini",
    "input": {"channels": 1, "resolution": 16},
    "num_classes": 3,
    "channel_multiple": 8,
    "stem": {"width": [8], "kernel": 3, "stride": 2, "act": "relu"},
    "stages": [
        {"kind": "ir", "depth": [1, 2], "width": [8, 16], "kernel": [3, 5], "expansion": [2], "se": [False, True],
         "stride": 2, "act": "relu"},
        {"kind": "attn", "depth": [1], "width": [16], "heads": [1, 2], "mlp_ratio": [2], "stride": 1},
    ],
    "head": {"style": "pool"},
}


def write(tmp_path: Path, cfg: dict, name: str = "space.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return p


def test_shipped_spaces_exist():
    assert {"mbv3", "hybrid", "tiny"} <= set(SHIPPED)
    assert load_space("tiny").resolution == 32
    assert load_space("mbv3").resolution == 224
    hybrid = load_space("hybrid")
    assert hybrid.channel_multiple == 16
    assert any(st.kind == "attn" and len(st.options["heads"]) > 1 for st in hybrid.stages)


def test_load_by_path_and_unknown_name(tmp_path):
    p = write(tmp_path, MINI)
    assert load_space(str(p)).name == "mini"
    with pytest.raises(SpaceError, match="unknown search space 'nope'.*hybrid, mbv3, tiny"):
        load_space("nope")
    with pytest.raises(SpaceError, match="search space file not found"):
        load_space(tmp_path / "missing.yaml")


def _mutate(path: str, value):
    import copy

    cfg = copy.deepcopy(MINI)
    node = cfg
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if k.isdigit() else node[k]
    last = keys[-1]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return cfg


@pytest.mark.parametrize(
    "path, value, expected",
    [
        # a width that is not a multiple of channel_multiple
        ("stages.0.width", [8, 20], "stages[0].width: width 20 is not a multiple of channel_multiple=8"),
        # heads that do not divide the embed dim
        ("stages.1.heads", [3], "stages[1].heads: 3 heads do not divide the embed dim (width) 16"),
        # a head dim that is not a multiple of 8
        ("stages.1.heads", [4], "stages[1].heads: 4 heads on embed dim 16 give head dim 4, not a multiple of 8"),
        # an even or non-positive kernel
        ("stages.0.kernel", [3, 4], "stages[0].kernel: kernel 4 must be a positive odd integer"),
        ("stages.0.kernel", [-3], "stages[0].kernel: kernel -3 must be a positive odd integer"),
        # an unknown block kind
        ("stages.0.kind", "resnet", "stages[0].kind: unknown block kind 'resnet'; allowed: conv, ds, ir, fused, attn"),
        # an empty choice list
        ("stages.0.expansion", [], "stages[0].expansion: empty choice list"),
        # an unknown key
        ("stages.0.kernal", [3], "stages[0]: unknown key 'kernal'"),
        ("widht", 3, "top level: unknown key 'widht'"),
        # and a few more that would otherwise fail later
        ("channel_multiple", 12, "channel_multiple: value 12 must be 8 or 16"),
        ("stages.0.stride", 3, "stages[0].stride: stride 3 must be 1 or 2"),
        ("stages.0.act", "tanh", "stages[0].act: unknown activation 'tanh'"),
        ("stages.0.depth", KeyError, "stages[0]: missing required key 'depth'"),
        # pw_act / noskip belong to depthwise-separable stages and are true or false
        ("stages.0.pw_act", True, "stages[0]: unknown key 'pw_act'"),
    ],
)
def test_invalid_space_messages(tmp_path, path, value, expected):
    p = write(tmp_path, _mutate(path, value), "bad_space.yaml")
    with pytest.raises(SpaceError) as e:
        load_space(p)
    msg = str(e.value)
    assert msg.startswith(str(p)), msg  # names the file
    assert expected in msg, msg  # names the field and the bad value


def test_unparseable_yaml(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("stages: [unclosed\n")
    with pytest.raises(SpaceError, match="broken.yaml: not valid YAML"):
        load_space(p)


def test_size_matches_brute_force(tmp_path):
    space = load_space(write(tmp_path, MINI))
    choices = space.param_choices()
    names = list(choices)
    archs = {space.decode(dict(zip(names, vals))) for vals in itertools.product(*choices.values())}
    assert space.size() == len(archs)
    # and every block key they use is enumerated for profiling, nothing more
    keys = {k for a in archs for k in a.keys()}
    assert set(space.unique_blocks()) == keys


@pytest.mark.parametrize("name", SHIPPED + CALIBRATION)
def test_unique_blocks_cover_samples(name):
    space = load_space(name)
    unique = set(space.unique_blocks())
    rng = np.random.default_rng(0)
    for _ in range(50):
        a = space.random(rng)
        assert set(a.keys()) <= unique
    # at another resolution too (the deployment resolution may differ)
    unique_r = set(space.unique_blocks(resolution=160))
    assert set(space.random(1).keys(resolution=160)) <= unique_r
    assert space.size() > 10**6


def test_unique_blocks_for_other_input_channels_and_classes():
    """A search deploys with the dataset's channels and classes: those stems and heads are
    enumerated too when asked, and nothing else changes."""
    space = load_space("tiny")
    base = set(space.unique_blocks())
    more = set(space.unique_blocks(in_chans=[1, 3], num_classes=[10, 100]))
    assert base < more
    extra = more - base
    assert {k.block.kind for k in extra} == {"conv", "head"}
    assert {k.in_ch for k in extra if k.block.kind == "conv"} == {1}
    assert {k.block.num_classes for k in extra if k.block.kind == "head"} == {100}
    rng = np.random.default_rng(0)
    for _ in range(20):  # a 1-channel, 100-class deployment is covered
        a = space.random(rng).with_head(num_classes=100, in_chans=1)
        assert set(a.keys()) <= more


@pytest.mark.parametrize("name", SHIPPED)
def test_seeded_sampling_is_reproducible(name):
    space = load_space(name)
    assert space.random(7) == space.random(7)
    assert len({space.random(s) for s in range(10)}) > 1


@pytest.mark.parametrize("name", SHIPPED)
def test_optuna_encoding_is_fixed_length(name):
    space = load_space(name)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    archs = []
    for _ in range(8):
        t = study.ask()
        archs.append(space.sample(t))
        study.tell(t, 0.0)
    names = [tuple(sorted(t.params)) for t in study.trials]
    assert len(set(names)) == 1  # same parameters every trial, whatever the depths
    assert set(names[0]) == set(space.param_choices())
    for t, a in zip(study.trials, archs):
        assert space.decode(t.params) == a


def test_decode_baseline_params_and_enqueue():
    space = load_space("tiny")
    params = space.sample_params(3)
    study = optuna.create_study()
    study.enqueue_trial(params)
    t = study.ask()
    assert space.sample(t) == space.decode(params)
    with pytest.raises(SpaceError, match="parameter s0_width=12 is not one of"):
        space.decode({**params, "s0_width": 12})
    with pytest.raises(SpaceError, match="unknown parameter 'bogus'"):
        space.decode({**params, "bogus": 1})
    p2 = dict(params)
    del p2["s1_depth"]
    with pytest.raises(SpaceError, match="missing parameter 's1_depth'"):
        space.decode(p2)


def test_channels_stay_multiples():
    for name in SHIPPED + CALIBRATION:
        space = load_space(name)
        m = space.channel_multiple
        for s in range(20):
            a: Arch = space.random(s)
            for b in a.blocks:
                assert b.out_ch % m == 0
                if hasattr(b, "mid_ch"):
                    assert b.mid_ch % m == 0
                if getattr(b, "se", None) is not None:
                    assert b.se.channels % m == 0


def test_shipped_files_are_in_search_spaces():
    assert all((SPACES_DIR / f"{n}.yaml").is_file() for n in SHIPPED)


def test_calibration_spaces_are_apart_from_the_search_spaces():
    # search_spaces/calibration/ holds spaces nas.profile calibrates on: not listed as search spaces,
    # loaded by their calibration/ name, and unlike the shipped spaces (ReLU(6), depthwise-only, larger)
    assert set(CALIBRATION) == {"calibration/effnetlike", "calibration/lcnetlike", "calibration/mbv2like",
                                "calibration/mbv3smalllike"}
    assert not {n.split("/")[1] for n in CALIBRATION} & set(SHIPPED)
    acts = {st.act for n in CALIBRATION for st in load_space(n).stages}
    assert {"relu", "relu6"} <= acts
    assert all(st.kind == "ds" for st in load_space("calibration/lcnetlike").stages)
    assert load_space("calibration/mbv2like").name == "mbv2like"


def test_effnetlike_reaches_above_the_search_spaces():
    # the calibration covers the large 224-px networks people deploy (EfficientNet-B1 is 0.69 GMACs):
    # effnetlike's seeded networks reach beyond every other shipped space's largest
    from nas.cost import arch_cost
    from nas.latency.profile.profiler import calibration_archs

    def macs(name):
        return [arch_cost(a).macs / 1e9 for a in calibration_archs(load_space(name), 60)]

    eff = macs("calibration/effnetlike")
    others = max(max(macs(n)) for n in [*SHIPPED, "calibration/mbv2like", "calibration/lcnetlike"])
    assert min(eff) > 0.4 and max(eff) > 0.9 > others
    assert all(st.options["se"] == (True,) for st in load_space("calibration/effnetlike").stages)


def test_ds_stage_flags(tmp_path):
    # pw_act / noskip: fixed per ds stage; noskip marks only the blocks whose shapes allow a residual,
    # as from_timm marks PP-LCNet's, so lcnetlike holds every layer of lcnet_100
    from nas._blocks import DSConvBlock
    from nas.timm_arch import arch_from_spec

    cfg = dict(MINI, stages=[{"kind": "ds", "depth": [3], "width": [16], "kernel": [3], "stride": 2,
                              "pw_act": True, "noskip": True}])
    blocks = load_space(write(tmp_path, cfg)).largest().blocks
    assert all(isinstance(b, DSConvBlock) and b.pw_act for b in blocks)
    assert [b.noskip for b in blocks] == [False, True, True]  # the first one strides: no residual to leave out
    plain = load_space(write(tmp_path, dict(MINI, stages=[dict(cfg["stages"][0], pw_act=False, noskip=False)]),
                             "plain.yaml")).largest().blocks
    assert not any(b.pw_act or b.noskip for b in plain)
    with pytest.raises(SpaceError, match=r"stages\[0\]\.noskip: value 'yes' must be true or false"):
        load_space(write(tmp_path, dict(MINI, stages=[dict(cfg["stages"][0], noskip="yes")]), "bad.yaml"))
    lcnet = arch_from_spec("timm:lcnet_100").keys()
    assert set(lcnet) <= set(load_space("calibration/lcnetlike").unique_blocks())


def test_mbv3smalllike_spans_the_small_224px_end():
    # MobileNetV3-Small (0.057 GMACs, hard-swish, SE, its 1024-wide conv after the pool) lies below every
    # search space's 224-px networks; mbv3smalllike's seeded networks span it, with the same head
    from nas.cost import arch_cost
    from nas.latency.profile.profiler import calibration_archs
    from nas.timm_arch import arch_from_spec

    small = [arch_cost(a).macs / 1e9 for a in calibration_archs(load_space("calibration/mbv3smalllike"), 60)]
    mbv3 = min(arch_cost(a).macs / 1e9 for a in calibration_archs(load_space("mbv3"), 60))
    target = arch_from_spec("timm:mobilenetv3_small_100")
    assert min(small) < 0.5 * arch_cost(target).macs / 1e9 < arch_cost(target).macs / 1e9 < max(small) < mbv3
    sp = load_space("calibration/mbv3smalllike")
    assert sp.head_style == target.head.style == "pool_conv" and sp.resolution == 224


@pytest.mark.parametrize("path, value, expected", [
    ("stages.0.depth", [1, 65], "stages[0].depth: depth 65 is more than the limit of 64 blocks in a stage"),
    ("stages.0.depth", [10**12], "stages[0].depth: depth 1000000000000 is more than the limit of 64"),
    ("stages.0.width", list(range(8, 8 * 66, 8)), "stages[0].width: 65 choices, more than the limit of 64"),
    ("stages.0.kernel", list(range(1, 2 * 64, 2)) + [999, 1001],
     "stages[0].kernel: 66 choices, more than the limit of 64"),
    ("stages.0.expansion", list(range(1, 64)), "stages[0]: 2 x 63 x 2 = 252"),  # within the limit: no error
])
def test_a_stage_beyond_the_limits_is_refused(tmp_path, path, value, expected):
    cfg = _mutate(path, value)
    if "252" in expected:
        load_space(write(tmp_path, cfg))
        cfg["stages"][0]["kernel"] = [1, 3, 5, 7, 9]  # 5 x 63 x 2 = 630 combinations: still within
        load_space(write(tmp_path, cfg))
        cfg["stages"][0]["kernel"] = list(range(1, 20, 2))  # 10 x 63 x 2 = 1260
        expected = "stages[0]: 10 x 63 x 2 = 1260 combinations of kernel, expansion, se for a block, more than"
    with pytest.raises(SpaceError) as e:
        load_space(write(tmp_path, cfg))
    assert expected in str(e.value) and "docs/spaces.md" in str(e.value) and "\n" not in str(e.value)


def test_a_space_beyond_the_limits_is_refused(tmp_path):
    stage = MINI["stages"][0]
    cfg = {**MINI, "stages": [dict(stage, depth=[1])] * 33}
    with pytest.raises(SpaceError, match=r"stages: 33 stages, more than the limit of 32"):
        load_space(write(tmp_path, cfg))
    cfg = {**MINI, "stages": [dict(stage, depth=[1, 64], stride=1)] * 5}
    with pytest.raises(SpaceError, match=r"stages: the deepest architecture has 320 blocks, more than the limit of 256"):
        load_space(write(tmp_path, cfg))
    cfg = {**MINI, "stages": [dict(stage, width=[8, 65536], stride=1)]}
    with pytest.raises(SpaceError, match=r"its largest architecture has .* weights, more than the limit of 1e\+09"):
        load_space(write(tmp_path, cfg))


def test_limits_are_checked_before_a_block_slot_is_made(tmp_path, monkeypatch):
    """A space far beyond a limit is refused without one step per depth unit or per block slot."""
    from nas.space import SearchSpace

    def never(*a, **k):
        raise AssertionError("made block slots of a space beyond the limits")

    monkeypatch.setattr(SearchSpace, "_param_choices", never)
    monkeypatch.setattr(SearchSpace, "_make_block", never)
    with pytest.raises(SpaceError, match="depth 1000000000000 is more than the limit"):
        load_space(write(tmp_path, _mutate("stages.0.depth", [1, 10**12])))


def test_extremes_make_only_their_own_blocks(tmp_path, monkeypatch):
    """smallest() / largest() choose and make their own blocks only, not one per block slot of the space."""
    from nas.space import SearchSpace

    stage = dict(MINI["stages"][0], depth=[1, 64], stride=1)
    space = load_space(write(tmp_path, {**MINI, "stages": [stage] * 3}))
    made, decoded = [], []
    make, decode = SearchSpace._make_block, SearchSpace.decode
    monkeypatch.setattr(SearchSpace, "_make_block", lambda self, *a: made.append(1) or make(self, *a))
    monkeypatch.setattr(SearchSpace, "decode", lambda self, params: decoded.append(len(params)) or decode(self, params))
    small = space.smallest()
    assert len(small.blocks) == 3 and len(made) == 3 and decoded == [2 + 3 * 2 + 3 * 3]
    made.clear()
    large = space.largest()
    assert len(made) == 3 * 64
    assert small == decode(space, {n: min(c) for n, c in space.param_choices().items()})
    assert large == decode(space, {n: max(c) for n, c in space.param_choices().items()})
