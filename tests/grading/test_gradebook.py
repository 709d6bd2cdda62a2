"""The gradebook, the roster, the exports, the scoring rule and the feedback files (no sandbox: fast).

The grading itself is replaced by a stand-in that reads each fake submission's intended results from the file
(``{"fake": {exercise: [cases passed, cases total]}}``), so that these tests check the bookkeeping around
the grader: what is graded again, what is kept, what is exported. ``tests/grading/test_class_cycle.py`` runs the
same cycle with the real sandbox.
"""

from __future__ import annotations

import csv
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from nbtools import load

from course_lib.checks import EXERCISES as CHECKS_TABLE
from course_lib.exercises import get_exercise
from course_lib.exercises.notebooks import solve
from course_lib.grading import cli
from course_lib.grading.cli import ClassOptions, grade_many, main
from course_lib.grading.judging.scoring import ScoringRule, late_factor
from course_lib.grading.records.exports import CANVAS_COLUMNS, MOODLE_COLUMNS
from course_lib.grading.records.gradebook import GRADEBOOK_NAME, Gradebook, GradebookError
from course_lib.grading.records.report_types import ExerciseResult, SubmissionReport
from course_lib.grading.records.roster import UNMATCHED, Roster, Student, read_roster
from course_lib.grading.runner import GradeConfig
from course_lib.grading.submission import file_sha256, read_submission

EXERCISES = {"ex_a": 1.0, "ex_b": 2.0}
SEED = 987_654_321


def fake_grade(path: Path, config: GradeConfig, courses=None) -> SubmissionReport:
    """A stand-in for ``grade_submission``: the file says what each exercise would get."""
    fake_grade.calls.append(Path(path).name)
    data = json.loads(Path(path).read_text())
    report = SubmissionReport(submission=str(path), sha256=file_sha256(path), notebook="fake_nb", seed=config.seed,
                              max_total=sum(EXERCISES.values()), graded_at="2026-11-21T10:00:00Z")
    for name, points in EXERCISES.items():
        passed, total = data["fake"].get(name, [0, 4])
        status = "pass" if passed == total else "fail"
        report.exercises.append(ExerciseResult(
            name, points if status == "pass" else 0.0, points, status,
            f"case 'hidden {SEED}': expected [0.{SEED}] got [1.5]" if status == "fail" else "", "a known hint",
            passed, total))
    report.total = sum(r.score for r in report.exercises)
    return report


fake_grade.calls = []


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(cli, "grade_submission", fake_grade)
    fake_grade.calls = []
    return fake_grade


