"""The student and solved versions of every notebook.

- the committed (student) version runs to the end, and every check cell says "not implemented yet": that
  run is ``tests/notebooks/test_browser_lab.py``'s, in JupyterLab itself (one execution of each notebook fewer);
- the solved version (stubs filled from course_lib by ``solve``) runs, every check cell says "passed", and no
  cell prints a warning or anything on stderr;
- every exercise a notebook's checks module declares has its exercise cell and its check cell;
- ``unsolve(solve(nb))`` gives the committed notebook back (nbgrader's markers round-trip);
- an exercise cell that stops with a syntax error, or defines a misspelt name, breaks no later cell.

The executions use COURSE_SMOKE=1 (short training loops); nbval executes every notebook in full.
"""

from __future__ import annotations

import copy
import re

import nbformat
import pytest
from conftest import NOTEBOOKS
from nbtools import check_statuses, load, run_smoke

from course_lib.exercises import registered_exercises
from course_lib.exercises.notebooks import BEGIN, END, STUB_LINES, exercise_cells, solve, unsolve

IDS = [p.stem for p in NOTEBOOKS]


def _assert_all(statuses: dict[str, str], expected: str, names: list[str]) -> None:
    assert sorted(statuses) == sorted(names), f"check cells {sorted(statuses)} != exercises {sorted(names)}"
    wrong = {k: v for k, v in statuses.items() if v != expected}
    assert not wrong, f"expected every check to say {expected!r}, got {wrong}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_structure(path) -> None:
    nb = load(path)
    meta = nb.metadata["course"]
    names = [name for _, _, name in exercise_cells(nb)]
    declared = [ex.name for ex in registered_exercises(meta["notebook"])]
    assert sorted(names) == sorted(declared), f"cells {names} vs declared {declared}"
    assert len(set(names)) == len(names), "an exercise appears twice"
    for i, cell, name in exercise_cells(nb):
        assert STUB_LINES[1] in cell.source, f"{name}: the committed cell is not a stub"
        assert BEGIN not in cell.source and END not in cell.source
        follower = nb.cells[i + 1]
        follower_course = dict(follower.metadata.get("course", {}))
        # a deep dive's exercise and its check carry the deep-dive mark alike (issue 43)
        assert follower_course.pop("deep_dive", False) == cell.metadata["course"].get("deep_dive", False), \
            f"{name}: the exercise and its check cell must both be in the core, or both in a deep dive"
        assert follower_course == {"exercise": name, "role": "check"}, \
            f"{name}: the cell after the exercise must be its check cell"
        assert re.fullmatch(rf'\w+ = check\("{name}"\)', follower.source.strip()), \
            f"{name}: one form for every check cell, `xxx_fn = check(\"{name}\")` (the name looked up in the " \
            f"notebook, the exercise cell's last run known), got {follower.source!r}"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs, f"{path.name}: committed with outputs (the course stores none)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_solve_then_unsolve_round_trips(path) -> None:
    nb = load(path)
    solved = solve(nb)
    for (_, s_cell, _), (_, _n_cell, _) in zip(exercise_cells(solved), exercise_cells(nb), strict=True):
        assert BEGIN in s_cell.source and END in s_cell.source and STUB_LINES[1] not in s_cell.source
        compile(s_cell.source, "<solution>", "exec")
    back = unsolve(solved)
    assert [c.source for c in back.cells] == [c.source for c in nb.cells]


def warnings_printed(nb: nbformat.NotebookNode) -> list[str]:
    """Every stderr output and every output whose text reads like a warning, as ``"cell N: text"``."""
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            text = out.get("text", "") if out.get("output_type") == "stream" else "".join(
                str(v) for k, v in out.get("data", {}).items() if k.startswith("text/"))
            if out.get("name") == "stderr" or WARNING.search(text):
                found.append(f"cell {i}: {text.strip()[:300]}")
    return found


WARNING = re.compile(r"\b[A-Z]\w*Warning\b|^\s*(?i:warn(ing)?)\b", re.MULTILINE)  # TqdmWarning, "WARNING: x"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_solved_version_passes_every_check(path) -> None:
    """Every check passes, and no cell prints a warning or anything on stderr (tqdm's bars are widgets)."""
    nb = load(path)
    names = [name for _, _, name in exercise_cells(nb)]
    executed = run_smoke(solve(nb), path.parent)
    _assert_all(check_statuses(executed), "passed", names)
    assert not warnings_printed(executed), "\n".join(warnings_printed(executed))
    assert not control_characters(executed), control_characters(executed)


CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")  # not \t, \n, \r (bars) nor ESC (colours)


def control_characters(nb: nbformat.NotebookNode) -> list[str]:
    """Every text output holding a raw control character (a random byte-level token printed as it is)."""
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            text = out.get("text", "") if out.get("output_type") == "stream" else "".join(
                str(v) for k, v in out.get("data", {}).items() if k.startswith("text/"))
            if CONTROL.search(text):
                found.append(f"cell {i}: {text[max(0, CONTROL.search(text).start() - 40):][:80]!r}")
    return found


def test_control_characters_are_found() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output("stream", name="stdout",
                                                                               text="【\x0c → value】")])]
    assert len(control_characters(nb)) == 1
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="a\tb\nc\\x0c")]
    assert control_characters(nb) == []


def test_warnings_are_found() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x", outputs=[
        nbformat.v4.new_output("stream", name="stderr", text="  0%|          | 0/10"),
        nbformat.v4.new_output("stream", name="stdout", text="TqdmWarning: IProgress not found"),
        nbformat.v4.new_output("stream", name="stdout", text="step 3\nwarning: lr too high")])]
    assert len(warnings_printed(nb)) == 3
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="a warning sign: loss 0.25")]
    assert warnings_printed(nb) == []


@pytest.mark.slow
def test_a_broken_exercise_cell_breaks_no_later_cell(root) -> None:
    """A syntax error in one exercise cell, a typo in the next one's name: the checks say so, the rest runs.

    Only the broken cell itself shows an error; each check names what happened and returns the reference,
    so every later cell (which uses what the check returned) runs as usual.
    """
    path = root / "notebooks" / "04_masking.ipynb"
    nb = load(path)
    cells = {name: cell for _, cell, name in exercise_cells(nb)}
    cells["padding_mask"].source = cells["padding_mask"].source.replace(
        "raise NotImplementedError()", "return (tokens != pad_id)[:, None, None, :]  # a stray bracket ]")
    cells["padding_mask"].source += "\n    )"  # a syntax error: the cell defines nothing
    cells["causal_mask"].source = cells["causal_mask"].source.replace("def causal_mask(", "def casual_mask(")
    executed = run_smoke(nb, path.parent, allow_errors=True)
    errors = [i for i, cell in enumerate(executed.cells) if cell.cell_type == "code"
              and any(o.get("output_type") == "error" for o in cell.get("outputs", []))]
    broken = [i for i, _, name in exercise_cells(executed) if name == "padding_mask"]
    assert errors == broken, f"cells with an error: {errors}; only the broken exercise cell {broken} may have one"
    statuses = check_statuses(executed)
    assert statuses == {"padding_mask": "failed", "causal_mask": "not implemented yet"}, statuses
    text = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))
    assert "your exercise cell raised SyntaxError when it last ran" in text and "`causal_mask` is not defined" in text


@pytest.mark.slow
def test_the_assertions_catch_a_broken_solution_and_a_broken_stub(root) -> None:
    """The two tests above can fail: a wrong solution is not 'passed', a broken stub not 'not implemented'."""
    path = root / "notebooks" / "00_welcome.ipynb"
    nb = load(path)
    solved = solve(nb)
    for _, cell, _ in exercise_cells(solved):  # break the solution: forget to normalise
        cell.source = cell.source.replace("return exps / exps.sum(dim=dim, keepdim=True)", "return exps")
        assert "return exps\n" in cell.source + "\n"
    executed = run_smoke(solved, path.parent)
    with pytest.raises(AssertionError, match="failed"):
        _assert_all(check_statuses(executed), "passed", ["stable_softmax"])
    broken = copy.deepcopy(nb)
    for _, cell, _ in exercise_cells(broken):  # a stub that returns something instead of raising
        cell.source = cell.source.replace("raise NotImplementedError()", "return x")
    executed = run_smoke(broken, path.parent)
    with pytest.raises(AssertionError, match="not implemented yet"):
        _assert_all(check_statuses(executed), "not implemented yet", ["stable_softmax"])


def test_statuses_report_a_missing_verdict() -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("pass", metadata={"course": {"exercise": "x", "role": "check"}})
    nb.cells.append(cell)
    assert check_statuses(nb) == {"x": "no verdict"}
