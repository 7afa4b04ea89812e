"""nas.train and nas.export end to end on digits: a real (zero-cost) search run, tiny epochs.

Latency is predicted by the labelled roofline estimate (``conf.table=null``), so pruning plans do
not depend on which tables this machine has; the pipeline's mechanics are exercised with pruning
allowed on that estimate and at any accuracy cost (``PRUNE_ANYWAY``), and the rules that forbid
both by default are tested on their own.
"""

import json
import sys

import forked
import pytest
import torch

from nas.config import compose_app

torch.set_num_threads(1)

PRUNE_ANYWAY = ["prune.on_estimate=true", "prune.max_drop=100", "prune.min_gain=0"]
FAST = ["conf.table=null", *PRUNE_ANYWAY, "epochs=2", "prune.epochs=1", "prune.ratio=0.9", "qat.epochs=1",
        "qat.calib_batches=2",
        "train.batch_size=64", "export.rounds=1", "export.warmup=1", "export.repeats=5", "export.min_time_s=0",
        "export.calib_samples=32"]


def run(mod, *args, cwd):
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1"}
    return forked.run([sys.executable, "-m", mod, *args], cwd=cwd, timeout=900, env=env)


@pytest.fixture(scope="module")
def trained(search_run):
    """``nas.train`` on the search run (half a minute): every test using it is in the slow set, so that a
    CI run of both sets pays for it once."""
    r = run("nas.train", "conf=cpu", f"run={search_run}", "select=0", *FAST, cwd=search_run)
    assert r.returncode == 0, r.stderr
    return search_run / "train", r


def _compose(app, overrides):
    return compose_app(app, overrides)


def _run_in_process(app, overrides, capsys):
    """The entry point's ``run`` on a composed config; returns (exit code, stderr, stdout)."""
    mod = __import__(f"nas.cli.{app}", fromlist=["run"])
    cfg = _compose(app, overrides)
    try:
        mod.run(cfg)
        code = 0
    except SystemExit as e:
        code = e.code
    cap = capsys.readouterr()
    return code, cap.err, cap.out


@pytest.mark.slow
def test_train_cli_writes_checkpoints_exports_and_report(trained):
    from nas.target import load_target, runs_here

    out, r = trained
    rep = json.loads((out / "report.json").read_text())
    assert rep["schema"] == "hwnas.train_report" and len(rep["models"]) == 1
    m = rep["models"][0]
    mdir = out / m["id"]
    for f in ("arch.json", "fp32.ckpt", "pruned.ckpt", "qat.ckpt", "prune_plan.json", "pruned_arch.json", "results.json"):
        assert (mdir / f).is_file(), f
    ck = torch.load(mdir / "fp32.ckpt", weights_only=True)
    assert ck["epoch"] == 2 and len(ck["history"]) == 2
    v = {x["variant"]: x for x in m["variants"]}
    assert set(v) == {"fp32", "pruned", "ptq_int8", "qat_int8"}
    for x in v.values():
        assert 0.0 <= x["accuracy"] <= 1.0 and x["accuracy_split"] == "val"
        assert (mdir / "export" / f"{x['variant']}.onnx").stat().st_size == x["file_bytes"]
        assert x["predicted"]["source"] in ("measured", "estimated")
        assert (x["measured"] is not None) == runs_here(load_target("cpu"))
    assert v["pruned"]["params"] < v["fp32"]["params"] and v["qat_int8"]["params"] == v["pruned"]["params"]
    assert v["fp32"]["predicted"]["source"] == "estimated"  # conf.table=null: the labelled roofline
    plan = json.loads((mdir / "prune_plan.json").read_text())
    assert plan["reached"] and plan["predicted_ms_after"] <= 0.9 * plan["predicted_ms_before"] + 1e-12
    assert plan["criterion"] == "loss"  # the default
    assert v["fp32"]["accuracy"] > 0.3  # 2 epochs on digits learn something (chance is 0.1)
    md = (out / "report.md").read_text()
    assert "| model | variant | acc %" in md and "qat_int8" in md and "quantize_static" in md
    d = rep["deploy"][m["id"]]
    assert d["variant"] in v and v[d["variant"]]["accuracy"] >= v["fp32"]["accuracy"] - 0.01
    assert f"- {m['id']}: **{d['variant']}**" in md
    assert "predicted ms" in r.stdout and "report:" in r.stdout


