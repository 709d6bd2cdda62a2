"""Feedback files to hand back to students: ``feedback/<student>.md`` (and ``.html`` on request).

A student's file says, per exercise, the points (after the scoring rule and any override, with the
instructor's reason), the status, how many hidden cases passed and the hint of the known mistake the output
matched; then the late penalty and the total. It never holds the seed of the hidden cases, the limits, the
versions or the file's hash, and by default nothing that could show a hidden case's values: the grader's
messages ("case 'batch 2': expected ... got ...") and the graded line are left out, a sentence per status
stands in for them. ``--feedback-details`` adds the messages and lines (they may quote hidden values and
expected outputs: a choice for the instructor). The instructor's JSON reports keep everything.

Every string that came from a submission is escaped: Markdown and HTML in the ``.md`` file
(:func:`course_lib.grading.records.report.escape_markdown`), HTML in the ``.html`` file (``html.escape``).
"""

from __future__ import annotations

import html
import re
import shutil
import zipfile
from pathlib import Path

from ..judging.scoring import ScoringRule
from .exports import HAND_GRADED, StudentRow
from .report import escape_markdown
from .report_types import ExerciseResult

__all__ = ["feedback_markdown", "feedback_html", "write_feedback", "STATUS_TEXT", "own_error", "hand_back"]

#: What a student reads for each status when the grader's own messages are withheld.
STATUS_TEXT = {
    "pass": "every hidden case passed",
    "fail": "your code ran, but some hidden cases gave a different result",
    "error": "your code raised an error or went over a limit",
    "timeout": "your code took longer than the time limit",
    "missing": "no cell defines this exercise",
    "not-implemented": "the exercise is not implemented yet",
    "forbidden": "the grader refused this cell (an import or a call it does not allow): ask your instructor",
}


def own_error(result: ExerciseResult) -> str:
    """What a student may read of an error of their own code: the syntax error, the exception their exercise
    cell raised, a refused line, the sandbox's limit, with the line; of an exception raised on a hidden case only
    its type and the student's own line (its message could show the hidden case's values). "" for none."""
    if result.status not in ("error", "forbidden", "timeout") or not result.message:
        return ""
    if result.message.startswith("case "):  # raised on a hidden case: the message may quote its values
        found = re.search(r"your code raised ([A-Za-z_][A-Za-z0-9_.]*)", result.message)
        if found is None:
            return ""
        return f"on a hidden case your code raised {found[1]}" + (f" at: {result.line}" if result.line else "")
    return result.message + (f" (line: {result.line})" if result.line and result.line not in result.message else "")


def _lines(row: StudentRow, rule: ScoringRule, details: bool) -> list[tuple[str, str, str, str, str]]:
    """``(exercise, points, status, cases, comment)`` per exercise, every string escaped later by the caller."""
    results = {r.exercise: r for r in row.report.exercises} if row.report else {}
    out = []
    for line in row.exercises:
        result = results.get(line.exercise)
        comment = [STATUS_TEXT.get(line.status, line.status)]
        if line.status == HAND_GRADED:
            comment = [f"graded by hand: {line.comment}" if line.comment else "graded by hand"]
        elif not details and result is not None and (own := own_error(result)):
            comment = [own]
        if details and result is not None and result.message:
            comment = [result.message] + ([f"line: {result.line}"] if result.line else [])
        if result is not None and result.hint:
            comment.append(f"hint: {result.hint}")
        if rule.partial_credit and line.status == "fail":
            comment.append(f"partial credit {line.cases_passed}/{line.cases_total}")
        if line.override is not None:
            comment.append(f"adjusted by your instructor: {line.override.reason}")
        out.append((line.exercise, f"{line.points:g} / {line.max:g}", line.status,
                    f"{line.cases_passed}/{line.cases_total}", "; ".join(comment)))
    return out


def _late(row: StudentRow) -> str:
    if row.factor >= 1:
        return ""
    return (f"submitted {row.late_s / 3600:.1f} hours after the deadline: late penalty "
            f"{(1 - row.factor) * 100:g}% of {row.points:g} points")


def _problem(row: StudentRow) -> str:
    """What was wrong with the file itself ("" when it was graded as handed in), in plain text."""
    if row.submission is None or row.submission.status == "graded":
        return ""
    if row.submission.status == "wrong-notebook":  # graded against the assignment all the same
        return f"This file is not the assignment's notebook: {row.submission.message}"
    return f"The file could not be graded: {row.submission.message}"


