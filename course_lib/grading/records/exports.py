"""Exports of the gradebook: the class's CSV files and the LMS import files, always rewritten from it.

Every file is regenerated from :class:`~course_lib.grading.records.gradebook.Gradebook` after each run (and by
``course-grade export``), so that no file is ever the only copy of a grade and regrading one student rewrites
no other student's rows. The scoring rule (:mod:`course_lib.grading.judging.scoring`) and the overrides are applied
here, and each export's final points are recorded in the gradebook (``finals``).

- ``grades.csv``: one row per student and exercise of the current submissions (points after the rule and
  the overrides, status, cases, message);
- ``summary.csv``: one row per student (and roster student without a submission), one column per exercise,
  the points before the late penalty, the penalty, the final total;
- ``canvas.csv`` (with a roster): Canvas's gradebook import format, the columns of Canvas's own gradebook
  export: ``Student, ID, SIS User ID, SIS Login ID, Section`` then one column named after the assignment,
  and Canvas's ``Points Possible`` row second. Canvas matches a row by ``ID`` (the Canvas user id, roster
  column ``canvas_id``), else ``SIS User ID`` or ``SIS Login ID``;
- ``moodle.csv`` (with a roster): Moodle's grade import from CSV, ``First name, Last name, Email address``
  and the grade item's column; on import choose "Map from: Email address", "Map to: Email address";
- ``plain.csv`` (with a roster): ``id, name, email, login, points, max_points``;
- ``roster_problems.csv`` (with a roster): files that matched no student, ambiguous and duplicate files,
  students without a submission, and files that are another notebook than the gradebook's assignment
  (``wrong-notebook``: graded against the assignment; without a roster, ``summary.csv``'s status says it).

A student without a submission gets an empty grade cell in the LMS files (not a 0: decide it yourself).
Every text cell goes through :func:`course_lib.grading.records.report.csv_safe`.
"""

from __future__ import annotations

import csv
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..judging.scoring import ScoringRule, exercise_points, late_factor
from .gradebook import Gradebook, ManualGrade, Override, SubmissionRecord
from .lms import CANVAS_COLUMNS, LmsOptions, Refused, canvas_rows, moodle_rows
from .report import csv_safe, flags_text, long_rows
from .report_types import ExerciseResult, SubmissionReport
from .roster import UNMATCHED, Roster, RosterProblem, Student

__all__ = ["ExerciseLine", "StudentRow", "class_table", "write_exports", "atomic_csv", "report_from_dict",
           "CANVAS_COLUMNS", "MOODLE_COLUMNS", "PLAIN_COLUMNS", "describe_changes", "HAND_GRADED"]

#: The identifying columns of Moodle's grade import example when users are mapped by email (the default).
MOODLE_COLUMNS = ["First name", "Last name", "Email address"]
#: The status of a question graded by hand (a rubric line).
HAND_GRADED = "hand-graded"
PLAIN_COLUMNS = ["id", "name", "email", "login", "points", "max_points"]


def report_from_dict(data: dict[str, Any]) -> SubmissionReport:
    """A :class:`SubmissionReport` from its JSON form (fields this version does not know are ignored)."""
    known = {f.name for f in fields(SubmissionReport)}
    exercise_fields = {f.name for f in fields(ExerciseResult)}
    values = {k: v for k, v in data.items() if k in known and k != "exercises"}
    exercises = [ExerciseResult(**{k: v for k, v in e.items() if k in exercise_fields})
                 for e in data.get("exercises", [])]
    return SubmissionReport(**values, exercises=exercises)


@dataclass
class ExerciseLine:
    """One exercise of one student as exported: the recorded result, the rule's points, an override."""

    exercise: str
    max: float
    status: str
    cases_passed: int
    cases_total: int
    computed: float
    override: Override | None = None
    comment: str = ""  # a hand-graded question's comment

    @property
    def points(self) -> float:
        return self.override.points if self.override is not None and self.override.points is not None \
            else self.computed

    def why(self, rule: ScoringRule) -> str:
        if self.override is not None:
            return f"override: {self.override.reason}"
        if self.status == HAND_GRADED:
            return f"graded by hand: {self.comment}" if self.comment else "graded by hand"
        if rule.partial_credit and self.status == "fail":
            return f"partial credit {self.cases_passed}/{self.cases_total}"
        return self.status


