"""The package's structure, checked by reading its source: no import cycle, short functions, and statuses, run
kinds and trial roles only through their enums."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pipeline.records import RunKind, RunState, Status
from pipeline.search.trials import Role

PACKAGE = Path(__file__).resolve().parents[1] / "pipeline"
MODULES = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts): p for p in PACKAGE.rglob("*.py")}
MAX_FUNCTION_LINES = 60


def _name(module: str) -> str:
    return module.removesuffix(".__init__")


def _imports(module: str, tree: ast.AST) -> set[str]:
    """Every pipeline module `module` imports, anywhere in it (functions and TYPE_CHECKING blocks included)."""
    found = set()
    package = _name(module) if module.endswith("__init__") else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {name for name in names if name in {_name(m) for m in MODULES}}
    return found - {_name(module)}


def _graph() -> dict[str, set[str]]:
    return {_name(m): _imports(m, ast.parse(p.read_text())) for m, p in MODULES.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules on it; None when there is none."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_package_has_no_import_cycle():
    assert _cycle(_graph()) is None, " -> ".join(_cycle(_graph()))


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_function_is_longer_than_sixty_lines():
    long = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {lines} lines")
    assert not long, long


ENUMS = {  # values, and the module that alone may spell them
    "MLflow run status": ({s.value for s in RunState}, "pipeline.records"),
    "run kind": ({k.value for k in RunKind}, "pipeline.records"),
    "trial role": ({r.value for r in Role}, "pipeline.search.trials"),
    "status": ({s.value for s in Status}, "pipeline.records"),
}


def _literal_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants compared with something (==, !=, in) or written into an MLflow filter (`= 'study'`), and
    every constant spelled like an MLflow run status (upper case: no other word of the package is)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                if isinstance(side, ast.Constant) and isinstance(side.value, str):
                    found.append((side.lineno, side.value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text in {s.value for s in RunState}:
                found.append((node.lineno, text))
            found += [(node.lineno, v) for values, _ in ENUMS.values() for v in values if f"= '{v}'" in text]
    return found


@pytest.mark.parametrize("what", list(ENUMS))
def test_statuses_kinds_and_roles_are_spelled_only_by_their_enum(what):
    values, owner = ENUMS[what]
    found = [
        f"{module}:{line}: {value!r}"
        for module, path in MODULES.items()
        if _name(module) != owner
        for line, value in _literal_uses(ast.parse(path.read_text()))
        if value in values
    ]
    assert not found, found


# The layers of the README's layout, top to bottom: a module imports only from its own layer's package or below.
LAYERS = [
    {"train", "optimize", "report", "ui", "ui_server", "dashboard", "card", "api", "export"},
    {"cli"},
    {"search"},
    {"jobs"},
    {"reporting", "results"},
    {"compare", "measure", "tracking", "builders"},
    {"config"},
    {"records", "exits", "liveness", "progress", "__init__"},
]


def _layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else "__init__"
    return next(i for i, layer in enumerate(LAYERS) if part in layer)


def test_every_import_goes_down_the_layers_of_the_readme():
    upward = [
        f"{a} -> {b}" for a, targets in _graph().items() for b in targets if _layer(b) < _layer(a) and a != "pipeline"
    ]
    assert not upward, upward
