"""A graded class end to end, with the real sandbox: the cycle of ``docs/instructors.md``, section 3.

Ten varied submissions of the five-exercise fixture assignment (``tests/grading/grading_fixtures/fx_assignment/``, 6
points) and a roster of ten students: grade, read the problems, resubmit and grade only what changed, regrade
one student, override with a reason, export with partial credit and a late penalty, hand back feedback.
Every step runs ``course-grade`` as an instructor types it (``main([...])``).
"""

from __future__ import annotations

import copy
import csv
import json
import os
import sys
import time
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT
from nbtools import load
from test_gradebook import NB14, mixed_class

from course_lib.checks import EXERCISES as CHECKS_TABLE
from course_lib.exercises import get_exercise
from course_lib.exercises.notebooks import exercise_cells, solve
from course_lib.grading.cli import main
from course_lib.grading.records.gradebook import GRADEBOOK_NAME, Gradebook
from course_lib.grading.runner import GradeConfig, grade_submission
from course_lib.grading.sandbox.sandbox import SandboxUnavailable, probe

FX = ROOT / "tests" / "grading" / "grading_fixtures" / "fx_assignment" / "fx_assignment.ipynb"
if str(FX.parent) not in sys.path:
    sys.path.insert(0, str(FX.parent))  # the assignment's checks module, as the guide's tests import it
DEADLINE = "2026-11-20T12:00:00Z"
ON_TIME = time.mktime((2026, 11, 20, 11, 0, 0, 0, 0, 0)) - time.timezone
LATE = ON_TIME + 26 * 3600  # 25 hours after the deadline: two started days

ROSTER = """id,name,email,login
s01,Alice Archer,alice@uni.edu,alice
s02,Bob Baker,bob@uni.edu,bob
s03,Carol Chen,carol@uni.edu,carol
s04,Dave Dunn,dave@uni.edu,dave
s05,Erin Evans,erin@uni.edu,erin
s06,Grace Gray,grace@uni.edu,grace
s07,Heidi Hill,heidi@uni.edu,heidi
s08,Ivan Ito,ivan@uni.edu,ivan
s09,Judy Jones,judy@uni.edu,judy
s10,Mallory Moss,mallory@uni.edu,mallory
"""


#: A known mistake (the mask above the diagonal): right for seq_len 1, wrong for 5 (one hidden case of two).
UPPER_MASK = "def fx_causal_mask(seq_len):\n    return torch.ones(seq_len, seq_len, dtype=torch.bool).triu()\n"


def _with(nb: nbformat.NotebookNode, sources: dict[str, str]) -> nbformat.NotebookNode:
    out = copy.deepcopy(nb)
    for _, cell, name in exercise_cells(out):
        if name in sources:
            cell.source = sources[name]
    return out


def _large_outputs(nb: nbformat.NotebookNode, megabytes: int) -> nbformat.NotebookNode:
    """``nb`` saved with ``megabytes`` MB of outputs (a base64 image and printed text), as after a long run."""
    out = copy.deepcopy(nb)
    cell = next(c for c in out.cells if c.cell_type == "code")
    cell.outputs = [nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgoAAAAN" * (megabytes << 16)}),
                    nbformat.v4.new_output("stream", name="stdout", text="loss 0.1\n" * (1 << 16))]
    return out


