"""Bad input met on the way in: one line naming the file (and the entry, the option) and the fix,
exit code 2, nothing written; refused before the heavy libraries (torch, scikit-learn) load when the
command can tell without them."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest

from nas._io import exclusive
from nas.arch import Arch
from nas.latency.predict.load import load_latency_model
from nas.latency.tables.table import LatencyTable, TableError, resolve_table_path
from nas.latency.tables.use import profile_writer
from nas.space import load_space
from nas.target import load_target
from tests.test_cli_errors import _one_line, cli  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]
_find_spec = importlib.util.find_spec
SHIPPED = resolve_table_path("cpu.json")


def _table(tmp_path: Path, edit, name: str = "t.json") -> Path:
    """The shipped cpu table's first 8 entries and networks, with ``edit(data)`` applied, written to
    ``tmp_path / name``."""
    data = json.loads(SHIPPED.read_text())
    data["entries"], data["networks"] = data["entries"][:8], data["networks"][:8]
    edit(data)
    p = tmp_path / name
    p.write_text(json.dumps(data))  # json writes float("inf") as Infinity, as a user's editor or script would
    return p


@pytest.mark.parametrize("where, field, value", [("entries", "median_ms", math.inf), ("entries", "p90_ms", math.nan),
                                                 ("entries", "median_ms", -1.0), ("networks", "median_ms", math.inf)])
def test_a_table_entry_no_measurement_gives_names_the_file_and_the_entry(tmp_path, where, field, value):
    p = _table(tmp_path, lambda d: d[where][5].__setitem__(field, value))
    with pytest.raises(TableError) as e:
        LatencyTable.load(p)
    msg = str(e.value)
    label = json.loads(SHIPPED.read_text())[where][5].get("label", "")
    assert msg.startswith(f"{p}: corrupt latency table: {'entry' if where == 'entries' else 'network'} 5 ("), msg
    assert f"has {field}={value}" in msg and "measure the table again (python -m nas.profile)" in msg
    if where == "entries":
        assert f"entry 5 ({label})" in msg


def test_an_empty_table_names_the_file_and_how_to_measure_it(tmp_path):
    p = _table(tmp_path, lambda d: d.__setitem__("entries", []))
    with warnings.catch_warnings():  # the shipped table's processor may not be this machine's: not the point here
        warnings.simplefilter("ignore")
        target = dataclasses.replace(load_target("cpu"), table=str(p))
    with pytest.raises(TableError) as e:
        load_latency_model(target)
    assert str(e.value) == (f"{p}: holds no measured blocks ('entries' is empty), so no latency can be predicted from "
                            f"it; measure them on the device (python -m nas.profile conf=cpu conf.table={p}), or give "
                            f"a table that holds them (conf.table=<file>)")


def test_an_arch_json_nested_too_deep_is_one_line_naming_the_file(tmp_path, cli):  # noqa: F811
    p = tmp_path / "deep.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=rf"^{p}: Arch JSON is nested too deep to read"):
        Arch.load(str(p))
    code, err = cli("predict", "conf=cpu", f"arch={p}")
    assert code == 2 and _one_line(err).startswith(f"error: {p}: Arch JSON is nested too deep")


# each case: a fresh process runs the command; it must refuse in one line (exit 2) without torch or scikit-learn
_PROBE = """
import contextlib, io, json, runpy, sys
err = io.StringIO()
code = 0
with contextlib.redirect_stderr(err):
    try:
        sys.argv = sys.argv[1:]
        runpy.run_module(sys.argv[0], run_name="__main__")
    except SystemExit as e:
        code = e.code
print(json.dumps({"code": code, "err": err.getvalue(),
                  "heavy": sorted(m for m in ("torch", "sklearn", "timm") if m in sys.modules)}))
