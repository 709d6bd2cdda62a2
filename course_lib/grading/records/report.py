"""Writing reports: one JSON and one Markdown file per submission, and the class's CSV files.

- ``<name>.json``: everything (:class:`course_lib.grading.records.report_types.SubmissionReport` as a dict),
  written with ``ensure_ascii`` so that any string (a lone surrogate from an exception message included) is valid JSON;
- ``<name>.md``: the same for a human. Every string that came from a submission (file name, messages,
  lines) is escaped for Markdown and HTML, so a message cannot draw a table, a heading or an ``<img>``;
- :func:`write_csv`: ``grades.csv`` (one row per report and exercise) and ``summary.csv`` (one row per
  report) for a list of reports in hand. ``course-grade`` writes the class's files from its gradebook
  instead (:mod:`course_lib.grading.records.exports`, with the same rows per exercise). A cell that a spreadsheet
  would read as a formula (``=``, ``+``, ``-``, ``@``, tab, CR first) is prefixed with ``'``.

Example (a fenced block, so that the API reference shows the tag as text instead of rendering it):

```python
>>> escape_markdown("| **Score: 1 / 1** <img src=x onerror=alert(1)>")
'\\\\| \\\\*\\\\*Score: 1 / 1\\\\*\\\\* &lt;img src=x onerror=alert(1)&gt;'
>>> csv_safe("=HYPERLINK(\\"http://x\\")")
'\\'=HYPERLINK("http://x")'

```
"""

from __future__ import annotations

import csv
import html
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .report_types import SubmissionReport

__all__ = ["report_name", "write_json", "write_markdown", "write_csv", "to_markdown", "escape_markdown", "csv_safe",
           "long_rows", "flags_text", "terminal_safe"]

_SYMBOL = {"pass": "✅", "fail": "❌", "error": "💥", "timeout": "⏳", "missing": "❔", "not-implemented": "⬜",
           "forbidden": "⛔"}
_MARKDOWN = re.compile(r"([\\`*_\[\]#!|~])")  # what could start emphasis, code, links, headings, tables


def _text(value: Any) -> str:
    """Any value as a string that encodes as UTF-8 (lone surrogates and the like replaced)."""
    return str(value).encode("utf-8", "replace").decode("utf-8")


def escape_markdown(value: Any, limit: int = 2000) -> str:
    """Text from a submission, safe in a Markdown table cell or paragraph: one line, HTML and Markdown escaped,
    control characters written as their escapes."""
    text = terminal_safe(_text(value)[:limit].replace("\r", " ").replace("\n", " "))
    return _MARKDOWN.sub(r"\\\1", html.escape(text, quote=False))


#: Characters a terminal obeys rather than shows: C0 and C1 controls but the line feed and tab (ESC starts the
#: sequences that clear the screen, move the cursor or set the window title; CR rewrites the line), DEL, and
#: Unicode's bidirectional controls and line separators (a right-to-left override reverses what follows; the
#: joiners that Persian or Hindi names need stay).
_TERMINAL_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """``text`` as a terminal shows it literally: every control or format character written as its escape
    (``\\x1b``, ``\\r``, ``\\u202e``), so that a file name or a message from a submission cannot clear the
    screen, rewrite an earlier line ("changed: bob: new, total 1") or reorder what follows."""
    return _TERMINAL_CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), _text(text))


def csv_safe(value: Any) -> Any:
    """A CSV cell a spreadsheet will not evaluate and a terminal will not obey (numbers pass through unchanged;
    line feeds and tabs stay, inside the cell's quotes)."""
    if isinstance(value, (int, float)) or value is None:
        return value
    text = _text(value)
    formula = text[:1] in ("=", "+", "-", "@", "\t", "\r")
    return ("'" if formula else "") + terminal_safe(text)  # a report read with `cat` cannot drive the terminal


