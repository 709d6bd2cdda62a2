"""course_lib.grading.course.course_copy: a notebook's course copy is built once per process for the same notebook,
seed and sources, and anew when any of them changes; a grade from the kept copy equals a grade from a fresh one."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
import torch
from conftest import ROOT
from nbtools import load

import course_lib.grading.course as course
from course_lib.exercises.notebooks import solve
from course_lib.grading.runner import GradeConfig, grade_submission

NB03 = ROOT / "notebooks" / "03_positional_encoding.ipynb"


@pytest.fixture
def notebook(tmp_path: Path) -> Path:
    """A copy of a course notebook in a folder of its own (its sources can then change)."""
    folder = tmp_path / "course"
    folder.mkdir()
    return Path(shutil.copy(NB03, folder / NB03.name))


def test_the_same_notebook_seed_and_sources_give_the_same_copy(notebook: Path) -> None:
    first = course.course_copy(notebook, seed=7)
    assert course.course_copy(notebook, seed=7) is first
    assert course.course_copy(notebook.parent / ".." / notebook.parent.name / notebook.name, seed=7) is first
    assert course.course_copy(notebook, seed=8) is not first  # other hidden cases


def test_a_changed_notebook_or_module_beside_it_gives_a_new_copy(notebook: Path) -> None:
    first = course.course_copy(notebook, seed=7)
    nb = nbformat.read(notebook, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("A note added by the instructor."))
    nbformat.write(nb, notebook)
    second = course.course_copy(notebook, seed=7)
    assert second is not first
    (notebook.parent / "helpers.py").write_text("X = 1\n")  # an assignment's module beside its notebook
    third = course.course_copy(notebook, seed=7)
    assert third is not second
    (notebook.parent / "helpers.py").write_text("X = 2\n")
    assert course.course_copy(notebook, seed=7) is not third


def test_the_kept_copies_are_bounded(notebook: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(course, "KEPT_COPIES", 2)
    monkeypatch.setattr(course, "COPIES", type(course.COPIES)())
    first = course.course_copy(notebook, seed=1)
    course.course_copy(notebook, seed=2)
    assert course.course_copy(notebook, seed=1) is first  # used again: now the most recent
    course.course_copy(notebook, seed=3)  # seed 2 goes, the least recently used
    assert len(course.COPIES) == 2
    assert course.course_copy(notebook, seed=1) is first
    assert [key[1] for key in course.COPIES] == [3, 1]


@pytest.mark.slow
def test_a_grade_from_the_kept_copy_equals_one_from_a_fresh_copy(tmp_path: Path, monkeypatch) -> None:
    """The second grade reuses the first one's copy (hidden cases, observations, sandbox library); a fresh copy
    (the cache emptied) grades the same submissions to the same statuses, cases and scores."""
    solved = tmp_path / "solved.ipynb"
    nbformat.write(solve(load(NB03)), solved)
    stub = tmp_path / "stub.ipynb"
    shutil.copy(NB03, stub)

    def outcome(path: Path) -> list[tuple]:
        report = grade_submission(path, GradeConfig(seed=3, cell_timeout=20.0))
        return [(r.exercise, r.status, r.cases_passed, r.cases_total, r.score) for r in report.exercises]

    kept = [outcome(solved), outcome(stub), outcome(solved)]
    assert len({k for k in course.COPIES if k[0] == NB03.resolve() and k[1] == 3}) == 1
    monkeypatch.setattr(course, "COPIES", type(course.COPIES)())
    fresh = [outcome(solved), outcome(stub)]
    assert kept[:2] == fresh and kept[2] == kept[0]
    assert all(score > 0 for *_, score in kept[0]) and all(score == 0 for *_, score in kept[1])


@pytest.mark.slow
def test_diagnosing_a_mistake_leaves_the_kept_hidden_cases_as_they_were(tmp_path: Path, monkeypatch) -> None:
    """A wrong answer's hint comes from running known mistakes on the kept copy's hidden cases: they must come out
    unchanged, or the next grade in the process would judge other cases than the seed drew."""
    from course_lib.exercises.notebooks import exercise_cells

    monkeypatch.setattr(course, "COPIES", type(course.COPIES)())
    nb = solve(load(ROOT / "notebooks" / "00_welcome.ipynb"))
    for _, cell, _ in exercise_cells(nb):  # the known mistake: exp without subtracting the maximum
        cell.source = ("import torch\ndef stable_softmax(x, dim=-1):\n    e = torch.exp(x)\n"
                       "    return e / e.sum(dim=dim, keepdim=True)\n")
    wrong = tmp_path / "wrong.ipynb"
    nbformat.write(nb, wrong)
    graded = [grade_submission(wrong, GradeConfig(seed=5, cell_timeout=20.0)) for _ in range(2)]
    assert [(r.status, r.cases_passed, r.hint) for r in graded[0].exercises] == \
        [(r.status, r.cases_passed, r.hint) for r in graded[1].exercises]
    assert graded[0].exercises[0].status == "fail" and graded[0].exercises[0].hint
    kept = next(copy for key, copy in course.COPIES.items() if key[1] == 5)
    fresh = course.CourseCopy(kept.path, 5)

    def tensors(copy: course.CourseCopy) -> list:
        return [a for spec in copy.specs for case in spec.cases for a in (*case.args, *case.kwargs.values())
                if hasattr(a, "shape")]

    assert tensors(kept), "no hidden case holds a tensor"
    torch.testing.assert_close(tensors(kept), tensors(fresh), rtol=0, atol=0, equal_nan=True)  # bit for bit


def test_the_copies_of_a_course_notebook_share_its_sandbox_libraries(notebook: Path) -> None:
    """A course notebook's sandbox library depends on its week and the restored exercises only: copies under other
    seeds (and of the notebook moved elsewhere) reuse it, another restored set or week gets its own."""
    first, other_seed = course.course_copy(notebook, seed=7), course.course_copy(NB03, seed=8)
    assert first is not other_seed
    library = first.library()
    assert other_seed.library() == library and (library / "course_lib").is_dir()
    name = first.specs[0].exercise.name
    restored = first.library(frozenset({name}))
    assert restored != library and other_seed.library(frozenset({name})) == restored
    assert course.course_copy(ROOT / "notebooks" / "04_masking.ipynb", seed=7).library() != library
    assert course.course_library(3) == library
