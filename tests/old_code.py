"""Code as it was before a fix, loaded from git (by default before the TensorRT fixes of issue #35,
commit 8d3c7f7), for tests that show their stand-ins and real logs failing it."""

import importlib.util
import subprocess
from pathlib import Path

import pytest

OLD = "8d3c7f7"


def old_source(path: str, at: str = OLD) -> str:
    """``path`` (e.g. ``nas/latency/bundle_trt.py``) as it was at commit ``at``; skips the test where
    git cannot show it (no history here)."""
    src = subprocess.run(["git", "show", f"{at}:{path}"], capture_output=True, text=True, cwd=Path(__file__).parent)
    if src.returncode != 0:
        pytest.skip(f"git cannot show the old code here: {src.stderr.strip()}")
    return src.stdout


def load_old(path: str, tmp_path: Path):
    """``path`` as it was at ``OLD``, imported from ``tmp_path``."""
    name = "old_" + Path(path).stem
    file = tmp_path / f"{name}.py"
    file.write_text(old_source(path))
    spec = importlib.util.spec_from_file_location(name, file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
