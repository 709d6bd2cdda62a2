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
roster too: ``id`` is its SIS Login ID (else its ID), and its ``Points Possible`` row gives each assignment's
points possible. So is Moodle's grade export (``First name, Last name, ID number, ..., Email address``, and
``Username`` when the export includes it): ``id`` is its ID number, else the username, else the email.

**Matching a file to a student** is exact and explained (:attr:`Match.how` says why each file is whose):

1. the file whose name a row's ``file`` column gives;
2. an LMS's bulk-download name: Canvas's ``login_userid_submissionid_filename`` (``login_LATE_userid_...`` for a
   late one; the Canvas user id is the roster's ``canvas_id``) and Moodle's
   ``Full Name_participantid_assignsubmission_file_filename`` (the student's full name). The LMS recorded that
   student as the submitter; a file name whose own part (the student's ``filename``) names **another** roster
   student is a ``conflict`` to resolve, not a grade for either;
3. else every student one of whose identifiers (login, email, the email's local part, id, canvas_id,
   sis_user_id, sis_login_id; case ignored) appears in the name as a whole token (between the start or end of
   the name and characters other than letters and digits): exactly one student must be named. An identifier
   inside a longer one that names another student (``ann`` inside ``ann_smith``) does not count; a name that
   names two students at different places is ``ambiguous``.

Nothing is dropped: a file that matches no student (or is ambiguous, a conflict, or a second file of a student
who has a newer one) is still graded, under the key ``unmatched:<file name>``, and listed; a student without a
file is listed as missing.

Example:
    >>> roster = Roster([Student("s1", "Ada Lovelace", login="ada"), Student("s2", "Alan Turing", login="alan")])
    >>> match = roster.match(["hw1_ada.ipynb", "hw1_alan.ipynb", "hw1_grace.ipynb"])
    >>> match.students, [p.kind for p in match.problems]
    ({'hw1_ada.ipynb': 's1', 'hw1_alan.ipynb': 's2', 'hw1_grace.ipynb': 'unmatched:hw1_grace.ipynb'}, ['unknown-file'])
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

__all__ = ["Student", "Roster", "RosterError", "Match", "RosterProblem", "read_roster", "UNMATCHED", "rekey",
           "adopt", "write_roster"]

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
    """Something an instructor must look at: ``unknown-file``, ``ambiguous`` (the name names several
    students), ``conflict`` (an LMS download name whose own part names another student than the submitter the
    LMS recorded), ``duplicate`` or ``missing``
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
    how: dict[str, str] = field(default_factory=dict)  # file -> why it is that student's


#: Canvas's "Download Submissions" names: login, LATE when late, the Canvas user id, the submission id, then the
#: file's own name (``archeralice_101_5566_hw1.ipynb``, ``bakerbob_LATE_102_5002_hw1.ipynb``).
_CANVAS_NAME = re.compile(r"^(?P<login>[^_]+)(?:_late)?_(?P<userid>\d+)_(?P<submission>\d+)_(?P<rest>.+)$")
#: Moodle's "Download all submissions" names: the full name, the participant id, the plugin, the file's own name
#: (``Alice Archer_12345_assignsubmission_file_hw1.ipynb``).
_MOODLE_NAME = re.compile(r"^(?P<name>.+?)_(?P<participant>\d+)_assignsubmission_(?:file|onlinetext)_(?P<rest>.*)$")


class Roster:
    """The students of a class, in the roster's order."""

    def __init__(self, students: list[Student], points_possible: dict[str, float] | None = None) -> None:
        seen: set[str] = set()
        for student in students:
            if not student.id.strip():
                raise RosterError("a roster row has an empty id")
            if student.id in seen:
                raise RosterError(f"the roster lists id {student.id!r} twice")
            seen.add(student.id)
        self.students = list(students)
        self.by_id = {s.id: s for s in students}
        #: Canvas's export as the roster: each assignment column's ``Points Possible``
        self.points_possible = dict(points_possible or {})

    def __len__(self) -> int:
        return len(self.students)

    def _named(self, text: str) -> dict[str, tuple[Student, str]]:
        """The students whose identifiers appear in ``text`` as whole tokens, by id, with the identifier;
        an identifier inside a longer matched one of another student does not count."""
        spans: list[tuple[int, int, Student, str]] = []
        for student in self.students:
            for key in student.keys():
                for found in re.finditer(rf"(?<![a-z0-9]){re.escape(key)}(?![a-z0-9])", text):
                    spans.append((found.start(), found.end(), student, key))
        kept = [s for s in spans if not any(o[2].id != s[2].id and o[0] <= s[0] and s[1] <= o[1]
                                            and o[1] - o[0] > s[1] - s[0] for o in spans)]
        named: dict[str, tuple[Student, str]] = {}
        for _, _, student, key in sorted(kept, key=lambda s: -len(s[3])):
            named.setdefault(student.id, (student, key))
        return named

    def _lms_submitter(self, stem: str) -> tuple[Student | None, str, str] | None:
        """``(student the LMS recorded, the file's own name, how)`` for an LMS download name, None otherwise
        (a Canvas-looking name whose user id is no roster student's is not an LMS name of this class)."""
        canvas = _CANVAS_NAME.match(stem)
        if canvas is not None:
            owner = [s for s in self.students if s.canvas_id and s.canvas_id.lower() == canvas["userid"]]
            if len(owner) == 1:
                return owner[0], canvas["rest"], (f"Canvas's download name: Canvas user id {canvas['userid']} "
                                                  f"(submission {canvas['submission']})")
        moodle = _MOODLE_NAME.match(stem)
        if moodle is not None:
            full = " ".join(moodle["name"].split()).lower()
            owner = [s for s in self.students if " ".join(s.first_last()).lower() == full
                     or s.name.lower() == full]
            return (owner[0] if len(owner) == 1 else None, moodle["rest"],
                    f"Moodle's download name: {moodle['name']!r}" if len(owner) == 1 else
                    f"Moodle's download name: {moodle['name']!r} is " +
                    ("no roster student" if not owner else "several roster students: "
                     + ", ".join(s.id for s in owner)))
        return None

    def student_for(self, file: str) -> tuple[Student | None, str]:
        """The student a file name belongs to and how it was decided, or ``(None, why not)``."""
        named = [s for s in self.students if s.file]
        if any(s.file == file for s in named):
            owners = [s for s in named if s.file == file]
            if len(owners) > 1:
                return None, "the roster's file column names it for " + ", ".join(s.id for s in owners)
            return owners[0], f"the roster's file column names {file!r}"
        stem = Path(file).stem.lower() if file.lower().endswith(".ipynb") else file.lower()
        lms = self._lms_submitter(stem)
        if lms is not None:
            owner, rest, how = lms
            if owner is None:
                return None, how
            others = {sid: key for sid, (s, key) in self._named(rest).items() if sid != owner.id}
            if others:
                return None, (f"conflict: {how} recorded {owner.id} as the submitter, but the file's own name "
                              + ", ".join(f"names {sid} ({key!r})" for sid, key in others.items()))
            return owner, how
        found = self._named(stem)
        if not found:
            return None, "no roster student's file, login, email or id in the file name"
        if len(found) > 1:
            return None, "the file name matches " + ", ".join(f"{sid} ({key!r})" for sid, (s, key) in found.items())
        student, key = next(iter(found.values()))
        return student, f"{key!r} in the file name"

    def match(self, files: list[str], newest_first: list[str] | None = None) -> Match:
        """The gradebook key of every file (``files``: base names; ``newest_first``: the same names ordered by
        modification time, newest first, to choose among several files of one student)."""
        result = Match()
        owner: dict[str, list[str]] = {}
        for file in files:
            student, why = self.student_for(file)
            if student is None:
                kind = ("conflict" if why.startswith("conflict") else
                        "ambiguous" if "matches" in why or "several" in why or "names it for" in why
                        else "unknown-file")
                result.students[file] = UNMATCHED + file
                result.problems.append(RosterProblem(kind, "", file, why + "; graded as " + UNMATCHED + file))
            else:
                owner.setdefault(student.id, []).append(file)
                result.how[file] = why
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
    moodle = "id" not in columns and {"firstname", "lastname"} <= set(columns) and \
        bool({"emailaddress", "idnumber", "username"} & set(columns))
    if moodle:  # Moodle's grade export: its user fields name the student
        columns.update({key: columns[field] for key, field in (("email", "emailaddress"), ("sisuserid", "idnumber"),
                                                                ("login", "username")) if field in columns})
    if "id" not in columns and not moodle:
        raise RosterError(f"roster {path}: expected an 'id' column, got {list(reader.fieldnames)}")
    students, points = [], {}
    for row in reader:
        value = {key: (row.get(columns[key]) or "").strip() for key in _COLUMNS | {"student"} if key in columns}
        if canvas:
            if value.get("student", "").lower().startswith("points possible"):
                points = {c: float(v) for c, v in row.items() if c and _normal(c) not in _COLUMNS | {"student"}
                          and v and re.fullmatch(r"\s*\d+(\.\d+)?\s*", v)}
                continue
            if not value.get("id"):
                continue
            value["canvasid"], value["name"] = value["id"], value.get("student", "")
            value["id"] = value.get("sisloginid") or value["canvasid"]
        if moodle:
            value["id"] = value.get("sisuserid") or value.get("login") or value.get("email", "")
            if not value["id"]:
                continue
        if not any(value.values()):
            continue
        students.append(Student(
            id=value.get("id", ""), name=value.get("name", ""), login=value.get("login", ""),
            email=value.get("email", ""), file=value.get("file", ""), first_name=value.get("firstname", ""),
            last_name=value.get("lastname", ""), canvas_id=value.get("canvasid", ""),
            sis_user_id=value.get("sisuserid", ""), sis_login_id=value.get("sisloginid", ""),
            section=value.get("section", "")))
    return Roster(students, points)


def _identities(student: Student) -> set[tuple[str, str]]:
    """The stable identifiers of a student, each with its kind (an email is matched with an email only)."""
    pairs = {("email", student.email), ("login", student.login), ("login", student.sis_login_id),
             ("canvas", student.canvas_id), ("sis", student.sis_user_id), ("id", student.id)}
    return {(kind, value.strip().lower()) for kind, value in pairs if value.strip()}


def rekey(old: Roster, new: Roster, graded: list[str]) -> tuple[Roster, list[str], list[str]]:
    """``new`` with each student that is one of ``old``'s graded students (``graded``: the gradebook's keys)
    given the old id, so that a roster change keeps every grade; ``(roster, what was kept, what cannot be
    mapped)``. A graded student maps to the one new student who shares a stable identifier with them (email,
    login / SIS login id, Canvas id, SIS user id, id); none, or several, cannot be mapped (the caller refuses
    the roster with that list rather than blanking grades)."""
    kept, unmapped, ids = [], [], {}
    for key in graded:
        if key.startswith(UNMATCHED) or key not in old.by_id:
            continue
        mine = _identities(old.by_id[key])
        candidates = [s for s in new.students if mine & _identities(s)]
        if len(candidates) != 1:
            unmapped.append(f"{key} ({old.by_id[key].name or 'no name'}): " +
                            ("no student of the new roster shares an email, login, Canvas id, SIS id or id"
                             if not candidates else "several of the new roster's students match: "
                             + ", ".join(s.id for s in candidates)))
            continue
        if candidates[0].id in ids:
            unmapped.append(f"{key}: the new roster's {candidates[0].id} is also {ids[candidates[0].id]}")
            continue
        ids[candidates[0].id] = key
        shared = sorted(f"{kind} {value}" for kind, value in mine & _identities(candidates[0]))
        if candidates[0].id != key:
            kept.append(f"{key}: the new roster's {candidates[0].id} (same {', '.join(shared)}), kept as {key}")
    taken = set(ids.values())
    students = []
    for s in new.students:
        new_id = ids.get(s.id, s.id)
        if s.id not in ids and new_id in taken:
            unmapped.append(f"{s.id}: a new roster student whose id is an old student's graded key")
        students.append(replace(s, id=new_id))
    return (Roster(students, new.points_possible) if not unmapped else new), kept, unmapped


def adopt(new: Roster, graded_files: dict[str, str]) -> tuple[Roster, list[str], list[str]]:
    """A first roster given after files were graded without one (``graded_files``: the gradebook's key of each
    graded student, a file name, and that file): each roster student whose file it is (:meth:`Roster.student_for`)
    takes that key as id, so that their grades are theirs in every export; ``(roster, what was kept, graded keys
    no roster student's)``."""
    ids: dict[str, str] = {}
    kept, unplaced = [], []
    for key, file in graded_files.items():
        if key.startswith(UNMATCHED):
            continue
        student, why = new.student_for(file)
        if student is None or student.id in ids:
            unplaced.append(f"{key} ({file}): " + (why if student is None else f"{student.id} has {ids[student.id]}"))
            continue
        ids[student.id] = key
        if student.id != key:
            kept.append(f"{key} ({file}) is the roster's {student.id} ({why}), kept as {key}")
    clash = [s.id for s in new.students if s.id not in ids and s.id in ids.values()]
    if clash:
        return new, [], [f"{sid}: a roster id that is another graded student's key" for sid in clash]
    students = [replace(s, id=ids.get(s.id, s.id)) for s in new.students]
    return Roster(students, new.points_possible), kept, unplaced


ROSTER_FIELDS = ["id", "name", "email", "login", "file", "first_name", "last_name", "canvas_id", "sis_user_id",
                 "sis_login_id", "section"]


def write_roster(roster: Roster, path: Path) -> Path:
    """Write ``roster`` as a CSV that :func:`read_roster` reads back to the same students."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(ROSTER_FIELDS)
        for s in roster.students:
            writer.writerow([getattr(s, name) for name in ROSTER_FIELDS])
    return path
