"""Writing reports: one JSON and one Markdown file per submission, and the class's CSV files.

- ``<name>.json``: everything (:class:`course_lib.grading.runner.SubmissionReport` as a dict);
- ``<name>.md``: the same for a human: a table of exercises, then what went wrong and where;
- ``grades.csv``: one row per submission and exercise (score, max, status, message, cases, cell), with the
  submission's total, elapsed time and versions on every row;
- ``summary.csv``: one row per submission (total, max, then one score column per exercise): a gradebook.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Sequence
from pathlib import Path

from .runner import SubmissionReport

__all__ = ["report_name", "write_json", "write_markdown", "write_csv", "to_markdown"]

_SYMBOL = {"pass": "✅", "fail": "❌", "error": "💥", "timeout": "⏳", "missing": "❔", "not-implemented": "⬜",
           "forbidden": "⛔"}


def report_name(submission: str, taken: set[str]) -> str:
    """A file-system-safe, unique base name for a submission's reports."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(submission).stem)[:80] or "submission"
    name, n = stem, 2
    while name in taken:
        name, n = f"{stem}-{n}", n + 1
    taken.add(name)
    return name


def write_json(report: SubmissionReport, path: Path) -> None:
    """Write ``report`` as JSON (UTF-8, indented) to ``path``."""
    path.write_text(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")[:300]


def to_markdown(report: SubmissionReport) -> str:
    """The readable report of one submission."""
    lines = [f"# Grading report: `{Path(report.submission).name}`", ""]
    lines.append(f"**Score: {report.total:g} / {report.max_total:g}**" +
                 (f" — notebook `{report.notebook}`" if report.notebook else ""))
    if report.message:
        lines += ["", f"> {report.message}"]
    if report.exercises:
        lines += ["", "| exercise | score | status | cases passed | message |", "|---|---|---|---|---|"]
        for r in report.exercises:
            lines.append(f"| `{r.exercise}` | {r.score:g} / {r.max:g} | {_SYMBOL.get(r.status, '')} {r.status} | "
                         f"{r.cases_passed}/{r.cases_total} | {_cell(r.message)} |")
        details = [r for r in report.exercises if r.status != "pass"]
        if details:
            lines += ["", "## Details"]
            for r in details:
                lines += ["", f"### `{r.exercise}`: {r.status}", "", r.message or "(no message)"]
                if r.cell is not None:
                    where = f", {r.line}" if r.line else ""
                    lines.append(f"\n- graded cell: cell {r.cell} of the submission{where}")
                if r.hint:
                    lines.append(f"- hint: {r.hint}")
    lines += ["", "---", "", f"- graded at {report.graded_at} in {report.elapsed_s:.1f} s "
              f"({report.kernel_starts} kernel start(s)); status: {report.status}"]
    limits = report.limits
    if limits:
        lines.append(f"- limits: {limits.get('cell_timeout_s')} s per cell, {limits.get('total_timeout_s')} s per "
                     f"submission, {limits.get('memory_mb')} MB of memory; static policy "
                     f"{'on' if limits.get('policy') else 'OFF'}")
    lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in report.versions.items()))
    if report.sha256:
        lines.append(f"- submission sha256: `{report.sha256}`")
    return "\n".join(lines) + "\n"


def write_markdown(report: SubmissionReport, path: Path) -> None:
    """Write ``report`` as a readable Markdown page to ``path``."""
    path.write_text(to_markdown(report), encoding="utf-8")


def write_csv(reports: Sequence[tuple[str, SubmissionReport]], out: Path) -> tuple[Path, Path]:
    """Write ``grades.csv`` (long) and ``summary.csv`` (wide) for ``(report name, report)`` pairs."""
    long_path, wide_path = out / "grades.csv", out / "summary.csv"
    fields = ["submission", "report", "notebook", "exercise", "score", "max", "status", "message", "cases_passed",
              "cases_total", "cell", "line", "total", "max_total", "submission_status", "elapsed_s",
              "course_lib", "torch", "python"]
    with long_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for name, rep in reports:
            common = {"submission": rep.submission, "report": name, "notebook": rep.notebook, "total": rep.total,
                      "max_total": rep.max_total, "submission_status": rep.status, "elapsed_s": rep.elapsed_s,
                      "course_lib": rep.versions.get("course_lib", ""), "torch": rep.versions.get("torch", ""),
                      "python": rep.versions.get("python", "")}
            if not rep.exercises:
                writer.writerow({**common, "exercise": "", "score": 0, "max": 0, "status": "missing",
                                 "message": rep.message})
            for r in rep.exercises:
                writer.writerow({**common, "exercise": r.exercise, "score": r.score, "max": r.max,
                                 "status": r.status, "message": r.message, "cases_passed": r.cases_passed,
                                 "cases_total": r.cases_total, "cell": "" if r.cell is None else r.cell,
                                 "line": r.line})
    exercise_names: list[str] = []
    for _, rep in reports:
        for r in rep.exercises:
            if r.exercise not in exercise_names:
                exercise_names.append(r.exercise)
    with wide_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["submission", "notebook", "total", "max_total", "status", "elapsed_s", *exercise_names])
        for _, rep in reports:
            scores = {r.exercise: f"{r.score:g}" for r in rep.exercises}
            writer.writerow([rep.submission, rep.notebook, f"{rep.total:g}", f"{rep.max_total:g}", rep.status,
                             rep.elapsed_s, *[scores.get(n, "") for n in exercise_names]])
    return long_path, wide_path
