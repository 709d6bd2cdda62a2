"""The class's records are never silently wrong (issue 44): a regrade grades the current submission, a roster
change keeps every grade or refuses with the list, a file name that names another student is a problem, every
change of the exports is printed student by student, and the LMS files import as Canvas and Moodle document
them. The grading is the fake of ``tests/grading/test_gradebook.py`` (no sandbox: fast)."""

from __future__ import annotations

import csv
import json
import zipfile
from pathlib import Path

import pytest
from test_gradebook import _csv, _submit, fake_grade

from course_lib.grading import cli
from course_lib.grading.cli import main
from course_lib.grading.records.gradebook import GRADEBOOK_NAME, Gradebook
from course_lib.grading.records.handback import own_error
from course_lib.grading.records.lms import CANVAS_COLUMNS, MOODLE_FIELDS
from course_lib.grading.records.report_types import ExerciseResult
from course_lib.grading.records.roster import UNMATCHED, Roster, Student, read_roster

ROSTER = ("id,name,email,login,canvas_id,sis_user_id,section\n"
          "s01,Alice Archer,alice@uni.edu,alice,101,S0001,A\n"
          "s02,\"Baker, Bob\",bob@uni.edu,bob,102,S0002,A\n"
          "s03,Jörg Müller,joerg@uni.edu,joerg,103,S0003,B\n"
          "s04,김민준,minjun@uni.edu,minjun,104,S0004,B\n")

# Canvas's own gradebook export of the same class (Grades > Export): "Student, ID, SIS User ID, SIS Login ID,
# Section" then one column per assignment, and a "Points Possible" row second. Its ids are Canvas's: the
# SIS Login ID becomes the roster id when it is read as a roster, so every student's key changes.
CANVAS_EXPORT = ("Student,ID,SIS User ID,SIS Login ID,Section,Homework 1 (5501)\n"
                 "    Points Possible,,,,,3.00\n"
                 "\"Archer, Alice\",101,S0001,alice,A,\n"
                 "\"Baker, Bob\",102,S0002,bob,A,\n"
                 "\"Müller, Jörg\",103,S0003,joerg,B,\n"
                 "김민준,104,S0004,minjun,B,\n")


@pytest.fixture
def fake(monkeypatch):
    """The grader replaced by ``tests/grading/test_gradebook.py``'s stand-in (each file says its results)."""
    monkeypatch.setattr(cli, "grade_submission", fake_grade)
    fake_grade.calls = []
    return fake_grade


def _grade(out: Path, *files: Path, extra: tuple[str, ...] = ()) -> int:
    return main([*map(str, files), "--out", str(out), "--unsafe-no-sandbox", *extra])


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def _totals(out: Path) -> dict[str, str]:
    return {r["student"]: r["total"] for r in _csv(out / "summary.csv")}


# --- a regrade grades the current submission ---------------------------------------------------------------

