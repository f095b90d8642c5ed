"""The import layer rules of docs/architecture.md, checked on the source with ``ast``.

Imports flow downward only; packages on one line do not import each other; ``errors`` and
``units`` use only the standard library; ``config`` never imports torch; only
``engine/backend.py`` imports Lightning. Imports inside functions count too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, clean_env

PACKAGE = ROOT / "src" / "entrena"

# Top first; one entry per line of the blueprint.
LAYERS = [
    {"cli"},
    {"api"},
    {"recipes"},
    {"tuning", "reporting", "launching"},
    {"engine", "planning"},
    {"tasks"},
    {"exporting"},
    {"data", "callbacks", "tracking"},
    {"core", "config", "hardware"},
    {"errors", "units"},
]
LEVEL = {name: len(LAYERS) - i for i, names in enumerate(LAYERS) for name in names}


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def component(path: Path) -> str:
    """``src/entrena/data/tables.py`` -> ``data``; ``src/entrena/cli.py`` -> ``cli``."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0]


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package_parts = ["entrena", *path.relative_to(PACKAGE).parent.parts]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[:len(package_parts) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append((node.lineno, name))
            if node.module is None or name == "entrena":  # from entrena import x: x may be a module
                found.extend((node.lineno, f"{name}.{a.name}") for a in node.names)
    return found


def entrena_target(module: str) -> str | None:
    """The component an ``entrena...`` import targets (``""`` for the package root)."""
    if module == "entrena":
        return ""
    if module.startswith("entrena."):
        target = module.split(".")[1]
        return target if target in LEVEL else None
    return None


def test_every_component_is_placed_in_a_layer():
    unplaced = {component(p) for p in modules()} - set(LEVEL) - {"__init__"}
    assert unplaced == set()


def test_imports_flow_downward_and_siblings_do_not_import_each_other():
    problems = []
    for path in modules():
        source = component(path)
        if source == "__init__":
            continue
        for line, module in imported_modules(path):
            target = entrena_target(module)
            if target is None or target == source:
                continue
            where = f"{path.relative_to(ROOT)}:{line}: {source} imports {module}"
            if target == "":
                if source != "cli":
                    problems.append(f"{where} (only the CLI imports the package root)")
            elif LEVEL[target] > LEVEL[source]:
                problems.append(f"{where} (upward)")
            elif LEVEL[target] == LEVEL[source]:
                problems.append(f"{where} (sibling on the same line)")
    assert problems == []


KNOWN_CYCLES: list[set[str]] = []
"""Import circles between modules still to be broken (each behind a function-local import)."""


def import_cycles() -> list[set[str]]:
    """The groups of modules that import each other in a circle (imports inside functions
    count), by Tarjan's strongly connected components."""
    def name(path: Path) -> str:
        parts = ("entrena", *path.relative_to(PACKAGE).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    paths = {name(path): path for path in modules()}
    # ``from entrena.x import sibling`` names the package ``entrena.x``: an edge to one's own
    # package is not counted (Python initialises the package first whatever the form).
    graph = {module: {m for _, m in imported_modules(path)
                      if m in paths and not module.startswith(m + ".")} - {module}
             for module, path in paths.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = set()
            while not group or module not in group:
                group.add(stack.pop())
            if len(group) > 1:
                cycles.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return cycles


def test_no_new_import_cycles():
    """``tracking.base`` ↔ ``mlflow_tracker`` and ``llm_sft.planning`` ↔ ``task`` were broken
    (issue 43), and ``data.cache`` ↔ ``tables`` ↔ ``targets`` and ``engine.loop`` ↔
    ``micro_batches`` too; no new circle may appear,
    hidden behind a function-local import or not, and a known one that is broken leaves the
    list."""
    cycles = import_cycles()
    assert [cycle for cycle in cycles if cycle not in KNOWN_CYCLES] == []
    assert [cycle for cycle in KNOWN_CYCLES if cycle not in cycles] == []


def test_the_engine_never_imports_a_task():
    """The loop gets a task's loss and batches as arguments; it never names a task."""
    offenders = [f"{p.relative_to(ROOT)}:{line}: {m}"
                 for p in sorted((PACKAGE / "engine").rglob("*.py"))
                 for line, m in imported_modules(p) if entrena_target(m) == "tasks"]
    assert offenders == []


def test_no_module_outside_the_tasks_names_a_task():
    """Task names live in ``entrena/tasks/`` (the registry and the task packages); the verbs,
    the loop, the planner and the exporters reach a task through the registry."""
    from entrena.tasks.registry import BUILTIN_TASKS

    offenders = [f"{p.relative_to(ROOT)}:{number}: {name}"
                 for p in modules() if component(p) != "tasks"
                 for number, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 for name in BUILTIN_TASKS if name in line]
    assert offenders == []


def test_package_root_imports_nothing_heavy():
    names = {m for _, m in imported_modules(PACKAGE / "__init__.py")}
    assert names <= {"__future__", "typing", "importlib"}


@pytest.mark.parametrize("leaf", ["errors", "units"])
def test_leaves_import_only_the_standard_library(leaf):
    names = {m.split(".")[0] for _, m in imported_modules(PACKAGE / f"{leaf}.py")}
    assert names - set(sys.stdlib_module_names) - {"__future__"} == set()


def test_config_never_imports_torch_statically():
    offenders = [f"{p.relative_to(ROOT)}:{line}: {m}"
                 for p in sorted((PACKAGE / "config").rglob("*.py"))
                 for line, m in imported_modules(p)
                 if m.split(".")[0] in {"torch", "transformers", "lightning_fabric", "mlflow"}]
    assert offenders == []


def test_only_the_backend_imports_lightning():
    users = sorted(str(p.relative_to(PACKAGE)) for p in modules()
                   if any(m.split(".")[0] in {"lightning", "lightning_fabric"}
                          for _, m in imported_modules(p)))
    assert users == ["engine/backend.py"]


def test_loading_and_validating_a_config_imports_no_torch(tmp_path):
    script = (
        "import sys\n"
        "from entrena import load_config\n"
        "from entrena.config.models import resolve_model_name\n"
        "from entrena.tasks.registry import BUILTIN_TASKS\n"
        "for task in BUILTIN_TASKS:\n"
        "    load_config({'name': 'x', 'task': task, 'data': {'train': 't.csv'}},\n"
        "                ['train.max_epochs=2'])\n"
        "resolve_model_name('minilm-l6')\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'mlflow', 'lightning_fabric')"
        " if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=clean_env(),
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr


MAX_FUNCTION_LINES = 100
"""Lines of code of one function, its docstring left out (issue 43: a reader can hold it)."""


def long_functions(paths: list[Path] | None = None, limit: int = MAX_FUNCTION_LINES,
                   root: Path = ROOT) -> list[str]:
    """``path:function (lines)`` of every function in ``paths`` (default: src/) whose body
    (after the docstring) spans more than ``limit`` lines, nested functions counted with
    their parent."""
    found = []
    for path in paths if paths is not None else modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            first = node.body[0]
            docstring = (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                         and isinstance(first.value.value, str))
            start = first.end_lineno + 1 if docstring else node.lineno
            lines = node.end_lineno - start + 1
            if lines > limit:
                found.append(f"{path.relative_to(root)}:{node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_a_reader_can_hold():
    assert long_functions() == []


def test_the_length_check_finds_a_long_function(tmp_path):
    """The check can fail: a function of 101 lines after its docstring is named; one of 100
    is not."""
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    module = tmp_path / "probe.py"
    module.write_text(f'def fits():\n    """Doc."""\n{body}\n\n'
                      f'def too_long():\n    """Doc."""\n{body}    y = 0\n', encoding="utf-8")
    assert long_functions([module], root=tmp_path) == [
        f"probe.py:too_long ({MAX_FUNCTION_LINES + 1} lines)"]
