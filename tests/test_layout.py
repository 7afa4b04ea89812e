"""The package's shape: no import circles, every import runs down the pipeline's layers (and down
``nas.latency``'s rooms, each reached through its face), imports sit at a module's top, ``nas.machine`` needs
only the standard library, modules and functions stay small.

Every import counts, wherever it is written (module level, inside a function, under
``if __name__ == "__main__"``, ``try_import("x")``, ``importlib.import_module("x")``); only ``TYPE_CHECKING``
blocks are skipped.  Inside a function the package loads an optional runtime (``OPTIONAL_RUNTIMES``)
through ``nas._optional.try_import`` only, which names the extra that installs it; an ``import`` statement
inside a function is left to the device bundles' standalone scripts and to SQLAlchemy (heavy, not
optional), each with a one-line reason in a comment on its line or the line above.  The benchmarks
(``benchmarks/*.py``) import at their top too: an optional runtime through ``try_import``, or an ``import``
statement with ``# optional: <why>`` where ``try_import`` cannot say it; the light ones (``LIGHT_BENCHMARKS``)
may keep a heavy import in a function with ``# heavy: <why>``.  The size rule (docs/contributing.md) holds for
the package, the benchmarks and the tests alike.
"""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import nas

ROOT = Path(nas.__file__).resolve().parent

# lower number = lower layer; a module may import only from its own layer or below
# (docs/contributing.md: cli -> config -> train/search -> supernet -> fit -> compress/latency -> export
#  -> data/builder/cost/space -> arch/target -> machine and helpers)
LAYERS = {
    "nas.cli": 9, "nas.config": 8,  # the Hydra schemas are generated from the library's settings
    "nas.train": 7, "nas.search": 7,  # the front's pipeline and the search: one floor, neither imports the other
    "nas.supernet": 6,  # the weight-sharing supernet: the search scores with it, the pipeline starts from it
    "nas.fit": 5,  # the training service: the one training loop, its settings and checkpoints
    "nas.compress": 4, "nas.latency": 4,  # its rooms in their own order: LATENCY_ROOMS
    "nas.export": 3,  # converters: model -> ONNX / .pte / OpenVINO bytes, verified against torch
    "nas.data": 2, "nas.builder": 2, "nas.cost": 2, "nas.space": 2, "nas.narrow": 2,
    "nas.timm_arch": 2, "nas._timm_blocks": 2,
    "nas.arch": 1, "nas._blocks": 1, "nas.target": 1,
    "nas.machine": 0, "nas._optional": 0, "nas._version": 0,
    "nas.registry": 0, "nas.stats": 0, "nas._checks": 0, "nas.resources": 0, "nas._io": 0, "nas._yaml": 0, "nas._lazy": 0,
    "nas": 0,
}
# nas.latency's rooms, lowest first: a room imports from its own and lower rooms only, and another room or
# package imports a room (or nas.machine) through its face, the package's __init__; nas.latency's own face sits
# above every room
LATENCY_ROOMS = ("nas.latency.tables", "nas.latency.runtimes", "nas.latency.predict", "nas.latency.bundle",
                 "nas.latency.profile")
FACES = (*LATENCY_ROOMS, "nas.machine")
ENTRY_SHIMS = {"nas.profile", "nas.predict", "nas.validate", "nas.repair"}  # python -m nas.<command> -> nas.cli
# imported inside a function only, each with its reason: optional or heavy runtimes a user may not have installed
OPTIONAL_RUNTIMES = {"onnxruntime", "executorch", "openvino", "nncf", "tensorrt", "torchao", "psycopg",
                     "sqlalchemy", "modelopt", "pycuda", "cuda", "litert_torch", "ai_edge_litert", "ai_edge_quantizer",
                     "hwnas_trt",  # the TensorRT timer a device bundle carries beside measure_bundle.py
                     "hwnas_cuda"}  # the CUDA helpers a device bundle carries beside hwnas_trt.py
# calls that import the module their first argument names (the layer checks see them as imports)
LOADERS = {"try_import", "importlib.import_module", "import_module"}
# the device bundles' scripts, copied into every bundle under these names (nas.latency.bundle.SCRIPTS): they run
# on the device without this package, so they import as they can
STANDALONE = {"nas.latency.bundle.measure_bundle", "nas.latency.bundle.hwnas_stats", "nas.latency.runtimes.hwnas_trt",
              "nas.latency.runtimes.hwnas_cuda", "nas.latency.runtimes.hwnas_litert", "nas.machine.hwnas_device"}
