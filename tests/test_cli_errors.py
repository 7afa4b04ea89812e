"""Every user-facing failure of a command is one line on stderr (``error: ...``), never a traceback,
unless asked for with ``-v`` / ``HYDRA_FULL_ERROR=1``."""

import json
import sys
from pathlib import Path

import forked
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cli(monkeypatch, capsys, tmp_path):
    """``cli(module, *args)``: ``python -m nas.<module> args`` in this process, run in a new folder
    (a run dir Hydra makes lands there): (exit code, stderr)."""
    import importlib

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    def run(module: str, *args: str) -> tuple[int, str]:
        main = importlib.import_module(f"nas.cli.{module}").main
        monkeypatch.setattr(sys, "argv", [f"nas.{module}", *args])
        with pytest.raises(SystemExit) as e:
            main()
        assert not any(cwd.iterdir()), list(cwd.iterdir())  # nothing left behind
        return e.value.code, capsys.readouterr().err

    return run


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("module,args,line", [
    ("search", ["n_trial=5"], "error: unknown option 'n_trial'; did you mean n_trials=?"),
    ("search", ["+n_trial=5"], "error: unknown option 'n_trial'; did you mean n_trials=?"),
    ("search", ["evaluator.epoch=3"], "error: unknown option 'evaluator.epoch'; did you mean evaluator.epochs=?"),
    ("search", ["+evaluator.epoch=3"], "error: unknown option 'evaluator.epoch'; did you mean evaluator.epochs=?"),
    ("predict", ["conf.thredas=2"], "error: unknown option 'conf.thredas'; did you mean conf.threads=?"),
    ("train", ["+selct=0"], "error: unknown option 'selct'; did you mean select=?"),
    ("validate", ["profile.watch=false"], "error: unknown option 'profile.watch'; it is nas.profile's: it keeps what "
                                          "the machine misled out of the table it writes, and this command writes no table"),
    # below a level the command lacks: that level is named and the options listed are where it is missing
    ("train", ["foo.bar=1"], "error: unknown option 'foo.bar' (no option 'foo' here); options: allow_mismatch, conf, "
                             "data, data_root, epochs, export, latency_budget_ms, max_ms, out, prune, qat, resolution, "
                             "run, seed, select, supernet, target, targets, train, train_samples, wait"),
    ("train", ["train.optim.x=1"], "error: unknown option 'train.optim.x' (no option 'train.optim' here); did you mean "
                                   "train.optimizer=?"),
    ("train", ["data.seed=1"], "error: unknown option 'data.seed'; options of data: num_workers"),
    ("export", ["weights=w.ckpt", "conf.table=t.json"], "error: conf.table= changes a target, but none is named: "
                                                        "nas.export takes the one the checkpoint records unless given; "
                                                        "name it too (conf=<target> conf.table=...)"),
])
def test_a_mistyped_option_names_the_closest(cli, module, args, line):
    code, err = cli(module, *args)
    assert code == 2 and _one_line(err) == line


