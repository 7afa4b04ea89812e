"""The built wheel works outside the repository: package data inside it, commands runnable from a venv.

Builds the wheel (no network: ``--no-build-isolation`` uses the installed setuptools), installs it
with ``--no-deps`` into a fresh venv that sees the running interpreter's torch, timm, Optuna ...
(its site-packages, whether that interpreter is a venv's or the system's), and runs two commands from
a folder outside the repository.
"""

import os
import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("setuptools")  # the build backend, used as installed (--no-build-isolation)
    out = tmp_path_factory.mktemp("wheel")
    # a checkout that has run anything holds lock folders beside its tables: the build skips them
    (REPO / "latency_tables" / ".locks").mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(REPO)], check=True, cwd=out)
    (whl,) = out.glob("hwnas-*.whl")
    return whl


def outer_site_packages() -> list[str]:
    """The running interpreter's site-packages folders: a venv's when the tests run in one (a venv's
    ``system_site_packages`` would reach its base interpreter's instead, which lacks what the venv
    installed), else the system's, and the user's."""
    dirs = [*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


@pytest.fixture(scope="module")
def venv_python(wheel, tmp_path_factory) -> Path:
    env_dir = tmp_path_factory.mktemp("venv") / "env"
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(env_dir)
    py = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    inner = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    # the outer packages come after the venv's own (a path line in a .pth is appended to sys.path, and
    # the .pth files there, such as an editable install's of this checkout, are not run)
    Path(inner, "outer_site_packages.pth").write_text("".join(d + "\n" for d in outer_site_packages()))
    # --ignore-installed: the system may hold hwnas already (an editable install of this checkout)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index",
                    "--ignore-installed", "-q", str(wheel)], check=True, env=env)
    return py


def _shipped(folder: str, pattern: str) -> set[str]:
    """The repository's files of a top-level data folder, as the wheel should name them (``nas/<folder>/...``)."""
    return {f"nas/{p.relative_to(REPO).as_posix()}" for p in (REPO / folder).rglob(pattern)}


def test_wheel_holds_package_data(wheel):
    """Every file of the top-level conf/, search_spaces/ and latency_tables/ is in the wheel, inside the package."""
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, pattern in (("conf", "*.yaml"), ("search_spaces", "*.yaml"), ("latency_tables", "*.json")):
        files = _shipped(folder, pattern)
        assert files, f"no {pattern} files in {REPO / folder}"
        assert files <= names, f"not in {wheel.name}: {sorted(files - names)}"
    assert "nas/conf/target/epyc_zen5.yaml" in names
    assert "nas/search_spaces/calibration/mbv2like.yaml" in names
    assert not any(n.startswith(("conf/", "search_spaces/", "latency_tables/")) for n in names)  # only inside nas/
    assert not any(n.startswith(("tests/", "scripts/", "benchmarks/")) for n in names)


def _run(py: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["HWNAS_HOME"] = str(cwd / "hwnas_home")
    env["MPLBACKEND"] = "Agg"
    return subprocess.run([str(py), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_installed_package_runs_outside_the_repo(venv_python, tmp_path):
    r = _run(venv_python, tmp_path, "-c", "import nas; print(nas.__file__)")
    assert r.returncode == 0, r.stderr
    where = Path(r.stdout.strip()).resolve()
    assert venv_python.parent.parent.resolve() in where.parents, f"nas imported from {where}, not the venv"
    assert REPO not in where.parents
    r = _run(venv_python, tmp_path, "-c", "from nas.resources import conf_dir, spaces_dir, tables_dir\n"
             "for d in (conf_dir(), spaces_dir(), tables_dir()): print(d.resolve())")
    assert r.returncode == 0, r.stderr
    for d in map(Path, r.stdout.split()):  # the data the build mapped into the package, not the checkout's
        assert d.is_dir() and d.parent == where.parent, f"{d} is not a folder beside {where}"
    r = _run(venv_python, tmp_path, "-m", "nas.space")
    assert r.returncode == 0, r.stdout + r.stderr
    r = _run(venv_python, tmp_path, "-m", "nas.predict", "conf=epyc_zen5", "model=timm:mobilenetv2_100")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ms" in r.stdout
