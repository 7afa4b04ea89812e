"""nas.registry.Registry: the one registry helper."""

import pytest

from nas.registry import Registry


def test_register_lookup_and_errors():
    reg = Registry("runtime")

    @reg.register("b", tag="name")
    class B:
        pass

    reg.add("a", object())
    assert reg.names() == ["a", "b"] and list(reg) == ["a", "b"] and len(reg) == 2 and "b" in reg
    assert reg["b"] is B and B.name == "b"
    with pytest.raises(ValueError, match="unknown runtime 'c'; valid runtimes: a, b"):
        reg["c"]
    with pytest.raises(ValueError, match="runtime 'b' is already registered by B"):
        reg.add("b", object())
    assert reg.get("c") is None