@dataclass
class StudentRow:
    """One student as exported (``submission`` None: a roster student without a submission)."""

    key: str
    student: Student | None
    submission: SubmissionRecord | None
    report: SubmissionReport | None
    exercises: list[ExerciseLine] = field(default_factory=list)
    submitted_at: str = ""
    late_s: float = 0.0
    factor: float = 1.0

    @property
    def points(self) -> float:
        return float(sum(e.points for e in self.exercises))

    @property
    def total(self) -> float:
        return round(self.points * self.factor, 4)

    @property
    def max_total(self) -> float:
        if self.exercises:
            return float(sum(e.max for e in self.exercises))
        return self.submission.max_total if self.submission is not None else 0.0

    @property
    def graded(self) -> bool:
        """Whether the row has a grade to export: a submission, or points the instructor gave without one."""
        return self.submission is not None or any(e.override is not None or e.status == HAND_GRADED
                                                  for e in self.exercises)


def _assignment_exercises(book: Gradebook, current: dict[str, SubmissionRecord]) -> list[tuple[str, float]]:
    """``(exercise, max)`` of the gradebook's assignment, from its latest graded submission."""
    latest = max(current.values(), key=lambda r: r.id, default=None)
    return [(g.exercise, g.max) for g in book.grades(latest.id)] if latest is not None else []


def _questions(manual: dict[tuple[str, str], ManualGrade]) -> dict[str, float]:
    """Every hand-graded question with its points possible (the latest record's), in the order first graded."""
    questions: dict[str, tuple[int, float]] = {}
    for m in sorted(manual.values(), key=lambda m: m.id):
        questions[m.question] = (questions.get(m.question, (m.id, 0.0))[0], m.max)
    return {q: mx for q, (_, mx) in sorted(questions.items(), key=lambda item: item[1][0])}


def class_table(book: Gradebook, roster: Roster | None, rule: ScoringRule,
                extensions: dict[str, str] | None = None) -> list[StudentRow]:
    """Every student's current grades under ``rule``, the overrides and the questions graded by hand: roster
    students first, in its order (those without a submission too: an override gives them points), then every
    other graded key. ``extensions``: a student's own deadline (ISO 8601), by student id."""
    current = book.current()
    overrides = book.overrides()
    manual = book.manual()
    questions = _questions(manual)
    supplied = book.times()
    assignment = _assignment_exercises(book, current)
    keys = [s.id for s in roster.students] if roster is not None else []
    keys += [k for k in current if k not in set(keys)]
    keys += [k for k in dict.fromkeys(k for k, _ in [*overrides, *manual]) if k not in set(keys)]
    table = []
    for key in keys:
        record = current.get(key)
        student = roster.by_id.get(key) if roster is not None else None
        row = StudentRow(key, student, record, report_from_dict(book.report(record.id)) if record else None)
        if record is not None:
            for g in book.grades(record.id):
                computed = exercise_points(g.max, g.status, g.cases_passed, g.cases_total, rule)
                row.exercises.append(ExerciseLine(g.exercise, g.max, g.status, g.cases_passed, g.cases_total,
                                                  computed, overrides.get((key, g.exercise))))
            row.submitted_at = supplied.get(key, "") if rule.times == "supplied" else record.mtime
            own = (extensions or {}).get(key)
            row.late_s, row.factor = late_factor(replace(rule, deadline=own) if own else rule, row.submitted_at)
        elif any(k == key for k, _ in [*overrides, *manual]):  # no file, graded by hand (a PDF graded on paper)
            row.exercises = [ExerciseLine(name, mx, "missing", 0, 0, 0.0, overrides.get((key, name)))
                             for name, mx in assignment]
        if row.exercises or any(k == key for k, _ in manual):
            for question, mx in questions.items():
                given = manual.get((key, question))
                row.exercises.append(ExerciseLine(
                    question, mx, HAND_GRADED if given else "not-graded-yet", 0, 0,
                    float(given.points or 0.0) if given else 0.0, overrides.get((key, question)),
                    given.comment if given else ""))
        table.append(row)
    return table


