"""A checkpoint whose weights are NaN (a diverged training) is refused by ``nas.export`` in one line, with
nothing written: NaN compares as no difference at all, so it was reported "verified"."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from nas.builder import build
from nas.space import load_space


def _checkpoint(tmp_path, poison=None):
    arch = load_space("tiny").random(4).with_head(in_chans=1, num_classes=10).with_resolution(16)
    (tmp_path / "arch.json").write_text(json.dumps(arch.to_dict()))
    torch.manual_seed(0)
    state = build(arch).state_dict()
    if poison is not None:
        state = {k: poison(v) if v.is_floating_point() else v for k, v in state.items()}
    torch.save(state, tmp_path / "fp32.ckpt")


def _export(tmp_path, capsys):
    from nas.cli.export import run
    from nas.config import compose_app

    cfg = compose_app("export", [f"arch={tmp_path / 'arch.json'}", f"weights={tmp_path / 'fp32.ckpt'}",
                                 "verify_samples=8", "data=digits", "export.measure=false"])
    try:
        run(cfg)
        code = 0
    except SystemExit as e:
        code = e.code
    cap = capsys.readouterr()
    return code, cap.err, cap.out


@pytest.mark.parametrize("poison", [lambda v: torch.full_like(v, float("nan")),
                                    lambda v: v.clone().index_fill_(0, torch.tensor([0]), float("inf"))],
                         ids=["all-nan", "one-inf-row"])
def test_a_checkpoint_with_nan_weights_is_refused(tmp_path, capsys, poison):
    _checkpoint(tmp_path, poison)
    code, err, out = _export(tmp_path, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {tmp_path / 'fp32.ckpt'}: ") and "NaN or infinite values" in err
    assert "verified" not in out and not list(tmp_path.glob("*.onnx")) and not list(tmp_path.glob("*.card.json"))


def test_outputs_that_are_not_finite_are_refused():
    from nas.export.verify import check_finite_outputs

    ok = np.zeros((3, 10), dtype=np.float32)
    check_finite_outputs(ok, ok, runtime="onnxruntime")
    bad = ok.copy()
    bad[1, 4] = np.nan
    with pytest.raises(ValueError, match=r"the exported model \(onnxruntime\) gives NaN or infinite outputs on 1 of 3"):
        check_finite_outputs(ok, bad, runtime="onnxruntime")
    with pytest.raises(ValueError, match="the torch model gives NaN or infinite outputs on 1 of 3"):
        check_finite_outputs(bad, ok, runtime="onnxruntime")
