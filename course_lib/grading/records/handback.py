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
from pathlib import Path

from ..judging.scoring import ScoringRule
from .exports import StudentRow
from .report import escape_markdown

__all__ = ["feedback_markdown", "feedback_html", "write_feedback", "STATUS_TEXT"]

#: What a student reads for each status when the grader's own messages are withheld.
STATUS_TEXT = {
    "pass": "every hidden case passed",
    "fail": "your code ran, but some hidden cases gave a different result",
    "error": "your code raised an error or went over a limit on a hidden case",
    "timeout": "your code took longer than the time limit",
    "missing": "no cell defines this exercise",
    "not-implemented": "the exercise is not implemented yet",
    "forbidden": "the grader refused this cell (an import or a call it does not allow): ask your instructor",
}


def _lines(row: StudentRow, rule: ScoringRule, details: bool) -> list[tuple[str, str, str, str, str]]:
    """``(exercise, points, status, cases, comment)`` per exercise, every string escaped later by the caller."""
    results = {r.exercise: r for r in row.report.exercises} if row.report else {}
    out = []
    for line in row.exercises:
        result = results.get(line.exercise)
        comment = [STATUS_TEXT.get(line.status, line.status)]
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
    assert row.submission is not None
    if row.submission.status == "graded":
        return ""
    if row.submission.status == "wrong-notebook":  # graded against the assignment all the same
        return f"This file is not the assignment's notebook: {row.submission.message}"
    return f"The file could not be graded: {row.submission.message}"


def feedback_markdown(row: StudentRow, rule: ScoringRule, details: bool = False) -> str:
    """One student's feedback as Markdown (every submission string escaped)."""
    assert row.submission is not None
    title = escape_markdown(row.student.name if row.student and row.student.name else row.key, 200)
    lines = [f"# Feedback: {title}", "", f"Assignment: {escape_markdown(row.submission.notebook)}", "",
             f"**Total: {row.total:g} / {row.max_total:g}**", ""]
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


def feedback_html(row: StudentRow, rule: ScoringRule, details: bool = False) -> str:
    """One student's feedback as a standalone HTML page (every string escaped)."""
    assert row.submission is not None
    e = html.escape
    name = row.student.name if row.student and row.student.name else row.key
    cells = "".join(f"<tr><td>{e(x)}</td><td>{e(p)}</td><td>{e(s)}</td><td>{e(c)}</td><td>{e(m)}</td></tr>"
                    for x, p, s, c, m in _lines(row, rule, details))
    problem = f"<p>{e(_problem(row))}</p>" if _problem(row) else ""
    late = f"<p>{e(_late(row))}</p>" if _late(row) else ""
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Feedback</title></head><body>"
            f"<h1>Feedback: {e(name)}</h1><p>Assignment: {e(row.submission.notebook)}</p>"
            f"<p><strong>Total: {row.total:g} / {row.max_total:g}</strong></p>{problem}"
            "<table><tr><th>exercise</th><th>points</th><th>status</th><th>hidden cases passed</th>"
            f"<th>comment</th></tr>{cells}</table>{late}<p>Scoring: {e(rule.describe())}.</p></body></html>\n")


def _file_name(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9._@-]+", "_", key)[:100].lstrip(".-") or "student"


def write_feedback(table: list[StudentRow], folder: Path, rule: ScoringRule, details: bool = False,
                   as_html: bool = False) -> list[Path]:
    """Write every graded student's feedback into ``folder``; returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written, taken = [], set()
    for row in table:
        if row.submission is None:
            continue
        name = _file_name(row.key)
        while name in taken:
            name += "_"
        taken.add(name)
        path = folder / f"{name}.md"
        path.write_text(feedback_markdown(row, rule, details), encoding="utf-8")
        written.append(path)
        if as_html:
            page = folder / f"{name}.html"
            page.write_text(feedback_html(row, rule, details), encoding="utf-8")
            written.append(page)
    return written
