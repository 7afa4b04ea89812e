"""nas._optional.try_import: the one way the package loads an optional runtime, and its one line."""

import sys

import pytest

from nas._optional import INSTALL, MissingDependency, install_hint, try_import
from nas.machine import RuntimeUnavailable


def test_an_installed_module_is_returned():
    import json

    assert try_import("json") is json


@pytest.mark.parametrize("module,extra", [("openvino", "openvino"), ("nncf", "openvino"), ("executorch.exir", "executorch"),
                                          ("torchao.quantization", "executorch"), ("ai_edge_quantizer", "litert"),
                                          ("psycopg", "postgres")])
def test_a_missing_module_names_its_extra(monkeypatch, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if it were not installed
    with pytest.raises(MissingDependency) as e:
        try_import(module, "something")
    assert str(e.value) == f'something: {module} is not installed: pip install "hwnas[{extra}]"'
    assert isinstance(e.value, RuntimeUnavailable) and isinstance(e.value, ImportError) and e.value.name == module


def test_the_missing_part_is_named_and_a_module_without_an_extra_gets_pip_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    with pytest.raises(ImportError, match=r"^tensorrt is not installed: pip install tensorrt \(or use JetPack's"):
        try_import("tensorrt")
    assert install_hint("no_such_package.sub") == "pip install no_such_package"
    with pytest.raises(MissingDependency, match="^no_such_package_xyz is not installed: pip install no_such_package_xyz$"):
        try_import("no_such_package_xyz")


def test_every_extra_named_is_one_pyproject_declares():
    from pathlib import Path

    import tomllib

    extras = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for module, hint in INSTALL.items():
        if '"hwnas[' in hint:
            assert hint.split("[")[1].split("]")[0] in extras, module
