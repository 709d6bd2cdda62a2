"""The whole cycle of ``docs/instructors.md`` with the real sandbox, on a class of 17 students (issue 44):
build the week's edition, collect, grade, a resubmission and a regrade from the original folder, an
extension, a question graded by hand, an override, a grade for a student who handed in a PDF, the class report
and its similarity flags, the LMS exports, the hand-back, and a second assignment in the course-wide table.

Notebook 00 (one exercise, ``stable_softmax``) keeps it short; the submissions are the unsolved and solved
notebook and mutations of the exercise cell: three students share a known mistake (no max shift), two copy a
classmate with names renamed, others hit other mistakes, a syntax error, an exception, a refused import, a
forbidden call, a file that is not JSON.
"""

from __future__ import annotations

import csv
import os
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT
from nbtools import load
from test_class_cycle import FX, _rows
from test_class_cycle import _with as with_sources

from course_lib.edition.build import build_edition
from course_lib.exercises import get_exercise
from course_lib.exercises.notebooks import exercise_cells, solve
from course_lib.grading.cli import main
from course_lib.grading.records.gradebook import GRADEBOOK_NAME, Gradebook
from course_lib.grading.sandbox.sandbox import SandboxUnavailable, probe

NB00 = ROOT / "notebooks" / "00_welcome.ipynb"
DEADLINE = "2026-11-20T12:00:00Z"
ON_TIME = time.mktime((2026, 11, 20, 11, 0, 0, 0, 0, 0)) - time.timezone
LATE = ON_TIME + 5 * 3600  # five hours late: one started day

STUDENTS = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "kim", "leo",
            "mallory", "nina", "oscar", "paul", "quinn"]
NAMES = {"alice": "Alice Archer", "bob": "Baker, Bob", "carol": "Carol Chen", "dave": "Dave Dunn",
         "erin": "Erin Evans", "frank": "Frank Fox", "grace": "Grace Gray", "heidi": "Heidi Hill", "ivan": "Ivan Ito",
         "judy": "Judy Jones", "kim": "김민준", "leo": "Leo Lang", "mallory": "Mallory Moss", "nina": "Nina Nagy",
         "oscar": "Oscar Ortiz", "paul": "Paul Park", "quinn": "Jörg Quinn"}

NO_SHIFT = '''def stable_softmax(x, dim=-1):
    """Softmax along dim."""
    e = x.exp()
    return e / e.sum(dim=dim, keepdim=True)
'''
NO_SHIFT_RENAMED = '''def stable_softmax(x, dim=-1):
    # exponentiate, then normalise
    exps = x.exp()
    return exps / exps.sum(dim=dim, keepdim=True)
'''
NO_SHIFT_3 = '''def stable_softmax(x, dim=-1):
    numer = torch.exp(x)
    return numer / numer.sum(dim=dim, keepdim=True)
'''
WRONG_AXIS = '''def stable_softmax(x, dim=-1):
    shifted = x - x.max(dim=0, keepdim=True).values
    e = shifted.exp()
    return e / e.sum(dim=0, keepdim=True)
'''
NOT_NORMALISED = '''def stable_softmax(x, dim=-1):
    return (x - x.max(dim=dim, keepdim=True).values).exp()
'''
SYNTAX = "def stable_softmax(x, dim=-1):\n    return [x.exp(\n"
RAISES = "raise ValueError('not sure what dim means')\n"
TORCH_SOFTMAX = "def stable_softmax(x, dim=-1):\n    return torch.softmax(x, dim=dim)\n"
IMPORT_OS = "import os\n\ndef stable_softmax(x, dim=-1):\n    return x.softmax(dim)\n"


def _with(nb: nbformat.NotebookNode, source: str) -> nbformat.NotebookNode:
    return with_sources(nb, {"stable_softmax": source})


def _renamed(source: str) -> str:
    """A classmate's solution copied with its variables renamed and a comment added."""
    out = source
    for old, new in (("shifted", "zz"), ("exps", "ee"), ("total", "ss")):
        out = out.replace(old, new)
    return "# my own work\n" + out