def test_a_regrade_after_a_resubmission_grades_the_current_file(fake, tmp_path: Path, capsys) -> None:
    roster = tmp_path / "roster.csv"
    roster.write_text(ROSTER)
    first, second, out = tmp_path / "first", tmp_path / "second", tmp_path / "grades"
    files = [_submit(first, "hw1_alice"), _submit(first, "hw1_bob", a=(0, 4), b=(0, 4))]
    assert _grade(out, *files, extra=("--roster", str(roster))) == 0
    assert _totals(out)["s02"] == "0"
    resubmitted = _submit(second, "hw1_bob", a=(4, 4), b=(4, 4))  # Bob's resubmission, in another folder
    assert _grade(out, resubmitted) == 0
    assert _totals(out)["s02"] == "3"
    capsys.readouterr()
    fake.calls.clear()
    # The instructor regrades Bob from the ORIGINAL folder: his superseded file is not graded over the current
    # one; the kept copy of his current submission is.
    assert _grade(out, *files, extra=("--regrade-student", "s02")) == 0
    said = capsys.readouterr().out
    assert "superseded by hw1_bob.ipynb" in said and "regrading the current one" in said
    assert _totals(out)["s02"] == "3"
    with Gradebook(out / GRADEBOOK_NAME) as book:
        last = book.history("s02")[-1]
        assert (last.why, last.sha256) == ("regrade", book.history("s02")[1].sha256)
    # A plain run over the original folder leaves Bob's current grade alone too.
    assert _grade(out, *files) == 0
    assert _totals(out)["s02"] == "3"
    # A regrade of a student without a file among those given grades their current submission as well.
    assert _grade(out, files[0], extra=("--regrade-student", "s02")) == 0
    assert "regrading their current submission hw1_bob.ipynb" in capsys.readouterr().out
    assert _totals(out)["s02"] == "3"
    # The instructor names the earlier file: it is graded and becomes current, and the change is printed.
    assert _grade(out, *files, extra=("--regrade-student", "s02", "--grade-given")) == 0
    said = capsys.readouterr().out
    assert "graded as the instructor named it" in said and "changed: s02: total 3 -> 0" in said
    assert _totals(out)["s02"] == "0"
    assert _grade(out, resubmitted, extra=("--regrade-student", "s02")) == 0  # the named one is current now
    assert _totals(out)["s02"] == "0"
    assert _grade(out, resubmitted, extra=("--regrade-student", "s02", "--grade-given")) == 0  # named back
    assert _totals(out)["s02"] == "3"
    capsys.readouterr()
    # A gradebook whose copies are gone (graded before they were kept): the superseded file is still not graded.
    for kept in (out / "submissions").iterdir():
        kept.unlink()
    assert _grade(out, *files, extra=("--regrade-student", "s02")) == 0
    assert "the current one has no kept copy: give its file to regrade it" in capsys.readouterr().out
    assert _totals(out)["s02"] == "3"


# --- every change is printed, student by student -----------------------------------------------------------

def test_every_command_that_changes_an_export_prints_what_changed(fake, tmp_path: Path, capsys) -> None:
    roster = tmp_path / "roster.csv"
    roster.write_text(ROSTER)
    subs, out = tmp_path / "subs", tmp_path / "grades"
    files = [_submit(subs, "hw1_alice"), _submit(subs, "hw1_bob", a=(1, 4))]
    assert _grade(out, *files, extra=("--roster", str(roster))) == 0
    said = capsys.readouterr().out
    assert "changed: s01: new, total 3" in said and "changed: s02: new, total 2" in said
    assert main(["override", "--out", str(out), "s02", "ex_a", "0.5", "--reason", "shape fixed by hand"]) == 0
    said = capsys.readouterr().out
    assert "changed: s02: total 2 -> 2.5 (ex_a 0 -> 0.5: override: shape fixed by hand)" in said
    assert "s01" not in said  # nobody else is mentioned
    assert main(["export", "--out", str(out), "--partial-credit"]) == 0
    assert "changed:" not in capsys.readouterr().out  # Bob's failed exercise is overridden: nothing moves
    _submit(subs, "hw1_alice", a=(2, 4))  # a new submission of Alice's
    assert _grade(out, *files) == 0
    said = capsys.readouterr().out
    assert "changed: s01: total 3 -> 2.5 (ex_a 1 -> 0.5: partial credit 2/4)" in said
    assert "changed: s02" not in said


# --- a roster change keeps every grade or refuses with the list --------------------------------------------

