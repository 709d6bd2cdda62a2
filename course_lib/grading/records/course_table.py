"""One table of the course: every assignment's gradebook (one per ``--out`` folder) read into one CSV, one
column per assignment, one row per student; and Canvas's import with one column per assignment (Canvas's own
gradebook export puts every assignment in a column of its own after ``Student, ID, SIS User ID, SIS Login ID,
Section``, and imports the same layout).

Each column holds what that assignment's exports hold (its scoring rule, overrides, hand-graded questions and
extensions, as recorded in its gradebook); an empty cell: no grade in that assignment.
"""

from __future__ import annotations

from pathlib import Path

from ..judging.scoring import ScoringRule
from .exports import atomic_csv, class_table
from .gradebook import GRADEBOOK_NAME, Gradebook
from .lms import CANVAS_COLUMNS
from .publish import stored_roster
from .roster import Roster, Student

__all__ = ["write_course_table", "assignment_totals"]

def assignment_totals(folder: Path) -> tuple[str, float, dict[str, str], Roster | None]:
    """``(column name, points possible, final total by student, the folder's roster)`` of one gradebook."""
    roster = stored_roster(folder)
    with Gradebook(folder / GRADEBOOK_NAME) as book:
        settings = book.rule() or {}
        name = settings.get("assignment") or (book.assignment() or (folder.name,))[0]
        table = class_table(book, roster, ScoringRule.from_dict(settings), settings.get("extensions") or {})
    top = max((row.max_total for row in table), default=0.0)
    return name, top, {row.key: f"{row.total:g}" for row in table if row.graded}, roster


def write_course_table(folders: list[Path], out: Path, canvas: Path | None = None) -> list[str]:
    """Write the course table to ``out`` (and Canvas's multi-column import to ``canvas``); returns the columns.
    Raises ValueError when two gradebooks have the same assignment name."""
    read = [assignment_totals(Path(f)) for f in folders]
    names = [name for name, _, _, _ in read]
    if len(set(names)) != len(names):
        raise ValueError(f"two gradebooks have the same assignment name: {names}; name them with "
                         "`course-grade export --out DIR --assignment NAME`")
    students: dict[str, Student] = {}
    for _, _, _, roster in read:
        for s in roster.students if roster is not None else []:
            students.setdefault(s.id, s)
    keys = list(students) + [k for _, _, totals, _ in read for k in totals if k not in students]
    keys = list(dict.fromkeys(keys))
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_csv(out, ["id", "name", "email", *names],
                [[k, students[k].name if k in students else "", students[k].email if k in students else "",
                  *[totals.get(k, "") for _, _, totals, _ in read]] for k in keys])
    if canvas is not None:
        unmatched = [s for s in students.values() if not (s.canvas_id or s.sis_user_id or s.sis_login_id or s.login)]
        if unmatched:
            raise ValueError(f"{canvas} not written: {len(unmatched)} roster student(s) have no Canvas ID, SIS User ID "
                             "or SIS Login ID (login), and Canvas would match them by name only: "
                             + ", ".join(s.id for s in unmatched))
        rows = [["    Points Possible", "", "", "", "", *[f"{top:g}" for _, top, _, _ in read]]]
        rows += [[s.sortable_name(), s.canvas_id, s.sis_user_id, s.sis_login_id or s.login, s.section,
                  *[totals.get(s.id, "") for _, _, totals, _ in read]] for s in students.values()]
        canvas.parent.mkdir(parents=True, exist_ok=True)
        atomic_csv(canvas, [*CANVAS_COLUMNS, *names], rows)
    return names
