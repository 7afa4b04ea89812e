"""The user's YAML files are bounded before anything expands them: an alias bomb (an anchor, then levels
of lists of aliases to it) as a search space (in unused keys or as a stage's ``depth``) or as a target is
refused in one line, in seconds; a Ctrl-C while a file is read is reported as an interruption."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import forked
import pytest
from omegaconf import OmegaConf

from nas.resources import conf_dir, spaces_dir

REPO = Path(__file__).resolve().parent.parent
TINY = (REPO / "search_spaces" / "tiny.yaml").read_text()
BOUNDED = 30  # seconds: a refused file takes about one; the unbounded expansion ran for more than 10 minutes


def _bomb(prefix: str = "", levels: int = 8) -> list[str]:
    """``&a0 [x x 10]``, then ``levels`` lists of ten aliases to the one before: 10^(levels+1) values."""
    lines = [f"{prefix}a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"{prefix}a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels + 1)]
    return lines


def _unused_keys(tmp_path: Path) -> Path:
    p = tmp_path / "unused.yaml"
    p.write_text(TINY + "\n".join(_bomb("x_")) + "\n")
    return p


def _as_depth(tmp_path: Path) -> Path:
    p = tmp_path / "depth.yaml"
    body = TINY.replace("- {kind: ds, depth: [1],", "- {kind: ds, depth: *a8,")
    p.write_text("_b:\n" + "\n".join("  " + ln for ln in _bomb()) + "\n" + body)
    return p


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return forked.run([sys.executable, "-m", *args], cwd=REPO, timeout=BOUNDED, env={**os.environ, **env})


@pytest.mark.parametrize("make", [_unused_keys, _as_depth], ids=["unused-keys", "as-depth"])
def test_an_alias_bomb_as_a_search_space_is_refused_in_one_line(tmp_path, make):
    path = make(tmp_path)
    r = _run(["nas.space", f"search_space={path}"])
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1, r.stderr[-2000:]
    assert err.startswith(f"error: {path} stands for more than 100,000 values once its aliases") and "bomb" in err


def test_an_alias_bomb_as_a_target_is_refused_before_hydra_reads_it(tmp_path):
    target = (REPO / "conf" / "target" / "cpu.yaml").read_text().replace("name: cpu", "name: bomb")
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "bomb.yaml").write_text(target + "\n".join(_bomb("x_")) + "\n")
    r = _run(["nas.predict", "conf=bomb", "model=timm:mobilenetv3_small_100"], HWNAS_HOME=str(tmp_path))
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1, r.stderr[-2000:]
    assert err.startswith("error: conf=bomb (") and "stands for more than 100,000 values" in err


def test_a_ctrl_c_while_a_space_is_read_is_an_interruption(tmp_path, monkeypatch):
    """OmegaConf turned a Ctrl-C inside its copying into ``AttributeError: 'NoneType' object has no attribute
    '_invalidate_flags_cache'`` (raised while the KeyboardInterrupt was handled: its context), which the
    space loader reported as a YAML it cannot parse; this stand-in raises the same, the same way."""
    from nas.space import load_space

    def interrupted(*a, **k):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            None._invalidate_flags_cache()  # type: ignore[attr-defined]

    p = tmp_path / "space.yaml"
    p.write_text(TINY)
    monkeypatch.setattr(OmegaConf, "load", interrupted)
    with pytest.raises(KeyboardInterrupt):
        load_space(p)


def test_the_bounds(tmp_path):
    from nas._yaml import MAX_YAML_DEPTH, YamlError, check_yaml, load_yaml

    def refused(text: str, match: str) -> None:
        p = tmp_path / "f.yaml"
        p.write_text(text)
        with pytest.raises(YamlError, match=match) as e:
            check_yaml(p)
        assert "\n" not in str(e.value)

    refused("\n".join(_bomb(levels=5)) + "\n", "stands for more than 100,000 values")  # 10^6
    refused("a: &a [1, *a]\n", "line 1 refers to a list or mapping that holds it")
    refused("[" * (MAX_YAML_DEPTH + 1) + "]" * (MAX_YAML_DEPTH + 1) + "\n", f"more than {MAX_YAML_DEPTH} deep")
    refused("[" * 2000 + "]" * 2000 + "\n", f"more than {MAX_YAML_DEPTH} deep")  # beyond the composer's recursion
    refused("a: [\n", "not valid YAML")
    p = tmp_path / "ok.yaml"
    p.write_text("\n".join(_bomb(levels=3)) + "\n")  # 10^4 values: within the bound
    assert len(load_yaml(p)["a3"]) == 10
    (tmp_path / "big.yaml").write_bytes(b"x: " + b"y" * (3 << 20) + b"\n")
    with pytest.raises(YamlError, match="more than a YAML config may be"):
        check_yaml(tmp_path / "big.yaml")


def test_every_shipped_yaml_file_is_within_the_bounds():
    from nas._yaml import check_yaml

    files = sorted(Path(spaces_dir()).rglob("*.yaml")) + sorted(Path(conf_dir()).rglob("*.yaml"))
    assert len(files) > 10
    for f in files:
        check_yaml(f)
