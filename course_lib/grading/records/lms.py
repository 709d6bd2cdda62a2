"""The LMS import files, ``canvas.csv`` and ``moodle.csv``: written only when the LMS would import them as they
are, else refused before they are written, with the students named.

**Canvas** (Grades > Import): the columns of Canvas's own gradebook export, ``Student, ID, SIS User ID, SIS
Login ID, Section`` then the assignment's column, and a ``Points Possible`` row. Canvas matches a row by ``ID``
(the Canvas user id, roster ``canvas_id``), else by the SIS ids (``sis_user_id``; ``sis_login_id``, else the
roster's ``login``); a row with none of them could be matched by name only, so a roster student without one is a
refusal naming them. The points possible (the assignment's maximum) must equal what the instructor gives
(``--points-possible``) and, when the roster is Canvas's own export holding the assignment's column, its
``Points Possible`` row: a mismatch is refused (Canvas would scale nothing, and every grade would read out of the
wrong total).

**Moodle** (Grade administration > Import > CSV file): ``First name, Last name``, the column Moodle maps users
by, the grade item's column and, on request, a feedback column. The mapping field is one the roster has for
every student: ``Email address`` (Moodle's "useremail"), else ``Username`` (the roster's ``login`` or SIS login
id), else ``ID number`` ("useridnumber", the roster's ``sis_user_id``), or the one the instructor names. Moodle
aborts the whole import at a row whose user it cannot find ("User not found"), so a student without the chosen
field is refused before the file is written. An empty grade cell means "no grade" to Moodle and clears a grade
entered by hand: a roster student without a submission (nor a grade given by hand) is left out of the file unless
the instructor asks for empty cells (``--moodle-missing blank``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .roster import Student

__all__ = ["LmsOptions", "canvas_rows", "moodle_rows", "MOODLE_FIELDS", "CANVAS_COLUMNS"]

#: The identifying columns of Canvas's gradebook CSV, in Canvas's order (the assignment column follows).
CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]

#: Moodle's user-mapping fields: option name -> (column header, the roster's value).
MOODLE_FIELDS: dict[str, tuple[str, Callable[[Student], str]]] = {
    "email": ("Email address", lambda s: s.email),
    "username": ("Username", lambda s: s.sis_login_id or s.login),
    "idnumber": ("ID number", lambda s: s.sis_user_id),
}


@dataclass(frozen=True)
class LmsOptions:
    """The instructor's choices for the LMS files (recorded in the gradebook with the scoring rule)."""

    points_possible: float | None = None  # the LMS assignment's points possible, checked against the maximum
    moodle_map: str = ""  # "email", "username", "idnumber"; "": the first the roster has for every student
    moodle_missing: str = "omit"  # "omit" (leave the row out) or "blank" (an empty cell: "no grade" in Moodle)
    moodle_feedback: bool = False  # add a feedback column

    def __post_init__(self) -> None:
        if self.moodle_map not in ("", *MOODLE_FIELDS):
            raise ValueError(f"moodle_map: expected one of {list(MOODLE_FIELDS)}, got {self.moodle_map!r}")
        if self.moodle_missing not in ("omit", "blank"):
            raise ValueError(f"moodle_missing: expected 'omit' or 'blank', got {self.moodle_missing!r}")


class Refused(ValueError):
    """An LMS file that the LMS would not import as it is; the message names the students."""


def _g(value: float) -> str:
    return f"{value:g}"


def _shared(students: list[Student], key: Callable[[Student], str]) -> str:
    """The students that share a non-empty ``key`` with another, as ``"value: id, id; ..."`` ("" for none)."""
    groups: dict[str, list[str]] = {}
    for s in students:
        if key(s):
            groups.setdefault(key(s), []).append(s.id)
    return "; ".join(f"{value}: {', '.join(ids)}" for value, ids in groups.items() if len(ids) > 1)


def _names(students: list[Student]) -> str:
    return ", ".join(f"{s.id} ({s.name})" if s.name else s.id for s in students)