def test_a_roster_switch_to_the_lms_export_keeps_every_grade(fake, tmp_path: Path, capsys) -> None:
    roster, export = tmp_path / "roster.csv", tmp_path / "canvas_export.csv"
    roster.write_text(ROSTER)
    export.write_text(CANVAS_EXPORT, encoding="utf-8")
    subs, out = tmp_path / "subs", tmp_path / "grades"
    files = [_submit(subs, "hw1_alice"), _submit(subs, "hw1_bob", a=(1, 4)), _submit(subs, "hw1_joerg"),
             _submit(subs, "hw1_minjun", a=(0, 4), b=(0, 4))]
    assert _grade(out, *files, extra=("--roster", str(roster), "--assignment", "Homework 1 (5501)")) == 0
    before = _rows(out / "canvas.csv")
    assert [r[-1] for r in before[2:]] == ["3", "2", "3", "0"]
    capsys.readouterr()
    assert main(["export", "--out", str(out), "--roster", str(export)]) == 0
    said = capsys.readouterr().out
    # Every student of the LMS's export is one of the gradebook's: kept under the gradebook's key, said so.
    assert "roster change: s01: the new roster's alice (same" in said and "kept as s01" in said
    assert "changed:" not in said  # no grade moved
    after = _rows(out / "canvas.csv")
    assert after[2:] == before[2:]
    assert _totals(out) == {"s01": "3", "s02": "2", "s03": "3", "s04": "0"}
    # Later runs map files with the re-keyed roster: a new file of Bob's is still s02's.
    _submit(subs, "hw1_bob")
    assert _grade(out, *files) == 0 and _totals(out)["s02"] == "3"


def test_a_roster_that_cannot_map_a_graded_student_is_refused_with_the_list(fake, tmp_path: Path, capsys) -> None:
    roster, new = tmp_path / "roster.csv", tmp_path / "new.csv"
    roster.write_text(ROSTER)
    # Bob is missing; Jörg's row has another email and login (nothing shared): neither can be mapped.
    new.write_text("id,name,email,login\nx1,Alice Archer,alice@uni.edu,alice\nx3,Jörg Müller,jm@other.org,jm\n"
                   "x4,김민준,minjun@uni.edu,minjun\n")
    subs, out = tmp_path / "subs", tmp_path / "grades"
    files = [_submit(subs, "hw1_alice"), _submit(subs, "hw1_bob"), _submit(subs, "hw1_joerg")]
    assert _grade(out, *files, extra=("--roster", str(roster))) == 0
    kept = (out / "roster.csv").read_bytes()
    with pytest.raises(SystemExit) as refused:
        main(["export", "--out", str(out), "--roster", str(new)])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "2 graded student(s)" in err and "s02 (Baker, Bob)" in err and "s03 (Jörg Müller)" in err
    assert (out / "roster.csv").read_bytes() == kept  # nothing changed
    assert _totals(out) == {"s01": "3", "s02": "3", "s03": "3", "s04": ""}


# --- roster matching is exact and explained ----------------------------------------------------------------

def test_a_file_name_that_names_another_student_is_a_problem_not_a_grade(fake, tmp_path: Path, capsys) -> None:
    # Canvas's "Download Submissions" renames each file login_userid_submissionid_filename: "canvas changes all
    # the filenames so that they contain a student name, two id fields. The naming convention also includes an
    # extra field if the assignment was submitted late" (TimHanneman/Canvas_submission_sort, README); e.g.
    # "smithbob_340934_208490284_BobsWork.zip" (mikewesthad/canvas-unzipper, README). The user id is the
    # submitter Canvas recorded. Moodle's "Download all submissions" names them
    # "First Last_participantId_assignsubmission_file_<file name>" (a Moodle feedback-upload guide: "The student
    # folder name is formatted as: First Last_participantId_assignsubmission_file_").
    roster = tmp_path / "roster.csv"
    roster.write_text(ROSTER)
    subs, out = tmp_path / "subs", tmp_path / "grades"
    alice = _submit(subs, "archeralice_101_5001_00_welcome", mtime=1_700_000_000)
    late = Roster([Student("s02", "Baker, Bob", canvas_id="102")]).student_for("bakerbob_LATE_102_5003_hw1-1.ipynb")
    assert late[0].id == "s02" and "Canvas user id 102" in late[1]  # late, and resubmitted ("-1")
    bob = _submit(subs, "bakerbob_102_5002_00_welcome_alice", a=(0, 4), b=(0, 4), mtime=1_700_000_100)
    joerg = _submit(subs, "Jörg Müller_991_assignsubmission_file_hw1", mtime=1_700_000_000)
    assert _grade(out, alice, bob, joerg, extra=("--roster", str(roster))) == 0
    said = capsys.readouterr().out
    totals = _totals(out)
    assert totals["s01"] == "3"  # Alice keeps her grade: the stub submitted later by Bob is not hers
    assert totals["s02"] == ""  # nor is it silently Bob's: a problem to resolve
    assert totals[UNMATCHED + "bakerbob_102_5002_00_welcome_alice.ipynb"] == "0"
    assert totals["s03"] == "3"
    problems = {(r["kind"], r["file"]): r["detail"] for r in _csv(out / "roster_problems.csv")}
    detail = problems["conflict", "bakerbob_102_5002_00_welcome_alice.ipynb"]
    assert "Canvas user id 102" in detail and "recorded s02" in detail and "names s01 ('alice')" in detail
    # Each file's owner is explained.
    assert "roster: archeralice_101_5001_00_welcome.ipynb -> s01: Canvas's download name: Canvas user id 101" in said
    assert "-> s03: Moodle's download name" in said
    # Without Canvas ids the same name names two students (Bob's id 102, Alice's login): ambiguous, never the
    # longer identifier's.
    plain = Roster([Student("102", "Baker, Bob", login="bob"), Student("s01", "Alice Archer", login="alice")])
    owner, why = plain.student_for("bakerbob_102_5002_00_welcome_alice.ipynb")
    assert owner is None and "102 ('102')" in why and "s01 ('alice')" in why
    # An identifier inside a longer one of another student does not count.
    twins = Roster([Student("s4", login="ann"), Student("s5", login="ann_smith")])
    assert twins.student_for("hw_ann_smith.ipynb")[0].id == "s5"