def _submit(folder: Path, name: str, a: tuple[int, int] = (4, 4), b: tuple[int, int] = (4, 4),
            mtime: float | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.ipynb"
    path.write_text(json.dumps({"cells": [], "fake": {"ex_a": list(a), "ex_b": list(b)}}))
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _config() -> GradeConfig:
    return GradeConfig(sandbox=False)


def _snapshot(out: Path) -> dict[str, list[tuple]]:
    with Gradebook(out / GRADEBOOK_NAME) as book:
        return {t: book.rows(t) for t in ("submissions", "grades", "overrides")}


# --- the gradebook -------------------------------------------------------------------------------------

def test_regrades_additions_and_overrides_never_touch_another_students_records(fake, tmp_path: Path, capsys) -> None:
    subs, out = tmp_path / "subs", tmp_path / "out"
    paths = [_submit(subs, f"s{i}", a=(i % 4, 4)) for i in range(1, 11)]
    grade_many(paths, _config(), out, quiet=True)
    assert len(fake.calls) == 10 and len(_csv(out / "grades.csv")) == 20 and len(_csv(out / "summary.csv")) == 10
    first = _snapshot(out)

    fake.calls.clear()
    grade_many(paths, _config(), out, quiet=True)  # nothing changed: nothing graded, nothing added
    assert fake.calls == [] and _snapshot(out) == first

    _submit(subs, "s3", a=(4, 4))  # one student resubmits
    grade_many(sorted(subs.glob("*.ipynb")), _config(), out, quiet=True)
    assert fake.calls == ["s3.ipynb"]
    after_change = _snapshot(out)
    assert after_change["submissions"][:10] == first["submissions"]  # earlier records kept as they were
    assert len(after_change["submissions"]) == 11

    fake.calls.clear()
    grade_many([subs / "s5.ipynb"], _config(), out, quiet=True, options=ClassOptions(regrade_students=("s5",)))
    assert fake.calls == ["s5.ipynb"]
    summary = {r["student"]: r for r in _csv(out / "summary.csv")}
    assert len(summary) == 10 and summary["s3"]["total"] == "3"  # the class's rows are all still there

    fake.calls.clear()
    grade_many([_submit(subs, "s11")], _config(), out, quiet=True)
    assert fake.calls == ["s11.ipynb"] and len(_csv(out / "summary.csv")) == 11

    assert main(["override", "--out", str(out), "s2", "ex_a", "0.5", "--reason", "typo in the task", "--quiet"]) == 0
    before_full = _snapshot(out)
    fake.calls.clear()
    grade_many(sorted(subs.glob("*.ipynb")), _config(), out, quiet=True, options=ClassOptions(regrade=True))
    assert len(fake.calls) == 11
    final = _snapshot(out)
    for table in final:
        assert final[table][:len(before_full[table])] == before_full[table], table  # only additions
    summary = {r["student"]: r for r in _csv(out / "summary.csv")}
    assert summary["s2"]["ex_a"] == "0.5" and summary["s2"]["total"] == "2.5"  # the override survived
    assert {r["student"] for r in _csv(out / "grades.csv")} == {f"s{i}" for i in range(1, 12)}
    with Gradebook(out / GRADEBOOK_NAME) as book:
        assert [s.why for s in book.history("s3")] == ["new", "changed", "regrade"]
        assert len({json.loads(row[-1])["seed"] for row in book.rows("submissions")}) == 1  # one seed throughout
    capsys.readouterr()
    assert main(["history", "--out", str(out), "s2"]) == 0
    told = capsys.readouterr().out.splitlines()
    assert [line.split("(")[1].split(")")[0] for line in told[:-1]] == ["new", "regrade"]
    assert told[-1].endswith("s2 ex_a: 0.5 (typo in the task)")


def test_records_cannot_be_rewritten_or_deleted(tmp_path: Path) -> None:
    with Gradebook(tmp_path / GRADEBOOK_NAME) as book:
        book.add_override("s1", "ex_a", 1.0, "checked by hand")
        book.add_submission("s1", "s1.ipynb", fake_grade(_submit(tmp_path, "s1"), GradeConfig(seed=1)), "s1", "new")
        assert book.set_assignment("14_todays_models", "nb14.ipynb") == ("14_todays_models", "nb14.ipynb")
        assert book.set_assignment("00_welcome", "nb00.ipynb") == ("14_todays_models", "nb14.ipynb")  # once
        book.seed(5)
    db = sqlite3.connect(tmp_path / GRADEBOOK_NAME)
    for statement in ("UPDATE grades SET score = 99", "DELETE FROM submissions", "UPDATE overrides SET points = 9",
                      "DELETE FROM grades", "UPDATE meta SET value = '1' WHERE key = 'seed'", "DELETE FROM meta"):
        with pytest.raises(sqlite3.DatabaseError, match="never rewritten"):
            db.execute(statement)
    db.close()
    with pytest.raises(Exception, match="reason"):
        Gradebook(tmp_path / GRADEBOOK_NAME).add_override("s1", "ex_a", 1.0, "  ")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / GRADEBOOK_NAME).write_text("not a database, a spreadsheet someone saved over it")
    with pytest.raises(SystemExit) as stopped:
        main(["export", "--out", str(tmp_path / "other"), "--quiet"])
    assert stopped.value.code == 2


