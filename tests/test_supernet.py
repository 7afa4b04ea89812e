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


def _random_supernet(space):
    torch.manual_seed(0)
    sn = Supernet(space)
    _random_bn_stats(sn.net, 1)
    return sn.eval()


@pytest.fixture(scope="module", params=list_spaces())
def space_supernet(request):
    space = load_space(request.param)
    return space, _random_supernet(space)


@pytest.fixture(scope="module")
def sorted_supernet(space_supernet):
    """The same supernet with its channels sorted by importance: (space, supernet, permutations)."""
    space, _ = space_supernet
    sn = _random_supernet(space)
    return space, sn, sn.sort_channels()


def test_subnet_computes_what_the_supernet_set_to_it_computes(space_supernet, sorted_supernet):
    for sn in (space_supernet[1], sorted_supernet[1]):  # channels in index order, then sorted by importance
        _check_subnets(space_supernet[0], sn)


def _check_subnets(space, sn):
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


def _x(space):
    r = 32 if space.resolution <= 32 else 64
    return torch.randn(2, space.in_chans, r, r, generator=torch.Generator().manual_seed(3))


def test_sorting_channels_leaves_the_largest_architecture_unchanged(space_supernet, sorted_supernet):
    space, sn = space_supernet
    _, ss, perms = sorted_supernet
    assert {d.name.split(":")[0] for d in ss.channel_dims} >= {"mid", "se"}
    assert all(not torch.equal(p, torch.arange(len(p))) for p in perms.values())  # random weights: every dim moved
    x = _x(space)
    with torch.no_grad():
        y, y_sorted = sn.set_arch(sn.largest)(x), ss.set_arch(ss.largest)(x)
        small, small_sorted = sn.set_arch(sn.smallest)(x), ss.set_arch(ss.smallest)(x)
    assert torch.allclose(y, y_sorted, atol=1e-5, rtol=1e-4), (y - y_sorted).abs().max()
    assert not torch.allclose(small, small_sorted, atol=1e-3)  # a narrow subnet now takes other channels


def test_sorted_channels_lead_with_the_most_important(sorted_supernet):
    from nas.supernet.ordering import importance

    space, ss, _ = sorted_supernet
    weights = dict(ss.net.named_parameters())
    for d in ss.channel_dims:
        imp = importance(weights[d.consumer])
        assert (imp[1:] <= imp[:-1]).all(), d.name
    kinds = {"tiny": {"mid", "se"}, "mbv3": {"mid", "se", "hidden"}, "hybrid": {"mid", "se", "mlp", "hidden"}}
    assert {d.name.split(":")[0] for d in ss.channel_dims} == kinds[space.name]
    for m in ss.net.modules():  # the projection conv reads the expanded channels: its L1 norm decreases along them
        if hasattr(m, "conv_pwl") and hasattr(m, "bn1"):
            imp = m.conv_pwl.weight.abs().sum((0, 2, 3))
            assert (imp[1:] <= imp[:-1]).all()


def test_sorting_mid_training_moves_the_optimizer_state_with_the_weights():
    space = load_space("tiny")
    x, y = torch.randn(8, 3, 16, 16, generator=torch.Generator().manual_seed(0)), torch.arange(8) % 10
    nets, opts = [], []
    for _ in range(2):
        torch.manual_seed(0)
        sn = Supernet(space).train()
        nets.append(sn)
        opts.append(torch.optim.AdamW(sn.parameters(), lr=0.01))
    for step in range(2):
        if step == 1:
            nets[1].sort_channels(opts[1])
        for sn, opt in zip(nets, opts):
            opt.zero_grad()
            nn.functional.cross_entropy(sn(x), y).backward()
            opt.step()
    with torch.no_grad():
        a, b = (sn.eval()(x) for sn in nets)
    # float sums in another channel order differ by ~2e-4 here; an optimizer state left behind by ~4e-3
    assert torch.allclose(a, b, atol=1e-3, rtol=0), (a - b).abs().max()


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


def test_a_space_whose_blocks_cannot_share_the_largest_ones_weights_is_refused():
    from nas.space import SearchSpace

    cfg = {"name": "odd", "input": {"channels": 3, "resolution": 32}, "num_classes": 10,
           "stem": {"width": [16], "kernel": 3, "stride": 2},
           "stages": [{"kind": "ir", "depth": [1], "width": [16, 32], "kernel": [3], "expansion": [2], "stride": 2},
                      {"kind": "attn", "depth": [1], "width": [16, 32], "heads": [2], "mlp_ratio": [2], "stride": 1}],
           "head": {"style": "pool"}}
    with pytest.raises(ValueError, match=r"space 'odd' cannot be one supernet: stage 1 \(attn\) from 16 to 32 "
                                         r"channels needs weight proj\.conv\.weight"):
        Supernet(SearchSpace(cfg))


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