def _class(folder: Path) -> dict[str, Path]:
    nb = load(NB00)
    solved = solve(nb)
    solution = next(c.source for _, c, n in exercise_cells(solved) if n == "stable_softmax")
    notebooks = {
        "alice": solved, "bob": nb, "carol": _with(nb, NO_SHIFT), "dave": _with(nb, NO_SHIFT_RENAMED),
        "erin": _with(nb, NO_SHIFT_3), "frank": _with(nb, WRONG_AXIS), "grace": _with(nb, NOT_NORMALISED),
        "heidi": _with(nb, SYNTAX), "ivan": _with(nb, RAISES), "judy": solved, "kim": solved,
        "leo": _with(nb, TORCH_SOFTMAX), "mallory": _with(nb, _renamed(solution)), "nina": nb,
        "oscar": _with(nb, IMPORT_OS),
    }
    folder.mkdir(parents=True)
    paths = {}
    for login, notebook in notebooks.items():
        paths[login] = folder / f"00_welcome_{login}.ipynb"
        nbformat.write(notebook, paths[login])
        os.utime(paths[login], (ON_TIME, ON_TIME))
    paths["paul"] = folder / "00_welcome_paul.ipynb"
    paths["paul"].write_text('{"cells": [ not JSON')
    (folder / "00_welcome_quinn.pdf").write_bytes(b"%PDF-1.4 handed in on paper")  # graded by hand
    for late in ("judy", "kim"):
        os.utime(paths[late], (LATE, LATE))
    return paths