def canvas_rows(grades: list[tuple[Student, str]], assignment: str, maximum: float, options: LmsOptions,
                roster_points: float | None) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)`` of ``canvas.csv`` (``grades``: each roster student with their final total, "" for
    none); raises :class:`Refused` naming what Canvas could not import as it is."""
    unmatched = [s for s, _ in grades if not (s.canvas_id or s.sis_user_id or s.sis_login_id or s.login)]
    if unmatched:
        raise Refused(f"canvas.csv not written: {len(unmatched)} roster student(s) have no Canvas ID, SIS User ID "
                      f"or SIS Login ID (login), and Canvas would match them by name only: {_names(unmatched)}. "
                      "Use Canvas's gradebook export as the roster (--roster), or add a canvas_id column")
    twice = _shared([s for s, _ in grades], lambda s: s.canvas_id or s.sis_user_id or s.sis_login_id or s.login)
    if twice:
        raise Refused(f"canvas.csv not written: these roster students share the id Canvas would match them by, so "
                      f"one would get another's grade: {twice}")
    for given, source in ((options.points_possible, "--points-possible"),
                          (roster_points, "the Points Possible row of the roster (Canvas's export)")):
        if given is not None and abs(given - maximum) > 1e-9:
            raise Refused(f"canvas.csv not written: the assignment's points possible in Canvas are {_g(given)} "
                          f"({source}), the course's maximum is {_g(maximum)}: make them equal (edit the "
                          "assignment in Canvas, or give --points-possible once they agree)")
    rows = [["    Points Possible", "", "", "", "", _g(maximum)]]
    rows += [[s.sortable_name(), s.canvas_id, s.sis_user_id, s.sis_login_id or s.login, s.section, grade]
             for s, grade in grades]
    return [*CANVAS_COLUMNS, assignment], rows


def moodle_field(students: list[Student], options: LmsOptions) -> str:
    """The user-mapping field of ``moodle.csv``: the instructor's, else the first every student has; raises
    :class:`Refused` naming the students without it (Moodle would abort the import at their row)."""
    if options.moodle_map:
        chosen = options.moodle_map
    else:
        complete = [name for name, (_, value) in MOODLE_FIELDS.items() if all(value(s).strip() for s in students)]
        chosen = complete[0] if complete else min(
            MOODLE_FIELDS, key=lambda n: sum(not MOODLE_FIELDS[n][1](s).strip() for s in students))
    without = [s for s in students if not MOODLE_FIELDS[chosen][1](s).strip()]
    twice = _shared(students, lambda s: MOODLE_FIELDS[chosen][1](s).strip().lower())
    if twice:
        raise Refused(f"moodle.csv not written: Moodle maps users by {MOODLE_FIELDS[chosen][0]!r} and these roster "
                      f"students share one, so one user would get another's grade: {twice}")
    if without:
        raise Refused(f"moodle.csv not written: Moodle maps users by {MOODLE_FIELDS[chosen][0]!r} and would abort "
                      f"the whole import at a row without one ('User not found'); {len(without)} roster "
                      f"student(s) have none: {_names(without)}. Add the column to the roster (email, login or "
                      "sis_user_id), or choose another field with --moodle-map")
    return chosen


def moodle_rows(grades: list[tuple[Student, str, str]], assignment: str, options: LmsOptions
                ) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)`` of ``moodle.csv`` (``grades``: each roster student with their final total, "" for none,
    and their feedback line); raises :class:`Refused` naming the students Moodle would abort on."""
    kept = [g for g in grades if g[1] != "" or options.moodle_missing == "blank"]
    chosen = moodle_field([s for s, _, _ in kept], options)
    header, value = MOODLE_FIELDS[chosen]
    columns = ["First name", "Last name", header, assignment]
    if options.moodle_feedback:
        columns.append(f"{assignment} (feedback)")
    rows = []
    for student, grade, feedback in kept:
        row = [*student.first_last(), value(student), grade]
        if options.moodle_feedback:
            row.append(feedback)
        rows.append(row)
    return columns, rows