def _graded(row: StudentRow) -> str:
    """Which file and when: ``"graded: hw1_alice.ipynb (submitted 2026-11-20T10:00:00Z), graded at ..."``."""
    if row.submission is None:
        return "no file: graded by your instructor by hand"
    submitted = f" (submitted {row.submitted_at})" if row.submitted_at else ""
    return f"graded file: {row.submission.file}{submitted}, graded at {row.submission.graded_at}"


def _assignment(row: StudentRow, assignment: str) -> str:
    notebook = row.submission.notebook if row.submission is not None else ""
    return f"{assignment} ({notebook})" if assignment and notebook and assignment != notebook else \
        (assignment or notebook)


def feedback_markdown(row: StudentRow, rule: ScoringRule, details: bool = False, assignment: str = "") -> str:
    """One student's feedback as Markdown (every submission string escaped); ``assignment``: the LMS's name."""
    title = escape_markdown(row.student.name if row.student and row.student.name else row.key, 200)
    lines = [f"# Feedback: {title}", "", f"Assignment: {escape_markdown(_assignment(row, assignment))}", "",
             escape_markdown(_graded(row), 400), "", f"**Total: {row.total:g} / {row.max_total:g}**", ""]
    if problem := _problem(row):
        lines += [f"> {escape_markdown(problem)}", ""]
    lines += ["| exercise | points | status | hidden cases passed | comment |", "|---|---|---|---|---|"]
    for exercise, points, status, cases, comment in _lines(row, rule, details):
        lines.append(f"| {escape_markdown(exercise)} | {points} | {escape_markdown(status)} | {cases} | "
                     f"{escape_markdown(comment, 1000)} |")
    if late := _late(row):
        lines += ["", late]
    lines += ["", f"Scoring: {rule.describe()}."]
    return "\n".join(lines) + "\n"


def feedback_html(row: StudentRow, rule: ScoringRule, details: bool = False, assignment: str = "") -> str:
    """One student's feedback as a standalone HTML page (every string escaped)."""
    e = html.escape
    name = row.student.name if row.student and row.student.name else row.key
    cells = "".join(f"<tr><td>{e(x)}</td><td>{e(p)}</td><td>{e(s)}</td><td>{e(c)}</td><td>{e(m)}</td></tr>"
                    for x, p, s, c, m in _lines(row, rule, details))
    problem = f"<p>{e(_problem(row))}</p>" if _problem(row) else ""
    late = f"<p>{e(_late(row))}</p>" if _late(row) else ""
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Feedback</title></head><body>"
            f"<h1>Feedback: {e(name)}</h1><p>Assignment: {e(_assignment(row, assignment))}</p>"
            f"<p>{e(_graded(row))}</p>"
            f"<p><strong>Total: {row.total:g} / {row.max_total:g}</strong></p>{problem}"
            "<table><tr><th>exercise</th><th>points</th><th>status</th><th>hidden cases passed</th>"
            f"<th>comment</th></tr>{cells}</table>{late}<p>Scoring: {e(rule.describe())}.</p></body></html>\n")


def _file_name(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9._@-]+", "_", key)[:100].lstrip(".-") or "student"


def write_feedback(table: list[StudentRow], folder: Path, rule: ScoringRule, details: bool = False,
                   as_html: bool = False, assignment: str = "") -> list[Path]:
    """Write every graded student's feedback into ``folder``; returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written, taken = [], set()
    for row in table:
        if not row.graded:
            continue
        name = _file_name(row.key)
        while name in taken:
            name += "_"
        taken.add(name)
        path = folder / f"{name}.md"
        path.write_text(feedback_markdown(row, rule, details, assignment), encoding="utf-8")
        written.append(path)
        if as_html:
            page = folder / f"{name}.html"
            page.write_text(feedback_html(row, rule, details, assignment), encoding="utf-8")
            written.append(page)
    return written


def hand_back(feedback: Path, to: Path, as_zip: bool = False) -> list[Path]:
    """One folder (or ``.zip``) per student in ``to`` holding that student's feedback files, and nothing of
    anyone else's, ready to upload or mail: ``to/<student>/feedback.md`` (and ``.html``)."""
    to.mkdir(parents=True, exist_ok=True)
    made = []
    for student in sorted({p.stem for p in feedback.glob("*.md")}):
        files = [p for p in (feedback / f"{student}.md", feedback / f"{student}.html") if p.is_file()]
        if as_zip:
            target = to / f"{student}.zip"
            with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
                for f in files:
                    archive.write(f, f"{student}/feedback{f.suffix}")
        else:
            target = to / student
            target.mkdir(exist_ok=True)
            for f in files:
                shutil.copyfile(f, target / f"feedback{f.suffix}")
        made.append(target)
    return made