# --- the LMS files -----------------------------------------------------------------------------------------

def test_canvas_csv_matches_on_an_id_or_is_refused_naming_the_students(fake, tmp_path: Path, capsys) -> None:
    # Canvas's gradebook import (The Ohio State University's Canvas guide, "Import a CSV file to Carmen
    # Grades"): "The CSV file you import into Carmen has four required components: Student Name (last name,
    # first name) OR Student ID OR Student SIS User ID ... Only one of these three fields is required. SIS Login
    # ID ... Section ... Assignment Name". A row with no id can be matched by its name only.
    roster = tmp_path / "roster.csv"
    roster.write_text("id,name,email\ns01,Alice Archer,alice@uni.edu\ns02,\"Baker, Bob\",bob@uni.edu\n")
    subs, out = tmp_path / "subs", tmp_path / "grades"
    assert _grade(out, _submit(subs, "hw1_alice"), extra=("--roster", str(roster))) == 0
    err = capsys.readouterr().err
    assert not (out / "canvas.csv").exists()
    assert "canvas.csv not written: 2 roster student(s) have no Canvas ID" in err and "s02 (Baker, Bob)" in err
    # The points possible are checked against the instructor's --points-possible.
    roster.write_text(ROSTER)
    assert main(["export", "--out", str(out), "--roster", str(roster), "--points-possible", "10"]) == 0
    err = capsys.readouterr().err
    assert not (out / "canvas.csv").exists() and "points possible in Canvas are 10" in err and "maximum is 3" in err
    assert main(["export", "--out", str(out), "--points-possible", "3"]) == 0
    canvas = _rows(out / "canvas.csv")
    assert canvas[0] == [*CANVAS_COLUMNS, "fake_nb"] and canvas[1][0].strip() == "Points Possible"
    assert canvas[2] == ["Archer, Alice", "101", "S0001", "alice", "A", "3"]
    assert all(row[1] for row in canvas[2:])  # every row carries the ID Canvas matches on


def test_canvas_points_possible_are_read_from_canvas_own_export_as_the_roster(fake, tmp_path: Path, capsys) -> None:
    export = tmp_path / "canvas_export.csv"
    export.write_text(CANVAS_EXPORT.replace(",3.00", ",10.00"), encoding="utf-8")
    roster = read_roster(export)
    assert roster.points_possible == {"Homework 1 (5501)": 10.0}
    subs, out = tmp_path / "subs", tmp_path / "grades"
    assert _grade(out, _submit(subs, "hw1_alice"),
                  extra=("--roster", str(export), "--assignment", "Homework 1 (5501)")) == 0
    err = capsys.readouterr().err
    assert "points possible in Canvas are 10 (the Points Possible row of the roster" in err
    assert not (out / "canvas.csv").exists()
    # The export as it stands is a roster: the Canvas file is written with Canvas's own ids when they agree.
    export.write_text(CANVAS_EXPORT, encoding="utf-8")
    assert main(["export", "--out", str(out), "--roster", str(export)]) == 0
    rows = _rows(out / "canvas.csv")
    assert rows[2] == ["Archer, Alice", "101", "S0001", "alice", "A", "3"]
    assert [r[1] for r in rows[2:]] == ["101", "102", "103", "104"]