# ---- training, checkpoints, resuming ---------------------------------------------------------

DATA = {"name": "digits", "train_samples": 128, "val_samples": 64}


def _settings(**kw):
    from nas.supernet.settings import SupernetSettings

    return SupernetSettings(**{"epochs": 2, "batch_size": 32, "bn_recalibration_batches": 2, **kw})


@pytest.fixture(scope="module")
def digits():
    from nas.data import load_data

    return load_data(DATA)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, digits):
    """A tiny supernet trained for 2 epochs of 4 steps: (checkpoint path, its record)."""
    from nas.supernet.train import train_supernet

    out = tmp_path_factory.mktemp("supernet")
    rec = train_supernet(load_space("tiny"), digits, _settings(), out)
    return out / "supernet.ckpt", rec


def test_training_writes_a_checkpoint_recording_what_it_was_trained_for(trained, digits):
    from nas.supernet.checkpoint import read_checkpoint

    path, rec = trained
    c = read_checkpoint(path)
    assert c["epoch"] == 2 and len(c["history"]) == 2
    assert c["space"]["name"] == "tiny" and c["space"]["digest"] == load_space("tiny").digest()
    assert (c["data"]["name"], c["data"]["in_chans"], c["data"]["num_classes"], c["data"]["resolution"]) == \
        ("digits", 1, 10, digits.resolution)
    assert c["settings"]["random_subnets"] == 2
    assert all(0 <= h["val_accuracy_largest"] <= 1 for h in c["history"])
    assert c["settings"]["sort_channels"]  # the checkpoint holds the sorted weights
    from nas.supernet.ordering import importance

    for d in Supernet(load_space("tiny"), in_chans=1).channel_dims:
        imp = importance(c["model"][d.consumer])
        assert (imp[1:] <= imp[:-1]).all(), d.name
    assert not list(path.parent.glob("*.tmp*"))  # written atomically


def test_an_interrupted_run_resumes_to_the_same_weights(trained, digits, tmp_path):
    from nas.supernet.checkpoint import read_checkpoint
    from nas.supernet.train import train_supernet

    def stop(_rec):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_supernet(load_space("tiny"), digits, _settings(), tmp_path, on_epoch=stop)
    assert read_checkpoint(tmp_path / "supernet.ckpt")["epoch"] == 1
    train_supernet(load_space("tiny"), digits, _settings(), tmp_path)  # the same command again
    done, once = read_checkpoint(tmp_path / "supernet.ckpt"), read_checkpoint(trained[0])
    assert done["epoch"] == 2
    for k, v in once["model"].items():
        assert torch.equal(v, done["model"][k]), k


def test_every_process_samples_the_same_subnets_at_a_step():
    from nas.supernet.train import Dist, SandwichStep

    s = _settings(random_subnets=3)
    a = SandwichStep(Supernet(load_space("tiny")), s, Dist(0, 2))
    b = SandwichStep(Supernet(load_space("tiny")), s, Dist(1, 2))
    assert a.archs(5) == b.archs(5)
    assert a.archs(5)[:2] == [a.sn.largest, a.sn.smallest] and len(a.archs(5)) == 5
    assert a.archs(5) != a.archs(6)


def test_out_holding_another_supernet_is_refused_and_kept(trained, digits, tmp_path):
    import shutil

    from nas.space import SearchSpace
    from nas.supernet.train import train_supernet

    shutil.copy(trained[0], tmp_path / "supernet.ckpt")
    before = (tmp_path / "supernet.ckpt").read_bytes()
    with pytest.raises(ValueError, match=r"holds another supernet \(space: .*use another out= or remove it"):
        cfg = dict(load_space("tiny").config, stem={**load_space("tiny").config["stem"], "width": [8, 16, 24]})
        train_supernet(SearchSpace(cfg, source="other.yaml"), digits, _settings(), tmp_path)
    with pytest.raises(ValueError, match=r"train.random_subnets: 2 in the checkpoint, 1 now.*use another out= or remove it"):
        train_supernet(load_space("tiny"), digits, _settings(random_subnets=1), tmp_path)
    assert (tmp_path / "supernet.ckpt").read_bytes() == before