def test_out_naming_a_file_is_refused(cli, tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("keep me\n")
    code, err = cli("search", f"out={f}", "n_trials=0")
    assert code == 2 and _one_line(err).startswith(f"error: out={f} is a file, not a folder")
    code, err = cli("train", f"run={tmp_path}", f"out={f / 'sub'}")
    assert code == 2 and f"is under {f}, a file, not a folder" in _one_line(err)
    assert f.read_text() == "keep me\n"


def test_an_unknown_timm_model_names_close_ones():
    from nas.timm_arch import from_timm

    with pytest.raises(ValueError, match=r"unknown timm model 'mobilenetv3_larg'; close names: .*mobilenetv3_large_100"
                                         r".*only EfficientNet / MobileNet-family"):
        from_timm("mobilenetv3_larg")


def test_predict_refuses_a_width_no_space_yields(cli, tmp_path):
    from nas.space import load_space

    d = load_space("tiny").random(0).to_dict()
    d["blocks"][1]["out_ch"] = 20
    p = tmp_path / "arch.json"
    p.write_text(json.dumps(d))
    code, err = cli("predict", f"arch={p}")
    line = _one_line(err)
    assert code == 2 and "blocks[1]" in line and "width 20 is not a multiple of channel_multiple=8" in line


def test_checkpoint_for_another_arch_names_the_fields():
    from nas.fit.checkpoint import arch_differences

    a = {"in_chans": 3, "blocks": [{"out_ch": 16}, {"out_ch": 48, "kernel": 3}], "name": "x"}
    b = {"in_chans": 3, "blocks": [{"out_ch": 16}, {"out_ch": 56, "kernel": 3}], "name": "y"}
    assert arch_differences(a, b) == "blocks[1].out_ch: 48 in the checkpoint, 56 in the run"
    b["blocks"].append({"out_ch": 8})
    assert arch_differences(a, b) == "len(blocks): 2 in the checkpoint, 3 in the run"


_BOOM = """
import sys
import nas.cli.space as m
def boom(*a, **k):
    raise OSError("disk on fire")
m.summarize = boom
sys.argv = ["nas.space", "search_space=tiny", *sys.argv[1:]]
m.main()
"""


@pytest.mark.parametrize("flag", [[], ["-v"]])
def test_an_unexpected_error_is_one_line_and_v_shows_the_traceback(flag):
    r = forked.run([sys.executable, "-c", _BOOM, *flag], cwd=ROOT, timeout=300)
    assert r.returncode == 1
    if flag:
        assert "Traceback" in r.stderr and "OSError: disk on fire" in r.stderr
    else:
        first, hint = r.stderr.strip().splitlines()
        assert first == "error: OSError: disk on fire" and "-v" in hint and "Traceback" not in r.stderr


def test_verbose_anywhere_lets_the_error_through_with_debug_logging(monkeypatch):
    import logging

    import nas.cli.space as m

    def boom(*a, **k):
        raise OSError("disk on fire")

    monkeypatch.setattr(m, "summarize", boom)
    monkeypatch.setattr(sys, "argv", ["nas.space", "--verbose", "search_space=tiny"])
    log = logging.getLogger("nas")
    level = log.level
    try:
        with pytest.raises(OSError, match="disk on fire"):
            m.main()
        assert log.level == logging.DEBUG
    finally:
        log.setLevel(level)


def test_an_unhandled_ctrl_c_exits_130(monkeypatch, cli):
    import nas.cli.space as m

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(m, "summarize", interrupt)
    code, err = cli("space", "search_space=tiny")
    assert code == 130 and err.strip() == "interrupted"


REMOVED = "target.transfer_from was removed: "


@pytest.mark.parametrize("module,arg", [("profile", "conf.transfer_from=[cpu_int8]"),
                                        ("profile", "+conf.transfer_from=[cpu_int8]"),
                                        ("predict", "target.transfer_from=[auto]"),
                                        ("search", "conf.transfer_from=[epyc_zen5.json]"),
                                        ("validate", "~conf.transfer_from")])
def test_a_removed_target_field_on_the_command_line_is_refused_with_why(cli, module, arg, tmp_path, monkeypatch):
    """conf.transfer_from was removed: typed on any command line it is refused in one line that says
    why and points to the CHANGELOG, before anything is measured or written; never silently ignored."""
    monkeypatch.setenv("HWNAS_HOME", str(tmp_path / "home"))
    code, err = cli(module, "conf=cpu", arg)
    line = _one_line(err)
    assert code == 2 and line.startswith(f"error: {REMOVED}") and "5 points it had to add" in line and "see CHANGELOG" in line
    assert not (tmp_path / "home").exists()


def test_a_target_file_with_a_removed_field_is_refused_with_why(cli, tmp_path, monkeypatch):
    """A user's target file that still sets transfer_from: the command, nas.load_target and
    load_latency_model(transfer_from=...) each refuse it in one line naming the field and why."""
    import nas

    home = tmp_path / "home"
    (home / "target").mkdir(parents=True)
    text = (ROOT / "conf" / "target" / "cpu.yaml").read_text().replace("name: cpu", "name: mine")
    (home / "target" / "mine.yaml").write_text(text + "transfer_from: [epyc_zen5.json]\n")
    monkeypatch.setenv("HWNAS_HOME", str(home))
    code, err = cli("predict", "conf=mine", "model=timm:mobilenetv2_100")
    line = _one_line(err)
    assert code == 2 and line.startswith(f"error: target/mine.yaml: {REMOVED}") and "see CHANGELOG" in line
    with pytest.raises(ValueError, match=REMOVED):
        nas.load_target("mine")
    with pytest.raises(ValueError, match=REMOVED):
        nas.load_latency_model("cpu", transfer_from=["epyc_zen5.json"])
