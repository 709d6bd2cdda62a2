"""The class-records subcommands of ``course-grade`` (dispatched by :func:`course_lib.grading.cli.main`):

    course-grade rubric --out grades/ s07 q1 2 --max 3 --comment "clear, one step missing"   # a hand-graded question
    course-grade handback --out grades/ --to handback/ [--zip]      # one folder (or zip) per student
    course-grade class-report --out grades/                         # grades/class_report.html and .md
    course-grade course-table grades_hw1/ grades_hw2/ --out course.csv [--canvas canvas_all.csv]
    course-grade gradescope grades/hw1_alice.json --out results.json [--visibility after_due_date]

Each command that changes what an export shows prints what changed, student by student (as every command does).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .records.class_report import write_class_report
from .records.course_table import write_course_table
from .records.exports import report_from_dict
from .records.gradebook import GRADEBOOK_NAME, Gradebook, GradebookError
from .records.handback import STATUS_TEXT, hand_back, own_error
from .records.publish import ClassOptions, export, stored_roster

__all__ = ["COMMANDS", "gradescope_results", "GRADESCOPE_VISIBILITY"]

#: Gradescope's visibility settings ("Autograder Specifications").
GRADESCOPE_VISIBILITY = ("hidden", "after_due_date", "after_published", "visible")


def open_gradebook(out: Path, parser: argparse.ArgumentParser, must_exist: bool = True) -> Gradebook | None:
    """The gradebook in ``out``: a usage error when it cannot be read, or when there is none and ``must_exist``
    (otherwise ``None``). Every ``course-grade`` command that reads a class's records opens it here."""
    if not (out / GRADEBOOK_NAME).is_file():
        if must_exist:
            parser.error(f"--out {out}: no gradebook there ({GRADEBOOK_NAME}); grade into it first")
        return None
    try:
        return Gradebook(out / GRADEBOOK_NAME)
    except GradebookError as err:
        parser.error(str(err))
        raise


def _open(out: Path, parser: argparse.ArgumentParser) -> Gradebook:
    """The gradebook in ``out``, which must exist."""
    book = open_gradebook(out, parser)
    assert book is not None
    return book


def _rubric(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="course-grade rubric",
                                     description="Record the points and comment of a question graded by hand (a "
                                                 "record added to the gradebook; the latest counts).")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("student")
    parser.add_argument("question", help="the question's name, e.g. q1 (a column of every export)")
    parser.add_argument("points", nargs="?", type=float, default=None)
    parser.add_argument("--max", type=float, required=True, help="the question's points possible")
    parser.add_argument("--comment", default="", help="what the student reads in their feedback")
    parser.add_argument("--withdraw", action="store_true", help="withdraw the student's points for the question")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if (args.points is None) != args.withdraw:
        parser.error("give POINTS, or --withdraw without points")
    with _open(args.out, parser) as book:
        roster = stored_roster(args.out)
        known = set(book.current()) | (set(roster.by_id) if roster is not None else set())
        if args.student not in known:
            parser.error(f"student {args.student!r}: not in the gradebook nor on the roster")
        exercises = {g.exercise for r in book.current().values() for g in book.grades(r.id)}
        if args.question in exercises:
            parser.error(f"question {args.question!r}: an autograded exercise of the assignment has this name "
                         "(use `course-grade override` for it)")
        try:
            book.add_manual(args.student, args.question, args.points, args.max, args.comment)
        except GradebookError as err:
            parser.error(str(err))
        export(book, args.out, ClassOptions(), quiet=args.quiet)
    return 0


def _handback(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="course-grade handback",
                                     description="One folder (or zip) per student with their feedback, to hand back.")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--to", type=Path, required=True, help="the folder to write into")
    parser.add_argument("--zip", action="store_true", help="one .zip per student instead of a folder")
    args = parser.parse_args(argv)
    if not (args.out / "feedback").is_dir():
        parser.error(f"--out {args.out}: no feedback/ folder there; grade into it first")
    made = hand_back(args.out / "feedback", args.to, args.zip)
    print(f"{len(made)} student(s) in {args.to}/")
    return 0