@pytest.mark.slow  # the trained fixture's run: once, in the slow set
def test_rerun_resumes_without_redoing_work(trained, search_run, capsys):
    out, _ = trained
    mdir = next(p for p in out.iterdir() if p.is_dir())
    before = {p.name: p.stat().st_mtime_ns for p in mdir.rglob("*") if p.is_file()}
    report = json.loads((out / "report.json").read_text())
    code, err, _ = _run_in_process("train", ["conf=cpu", f"run={search_run}", "select=0", *FAST], capsys)
    assert code == 0, err
    after = {p.name: p.stat().st_mtime_ns for p in mdir.rglob("*") if p.is_file()}
    for f in ("fp32.ckpt", "pruned.ckpt", "qat.ckpt", "prune_plan.json", "qat_int8.onnx"):
        assert after[f] == before[f], f
    assert json.loads((out / "report.json").read_text())["models"] == report["models"]
    # changed settings are refused, naming the difference
    code, err, _ = _run_in_process("train", ["conf=cpu", f"run={search_run}", "select=0", *FAST, "train.lr=0.01"],
                                capsys)
    assert code == 2 and "resuming with other settings" in err and "lr" in err


def test_interrupted_fit_resumes_to_the_same_weights(tmp_path):
    from nas.builder import build
    from nas.data import DataSettings, load_data
    from nas.fit.checkpoint import load_checkpoint
    from nas.fit.loop import fit
    from nas.fit.settings import FitSettings
    from nas.space import load_space

    data = load_data(DataSettings(name="digits", resolution=16, train_samples=256, val_samples=64))
    arch = load_space("tiny").random(4).with_head(in_chans=1).with_resolution(16)
    s = FitSettings(batch_size=64, bn_recalibration_batches=2)
    kw = dict(settings=s, epochs=3, lr=0.005, seed=3, meta={"x": 1})
    torch.manual_seed(0)
    a = build(arch)
    fit(a, data, ckpt=tmp_path / "a.ckpt", **kw)

    def stop_at_2(model, epoch):
        if epoch == 2:
            raise KeyboardInterrupt

    torch.manual_seed(0)
    b = build(arch)
    with pytest.raises(KeyboardInterrupt):
        fit(b, data, ckpt=tmp_path / "b.ckpt", on_epoch_start=stop_at_2, **kw)
    assert load_checkpoint(tmp_path / "b.ckpt")["epoch"] == 2
    torch.manual_seed(123)  # a fresh process would build other initial weights: the checkpoint decides
    c = build(arch)
    hist = fit(c, data, ckpt=tmp_path / "b.ckpt", **kw)
    assert len(hist) == 3
    for (k, va), vc in zip(a.state_dict().items(), c.state_dict().values()):
        torch.testing.assert_close(vc, va, rtol=0, atol=0, msg=k)
    with pytest.raises(ValueError, match="resuming with other settings.*lr"):
        fit(build(arch), data, ckpt=tmp_path / "b.ckpt", **{**kw, "lr": 0.01})


def test_run_dir_without_search_result(tmp_path, capsys):
    code, err, _ = _run_in_process("train", ["conf=cpu", f"run={tmp_path}", *FAST], capsys)
    assert code == 2 and "no pareto.json" in err
    assert list(tmp_path.iterdir()) == []  # nothing written
    (tmp_path / "pareto.json").write_text('{"schema": "something else"}')
    code, err, _ = _run_in_process("train", ["conf=cpu", f"run={tmp_path}", *FAST], capsys)
    assert code == 2 and "not an hwnas search result" in err
    code, err, _ = _run_in_process("train", ["conf=cpu", f"run={tmp_path / 'nope'}", *FAST], capsys)
    assert code == 2 and "no such folder" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pareto.json"]


def test_select_errors(search_run, capsys):
    code, err, _ = _run_in_process("train", ["conf=cpu", f"run={search_run}", "select=[99]", *FAST], capsys)
    assert code == 2 and "index 99 is out of range" in err
    code, err, _ = _run_in_process("train", ["conf=cpu", f"run={search_run}", "latency_budget_ms=1e-9", *FAST], capsys)
    assert code == 2 and "latency_budget_ms=1e-09: no selected architecture is predicted that fast" in err
    with pytest.warns(FutureWarning, match=r"max_ms= is now latency_budget_ms="):
        code, err, _ = _run_in_process("train", ["conf=cpu", f"run={search_run}", "max_ms=1e-9", *FAST], capsys)
    assert code == 2 and "no selected architecture is predicted that fast" in err
    code, err, _ = _run_in_process("train", ["conf=cpu", f"run={search_run}", "prune.criterion=random", *FAST], capsys)
    assert code == 2 and "prune.criterion must be one of l1, bn, taylor, loss" in err