def atomic_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Path:
    """Write a CSV file whole or not at all (a temporary file renamed over it)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow([csv_safe(v) for v in header])
            for row in rows:
                writer.writerow([csv_safe(v) for v in row])
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _g(value: float) -> str:
    return f"{value:g}"


_LONG = ["student", "name", "submission", "report", "notebook", "exercise", "score", "max", "status", "message",
         "cases_passed", "cases_total", "cell", "line", "override", "total", "max_total", "submission_status",
         "sandbox", "elapsed_s", "course_lib", "torch", "python"]


def _long(table: list[StudentRow]) -> Iterable[list[Any]]:
    for row in table:
        if row.report is None or row.submission is None:
            continue
        lines = {e.exercise: e for e in row.exercises}
        name = row.student.name if row.student else ""
        for entry in long_rows(row.submission.report_name, row.report):
            line = lines.get(entry["exercise"])
            entry.update(student=row.key, name=name, total=_g(row.total), max_total=_g(row.max_total),
                         score=_g(line.points) if line else entry["score"],
                         override=line.override.reason if line and line.override else "")
            yield [entry.get(k, "") for k in _LONG]


def _summary(table: list[StudentRow], exercises: list[str]) -> Iterable[list[Any]]:
    for row in table:
        name = row.student.name if row.student else ""
        if row.submission is None or row.report is None:
            if row.graded:
                points = {e.exercise: _g(e.points) for e in row.exercises}
                yield [row.key, name, "", "", "missing (graded by hand)", "", "",
                       *[points.get(n, "") for n in exercises], _g(row.points), "", "", _g(row.total),
                       _g(row.max_total), ""]
            else:
                yield [row.key, name, "", "", "missing", "", "", *[""] * len(exercises), "", "", "", "", "", ""]
            continue
        points = {e.exercise: _g(e.points) for e in row.exercises}
        penalty = f"{(1 - row.factor) * 100:g}%" if row.factor < 1 else ""
        yield [row.key, name, row.submission.file, row.submission.notebook, row.submission.status,
               "yes" if row.report.sandbox else "NO", row.report.elapsed_s, *[points.get(n, "") for n in exercises],
               _g(row.points), row.submitted_at, penalty, _g(row.total), _g(row.max_total), flags_text(row.report)]


def _lms_rows(table: list[StudentRow]) -> list[tuple[Student, str]]:
    """``(roster student, final total or "" without a grade)`` for every roster student."""
    return [(row.student, _g(row.total) if row.graded else "") for row in table if row.student is not None]


def _feedback_line(row: StudentRow) -> str:
    """One line of feedback for an LMS's feedback column: the points per exercise and why."""
    if not row.graded:
        return ""
    parts = [f"{e.exercise} {_g(e.points)}/{_g(e.max)} ({e.status})" for e in row.exercises]
    if row.factor < 1:
        parts.append(f"late penalty {(1 - row.factor) * 100:g}%")
    return "; ".join(parts)


def describe_changes(before: list[tuple], after: list[tuple]) -> list[str]:
    """What changed between two exports' final points (:meth:`Gradebook.last_finals`), one line per student:
    ``"s05: total 2 -> 0 (fx_a 2 -> 0: fail)"``; a student no longer exported or newly exported says so."""
    def by_student(finals: list[tuple]) -> dict[str, dict[str, tuple[float, str]]]:
        table: dict[str, dict[str, tuple[float, str]]] = {}
        for student, exercise, _, points, why in finals:
            table.setdefault(student, {})[exercise] = (float(points), why)
        return table

    old, new = by_student(before), by_student(after)
    lines = []
    for student in [*new, *(s for s in old if s not in new)]:
        was, now = old.get(student), new.get(student)
        if was == now:
            continue
        if now is None:
            lines.append(f"{student}: total {_g(was['(total)'][0])} -> no longer in the exports")
            continue
        if was is None:
            lines.append(f"{student}: new, total {_g(now['(total)'][0])}")
            continue
        parts = [f"{name} {_g(was[name][0]) if name in was else '-'} -> {_g(value)}: {why}"
                 for name, (value, why) in now.items() if name != "(total)" and was.get(name) != (value, why)]
        late = now["(total)"][1] if was.get("(total)", (0, ""))[1] != now["(total)"][1] else ""
        lines.append(f"{student}: total {_g(was.get('(total)', (0.0, ''))[0])} -> {_g(now['(total)'][0])}"
                     + (f" ({'; '.join(parts + ([late] if late else []))})" if parts or late else ""))
    return lines


