"""Publishing a gradebook: every export and feedback file rewritten from it, with the options the instructor
gives (the scoring rule, LMS choices, extensions: recorded in the gradebook from then on), and what changed in
the exports printed student by student. ``course-grade`` (:mod:`course_lib.grading.cli`) calls it after every
run, override and export; the class-records subcommands (:mod:`course_lib.grading.commands`) after theirs.
"""

from __future__ import annotations

import fcntl
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..judging.scoring import ScoringRule
from .exports import class_table, describe_changes, write_exports
from .gradebook import Gradebook
from .handback import write_feedback
from .lms import LmsOptions
from .roster import Roster, RosterProblem, read_roster

__all__ = ["ClassOptions", "export", "stored_roster", "ROSTER_COPY"]

ROSTER_COPY = "roster.csv"


@dataclass
class ClassOptions:
    """What ``course-grade`` does beyond grading: students, incremental runs, scoring, feedback."""

    roster: Roster | None = None
    regrade: bool = False
    regrade_students: tuple[str, ...] = ()
    grade_given: bool = False  # a regraded student's file as given, even an earlier one (the instructor names it)
    rule: ScoringRule | None = None  # None: the rule the gradebook already holds
    times: dict[str, str] = field(default_factory=dict)  # supplied submission times, by student or file name
    assignment: str = ""  # the LMS column's name ("": as recorded, at first the notebook's id)
    feedback_details: bool | None = None  # None: as the gradebook records (off at first)
    feedback_html: bool | None = None
    lms: dict[str, object] = field(default_factory=dict)  # LmsOptions' fields given this time (kept for later runs)
    extensions: dict[str, str] = field(default_factory=dict)  # a student's own deadline, by id (kept, merged)


@contextmanager
def _export_lock(out: Path) -> Iterator[None]:
    """One process at a time reads the gradebook and rewrites the exports (the last one sees every grade)."""
    with open(out / ".gradebook.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def stored_roster(out: Path) -> Roster | None:
    """The roster kept in ``out`` by an earlier ``--roster`` (so that every run maps files the same way)."""
    return read_roster(out / ROSTER_COPY) if (out / ROSTER_COPY).is_file() else None


def export(book: Gradebook, out: Path, options: ClassOptions, problems: list[RosterProblem] | None = None,
           quiet: bool = True) -> list[str]:
    """Record the options' scoring rule and times, then rewrite every export and feedback file from ``book``;
    print (unless ``quiet``) and return what changed in the exports since the last one, student by student."""
    settings = {**(book.rule() or {}), **(options.rule.to_dict() if options.rule is not None else {})}
    for key in ("feedback_details", "feedback_html", "assignment"):
        if getattr(options, key) not in (None, ""):
            settings[key] = getattr(options, key)
    settings.update(options.lms)
    if options.extensions:
        settings["extensions"] = {**settings.get("extensions", {}), **options.extensions}
    book.add_rule(settings)
    if options.times:
        book.add_times(options.times, "supplied")
    rule = ScoringRule.from_dict(settings)
    roster = options.roster or stored_roster(out)
    with _export_lock(out):
        current = book.current()
        assignment = settings.get("assignment") or (book.assignment() or ("",))[0] or \
            next((r.notebook for r in current.values() if r.notebook), "assignment")
        before = book.last_finals()
        refusals: list[str] = []
        lms = LmsOptions(**{k: settings[k] for k in LmsOptions.__dataclass_fields__ if k in settings})
        extensions = settings.get("extensions") or {}
        write_exports(book, out, roster, rule, assignment, problems, lms, extensions, refusals)
        changes = describe_changes(before, book.last_finals())
        for line in changes:
            if not quiet:
                print(f"changed: {line}", flush=True)
        for line in refusals:
            print(f"course-grade: {line}", file=sys.stderr, flush=True)
        write_feedback(class_table(book, roster, rule, extensions), out / "feedback", rule,
                       bool(settings.get("feedback_details")), bool(settings.get("feedback_html")),
                       assignment=assignment)
    return changes
