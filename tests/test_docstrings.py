"""The examples in the lower layers' docstrings run as written (they are the API's contracts)."""

import doctest
import importlib

import pytest

MODULES = ["nas.arch", "nas.space.space", "nas.space.catalog", "nas.builder", "nas.timm_arch", "nas.cost", "nas.registry", "nas.resources",
           "nas.data.settings", "nas.data.load", "nas.stats"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted, f"{name}: no example found"
    assert not result.failed, f"{name}: {result.failed} of {result.attempted} docstring examples failed"