def test_a_truncated_checkpoint_is_a_one_line_error(trained, tmp_path):
    from nas.supernet.checkpoint import load_supernet, read_checkpoint

    bad = tmp_path / "supernet.ckpt"
    data = trained[0].read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    for fn in (read_checkpoint, load_supernet):
        with pytest.raises(ValueError, match=r"not a readable supernet checkpoint.*damaged or truncated") as e:
            fn(bad)
        assert "\n" not in str(e.value)
    with pytest.raises(FileNotFoundError, match="train one with python -m nas.supernet"):
        read_checkpoint(tmp_path / "nope.ckpt")


# ---- the supernet evaluator ------------------------------------------------------------------


def test_the_evaluator_scores_the_subnet_with_recalibrated_batchnorm(trained, digits):
    from nas.data import adapt_arch
    from nas.fit.loop import accuracy, recalibrate_batchnorm
    from nas.search.evaluate import SupernetEvaluator, make_evaluator
    from nas.supernet.checkpoint import load_supernet

    ev = make_evaluator({"name": "supernet", "checkpoint": str(trained[0]), "bn_recalibration_batches": 2,
                         "batch_size": 32, "device": "cpu"})
    assert isinstance(ev, SupernetEvaluator) and ev.metric == "val_accuracy"
    ev.check(load_space("tiny"), digits)
    arch = adapt_arch(load_space("tiny").random(3), digits)
    res = ev.evaluate(arch, digits, seed=4)
    sn, _ = load_supernet(trained[0])
    assert load_supernet(trained[0])[0] is sn  # loaded once per process
    m = sn.subnet(arch)
    recalibrate_batchnorm(m, digits, batches=2, batch_size=32, generator=torch.Generator().manual_seed(4))
    assert res.score == pytest.approx(accuracy(m.eval(), digits, "val")) and res.metrics["val_images"] == len(digits.val)
    assert accuracy(sn.subnet(arch, digits, batches=2, batch_size=32, seed=4), digits, "val") == res.score
    assert ev.evaluate(arch, digits, seed=4).score == res.score


def test_the_evaluator_refuses_a_supernet_for_another_space_resolution_or_split(trained, digits):
    from nas.data import load_data
    from nas.search.evaluate import make_evaluator

    ev = make_evaluator({"name": "supernet", "checkpoint": str(trained[0])})
    with pytest.raises(ValueError, match=r"trained on space 'tiny'.*uses 'mbv3'.*nas.supernet search_space=mbv3"):
        ev.check(load_space("mbv3"), digits)
    with pytest.raises(ValueError, match=rf"trained at {digits.resolution}px, this run scores at 32px.*"
                                         rf"data.resolution={digits.resolution}"):
        ev.check(load_space("tiny"), load_data({**DATA, "resolution": 32}))
    with pytest.raises(ValueError, match=r"another split of digits \(seed: 0 in the checkpoint, 1 now\)"):
        ev.check(load_space("tiny"), load_data({**DATA, "seed": 1}))
    with pytest.raises(ValueError, match=r"needs the supernet's checkpoint: add supernet="):
        make_evaluator({"name": "supernet"})


def test_nas_train_takes_a_supernet_at_another_resolution_but_not_for_another_space(trained, digits):
    from nas.data import load_data
    from nas.supernet.checkpoint import check_matches, load_supernet

    _, meta = load_supernet(trained[0])
    check_matches(meta, trained[0], space=load_space("tiny"), data=load_data({**DATA, "resolution": 32}),
                  resolution=False)  # nas.train: trains at the deployment resolution
    with pytest.raises(ValueError, match=r"trained on space 'tiny'"):
        check_matches(meta, trained[0], space=load_space("hybrid"), data=digits, resolution=False)


def test_a_search_with_a_mismatched_supernet_stops_at_start_writing_nothing(trained, tmp_path, capsys):
    from nas.cli.search import run
    from nas.config import compose_app

    out = tmp_path / "run"
    cfg = compose_app("search", ["conf=cpu", "search_space=mbv3", "evaluator=supernet", f"supernet={trained[0]}",
                                 f"out={out}", "progress=false"])
    assert cfg.evaluator.checkpoint == str(trained[0])
    with pytest.raises(SystemExit) as e:
        run(cfg, run_dir=out)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: supernet ") and "trained on space 'tiny'" in err and "\n" not in err
    assert not out.exists()


