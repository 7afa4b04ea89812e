"""No default written twice: a setting's default lives in one place, from the YAML a user reads to the
function that uses it.

Three places a copy hides, each checked by reading the source (a copy that agrees today is a copy that
drifts tomorrow, so equal values fail too):

- a command's schema and the library function or settings class it feeds (``ProfileAppConfig`` and
  ``profile_target``): the schema takes the library's default (``nas.config.schema.defaults_of``);
- settings classes that share a set of settings (``evaluator=train`` and the training loop's optimiser, ``nas.fit``): the
  copy names the original's default, and a shorter budget is an override of it
  (``nas.search.evaluator_settings.SHORT_RUN``);
- a config file under ``conf/`` (a group option, a command's config) that repeats its schema's default.

Numbers and words count; None and true/false are left out (they say "off" or "on", not a figure).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import yaml
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

import nas
from nas.config import register_all_configs

ROOT = Path(nas.__file__).resolve().parent

# (module, class or function): a command's schema and what it feeds, or two classes sharing settings
PAIRS = [
    (("config/profile.py", "ProfileAppConfig"), ("latency/profile/workflow.py", "profile_target")),
    (("config/validate.py", "ValidateAppConfig"), ("latency/profile/validate.py", "validate_target")),
    (("config/search.py", "SearchAppConfig"), ("search/study.py", "run_search")),
    (("config/search.py", "SearchAppConfig"), ("search/study.py", "prepare_search")),
    (("config/export.py", "ExportAppConfig"), ("train/deploy.py", "export_checkpoint")),
    (("config/train.py", "TrainAppConfig"), ("train/settings.py", "PipelineSettings")),
    (("config/supernet.py", "SupernetAppConfig"), ("supernet/settings.py", "SupernetSettings")),
    (("search/evaluator_settings.py", "TrainEvaluatorSettings"), ("fit/settings.py", "FitSettings")),
    (("search/evaluator_settings.py", "SupernetEvaluatorSettings"), ("fit/settings.py", "FitSettings")),
    (("supernet/settings.py", "SupernetSettings"), ("fit/settings.py", "FitSettings")),
    (("latency/runtimes/loop.py", "ProfileSettings"), ("train/settings.py", "ExportSettings")),
]
# a setting with the same name that is another setting, with why
OWN = {
    ("SupernetSettings", "epochs"): "the supernet's own run length (all its subnets train in it)",
    ("SupernetSettings", "batch_size"): "per process under torchrun",
    ("SupernetEvaluatorSettings", "batch_size"): "BatchNorm recalibration batches, not training",
    ("SupernetEvaluatorSettings", "bn_recalibration_batches"): "scoring a subnet of shared weights needs more",
}


def _literal(node: ast.AST | None) -> object | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _literal(node.operand)
        return -v if isinstance(v, (int, float)) else None
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)) and not isinstance(node.value, bool):
        return node.value
    return None


def literal_defaults(module: str, name: str) -> dict[str, object]:
    """The defaults written as a literal number or word in ``name`` (a class's fields, a function's
    parameters) of ``nas/<module>``."""
    tree = ast.parse((ROOT / module).read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name)
    out: dict[str, object] = {}
    if isinstance(node, ast.ClassDef):
        for st in node.body:
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and _literal(st.value) is not None:
                out[st.target.id] = _literal(st.value)
        return out
    a = node.args
    pos = a.posonlyargs + a.args
    for arg, d in [*zip(pos[len(pos) - len(a.defaults):], a.defaults), *zip(a.kwonlyargs, a.kw_defaults)]:
        if _literal(d) is not None:
            out[arg.arg] = _literal(d)
    return out


def written_twice_in_code() -> list[str]:
    found = []
    for (m1, n1), (m2, n2) in PAIRS:
        one, two = literal_defaults(m1, n1), literal_defaults(m2, n2)
        found += [f"{k}: {n1} ({m1}) = {one[k]!r}, {n2} ({m2}) = {two[k]!r}" for k in sorted(set(one) & set(two))
                  if (n1, k) not in OWN]
    return found


def _schema_node(defaults: list) -> object | None:
    """The schema a config file starts from (``/_x_schema@_here_`` or ``_x_schema`` in its defaults list)."""
    for entry in defaults or ():
        if isinstance(entry, str) and entry.lstrip("/").split("@")[0].endswith("_schema"):
            return ConfigStore.instance().load(entry.lstrip("/").split("@")[0] + ".yaml").node
    return None


def written_twice_in_conf() -> list[str]:
    register_all_configs()
    found = []
    for path in sorted((ROOT / "conf").rglob("*.yaml")):
        if path.parent.name == "target":  # a target file is data (one device), not defaults
            continue
        raw = yaml.safe_load(path.read_text()) or {}
        schema = _schema_node(raw.get("defaults"))
        if schema is None:
            continue
        for key, value in raw.items():
            if key in ("defaults", "hydra", "name") or isinstance(value, (bool, dict, list)) or value is None:
                continue
            if isinstance(value, str) and "${" in value:
                continue
            if key in schema and not OmegaConf.is_missing(schema, key) and schema[key] == value:
                found.append(f"{key}: {path.relative_to(ROOT)} repeats its schema's default {value!r}")
    return found


def test_no_default_is_written_twice_in_code():
    assert not written_twice_in_code(), "defaults written twice: " + "; ".join(written_twice_in_code())


def test_no_config_file_repeats_its_schema():
    found = written_twice_in_conf()
    assert not found, "config files repeating a default: " + "; ".join(found)


def test_the_check_finds_a_copy(tmp_path, monkeypatch):
    """The checks see a copy written for them: a literal in both halves of a pair, and a config file
    repeating its schema's default."""
    (tmp_path / "a.py").write_text("from dataclasses import dataclass\n\n@dataclass\nclass A:\n    n: int = 200\n"
                                   "    m: int = N\n")
    (tmp_path / "b.py").write_text("def f(*, n=200, m=3, k=-1):\n    pass\n")
    me = sys.modules[__name__]
    monkeypatch.setattr(me, "ROOT", tmp_path)
    monkeypatch.setattr(me, "PAIRS", [(("a.py", "A"), ("b.py", "f"))])
    assert me.written_twice_in_code() == ["n: A (a.py) = 200, f (b.py) = 200"]
    assert me.literal_defaults("b.py", "f") == {"n": 200, "m": 3, "k": -1}
    conf = tmp_path / "conf" / "sampler"
    conf.mkdir(parents=True)
    (conf / "nsga2.yaml").write_text("defaults:\n  - /_sampler_nsga2_schema@_here_\n  - _self_\n\nname: nsga2\n"
                                     "population_size: 12\n")
    assert me.written_twice_in_conf() == ["population_size: conf/sampler/nsga2.yaml repeats its schema's default 12"]
