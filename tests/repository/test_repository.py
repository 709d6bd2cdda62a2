"""Repository rules that keep the course teachable: the package's layering and the notebooks' hygiene.

- Models (every module under ``course_lib/models/`` and ``course_lib/generation/``, found by walking the
  folders, so a new file is guarded without a change here) import nothing from data, training, evaluation,
  experiments, figures, checks, exercises, grading or the edition; data modules (``course_lib/data/``) import
  nothing from training, experiments, figures, checks, exercises, grading or the edition; every ``nn.Module``
  class of the library is in a guarded model module (the checks' mistakes aside); nothing
  imports a notebook; course_lib has no import cycles (imports inside functions count); no private name (``_x``) of a
  course_lib module is used by another module, a test of another module, a notebook or a script.
- Notebooks: no device hard-coded (`.cuda()`), nothing downloaded at run time, no second copy of a
  reference solution, an opening that says what the learner will be able to do, a recap and questions.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path, PurePosixPath

import nbformat
import pytest
from conftest import NOTEBOOKS, ROOT

from course_lib.exercises import registered_exercises

PACKAGE = ROOT / "course_lib"
#: Packages whose every module is a model or works on models only (decoding and sampling call a model's forward).
MODEL_PACKAGES = ("course_lib.models", "course_lib.generation")
#: Infrastructure the models may use, guarded like them.
MODEL_INFRASTRUCTURE = ("course_lib.runtime", "course_lib.validation")
NOT_FOR_MODELS = ("course_lib.data", "course_lib.training", "course_lib.evaluation", "course_lib.experiments",
                  "course_lib.figures", "course_lib.checks", "course_lib.exercises", "course_lib.grading",
                  "course_lib.edition")
#: What a data module must not import: data feeds training, experiments and exercises, never the other way round.
NOT_FOR_DATA = ("course_lib.training", "course_lib.experiments", "course_lib.figures", "course_lib.checks",
                "course_lib.exercises", "course_lib.grading", "course_lib.edition")


# Import edges allowed to make a cycle (none: a new entry needs a very good reason).
KNOWN_CYCLE_EDGES: set[tuple[str, str]] = set()
# Private names allowed across modules: (user, "module._name"), each with its reason.
KNOWN_PRIVATE_USES: set[tuple[str, str]] = set()
# Tests whose file name does not say which module they test (tests/<package>/test_<name>.py tests
# course_lib.<package>.<name>, tests/test_<name>.py course_lib.<name>).
TESTS_OF = {"tests/repository/test_api.py": ("course_lib._deprecation",)}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
MODEL_MODULES = sorted(name for name in MODULES
                       if name.startswith(tuple(f"{p}." for p in MODEL_PACKAGES)) or name in MODEL_PACKAGES
                       or name in MODEL_INFRASTRUCTURE)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _absolute(node: ast.ImportFrom, package: str | None) -> str:
    """The absolute module name of ``from ... import`` (``package`` is the importing file's package)."""
    if not node.level:
        return node.module or ""
    if package is None:
        return ""  # a relative import outside course_lib cannot reach it
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _package_of(path: Path) -> str | None:
    if PACKAGE not in path.parents:
        return None
    name = _module_name(path)
    return name if path.name == "__init__.py" else name.rsplit(".", 1)[0]


@functools.cache
def _imports(path: Path) -> frozenset[str]:
    """Absolute names of the course_lib modules a file imports, anywhere in it (relative imports resolved).

    Imports inside functions count too: a lazy import hides a cycle from import time, not from the design
    (the module still depends on the other, which depends on it).
    """
    tree = ast.parse(path.read_text())
    package = _package_of(path)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("course_lib")}
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, package)
            if module.startswith("course_lib"):
                found.add(module)
                found |= {f"{module}.{a.name}" for a in node.names}
    return frozenset(found)


def _graph(allowed: set[tuple[str, str]] = frozenset()) -> dict[str, set[str]]:
    # An edge to one's own parent package (``from . import sibling``) is not a cycle: the parent is already
    # initialising when its child runs.
    return {name: {m for m in _imports(path) if m in MODULES and m != name and not name.startswith(m + ".")
                   and (name, m) not in allowed}
            for name, path in MODULES.items()}


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_models_do_not_import_training_checks_or_grading() -> None:
    graph = _graph()
    bad = {name: sorted(m for m in graph[name] if m.startswith(NOT_FOR_MODELS)) for name in MODEL_MODULES}
    bad = {name: used for name, used in bad.items() if used}
    assert not bad, f"model modules that import {bad}: models must stay independent of data, training and grading"