@pytest.mark.gpu
def test_training_and_scoring_on_a_gpu_with_mixed_precision(digits, tmp_path):
    from nas.data import adapt_arch
    from nas.search.evaluate import make_evaluator
    from nas.supernet.train import train_supernet

    rec = train_supernet(load_space("tiny"), digits, _settings(epochs=1, device="cuda", amp=True), tmp_path)
    assert len(rec["history"]) == 1
    ev = make_evaluator({"name": "supernet", "checkpoint": str(tmp_path / "supernet.ckpt"), "device": "cuda"})
    res = ev.evaluate(adapt_arch(load_space("tiny").random(0), digits), digits, seed=0)
    assert 0.0 <= res.score <= 1.0


def test_a_cuda_device_without_cuda_is_a_clear_error(digits, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("has CUDA")
    from nas.supernet.train import train_supernet

    with pytest.raises(ValueError, match="no CUDA device"):
        train_supernet(load_space("tiny"), digits, _settings(device="cuda"), tmp_path)
    assert not (tmp_path / "supernet.ckpt").exists()


# ---- many processes (slow: process start-up) ------------------------------------------------------


_RANK_SCRIPT = """
import os, sys
import torch.distributed as td
from nas.supernet.dist import Dist, check_same_settings

td.init_process_group("gloo")
rank = td.get_rank()
record = {"space": "abc", "settings": {"lr": 0.005 if rank == 0 else 0.01, "epochs": 2}}
try:
    check_same_settings(record, Dist.current())
    msg = "ok"
except ValueError as e:
    msg = str(e)
open(os.path.join(sys.argv[1], f"rank{rank}.txt"), "w").write(msg)
td.destroy_process_group()
"""


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(*args, timeout=300):
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={_free_port()}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.slow
def test_processes_started_with_different_settings_refuse_to_train_naming_the_rank(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(_RANK_SCRIPT)
    r = _torchrun(str(script), str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in (0, 1):
        got = (tmp_path / f"rank{rank}.txt").read_text()
        assert got.startswith("torchrun: rank 1 runs with other settings than rank 0 (settings.lr: 0.005 on rank 0, "
                              "0.01 on rank 1)"), got


@pytest.mark.slow
def test_torchrun_supernet_then_search_with_it_then_train_from_its_weights(tmp_path, capsys):
    """The whole flow: two CPU processes train the supernet, a search scores trials by its inherited
    weights, and nas.train fine-tunes a Pareto network from them."""
    import json

    from nas.cli.search import run as search
    from nas.cli.train import run as train
    from nas.config import compose_app
    from nas.supernet.checkpoint import load_supernet

    out = tmp_path / "sn"
    r = _torchrun("-m", "nas.supernet", "data.train_samples=128", "data.val_samples=64", "epochs=1",
                  "train.batch_size=32", f"out={out}")
    assert r.returncode == 0, r.stdout + r.stderr
    rec = json.loads((out / "supernet.json").read_text())
    assert rec["world_size"] == 2 and len(rec["history"]) == 1
    assert r.stdout.count("supernet epoch 1/1") == 1  # process 0 reports, the other trains
    ckpt = out / "supernet.ckpt"
    assert load_supernet(ckpt)[1]["settings"]["batch_size"] == 32

    run_dir = tmp_path / "search"
    summary = search(compose_app("search", ["conf=cpu", "evaluator=supernet", f"supernet={ckpt}", "n_trials=4",
                                            "data.train_samples=128", "data.val_samples=64", "progress=false",
                                            f"out={run_dir}"]), run_dir=run_dir)
    assert summary["statuses"].get("evaluated", 0) >= 1
    pareto = json.loads((run_dir / "pareto.json").read_text())
    assert pareto["search"]["evaluator"]["name"] == "supernet"

    report = train(compose_app("train", ["conf=cpu", f"run={run_dir}", f"supernet={ckpt}", "select=0", "epochs=1",
                                         "train_samples=128", "prune.enabled=false", "qat.enabled=false",
                                         "export.measure=false", f"out={tmp_path / 'train'}"]))
    assert report["settings"]["supernet"] == str(ckpt)
    from nas.fit.checkpoint import load_checkpoint

    c = load_checkpoint(next((tmp_path / "train").glob("*/fp32.ckpt")))
    assert c["epoch"] == 1 and c["meta"]["init"]["supernet"] == load_space("tiny").digest()  # fine-tuned from it