# heavy but always installed, so loaded by an import statement where it is used
HEAVY_NOT_OPTIONAL = {"sqlalchemy"}
# generous caps: a module holds one concern however long that takes (split by concern, never to meet a count);
# past these, a module or a function is almost always two concerns
MAX_MODULE_LINES = 1500
MAX_FUNCTION_LINES = 120  # from the def (or its first decorator) to its last line, docstring included


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in ROOT.rglob("*.py")}


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")[: None if is_package else -1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path, *, type_checking: bool = False) -> list[tuple[str, int, bool]]:
    """``(imported module, line, inside a function)`` for every import of ``path`` outside ``TYPE_CHECKING``;
    an internal name resolves to the deepest module of the package it names."""
    tree = ast.parse(path.read_text())
    out: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                visit_list(child.body if type_checking else child.orelse, in_function)
                continue
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, in_function) for a in child.names)
            elif (isinstance(child, ast.Call) and ast.unparse(child.func) in LOADERS and child.args
                  and isinstance(child.args[0], ast.Constant) and isinstance(child.args[0].value, str)):
                out.append((child.args[0].value, child.lineno, in_function))
            elif isinstance(child, ast.ImportFrom):
                base = _resolve(child, module, path.name == "__init__.py")
                for a in child.names:
                    name = f"{base}.{a.name}"
                    out.append((name if name in MODULES else base, child.lineno, in_function))
            visit(child, inner)

    def visit_list(nodes: list[ast.stmt], in_function: bool) -> None:
        for n in nodes:
            visit(ast.Module(body=[n], type_ignores=[]), in_function)

    visit(tree, False)
    return out + _lazy_homes(module, tree)


