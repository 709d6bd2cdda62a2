"""Exercise cells in notebooks: how they are marked, and the solved and release versions built from them.

The committed notebooks are the student versions. An exercise cell holds a stub::

    def stable_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        \"\"\"...\"\"\"
        # YOUR CODE HERE
        raise NotImplementedError()

and carries this metadata (nbgrader's fields included, so the course also works with nbgrader)::

    "course": {"exercise": "stable_softmax", "role": "exercise"},
    "nbgrader": {"grade": false, "grade_id": "stable_softmax", "locked": false, "solution": true, ...}

The check cell after it carries ``"course": {"exercise": ..., "role": "check"}``. A notebook's own
metadata says which module declares its exercises: ``"course": {"notebook": "00_welcome",
"checks": "course_lib.checks.nb00_welcome"}``.

:func:`solve` fills every stub with the body of the reference in ``course_lib``, between nbgrader's
``### BEGIN SOLUTION`` / ``### END SOLUTION`` markers (so the solved notebook is nbgrader's "source"
version); :func:`unsolve` turns the markers back into stubs, as nbgrader's release step does.
"""

from __future__ import annotations

import ast
import builtins
import copy
import inspect
import textwrap
import types
from collections.abc import Callable, Iterator
from typing import Any

import nbformat

from .core import Exercise, get_exercise

__all__ = [
    "STUB_LINES",
    "exercise_metadata",
    "check_metadata",
    "notebook_metadata",
    "exercise_cells",
    "solve",
    "unsolve",
    "solution_source",
]

STUB_LINES = ("# YOUR CODE HERE", "raise NotImplementedError()")
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def exercise_metadata(name: str) -> dict[str, Any]:
    """Cell metadata of an exercise cell (the learner edits it)."""
    return {
        "course": {"exercise": name, "role": "exercise"},
        "nbgrader": {"grade": False, "grade_id": name, "locked": False, "schema_version": 3,
                     "solution": True, "task": False},
        "tags": ["exercise"],
    }


def check_metadata(name: str) -> dict[str, Any]:
    """Cell metadata of the check cell that follows an exercise cell (read-only under nbgrader)."""
    return {
        "course": {"exercise": name, "role": "check"},
        "nbgrader": {"grade": False, "grade_id": f"{name}_check", "locked": True, "schema_version": 3,
                     "solution": False, "task": False},
        "tags": ["check"],
        "editable": False,
        "deletable": False,
    }


def notebook_metadata(notebook: str, checks_module: str) -> dict[str, Any]:
    """Notebook-level metadata: the notebook's id and the module that declares its exercises."""
    return {"notebook": notebook, "checks": checks_module}


def exercise_cells(nb: nbformat.NotebookNode) -> Iterator[tuple[int, nbformat.NotebookNode, str]]:
    """Yield ``(index, cell, exercise name)`` for every exercise cell of a notebook."""
    for i, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("course", {})
        if cell.cell_type == "code" and meta.get("role") == "exercise":
            yield i, cell, meta["exercise"]


# ---------------------------------------------------------------------------------------------------
# Building the solution text from the reference
# ---------------------------------------------------------------------------------------------------

def _body_without_docstring(fn: Callable[..., Any]) -> tuple[list[str], ast.FunctionDef]:
    """The source lines of ``fn``'s body (docstring removed, dedented) and its parsed definition."""
    src = textwrap.dedent(inspect.getsource(fn))
    tree = ast.parse(src)
    node = tree.body[0]
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        start = body[0].end_lineno  # the line after the docstring
        if len(body) == 1:
            raise ValueError(f"{fn.__qualname__} has only a docstring")
    else:
        start = node.body[0].lineno - 1
    lines = src.splitlines()[start:node.end_lineno]
    while lines and not lines[0].strip():
        lines.pop(0)
    return textwrap.dedent("\n".join(lines)).splitlines(), node


def _needed_imports(fn: Callable[..., Any], node: ast.FunctionDef) -> list[str]:
    """Import lines for the module-level names that ``fn``'s body uses, so the body runs in a notebook."""
    local: set[str] = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
    used: list[str] = []
    body_nodes = [sub for statement in node.body for sub in ast.walk(statement)]  # not the decorators
    for sub in body_nodes:
        if isinstance(sub, ast.Name):
            if isinstance(sub.ctx, ast.Store):
                local.add(sub.id)
            elif sub.id not in used:
                used.append(sub.id)
    fn_globals = getattr(inspect.unwrap(fn), "__globals__", {})
    lines = []
    for name in used:
        if name in local or name not in fn_globals or hasattr(builtins, name):
            continue
        value = fn_globals[name]
        if isinstance(value, types.ModuleType):
            mod = value.__name__
            lines.append(f"import {mod}" if mod == name else f"import {mod} as {name}")
        else:
            module = fn_globals.get("__name__", "")
            lines.append(f"from {module} import {name}")
    return lines


