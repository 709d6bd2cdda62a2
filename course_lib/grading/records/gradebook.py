"""The class's gradebook: an SQLite database in the output folder that never loses a grade.

``course-grade --out DIR`` keeps ``DIR/gradebook.sqlite`` (one gradebook per assignment and output folder).
Records are only ever **added**: a regrade adds a new graded submission, an override adds an override, a
scoring rule adds a rule; triggers refuse every ``UPDATE`` and ``DELETE`` of a record, so no later run can
rewrite an earlier one. What counts is the latest record:

- ``submissions``: one row per graded submission (student, file, its SHA-256, the file's time, the whole JSON
  report for the instructor); a student's *current* submission is their latest row;
- ``grades``: one row per student, exercise and graded submission (points, status, cases passed);
- ``overrides``: the instructor's points for one student's exercise, with a reason (``points`` NULL clears
  it); the latest per student and exercise applies, whatever is regraded afterwards;
- ``times``: submission times supplied by the instructor (the latest per student applies);
- ``rules``: the scoring rule (partial credit, deadline, late penalty; :mod:`course_lib.grading.judging.scoring`)
  and the feedback settings, in force until the next record;
- ``manual``: the points and comment of a question graded by hand (a rubric line), per student; the latest
  per student and question applies (``points`` NULL withdraws it);
- ``finals``: every export's final points per student and exercise, as they were exported;
- ``meta``: the gradebook's seed of the hidden cases (drawn once, so that every run grades every student on
  the same hidden cases), its assignment (the one notebook its submissions are graded against: its id and
  the path of its copy, recorded by the first run that knows it) and its schema version. Each is written
  once; no value is ever changed.

Two runs into the same folder cannot lose an update: the database is in WAL mode, every write is one
``BEGIN IMMEDIATE`` transaction (a second writer waits, up to a minute), and a submission is committed as soon
as it is graded. The CSV files are exports of this database, rewritten from it after each run.

Example:
    >>> import tempfile
    >>> book = Gradebook(Path(tempfile.mkdtemp()) / "gradebook.sqlite")
    >>> book.add_override("alice", "stable_softmax", 0.5, "late-breaking clarification")
    >>> book.overrides()["alice", "stable_softmax"].points
    0.5
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .report_types import SubmissionReport

__all__ = ["Gradebook", "GradebookError", "SubmissionRecord", "GradeRecord", "Override", "ManualGrade",
           "GRADEBOOK_NAME", "KEPT", "keep_copy", "kept_copy"]

#: The gradebook's file name inside ``--out``.
GRADEBOOK_NAME = "gradebook.sqlite"
SCHEMA_VERSION = "1"
#: The folder of ``--out`` that keeps a copy of every graded submission, named by its SHA-256, so that a regrade
#: grades a student's current submission whatever files the instructor has at hand.
KEPT = "submissions"


def keep_copy(out: Path, path: Path, sha256: str) -> Path | None:
    """Keep a copy of the graded file ``path`` (whose SHA-256 is ``sha256``) in ``out/submissions/``."""
    if not sha256:
        return None
    target = Path(out) / KEPT / f"{sha256}.ipynb"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            data = Path(path).read_bytes()
        except OSError:
            return None
        if hashlib.sha256(data).hexdigest() != sha256:  # the file changed since it was graded
            return None
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(target)
    return target


def kept_copy(out: Path, sha256: str) -> Path | None:
    """The kept copy of the graded submission whose SHA-256 is ``sha256`` (None: not kept)."""
    path = Path(out) / KEPT / f"{sha256}.ipynb"
    return path if sha256 and path.is_file() else None

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    student TEXT NOT NULL, file TEXT NOT NULL, sha256 TEXT NOT NULL, mtime TEXT NOT NULL DEFAULT '',
    graded_at TEXT NOT NULL, why TEXT NOT NULL, status TEXT NOT NULL, message TEXT NOT NULL,
    notebook TEXT NOT NULL, total REAL NOT NULL, max_total REAL NOT NULL, report_name TEXT NOT NULL,
    report TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS submissions_student ON submissions (student, id);
CREATE TABLE IF NOT EXISTS grades (
    submission_id INTEGER NOT NULL REFERENCES submissions (id), student TEXT NOT NULL, exercise TEXT NOT NULL,
    score REAL NOT NULL, max REAL NOT NULL, status TEXT NOT NULL, cases_passed INTEGER NOT NULL,
    cases_total INTEGER NOT NULL, PRIMARY KEY (submission_id, exercise));
CREATE TABLE IF NOT EXISTS overrides (
    id INTEGER PRIMARY KEY AUTOINCREMENT, student TEXT NOT NULL, exercise TEXT NOT NULL, points REAL,
    reason TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS times (
    id INTEGER PRIMARY KEY AUTOINCREMENT, student TEXT NOT NULL, submitted_at TEXT NOT NULL,
    source TEXT NOT NULL, recorded_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rules (id INTEGER PRIMARY KEY AUTOINCREMENT, rule TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS manual (
    id INTEGER PRIMARY KEY AUTOINCREMENT, student TEXT NOT NULL, question TEXT NOT NULL, points REAL,
    max REAL NOT NULL, comment TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS finals (
    export_id INTEGER NOT NULL, exported_at TEXT NOT NULL, student TEXT NOT NULL, exercise TEXT NOT NULL,
    submission_id INTEGER, points REAL NOT NULL, why TEXT NOT NULL);
"""