def _record_finals(book: Gradebook, table: list[StudentRow], rule: ScoringRule) -> None:
    finals = []
    for row in table:
        if not row.graded:
            continue
        number = row.submission.id if row.submission is not None else None
        finals += [(row.key, e.exercise, number, e.points, e.why(rule)) for e in row.exercises]
        late = f"late {row.late_s / 3600:.1f} h, x{row.factor:g}" if row.factor < 1 else "on time"
        finals.append((row.key, "(total)", number, row.total, late))
    previous = book.last_finals()
    if sorted(previous) != sorted(finals):
        book.add_finals(finals)


def _problems(table: list[StudentRow], run: list[RosterProblem]) -> list[list[str]]:
    """Every roster student without a submission, every graded file on no roster student (with this run's
    reason when it has one) and every current file of another notebook than the assignment, from the
    gradebook, so that earlier runs' problems stay listed."""
    told = {UNMATCHED + p.file: p for p in run if p.file}
    rows = []
    for row in table:
        if row.student is not None and row.submission is None:
            rows.append(["missing", row.key, "", "no submission graded" + (" (graded by hand)" if row.graded else "")])
        elif row.student is None and row.key.startswith(UNMATCHED) and row.submission is not None:
            problem = told.get(row.key)
            rows.append([problem.kind if problem else "unknown-file", problem.student if problem else "",
                         row.submission.file, problem.detail if problem else "graded, on no roster student"])
        if row.submission is not None and row.submission.status == "wrong-notebook":
            rows.append(["wrong-notebook", row.key if row.student is not None else "", row.submission.file,
                         row.submission.message])
    return rows


def write_exports(book: Gradebook, out: Path, roster: Roster | None, rule: ScoringRule, assignment: str,
                  problems: list[RosterProblem] | None = None, lms: LmsOptions | None = None,
                  extensions: dict[str, str] | None = None, refusals: list[str] | None = None) -> list[Path]:
    """Rewrite every export in ``out`` from the gradebook; returns the files written. An LMS file the LMS would
    not import as it is (:mod:`course_lib.grading.records.lms`) is not written (an earlier copy is removed, so that no
    stale grades are uploaded) and ``refusals`` receives why, naming the students."""
    lms = lms or LmsOptions()
    table = class_table(book, roster, rule, extensions)
    exercises = list(dict.fromkeys(e.exercise for row in table for e in row.exercises))
    written = [atomic_csv(out / "grades.csv", _LONG, _long(table)),
               atomic_csv(out / "summary.csv",
                           ["student", "name", "submission", "notebook", "status", "sandbox", "elapsed_s",
                            *exercises, "points", "submitted_at", "late_penalty", "total", "max_total", "flags"],
                           _summary(table, exercises))]
    if roster is not None:
        top = max((row.max_total for row in table), default=0.0)
        grades = _lms_rows(table)
        feedback = {row.key: _feedback_line(row) for row in table}
        points = roster.points_possible.get(assignment)
        files = {"canvas.csv": lambda: canvas_rows(grades, assignment, top, lms, points),
                 "moodle.csv": lambda: moodle_rows([(s, g, feedback.get(s.id, "")) for s, g in grades],
                                                   assignment, lms)}
        for name, rows in files.items():
            try:
                header, body = rows()
            except Refused as err:
                (out / name).unlink(missing_ok=True)
                if refusals is not None:
                    refusals.append(str(err))
                continue
            written.append(atomic_csv(out / name, header, body))
        written.append(atomic_csv(out / "plain.csv", PLAIN_COLUMNS,
                                   [[s.id, s.name, s.email, s.login, grade, _g(top)] for s, grade in grades]))
        written.append(atomic_csv(out / "roster_problems.csv", ["kind", "student", "file", "detail"],
                                   _problems(table, problems or [])))
    _record_finals(book, table, rule)
    return written