def solution_source(fn: Callable[..., Any], defined: frozenset[str] = frozenset()) -> list[str]:
    """The lines that replace a stub: needed imports, then the reference body (unindented).

    Names in ``defined`` (the functions the notebook's own exercises define in earlier cells) are not
    imported: a notebook never imports the reference of its own exercise.
    """
    body, node = _body_without_docstring(fn)
    imports = [line for line in _needed_imports(fn, node)
               if not (line.startswith("from ") and line.rsplit(" import ", 1)[-1] in defined)]
    return imports + body


def _reference_for(exercise: Exercise, qualname: list[str]) -> Callable[..., Any]:
    """The reference function that a stub ``def`` (``["f"]`` or ``["Class", "method"]``) stands for."""
    ref = exercise.reference
    if inspect.isclass(ref):
        if len(qualname) != 2:
            raise ValueError(f"exercise {exercise.name!r}: stub {'.'.join(qualname)} is not a method of a class")
        return getattr(ref, qualname[-1])
    if len(qualname) == 1 and qualname[0] == ref.__name__:
        return ref
    module = inspect.getmodule(ref)
    found = getattr(module, qualname[-1], None)
    if found is None:
        raise ValueError(f"exercise {exercise.name!r}: no reference for stub {'.'.join(qualname)}")
    return found


def _stub_defs(tree: ast.Module) -> Iterator[tuple[list[str], ast.FunctionDef]]:
    """Every function or method whose body ends with ``raise NotImplementedError(...)``."""
    def visit(nodes: list[ast.stmt], prefix: list[str]) -> Iterator[tuple[list[str], ast.FunctionDef]]:
        for node in nodes:
            if isinstance(node, ast.ClassDef):
                yield from visit(node.body, prefix + [node.name])
            elif isinstance(node, ast.FunctionDef):
                last = node.body[-1]
                if isinstance(last, ast.Raise) and last.exc is not None and "NotImplementedError" in \
                        ast.unparse(last.exc):
                    yield prefix + [node.name], node
    yield from visit(tree.body, [])


def _own_exercise_names(notebook: str) -> frozenset[str]:
    """The names of the references of a notebook's exercises (functions and classes it defines itself)."""
    from .core import registered_exercises

    return frozenset(getattr(ex.reference, "__name__", "") for ex in registered_exercises(notebook))


def _solve_source(source: str, exercise: Exercise) -> str:
    tree = ast.parse(source)
    defined = _own_exercise_names(exercise.notebook)
    lines = source.splitlines()
    stubs = list(_stub_defs(tree))
    if not stubs:
        raise ValueError(f"exercise {exercise.name!r}: the cell has no stub (a def ending in "
                         f"`raise NotImplementedError()`)")
    # Replace from the bottom up so that earlier line numbers stay valid.
    for qualname, node in sorted(stubs, key=lambda s: s[1].lineno, reverse=True):
        ref = _reference_for(exercise, qualname)
        first = node.body[0]
        has_doc = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant)
        if has_doc:
            start = first.end_lineno  # 0-based index of the line after the docstring
        else:  # the stub's own comment lines ("# YOUR CODE HERE") go too
            start = first.lineno - 1
            while start - 1 >= node.lineno and lines[start - 1].strip().startswith("#"):
                start -= 1
        indent = " " * (node.body[-1].col_offset)
        new = [indent + BEGIN] + [(indent + line) if line.strip() else "" for line in solution_source(ref, defined)]
        new.append(indent + END)
        lines[start:node.end_lineno] = new
    return "\n".join(lines)


def solve(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The solved version of a student notebook: every stub filled with the course's reference."""
    solved = copy.deepcopy(nb)
    for _, cell, name in exercise_cells(solved):
        cell.source = _solve_source(cell.source, get_exercise(name))
    return solved


def unsolve(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Turn solved exercise cells back into stubs, as nbgrader does when it releases an assignment."""
    student = copy.deepcopy(nb)
    for _, cell, _name in exercise_cells(student):
        out: list[str] = []
        skipping = False
        for line in cell.source.splitlines():
            if line.strip() == BEGIN:
                indent = line[: len(line) - len(line.lstrip())]
                out += [indent + STUB_LINES[0], indent + STUB_LINES[1]]
                skipping = True
            elif line.strip() == END:
                skipping = False
            elif not skipping:
                out.append(line)
        cell.source = "\n".join(out)
    return student