def _class(folder: Path) -> dict[str, Path]:
    """Ten submissions: solved, stub, a known mistake, large outputs, late, not on the roster, a stub to be
    resubmitted solved, an exercise that raises, a refused import, an unreadable file."""
    nb = load(FX)
    solved = solve(nb)
    folder.mkdir()
    files = {
        "alice": solved,
        "bob": nb,
        "carol": _with(solved, {"fx_causal_mask": UPPER_MASK}),
        "dave": _large_outputs(solved, 26),
        "erin": solved,
        "frank": solved,
        "grace": nb,
        "heidi": _with(solved, {"fx_attend": "def fx_attend(q, k, v):\n    raise ValueError('shapes?')\n"}),
        "ivan": _with(solved, {"fx_scaled_scores": "import os\ndef fx_scaled_scores(q, k):\n    return q @ k.mT\n"}),
    }
    paths = {}
    for login, notebook in files.items():
        paths[login] = folder / f"hw1_{login}.ipynb"
        nbformat.write(notebook, paths[login])
        os.utime(paths[login], (ON_TIME, ON_TIME))
    paths["judy"] = folder / "hw1_judy.ipynb"
    paths["judy"].write_text('{"cells": [ this is not JSON')
    os.utime(paths["erin"], (LATE, LATE))
    return paths


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_a_class_graded_end_to_end(tmp_path: Path, capsys) -> None:
    try:
        probe()
    except SandboxUnavailable as err:
        pytest.skip(str(err))
    subs, out, roster = tmp_path / "submissions", tmp_path / "grades", tmp_path / "roster.csv"
    roster.write_text(ROSTER)
    paths = _class(subs)
    assert paths["dave"].stat().st_size > 26 << 20
    grade = [str(subs), "--out", str(out), "--source", str(FX), "--roster", str(roster), "--jobs", "2",
             "--timeout-cell", "20"]

    started = time.monotonic()
    assert main(grade) == 0
    first_s = time.monotonic() - started
    said = capsys.readouterr().out
    assert "unknown-file: hw1_frank.ipynb" in said and "missing: s10" in said  # listed in the run's output
    summary = {r["student"]: r for r in _rows(out / "summary.csv")}
    totals = {k: summary[k]["total"] for k in summary}
    assert totals == {"s01": "6", "s02": "0", "s03": "5", "s04": "6", "s05": "6", "s06": "0", "s07": "4",
                      "s08": "5", "s09": "0", "s10": "", "unmatched:hw1_frank.ipynb": "6"}, totals
    assert summary["s09"]["status"] == "unreadable" and summary["s10"]["status"] == "missing"
    problems = {(r["kind"], r["student"] or r["file"]) for r in _rows(out / "roster_problems.csv")}
    assert problems == {("missing", "s10"), ("unknown-file", "hw1_frank.ipynb")}
    with Gradebook(out / GRADEBOOK_NAME) as book:
        before = book.rows("submissions")

    nbformat.write(solve(load(FX)), paths["grace"])  # grace resubmits, solved, before the deadline
    os.utime(paths["grace"], (ON_TIME + 1800, ON_TIME + 1800))
    started = time.monotonic()
    assert main([*grade, "--quiet"]) == 0
    second_s = time.monotonic() - started
    with Gradebook(out / GRADEBOOK_NAME) as book:
        after = book.rows("submissions")
        assert after[:len(before)] == before and [r[1] for r in after[len(before):]] == ["s06"]
    assert {r["student"]: r["total"] for r in _rows(out / "summary.csv")}["s06"] == "6"

    assert main([*grade, "--quiet", "--regrade-student", "s03"]) == 0
    assert main(["override", "--out", str(out), "s07", "fx_attend", "1", "--reason", "right idea, shapes off by "
                 "one; see the email of 21 Nov", "--quiet"]) == 0
    assert main(["export", "--out", str(out), "--partial-credit", "--deadline", DEADLINE, "--late-penalty",
                 "10%/day", "--feedback-html", "--assignment", "HW1 (1234)", "--quiet"]) == 0
    with Gradebook(out / GRADEBOOK_NAME) as book:
        rows = book.rows("submissions")
        assert [r[1] for r in rows[len(after):]] == ["s03"] and rows[:len(after)] == after
        seed = book.stored_seed()

    summary = {r["student"]: r for r in _rows(out / "summary.csv")}
    assert summary["s03"]["fx_causal_mask"] == "0.5"  # one hidden case of two passed: partial credit
    assert summary["s05"]["late_penalty"] == "20%" and summary["s05"]["total"] == "4.8"
    assert summary["s07"]["fx_attend"] == "1" and summary["s07"]["total"] == "5"
    canvas = list(csv.reader((out / "canvas.csv").open(newline="")))
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "HW1 (1234)"]
    assert [r[3] for r in canvas[2:]] == [f"{login}" for login in
                                         ("alice", "bob", "carol", "dave", "erin", "grace", "heidi", "ivan", "judy",
                                          "mallory")]
    assert [r[5] for r in canvas[2:]] == ["6", "0", "5.5", "6", "4.8", "6", "5", "5", "0", ""]
    moodle = list(csv.reader((out / "moodle.csv").open(newline="")))
    assert moodle[0] == ["First name", "Last name", "Email address", "HW1 (1234)"]
    assert moodle[1] == ["Alice", "Archer", "alice@uni.edu", "6"]

    feedback = sorted(p.name for p in (out / "feedback").iterdir())
    assert len(feedback) == 2 * 10  # nine students with a file and the unmatched one, .md and .html
    for page in (out / "feedback").iterdir():
        text = page.read_text()
        assert str(seed) not in text and "seed" not in text.lower(), page
    assert "adjusted by your instructor: right idea" in (out / "feedback" / "s07.md").read_text()
    assert "late penalty 20%" in (out / "feedback" / "s05.md").read_text()
    instructor = json.loads((out / "hw1_alice.json").read_text())
    assert instructor["seed"] == seed
    print(f"\nclass cycle: 10 submissions graded in {first_s:.1f} s; 1 changed, graded again in {second_s:.1f} s "
          "(beside other work)")