_WRITER = """
import sys, time
from pathlib import Path
sys.path[:0] = [{tests!r}, {here!r}]  # this file's folder, and tests/ (conftest)
import test_gradebook as T
from course_lib.checks import EXERCISES as CHECKS_TABLE
from course_lib.exercises import get_exercise
from course_lib.exercises.notebooks import solve
from course_lib.grading import cli


def slow_fake(path, config, courses=None):
    time.sleep(0.4)  # long enough for the two runs to overlap even when one starts late (2.4 s a run)
    return T.fake_grade(path, config, courses)


cli.grade_submission = slow_fake
paths = [T._submit(Path({subs!r}), f"{prefix}{{i}}") for i in range(12)]
Path({ready!r}).touch()
while len(list(Path({ready!r}).parent.glob("ready-*"))) < 2:  # both processes have imported torch
    time.sleep(0.01)
started = time.time()
cli.grade_many(paths, T.GradeConfig(sandbox=False), Path({out!r}), quiet=True, jobs=2)
print(started, time.time())
"""


def test_two_runs_into_one_folder_at_once_lose_no_update(tmp_path: Path) -> None:
    out = tmp_path / "out"
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER.format(
        tests=str(ROOT / "tests"), here=str(Path(__file__).resolve().parent),
        subs=str(tmp_path / p), prefix=p, ready=str(tmp_path / f"ready-{p}"),
        out=str(out))], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for p in ("a", "b")]
    spans = []
    for proc in procs:
        said, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()[-2000:]
        spans.append([float(x) for x in said.split()[-2:]])
    assert max(s for s, _ in spans) < min(e for _, e in spans), spans  # the two runs overlapped
    with Gradebook(out / GRADEBOOK_NAME) as book:
        assert len(book.current()) == 24 and len(book.rows("grades")) == 48
    assert len(_csv(out / "summary.csv")) == 24  # the export written last saw both runs' grades


# --- the roster ----------------------------------------------------------------------------------------

def test_roster_maps_files_to_students_and_lists_what_does_not_match(tmp_path: Path) -> None:
    roster_file = tmp_path / "roster.csv"
    roster_file.write_text("ID,Name,Login,Email,File\n"
                           "s1,Ada Lovelace,ada,ada@uni.edu,\n"
                           "s2,\"Turing, Alan\",alan,alan@uni.edu,\n"
                           "s3,Grace Hopper,grace,grace@uni.edu,hopper-final.ipynb\n"
                           "s4,Ann Example,ann,ann@uni.edu,\n"
                           "s5,Ann Smith,ann_smith,asmith@uni.edu,\n"
                           "s6,Nobody Here,nobody,nobody@uni.edu,\n")
    roster = read_roster(roster_file)
    files = ["hw1_ada.ipynb", "hw1_ADA_v2.ipynb", "alan@uni.edu.ipynb", "hopper-final.ipynb", "hw_ann_smith.ipynb",
             "hw1_ann.ipynb", "hw1_mallory.ipynb", "annabel.ipynb"]
    match = roster.match(files, newest_first=["hw1_ADA_v2.ipynb", *[f for f in files if f != "hw1_ADA_v2.ipynb"]])
    assert match.students == {
        "hw1_ada.ipynb": UNMATCHED + "hw1_ada.ipynb", "hw1_ADA_v2.ipynb": "s1", "alan@uni.edu.ipynb": "s2",
        "hopper-final.ipynb": "s3", "hw_ann_smith.ipynb": "s5", "hw1_ann.ipynb": "s4",
        "hw1_mallory.ipynb": UNMATCHED + "hw1_mallory.ipynb", "annabel.ipynb": UNMATCHED + "annabel.ipynb"}
    kinds = {(p.kind, p.student or p.file) for p in match.problems}
    assert kinds == {("duplicate", "s1"), ("unknown-file", "hw1_mallory.ipynb"), ("unknown-file", "annabel.ipynb"),
                     ("missing", "s6")}
    assert roster.by_id["s2"].first_last() == ("Alan", "Turing")
    twins = Roster([Student("x1", login="kim"), Student("x2", email="kim@b.org")])
    owner, why = twins.student_for("hw_kim.ipynb")
    assert owner is None and "x1 ('kim'), x2 ('kim')" in why