def test_data_modules_do_not_import_training() -> None:
    """A data module makes data; training on it is the training package's job (issue #35: the digits' module held the
    image classifier's training loop). Every file under ``course_lib/data/`` is guarded, found by walking the folder."""
    graph = _graph()
    data_modules = [name for name in MODULES if name == "course_lib.data" or name.startswith("course_lib.data.")]
    assert "course_lib.data.digits" in data_modules
    bad = {name: sorted(m for m in graph[name] if m.startswith(NOT_FOR_DATA)) for name in data_modules}
    bad = {name: used for name, used in bad.items() if used}
    assert not bad, f"data modules that import {bad}: data must stay independent of training, checks and grading"


def test_the_layering_guard_covers_every_model_module() -> None:
    """Every file of the model packages is guarded, found by walking the folders (a new file needs no edit here)."""
    for package in MODEL_PACKAGES:
        files = {_module_name(p) for p in (ROOT / package.replace(".", "/")).rglob("*.py")}
        assert files and files <= set(MODEL_MODULES), sorted(files - set(MODEL_MODULES))
    assert {"course_lib.models.gpt", "course_lib.models.bert", "course_lib.models.seq2seq",
            "course_lib.generation.sampling", "course_lib.generation.decoding"} <= set(MODEL_MODULES)


#: Where a torch module may be defined outside the guarded model packages: the checks' mistakes and alternatives
#: (a learner's answers, private to their checks module), and the class edition's stand-ins, which wire a course
#: module into PyTorch's own layers in the edition only (``edition.torch_layers.CourseAttention``) and are no
#: model part of the course.
MODULE_CLASSES_ALLOWED_IN = ("course_lib.checks.", "course_lib.edition.")


def test_every_torch_module_the_library_defines_is_guarded() -> None:
    """A class that is an ``nn.Module`` is a model part: it lives in a guarded module (``course_lib/models/``,
    ``course_lib/generation/``), unless it is a checks module's mistake (or the class edition's stand-in)."""
    import importlib
    import inspect

    from torch import nn

    outside = []
    for name in sorted(MODULES):
        if any(part.startswith("_") for part in name.split(".")[1:]) or name.startswith(MODULE_CLASSES_ALLOWED_IN):
            continue
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, nn.Module) and obj.__module__ == name \
                    and name not in MODEL_MODULES:
                outside.append(f"{name}.{attr}")
    assert not outside, f"nn.Module classes outside the guarded model packages (move them to models/): {outside}"


def test_no_import_cycles() -> None:
    cycle = _find_cycle(_graph(KNOWN_CYCLE_EDGES))
    assert cycle is None, "import cycle (function-level imports included): " + " -> ".join(cycle)


def test_known_cycle_edges_are_still_there() -> None:
    """An allowlisted edge that has gone must leave the list, so that it cannot come back unnoticed."""
    graph = _graph()
    gone = {edge for edge in KNOWN_CYCLE_EDGES if edge[1] not in graph.get(edge[0], set())}
    assert not gone, f"remove {sorted(gone)} from KNOWN_CYCLE_EDGES"
    assert _find_cycle(graph) is not None or not KNOWN_CYCLE_EDGES, "no cycle left: empty KNOWN_CYCLE_EDGES"


def test_the_cycle_finder_sees_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "lazy.py"
    module.write_text("def f():\n    from course_lib.models.layers import Encoder\n    import course_lib.models.vit\n")
    assert {"course_lib.models.layers", "course_lib.models.vit"} <= _imports(module)
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


# --- private names stay in their module ------------------------------------------------------------------

def _python_sources() -> list[tuple[str, str, Path | None]]:
    """(where, source, path) of every file that may use course_lib: the package, tests, benchmarks, tools,
    assignments, and each code cell of the notebooks (IPython's ``%``/``!`` lines blanked)."""
    found = []
    for folder in ("course_lib", "tests", "benchmarks", "tools", "assignments"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "grading_fixtures" not in path.parts:
                found.append((path.relative_to(ROOT).as_posix(), path.read_text(), path))
    for path in sorted([*NOTEBOOKS, *(ROOT / "assignments").rglob("*.ipynb")]):
        if ".ipynb_checkpoints" in path.parts:
            continue
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "code":
                lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in cell.source.splitlines()]
                found.append((f"{path.relative_to(ROOT).as_posix()} cell {index}", "\n".join(lines), None))
    return found


