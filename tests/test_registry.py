"""nas.registry.Registry: the one registry helper, and SettingsRegistry (builders with their settings)."""

from dataclasses import dataclass

import pytest

from nas.registry import Registry, SettingsRegistry


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


@dataclass(frozen=True)
class Base:
    pass


@dataclass(frozen=True)
class Fast(Base):
    steps: int = 1


def test_settings_registry_reads_a_config_group_and_finds_the_builder():
    reg = SettingsRegistry("sampler", Base)

    @reg.register_builder("fast", Fast)
    def build(s, seed):
        return ("fast", s.steps, seed)

    assert reg.read({"name": "fast", "steps": 3}) == Fast(steps=3) and reg.settings_class("fast") is Fast
    name, fn = reg.builder_for(Fast(steps=2))
    assert name == "fast" and fn(Fast(steps=2), 7) == ("fast", 2, 7)
    with pytest.raises(ValueError, match=r"sampler 'fast': unknown setting\(s\) \['step'\]; valid settings: \['steps'\]"):
        reg.read({"name": "fast", "step": 3})
    with pytest.raises(ValueError, match="sampler.name: unknown sampler 'slow'; valid samplers: fast"):
        reg.read({"name": "slow"})
    with pytest.raises(ValueError, match=r"Base is not the settings class of a registered sampler \(fast\)"):
        reg.builder_for(Base())
    with pytest.raises(TypeError, match="sampler 'odd': its settings must be a dataclass subclassing Base"):
        reg.register_builder("odd", dict)
