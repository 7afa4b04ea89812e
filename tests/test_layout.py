"""The package's shape: no import cycles, imports run down the pipeline's layers, modules and functions stay small.

Only imports executed when a module loads count (module level, not under ``TYPE_CHECKING``);
an import inside a function is a deliberate late binding.  The size rule (docs/contributing.md)
holds for the package, the benchmark scripts and the tests alike.
"""

import ast
from pathlib import Path

import nas

ROOT = Path(nas.__file__).resolve().parent

# lower number = lower layer; a module may import only from its own layer or below
LAYERS = {
    "nas.cli": 6, "nas.config": 5,  # the Hydra schemas are generated from the library's settings
    "nas.train": 4, "nas.search": 4, "nas.supernet": 4,
    "nas.compress": 3, "nas.export": 3, "nas.latency": 3,
    "nas.data": 2, "nas.builder": 2, "nas.cost": 2, "nas.space": 2, "nas._space_yaml": 2, "nas.narrow": 2,
    "nas.from_timm": 2, "nas._timm_blocks": 2, "nas.target": 2,
    "nas.arch": 1, "nas._blocks": 1, "nas.registry": 0, "nas._checks": 0, "nas.resources": 0, "nas._io": 0, "nas._lazy": 0, "nas": 0,
}
ENTRY_SHIMS = {"nas.profile", "nas.predict", "nas.validate", "nas.repair"}  # python -m nas.<command> -> nas.cli
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80  # from the def (or its first decorator) to its last line, docstring included


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _load_time_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()

    def visit(nodes):
        for n in nodes:
            if isinstance(n, ast.If) and ("TYPE_CHECKING" in ast.unparse(n.test) or "__main__" in ast.unparse(n.test)):
                continue
            if isinstance(n, ast.Import):
                out.update(a.name for a in n.names if a.name.startswith("nas"))
            elif isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("nas") and n.level == 0:
                out.add(n.module)
            elif isinstance(n, (ast.If, ast.Try, ast.With)):
                visit(n.body)
                visit(getattr(n, "orelse", []))
                for h in getattr(n, "handlers", []):
                    visit(h.body)

    visit(tree.body)
    return out


def _graph() -> dict[str, set[str]]:
    mods = {_module_name(p): p for p in ROOT.rglob("*.py")}
    return {m: {i for i in _load_time_imports(p) if i in mods and i != m} for m, p in mods.items()}


def _layer(mod: str) -> int:
    best = max((k for k in LAYERS if mod == k or mod.startswith(k + ".")), key=len)
    return LAYERS[best]


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}

    def dfs(m, stack):
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycle = stack[stack.index(d):] + [d]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if d not in state:
                dfs(d, stack + [d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            dfs(m, [m])


def test_imports_run_down_the_layers():
    graph = _graph()
    up = [f"{m} imports {d}" for m, deps in graph.items() if m not in ENTRY_SHIMS and not m.endswith("__main__")
          for d in deps if _layer(d) > _layer(m)]
    assert not up, "imports that run up the layers: " + "; ".join(sorted(up))


def test_every_module_has_a_layer():
    assert all(any(m == k or m.startswith(k + ".") for k in LAYERS) for m in _graph())


def test_modules_and_functions_stay_small():
    """A module over MAX_MODULE_LINES or a function over MAX_FUNCTION_LINES is split along a seam of
    its job (the module it came from re-exports what moved, so every import keeps working)."""
    tests = Path(__file__).resolve().parent
    big = []
    for folder in (ROOT, tests.parent / "scripts", tests):
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