def test_a_canvas_gradebook_export_reads_as_a_roster(tmp_path: Path) -> None:
    # The layout of Canvas's gradebook export (Instructure, "How do I export grades in the Gradebook?"):
    # the five identifying columns, then a "Points Possible" row that is not a student.
    path = tmp_path / "canvas_export.csv"
    path.write_text("Student,ID,SIS User ID,SIS Login ID,Section,Quiz 1 (23)\n"
                    "    Points Possible,,,,,10.00\n"
                    "\"Lovelace, Ada\",11,S0011,ada,CS 101,8.00\n")
    roster = read_roster(path)
    assert len(roster) == 1
    ada = roster.students[0]
    assert (ada.id, ada.canvas_id, ada.sis_user_id, ada.section, ada.first_last()) == \
        ("ada", "11", "S0011", "CS 101", ("Ada", "Lovelace"))
    assert roster.student_for("smithjane_11_998_hw1.ipynb")[0] == ada  # Canvas's download name holds the user id


# --- exports -------------------------------------------------------------------------------------------

ROSTER = ("id,name,email,login,canvas_id,sis_user_id,section\n"
          "s1,Ada Lovelace,ada@uni.edu,ada,101,S001,A\n"
          "s2,Alan Turing,alan@uni.edu,alan,102,S002,A\n"
          "s3,Grace Hopper,grace@uni.edu,grace,103,S003,B\n")


def test_lms_exports_have_the_documented_headers_and_ids(fake, tmp_path: Path) -> None:
    subs, out = tmp_path / "subs", tmp_path / "out"
    (tmp_path / "roster.csv").write_text(ROSTER)
    paths = [_submit(subs, "hw1_ada"), _submit(subs, "hw1_alan", a=(1, 4)), _submit(subs, "hw1_eve")]
    assert main([*map(str, paths), "--out", str(out), "--roster", str(tmp_path / "roster.csv"), "--quiet",
                 "--unsafe-no-sandbox", "--assignment", "Homework 1"]) == 0
    with open(out / "canvas.csv", newline="") as f:
        canvas = list(csv.reader(f))
    # Canvas, "How do I import grades in the Gradebook?" (Instructor Guide), and its gradebook export: the
    # columns Student, ID, SIS User ID, SIS Login ID, Section, then one column per assignment; e.g.
    #   Student,ID,SIS User ID,SIS Login ID,Section,Quiz 1 (23)
    #       Points Possible,,,,,10.00
    documented = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert canvas[0] == [*documented, "Homework 1"] and CANVAS_COLUMNS == documented
    assert canvas[1][0].strip() == "Points Possible" and canvas[1][5] == "3"
    assert canvas[2:] == [["Lovelace, Ada", "101", "S001", "ada", "A", "3"],
                          ["Turing, Alan", "102", "S002", "alan", "A", "2"],
                          ["Hopper, Grace", "103", "S003", "grace", "B", ""]]  # no submission: empty, not 0
    with open(out / "moodle.csv", newline="") as f:
        moodle = list(csv.reader(f))
    # Moodle, "Grade import" (docs.moodle.org/en/Grade_import): the import format is the export's; the example
    # file of its own acceptance test (grade/tests/fixtures/grade_import.csv) reads
    #   First name,Last name,Email address,Manual item 1
    # and is imported with "Map from: Email address", "Map to: Email address".
    assert moodle[0] == ["First name", "Last name", "Email address", "Homework 1"] and MOODLE_COLUMNS == moodle[0][:3]
    # An empty cell is "no grade" to Moodle and clears a grade entered by hand: Grace (no submission) is left
    # out unless the instructor asks for empty cells (tests/grading/test_records.py).
    assert moodle[1:] == [["Ada", "Lovelace", "ada@uni.edu", "3"], ["Alan", "Turing", "alan@uni.edu", "2"]]
    plain = _csv(out / "plain.csv")
    assert [(r["id"], r["points"], r["max_points"]) for r in plain] == [("s1", "3", "3"), ("s2", "2", "3"),
                                                                        ("s3", "", "3")]
    problems = {(r["kind"], r["student"] or r["file"]) for r in _csv(out / "roster_problems.csv")}
    assert problems == {("missing", "s3"), ("unknown-file", "hw1_eve.ipynb")}
    assert UNMATCHED + "hw1_eve.ipynb" in {r["student"] for r in _csv(out / "summary.csv")}  # graded, not dropped


