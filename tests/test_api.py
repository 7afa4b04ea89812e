"""The public API in nas/__init__.py: every name resolves, and ``import nas`` stays light."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import nas


@pytest.mark.parametrize("name", sorted(nas.__all__))
def test_public_name_resolves(name):
    assert getattr(nas, name) is not None


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        nas.nope  # noqa: B018


def test_import_nas_is_light():
    code = "import sys, nas; print(sorted(m for m in ('torch', 'timm', 'optuna', 'sklearn') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_names_are_the_library_objects():
    from nas.arch import Arch
    from nas.search.study import run_search

    assert nas.Arch is Arch and nas.run_search is run_search


def test_no_public_name_is_shadowed_by_a_submodule():
    """Importing the library's modules first (as the commands do) must not turn ``nas.build`` or any
    other public function into a module: no submodule of ``nas`` carries a public name."""
    code = ("import nas.builder, nas.train.pipeline, nas.latency.profile.workflow, nas.search.study, nas; "
            "import types; print([n for n in nas.__all__ if isinstance(getattr(nas, n), types.ModuleType)])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_docs_list_the_public_api():
    """docs/getting-started.md's sentence "The public API is ..." names exactly ``nas.__all__``."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "getting-started.md").read_text()
    m = re.search(r"The public API is (.*?)\. See", text, re.S)
    assert m, "docs/getting-started.md: no sentence 'The public API is ... See'"
    listed = {n.removeprefix("nas.") for n in re.findall(r"`([^`]+)`", m.group(1))}
    assert listed == set(nas.__all__), f"in the docs only: {listed - set(nas.__all__)}; " \
                                       f"in nas.__all__ only: {set(nas.__all__) - listed}"


def test_public_entry_points_take_a_target_a_name_or_its_fields():
    """The public entry points (nas.load_latency_model, nas.profile_target, nas.validate_target,
    nas.export_checkpoint) resolve what they were given once; the library below them takes a Target and
    names nas.load_target for anything else."""
    from nas.latency.predict.load import RooflineModel, resolve_target
    from nas.latency.predict.roofline import Roofline
    from nas.latency.runtimes.core import get_runtime

    t = nas.load_target("jetson")
    assert resolve_target(t) is t and resolve_target(t.to_dict()) == t and resolve_target("jetson") == t
    assert nas.load_latency_model("jetson").source == "estimated"
    with pytest.raises(TypeError, match=r"target must be a Target \(nas.load_target\(name\)\), got int"):
        resolve_target(3)
    for internal in (RooflineModel, Roofline.from_target, get_runtime):
        with pytest.raises(TypeError, match=r"target must be a Target \(nas.load_target\(name\)\), got dict"):
            internal(t.to_dict())