def _lazy_homes(module: str, tree: ast.Module) -> list[tuple[str, int, bool]]:
    """The modules a package's ``lazy_exports(__name__, HOMES)`` loads on a name's first use: ``HOMES`` is
    a dict literal at the module's top (a dotted path, or a submodule's bare name)."""
    literals = {t.id: n.value for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "lazy_exports" and len(node.args) == 2:
            homes = node.args[1]
            homes = literals.get(homes.id) if isinstance(homes, ast.Name) else homes
            if isinstance(homes, ast.Dict):
                for v in homes.values:
                    if isinstance(v, ast.Constant) and isinstance(v.value, str):
                        out.append((v.value if "." in v.value else f"{module}.{v.value}", node.lineno, False))
    return out


def _internal(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _graph(*, type_checking: bool = False) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for m, p in MODULES.items():
        deps = {_internal(n) for n, _, _ in _imports(m, p)}
        if type_checking:
            deps |= {_internal(n) for n, _, _ in _imports(m, p, type_checking=True)}
        graph[m] = {d for d in deps if d and d != m}
    return graph


def _home(mod: str) -> str:
    """The entry of ``LAYERS`` a module belongs to (its package, or the module itself)."""
    return max((k for k in LAYERS if mod == k or mod.startswith(k + ".")), key=len)


def _layer(mod: str) -> int:
    if mod == "nas":  # the public face: its lazy exports load every layer, so it sits with the commands
        return LAYERS["nas.cli"]
    return LAYERS[_home(mod)]


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def test_no_import_circles():
    circles = _circles(_graph())
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


def test_no_circle_for_type_checkers_either():
    """The imports under ``TYPE_CHECKING`` make no circle either: a module that needs another's types only
    to annotate is still one half of a concern split in two."""
    circles = _circles(_graph(type_checking=True))
    assert not circles, "import circles with TYPE_CHECKING: " + "; ".join(" <-> ".join(c) for c in circles)


def test_imports_run_down_the_layers():
    graph = _graph()
    up = [f"{m} imports {d}" for m, deps in graph.items() if m not in ENTRY_SHIMS and not m.endswith("__main__")
          for d in deps if _layer(d) > _layer(m)]
    assert not up, "imports that run up the layers: " + "; ".join(sorted(up))


def _sideways(graph: dict[str, set[str]]) -> list[str]:
    """Imports between two packages of one floor from the training service up (the search and the front's
    pipeline): what both need lives below them, so neither imports the other."""
    return sorted(f"{m} imports {d}" for m, deps in graph.items() if m not in ENTRY_SHIMS and not m.endswith("__main__")
                  for d in deps if m != "nas" and d != "nas" and _layer(m) >= LAYERS["nas.fit"]
                  and _layer(d) == _layer(m) and _home(d) != _home(m))


def test_no_sideways_imports_above_the_training_service():
    bad = _sideways(_graph())
    assert not bad, "imports between packages of one floor (move what both need below them): " + "; ".join(bad)


def test_the_sideways_check_can_fail():
    graph = {"nas.train.search_run": {"nas.search.rundir", "nas.fit.loop", "nas.supernet.checkpoint"},
             "nas.search.evaluate": {"nas.supernet.checkpoint", "nas.fit.settings"}, "nas.compress.qat": {"nas.latency"}}
    assert _sideways(graph) == ["nas.train.search_run imports nas.search.rundir"]


def _room(mod: str) -> int | None:
    """``mod``'s room: its place in ``LATENCY_ROOMS``, or above them all for ``nas.latency`` itself; None outside."""
    if mod == "nas.latency":
        return len(LATENCY_ROOMS)
    return next((i for i, r in enumerate(LATENCY_ROOMS) if mod == r or mod.startswith(r + ".")), None)


def _across_rooms(graph: dict[str, set[str]]) -> list[str]:
    """Imports inside ``nas.latency`` that run up its rooms, and imports of a room (or ``nas.machine``) from
    outside it that pass by its face."""
    out = []
    for m, deps in graph.items():
        for d in deps:
            if _room(m) is not None and _room(d) is not None and _room(d) > _room(m):
                out.append(f"{m} imports {d} (a higher room)")
            face = next((f for f in FACES if d.startswith(f + ".")), None)
            if face and not (m == face or m.startswith(face + ".")):
                out.append(f"{m} imports {d} (not through {face})")
    return sorted(out)


def test_latency_rooms_import_down_and_through_their_faces():
    bad = _across_rooms(_graph())
    assert not bad, "imports across nas.latency's rooms: " + "; ".join(bad)


def _shadowed(package: str, init: Path) -> list[str]:
    """Names ``package``'s face exports that are also its submodules' names: once the submodule is imported,
    the package's attribute of that name is the module, not the name the face promised."""
    subs = {p.stem for p in init.parent.glob("*.py")} | {p.name for p in init.parent.iterdir() if (p / "__init__.py").is_file()}
    return [f"{package}.{n}" for n in sorted(set(getattr(importlib.import_module(package), "__all__", ())) & subs)]


def test_no_face_name_is_a_submodule():
    bad = [x for m, p in MODULES.items() if p.name == "__init__.py" for x in _shadowed(m, p)]
    assert not bad, "names a package exports that its submodules shadow: " + "; ".join(bad)


def test_the_shadow_check_can_fail(tmp_path, monkeypatch):
    pkg = tmp_path / "shadowed_face"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("__all__ = ['loop', 'measure']\n")
    (pkg / "measure.py").write_text("def measure(): ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _shadowed("shadowed_face", pkg / "__init__.py") == ["shadowed_face.measure"]


def test_every_latency_module_is_in_a_room():
    assert not [m for m in MODULES if m.startswith("nas.latency.") and _room(m) is None]


def test_the_room_checks_can_fail():
    graph = {"nas.latency.predict.load": {"nas.latency.profile.workflow", "nas.latency.tables", "nas.machine.identity"},
             "nas.latency.tables.table": {"nas.latency.tables.provenance", "nas.machine"}, "nas.latency": {"nas.latency.profile"}}
    assert _across_rooms(graph) == ["nas.latency.predict.load imports nas.latency.profile.workflow (a higher room)",
                                    "nas.latency.predict.load imports nas.latency.profile.workflow (not through nas.latency.profile)",
                                    "nas.latency.predict.load imports nas.machine.identity (not through nas.machine)"]


def _misplaced_imports(module: str, path: Path, allowed: Callable[[str, str, str], bool] | None = None) -> list[str]:
    """Imports inside a function that are neither ``try_import`` of an optional runtime nor an ``import``
    statement ``allowed(module, its top-level name, its comment)`` lets stay (the comment: from the ``#`` on, on
    the statement's line or the line above; "" without one).  The package's rule (the default): an optional
    runtime with its reason, in a standalone script or for SQLAlchemy."""
    lines = path.read_text().splitlines()
    bad = []
    for name, line, in_fn in _imports(module, path):
        if not in_fn:
            continue
        top, text, above = name.split(".")[0], lines[line - 1], lines[line - 2].strip() if line > 1 else ""
        if "try_import(" in text:
            ok = top in OPTIONAL_RUNTIMES
        else:
            comment = text[text.index("#"):] if "#" in text else above if above.startswith("#") else ""
            ok = (allowed or _package_allows)(module, top, comment)
        if not ok:
            bad.append(f"{module}:{line} {name}")
    return bad


def _package_allows(module: str, top: str, comment: str) -> bool:
    return bool(comment) and top in OPTIONAL_RUNTIMES and (module in STANDALONE or top in HEAVY_NOT_OPTIONAL)


def test_imports_sit_at_the_top():
    bad = [x for m, p in MODULES.items() for x in _misplaced_imports(m, p)]
    assert not bad, ("imports inside functions (move them to the module's top; an optional runtime through "
                     "nas._optional.try_import): " + "; ".join(sorted(bad)))


def test_the_import_place_check_can_fail(tmp_path):
    src = tmp_path / "snippet.py"
    src.write_text("def f():\n    import onnxruntime  # optional\n    ov = try_import('openvino')\n"
                   "    import json  # why not\n    return importlib.import_module('nas.cli.search')\n")
    assert _misplaced_imports("nas.export.onnx", src) == ["nas.export.onnx:2 onnxruntime", "nas.export.onnx:4 json",
                                                          "nas.export.onnx:5 nas.cli.search"]
    assert _misplaced_imports("nas.latency.bundle.measure_bundle", src)[0] == "nas.latency.bundle.measure_bundle:4 json"


BENCHMARKS = {("benchmarks" if p.stem == "__init__" else f"benchmarks.{p.stem}"): p
              for p in sorted((ROOT.parent / "benchmarks").glob("*.py"))}
# the benchmarks' modules that load no torch at import (python -m benchmarks --list, the startup benchmark and
# the harness every benchmark shares): a heavy import may stay in a function there, said with "# heavy: <why>"
LIGHT_BENCHMARKS = {"benchmarks.__main__", "benchmarks.harness", "benchmarks.startup"}


def _misplaced_benchmark_imports(module: str, path: Path) -> list[str]:
    """Imports inside a benchmark's function other than ``try_import`` of an optional runtime, an ``import``
    statement of an optional runtime with "# optional: <why>", or in a light module one with "# heavy: <why>"
    (the comment on the statement's line or the line above)."""
    return _misplaced_imports(module, path, _benchmark_allows)


def _benchmark_allows(module: str, top: str, comment: str) -> bool:
    said = comment.lstrip("#").strip()
    return ((said.startswith("optional:") and top in OPTIONAL_RUNTIMES)
            or (said.startswith("heavy:") and module in LIGHT_BENCHMARKS))


def test_benchmarks_import_at_the_top():
    bad = [x for m, p in BENCHMARKS.items() for x in _misplaced_benchmark_imports(m, p)]
    assert "benchmarks.modelopt" in BENCHMARKS and not bad, (
        "imports inside the benchmarks' functions (move them to the module's top; an optional runtime through "
        "nas._optional.try_import, or with '# optional: <why>'): " + "; ".join(sorted(bad)))


def test_the_benchmark_import_check_can_fail(tmp_path):
    src = tmp_path / "snippet.py"
    src.write_text("def f():\n    mtq = try_import('modelopt.torch.quantization')\n"
                   "    # optional: its [onnx] extra may be missing\n    from modelopt.onnx import quantization\n"
                   "    from nas.fit.loop import fit  # heavy: loads torch\n    import sklearn  # optional: it is not\n"
                   "    import modelopt  # why not\n    import json\n    return try_import('numpy')\n")
    assert _misplaced_benchmark_imports("benchmarks.modelopt", src) == [
        "benchmarks.modelopt:5 nas.fit.loop", "benchmarks.modelopt:6 sklearn", "benchmarks.modelopt:7 modelopt",
        "benchmarks.modelopt:8 json", "benchmarks.modelopt:9 numpy"]
    assert _misplaced_benchmark_imports("benchmarks.harness", src)[0] == "benchmarks.harness:6 sklearn"


def _private_imports(module: str, path: Path) -> list[str]:
    """``from nas.x import _name``: a private name taken from another module (``nas._io`` and the like,
    private modules of public names, are fine)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and _resolve(node, module, path.name == "__init__.py").startswith("nas"):
            out += [f"{module}:{node.lineno} {a.name}" for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def test_no_private_name_is_imported_across_modules():
    """A name another module needs is public in its own; a helper that only its module uses stays private."""
    bad = [x for m, p in (*MODULES.items(), *BENCHMARKS.items()) for x in _private_imports(m, p)]
    assert not bad, "private names of nas imported across modules (benchmarks included): " + "; ".join(sorted(bad))


def test_the_private_import_check_can_fail(tmp_path):
    src = tmp_path / "snippet.py"
    src.write_text("from nas._io import atomic_write_json\nfrom .narrow import _helper, resize_arch\n")
    assert _private_imports("nas.compress.prune", src) == ["nas.compress.prune:2 _helper"]


def _reexports(module: str, path: Path) -> list[str]:
    """Names a module (not a package's ``__init__``) lists in ``__all__`` but imports from another public
    module: a second address for the name.  A module that is the face of a private one (``nas.arch`` of
    ``nas._blocks``) may list that module's names."""
    if path.name == "__init__.py":
        return []
    tree = ast.parse(path.read_text())
    home = {a.asname or a.name: _resolve(n, module, False) for n in tree.body if isinstance(n, ast.ImportFrom)
            for a in n.names}
    out = []
    for n in tree.body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets):
            out += [f"{module}.{a} (from {home[a]})" for a in ast.literal_eval(n.value)
                    if a in home and not home[a].rpartition(".")[2].startswith("_")]
    return out


def test_one_address_per_public_name():
    bad = [x for m, p in MODULES.items() for x in _reexports(m, p)]
    assert not bad, "names re-exported by modules (import them from their own module): " + "; ".join(sorted(bad))


def test_the_reexport_check_can_fail(tmp_path):
    src = tmp_path / "snippet.py"
    src.write_text("from nas._blocks import Block\nfrom nas.search.budget import Budgets\n__all__ = ['Block', 'Budgets']\n")
    assert _reexports("nas.search.study", src) == ["nas.search.study.Budgets (from nas.search.budget)"]


def _outside_stdlib(module: str, path: Path) -> list[str]:
    """What ``module`` imports that is neither the standard library nor ``nas.machine`` itself (or ``nas._lazy``,
    the packages' lazy faces, itself standard library only)."""
    own = ("nas.machine", "nas._lazy")
    return [f"{module}:{line} {name}" for name, line, _ in _imports(module, path)
            if name.split(".")[0] not in sys.stdlib_module_names and not name.startswith(own)]


def test_the_machine_is_read_with_the_standard_library_only():
    """``nas.machine`` says what this machine is before torch or any runtime loads (a target checks its processor
    with it), and its device script runs in device bundles without them."""
    bad = [x for m, p in MODULES.items() if m == "nas.machine" or m.startswith("nas.machine.")
           for x in _outside_stdlib(m, p)]
    assert not bad, "nas.machine imports beyond the standard library: " + "; ".join(sorted(bad))


def test_the_standard_library_check_can_fail(tmp_path):
    src = tmp_path / "snippet.py"
    src.write_text("import os\nimport numpy as np\nfrom nas.machine.identity import cpu_identity\nfrom nas.target import Target\n")
    assert _outside_stdlib("nas.machine.x", src) == ["nas.machine.x:2 numpy", "nas.machine.x:4 nas.target"]


def test_every_module_has_a_layer():
    assert all(any(m == k or m.startswith(k + ".") for k in LAYERS) for m in MODULES)


def test_the_checks_can_fail(tmp_path):
    """The checks see a circle, an upward import and a function-level import in code written for them."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    found = _imports("nas.cost", ROOT / "cost.py")
    assert found and all(not in_fn for *_, in_fn in found)
    src = tmp_path / "snippet.py"
    src.write_text("import json\n\n\ndef f():\n    from nas.cli import search\n\n\nif __name__ == '__main__':\n"
                   "    import nas.train\n")
    found = _imports("nas.arch", src)
    assert ("nas.cli.search", 5, True) in found and ("nas.train", 9, False) in found  # a __main__ block counts
    assert _layer(_internal("nas.cli.search")) > _layer("nas.arch")  # an upward import, as the layer check sees it
    src.write_text("HOMES = {'run': 'nas.cli.search', 'Arch': 'arch'}\n__getattr__, __dir__ = lazy_exports(__name__, HOMES)\n")
    assert _imports("nas.space", src) == [("nas.cli.search", 2, False), ("nas.space.arch", 2, False)]  # lazy exports count


def _command_problems(repo: Path) -> list[str]:
    """What is missing from each command's places (docs/contributing.md, "Adding a command"): the console
    script ``hwnas-<cmd> = "nas.cli.<cmd>:main"``, the shim ``nas/<cmd>.py`` or ``nas/<cmd>/__main__.py``
    importing that ``main``, and for a Hydra command (one with ``conf/<cmd>.yaml``) the schema module
    ``nas/config/<cmd>.py`` whose ``register_<cmd>_configs`` stores ``_<cmd>_schema``, which the YAML's defaults
    list names and the command module registers at import."""
    section = (repo / "pyproject.toml").read_text().split("[project.scripts]")[1].split("\n[")[0]
    scripts = dict(re.findall(r'^(hwnas-[\w-]+) = "([^"]+)"', section, re.M))  # tomllib: Python 3.11+
    problems = []
    for script, entry in sorted(scripts.items()):
        cmd = script.removeprefix("hwnas-")
        if entry != f"nas.cli.{cmd}:main":
            problems.append(f"{script}: {entry}, not nas.cli.{cmd}:main")
            continue
        shims = [p for p in (repo / "nas" / f"{cmd}.py", repo / "nas" / cmd / "__main__.py") if p.is_file()]
        if [p.read_text().count(f"from nas.cli.{cmd} import main") for p in shims] != [1]:
            problems.append(f"{cmd}: no single shim importing nas.cli.{cmd}.main")
        yaml, schema = repo / "conf" / f"{cmd}.yaml", repo / "nas" / "config" / f"{cmd}.py"
        cli = (repo / "nas" / "cli" / f"{cmd}.py").read_text()
        if not yaml.is_file():
            if schema.is_file() or "hydra_app(" in cli:
                problems.append(f"{cmd}: a schema or hydra_app without conf/{cmd}.yaml")
            continue
        if f"- _{cmd}_schema" not in yaml.read_text():
            problems.append(f"conf/{cmd}.yaml: its defaults list does not name _{cmd}_schema")
        tree = ast.parse(schema.read_text()) if schema.is_file() else ast.Module(body=[], type_ignores=[])
        register = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == f"register_{cmd}_configs"]
        if not register or f"_{cmd}_schema" not in ast.unparse(register[0]):
            problems.append(f"nas/config/{cmd}.py: no register_{cmd}_configs storing _{cmd}_schema")
        calls = [n for n in ast.parse(cli).body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
        if f"register_{cmd}_configs()" not in [ast.unparse(n) for n in calls]:
            problems.append(f"nas/cli/{cmd}.py: does not call register_{cmd}_configs() at import")
    return problems


def test_every_command_has_its_places():
    assert not _command_problems(ROOT.parent)


def test_the_command_check_can_fail(tmp_path):
    """A command whose schema sits in another module (the shared one) is found."""
    for part in ("pyproject.toml", "conf", "nas"):
        src = ROOT.parent / part
        if src.is_dir():
            shutil.copytree(src, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, tmp_path / part)
    (tmp_path / "nas" / "config" / "predict.py").unlink()
    assert _command_problems(tmp_path) == ["nas/config/predict.py: no register_predict_configs storing _predict_schema"]


def test_modules_and_functions_stay_small():
    """A module over MAX_MODULE_LINES or a function over MAX_FUNCTION_LINES holds more than one concern."""
    tests = Path(__file__).resolve().parent
    big = []
    for folder in (ROOT, tests.parent / "benchmarks", tests):
        for path in sorted(folder.rglob("*.py")):
            text = path.read_text()
            where = path.relative_to(folder.parent)
            if len(text.splitlines()) > MAX_MODULE_LINES:
                big.append(f"{where}: {len(text.splitlines())} lines")
            for n in ast.walk(ast.parse(text)):
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    first = min([n.lineno, *(d.lineno for d in n.decorator_list)])
                    if n.end_lineno - first + 1 > MAX_FUNCTION_LINES:
                        big.append(f"{where}:{n.lineno} {n.name}: {n.end_lineno - first + 1} lines")
    assert not big, (f"over {MAX_MODULE_LINES} lines a module, {MAX_FUNCTION_LINES} a function: "
                     + "; ".join(big))
