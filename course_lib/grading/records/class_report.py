"""The class at a glance: one report per assignment (``class_report.html`` and ``class_report.md`` in ``--out``).

Per exercise, from every student's current submission in the gradebook: the score distribution, how many
students hit each known mistake (the hint a check names when an output equals a declared mistake's), the most
common errors (the exception types their code raised), and which students are stuck (not passing, and not
passing in any earlier submission either when they have several). Per submission, the grader's flags for
review when its report carries them (``flags``: a list of ``{"reason", "lines"}``).

**Similar submissions** are flagged for review, never penalised: the exercise cells of each current submission
are normalised with :mod:`ast` (comments and docstrings dropped, every name the cell binds renamed in order of
first appearance: ``v0``, ``v1``..., so renamed variables do not hide a copy) and sorted (so reordered cells do
not either); two submissions whose normalised code is the same are *identical*, whose token sequences agree at
:data:`NEAR` or more (:class:`difflib.SequenceMatcher`) *near-identical*. Exercises left as stubs are ignored,
and so is code shorter than :data:`MIN_TOKENS` tokens (a one-line answer is the same for everyone).
"""

from __future__ import annotations

import ast
import difflib
import html
import io
import re
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..submission import read_submission
from .gradebook import Gradebook, SubmissionRecord, kept_copy
from .report import escape_markdown
from .roster import Roster

__all__ = ["ExerciseSummary", "ClassReport", "class_report", "normalise", "similar_pairs", "write_class_report",
           "NEAR", "MIN_TOKENS"]

#: Share of equal tokens from which two submissions are near-identical.
NEAR = 0.9
#: Normalised code shorter than this (in tokens) is never compared.
MIN_TOKENS = 25
_PASSING = ("pass",)


