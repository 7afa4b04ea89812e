import json

import pytest

from nas.arch import (
    SE,
    Arch,
    AttentionBlock,
    BlockKey,
    ConvBlock,
    DSConvBlock,
    FusedMBConvBlock,
    Head,
    MBConvBlock,
    block_from_dict,
    block_kinds,
    register_block,
)


def every_kind_arch() -> Arch:
    return Arch(
        3, 64, ConvBlock(16, 3, 2, "hard_swish"),
        (
            DSConvBlock(16, 3, 1, "relu", SE(8, "hard_sigmoid", "relu")),
            DSConvBlock(24, 3, 2, "hard_swish", pw_act=True, noskip=True),
            MBConvBlock(24, 64, 5, 1, "hard_swish", SE(16, "hard_sigmoid", "relu")),
            FusedMBConvBlock(32, 96, 3, 2, "swish"),
            ConvBlock(32, 3, 1, "relu6", skip=True),
            AttentionBlock(48, 4, 2.0, stride=2),
            AttentionBlock(48, 2, 3.0),
        ),
        Head(10, 128, "pool_conv", "hard_swish"),
        name="every-kind",
    )


def test_round_trip_every_kind():
    a = every_kind_arch()
    b = Arch.from_json(a.to_json())
    assert a == b and hash(a) == hash(b) and b.name == "every-kind"
    assert json.loads(a.to_json()) == b.to_dict()
    for k in a.keys():
        assert BlockKey.from_dict(json.loads(json.dumps(k.to_dict()))) == k


def test_key_digest_is_stable():
    # a changed digest means every latency table keyed on it is invalidated: change deliberately
    a = every_kind_arch()
    assert a.digest() == Arch.from_dict(a.to_dict()).digest()
    assert a.keys()[0].digest() == "84324b997f5ea600"
    assert a.digest() == "9a0953e0891dd922"
    assert a.digest() != a.with_resolution(32).digest()


def test_shapes_follow_from_spec():
    a = every_kind_arch()
    shapes = [k.in_shape for k in a.keys()]
    assert shapes[0] == (3, 64, 64)
    assert shapes[1] == (16, 32, 32)
    assert shapes[3] == (24, 16, 16)  # after the stride-2 ds block
    assert a.keys()[-1].out_shape == (10, 1, 1)
    assert a.feature_channels == 48
    assert a.with_resolution(33).keys()[1].in_shape == (16, 17, 17)


def test_labels_are_readable():
    a = every_kind_arch()
    assert str(a.blocks[2]) == "ir_k5_s1_m64_c24_se16_hs"
    assert str(a.blocks[5]) == "attn_c48_h4_r2_s2_ge"
    assert str(a.keys()[1]) == "ds_k3_s1_c16_se8_re@16x32x32"


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: MBConvBlock(24, 64, 4), "kernel must be a positive odd integer, got 4"),
        (lambda: MBConvBlock(24, 64, -3), "kernel must be a positive odd integer, got -3"),
        (lambda: ConvBlock(16, 3, 3), "stride must be 1 or 2, got 3"),
        (lambda: DSConvBlock(16, act="tanh"), "act must be one of relu, relu6, hard_swish, swish, gelu, got 'tanh'"),
        (lambda: AttentionBlock(48, heads=5), "heads=5 must divide the embed dim out_ch=48"),
        (lambda: MBConvBlock(0, 64), "out_ch must be a positive integer, got 0"),
        (lambda: SE(8, gate="relu"), "SE.gate must be one of sigmoid, hard_sigmoid"),
        (lambda: Head(10, 0, "conv_pool"), "hidden must be 0 exactly when style is 'pool'"),
        (lambda: Head(10, 64, "fancy"), "Head.style must be one of conv_pool, pool_conv, pool"),
    ],
)
def test_invalid_blocks(make, match):
    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_from_dict_errors():
    with pytest.raises(ValueError, match="unknown block kind 'mystery'; valid kinds: attn, conv, ds, fused, head, ir"):
        block_from_dict({"kind": "mystery"})
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['kernal'\]"):
        block_from_dict({"kind": "ir", "out_ch": 16, "mid_ch": 32, "kernal": 3})
    d = every_kind_arch().to_dict()
    d["extra"] = 1
    with pytest.raises(ValueError, match=r"Arch: unknown key\(s\) \['extra'\]"):
        Arch.from_dict(d)
    with pytest.raises(ValueError, match="not valid JSON"):
        Arch.from_json("{oops")


def test_registry_rejects_duplicates():
    assert block_kinds() == ["attn", "conv", "ds", "fused", "head", "ir"]
    with pytest.raises(ValueError, match="already registered"):
        register_block("ir")(type("X", (), {}))


def test_bad_resolution_is_an_error():
    with pytest.raises(ValueError, match="Arch.resolution must be a positive integer, got 0"):
        every_kind_arch().with_resolution(0)


def test_save_load(tmp_path):
    a = every_kind_arch()
    a.save(tmp_path / "a.json")
    assert Arch.load(tmp_path / "a.json") == a
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="bad.json: an Arch must be a mapping"):
        Arch.load(tmp_path / "bad.json")
    with pytest.raises(FileNotFoundError, match="Arch file not found"):
        Arch.load(tmp_path / "missing.json")
