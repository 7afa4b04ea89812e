"""Code as it was before a fix, kept as frozen copies under ``tests/frozen/`` (``<module>_<commit>.py``),
for tests that show their stand-ins and real logs failing it.  The copies ship with the tests, so the
checks run in a shallow clone or an sdist as anywhere else."""

import importlib.util
import sys
from pathlib import Path

FROZEN = Path(__file__).parent / "frozen"
OLD = "8d3c7f7"  # before the TensorRT fixes: network flags by version, trtexec's formats


def old_source(path: str, at: str = OLD) -> str:
    """``path`` (e.g. ``nas/latency/bundle_trt.py``) as it was at commit ``at``."""
    file = FROZEN / f"{Path(path).stem}_{at}.py"
    if not file.is_file():
        raise FileNotFoundError(f"no frozen copy of {path} at {at}: {file} (git show {at}:{path} > {file})")
    return file.read_text()


def load_old(path: str, tmp_path: Path):
    """``path`` as it was at ``OLD``, imported from ``tmp_path``."""
    name = "old_" + Path(path).stem
    file = tmp_path / f"{name}.py"
    file.write_text(old_source(path))
    spec = importlib.util.spec_from_file_location(name, file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def frozen_module(path: str, at: str = OLD):
    """``path`` as it was at commit ``at``, imported once from its frozen copy (``frozen_<stem>_<at>``)."""
    name = f"frozen_{Path(path).stem}_{at}"
    if name not in sys.modules:
        old_source(path, at)  # a missing copy: named, with the command that makes it
        spec = importlib.util.spec_from_file_location(name, FROZEN / f"{Path(path).stem}_{at}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]
