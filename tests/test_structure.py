"""The package's structure, checked by reading its source: no import cycle between modules or folders, imports
only down the layers, short functions and modules, statuses,
run kinds, trial roles and the config's choices only through their enums (which validation, --help and the YAML
comments read), and the typed config read by attribute outside the config package."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from pipeline import knobs
from pipeline.config import choices
from pipeline.config.accepted import choices_of, field_choices
from pipeline.config.errors import ConfigError
from pipeline.config.help import help_text
from pipeline.config.validate import validate
from pipeline.records import RunKind, RunState, Status
from pipeline.search._trials import Role

PACKAGE = Path(__file__).resolve().parents[1] / "pipeline"
MODULES = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts): p for p in PACKAGE.rglob("*.py")}
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 300


@functools.cache
def _source(path: Path) -> str:
    return path.read_text()


@functools.cache
def _parsed(path: Path) -> ast.AST:
    """A module's tree, parsed once for every check that reads it (none changes it)."""
    return ast.parse(_source(path))


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
    return {_name(m): _imports(m, _parsed(p)) for m, p in MODULES.items()}


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
        for node in ast.walk(_parsed(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {lines} lines")
    assert not long, long


def test_no_module_is_longer_than_three_hundred_lines():
    """A module holds one concept: one that grows past this is carved by concept, not left to grow."""
    long = [
        f"{module}: {n} lines"
        for module, path in MODULES.items()
        if (n := len(_source(path).splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, long


ENUMS = {  # values, and the module that alone may spell them
    "MLflow run status": ({s.value for s in RunState}, "pipeline.records"),
    "run kind": ({k.value for k in RunKind}, "pipeline.records"),
    "trial role": ({r.value for r in Role}, "pipeline.search._trials"),
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
        for line, value in _literal_uses(_parsed(path))
        if value in values
    ]
    assert not found, found


ENTRY_POINTS = ("train", "optimize", "report", "card", "export", "ui", "dashboard")  # python -m pipeline.<name>

# The layers of the README's layout, top to bottom: a module imports only from its own layer's package or below.
LAYERS = [
    set(ENTRY_POINTS),
    {"api"},
    {"commands"},
    {"answer"},
    {"search"},
    {"jobs"},
    {"render"},
    {"compare", "measure", "tracking", "builders"},
    {"config"},
    {"knobs"},
    {"records", "summaries", "exits", "liveness", "progress", "whole", "adapters", "__init__"},
]


def _documented_layers() -> list[set[str]]:
    """The layer line of docs/development.md, top to bottom, as LAYERS spells it: `a → b, c → ...`."""
    text = (PACKAGE.parent / "docs" / "development.md").read_text(encoding="utf-8")
    paragraph = " ".join(
        text.partition("\nLayers, each importing only from those below it: ")[2].split("\n\n")[0].split()
    )
    line = paragraph.split(". ")[0]
    layers = [{name.strip(" `") for name in part.split(",")} for part in line.split("→")]
    layers[0] = set(ENTRY_POINTS)  # "the entry points (`pipeline/<command>.py`)"
    return layers


def test_the_layers_are_the_ones_the_development_page_draws():
    """The rooms and their order as docs/development.md states them are the ones this file enforces, and every
    folder and top-level module of the package is in one of them and in the page's layout."""
    assert _documented_layers()[1:] == [layer - {"__init__"} for layer in LAYERS[1:]]
    layout = (PACKAGE.parent / "docs" / "development.md").read_text(encoding="utf-8").partition("## Layout")[2]
    parts = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    parts |= {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"} - set(ENTRY_POINTS)
    assert all(any(part in layer for layer in LAYERS) for part in parts), parts
    assert not [part for part in parts if f"  {part}/" not in layout and f"  {part}.py" not in layout]


def _layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else "__init__"
    return next(i for i, layer in enumerate(LAYERS) if part in layer)


def test_every_import_goes_down_the_layers_of_the_readme():
    upward = [
        f"{a} -> {b}" for a, targets in _graph().items() for b in targets if _layer(b) < _layer(a) and a != "pipeline"
    ]
    assert not upward, upward


def _part(module: str) -> str:
    """A module's top-level part of the package: its folder, or itself at the top."""
    return module.split(".")[1] if "." in module else "__init__"


def _folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between the package's top-level parts (`search`, `jobs`, `records`, ...)."""
    found: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module != "pipeline":
            found.setdefault(_part(module), set()).update(_part(t) for t in targets if t != "pipeline")
    return {part: targets - {part} for part, targets in found.items()}


def test_no_folder_imports_upward_or_in_a_circle():
    """Folder by folder: each imports only from its own layer or below, and no two folders import each other, even
    through others (a module-level check misses a circle between two folders of one layer)."""
    folders = _folder_graph(_graph())
    upward = [f"{a} -> {b}" for a, targets in folders.items() for b in targets if _layer(b) < _layer(a)]
    assert not upward, upward
    assert _cycle(folders) is None, " -> ".join(_cycle(folders))


def test_an_entry_point_only_runs_its_command():
    """`python -m pipeline.<name>` is one line of the commands package: the command's code lives there, and the
    top of the package holds the entry points, the Python API and the records every layer shares."""
    for name in ENTRY_POINTS:
        tree = _parsed(PACKAGE / f"{name}.py")
        imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        assert [(i.module, [a.name for a in i.names]) for i in imports] == [(f"pipeline.commands.{name}", ["main"])]
        assert len(tree.body) == 3, f"pipeline/{name}.py does more than run pipeline.commands.{name}.main"
    top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert {p.stem for p in (PACKAGE / "commands").glob("*.py")} - {
        "__init__",
        "cli",
        "interrupts",
        "arguments",
        "mlflow_app",
        "sweep_callback",
    } == set(ENTRY_POINTS), "a command without its entry point, or the reverse"
    assert not top & {"cli", "interrupts", "arguments", "mlflow_app", "sweep_callback"}, (
        "the commands' own modules belong in pipeline/commands"
    )


def test_the_folder_graph_sees_a_circle_between_folders():
    graph = {"pipeline.a.x": {"pipeline.b.y"}, "pipeline.b.y": {"pipeline.c"}, "pipeline.c": {"pipeline.a.z"}}
    assert _cycle(_folder_graph(graph)) == ["a", "b", "c", "a"]


def _private_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """Imports of another package's private name: a module or a name below it that starts with `_`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] not in ("pipeline", "__future__") and any(p.startswith("_") for p in name.split(".")):
                found.append((node.lineno, name))
                break
    return found


def test_a_librarys_private_api_is_reached_only_through_an_adapter():
    """An upgrade that moves a private name breaks one module of pipeline/adapters and its test
    (tests/test_adapters.py), not a job somewhere."""
    found = [
        f"{module}:{line}: {name}"
        for module, path in MODULES.items()
        if not module.startswith("pipeline.adapters.")
        for line, name in _private_imports(_parsed(path))
    ]
    assert not found, found
    assert _private_imports(ast.parse("from a._b import c\nfrom d import _e\nimport f._g\nfrom h import i")) == [
        (1, "a._b"),
        (2, "d._e"),
        (3, "f._g"),
    ]


CONFIG_READERS = {"cfg", "config", "model", "lora", "gpu", "batch", "train", "measure", "optimize", "launcher"}


def _config_subscripts(tree: ast.AST) -> list[tuple[int, str]]:
    """`cfg["train"]`, `spec.config["model"]["name"]`, `train["steps"]`: a config section or field read by a string
    subscript (the typed config is read by attribute)."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)):
            continue
        if not isinstance(node.slice.value, str):
            continue
        base = node.value
        while isinstance(base, ast.Subscript):
            base = base.value
        name = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else None
        if name in CONFIG_READERS:
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_config_is_read_by_attribute_outside_the_config_package():
    found = [
        f"{module}:{line}: {text}"
        for module, path in MODULES.items()
        if not module.startswith("pipeline.config.")
        for line, text in _config_subscripts(_parsed(path))
    ]
    assert not found, found


def test_the_subscript_finder_finds_one():
    tree = ast.parse('x = spec.config["train"]["steps"] + cfg["model"]\ny = attrs["times"]')
    assert sorted(text for _, text in _config_subscripts(tree)) == [
        "cfg['model']",
        "spec.config['train']",
        "spec.config['train']['steps']",
    ]


SHARED_WORDS = {"auto"}  # a knob's choice that is another field's word too (the gpu profile `auto`)
CHOICE_ENUMS = {  # the config's enums whose values are words of their own: spelled only through the enum
    enum.__name__: ({m.value for m in enum} - SHARED_WORDS, enum.__module__)
    for enum in (
        *(k.choices for k in knobs.registry() if k.choices is not None),  # every speed knob's
        choices.ModelSource,
        choices.DataKind,
        choices.LauncherKind,
    )
}


def _knob_spellings(tree: ast.AST, text: str) -> list[tuple[int, str]]:
    """Where a module spells a speed knob's key: its full key in a string (`"train.padding"`, a docstring's
    `train.padding=max_length`), its field read off a config section (`cfg.train.padding`, `t.padding` where
    `t = config.train`), an import of its module (`pipeline.knobs.padding`), or, for a name that is no word of its
    own (`gradient_checkpointing`), the name anywhere, comments included."""
    found = []
    registry = knobs.registry()
    keys = re.compile("|".join(rf"\b{re.escape(k.key)}\b" for k in registry))
    names = {k.name: k.section for k in registry}
    modules = {type(k).__module__ for k in registry}
    aliases = {k.section: k.section for k in registry}
    for node in ast.walk(tree):  # `t = config.train`, `d, t = config.data, config.train`
        if isinstance(node, ast.Assign):
            targets = node.targets[0].elts if isinstance(node.targets[0], ast.Tuple) else node.targets
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for target, value in zip(targets, values, strict=False):
                if isinstance(target, ast.Name) and isinstance(value, ast.Attribute) and value.attr in aliases:
                    aliases[target.id] = value.attr
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and keys.search(node.value):
            found.append((node.lineno, keys.search(node.value).group()))
        elif isinstance(node, ast.Attribute) and node.attr in names:
            owner = node.value
            section = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", None)
            if aliases.get(section) == names[node.attr]:
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            found += [(node.lineno, m) for m in imported if m in modules]
    odd = [name for name in names if "_" in name]
    for number, line in enumerate(text.splitlines(), start=1):
        found += [(number, name) for name in odd if re.search(rf"\b{name}\b", line)]
    return found


def test_no_module_outside_the_knobs_spells_a_knobs_key():
    """A knob holds its own rules: every other module reads it through the registry (each knob's methods, or the
    knob of a role: `pipeline.knobs.role`), so that a knob is changed, or added, in its module alone."""
    found = [
        f"{module}:{line}: {what}"
        for module, path in MODULES.items()
        if not module.startswith("pipeline.knobs.")
        for line, what in _knob_spellings(_parsed(path), _source(path))
    ]
    assert not found, found


def test_the_knob_key_finder_finds_each_spelling():
    code = (
        "from pipeline.knobs.padding import Padding\n"
        "d, t = config.data, config.train\n"
        "x = cfg.train.gradient_checkpointing or t.padding or m.padding or self.dtype\n"
        "y = {'train.dtype': 1, 'loss': 2}  # liger_kernel\n"
        "def f(train, model):\n"
        "    '''The knob train.torch_compile=regional.'''\n"
        "    return train.loss, model.attn_implementation, probe.loss\n"
    )
    assert sorted(_knob_spellings(ast.parse(code), code)) == [
        (1, "pipeline.knobs.padding"),
        (3, "cfg.train.gradient_checkpointing"),
        (3, "gradient_checkpointing"),
        (3, "t.padding"),
        (4, "liger_kernel"),
        (4, "train.dtype"),
        (6, "torch_compile"),
        (6, "train.torch_compile"),
        (7, "attn_implementation"),
        (7, "model.attn_implementation"),
        (7, "train.loss"),
    ]


@pytest.mark.parametrize("name", list(CHOICE_ENUMS))
def test_a_fields_choices_are_compared_only_through_its_enum(name):
    values, owner = CHOICE_ENUMS[name]
    found = [
        f"{module}:{line}: {value!r}"
        for module, path in MODULES.items()
        if module != owner
        for line, value in _literal_uses(_parsed(path))
        if value in values
    ]
    assert not found, found


@pytest.mark.parametrize("key", list(field_choices()))
def test_validation_and_help_read_a_fields_choices_from_its_enum(key, compose):
    enum, aliases = field_choices()[key]
    accepted = [m.value for m in enum]
    assert f"{key:<27} {' | '.join([*accepted, *aliases])}" in help_text("pipeline.train", "x\n\ny")
    if aliases:  # read by its own parser (train.torch_compile), which names the aliases too
        return
    cfg = compose(f"{key}=no_such_value")
    with pytest.raises(ConfigError) as refused:
        validate(cfg)
    assert str(refused.value) == f"{key}: got 'no_such_value'; accepted: {', '.join(accepted)}"


def test_the_yaml_comments_list_a_fields_choices_as_its_enum_does():
    """A comment `# a | b | c` beside a key of a conf/ file names exactly that field's choices (the enum's)."""
    wrong = []
    for path in sorted((PACKAGE.parent / "conf").rglob("*.yaml")):
        group = path.parent.name
        for number, line in enumerate(_source(path).splitlines(), start=1):
            key, _, rest = line.partition(":")
            comment = rest.partition("#")[2]
            if " | " not in comment or line.startswith(" "):
                continue
            listed = [part.strip().split()[0].strip("\"':(;,") for part in comment.split("|")]
            accepted = choices_of(f"{group}.{key.strip()}")
            if accepted is None or set(listed) != set(accepted) - {"true", "false"}:
                wrong.append(f"{path.name}:{number}: {listed} against {accepted}")
    assert not wrong, wrong


def _public_classes(modules: dict[str, Path]) -> dict[str, list[str]]:
    """Each public class name the package defines at a module's top, with the modules that define it."""
    found: dict[str, list[str]] = {}
    for module, path in sorted(modules.items()):
        for node in _parsed(path).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found.setdefault(node.name, []).append(module)
    return found


def test_no_two_modules_define_a_class_of_one_name():
    """`Memory` or `Fit` names one thing in the package: a reader (and an import) never has to ask which."""
    twins = {name: modules for name, modules in _public_classes(MODULES).items() if len(modules) > 1}
    assert not twins, twins


SEARCH_MODULES = {_name(m) for m in MODULES if m.startswith("pipeline.search.")}


def _search_internals(tree: ast.AST) -> list[tuple[int, str]]:
    """Imports of one of `pipeline.search`'s own modules: named (`pipeline.search._trials`), or taken by name from
    the package (`from pipeline.search import _trials`)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("pipeline.search.")]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.startswith("pipeline.search."):
                found.append((node.lineno, node.module))
            elif node.module == "pipeline.search":
                named = [f"pipeline.search.{a.name}" for a in node.names]
                found += [(node.lineno, name) for name in named if name in SEARCH_MODULES]
    return found


def test_code_outside_the_search_imports_only_its_front_door():
    """The study is reached through `pipeline.search`'s names (its __init__), so that its modules can be split,
    merged or renamed without an edit outside it."""
    found = [
        f"{module}:{line}: {name}"
        for module, path in MODULES.items()
        if not module.startswith("pipeline.search.")
        for line, name in _search_internals(_parsed(path))
    ]
    assert not found, found
    sample = "from pipeline.search import _trials, TrialRecord\nimport pipeline.search.study\nfrom pipeline.search.x import y"
    assert _search_internals(ast.parse(sample)) == [
        (1, "pipeline.search._trials"),
        (2, "pipeline.search.study"),
        (3, "pipeline.search.x"),
    ]


def test_the_search_modules_behind_its_front_door_are_private_by_name():
    """Optuna's shape: the package's names are its door, and only `study` (the loop) is a public module; a module
    added to the search without a leading underscore is caught here."""
    public = sorted(m for m in SEARCH_MODULES - {"pipeline.search"} if not m.split(".")[2].startswith("_"))
    assert public == ["pipeline.search.study"], public
    assert "pipeline.search._trials" in SEARCH_MODULES  # the finder sees the private modules too


def test_every_name_of_the_search_front_door_resolves():
    import pipeline.search as search

    missing = [name for name in search.__all__ if getattr(search, name, None) is None]
    assert not missing, missing
    assert not set(search.__all__) & {m.rpartition(".")[2] for m in SEARCH_MODULES}, "a name that hides a module"
    with pytest.raises(AttributeError):
        search.no_such_name  # noqa: B018


def _defined_names(trees: list[ast.AST]) -> set[str]:
    """Every name the package defines: its functions, classes and methods, and whatever it assigns (module and class
    attributes, `self._x = ...`), so that a private name of its own reads as its own."""
    found: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for part in ast.walk(target):
                        if isinstance(part, ast.Name):
                            found.add(part.id)
                        elif isinstance(part, ast.Attribute):
                            found.add(part.attr)
    return found


def _private_attributes(tree: ast.AST, own: set[str]) -> list[tuple[int, str]]:
    """`study._storage`, `trial._trial_id`: an attribute of one leading underscore (not a dunder) on anything but
    `self` or `cls`, named nowhere in the package (`own`): another library's private attribute."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if node.attr not in own:
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_a_librarys_private_attribute_is_read_only_through_an_adapter():
    """An object of another library is read by its public attributes outside pipeline/adapters; what has no public
    equivalent gets an adapter, checked against the installed version by tests/test_adapters.py."""
    trees = {module: _parsed(path) for module, path in MODULES.items()}
    own = _defined_names(list(trees.values()))
    found = [
        f"{module}:{line}: {text}"
        for module, tree in trees.items()
        if not module.startswith("pipeline.adapters.")
        for line, text in _private_attributes(tree, own)
    ]
    assert not found, found


def test_the_private_attribute_finder_finds_one():
    sample = (
        "class A:\n    def f(self, other):\n        self._a = 1\n        return other._a, self._b, x._c, x.__dict__\n"
    )
    tree = ast.parse(sample + "y = study._storage.get_trial(t._trial_id)\n")
    found = sorted(_private_attributes(tree, _defined_names([tree])))
    assert found == [(4, "x._c"), (5, "study._storage"), (5, "t._trial_id")]


def _private_to(importer: str, name: str) -> bool:
    """Whether module `importer` may use `name`: a private module (`pipeline.search._trials`) belongs to the package
    above it, whose modules import it; a private name in a module (`pipeline.config.plan._repeat`) to that module."""
    modules = {_name(m) for m in MODULES}
    parts = name.split(".")
    for i, part in enumerate(parts):
        if not part.startswith("_") or part.startswith("__"):
            continue
        owner = ".".join(parts[:i])
        if ".".join(parts[: i + 1]) in modules:
            if not (importer == owner or importer.startswith(owner + ".")):
                return False
        elif importer != owner:
            return False
    return True


def _others_private_names(module: str, tree: ast.AST) -> list[tuple[int, str]]:
    """Another pipeline module's private name used here: `from pipeline.a import _b`, or `m._b` where `m` is a
    pipeline module this one imported (`from pipeline.commands import cli` ... `cli._run`)."""
    names = {_name(m) for m in MODULES}
    bound: dict[str, str] = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pipeline"):
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                if not _private_to(module, target):
                    found.append((node.lineno, target))
                if f"{node.module}.{alias.name}" in names:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            bound.update({a.asname: a.name for a in node.names if a.asname and a.name in names})
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound):
            continue
        if node.attr.startswith("_") and not node.attr.startswith("__") and bound[node.value.id] != module:
            found.append((node.lineno, f"{bound[node.value.id]}.{node.attr}"))
    return found


def test_a_modules_private_names_are_its_own():
    """A name with a leading underscore is used in its module alone: what another module calls is public (the
    Python API calls the command line's precheck and Hydra run as `cli.checked_argv` and `cli.run_hydra`)."""
    found = [
        f"{module}:{line}: {name}"
        for module, path in MODULES.items()
        for line, name in _others_private_names(_name(module), _parsed(path))
    ]
    assert not found, found
    sample = (
        "from pipeline.commands import cli\nfrom pipeline.config.plan import _repeat\ncli._run(cli.main)\n"
        "from pipeline.search import _trials\nfrom pipeline.search._trials import Role\n"
    )
    assert _others_private_names("pipeline.api", ast.parse(sample)) == [
        (2, "pipeline.config.plan._repeat"),
        (4, "pipeline.search._trials"),
        (5, "pipeline.search._trials.Role"),
        (3, "pipeline.commands.cli._run"),
    ]
    assert _others_private_names("pipeline.search._telling", ast.parse(sample.split("\n", 3)[3])) == []


# Outside data is parsed once, where it enters, into a typed object; past that, code reads attributes.
BOUNDARY_READERS = {  # module or folder: why its `.get("...")` reads are the parsing itself
    "pipeline.records": "the records that cross a process boundary, each with its from_json/from_dict",
    "pipeline.summaries": "a job's summary read back from its MLflow run's metrics",
    "pipeline.tracking": "the only code that talks to MLflow: tags, params, metrics and artifacts read back",
    "pipeline.adapters": "a library's own structures (Optuna's system attributes, Dynamo's counters, ...)",
    "pipeline.config": "Hydra's raw config and overrides, conf/, the user's data files, a model's config.json",
}
PARSERS = re.compile(r"_*(of|from_\w+)")  # a typed object's constructor from its stored form: `Card.from_json`, ...
EVERYWHERE = {  # a receiver that holds no outside record wherever it is read
    "os.environ": "the process's own environment: a setting read where it applies",
    "sys.modules": "the modules this process imported",
    "kwargs": "a function's own keyword arguments",
    "self.__dict__": "an object's own attributes",
    "frame.f_globals": "a traceback frame's module globals",
}
INTERNAL = {  # (module or folder, receiver): why that mapping is no outside record
    ("pipeline.knobs", "setting"): "a point of the space as config keys to values: a key absent holds its default",
    ("pipeline.builders.dataset", "message"): "a chat turn of a record the up-front check held to its form",
    ("pipeline.builders.dataset", "call"): "a tool call of such a turn (OpenAI's form or bare, as the check allows)",
    ("pipeline.builders.dataset", "function"): "that call's name and arguments, the arguments optional",
    ("pipeline.answer.script", "sft"): "SFTConfig's keywords the script prints as they are: absent is TRL's default",
    ("pipeline.answer.card_merge", "card.setting"): "a card's setting: an open mapping keyed by config key",
    ("pipeline.answer.study_pages", "trial"): "optuna-dashboard's JSON of a trial, changed and passed on whole",
    ("pipeline.answer.study_pages", "environ"): "the WSGI request this middleware answers",
    ("pipeline.answer.study_pages", "query"): "that request's query, parsed a line above",
    ("pipeline.commands.mlflow_app", "request.query_params"): "the HTTP request this page answers",
    ("pipeline.jobs.child", "self.timings"): "the job's own timings, kept by this process",
    ("pipeline.jobs.stall", "record"): "a running job's steps file as it grows: two figures, before any record",
    ("pipeline.measure.callback", "logs"): "the Trainer's log of this step, handed to on_log: read into the Step",
    ("pipeline.measure.clock", "spent"): "Dynamo's timers by phase name (adapters.dynamo): not timed is 0",
    ("pipeline.measure.first_batch", "p"): "a row the Trainer's own preparation made in this process",
}


def _within(module: str, owner: str) -> bool:
    return module == owner or module.startswith(f"{owner}.")


def _literal_gets(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, receiver, function) of every `receiver.get("key", ...)` with a literal key, and the function around it
    (its innermost `def`; "" at module level)."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
            call = child.func if isinstance(child, ast.Call) else None
            if isinstance(call, ast.Attribute) and call.attr == "get" and child.args:
                key = child.args[0]
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    found.append((child.lineno, ast.unparse(call.value), function))
            visit(child, inner)

    visit(tree, "")
    return found


def _boundary_reads(module: str, tree: ast.AST) -> list[tuple[int, str]]:
    """The `.get("...")` reads of `module` that are neither a boundary reader's nor on a known internal mapping."""
    if any(_within(module, owner) for owner in BOUNDARY_READERS):
        return []
    return [
        (line, receiver)
        for line, receiver, function in _literal_gets(tree)
        if not PARSERS.fullmatch(function)
        and receiver not in EVERYWHERE
        and not any(_within(module, owner) and receiver == known for owner, known in INTERNAL)
    ]


def test_outside_data_is_read_by_attribute_past_its_boundary():
    """Data from outside the process (MLflow's tags, params and metrics, Optuna's attributes, a job's JSON files, a
    card, Hydra's raw config) is parsed once where it enters, into a dataclass or enum, and read by attribute after.

    The rule, on every `x.get("literal", ...)`: it stands in a boundary reader (BOUNDARY_READERS, the modules whose
    job is that parsing), or in a typed object's constructor from its stored form (a function named `of` or
    `from_*`: `Card.from_json`, `TrialRecord.of`), or its receiver is a mapping that holds no outside record
    (EVERYWHERE: the environment, a function's keywords; INTERNAL: a module's own mapping, each with its reason).
    Anything else is an outside record read by key past its boundary. A key held in a constant (`tags.get(runs.X)`)
    is not seen: the rule reads literal keys."""
    found = [
        f"{module}:{line}: {receiver}.get"
        for module, path in MODULES.items()
        for line, receiver in _boundary_reads(_name(module), _parsed(path))
    ]
    assert not found, found
    used = {
        (owner, known)
        for module, path in MODULES.items()
        for _, receiver, _ in _literal_gets(_parsed(path))
        for owner, known in INTERNAL
        if _within(_name(module), owner) and receiver == known
    }
    assert used == set(INTERNAL), f"INTERNAL entries no module reads: {set(INTERNAL) - used}"


def test_the_boundary_read_finder_finds_one():
    sample = (
        "import os\n"
        "def show(card, kwargs):\n"
        "    return card.device.get('name'), os.environ.get('HOME'), kwargs.get('x'), card.get(KEY)\n"
        "class Device:\n"
        "    @classmethod\n"
        "    def from_json(cls, data):\n"
        "        return cls(data.get('name'))\n"
    )
    assert _boundary_reads("pipeline.answer.shown", ast.parse(sample)) == [(3, "card.device")]
    assert _boundary_reads("pipeline.tracking.shown", ast.parse(sample)) == []