def test_partial_credit_and_late_penalty_are_the_instructors_choice_and_recorded(fake, tmp_path: Path) -> None:
    subs, out = tmp_path / "subs", tmp_path / "out"
    deadline = time.mktime((2026, 11, 20, 12, 0, 0, 0, 0, 0)) - time.timezone
    on_time = _submit(subs, "s1", a=(4, 4), b=(1, 4), mtime=deadline - 60)
    late = _submit(subs, "s2", a=(4, 4), b=(4, 4), mtime=deadline + 30 * 3600)  # 30 h: two started days
    grade_many([on_time, late], _config(), out, quiet=True)
    summary = {r["student"]: r for r in _csv(out / "summary.csv")}
    assert (summary["s1"]["total"], summary["s2"]["total"]) == ("1", "3")  # default: all or nothing, no penalty
    assert main(["export", "--out", str(out), "--partial-credit", "--deadline", "2026-11-20T12:00Z",
                 "--late-penalty", "10%/day", "--quiet"]) == 0
    summary = {r["student"]: r for r in _csv(out / "summary.csv")}
    assert summary["s1"]["ex_b"] == "0.5" and summary["s1"]["total"] == "1.5"
    assert summary["s2"]["late_penalty"] == "20%" and summary["s2"]["total"] == "2.4"
    times = tmp_path / "times.csv"
    times.write_text("student,submitted_at\ns2,2026-11-20T11:00:00Z\n")  # the LMS says s2 was on time
    assert main(["export", "--out", str(out), "--submission-times", str(times), "--quiet"]) == 0
    assert {r["student"]: r["total"] for r in _csv(out / "summary.csv")} == {"s1": "1.5", "s2": "3"}
    with Gradebook(out / GRADEBOOK_NAME) as book:
        assert ScoringRule.from_dict(book.rule()) == ScoringRule(True, "2026-11-20T12:00Z", "10%/day", "supplied")
        exports = {row[0] for row in book.rows("finals")}
        assert len(exports) == 3
        assert ("s2", "(total)", 2.4) in {(r[2], r[3], r[5]) for r in book.rows("finals")}
    assert late_factor(ScoringRule(deadline="2026-11-20T12:00Z", penalty="50%"), "2026-11-20T12:00:01Z")[1] == 0.5
    with pytest.raises(ValueError, match="late penalty"):
        ScoringRule(deadline="2026-11-20T12:00Z", penalty="ten percent")


# --- feedback ------------------------------------------------------------------------------------------

def test_feedback_holds_no_seed_and_no_hidden_values_unless_asked(fake, tmp_path: Path) -> None:
    subs, out = tmp_path / "subs", tmp_path / "out"
    path = _submit(subs, "s1<img src=x onerror=alert(1)>", b=(2, 4))
    config = _config()
    config.seed = SEED
    grade_many([path], config, out, quiet=True, options=ClassOptions(feedback_html=True))
    instructor = json.loads(next(out.glob("*.json")).read_text())
    assert instructor["seed"] == SEED  # the instructor's report keeps it
    for page in (out / "feedback").iterdir():
        text = page.read_text()
        assert str(SEED) not in text and "seed" not in text.lower() and "expected" not in text, page
        assert "a known hint" in text and "2/4" in text
        assert "<img" not in text, page  # the file name is escaped
    grade_many([path], config, out, quiet=True, options=ClassOptions(feedback_details=True, feedback_html=True))
    detailed = (out / "feedback" / next(p.stem for p in (out / "feedback").glob("*.md"))).with_suffix(".html")
    assert "expected" in detailed.read_text()  # asked for: the grader's message
    detailed.unlink()
    grade_many([path], config, out, quiet=True)  # the choices stay in force until changed
    assert "expected" in detailed.read_text()