def report_name(submission: str, taken: set[str]) -> str:
    """A file-system-safe, unique base name for a submission's reports."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(submission).stem)[:80].lstrip(".-") or "submission"
    name, n = stem, 2
    while name in taken:
        name, n = f"{stem}-{n}", n + 1
    taken.add(name)
    return name


def write_json(report: SubmissionReport, path: Path) -> None:
    """Write ``report`` as JSON (ASCII, so that any string survives) to ``path``."""
    path.write_text(json.dumps(report.to_dict(), indent=2, ensure_ascii=True) + "\n", encoding="ascii")


def _footer(report: SubmissionReport) -> list[str]:
    lines = ["", "---", "", f"- graded at {report.graded_at} in {report.elapsed_s:.1f} s "
             f"({report.kernel_starts} sandbox start(s)); status: {escape_markdown(report.status)}"]
    limits = report.limits
    if limits:
        lines.append(f"- limits: {limits.get('cell_timeout_s')} s per cell, {limits.get('total_timeout_s')} s per "
                     f"submission, {limits.get('memory_mb')} MB of memory; static policy "
                     f"{'on' if limits.get('policy') else 'OFF'}")
    lines.append("- sandbox: " + ("bubblewrap" if report.sandbox else "**NONE: graded without a sandbox**"))
    lines.append("- versions: " + ", ".join(f"{k} {escape_markdown(v)}" for k, v in report.versions.items()))
    if report.sha256:
        lines.append(f"- submission sha256: `{report.sha256}`")
    for note in report.notes:
        lines.append(f"- note: {escape_markdown(note)}")
    return lines


def _details(report: SubmissionReport) -> list[str]:
    lines = []
    for r in (r for r in report.exercises if r.status != "pass"):
        lines += ["", f"### {escape_markdown(r.exercise)}: {r.status}", "",
                  escape_markdown(r.message) or "(no message)"]
        if r.cell is not None:
            where = f", {escape_markdown(r.line, 300)}" if r.line else ""
            lines.append(f"\n- graded cell: cell {r.cell} of the submission{where}")
        if r.hint:
            lines.append(f"- hint: {escape_markdown(r.hint)}")
    return ["", "## Details", *lines] if lines else []


def to_markdown(report: SubmissionReport) -> str:
    """The readable report of one submission."""
    lines = [f"# Grading report: {escape_markdown(Path(report.submission).name, 200)}", ""]
    if not report.sandbox:
        lines += ["> **Graded without a sandbox** (`--unsafe-no-sandbox`): do not trust this score for "
                  "untrusted code.", ""]
    lines.append(f"**Score: {report.total:g} / {report.max_total:g}**" +
                 (f" — notebook {escape_markdown(report.notebook)}" if report.notebook else ""))
    if report.message:
        lines += ["", f"> {escape_markdown(report.message)}"]
    lines += _flags(report)
    if report.exercises:
        lines += ["", "| exercise | score | status | cases passed | message |", "|---|---|---|---|---|"]
        for r in report.exercises:
            lines.append(f"| {escape_markdown(r.exercise)} | {r.score:g} / {r.max:g} | {_SYMBOL.get(r.status, '')} "
                         f"{r.status} | {r.cases_passed}/{r.cases_total} | {escape_markdown(r.message, 300)} |")
        lines += _details(report)
    return "\n".join(lines + _footer(report)) + "\n"


def flags_text(report: SubmissionReport) -> str:
    """The report's flags for review in one CSV cell: ``reason: line | line; reason: ...`` ("" without any)."""
    return "; ".join(f"{_text(flag.get('reason', ''))}: {' | '.join(_text(x) for x in flag.get('lines', []))}"
                     for flag in report.flags if isinstance(flag, dict))[:4000]


def _flags(report: SubmissionReport) -> list[str]:
    if not report.flags:
        return []
    lines = ["", "## Flagged for review", "", "The graded cells name the grader's internals; the submission was "
             "graded as usual (read the lines before publishing):", ""]
    for flag in report.flags:
        lines.append(f"- **{escape_markdown(flag.get('reason', ''), 300)}**")
        lines += [f"  - {escape_markdown(line, 300)}" for line in flag.get("lines", [])]
    return lines


def write_markdown(report: SubmissionReport, path: Path) -> None:
    """Write ``report`` as a readable Markdown page to ``path``."""
    path.write_text(to_markdown(report), encoding="utf-8")


_LONG_FIELDS = ["submission", "report", "notebook", "exercise", "score", "max", "status", "message", "cases_passed",
                "cases_total", "cell", "line", "total", "max_total", "submission_status", "sandbox", "elapsed_s",
                "course_lib", "torch", "python"]


def long_rows(name: str, rep: SubmissionReport) -> list[dict[str, Any]]:
    """The rows of ``grades.csv`` for one report (``name``: its reports' base name), one per exercise."""
    common = {"submission": rep.submission, "report": name, "notebook": rep.notebook, "total": rep.total,
              "max_total": rep.max_total, "submission_status": rep.status, "elapsed_s": rep.elapsed_s,
              "sandbox": "yes" if rep.sandbox else "NO", "course_lib": rep.versions.get("course_lib", ""),
              "torch": rep.versions.get("torch", ""), "python": rep.versions.get("python", "")}
    if not rep.exercises:
        return [{**common, "exercise": "", "score": 0, "max": 0, "status": "missing", "message": rep.message}]
    return [{**common, "exercise": r.exercise, "score": r.score, "max": r.max, "status": r.status,
             "message": r.message, "cases_passed": r.cases_passed, "cases_total": r.cases_total,
             "cell": "" if r.cell is None else r.cell, "line": r.line} for r in rep.exercises]


def write_csv(reports: Sequence[tuple[str, SubmissionReport]], out: Path) -> tuple[Path, Path]:
    """Write ``grades.csv`` (long) and ``summary.csv`` (wide) for ``(report name, report)`` pairs."""
    long_path, wide_path = out / "grades.csv", out / "summary.csv"
    with long_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=_LONG_FIELDS)
        writer.writeheader()
        for name, rep in reports:
            for row in long_rows(name, rep):
                writer.writerow({k: csv_safe(v) for k, v in row.items()})
    exercise_names = list(dict.fromkeys(r.exercise for _, rep in reports for r in rep.exercises))
    with wide_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["submission", "notebook", "total", "max_total", "status", "sandbox", "elapsed_s",
                         *exercise_names, "flags"])
        for _, rep in reports:
            scores = {r.exercise: f"{r.score:g}" for r in rep.exercises}
            row = [rep.submission, rep.notebook, f"{rep.total:g}", f"{rep.max_total:g}", rep.status,
                   "yes" if rep.sandbox else "NO", rep.elapsed_s, *[scores.get(n, "") for n in exercise_names],
                   flags_text(rep)]
            writer.writerow([csv_safe(v) for v in row])
    return long_path, wide_path