@pytest.mark.slow
def test_a_solved_notebook_saved_with_26_mb_of_outputs_earns_full_marks(tmp_path: Path) -> None:
    """The size limit is on the code that runs: outputs saved in the notebook (here 26 MB) do not count."""
    try:
        probe()
    except SandboxUnavailable as err:
        pytest.skip(str(err))
    nb = _large_outputs(solve(load(ROOT / "notebooks" / "00_welcome.ipynb")), 26)
    path = tmp_path / "00_welcome_with_outputs.ipynb"
    nbformat.write(nb, path)
    assert path.stat().st_size > 26 << 20
    report = grade_submission(path, GradeConfig(seed=0, cell_timeout=20.0))  # the default limit: 20 MB of code
    assert report.status == "graded" and report.total == report.max_total == 1, report.message


def _pasted_stand_ins(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Notebook 05 answered with the class edition's own stand-ins (PyTorch's layers and masked mean), pasted
    into the exercise cells as a student who reads the edition's ``course_lib`` could: each must earn nothing."""
    import inspect
    import textwrap

    from course_lib.edition import backed

    def pasted(stand_in: object, call: str, cell: str) -> str:
        helper = textwrap.dedent(inspect.getsource(stand_in)).replace(f"def {stand_in.__name__}(", "def _edition(", 1)
        return helper + "\n\n" + cell.replace("raise NotImplementedError()", f"return _edition({call})")

    out = copy.deepcopy(nb)
    for _, cell, name in exercise_cells(out):
        if name == "feed_forward":
            cell.source = pasted(backed.feed_forward_forward, "self, x", cell.source)
        elif name == "encoder_layer":
            cell.source = pasted(backed.encoder_layer_forward, "self, x, mask", cell.source)
        elif name == "mean_pool":
            cell.source = "import torch\n\n" + textwrap.dedent(inspect.getsource(backed.mean_pool))
    return out


@pytest.mark.slow
def test_class_edition_submissions_are_graded_as_the_course_grades_them(tmp_path: Path) -> None:
    """Notebook 05 as the class edition ships it (``course-class-edition``): solved, it earns full marks;
    unsolved, nothing; answered with the edition's PyTorch-backed stand-ins, nothing for those exercises."""
    from course_lib.edition.build import build_edition

    try:
        probe()
    except SandboxUnavailable as err:
        pytest.skip(str(err))
    build_edition(tmp_path / "class", [ROOT / "notebooks" / "05_encoder.ipynb"], record=False)
    nb = load(tmp_path / "class" / "notebooks" / "05_encoder.ipynb")
    reports = {}
    for label, notebook in (("solved", solve(nb)), ("unsolved", nb), ("stand_ins", _pasted_stand_ins(nb))):
        path = tmp_path / f"05_encoder_{label}.ipynb"
        nbformat.write(notebook, path)
        reports[label] = grade_submission(path, GradeConfig(seed=0, cell_timeout=60.0))
    solved, unsolved, pasted = reports["solved"], reports["unsolved"], reports["stand_ins"]
    assert solved.status == "graded" and len(solved.exercises) == 3, solved.to_dict()
    assert solved.total == solved.max_total > 0, solved.to_dict()
    assert unsolved.status == "graded" and unsolved.total == 0, unsolved.to_dict()
    assert {e.exercise: e.score for e in pasted.exercises} == {"feed_forward": 0, "encoder_layer": 0,
                                                               "mean_pool": 0}, pasted.to_dict()
    for result in pasted.exercises:  # refused for running PyTorch's own module, not for an error of the paste
        assert "forbidden" in (result.status + result.message + result.hint).lower(), result


@pytest.mark.slow
def test_a_solved_notebook_00_handed_in_for_notebook_13_earns_nothing(tmp_path: Path, capsys) -> None:
    """The lead's finding: a class's folder of notebook-13 submissions in which bob handed in his solved notebook
    00 as ``bob_13_todays_models.ipynb``. Without --source the run stops before grading and asks for it; with
    --source, alice's solved 13 earns full marks in the sandbox and bob's file 0, reported as wrong-notebook."""
    try:
        probe()
    except SandboxUnavailable as err:
        pytest.skip(str(err))
    paths = mixed_class(tmp_path / "subs", solved_14=True)
    out = tmp_path / "grades"
    assert main([str(tmp_path / "subs"), "--out", str(out), "--timeout-cell", "60"]) == 2
    assert "00_welcome: 1 file(s) (bob_13_todays_models.ipynb)" in capsys.readouterr().err
    assert main([str(tmp_path / "subs"), "--out", str(out), "--timeout-cell", "60", "--source", str(NB14)]) == 0
    said = capsys.readouterr().out
    assert f"wrong notebook: {paths['bob'].name}: this file is notebook 00_welcome, not 14_todays_models" in said
    summary = {r["student"]: r for r in _rows(out / "summary.csv")}
    full = f"{sum(get_exercise(name).points for name in CHECKS_TABLE['nb14_todays_models']):g}"  # notebook 14's
    assert {k: (r["status"], r["total"], r["max_total"]) for k, r in summary.items()} == {
        "alice_13_todays_models": ("graded", full, full), "carol_13_todays_models": ("graded", "0", full),
        "bob_13_todays_models": ("wrong-notebook", "0", full)}, summary