def test_moodle_csv_maps_by_a_field_every_student_has_and_never_aborts(fake, tmp_path: Path, capsys) -> None:
    # Moodle, "Grade import" (docs.moodle.org/311/en/Grade_import): "By default "Map from" is set to First Name,
    # and "Map to" to userid. Change both dropdowns to: "Email Address" to "useremail", or to "Id Number" to
    # "useridnumber" (assuming that your users have ID number fields filled in in their profiles)."; and "Note 3:
    # Importing feedback will also overwrite any grades that are linked to that assessment. Please include both
    # feedback and grades for the activity when mapping". Moodle stops the whole import at a row whose user it
    # cannot find ("User not found"), and an empty cell is "no grade" (it clears a grade entered by hand).
    subs, out = tmp_path / "subs", tmp_path / "grades"
    roster = tmp_path / "roster.csv"
    # No emails at all: the username (login) is what every student has.
    roster.write_text("id,name,login\ns01,Alice Archer,alice\ns02,\"Baker, Bob\",bob\ns03,Jörg Müller,joerg\n")
    files = [_submit(subs, "hw1_alice"), _submit(subs, "hw1_bob", a=(0, 4))]
    assert _grade(out, *files, extra=("--roster", str(roster), "--assignment", "Homework 1")) == 0
    moodle = _rows(out / "moodle.csv")
    assert moodle[0] == ["First name", "Last name", "Username", "Homework 1"]
    assert moodle[1:] == [["Alice", "Archer", "alice", "3"], ["Bob", "Baker", "bob", "2"]]  # Jörg: no grade, no row
    assert all(row[2] for row in moodle[1:])
    # An empty cell only where the instructor asks; a feedback column on request.
    assert main(["export", "--out", str(out), "--moodle-missing", "blank", "--moodle-feedback"]) == 0
    moodle = _rows(out / "moodle.csv")
    assert moodle[0] == ["First name", "Last name", "Username", "Homework 1", "Homework 1 (feedback)"]
    assert moodle[3][:4] == ["Jörg", "Müller", "joerg", ""] and "ex_a 0/1 (fail)" in moodle[2][4]
    # A student without the mapping field: refused before the file is written, naming them.
    roster.write_text("id,name,email\ns01,Alice Archer,alice@uni.edu\ns02,\"Baker, Bob\",\ns03,Jörg Müller,\n")
    capsys.readouterr()
    assert main(["export", "--out", str(out), "--roster", str(roster), "--moodle-map", "email"]) == 0
    err = capsys.readouterr().err
    assert not (out / "moodle.csv").exists()
    assert "moodle.csv not written" in err and "'Email address'" in err and "s02 (Baker, Bob)" in err
    assert "s03 (Jörg Müller)" in err and "User not found" in err
    assert set(MOODLE_FIELDS) == {"email", "username", "idnumber"}


# --- the instructor's levers -------------------------------------------------------------------------------

