"""The solved notebooks' model answers read like the paper (issue 18).

The answer of each exercise is generated from the course's reference (``course_lib.exercises.notebooks``,
``make solutions``). The references keep their input checks in a thin public wrapper
(:func:`course_lib.validation.validated_by`), so a generated answer imports nothing private, and no
notebook imports the reference of one of its own exercises.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import nbformat
import pytest

from course_lib.exercises import registered_exercises
from course_lib.exercises.notebooks import exercise_cells, solve
from course_lib.validation import validated_by

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _imported_names(source: str) -> list[tuple[str, str]]:
    """(module, name) for every ``from module import name`` and ``import module`` in a cell's source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            found += [(node.module or "", alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, alias.name.rsplit(".", 1)[-1]) for alias in node.names]
    return found


@pytest.fixture(scope="module")
def solved() -> dict[str, nbformat.NotebookNode]:
    return {path.stem: solve(nbformat.read(path, as_version=4)) for path in NOTEBOOKS}


def test_every_exercise_has_a_solved_cell(solved) -> None:
    names = {name for nb in solved.values() for _, _, name in exercise_cells(nb)}
    assert {ex.name for ex in registered_exercises() if ex.notebook[:2].isdigit()} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_generated_answers_import_nothing_private(path: Path, solved) -> None:
    for _, cell, name in exercise_cells(solved[path.stem]):
        private = [f"{m}.{n}" for m, n in _imported_names(cell.source) if n.startswith("_")
                   or any(part.startswith("_") and part != "__future__" for part in m.split("."))]
        assert not private, f"{path.stem}/{name}: the model answer imports {private}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_notebook_imports_its_own_exercises_reference(path: Path, solved) -> None:
    nb = solved[path.stem]
    own = {ex.reference.__name__: ex.name for ex in registered_exercises(path.stem)}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        try:
            imported = _imported_names(cell.source)
        except SyntaxError:  # a cell with IPython magics: nothing of ours is imported there
            continue
        for module, name in imported:
            if module.startswith("course_lib"):
                assert name not in own, f"{path.stem} cell {i} imports {name}, the reference of its own exercise"


def test_answers_read_like_the_paper(solved) -> None:
    """The attention answer is the formula (no input checks): about a dozen lines, as in the Annotated Transformer."""
    cells = {name: cell.source for nb in solved.values() for _, cell, name in exercise_cells(nb)}
    answer = cells["scaled_dot_product_attention"].split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
    lines = [line for line in answer.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert len(lines) <= 16 and "raise" not in answer and "_check" not in answer


def test_validated_by_checks_first_and_keeps_the_plain_function() -> None:
    calls = []

    def check(x, scale=2):
        calls.append(("check", x, scale))
        if x < 0:
            raise ValueError("x must be >= 0")

    @validated_by(check)
    def double(x, scale=2):
        """Twice x."""
        return x * scale

    assert double(3, scale=3) == 9 and calls == [("check", 3, 3)]
    with pytest.raises(ValueError, match="x must be >= 0"):
        double(-1)
    assert double.__name__ == "double" and double.__doc__ == "Twice x."
    assert list(inspect.signature(double).parameters) == ["x", "scale"]
    assert "return x * scale" in inspect.getsource(double) and double.__wrapped__(-1) == -2