# --- fair to honest students ---------------------------------------------------------------------------

def test_saved_outputs_do_not_count_against_the_limit(tmp_path: Path) -> None:
    image = "iVBORw0KGgo" * (2 << 20)  # 22 MB of a base64 "image" in one output, plus 4 MB of text
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": "x = 1",
         "outputs": [{"output_type": "display_data", "metadata": {}, "data": {"image/png": image}},
                     {"output_type": "stream", "name": "stdout", "text": "y" * (4 << 20)}]}]}
    path = tmp_path / "big.ipynb"
    path.write_text(json.dumps(nb))
    assert path.stat().st_size > 26 << 20
    got, cells, digest, problem = read_submission(path, 20 << 20)
    assert problem == "" and cells == [(0, "x = 1")] and digest == file_sha256(path)
    assert "over the grader's limit" in read_submission(path, 20 << 20, max_file_bytes=16 << 20)[3]


def test_two_files_of_one_name_in_two_folders_are_two_students(fake, tmp_path: Path) -> None:
    paths = [_submit(tmp_path / "a", "hw1"), _submit(tmp_path / "b", "hw1", a=(0, 4))]
    grade_many(paths, _config(), tmp_path / "out", quiet=True)
    totals = sorted(r["total"] for r in _csv(tmp_path / "out" / "summary.csv"))
    assert totals == ["2", "3"] and len(list((tmp_path / "out").glob("*.json"))) == 2


# --- one assignment per gradebook ----------------------------------------------------------------------

NB00, NB14 = ROOT / "notebooks" / "00_welcome.ipynb", ROOT / "notebooks" / "14_todays_models.ipynb"


def mixed_class(folder: Path, solved_14: bool = False) -> dict[str, Path]:
    """A class's folder of notebook-13 submissions (alice's and carol's) in which bob handed in his solved
    notebook 00 under the name ``bob_13_todays_models.ipynb`` (its metadata says 00_welcome)."""
    import nbformat

    folder.mkdir(parents=True)
    nb14 = load(NB14)
    files = {"alice": solve(nb14) if solved_14 else nb14, "carol": nb14, "bob": solve(load(NB00))}
    paths = {}
    for login, notebook in files.items():
        paths[login] = folder / f"{login}_13_todays_models.ipynb"
        nbformat.write(notebook, paths[login])
    return paths


def test_a_folder_of_two_notebooks_is_refused_at_once_without_source(tmp_path: Path, capsys) -> None:
    """No gradebook yet, no --source, and the files resolve to notebooks 14 and 00: nothing is graded (the 00 file
    earns nothing), the run names both notebooks and bob's file, and asks for --source."""
    paths = mixed_class(tmp_path / "subs")
    out = tmp_path / "out"
    with pytest.raises(GradebookError, match="--source") as refused:
        grade_many(list(paths.values()), GradeConfig(seed=0), out, quiet=True)
    said = str(refused.value)
    assert "14_todays_models: 2 file(s)" in said and "00_welcome: 1 file(s) (bob_13_todays_models.ipynb)" in said
    with Gradebook(out / GRADEBOOK_NAME) as book:
        assert book.rows("submissions") == [] and book.assignment() is None
    assert not (out / "summary.csv").exists()
    capsys.readouterr()
    assert main([str(tmp_path / "subs"), "--out", str(out), "--unsafe-no-sandbox", "--quiet"]) == 2
    assert "00_welcome: 1 file(s) (bob_13_todays_models.ipynb)" in capsys.readouterr().err