_APPEND_ONLY = ("submissions", "grades", "overrides", "times", "rules", "finals", "manual")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class GradebookError(RuntimeError):
    """The gradebook cannot be used (not a gradebook, a newer schema, a refused rewrite)."""


@dataclass(frozen=True)
class SubmissionRecord:
    """One graded submission as the gradebook holds it."""

    id: int
    student: str
    file: str
    sha256: str
    mtime: str
    graded_at: str
    why: str
    status: str
    message: str
    notebook: str
    total: float
    max_total: float
    report_name: str

    def report(self, book: Gradebook) -> dict[str, Any]:
        """The full JSON report of this submission (the instructor's copy: it holds the seed)."""
        return book.report(self.id)


@dataclass(frozen=True)
class GradeRecord:
    """One exercise of one graded submission."""

    submission_id: int
    student: str
    exercise: str
    score: float
    max: float
    status: str
    cases_passed: int
    cases_total: int


@dataclass(frozen=True)
class Override:
    """The instructor's points for one student's exercise (``points`` None: the override was cleared)."""

    id: int
    student: str
    exercise: str
    points: float | None
    reason: str
    created_at: str


@dataclass(frozen=True)
class ManualGrade:
    """A question graded by hand: the instructor's points out of ``max`` and a comment for the student."""

    id: int
    student: str
    question: str
    points: float | None
    max: float
    comment: str
    created_at: str