def test_a_grade_for_a_student_without_a_file_a_hand_graded_question_and_an_extension(fake, tmp_path: Path,
                                                                                        capsys) -> None:
    roster, due = tmp_path / "roster.csv", tmp_path / "extensions.csv"
    roster.write_text(ROSTER)
    subs, out = tmp_path / "subs", tmp_path / "grades"
    late = 1_800_000_000  # 2027-01-15: late for the class, not for Bob's extension
    files = [_submit(subs, "hw1_alice", mtime=late), _submit(subs, "hw1_bob", mtime=late)]
    due.write_text("student,due\ns02,2027-02-01T00:00Z\n")
    assert _grade(out, *files, extra=("--roster", str(roster), "--deadline", "2027-01-01T00:00Z",
                                      "--late-penalty", "50%", "--extensions", str(due))) == 0
    assert _totals(out)["s01"] == "1.5" and _totals(out)["s02"] == "3"
    # Jörg handed in a PDF, graded on paper: points without a file.
    assert main(["override", "--out", str(out), "s03", "ex_a", "1", "--reason", "PDF graded by hand"]) == 0
    assert main(["override", "--out", str(out), "s03", "ex_b", "1.5", "--reason", "PDF graded by hand"]) == 0
    assert _totals(out)["s03"] == "2.5"
    assert _rows(out / "canvas.csv")[4][-1] == "2.5"
    # A question graded by hand with a rubric: points and a comment, recorded, exported, in the feedback.
    assert main(["rubric", "--out", str(out), "s01", "q1", "2", "--max", "2", "--comment", "clear argument"]) == 0
    assert main(["rubric", "--out", str(out), "s01", "q1", "1", "--max", "2", "--comment", "one step missing"]) == 0
    said = capsys.readouterr().out
    assert "changed: s01: total 2.5 -> 2 (q1 2 -> 1: graded by hand: one step missing)" in said
    summary = {r["student"]: r for r in _csv(out / "summary.csv")}
    assert summary["s01"]["q1"] == "1" and summary["s01"]["max_total"] == "5" and summary["s02"]["q1"] == "0"
    with Gradebook(out / GRADEBOOK_NAME) as book:
        assert [r[3] for r in book.rows("manual")] == [2.0, 1.0]  # both records kept
    assert main(["history", "--out", str(out), "s01"]) == 0
    history = capsys.readouterr().out
    assert "s01 q1: 2/2 (clear argument)" in history and "s01 q1: 1/2 (one step missing)" in history
    feedback = (out / "feedback" / "s01.md").read_text()
    assert "graded by hand: one step missing" in feedback and r"hw1\_alice.ipynb" in feedback  # escaped Markdown
    # Handed back: one folder (or zip) per student, holding their own feedback only.
    assert main(["handback", "--out", str(out), "--to", str(tmp_path / "back"), "--zip"]) == 0
    with zipfile.ZipFile(tmp_path / "back" / "s01.zip") as archive:
        assert archive.namelist() == ["s01/feedback.md"]
        assert "Alice Archer" in archive.read("s01/feedback.md").decode()
    assert {p.name for p in (tmp_path / "back").iterdir()} == {"s01.zip", "s02.zip", "s03.zip"}


def test_feedback_shows_the_students_own_errors_never_a_hidden_value() -> None:
    syntax = ExerciseResult("ex", 0, 1, "error", "the exercise cell raised SyntaxError: '[' was never closed",
                            line="x = [1, 2")
    assert "'[' was never closed" in own_error(syntax)
    hidden = ExerciseResult("ex", 0, 1, "error", "case 'hidden 7': your code raised ValueError: 0.123456789",
                            line="raise ValueError(x.sum())")
    assert own_error(hidden) == "on a hidden case your code raised ValueError at: raise ValueError(x.sum())"
    assert "0.1234" not in own_error(hidden)
    failed = ExerciseResult("ex", 0, 1, "fail", "case 'hidden': expected [0.5] got [0.7]")
    assert own_error(failed) == ""