def test_a_file_of_another_notebook_earns_nothing_and_is_reported(tmp_path: Path, capsys) -> None:
    """With --source (notebook 14), bob's notebook 00 is graded against 14: 0 of 14's points beside his classmates'
    max, status wrong-notebook in summary.csv and roster_problems.csv, a line printed, and a message naming both.
    The gradebook records 13 as its assignment; a later run without --source grades another 00 file against it,
    and a run with --source 00 is refused without a record added."""
    paths = mixed_class(tmp_path / "subs")
    out = tmp_path / "out"
    roster = Roster([Student("s1", "Alice A", login="alice"), Student("s2", "Bob B", login="bob"),
                     Student("s3", "Carol C", login="carol")])
    reports = grade_many(list(paths.values()), GradeConfig(seed=0, source=NB14), out,
                         options=ClassOptions(roster=roster))
    said = capsys.readouterr().out
    bob = reports[list(paths).index("bob")]
    assert bob.status == "wrong-notebook" and bob.notebook == "14_todays_models" and bob.total == 0
    points = sum(get_exercise(name).points for name in CHECKS_TABLE["nb14_todays_models"])  # notebook 14's whole
    assert {e.status for e in bob.exercises} == {"missing"} and bob.max_total == reports[0].max_total == points
    assert "this file is notebook 00_welcome, not 14_todays_models" in bob.message
    assert "wrong notebook: bob_13_todays_models.ipynb: this file is notebook 00_welcome" in said
    summary = {r["student"]: r for r in _csv(out / "summary.csv")}
    assert (summary["s2"]["status"], summary["s2"]["total"], summary["s2"]["max_total"]) == ("wrong-notebook", "0",
                                                                                           f"{points:g}")
    assert {r["notebook"] for r in summary.values()} == {"14_todays_models"}
    assert {r["status"] for k, r in summary.items() if k != "s2"} == {"graded"}
    problems = [(r["kind"], r["student"], r["file"]) for r in _csv(out / "roster_problems.csv")]
    assert problems == [("wrong-notebook", "s2", "bob_13_todays_models.ipynb")]
    assert "not the assignment's notebook" in (out / "feedback" / "s2.md").read_text()
    with Gradebook(out / GRADEBOOK_NAME) as book:
        assert book.assignment() == ("14_todays_models", str(NB14.resolve()))
        before = book.rows("submissions")

    dave = tmp_path / "late" / "dave_00_welcome.ipynb"  # a later run, no --source: the gradebook's notebook
    dave.parent.mkdir()
    dave.write_bytes(paths["bob"].read_bytes())
    report, = grade_many([dave], GradeConfig(), out, quiet=True)
    assert report.status == "wrong-notebook" and report.notebook == "14_todays_models" and report.total == 0
    with Gradebook(out / GRADEBOOK_NAME) as book:
        assert book.rows("submissions")[:len(before)] == before and len(book.rows("submissions")) == len(before) + 1
        before = book.rows("submissions")
    with pytest.raises(GradebookError, match="assignment is 14_todays_models"):
        grade_many([dave], GradeConfig(source=NB00), out, quiet=True, options=ClassOptions(regrade=True))
    capsys.readouterr()
    assert main([str(dave), "--out", str(out), "--source", str(NB00), "--regrade", "--unsafe-no-sandbox"]) == 2
    assert "--source" in capsys.readouterr().err
    with Gradebook(out / GRADEBOOK_NAME) as book:
        assert book.rows("submissions") == before  # refused: nothing graded, nothing added


def test_a_gradebook_without_a_recorded_assignment_records_it_at_its_next_run(fake, tmp_path: Path, capsys) -> None:
    """Files that resolve to no notebook record none; the next run that knows one (here --source) records it,
    says that earlier records hold another notebook, and leaves those records as they are."""
    subs, out = tmp_path / "subs", tmp_path / "out"
    grade_many([_submit(subs, "s1")], _config(), out, quiet=True)
    with Gradebook(out / GRADEBOOK_NAME) as book:
        assert book.assignment() is None
        before = book.rows("submissions")
    capsys.readouterr()
    grade_many([_submit(subs, "s2")], GradeConfig(sandbox=False, source=NB00), out)
    said = capsys.readouterr().out
    assert "the gradebook's assignment: 00_welcome" in said
    assert "hold other notebooks (kept as they are): ['fake_nb']" in said
    with Gradebook(out / GRADEBOOK_NAME) as book:
        assert book.assignment() == ("00_welcome", str(NB00.resolve()))
        assert book.rows("submissions")[:len(before)] == before