class Gradebook:
    """The gradebook at ``path`` (created on first use). Every method is one short transaction."""

    def __init__(self, path: Path, timeout: float = 60.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        try:
            for attempt in range(600):  # another run creating the same gradebook holds it: switching to WAL
                try:  # does not wait for a busy lock, so wait here (up to 60 s)
                    self._db.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError as err:
                    if "locked" not in str(err) or attempt == 599:
                        raise
                    time.sleep(0.1)
            self._db.execute("PRAGMA foreign_keys=ON")
            with self._write() as db:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
                for table in (*_APPEND_ONLY, "meta"):
                    for action in ("UPDATE", "DELETE"):
                        db.execute(f"CREATE TRIGGER IF NOT EXISTS {table}_no_{action.lower()} BEFORE {action} ON "
                                   f"{table} BEGIN SELECT RAISE(ABORT, 'gradebook records are never rewritten'); END")
                found = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
                if found is None:
                    db.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
                elif found[0] != SCHEMA_VERSION:
                    raise GradebookError(f"{self.path}: gradebook schema {found[0]}, this grader reads "
                                         f"{SCHEMA_VERSION}")
        except sqlite3.DatabaseError as err:
            self._db.close()
            raise GradebookError(f"{self.path} is not a usable gradebook ({err})") from err

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Gradebook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken before reading (``BEGIN IMMEDIATE``): concurrent writers queue."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # --- the seed -------------------------------------------------------------------------------------

    def seed(self, proposed: int) -> int:
        """The gradebook's seed of the hidden cases: stored the first time (``proposed``), returned after."""
        with self._write() as db:
            found = db.execute("SELECT value FROM meta WHERE key = 'seed'").fetchone()
            if found is not None:
                return int(found[0])
            db.execute("INSERT INTO meta VALUES ('seed', ?)", (str(int(proposed)),))
            return int(proposed)

    def stored_seed(self) -> int | None:
        found = self._db.execute("SELECT value FROM meta WHERE key = 'seed'").fetchone()
        return None if found is None else int(found[0])

    # --- the assignment ------------------------------------------------------------------------------

    def assignment(self) -> tuple[str, str] | None:
        """``(notebook id, path of its copy)`` of the gradebook's one assignment, or None before it is known."""
        rows = dict(self._db.execute("SELECT key, value FROM meta WHERE key IN ('notebook', 'source')").fetchall())
        return (rows["notebook"], rows.get("source", "")) if "notebook" in rows else None

    def set_assignment(self, notebook: str, source: str) -> tuple[str, str]:
        """Record the gradebook's assignment the first time; return the one recorded (which may be another,
        recorded by an earlier or a concurrent run: the caller compares)."""
        with self._write() as db:
            found = dict(db.execute("SELECT key, value FROM meta WHERE key IN ('notebook', 'source')").fetchall())
            if "notebook" in found:
                return found["notebook"], found.get("source", "")
            db.executemany("INSERT INTO meta VALUES (?, ?)", [("notebook", notebook), ("source", source)])
            return notebook, source

    # --- submissions ----------------------------------------------------------------------------------

    def add_submission(self, student: str, file: str, report: SubmissionReport, report_name: str, why: str,
                       mtime: str = "") -> int:
        """Record one graded submission and its exercises (one transaction); returns its id."""
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO submissions (student, file, sha256, mtime, graded_at, why, status, message, notebook, "
                "total, max_total, report_name, report) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (student, file, report.sha256, mtime, report.graded_at or _now(), why, report.status,
                 report.message, report.notebook, report.total, report.max_total, report_name,
                 json.dumps(report.to_dict(), ensure_ascii=True)))
            number = int(cursor.lastrowid)
            db.executemany(
                "INSERT INTO grades VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(number, student, r.exercise, r.score, r.max, r.status, r.cases_passed, r.cases_total)
                 for r in report.exercises])
            return number

    def _submission(self, row: sqlite3.Row) -> SubmissionRecord:
        return SubmissionRecord(**{k: row[k] for k in SubmissionRecord.__dataclass_fields__})

    def current(self) -> dict[str, SubmissionRecord]:
        """Every student's current (latest) graded submission, by student."""
        rows = self._db.execute(
            "SELECT * FROM submissions WHERE id IN (SELECT MAX(id) FROM submissions GROUP BY student) "
            "ORDER BY student")
        return {row["student"]: self._submission(row) for row in rows}

    def history(self, student: str | None = None) -> list[SubmissionRecord]:
        """Every graded submission (of ``student``), oldest first."""
        if student is None:
            rows = self._db.execute("SELECT * FROM submissions ORDER BY id")
        else:
            rows = self._db.execute("SELECT * FROM submissions WHERE student = ? ORDER BY id", (student,))
        return [self._submission(row) for row in rows]

    def grades(self, submission_id: int) -> list[GradeRecord]:
        """The exercises of one graded submission, in the course's order."""
        rows = self._db.execute("SELECT * FROM grades WHERE submission_id = ? ORDER BY rowid", (submission_id,))
        return [GradeRecord(**{k: row[k] for k in GradeRecord.__dataclass_fields__}) for row in rows]

    def report(self, submission_id: int) -> dict[str, Any]:
        row = self._db.execute("SELECT report FROM submissions WHERE id = ?", (submission_id,)).fetchone()
        if row is None:
            raise GradebookError(f"no graded submission {submission_id}")
        return json.loads(row[0])

    def rows(self, table: str) -> list[tuple]:
        """Every record of ``table`` as plain tuples, in order (for audits and tests)."""
        if table not in _APPEND_ONLY:
            raise GradebookError(f"table: expected one of {_APPEND_ONLY}, got {table!r}")
        return [tuple(row) for row in self._db.execute(f"SELECT * FROM {table} ORDER BY rowid")]

    # --- overrides, times, rules ----------------------------------------------------------------------

    def add_override(self, student: str, exercise: str, points: float | None, reason: str) -> None:
        """Set (or with ``points`` None, clear) the instructor's points for one student's exercise."""
        if not reason.strip():
            raise GradebookError("an override needs a reason (--reason)")
        if points is not None and points < 0:
            raise GradebookError(f"points: expected a number >= 0, got {points}")
        with self._write() as db:
            db.execute("INSERT INTO overrides (student, exercise, points, reason, created_at) VALUES (?, ?, ?, ?, ?)",
                       (student, exercise, points, reason.strip(), _now()))

    def overrides(self) -> dict[tuple[str, str], Override]:
        """The override in force per ``(student, exercise)`` (cleared ones left out)."""
        latest: dict[tuple[str, str], Override] = {}
        for row in self._db.execute("SELECT * FROM overrides ORDER BY id"):
            latest[row["student"], row["exercise"]] = Override(**{k: row[k] for k in Override.__dataclass_fields__})
        return {key: o for key, o in latest.items() if o.points is not None}

    def add_manual(self, student: str, question: str, points: float | None, maximum: float, comment: str) -> None:
        """Record the points (None: withdraw) and comment of a question graded by hand, for one student."""
        if maximum <= 0:
            raise GradebookError(f"max: expected a number > 0, got {maximum}")
        if points is not None and not 0 <= points <= maximum:
            raise GradebookError(f"points: expected 0 to {maximum:g}, got {points:g}")
        with self._write() as db:
            db.execute("INSERT INTO manual (student, question, points, max, comment, created_at) "
                       "VALUES (?, ?, ?, ?, ?, ?)", (student, question, points, maximum, comment.strip(), _now()))

    def manual(self) -> dict[tuple[str, str], ManualGrade]:
        """The hand-graded points in force per ``(student, question)`` (withdrawn ones left out)."""
        latest: dict[tuple[str, str], ManualGrade] = {}
        for row in self._db.execute("SELECT * FROM manual ORDER BY id"):
            latest[row["student"], row["question"]] = ManualGrade(
                **{k: row[k] for k in ManualGrade.__dataclass_fields__})
        return {key: m for key, m in latest.items() if m.points is not None}

    def add_times(self, times: dict[str, str], source: str) -> None:
        """Record submission times (ISO 8601, UTC) supplied by the instructor, by student."""
        now = _now()
        with self._write() as db:
            db.executemany("INSERT INTO times (student, submitted_at, source, recorded_at) VALUES (?, ?, ?, ?)",
                           [(student, when, source, now) for student, when in times.items()])

    def times(self) -> dict[str, str]:
        """The latest supplied submission time per student."""
        return {row[0]: row[1] for row in self._db.execute("SELECT student, submitted_at FROM times ORDER BY id")}

    def add_rule(self, rule: dict[str, Any]) -> None:
        """Record the scoring rule from now on (when it differs from the one in force)."""
        if rule == self.rule():
            return
        with self._write() as db:
            db.execute("INSERT INTO rules (rule, created_at) VALUES (?, ?)", (json.dumps(rule, sort_keys=True), _now()))

    def rule(self) -> dict[str, Any] | None:
        """The scoring rule in force (None: never set, all or nothing and no late penalty)."""
        row = self._db.execute("SELECT rule FROM rules ORDER BY id DESC LIMIT 1").fetchone()
        return None if row is None else json.loads(row[0])

    def add_finals(self, finals: list[tuple[str, str, int | None, float, str]]) -> int:
        """Record one export's final points ``(student, exercise, submission id, points, why)``; its number."""
        with self._write() as db:
            number = int(db.execute("SELECT COALESCE(MAX(export_id), 0) + 1 FROM finals").fetchone()[0])
            now = _now()
            db.executemany("INSERT INTO finals VALUES (?, ?, ?, ?, ?, ?, ?)",
                           [(number, now, *row) for row in finals])
            return number

    def last_finals(self) -> list[tuple[str, str, int | None, float, str]]:
        """The final points of the latest export, as :meth:`add_finals` recorded them."""
        rows = self._db.execute("SELECT student, exercise, submission_id, points, why FROM finals WHERE export_id = "
                                "(SELECT MAX(export_id) FROM finals) ORDER BY rowid")
        return [tuple(row) for row in rows]
