"""The class roster: which student each submission file belongs to.

A roster is a CSV file with a header row. Column names are matched without case, spaces or underscores
(``SIS Login ID`` = ``sis_login_id``):

| column | required | meaning |
|---|---|---|
| ``id`` | yes | the student's id in your records (unique); the gradebook's key |
| ``name`` | | the student's name (``First Last`` or ``Last, First``) |
| ``login``, ``email`` | | identifiers; also matched in file names |
| ``file`` | | the exact file name of the student's submission (when given for a row, only it matches) |
| ``first_name``, ``last_name`` | | for Moodle's export (else split from ``name``) |
| ``canvas_id``, ``sis_user_id``, ``sis_login_id``, ``section`` | | for Canvas's export |

A gradebook exported from Canvas (``Student, ID, SIS User ID, SIS Login ID, Section, ...``) is read as a
roster too: ``id`` is its SIS Login ID (else its ID), and its ``Points Possible`` row is skipped.

**Matching a file to a student**: the file whose name a row's ``file`` column gives; else a file whose name
(without ``.ipynb``) contains one of the student's identifiers (login, email, the email's local part, id,
canvas_id, sis_user_id, sis_login_id; case ignored) as a whole token, i.e. between the start or end of the
name and characters other than letters and digits: ``hw1_alice.ipynb`` and Canvas's download names
(``smithjane_12345_67890_hw1.ipynb``, with the Canvas user id 12345) both match. The longest identifier wins;
a file that two students match equally is *ambiguous*. Nothing is dropped: a file that matches no student (or
is ambiguous, or is a second file of a student who has a newer one) is still graded, under the key
``unmatched:<file name>``, and listed; a student without a file is listed as missing.

Example:
    >>> roster = Roster([Student("s1", "Ada Lovelace", login="ada"), Student("s2", "Alan Turing", login="alan")])
    >>> match = roster.match(["hw1_ada.ipynb", "hw1_alan.ipynb", "hw1_grace.ipynb"])
    >>> match.students, [p.kind for p in match.problems]
    ({'hw1_ada.ipynb': 's1', 'hw1_alan.ipynb': 's2', 'hw1_grace.ipynb': 'unmatched:hw1_grace.ipynb'}, ['unknown-file'])
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Student", "Roster", "RosterError", "Match", "RosterProblem", "read_roster", "UNMATCHED"]

#: Prefix of the gradebook key of a file that no roster student matched.
UNMATCHED = "unmatched:"

_COLUMNS = {"id", "name", "login", "email", "file", "firstname", "lastname", "canvasid", "sisuserid",
            "sisloginid", "section"}


class RosterError(ValueError):
    """The roster cannot be read (no ``id`` column, a duplicate id, not a CSV file)."""


@dataclass(frozen=True)
class Student:
    """One student of the roster."""

    id: str
    name: str = ""
    login: str = ""
    email: str = ""
    file: str = ""
    first_name: str = ""
    last_name: str = ""
    canvas_id: str = ""
    sis_user_id: str = ""
    sis_login_id: str = ""
    section: str = ""

    def keys(self) -> list[str]:
        """The identifiers looked for in file names (lower case, longest first)."""
        found = {self.login, self.email, self.email.split("@")[0] if "@" in self.email else "", self.id,
                 self.canvas_id, self.sis_user_id, self.sis_login_id}
        return sorted((k.lower() for k in found if k.strip()), key=len, reverse=True)

    def first_last(self) -> tuple[str, str]:
        """``(first name, last name)``: the columns when given, else split from ``name``."""
        if self.first_name or self.last_name:
            return self.first_name, self.last_name
        if "," in self.name:
            last, first = self.name.split(",", 1)
            return first.strip(), last.strip()
        first, _, last = self.name.strip().partition(" ")
        return first, last.strip()

    def sortable_name(self) -> str:
        """``Last, First`` (Canvas's Student column)."""
        first, last = self.first_last()
        return f"{last}, {first}" if last and first else (last or first or self.id)


@dataclass(frozen=True)
class RosterProblem:
    """Something an instructor must look at: ``unknown-file``, ``ambiguous``, ``duplicate`` or ``missing``
    (``roster_problems.csv`` adds ``wrong-notebook`` from the gradebook: a file of another notebook than the
    assignment, see :mod:`course_lib.grading.records.exports`)."""

    kind: str
    student: str
    file: str
    detail: str


@dataclass
class Match:
    """The result of matching files to a roster: the gradebook key of every file, and the problems."""

    students: dict[str, str] = field(default_factory=dict)
    problems: list[RosterProblem] = field(default_factory=list)


def _bounded(key: str, name: str) -> bool:
    return re.search(rf"(?<![a-z0-9]){re.escape(key)}(?![a-z0-9])", name) is not None


class Roster:
    """The students of a class, in the roster's order."""

    def __init__(self, students: list[Student]) -> None:
        seen: set[str] = set()
        for student in students:
            if not student.id.strip():
                raise RosterError("a roster row has an empty id")
            if student.id in seen:
                raise RosterError(f"the roster lists id {student.id!r} twice")
            seen.add(student.id)
        self.students = list(students)
        self.by_id = {s.id: s for s in students}

    def __len__(self) -> int:
        return len(self.students)

    def _candidates(self, file: str) -> list[tuple[int, Student]]:
        named = [s for s in self.students if s.file]
        if any(s.file == file for s in named):
            return [(len(file), s) for s in named if s.file == file]
        stem = Path(file).stem.lower() if file.lower().endswith(".ipynb") else file.lower()
        found = []
        for student in self.students:
            if student.file:
                continue
            lengths = [len(k) for k in student.keys() if _bounded(k, stem)]
            if lengths:
                found.append((max(lengths), student))
        return found

    def student_for(self, file: str) -> tuple[Student | None, str]:
        """The student a file name belongs to, or ``(None, why not)``."""
        found = self._candidates(file)
        if not found:
            return None, "no roster student's file, login, email or id in the file name"
        best = max(length for length, _ in found)
        winners = [s for length, s in found if length == best]
        if len(winners) > 1:
            return None, "the file name matches " + ", ".join(s.id for s in winners)
        return winners[0], ""

    def match(self, files: list[str], newest_first: list[str] | None = None) -> Match:
        """The gradebook key of every file (``files``: base names; ``newest_first``: the same names ordered by
        modification time, newest first, to choose among several files of one student)."""
        result = Match()
        owner: dict[str, list[str]] = {}
        for file in files:
            student, why = self.student_for(file)
            if student is None:
                kind = "ambiguous" if why.startswith("the file name matches") else "unknown-file"
                result.students[file] = UNMATCHED + file
                result.problems.append(RosterProblem(kind, "", file, why + "; graded as " + UNMATCHED + file))
            else:
                owner.setdefault(student.id, []).append(file)
        order = {f: i for i, f in enumerate(newest_first or files)}
        for sid, owned in owner.items():
            owned.sort(key=lambda f: order.get(f, 0))
            result.students[owned[0]] = sid
            for extra in owned[1:]:
                result.students[extra] = UNMATCHED + extra
                result.problems.append(RosterProblem(
                    "duplicate", sid, extra, f"{sid} has a newer file, {owned[0]}; graded as {UNMATCHED}{extra}"))
        for student in self.students:
            if student.id not in owner:
                result.problems.append(RosterProblem("missing", student.id, "", "no submission file"))
        result.students = {f: result.students[f] for f in files}
        return result


def _normal(column: str) -> str:
    return re.sub(r"[\s_\-]+", "", column.strip().lower())


def read_roster(path: Path) -> Roster:
    """Read a roster CSV (see the module's docstring); raises :class:`RosterError` naming what is wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        raise RosterError(f"roster {path}: cannot read it ({err})") from err
    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames:
        raise RosterError(f"roster {path}: empty, expected a header row with an 'id' column")
    columns = {_normal(c): c for c in reader.fieldnames if c}
    canvas = "student" in columns and "sisloginid" in columns and "id" in columns
    if "id" not in columns:
        raise RosterError(f"roster {path}: expected an 'id' column, got {list(reader.fieldnames)}")
    students = []
    for row in reader:
        value = {key: (row.get(columns[key]) or "").strip() for key in _COLUMNS | {"student"} if key in columns}
        if canvas:
            if value.get("student", "").lower().startswith("points possible") or not value.get("id"):
                continue
            value["canvasid"], value["name"] = value["id"], value.get("student", "")
            value["id"] = value.get("sisloginid") or value["canvasid"]
        if not any(value.values()):
            continue
        students.append(Student(
            id=value.get("id", ""), name=value.get("name", ""), login=value.get("login", ""),
            email=value.get("email", ""), file=value.get("file", ""), first_name=value.get("firstname", ""),
            last_name=value.get("lastname", ""), canvas_id=value.get("canvasid", ""),
            sis_user_id=value.get("sisuserid", ""), sis_login_id=value.get("sisloginid", ""),
            section=value.get("section", "")))
    return Roster(students)