def test_the_course_table_holds_every_assignment_and_canvas_multi_column(fake, tmp_path: Path) -> None:
    roster = tmp_path / "roster.csv"
    roster.write_text(ROSTER)
    one, two = tmp_path / "hw1", tmp_path / "hw2"
    assert _grade(one, _submit(tmp_path / "s1", "hw1_alice"), _submit(tmp_path / "s1", "hw1_bob", a=(0, 4)),
                  extra=("--roster", str(roster), "--assignment", "Homework 1 (5501)")) == 0
    assert _grade(two, _submit(tmp_path / "s2", "hw2_alice", b=(0, 4)),
                  extra=("--roster", str(roster), "--assignment", "Homework 2 (5502)")) == 0
    table = tmp_path / "course.csv"
    assert main(["course-table", str(one), str(two), "--out", str(table), "--canvas", str(tmp_path / "c.csv")]) == 0
    rows = _csv(table)
    assert [(r["id"], r["Homework 1 (5501)"], r["Homework 2 (5502)"]) for r in rows] == [
        ("s01", "3", "1"), ("s02", "2", ""), ("s03", "", ""), ("s04", "", "")]
    canvas = _rows(tmp_path / "c.csv")
    # Canvas's import takes one column per assignment after the five identifying columns.
    assert canvas[0] == [*CANVAS_COLUMNS, "Homework 1 (5501)", "Homework 2 (5502)"]
    assert canvas[1][5:] == ["3", "3"] and canvas[2] == ["Archer, Alice", "101", "S0001", "alice", "A", "3", "1"]


def test_gradescope_results_follow_the_documented_format(fake, tmp_path: Path) -> None:
    # Gradescope, "Autograder Specifications" (gradescope-autograders.readthedocs.io/en/latest/specs/): "Your
    # autograder's output should be in the file results.json, in the following format: { "score": 44.0, //
    # optional, but required if not on each test case below ... "tests": // Optional ... [{ "score": 2.0, //
    # optional ... "max_score": 2.0, // optional "name": "Your name here", // optional "output": "Giant
    # multiline string ...", // optional "visibility": "visible", // Optional visibility setting ...". The
    # visibility settings: "hidden", "after_due_date", "after_published", "visible".
    subs, out = tmp_path / "subs", tmp_path / "grades"
    assert _grade(out, _submit(subs, "hw1_alice", a=(1, 4))) == 0
    results = tmp_path / "results.json"
    assert main(["gradescope", str(out / "hw1_alice.json"), "--out", str(results),
                 "--visibility", "after_due_date", "--test-visibility", "ex_b=hidden"]) == 0
    data = json.loads(results.read_text())
    assert data["score"] == 2.0 and data["visibility"] == "after_due_date"
    assert [(t["name"], t["score"], t["max_score"], t["visibility"]) for t in data["tests"]] == [
        ("ex_a", 0.0, 1.0, "after_due_date"), ("ex_b", 2.0, 2.0, "hidden")]
    assert "SEED" not in results.read_text() and "987654321" not in results.read_text()  # no hidden values
    assert {"score", "tests", "visibility", "stdout_visibility"} <= set(data)


def test_the_grading_guide_says_what_the_commands_do() -> None:
    """docs/grading.md once contradicted the command three times (issue 44): points all or nothing though
    --partial-credit exists, a seed per run though it is kept per gradebook, summary.csv per submission though it
    has a row per student."""
    from conftest import ROOT

    guide = (ROOT / "docs" / "grading.md").read_text()
    assert "**Points are all or nothing per exercise by default**" in guide and "`--partial-credit`" in guide
    assert "drawn once per gradebook" in guide and "once per run" not in guide
    assert "`summary.csv` (one row per student" in guide and "(one row per submission)" not in guide
    with pytest.raises(SystemExit):  # --partial-credit is an option of export (it parses; --help exits 0)
        main(["export", "--help"])


