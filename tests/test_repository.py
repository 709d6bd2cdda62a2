"""Repository rules that keep the course teachable: the package's layering and the notebooks' hygiene.

- Models (attention, masking, positional, layers, transformer, vit) import nothing from training, checks,
  exercises or grading; nothing imports a notebook; course_lib has no import cycles.
- Notebooks: no device hard-coded (`.cuda()`), nothing downloaded at run time, no second copy of a
  reference solution, an opening that says what the learner will be able to do, a recap and questions.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest
from conftest import NOTEBOOKS, ROOT

from course_lib.exercises import registered_exercises

PACKAGE = ROOT / "course_lib"
MODEL_MODULES = {"attention", "masking", "positional", "layers", "transformer", "vit", "basics", "runtime"}
NOT_FOR_MODELS = ("course_lib.training", "course_lib.checks", "course_lib.exercises", "course_lib.grading",
                  "course_lib.decoding", "course_lib.metrics", "course_lib.text", "course_lib.images")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of the course_lib modules a file imports at module level (relative imports resolved).

    Imports inside functions are deliberate lazy imports and cannot form an import-time cycle.
    """
    tree = ast.parse(path.read_text())
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    top = [n for stmt in tree.body for n in ast.walk(stmt)
           if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    for node in top:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("course_lib")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.startswith("course_lib"):
                found.add(module)
                found |= {f"{module}.{a.name}" for a in node.names}
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    # An edge to one's own parent package (``from . import sibling``) is not a cycle: the parent is already
    # initialising when its child runs.
    return {name: {m for m in _imports(path) if m in files and m != name and not name.startswith(m + ".")}
            for name, path in files.items()}


def test_models_do_not_import_training_checks_or_grading() -> None:
    graph = _graph()
    for module in MODEL_MODULES:
        name = f"course_lib.{module}"
        if name not in graph:
            continue
        bad = {m for m in graph[name] if m.startswith(NOT_FOR_MODELS)}
        assert not bad, f"{name} imports {sorted(bad)}: models must stay independent of training and grading"


def test_no_import_cycles() -> None:
    graph = _graph()
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_no_code_imports_a_notebook() -> None:
    for path in list(PACKAGE.rglob("*.py")) + list((ROOT / "tests").rglob("*.py")):
        if path.resolve() == Path(__file__).resolve():
            continue
        assert "import_notebook" not in path.read_text() and "from notebooks" not in path.read_text(), path


# --- notebooks -----------------------------------------------------------------------------------------

def _code(nb: nbformat.NotebookNode) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def _markdown(nb: nbformat.NotebookNode) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "markdown"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_hygiene(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    code = "\n".join(_code(nb))
    assert ".cuda(" not in code, "choose the device with get_device(), never .cuda()"
    assert not re.search(r"device\s*=\s*['\"]cuda", code), "device hard-coded to cuda"
    assert not re.search(r"urlopen|urlretrieve|requests\.get|download\s*=\s*True|wget |curl ", code), \
        "notebooks download nothing at run time"
    assert "get_device" in code and "set_seed" in code, "device chosen once and seeds fixed"
    md = _markdown(nb)
    assert md and "able to" in md[0], "the first cell says what the learner will be able to do"
    assert any("Recap" in m for m in md) and any("Question" in m for m in md), "a recap and questions"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_carries_no_second_copy_of_a_solution(path: Path) -> None:
    """Outside exercise cells, no notebook defines a function or class named like an exercise's reference."""
    nb = nbformat.read(path, as_version=4)
    references = {getattr(ex.reference, "__name__", "") for ex in registered_exercises()}
    for cell in nb.cells:
        if cell.cell_type != "code" or cell.metadata.get("course", {}).get("role") == "exercise":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # IPython magics: checked by nbval instead
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                assert node.name not in references, f"{path.name} defines {node.name} outside its exercise cell"