def _onnx_input(path):
    import onnx

    return [d.dim_value for d in onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim]


@pytest.mark.slow  # the trained fixture's run: once, in the slow set
def test_export_defaults_to_the_checkpoints_target_and_agrees_with_train(trained, tmp_path, capsys):
    """Each checkpoint records the target it was made for (QAT: the int8 one); nas.export exports for
    it without conf= and names the precision's target as nas.train's card does; a QAT graph of
    onnxruntime's int8 form predicted for TensorRT's is refused in one line (allow_mismatch: a warning)."""
    out, _ = trained
    mdir = next(p for p in out.iterdir() if p.is_dir())
    assert torch.load(mdir / "fp32.ckpt", weights_only=True)["target"]["name"] == "cpu"
    assert torch.load(mdir / "qat.ckpt", weights_only=True)["target"]["name"] == "cpu_int8"
    train_card = json.loads((mdir / "export" / "qat_int8.card.json").read_text())
    quick = ["verify_samples=20", "export.measure=false", "export.calib_samples=16"]
    dst = tmp_path / "q.onnx"
    code, err, stdout = _run_in_process("export", [f"weights={mdir / 'qat.ckpt'}", "precision=int8", f"out={dst}",
                                                   *quick], capsys)
    assert code == 0, err
    assert "target:    cpu_int8 (the checkpoint's; conf=<target> for another)" in stdout
    card = json.loads(dst.with_name("q.card.json").read_text())
    assert card["made_for"] == train_card["made_for"] and card["made_for"]["target"] == "cpu_int8"
    code, err, stdout = _run_in_process("export", ["conf=cpu", f"weights={mdir / 'fp32.ckpt'}", "precision=int8",
                                                   f"out={tmp_path / 'p.onnx'}", *quick], capsys)
    assert code == 0, err  # conf=cpu, int8: made for cpu_int8, as nas.train's ptq_int8 card says
    ptq = json.loads((mdir / "export" / "ptq_int8.card.json").read_text())
    assert json.loads((tmp_path / "p.card.json").read_text())["made_for"] == ptq["made_for"]
    args = ["conf=jetson_int8", f"weights={mdir / 'qat.ckpt'}", "precision=int8", f"out={tmp_path / 'j.onnx'}", *quick]
    code, err, _ = _run_in_process("export", args, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert ("was quantized in onnxruntime's CPU int8 form (u8 activations, s8 weights), but target 'jetson_int8' "
            "(tensorrt) runs TensorRT's int8 form (symmetric, zero point 0)") in err
    assert "export it for conf=cpu_int8, the target it was trained for" in err and not (tmp_path / "j.onnx").exists()
    code, err, stdout = _run_in_process("export", [*args, "allow_mismatch=true"], capsys)
    assert code == 0 and "WARNING: " in stdout and "(allow_mismatch)" in stdout
    assert "int8_form_mismatch" in json.loads((tmp_path / "j.json").read_text())


@pytest.mark.slow  # the trained fixture's run: once, in the slow set
def test_exports_are_the_searched_networks(trained, search_run):
    """The search predicts latency at the target's deployment resolution (the tiny space's 32 px) while
    it scores digits at 16 px: nas.train trains and exports at 32 px, so the fp32 file is the very
    network of the front (same Arch digest) and every file takes the searched input shape."""
    out, _ = trained
    entry = json.loads((search_run / "pareto.json").read_text())["pareto"][0]
    a = entry["arch"]
    searched = [1, a["in_chans"], a["resolution"], a["resolution"]]
    assert searched == [1, 1, 32, 32]  # the fixture's search: digits at 16 px, deployed at 32 px
    rep = json.loads((out / "report.json").read_text())
    assert rep["resolution"] == {"searched": 32, "exported": 32}
    m = rep["models"][0]
    assert m["id"].endswith(entry["digest"][:8]) and m["input"]["as_searched"]
    assert m["input"]["shape"] == m["input"]["searched_shape"] == searched
    assert m["input"]["searched_ms"] == entry["latency_ms"]
    for v in m["variants"]:
        assert v["input_shape"] == searched and _onnx_input(v["onnx"]) == searched, v["variant"]
    fp32 = next(v for v in m["variants"] if v["variant"] == "fp32")
    from nas.arch import Arch

    assert Arch.from_dict(fp32["arch"]).digest() == entry["digest"]
    assert fp32["predicted"]["ms"] == pytest.approx(entry["latency_ms"])  # same estimate, same network
    ck = torch.load(out / m["id"] / "fp32.ckpt", weights_only=True)
    assert ck["meta"]["data"]["resolution"] == 32
    md = (out / "report.md").read_text()
    assert f"- {m['id']}: input 1x1x32x32; the fp32 file is the network the search scored: the front's " \
           f"{entry['latency_ms']:.4f} ms ({entry['latency_how']}, not measured on target `cpu`'s device) is for this " \
           "input" in md  # conf.table=null: an estimate, said so


def test_another_resolution_reports_both_latencies(search_run, tmp_path):
    """resolution=16 (the dataset's: faster training) exports at 16 px; the report says the files are
    not the searched 32-px networks and gives both latencies, the front's and the fp32 file's."""
    from nas.target import load_target
    from nas.train.pipeline import train_front
    from nas.train.settings import PipelineSettings

    s = PipelineSettings(run=str(search_run), target=load_target("cpu").replace(table=None), out=str(tmp_path),
                         select=0, resolution=16, train_samples=128,
                         train={"epochs": 1, "batch_size": 64, "bn_recalibration_batches": 1},
                         prune={"enabled": False}, qat={"enabled": False},
                         export={"measure": False, "calib_samples": 16, "eval_samples": 32})
    rep = train_front(s)
    entry = json.loads((search_run / "pareto.json").read_text())["pareto"][0]
    m = rep["models"][0]
    assert rep["resolution"] == {"searched": 32, "exported": 16}
    assert m["input"]["shape"] == [1, 1, 16, 16] and m["input"]["searched_shape"] == [1, 1, 32, 32]
    assert not m["input"]["as_searched"]
    for v in m["variants"]:
        assert v["input_shape"] == _onnx_input(v["onnx"]) == [1, 1, 16, 16]
    fp32 = next(v for v in m["variants"] if v["variant"] == "fp32")
    assert fp32["predicted"]["ms"] < entry["latency_ms"]  # a quarter of the pixels
    assert fp32["accuracy_images"] == fp32["accuracy_ci95"]["n"] == 32 and rep["accuracy_uncertainty"]["seeds"] == [0]
    md = (tmp_path / "report.md").read_text()
    assert f"- {m['id']}: input 1x1x16x16, NOT the searched 1x1x32x32: the front's {entry['latency_ms']:.4f} ms " \
           f"({entry['latency_how']}, not measured on target `cpu`'s device) is for 1x1x32x32; the files have the " \
           f"latency of 1x1x16x16 (fp32 file: {fp32['predicted']['ms']:.4f} ms predicted)" in md
    with pytest.raises(ValueError, match="resolution must be a positive integer, got 0"):
        PipelineSettings(run=str(search_run), target=load_target("cpu"), resolution=0)


@pytest.mark.slow
def test_export_takes_every_arch_file_train_writes(trained, tmp_path, capsys):
    """Each checkpoint nas.train writes exports with an Arch file beside it, unedited, or with none
    (the checkpoint's own Arch), at the searched input shape."""
    out, _ = trained
    mdir = next(p for p in out.iterdir() if p.is_dir())
    cases = [("arch.json", "fp32.ckpt", "fp32"), ("arch.json", "fp32.ckpt", "int8"),
             ("pruned_arch.json", "qat.ckpt", "int8"), ("export/qat_int8.json", "qat.ckpt", "int8"),
             (None, "pruned.ckpt", "fp32")]  # prune_plan.json, results.json, YAML: test_load_arch_file_...
    for i, (arch, ckpt, prec) in enumerate(cases):
        dst = tmp_path / f"{i}.{prec}.onnx"
        args = ["conf=cpu", "conf.table=null", f"weights={mdir / ckpt}", f"precision={prec}", f"out={dst}",
                "verify_samples=50", "export.calib_samples=32", "export.rounds=1", "export.repeats=5",
                "export.min_time_s=0"]
        args += [f"arch={mdir / arch}"] if arch else []
        if i == 0:  # the command line once; the other cases in process (same code path, no start-up cost)
            r = run("nas.export", *args, cwd=tmp_path)
            assert r.returncode == 0, r.stderr
            stdout = r.stdout
        else:
            code, err, stdout = _run_in_process("export", args, capsys)
            assert code == 0, (arch, ckpt, err)
        rec = json.loads(dst.with_suffix(".json").read_text())
        assert rec["file_bytes"] == dst.stat().st_size and rec["verify"]["samples"] == 50
        assert rec["input_shape"] == _onnx_input(dst) == [1, 1, 32, 32] and "input 1x1x32x32" in stdout
        if prec == "fp32":
            assert rec["verify"]["max_abs_diff"] < 1e-4 and "max |onnxruntime - torch|" in stdout
            assert "predicted:" in stdout and rec["predicted"]["ms"] > 0
        else:
            assert rec["verify"]["top1_agreement"] >= 0.9 and "top-1 agreement" in stdout


@pytest.mark.slow  # the trained fixture's run: once, in the slow set
def test_export_bad_input_overwrites_nothing(trained, tmp_path, capsys):
    from nas.space import load_space

    out, _ = trained
    mdir = next(p for p in out.iterdir() if p.is_dir())
    dst = tmp_path / "model.onnx"
    dst.write_bytes(b"keep me")
    base = ["conf=cpu", "conf.table=null", f"arch={mdir / 'arch.json'}", f"out={dst}"]
    # a checkpoint that does not match the Arch
    other = load_space("tiny").random(9).with_head(in_chans=1).with_resolution(16)
    from nas.builder import build

    torch.save(build(other).state_dict(), tmp_path / "other.pt")
    code, err, _ = _run_in_process("export", [*base, f"weights={tmp_path / 'other.pt'}", "overwrite=true"], capsys)
    assert code == 2 and "does not match the Arch" in err
    # an unsupported precision
    code, err, _ = _run_in_process("export", [*base, f"weights={mdir / 'fp32.ckpt'}", "precision=fp16",
                                           "overwrite=true"], capsys)
    assert code == 2 and "precision must be one of fp32, int8, got 'fp16'" in err
    # an existing output without overwrite
    code, err, _ = _run_in_process("export", [*base, f"weights={mdir / 'fp32.ckpt'}"], capsys)
    assert code == 2 and "exists; pass overwrite=true" in err
    # a QAT checkpoint asked for fp32
    code, err, _ = _run_in_process("export", ["conf=cpu", "conf.table=null", f"arch={mdir / 'pruned_arch.json'}",
                                           f"out={dst}", f"weights={mdir / 'qat.ckpt'}", "overwrite=true"], capsys)
    assert code == 2 and "QAT (int8) checkpoint" in err
    # the unpruned Arch for the pruned checkpoint: the difference is named
    code, err, _ = _run_in_process("export", [*base, f"weights={mdir / 'pruned.ckpt'}", "overwrite=true"], capsys)
    assert code == 2 and "trained for another Arch" in err and "in the checkpoint" in err
    # a bare state dict records no Arch: arch= is needed
    code, err, _ = _run_in_process("export", ["conf=cpu", "conf.table=null", f"out={dst}", "overwrite=true",
                                              f"weights={tmp_path / 'other.pt'}"], capsys)
    assert code == 2 and "records no Arch: give arch=" in err
    # a file that holds no Arch
    (tmp_path / "notes.json").write_text('{"hello": 1}')
    code, err, _ = _run_in_process("export", ["conf=cpu", "conf.table=null", f"arch={tmp_path / 'notes.json'}",
                                              f"out={dst}", f"weights={mdir / 'fp32.ckpt'}", "overwrite=true"], capsys)
    assert code == 2 and "neither an Arch nor a record holding one" in err and "pruned_arch.json" in err
    assert dst.read_bytes() == b"keep me" and not dst.with_suffix(".json").exists()


@pytest.mark.parametrize("criterion", ["loss", "l1"])
def test_each_criterion_prunes_through_the_pipeline(search_run, tmp_path, capsys, criterion):
    """Deeper than the default test's 0.9: the plan's steps carry their costs (measured loss changes
    for loss), the pruned network is exported and its plan reloads; bad settings are named."""
    out = tmp_path / criterion
    code, err, _ = _run_in_process("train", ["conf=cpu", f"run={search_run}", "select=0", f"out={out}", *FAST,
                                             "prune.ratio=0.6", f"prune.criterion={criterion}", "train_samples=512",
                                             "prune.loss_samples=64", "qat.enabled=false"], capsys)
    assert code == 0, err
    (mdir,) = [p for p in out.iterdir() if p.is_dir()]
    plan = json.loads((mdir / "prune_plan.json").read_text())
    assert plan["criterion"] == criterion and plan["steps"]
    assert all(s["importance_removed"] >= 0 for s in plan["steps"])
    if criterion == "l1":
        assert not plan["dropped_se"] and not plan["dropped_blocks"]
    assert (mdir / "export" / "pruned.onnx").is_file()
    from nas.arch import Arch
    from nas.compress.prune_plan import PrunePlan

    p = PrunePlan.from_dict(plan)
    assert p.arch == Arch.from_dict(json.loads((mdir / "results.json").read_text())["prune"]["arch"])
    code, err, _ = _run_in_process("train", ["conf=cpu", f"run={search_run}", "prune.loss_samples=0", *FAST], capsys)
    assert code == 2 and "prune.loss_samples" in err


def test_distillation_follows_the_teacher(tmp_path, capsys, search_run):
    """distill=1: the labels do not enter the loss, the student learns the teacher's answers (here a
    teacher that answers something else than the labels); the KD settings are part of the
    checkpoint's meta; bad weights are named."""
    from nas.builder import build
    from nas.data import DataSettings, load_data
    from nas.fit.loop import fit
    from nas.fit.settings import FitSettings
    from nas.space import load_space

    data = load_data(DataSettings(name="digits", resolution=16, train_samples=512, val_samples=64))
    arch = load_space("tiny").random(4).with_head(in_chans=1).with_resolution(16)
    torch.manual_seed(7)
    teacher = build(load_space("tiny").random(9).with_head(in_chans=1).with_resolution(16)).eval()
    s = FitSettings(batch_size=64, bn_recalibration_batches=2)
    kw = dict(settings=s, epochs=4, lr=0.01, seed=3, meta={"x": 1})
    x = next(iter(data.batches("val", batch_size=64)))[0]

    def agreement(m):
        with torch.no_grad():
            return float((m.eval()(x).argmax(1) == teacher(x).argmax(1)).float().mean())

    torch.manual_seed(0)
    plain = build(arch)
    fit(plain, data, ckpt=tmp_path / "plain.ckpt", **kw)
    torch.manual_seed(0)
    student = build(arch)
    fit(student, data, ckpt=tmp_path / "kd.ckpt", teacher=teacher, distill=1.0, **kw)
    a_kd, a_plain = agreement(student), agreement(plain)
    assert a_kd > a_plain + 0.2
    with pytest.raises(ValueError, match="resuming with other settings.*distill"):
        fit(build(arch), data, ckpt=tmp_path / "kd.ckpt", teacher=teacher, distill=0.5, **kw)
    with pytest.raises(ValueError, match="distill > 0 needs a teacher"):
        fit(build(arch), data, ckpt=tmp_path / "x.ckpt", distill=0.5, **kw)
    with pytest.raises(ValueError, match="distill must be in"):
        fit(build(arch), data, ckpt=tmp_path / "x.ckpt", teacher=teacher, distill=1.5, **kw)
    code, err, _ = _run_in_process("train", ["conf=cpu", f"run={search_run}", "qat.distill=2", *FAST], capsys)
    assert code == 2 and "qat.distill must be a weight in [0, 1]" in err


def test_load_arch_file_reads_arch_and_records(tmp_path):
    """An Arch as JSON or YAML, or a record holding one under 'arch'; anything else named."""
    import yaml

    from nas.fit.checkpoint import load_arch_file
    from nas.space import load_space

    arch = load_space("tiny").random(3).with_head(in_chans=1).with_resolution(32)
    (tmp_path / "a.json").write_text(arch.to_json())
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(arch.to_dict()))
    (tmp_path / "plan.json").write_text(json.dumps({"original": {}, "arch": arch.to_dict(), "steps": []}))
    for f in ("a.json", "a.yaml", "plan.json"):
        assert load_arch_file(tmp_path / f) == arch, f
    (tmp_path / "bad.yaml").write_text("a: [")
    with pytest.raises(ValueError, match="bad.yaml: not valid YAML"):
        load_arch_file(tmp_path / "bad.yaml")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="neither an Arch nor a record holding one under 'arch' \\(found list\\)"):
        load_arch_file(tmp_path / "list.json")
    (tmp_path / "broken.json").write_text(json.dumps({**arch.to_dict(), "extra": 1}))
    with pytest.raises(ValueError, match="broken.json: Arch: unknown key"):
        load_arch_file(tmp_path / "broken.json")
    with pytest.raises(FileNotFoundError, match="no such file; give one of arch.json, pruned_arch.json"):
        load_arch_file(tmp_path / "nope.json")