def test_moodles_own_grade_export_is_a_roster_as_it_stands(fake, tmp_path: Path) -> None:
    # Moodle, "Grade import": "The import file format is the same as the corresponding export format." Its plain
    # text export holds the user fields "First name, Last name, ID number, Institution, Department, Email
    # address", one column per grade item and "Last downloaded from this course".
    export = tmp_path / "moodle_export.csv"
    export.write_text("First name,Last name,ID number,Institution,Department,Email address,"
                      "Assignment: Homework 1 (Real),Last downloaded from this course\n"
                      "Alice,Archer,S0001,Uni,CS,alice@uni.edu,-,1700000000\n"
                      "Jörg,Müller,S0003,Uni,CS,joerg@uni.edu,-,1700000000\n"
                      "민준,김,,Uni,CS,minjun@uni.edu,-,1700000000\n", encoding="utf-8")
    roster = read_roster(export)
    assert [(s.id, s.email, s.first_last()) for s in roster.students] == [
        ("S0001", "alice@uni.edu", ("Alice", "Archer")), ("S0003", "joerg@uni.edu", ("Jörg", "Müller")),
        ("minjun@uni.edu", "minjun@uni.edu", ("민준", "김"))]
    subs, out = tmp_path / "subs", tmp_path / "grades"
    files = [_submit(subs, "hw1_alice@uni.edu"), _submit(subs, "hw1_S0003", a=(0, 4))]
    assert _grade(out, *files, extra=("--roster", str(export), "--assignment", "Assignment: Homework 1")) == 0
    moodle = _rows(out / "moodle.csv")
    assert moodle == [["First name", "Last name", "Email address", "Assignment: Homework 1"],
                      ["Alice", "Archer", "alice@uni.edu", "3"], ["Jörg", "Müller", "joerg@uni.edu", "2"]]


def test_a_question_graded_by_hand_for_a_student_without_a_file_keeps_the_assignments_maximum(
        fake, tmp_path: Path) -> None:
    roster = tmp_path / "roster.csv"
    roster.write_text(ROSTER)
    out = tmp_path / "grades"
    assert _grade(out, _submit(tmp_path / "subs", "hw1_alice"), extra=("--roster", str(roster))) == 0
    assert main(["rubric", "--out", str(out), "s03", "q1", "2", "--max", "2", "--comment", "oral exam"]) == 0
    summary = {r["student"]: r for r in _csv(out / "summary.csv")}
    assert (summary["s03"]["total"], summary["s03"]["max_total"], summary["s03"]["ex_a"]) == ("2", "5", "0")
    assert summary["s01"]["max_total"] == "5" and summary["s01"]["q1"] == "0"  # the question is everyone's
    assert "graded by hand: oral exam" in (out / "feedback" / "s03.md").read_text()


def test_an_lms_file_where_two_students_share_the_matching_id_is_refused(fake, tmp_path: Path, capsys) -> None:
    roster = tmp_path / "roster.csv"
    roster.write_text("id,name,email,canvas_id\ns01,Alice Archer,alice@uni.edu,101\n"
                      "s02,Alice Archer (2),alice@uni.edu,101\n")
    out = tmp_path / "grades"
    assert _grade(out, _submit(tmp_path / "subs", "hw1_s01"), _submit(tmp_path / "subs", "hw1_s02"),
                  extra=("--roster", str(roster))) == 0
    err = capsys.readouterr().err
    assert not (out / "canvas.csv").exists() and not (out / "moodle.csv").exists()
    assert "canvas.csv not written: these roster students share the id" in err and "101: s01, s02" in err
    assert "moodle.csv not written" in err and "alice@uni.edu: s01, s02" in err


def test_a_first_roster_given_after_grading_keeps_the_grades_of_the_files_it_names(fake, tmp_path: Path,
                                                                                    capsys) -> None:
    subs, out, roster = tmp_path / "subs", tmp_path / "grades", tmp_path / "roster.csv"
    roster.write_text(ROSTER)
    assert _grade(out, _submit(subs, "hw1_alice"), _submit(subs, "hw1_bob", a=(0, 4)), _submit(subs, "hw1_zed")) == 0
    assert set(_totals(out)) == {"hw1_alice", "hw1_bob", "hw1_zed"}  # no roster: the files' names
    capsys.readouterr()
    assert main(["export", "--out", str(out), "--roster", str(roster)]) == 0
    said = capsys.readouterr()
    assert "roster: hw1_alice (hw1_alice.ipynb) is the roster's s01 ('alice' in the file name), kept as hw1_alice" \
        in said.out
    assert "hw1_zed (hw1_zed.ipynb): no roster student's" in said.err
    canvas = {row[1]: row[-1] for row in _rows(out / "canvas.csv")[2:]}
    assert canvas == {"101": "3", "102": "2", "103": "", "104": ""}  # Alice's and Bob's grades, not blanks