class _Renamer(ast.NodeTransformer):
    """Rename every name a cell binds (arguments, assignments, loop and comprehension targets, local functions
    other than the exercise's own) to ``v0, v1, ...`` in order of first appearance; drop docstrings."""

    def __init__(self, bound: set[str]) -> None:
        self.bound, self.names = bound, {}

    def _name(self, name: str) -> str:
        if name not in self.bound:
            return name
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self._name(node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg, node.annotation = self._name(node.arg), None
        return node

    def _body(self, node: Any) -> Any:
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
        if hasattr(node, "returns"):
            node.returns = None
        node.name = self._name(node.name)
        return self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _body  # noqa: N815


def _bound(tree: ast.AST, keep: set[str]) -> set[str]:
    """The names a cell binds, except the top-level definitions (the exercise's function or class)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names - keep - {"self", "cls"}


def normalise(source: str) -> str:
    """A cell's code with comments and docstrings dropped and its own names renamed in order of appearance
    (the top-level function or class keeps its name: it is the exercise's); the source itself when it does not
    parse (a syntax error is compared as written)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return source.strip()
    top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    tree = _Renamer(_bound(tree, top)).visit(tree)
    return ast.unparse(tree)


def _tokens(code: str) -> list[str]:
    try:
        return [t.string for t in tokenize.generate_tokens(io.StringIO(code).readline)
                if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                                  tokenize.ENDMARKER, tokenize.COMMENT)]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return code.split()


def similar_pairs(codes: dict[str, list[str]], near: float = NEAR, min_tokens: int = MIN_TOKENS
                  ) -> list[tuple[str, str, str, float]]:
    """``(student, student, "identical" | "near-identical", share of equal tokens)`` for every pair of students
    whose normalised exercise cells (``codes``: per student, each cell already normalised) agree."""
    joined = {k: "\n".join(sorted(v)) for k, v in codes.items() if v}
    tokens = {k: _tokens(v) for k, v in joined.items()}
    keys = sorted(k for k in joined if len(tokens[k]) >= min_tokens)
    pairs = []
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if joined[a] == joined[b]:
                pairs.append((a, b, "identical", 1.0))
                continue
            matcher = difflib.SequenceMatcher(None, tokens[a], tokens[b], autojunk=False)
            if matcher.real_quick_ratio() >= near and matcher.quick_ratio() >= near:
                ratio = matcher.ratio()
                if ratio >= near:
                    pairs.append((a, b, "near-identical", round(ratio, 3)))
    return pairs


@dataclass
class ExerciseSummary:
    """One exercise across the class."""

    name: str
    max: float
    scores: Counter = field(default_factory=Counter)  # score -> students
    statuses: Counter = field(default_factory=Counter)
    mistakes: dict[str, list[str]] = field(default_factory=dict)  # hint -> students
    errors: Counter = field(default_factory=Counter)  # exception type -> students
    stuck: dict[str, str] = field(default_factory=dict)  # student -> status (and "for N submissions")


@dataclass
class ClassReport:
    """The class report's content."""

    assignment: str
    students: int
    exercises: list[ExerciseSummary]
    similar: list[tuple[str, str, str, float]]
    flags: dict[str, list[dict[str, Any]]]  # student -> the flags their current report carries


def _error_type(message: str) -> str:
    found = re.search(r"raised ([A-Za-z_][A-Za-z0-9_.]*)", message)
    if found:
        return found[1]
    return "time limit" if "timeout" in message or "longer than" in message else message.split(":")[0][:60]


def _exercise_codes(out: Path, record: SubmissionRecord, report: dict[str, Any]) -> list[str]:
    """The normalised exercise cells of a submission (from the kept copy of its file), stubs left out."""
    path = kept_copy(out, record.sha256)
    if path is None:
        return []
    nb, cells, _, problem = read_submission(path, 20 * 2**20)
    if nb is None or problem:
        return []
    by_index = dict(cells)
    codes = []
    for exercise in report.get("exercises", []):
        cell = exercise.get("cell")
        if isinstance(cell, int) and cell - 1 in by_index and exercise.get("status") not in ("not-implemented",
                                                                                                "missing"):
            codes.append(normalise(by_index[cell - 1]))
    return codes


def class_report(book: Gradebook, out: Path, roster: Roster | None = None) -> ClassReport:
    """The class report of the gradebook in ``out`` (every student's current submission)."""
    current = book.current()
    settings = book.rule() or {}
    assignment = settings.get("assignment") or (book.assignment() or ("assignment",))[0]
    summaries: dict[str, ExerciseSummary] = {}
    flags: dict[str, list[dict[str, Any]]] = {}
    codes: dict[str, list[str]] = {}
    for student, record in current.items():
        report = book.report(record.id)
        if isinstance(report.get("flags"), list) and report["flags"]:
            flags[student] = [f for f in report["flags"] if isinstance(f, dict)]
        codes[student] = _exercise_codes(out, record, report)
        history = book.history(student)
        for exercise in report.get("exercises", []):
            name = str(exercise.get("exercise", ""))
            summary = summaries.setdefault(name, ExerciseSummary(name, float(exercise.get("max", 0))))
            status = str(exercise.get("status", ""))
            summary.scores[float(exercise.get("score", 0))] += 1
            summary.statuses[status] += 1
            if exercise.get("hint") and status not in _PASSING:
                summary.mistakes.setdefault(str(exercise["hint"]), []).append(student)
            if status in ("error", "timeout"):
                summary.errors[_error_type(str(exercise.get("message", "")))] += 1
            if status not in _PASSING:
                earlier = [g.status for r in history[:-1] for g in book.grades(r.id) if g.exercise == name]
                summary.stuck[student] = status + (f", not passing in {len(earlier) + 1} submissions"
                                                   if earlier and all(s not in _PASSING for s in earlier) else "")
    return ClassReport(assignment, len(current), list(summaries.values()), similar_pairs(codes), flags)


def _name(key: str, roster: Roster | None) -> str:
    student = roster.by_id.get(key) if roster is not None else None
    return f"{key} ({student.name})" if student is not None and student.name else key


def _markdown(report: ClassReport, roster: Roster | None) -> str:
    e = escape_markdown
    lines = [f"# Class report: {e(report.assignment)}", "", f"{report.students} students' current submissions.", ""]
    for ex in report.exercises:
        lines += [f"## {e(ex.name)} ({ex.max:g} points)", "", "| score | students |", "|---|---|"]
        lines += [f"| {score:g} | {n} |" for score, n in sorted(ex.scores.items())]
        lines += ["", "| known mistake (the check's hint) | students | who |", "|---|---|---|"]
        for hint, who in sorted(ex.mistakes.items(), key=lambda item: -len(item[1])):
            lines.append(f"| {e(hint, 300)} | {len(who)} | {e(', '.join(_name(w, roster) for w in who), 600)} |")
        if ex.errors:
            lines += ["", "Most common errors: " + ", ".join(f"{e(k)} ({n})" for k, n in ex.errors.most_common(5))]
        if ex.stuck:
            lines += ["", "Not passing: " + "; ".join(f"{e(_name(s, roster))}: {e(why)}"
                                                      for s, why in ex.stuck.items())]
        lines.append("")
    lines += ["## Similar submissions (to review; never a penalty)", ""]
    if report.similar:
        lines += ["| students | how | equal tokens |", "|---|---|---|"]
        lines += [f"| {e(_name(a, roster))}, {e(_name(b, roster))} | {kind} | {share:.0%} |"
                  for a, b, kind, share in report.similar]
    else:
        lines.append("none")
    lines += ["", "## Flagged for review", ""]
    if report.flags:
        for student, found in report.flags.items():
            for flag in found:
                lines.append(f"- {e(_name(student, roster))}: {e(str(flag.get('reason', '')), 300)} (lines "
                             f"{e(str(flag.get('lines', '')), 100)})")
    else:
        lines.append("none")
    return "\n".join(lines) + "\n"


def _html(report: ClassReport, roster: Roster | None) -> str:
    e = html.escape
    parts = [f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Class report: {e(report.assignment)}"
             "</title><style>body{font-family:sans-serif;max-width:60em;margin:auto}table{border-collapse:"
             "collapse}td,th{border:1px solid #ccc;padding:.2em .5em}.bar{background:#6a9;height:.8em;display:"
             "inline-block}</style></head><body>",
             f"<h1>Class report: {e(report.assignment)}</h1><p>{report.students} students' current submissions.</p>"]
    for ex in report.exercises:
        most = max(ex.scores.values(), default=1)
        parts.append(f"<section class=\"exercise\" data-exercise=\"{e(ex.name)}\"><h2>{e(ex.name)} "
                     f"({ex.max:g} points)</h2><table class=\"scores\"><tr><th>score</th><th>students</th></tr>")
        parts += [f"<tr><td>{score:g}</td><td>{n} <span class=\"bar\" style=\"width:{8 * n / most:.1f}em\"></span>"
                  "</td></tr>" for score, n in sorted(ex.scores.items())]
        parts.append("</table><h3>Known mistakes</h3><table class=\"mistakes\"><tr><th>the check's hint</th>"
                     "<th>students</th><th>who</th></tr>")
        parts += [f"<tr class=\"mistake\"><td class=\"hint\">{e(hint)}</td><td class=\"count\">{len(who)}</td>"
                  f"<td>{e(', '.join(_name(w, roster) for w in who))}</td></tr>"
                  for hint, who in sorted(ex.mistakes.items(), key=lambda item: -len(item[1]))]
        parts.append("</table>")
        if ex.errors:
            parts.append("<p>Most common errors: " + ", ".join(f"{e(k)} ({n})" for k, n in ex.errors.most_common(5))
                         + "</p>")
        if ex.stuck:
            parts.append("<p class=\"stuck\">Not passing: " + "; ".join(
                f"{e(_name(s, roster))}: {e(why)}" for s, why in ex.stuck.items()) + "</p>")
        parts.append("</section>")
    parts.append("<h2>Similar submissions (to review; never a penalty)</h2><table class=\"similar\"><tr>"
                 "<th>students</th><th>how</th><th>equal tokens</th></tr>")
    parts += [f"<tr><td>{e(_name(a, roster))}, {e(_name(b, roster))}</td><td>{kind}</td><td>{share:.0%}</td></tr>"
              for a, b, kind, share in report.similar]
    parts.append("</table><h2>Flagged for review</h2><ul class=\"flags\">")
    parts += [f"<li data-student=\"{e(student)}\">{e(_name(student, roster))}: {e(str(flag.get('reason', '')))} "
              f"(lines {e(str(flag.get('lines', '')))})</li>"
              for student, found in report.flags.items() for flag in found]
    parts.append("</ul></body></html>\n")
    return "".join(parts)


def write_class_report(book: Gradebook, out: Path, roster: Roster | None = None) -> list[Path]:
    """Write ``out/class_report.html`` and ``out/class_report.md``; returns them."""
    report = class_report(book, out, roster)
    written = [out / "class_report.html", out / "class_report.md"]
    written[0].write_text(_html(report, roster), encoding="utf-8")
    written[1].write_text(_markdown(report, roster), encoding="utf-8")
    return written