def test_a_front_without_deployment_resolution_needs_one(tmp_path):
    """An older pareto.json without search.deploy_resolution: the front's Arch resolution is the
    deployed one; a front mixing resolutions is refused unless resolution= names one."""
    from nas.space import load_space
    from nas.target import load_target
    from nas.train.pipeline import _resolution
    from nas.train.search_run import load_search_run
    from nas.train.settings import PipelineSettings

    arch = load_space("tiny").random(1).with_head(in_chans=1)
    doc = {"schema": "hwnas.pareto", "search": {"data": {"name": "digits"}},
           "pareto": [{"arch": arch.with_resolution(32).to_dict(), "latency_ms": 0.1}]}
    (tmp_path / "pareto.json").write_text(json.dumps(doc))
    run = load_search_run(tmp_path)
    assert run.resolution == 32 and run.searched_shape(0) == [1, 1, 32, 32]
    doc["pareto"].append({"arch": arch.with_resolution(24).to_dict(), "latency_ms": 0.2})
    (tmp_path / "pareto.json").write_text(json.dumps(doc))
    run = load_search_run(tmp_path)
    assert run.resolution is None
    with pytest.raises(ValueError, match="records no deployment resolution.*resolution=<px>"):
        _resolution(run, PipelineSettings(run=str(tmp_path), target=load_target("cpu")))
    assert _resolution(run, PipelineSettings(run=str(tmp_path), target=load_target("cpu"), resolution=16)) == 16