"""


def _refused(*args: str, cwd: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_bad_input_is_refused_before_torch_and_scikit_learn_load(tmp_path):
    """Commands check what they were given before loading the libraries that do the work: an unknown
    space, a table no predictor can use, a checkpoint that is no torch file, out= under a file."""
    inf = _table(tmp_path, lambda d: d["entries"][5].__setitem__("median_ms", math.inf), "inf.json")
    empty = _table(tmp_path, lambda d: d.__setitem__("entries", []), "empty.json")
    (tmp_path / "notes.txt").write_text("not a folder\n")
    (tmp_path / "model.ckpt").write_text("# not a checkpoint\n")
    with zipfile.ZipFile(tmp_path / "w.ckpt", "w") as z:  # a zip archive, as torch.save writes
        z.writestr("w/data.pkl", b"\x80\x02}q\x00.")
    (tmp_path / "cut.ckpt").write_bytes((tmp_path / "w.ckpt").read_bytes()[:-30])  # its end cut off
    under_file = tmp_path / "notes.txt" / "x"
    cases = [
        (["nas.search", "search_space=no_such_space", f"out={tmp_path / 's1'}"], "unknown search space 'no_such_space'"),
        (["nas.search", f"conf.table={inf}", f"out={tmp_path / 's2'}"], f"{inf}: corrupt latency table: entry 5"),
        (["nas.search", f"conf.table={empty}", f"out={tmp_path / 's3'}"], f"{empty}: holds no measured blocks"),
        (["nas.predict", f"conf.table={inf}", "model=timm:mobilenetv3_small_100"], "has median_ms=inf"),
        (["nas.export", f"weights={tmp_path / 'model.ckpt'}"], "model.ckpt: not a torch checkpoint (neither the zip"),
        (["nas.export", f"weights={tmp_path / 'cut.ckpt'}"], "cut.ckpt: not a torch checkpoint (a zip archive cut off"),
        (["nas.export", f"weights={tmp_path / 'w.ckpt'}", f"out={under_file}.onnx"], f"is under {tmp_path / 'notes.txt'}, a file"),
        (["nas.profile", f"out={under_file}.json"], f"is under {tmp_path / 'notes.txt'}, a file"),
    ]
    before = sorted(tmp_path.iterdir())
    for args, words in cases:
        got = _refused(*args, cwd=tmp_path)
        lines = got["err"].strip().splitlines()
        assert got["code"] == 2 and len(lines) == 1 and words in lines[0], (args, got)
        assert got["heavy"] == [], (args, got["heavy"])
    assert sorted(tmp_path.iterdir()) == before  # nothing written


def _search_run(tmp_path: Path) -> Path:
    """The smallest run dir ``nas.train`` reads: a pareto.json of one network."""
    run = tmp_path / "run"
    run.mkdir()
    arch = load_space("tiny").random(0).to_dict()
    (run / "pareto.json").write_text(json.dumps({"schema": "hwnas.pareto", "metric": "val_accuracy",
                                                 "search": {"data": {"name": "digits"}}, "pareto": [{"arch": arch}]}))
    return run


@pytest.mark.parametrize("command", ["train", "profile"])
def test_a_second_writer_is_refused_before_torch_loads(tmp_path, command):
    """Another process trains into the same folder, or profiles into the same table on this machine:
    refused at once, not after torch and the pipeline have loaded."""
    if command == "train":
        run = _search_run(tmp_path)
        args, lock, what = ["nas.train", "conf=cpu", f"run={run}"], run / "train", f"training into {run / 'train'}"
    else:
        out = tmp_path / "t.json"
        lock, what = profile_writer(out)
        args = ["nas.profile", "conf=cpu", "search_space=tiny", f"out={out}"]
    with exclusive(lock, what=what, command="python -m nas.holder"):
        got = _refused(*args, cwd=tmp_path)
    assert got["code"] == 2 and _one_line(got["err"]).startswith(f"error: {what} is in progress in process "), got
    assert "python -m nas.holder" in got["err"] and "add wait=true" in got["err"] and got["heavy"] == []


def test_a_file_that_is_no_space_is_not_repeated_in_the_error(tmp_path):
    """``search_space=/etc/passwd``: YAML reads the whole file as one key; the error quotes its start."""
    p = tmp_path / "passwd"
    p.write_text("".join(f"user{i}:x:{i}:{i}:User {i}:/home/user{i}:/bin/sh\n" for i in range(40)))
    with pytest.raises(ValueError) as e:
        load_space(str(p))
    msg = str(e.value)
    assert msg.startswith(f"{p}: top level: unknown key 'user0:x:0:0:User 0:/home/user0:/bin/sh user1:x") and \
        "characters); allowed keys: " in msg and "user39" not in msg and len(msg) < 300, msg


def test_a_redis_storage_without_its_client_names_the_package(cli, monkeypatch, tmp_path):  # noqa: F811
    monkeypatch.setitem(sys.modules, "redis", None)  # not installed (find_spec finds nothing)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "redis" else _find_spec(name, *a))
    code, err = cli("search", "storage=redis://:secret@localhost:6379/0", f"out={tmp_path / 'run'}", "n_trials=1")
    assert code == 2 and _one_line(err) == ("error: storage='redis://:***@localhost:6379/0' needs the Redis client "
                                            "(redis-py), which is not installed: pip install redis")
    assert not (tmp_path / "run").exists()


def test_cfg_job_prints_the_config_with_a_user_config_folder(tmp_path, monkeypatch, capsys):
    """With ``$HWNAS_HOME/target/`` present the command line gains ``hydra.searchpath=``; Hydra's parser must
    still read the user's flags (``--cfg job`` after an override)."""
    import nas.cli.search as m
    from nas.config import normalize_overrides

    (tmp_path / "home" / "target").mkdir(parents=True)
    monkeypatch.setenv("HWNAS_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    args = normalize_overrides(["conf=cpu", "n_trials=3", "--cfg", "job"])
    assert args == [f"hydra.searchpath=[file://{tmp_path / 'home'}]", "target=cpu", "n_trials=3", "--cfg", "job"]
    monkeypatch.setattr(sys, "argv", ["nas.search", "conf=cpu", "n_trials=3", "--cfg", "job"])
    m.main()
    out = capsys.readouterr().out
    assert "n_trials: 3" in out and "target:\n  name: cpu" in out


_LOAD_FOLDER = """
import sys
from nas.data import load_data
print(load_data({"name": "imagefolder", "root": sys.argv[1], "resolution": 8, "num_workers": 0}).test_source)
"""


def test_an_ascii_locale_reads_a_folder_with_non_ascii_names(tmp_path):
    """``LC_ALL=C`` (no UTF-8 coercion): file names come as surrogate escapes; the data loads, with the same
    held-out digest as under a UTF-8 locale."""
    from PIL import Image

    root = tmp_path / "dáta_☃"
    for c in ("cät", "dog"):
        (root / c).mkdir(parents=True)
        for i in range(10):
            Image.new("RGB", (8, 8), (i * 20, 0, 0)).save(root / c / f"{i}.png")
    out = []
    for env in ({"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}, {"LC_ALL": "C.UTF-8"}):
        r = subprocess.run([sys.executable, "-c", _LOAD_FOLDER, str(root)], cwd=ROOT, capture_output=True,
                           timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT), **env})
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        out.append(r.stdout)
    assert out[0] == out[1] and b"files digest" in out[0]