def _course_table(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="course-grade course-table",
                                     description="One table of the course: every assignment's final totals, one "
                                                 "column each (and Canvas's multi-column import).")
    parser.add_argument("gradebooks", nargs="+", type=Path, help="the --out folder of each assignment, in order")
    parser.add_argument("--out", type=Path, required=True, help="the CSV to write")
    parser.add_argument("--canvas", type=Path, default=None, help="also write Canvas's multi-column import here")
    args = parser.parse_args(argv)
    for folder in args.gradebooks:
        if not (folder / GRADEBOOK_NAME).is_file():
            parser.error(f"{folder}: no gradebook there ({GRADEBOOK_NAME})")
    try:
        columns = write_course_table(args.gradebooks, args.out, args.canvas)
    except ValueError as err:
        parser.error(str(err))
    print(f"{args.out}: {len(columns)} assignment(s): {', '.join(columns)}")
    return 0


def gradescope_results(report: dict, visibility: str = "visible", output: str = "",
                       per_test: dict[str, str] | None = None) -> dict:
    """Gradescope's ``results.json`` for one submission's report (the instructor's JSON report): one test per
    exercise with its score, ``max_score``, the status and what a student may read of it (never a hidden value:
    :func:`course_lib.grading.records.handback.own_error`), each with ``visibility`` (``per_test``: an
    exercise's own)."""
    per_test = per_test or {}
    for given in (visibility, *per_test.values()):
        if given not in GRADESCOPE_VISIBILITY:
            raise ValueError(f"visibility: expected one of {GRADESCOPE_VISIBILITY}, got {given!r}")
    parsed = report_from_dict(report)
    tests = []
    for result in parsed.exercises:
        text = own_error(result) or STATUS_TEXT.get(result.status, result.status)
        if result.hint:
            text += f"\nhint: {result.hint}"
        tests.append({"name": result.exercise, "score": float(result.score), "max_score": float(result.max),
                      "status": "passed" if result.status == "pass" else "failed",
                      "output": f"{result.status}: {text} ({result.cases_passed}/{result.cases_total} hidden "
                                "cases passed)", "visibility": per_test.get(result.exercise, visibility)})
    return {"score": float(sum(t["score"] for t in tests)), "execution_time": round(parsed.elapsed_s),
            "output": output or f"graded: {Path(parsed.submission).name}", "visibility": visibility,
            "stdout_visibility": "hidden", "tests": tests}


def _gradescope(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="course-grade gradescope",
                                     description="Gradescope's autograder results.json from a submission's JSON "
                                                 "report (run course-grade in the autograder, then this).")
    parser.add_argument("report", type=Path, help="the submission's <name>.json report")
    parser.add_argument("--out", type=Path, default=Path("/autograder/results/results.json"))
    parser.add_argument("--visibility", choices=GRADESCOPE_VISIBILITY, default="visible",
                        help="when students see the results (Gradescope's setting)")
    parser.add_argument("--test-visibility", action="append", default=[], metavar="EXERCISE=VISIBILITY",
                        help="one exercise's own visibility, e.g. fx_attend=hidden (repeatable)")
    args = parser.parse_args(argv)
    per_test = dict(item.partition("=")[::2] for item in args.test_visibility)
    try:
        report = json.loads(args.report.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        parser.error(f"{args.report}: {err}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    try:
        results = gradescope_results(report, args.visibility, per_test=per_test)
    except ValueError as err:
        parser.error(str(err))
    args.out.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


def _class_report(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="course-grade class-report",
                                     description="The class at a glance: per exercise the score distribution, the "
                                                 "known mistakes, the common errors, who is stuck; similar "
                                                 "submissions flagged for review (never a penalty).")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    with _open(args.out, parser) as book:
        written = write_class_report(book, args.out, stored_roster(args.out))
    print("class report: " + ", ".join(str(p) for p in written))
    return 0


#: ``course-grade <name> ...``: the subcommands of this module.
COMMANDS = {"rubric": _rubric, "handback": _handback, "course-table": _course_table, "gradescope": _gradescope,
            "class-report": _class_report}