def _own_modules(where: str, path: Path | None) -> tuple[str, ...]:
    """The modules whose private names ``where`` may use: its own, or (a test) the module it tests."""
    if path is not None and PACKAGE in path.parents:
        return (_module_name(path),)
    if where in TESTS_OF:
        return TESTS_OF[where]
    test = PurePosixPath(where)
    if test.parts[0] == "tests" and test.name.startswith("test_") and test.suffix == ".py":
        name = test.stem[len("test_"):]  # tests/edition/test_edition.py: course_lib.edition (its package)
        return (".".join(("course_lib", *test.parts[1:-1], name)), f"course_lib.{name}")
    return ()


def _private_uses(source: str, path: Path | None) -> set[tuple[str, int]]:
    """("module._name" or "module" for a private module, line) for every private course_lib name a source
    imports or reads as an attribute of an imported course_lib module."""
    tree = ast.parse(source)
    package = _package_of(path) if path is not None else None
    aliases: dict[str, str] = {}  # local name -> the course_lib module it is bound to
    uses: set[tuple[str, int]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("course_lib"):
                    aliases[alias.asname or "course_lib"] = alias.name if alias.asname else "course_lib"
                    if any(_is_private(part) for part in alias.name.split(".")):
                        uses.add((alias.name, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, package)
            if not module.startswith("course_lib"):
                continue
            if any(_is_private(part) for part in module.split(".")):
                uses.add((module, node.lineno))
            for alias in node.names:
                if f"{module}.{alias.name}" in MODULES:
                    aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
                if _is_private(alias.name):
                    uses.add((f"{module}.{alias.name}", node.lineno))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            chain, value = [], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in aliases:
                module = ".".join([aliases[value.id], *reversed(chain)])
                if module in MODULES:
                    uses.add((f"{module}.{node.attr}", node.lineno))
    return uses


def _foreign(used: str, own: tuple[str, ...], inside_package: bool) -> bool:
    """Whether ``used`` (a private name or module) belongs to a module other than ``own``.

    Private modules (``course_lib._deprecation``) are the package's own plumbing: other course_lib modules
    may import their public names; tests, notebooks and scripts may not (except the module's own tests).
    """
    owner = used if used in MODULES else used.rsplit(".", 1)[0]
    if any(owner == mine or owner.startswith(mine + ".") for mine in own):
        return False
    if inside_package and used in MODULES:
        return False
    return True


def test_no_private_name_is_used_outside_its_module() -> None:
    found = set()
    for where, source, path in _python_sources():
        try:
            uses = _private_uses(source, path)
        except SyntaxError:  # a notebook cell that is not plain Python: nbval runs it instead
            continue
        own = _own_modules(where, path)
        inside = path is not None and PACKAGE in path.parents
        found |= {(where.split(" cell ")[0], used, line) for used, line in uses if _foreign(used, own, inside)}
    new = sorted(use for use in found if use[:2] not in KNOWN_PRIVATE_USES)
    assert not new, "private names used outside their module (make them public or move the code):\n" + \
        "\n".join(f"  {where}:{line} uses {used}" for where, used, line in new)
    gone = KNOWN_PRIVATE_USES - {use[:2] for use in found}
    assert not gone, f"remove {sorted(gone)} from KNOWN_PRIVATE_USES"


def test_private_use_detection(tmp_path: Path) -> None:
    source = ("from course_lib.models.attention import _check_mask, MultiHeadAttention\n"
              "import course_lib.models.layers as L\n"
              "from course_lib.models import masking\n"
              "import course_lib._deprecation\n"
              "L._check_sizes('x', 1, 1, 1, 0.0)\n"
              "masking._anything\n"
              "L.__name__\n")
    uses = {used for used, _ in _private_uses(source, None)}
    assert uses == {"course_lib.models.attention._check_mask", "course_lib.models.layers._check_sizes",
                    "course_lib.models.masking._anything", "course_lib._deprecation"}
    assert not _foreign("course_lib.models.layers._check_sizes", ("course_lib.models.layers",), False)
    assert _foreign("course_lib.models.layers._check_sizes", ("course_lib.models.attention",), True)
    assert not _foreign("course_lib._deprecation", ("course_lib.models.vit",), True)  # package plumbing
    assert _foreign("course_lib._deprecation", (), False)


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