@pytest.mark.parametrize("runtime", ["openvino", pytest.param("executorch", marks=pytest.mark.slow)])
def test_edge_target_exports_its_format(search_run, tmp_path, runtime):
    """An ExecuTorch / OpenVINO target: the variants are also written in its format, run against torch
    on the test split, predicted by the target (and its int8 sibling) and measured on this CPU."""
    pytest.importorskip({"executorch": "executorch.runtime", "openvino": "nncf"}[runtime])
    from nas.target import load_target
    from nas.train.pipeline import train_front
    from nas.train.settings import PipelineSettings

    s = PipelineSettings(run=str(search_run), target=load_target(f"{runtime}_cpu").replace(table=None),
                         targets={"int8": f"{runtime}_cpu_int8"}, out=str(tmp_path), select=0, train_samples=256,
                         train={"epochs": 1, "batch_size": 64, "bn_recalibration_batches": 1},
                         prune={"enabled": False}, qat={"enabled": False},
                         export={"calib_samples": 16, "eval_samples": 64, "rounds": 1, "warmup": 1, "repeats": 3,
                                 "min_time_s": 0.0})
    m = train_front(s)["models"][0]
    ext = {"executorch": "pte", "openvino": "xml"}[runtime]
    edge = {v["variant"]: v for v in m["edge_variants"]}
    assert sorted(edge) == ["fp32", "ptq_int8"]
    onnx_acc = {v["variant"]: v["accuracy"] for v in m["variants"]}
    for name, v in edge.items():
        assert v["runtime"] == runtime and v["file"].endswith(f"{name}.{ext}") and v["verify"]["samples"] == 64
        assert (tmp_path / m["id"] / "export" / f"{name}.{ext}.json").is_file()
        assert v["predicted"]["target"] == f"{runtime}_cpu" + ("_int8" if name == "ptq_int8" else "")
        assert v["measured"]["median_ms"] > 0
    assert edge["fp32"]["verify"]["max_abs_diff"] < 1e-3
    assert edge["fp32"]["verify"]["accuracy"] == pytest.approx(onnx_acc["fp32"], abs=1 / 64 + 1e-9)
    assert edge["ptq_int8"]["verify"]["top1_agreement"] >= 0.8