@pytest.mark.slow
def test_the_instructors_whole_cycle_on_a_class_of_seventeen(tmp_path: Path, capsys) -> None:
    try:
        probe()
    except SandboxUnavailable as err:
        pytest.skip(str(err))
    started = time.monotonic()
    # Build the week's edition: notebook 00 graded, its README says what to hand in.
    edition = tmp_path / "class00"
    build_edition(edition, graded="00", record=False)
    assert "**Graded: `notebooks/00_welcome.ipynb`**" in (edition / "README.md").read_text()

    # Collect: 16 files (a PDF among them) and a roster of 17 (a comma, an umlaut and a Korean name; Canvas ids).
    subs, out = tmp_path / "submissions", tmp_path / "grades"
    assert len(_class(subs)) == 16  # 15 notebooks and a file that is not JSON (the PDF is not collected)
    roster, extensions = tmp_path / "roster.csv", tmp_path / "extensions.csv"
    with open(roster, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "name", "email", "login", "canvas_id"])
        for i, login in enumerate(STUDENTS, 1):
            writer.writerow([f"s{i:02d}", NAMES[login], f"{login}@uni.edu", login, str(100 + i)])
    extensions.write_text("student,due\ns10,2026-11-21T12:00:00Z\n")  # Judy's extension; Kim has none
    sid = {login: f"s{i:02d}" for i, login in enumerate(STUDENTS, 1)}

    grade = [str(subs), "--out", str(out), "--source", str(NB00), "--roster", str(roster), "--jobs", "2",
             "--timeout-cell", "30", "--deadline", DEADLINE, "--late-penalty", "50%", "--extensions",
             str(extensions), "--assignment", "Week 0 (7001)"]
    assert main(grade) == 0
    said = capsys.readouterr().out
    assert f"changed: {sid['alice']}: new, total 1" in said
    summary = {r["student"]: r for r in _rows(out / "summary.csv")}
    status = {login: summary[sid[login]]["stable_softmax"] for login in STUDENTS if login != "quinn"
              and login != "paul"}
    assert {k for k, v in status.items() if v == "1"} == {"alice", "judy", "kim", "mallory"}, status
    assert summary[sid["judy"]]["total"] == "1" and summary[sid["kim"]]["total"] == "0.5"  # extension; penalty
    assert summary[sid["paul"]]["status"] == "unreadable" and summary[sid["quinn"]]["status"] == "missing"
    grades = {r["student"]: r for r in _rows(out / "grades.csv")}
    assert grades[sid["heidi"]]["status"] == "error" and grades[sid["leo"]]["status"] == "forbidden"
    assert grades[sid["oscar"]]["status"] == "forbidden" and grades[sid["bob"]]["status"] == "not-implemented"

    # Nina resubmits, solved, into another folder; a regrade from the original folder keeps her current file.
    resub = tmp_path / "resubmitted"
    resub.mkdir()
    nbformat.write(solve(load(NB00)), resub / "00_welcome_nina.ipynb")
    os.utime(resub / "00_welcome_nina.ipynb", (ON_TIME + 600, ON_TIME + 600))
    assert main([str(resub), *grade[1:]]) == 0
    assert f"changed: {sid['nina']}: total 0 -> 1" in capsys.readouterr().out
    assert main([*grade, "--regrade-student", sid["nina"]]) == 0
    said = capsys.readouterr().out
    assert "superseded by 00_welcome_nina.ipynb" in said and "regrading the current one" in said
    assert f"changed: {sid['nina']}" not in said
    assert {r["student"]: r["total"] for r in _rows(out / "summary.csv")}[sid["nina"]] == "1"

    # A question graded by hand, an override, a grade for Quinn's PDF.
    assert main(["rubric", "--out", str(out), sid["alice"], "q1", "2", "--max", "2", "--comment", "clear"]) == 0
    assert main(["override", "--out", str(out), sid["ivan"], "stable_softmax", "0.5", "--reason",
                 "explained by email"]) == 0
    assert main(["override", "--out", str(out), sid["quinn"], "stable_softmax", "1", "--reason",
                 "PDF graded by hand"]) == 0
    said = capsys.readouterr().out
    assert f"changed: {sid['quinn']}: new, total 1" in said and f"changed: {sid['ivan']}: total 0 -> 0.5" in said

    # The class report: the shared known mistake counted, the copies flagged for review.
    assert main(["class-report", "--out", str(out)]) == 0
    report = (out / "class_report.md").read_text()
    hint = next(m.hint for m in get_exercise("stable_softmax").mistakes if m.name == "no max shift")
    line = next(x for x in report.splitlines() if x.startswith("| ") and "Carol Chen" in x)
    assert "| 3 |" in line and "Dave Dunn" in line and "Erin Evans" in line, line
    assert hint.split(":")[0][:20] in line
    similar = report.split("## Similar submissions")[1].split("## Flagged")[0]
    assert f"{sid['alice']} (Alice Archer), {sid['judy']} (Judy Jones) | identical" in similar
    assert f"{sid['alice']} (Alice Archer), {sid['mallory']} (Mallory Moss) | identical" in similar  # renamed
    assert f"{sid['carol']} (Carol Chen), {sid['dave']} (Dave Dunn) | identical" in similar  # renamed, commented
    assert f"{sid['carol']} (Carol Chen), {sid['erin']} (Erin Evans) | near-identical" in similar

    # The exports, as the LMSs import them.
    canvas = list(csv.reader((out / "canvas.csv").open(newline="", encoding="utf-8")))
    assert canvas[0][-1] == "Week 0 (7001)" and canvas[1][-1] == "3"  # 1 point + the 2-point question
    by_id = {row[1]: row[-1] for row in canvas[2:]}
    assert by_id["101"] == "3" and by_id["117"] == "1" and by_id["102"] == "0"
    moodle = list(csv.reader((out / "moodle.csv").open(newline="", encoding="utf-8")))
    assert moodle[0][:3] == ["First name", "Last name", "Email address"] and len(moodle) == 1 + 17
    assert ["Bob", "Baker", "bob@uni.edu", "0"] in moodle

    # Hand-back: one zip per student with a file or a grade.
    assert main(["handback", "--out", str(out), "--to", str(tmp_path / "back"), "--zip"]) == 0
    with zipfile.ZipFile(tmp_path / "back" / f"{sid['heidi']}.zip") as archive:
        text = archive.read(f"{sid['heidi']}/feedback.md").decode()
    assert "was never closed" in text and "00\\_welcome\\_heidi.ipynb" in text and "Week 0 (7001)" in text

    # A second assignment lands in the course-wide table.
    second_subs, second = tmp_path / "hw1", tmp_path / "grades_hw1"
    second_subs.mkdir()
    nbformat.write(solve(load(FX)), second_subs / "hw1_alice.ipynb")
    nbformat.write(load(FX), second_subs / "hw1_bob.ipynb")
    assert main([str(second_subs), "--out", str(second), "--source", str(FX), "--roster", str(roster),
                 "--assignment", "HW1 (7002)", "--quiet"]) == 0
    table = tmp_path / "course.csv"
    assert main(["course-table", str(out), str(second), "--out", str(table), "--canvas",
                 str(tmp_path / "canvas_all.csv")]) == 0
    rows = {r["id"]: r for r in _rows(table)}
    assert (rows[sid["alice"]]["Week 0 (7001)"], rows[sid["alice"]]["HW1 (7002)"]) == ("3", "6")
    assert (rows[sid["bob"]]["Week 0 (7001)"], rows[sid["bob"]]["HW1 (7002)"]) == ("0", "0")
    assert rows[sid["carol"]]["HW1 (7002)"] == ""
    with Gradebook(out / GRADEBOOK_NAME) as book:
        assert len(book.history(sid["nina"])) == 3  # stub, resubmission, regrade of the current one
    print(f"\nwhole cycle: 17 students, 2 assignments in {time.monotonic() - started:.0f} s (beside other work)")
