"""``course-grade``: grade submitted notebooks into a gradebook; export it; override a grade.

    course-grade submissions/ --out grades/                       # grade what is new or changed
    course-grade submissions/ --out grades/ --roster roster.csv   # students, not file names; LMS files
    course-grade submissions/ --out grades/ --regrade-student s042   # that student again, nobody else
    course-grade hw/*.ipynb --out grades/ --source my_assignment/hw1.ipynb   # an instructor's own assignment
    course-grade override --out grades/ s042 fx_attend 2 --reason "cell order bug, checked by hand"
    course-grade export --out grades/ --partial-credit --deadline 2026-11-20T23:59Z --late-penalty 10%/day
    course-grade history --out grades/ s042                       # every record of a student
    course-grade rubric | handback | class-report | course-table | gradescope ...   (course_lib.grading.commands)

A gradebook belongs to one assignment (one notebook): the first run that knows it records it (``--source``,
else the one notebook the run's files resolve to) and every later run grades against it. A file that is another
notebook is graded against the assignment (status ``wrong-notebook``, printed, in ``summary.csv`` and
``roster_problems.csv``); a first run whose files resolve to several notebooks, or a ``--source`` of another
notebook than the recorded one, is refused before anything is graded (exit status 2).

Every graded submission is recorded in ``<out>/gradebook.sqlite`` (:mod:`course_lib.grading.records.gradebook`,
records added, never rewritten) with its SHA-256; a later run grades only the submissions that are new or
changed (another hash) unless ``--regrade`` or ``--regrade-student``; a copy of each graded file is kept in
``<out>/submissions/`` so that a regrade grades a student's current submission, never a superseded file given
again (``--grade-given`` grades the earlier file the instructor names). Every run and command prints what
changed in the exports, student by student. Per submission it writes
``<name>.json`` (everything, the seed included: for the instructor) and ``<name>.md``; after each run every
export is rewritten from the gradebook (:mod:`course_lib.grading.records.exports`: ``grades.csv``, ``summary.csv``,
with a roster ``canvas.csv``, ``moodle.csv``, ``plain.csv``, ``roster_problems.csv``) and one feedback file
per student in ``<out>/feedback/`` (:mod:`course_lib.grading.records.handback`). The grader runs every submission in
a bubblewrap sandbox (see docs/grading.md).
Exit status: 0 when every report was written (whatever the scores), 2 for a usage error or a refused mix.
"""

from __future__ import annotations

import argparse
import csv
import functools
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from .commands import open_gradebook
from .course import course_notebooks, notebook_id
from .judging.scoring import ScoringRule, parse_time
from .records.exports import report_from_dict
from .records.gradebook import GRADEBOOK_NAME, KEPT, Gradebook, GradebookError, keep_copy, kept_copy
from .records.lms import MOODLE_FIELDS
from .records.publish import ROSTER_COPY, ClassOptions, export, stored_roster
from .records.report import report_name, terminal_safe, write_json, write_markdown
from .records.report_types import SubmissionReport
from .records.roster import Roster, RosterError, RosterProblem, adopt, read_roster, rekey, write_roster
from .runner import CourseCopy, GradeConfig, grade_submission, resolve_notebook
from .sandbox.sandbox import SandboxUnavailable, probe
from .submission import display_name, file_sha256

__all__ = ["main", "grade_many", "ClassOptions", "export", "stored_roster"]


def _grade_safely(path: Path, config: GradeConfig, courses: dict[Path, CourseCopy]) -> SubmissionReport:
    """A report for ``path`` whatever happens (``grade_submission`` does not raise; belt and braces)."""
    try:
        return grade_submission(path, config, courses)
    except Exception as err:  # noqa: BLE001
        return SubmissionReport(submission=display_name(path), status="internal-error", sandbox=config.sandbox,
                                message=f"the grader failed: {type(err).__name__}: {err}")


def _mtime(path: Path) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.lstat(path).st_mtime))
    except OSError:
        return ""


def _students(paths: list[Path], roster: Roster | None, how: dict[Path, str] | None = None
              ) -> tuple[dict[Path, str], list[RosterProblem]]:
    """The gradebook key of every submission: the roster's student id, else the file's name without .ipynb
    (the path as given when two files share a name); ``how`` receives why each file is its student's."""
    twice = {k for k, n in Counter(display_name(p.name) for p in paths).items() if n > 1}
    labels = {p: display_name(p) if display_name(p.name) in twice else display_name(p.name) for p in paths}
    if roster is None:  # a/x.ipynb and b/x.ipynb keep their paths as keys
        return {p: label.removesuffix(".ipynb") for p, label in labels.items()}, []
    names = {label: p for p, label in labels.items()}
    newest = sorted(names, key=lambda n: os.lstat(names[n]).st_mtime if names[n].exists() else 0, reverse=True)
    match = roster.match(list(names), newest)
    if how is not None:
        how.update({names[f]: why for f, why in match.how.items()})
    return {names[f]: key for f, key in match.students.items()}, match.problems


def _file_of(book: Gradebook, path: Path, student: str) -> str:
    """The submission's file name as recorded: a kept copy (a regrade of the current submission) keeps the
    name of the file it is a copy of."""
    record = book.current().get(student)
    if record is not None and path.parent.name == KEPT and path.stem == record.sha256:
        return record.file
    return display_name(path.name)


def _report_names(book: Gradebook, todo: list[tuple[Path, str]], files: dict[Path, str] | None = None
                  ) -> dict[Path, str]:
    """A stable report name per submission (a student's file keeps its name from run to run), never a name
    another student's current reports use."""
    current = book.current()
    regraded = {student for _, student in todo}
    taken = {r.report_name for student, r in current.items() if student not in regraded}
    names = {}
    for path, student in todo:
        record = current.get(student)
        file = (files or {}).get(path, display_name(path.name))
        if record is not None and record.file == file and record.report_name not in taken:
            names[path] = record.report_name
            taken.add(record.report_name)
        else:
            names[path] = report_name(display_name(path), taken)
    return names


def _todo(book: Gradebook, students: dict[Path, str], options: ClassOptions, out: Path | None = None,
          quiet: bool = True) -> tuple[list[tuple[Path, str, str]], list[Path]]:
    """``([(path, student, why)], unchanged paths)``: what must be graded, and why (new, changed, regrade).

    A file that is one of its student's earlier, superseded submissions (its SHA-256 is in their history, not
    their current one) is never graded over the current one; a regrade of that student grades their current
    submission (the copy kept in ``out``, :func:`~course_lib.grading.records.gradebook.kept_copy`)."""
    current = book.current()
    todo, unchanged = [], []
    regrade = set(options.regrade_students)
    for path, student in students.items():
        digest, record = file_sha256(path), current.get(student)
        earlier = record is not None and digest and digest != record.sha256 and \
            any(r.sha256 == digest for r in book.history(student))
        if earlier:
            assert record is not None
            copy = kept_copy(out, record.sha256) if out is not None else None
            wanted = options.regrade or student in regrade
            if wanted and options.grade_given:  # the instructor names this earlier file: it becomes current
                _say(quiet, f"{display_name(path.name)!r} ({student}): an earlier submission than {record.file}, "
                            "graded as the instructor named it (--grade-given)")
                todo.append((path, student, "regrade (named)"))
                continue
            _say(quiet, f"{display_name(path.name)!r} ({student}): superseded by {record.file} (graded "
                        f"{record.graded_at}); " + ("regrading the current one" if wanted and copy else
                        "the current one has no kept copy: give its file to regrade it" if wanted else
                        "not graded again"))
            if wanted and copy is not None:
                todo.append((copy, student, "regrade"))
            else:
                unchanged.append(path)
        elif options.regrade or student in regrade:
            todo.append((path, student, "regrade"))
        elif record is None:
            todo.append((path, student, "new"))
        elif record.sha256 != digest or not digest or record.file != display_name(path.name):
            todo.append((path, student, "changed"))
        else:
            unchanged.append(path)
    for student in sorted(regrade - set(students.values())):
        record = current.get(student)
        copy = kept_copy(out, record.sha256) if out is not None and record is not None else None
        if copy is not None:
            assert record is not None
            _say(quiet, f"--regrade-student {student}: no file of theirs given; regrading their current "
                        f"submission {record.file} (graded {record.graded_at})")
            todo.append((copy, student, "regrade"))
    return todo, unchanged


T = TypeVar("T")


class _TerminalSafe:
    """A text stream that writes what it is given through :func:`terminal_safe`: everything ``course-grade`` and
    its subcommands print (file names, student keys, messages, roster lines) comes from submissions in part."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(terminal_safe(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _terminal_safe_output(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` with everything it prints passed through :func:`terminal_safe` (escaping twice changes nothing)."""

    @functools.wraps(fn)
    def safe(*args: Any, **kwargs: Any) -> T:
        with redirect_stdout(_TerminalSafe(sys.stdout)), redirect_stderr(_TerminalSafe(sys.stderr)):
            return fn(*args, **kwargs)

    return safe


def _say(quiet: bool, text: str) -> None:
    if not quiet:
        print(text, flush=True)


def _recorded_source(notebook: str, path: str) -> Path:
    """The copy of the gradebook's assignment a run without ``--source`` grades against: the file recorded,
    else the course notebook of that id; a GradebookError when neither is there any more."""
    if path and Path(path).is_file() and notebook_id(Path(path)) == notebook:
        return Path(path)
    found = next((p for p in course_notebooks() if notebook_id(p) == notebook), None)
    if found is None:
        raise GradebookError(f"this gradebook's assignment is {notebook}, graded from {path or '?'}, which is not "
                             "there any more: give its copy with --source")
    return found


def _first_assignment(paths: list[Path], max_bytes: int) -> Path | None:
    """The one notebook a first run's submissions resolve to (None: none resolves); a GradebookError naming
    them when they resolve to several (a gradebook holds one assignment: the instructor says which)."""
    by_copy: dict[Path, list[Path]] = {}
    for path in paths:
        copy = resolve_notebook(path, max_bytes)
        if copy is not None:
            by_copy.setdefault(copy, []).append(path)
    if len(by_copy) > 1:
        told = [f"{notebook_id(copy)}: {len(files)} file(s) ({', '.join(display_name(f.name) for f in files[:4])}"
                f"{', ...' if len(files) > 4 else ''})"
                for copy, files in sorted(by_copy.items(), key=lambda item: -len(item[1]))]
        raise GradebookError("these submissions are several notebooks and a gradebook holds one assignment: "
                             + "; ".join(told) + ". Say which with --source (the course's copy, e.g. "
                             "notebooks/14_todays_models.ipynb); a file of another notebook is then graded "
                             "against it, earns nothing for exercises it does not define, and is reported")
    return next(iter(by_copy), None)


def _assignment(book: Gradebook, paths: list[Path], config: GradeConfig, quiet: bool) -> GradeConfig:
    """``config`` with ``source`` set to the gradebook's one assignment, recorded by the first run that knows
    it (``--source``, else the one notebook its submissions resolve to). Every later submission is graded
    against it; a file that says it is another notebook is reported by the runner (``wrong-notebook``).
    Refused before anything is graded (GradebookError): a ``--source`` of another notebook than the one
    recorded, a first run whose files resolve to several notebooks."""
    recorded = book.assignment()
    if config.source is not None:
        source = Path(config.source)
        if recorded is not None and recorded[0] != notebook_id(source):
            raise GradebookError(f"this gradebook's assignment is {recorded[0]} (from {recorded[1]}); --source "
                                 f"{source} is {notebook_id(source)}: grade another assignment into another --out")
    elif recorded is not None:
        source = _recorded_source(*recorded)
    else:
        first = _first_assignment(paths, config.max_bytes)
        if first is None:  # nothing says which notebook (unreadable or unknown files): nothing to record yet
            return config
        source = first
    notebook = notebook_id(source)
    stored = book.set_assignment(notebook, str(source.resolve()))
    if stored[0] != notebook:  # a concurrent first run recorded another notebook a moment ago
        raise GradebookError(f"this gradebook's assignment is {stored[0]} (from {stored[1]}), not {notebook}")
    if recorded is None:
        _say(quiet, f"the gradebook's assignment: {notebook} ({source}); every later run grades against it")
        earlier = sorted({r.notebook for r in book.history() if r.notebook and r.notebook != notebook})
        if earlier:
            _say(quiet, f"records graded before it was recorded hold other notebooks (kept as they are): {earlier}")
    return replace(config, source=source)


@_terminal_safe_output
def grade_many(paths: list[Path], config: GradeConfig, out: Path, jobs: int = 1, quiet: bool = False,
               options: ClassOptions | None = None) -> list[SubmissionReport]:
    """Grade the new or changed submissions into the gradebook in ``out``, rewrite the exports and feedback;
    return every given submission's report (graded now, or the gradebook's current one), in the order given.
    Raises GradebookError, before grading anything, when the run would mix two notebooks in the gradebook."""
    options = options or ClassOptions()
    out.mkdir(parents=True, exist_ok=True)
    with Gradebook(out / GRADEBOOK_NAME) as book:
        config = _assignment(book, paths, config, quiet)
        explicit = config.seed is not None
        stored = book.seed(config.resolved_seed())  # one secret seed per gradebook: the same hidden cases for all
        if not explicit:
            config.seed = stored
        elif stored != config.seed:
            _say(quiet, "--seed differs from the gradebook's seed: this run's hidden cases differ from earlier runs'")
        roster = options.roster or stored_roster(out)
        how: dict[Path, str] = {}
        students, problems = _students(paths, roster, how)
        graded_before = book.current()
        for problem in problems:  # a student missing from this run but graded before is not missing
            if problem.kind != "missing" or problem.student not in graded_before:
                _say(quiet, f"roster: {problem.kind}: {problem.student or problem.file}: {problem.detail}")
        for student in set(options.regrade_students) - set(students.values()) - set(graded_before):
            _say(quiet, f"--regrade-student {student}: no submission of theirs among the files given")
        todo, unchanged = _todo(book, students, options, out, quiet)
        files = {p: _file_of(book, p, s) for p, s, _ in todo}
        for path, student, _ in todo:
            if path in how:
                _say(quiet, f"roster: {files[path]} -> {student}: {how[path]}")
        names = _report_names(book, [(p, s) for p, s, _ in todo], files)
        current_before = book.current()
        courses: dict[Path, CourseCopy] = {}
        graded: dict[Path, SubmissionReport] = {}
        # Threads, not processes: the work is waiting for sandboxes (each its own processes), and the threads
        # share the course copies, their hidden cases and reference outputs.
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [(p, s, why, pool.submit(_grade_safely, p, config, courses)) for p, s, why in todo]
            for path, student, why, future in futures:
                report = future.result()
                write_json(report, out / f"{names[path]}.json")
                write_markdown(report, out / f"{names[path]}.md")
                kept = files[path] != display_name(path.name)  # a regrade of the kept copy: the file's own time
                mtime = current_before[student].mtime if kept and student in current_before else _mtime(path)
                book.add_submission(student, files[path], report, names[path], why, mtime)
                keep_copy(out, path, report.sha256)
                graded[path] = report
                _say(quiet, f"{files[path]!r} ({student}, {why}): {report.total:g}/{report.max_total:g} "
                            f"({report.elapsed_s:.1f} s) -> {out / names[path]}.md")
                if report.status == "wrong-notebook":
                    _say(quiet, f"  wrong notebook: {display_name(path.name)}: {report.message}")
        if unchanged:
            _say(quiet, f"unchanged since graded (same SHA-256), not regraded: {len(unchanged)}")
        export(book, out, options, problems, quiet=quiet)
        current = book.current()
        by_student = {s: graded[p] for p, s, _ in todo}  # a regraded kept copy answers for its student
        return [graded[p] if p in graded else by_student[students[p]] if students[p] in by_student
                else report_from_dict(book.report(current[students[p]].id)) for p in paths]


# --- the command line -----------------------------------------------------------------------------------

def _scoring_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("scoring, exports and feedback (recorded in the gradebook)")
    group.add_argument("--roster", type=Path, default=None,
                       help="CSV of the class (id, name, login, email, ...): submissions become students; a "
                            "copy is kept in --out for later runs")
    group.add_argument("--partial-credit", action="store_true", default=None,
                       help="points per hidden case passed for a failed exercise (default: all or nothing)")
    group.add_argument("--all-or-nothing", dest="partial_credit", action="store_false",
                       help="back to all or nothing per exercise")
    group.add_argument("--deadline", default=None, help="ISO 8601 time, e.g. 2026-11-20T23:59Z (UTC if no zone)")
    group.add_argument("--late-penalty", default=None,
                       help="share of the total lost when late: '10%%/day', '2%%/hour' (per started unit), '50%%'")
    group.add_argument("--submission-times", default=None,
                       help="'mtime' (the files' modification times) or a CSV with columns student (or file) "
                            "and submitted_at (ISO 8601)")
    group.add_argument("--assignment", default="",
                       help="the LMS column's name (default: the notebook's id); kept for later runs")
    group.add_argument("--feedback-details", action=argparse.BooleanOptionalAction, default=None,
                       help="put the grader's messages in the students' feedback (they may show hidden values); "
                            "kept for later runs")
    group.add_argument("--feedback-html", action=argparse.BooleanOptionalAction, default=None,
                       help="also write feedback/<student>.html; kept for later runs")
    group.add_argument("--points-possible", type=float, default=None,
                       help="the LMS assignment's points possible: canvas.csv is refused when the course's maximum "
                            "differs; kept for later runs")
    group.add_argument("--moodle-map", choices=sorted(MOODLE_FIELDS), default=None,
                       help="the field Moodle maps users by (default: email, else username, else idnumber: the "
                            "first every roster student has); kept")
    group.add_argument("--moodle-missing", choices=["omit", "blank"], default=None,
                       help="a roster student without a grade: left out of moodle.csv (omit, the default) or an "
                            "empty cell, which is 'no grade' to Moodle and clears a grade entered by hand; kept")
    group.add_argument("--moodle-feedback", action=argparse.BooleanOptionalAction, default=None,
                       help="add a feedback column to moodle.csv; kept")
    group.add_argument("--extensions", type=Path, default=None,
                       help="CSV with columns student and due (ISO 8601): a student's own deadline; kept, merged")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="course-grade", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", nargs="+", type=Path, help="submitted .ipynb files (or folders of them)")
    parser.add_argument("--out", type=Path, required=True, help="folder of the gradebook, reports and exports")
    parser.add_argument("--source", type=Path, default=None,
                        help="the course's (or your assignment's) copy of the notebook, the gradebook's one "
                             "assignment; default: the one the gradebook recorded, else the one notebook the files "
                             "resolve to among the course's (several: refused, give --source)")
    parser.add_argument("--timeout-cell", type=float, default=30.0, help="seconds per cell (default 30)")
    parser.add_argument("--timeout-total", type=float, default=300.0, help="seconds per submission (default 300)")
    parser.add_argument("--memory-mb", type=int, default=1024, help="memory limit of the kernel (default 1024)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the hidden cases (default: a secret random seed drawn once per gradebook, "
                             "recorded in it and in the JSON reports)")
    parser.add_argument("--max-mb", type=float, default=20.0,
                        help="largest total source of a submission's code cells (default 20 MB); saved outputs "
                             "do not count (a file over 256 MB is not read)")
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded in parallel (default 1)")
    parser.add_argument("--regrade", action="store_true", help="grade every given submission, changed or not")
    parser.add_argument("--regrade-student", action="append", default=[], metavar="ID",
                        help="grade this student's current submission again (the kept copy when the files given "
                             "hold only an earlier one, or none of theirs; repeatable)")
    parser.add_argument("--grade-given", action="store_true",
                        help="with --regrade-student: grade the student's file as given even when it is an earlier "
                             "submission than their current one (it becomes current)")
    parser.add_argument("--allow-module", action="append", default=[],
                        help="a further module exercise cells may import, its package then shown in the sandbox, "
                             "which holds only the course's dependencies otherwise (repeatable)")
    parser.add_argument("--no-policy", action="store_true",
                        help="skip the static policy (NOT for real grading: runtime defences only)")
    parser.add_argument("--flags-score-zero", action="store_true",
                        help="score 0 a submission flagged for review (its graded cells name the grader's internals: "
                             "sys.modules, gc, inspect, __torch_function__, frames...); by default it is graded and "
                             "only flagged in its report, the gradebook and summary.csv")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="run submissions without the bubblewrap sandbox (NOT for untrusted code; every report "
                             "says so)")
    parser.add_argument("--quiet", action="store_true")
    _scoring_arguments(parser)
    return parser


def _read_times(path: Path, students: dict[Path, str] | None = None) -> dict[str, str]:
    """Supplied submission times: a CSV with ``student`` (or ``file``) and ``submitted_at`` columns."""
    by_file = {display_name(p.name): s for p, s in (students or {}).items()}
    times = {}
    with open(path, newline="", encoding="utf-8-sig") as f:
        for row in csv.DictReader(f):
            who = (row.get("student") or "").strip() or by_file.get((row.get("file") or "").strip(), "")
            when = (row.get("submitted_at") or "").strip()
            if who and when:
                parse_time(when)
                times[who] = when
    return times


def _options(args: argparse.Namespace, parser: argparse.ArgumentParser, book: Gradebook | None) -> ClassOptions:
    """The class options of a run (or of ``export``): the rule merges the options given with the one in force."""
    roster = None
    try:
        if args.roster is not None:
            roster = _changed_roster(read_roster(args.roster), args, parser, book)
        else:
            roster = stored_roster(args.out)
    except (RosterError, OSError) as err:
        parser.error(str(err))
    rule = ScoringRule.from_dict(book.rule() if book is not None else None)
    changes = {k: v for k, v in (("partial_credit", args.partial_credit), ("deadline", args.deadline),
                                 ("penalty", args.late_penalty)) if v is not None}
    times: dict[str, str] = {}
    if args.submission_times == "mtime":
        changes["times"] = "mtime"
    elif args.submission_times:
        changes["times"] = "supplied"
        paths = getattr(args, "paths", [])
        try:
            times = _read_times(Path(args.submission_times), _students(paths, roster)[0] if paths else None)
        except (OSError, ValueError) as err:
            parser.error(f"--submission-times: {err}")
    try:
        rule = ScoringRule(**{**rule.to_dict(), **changes})
    except ValueError as err:
        parser.error(str(err))
    lms = {k: v for k, v in (("points_possible", args.points_possible), ("moodle_map", args.moodle_map),
                             ("moodle_missing", args.moodle_missing), ("moodle_feedback", args.moodle_feedback))
           if v is not None}
    extensions: dict[str, str] = {}
    if args.extensions is not None:
        try:
            extensions = read_extensions(args.extensions)
        except (OSError, ValueError) as err:
            parser.error(f"--extensions: {err}")
    return ClassOptions(roster=roster, regrade=getattr(args, "regrade", False), lms=lms, extensions=extensions,
                        regrade_students=tuple(getattr(args, "regrade_student", [])),
                        grade_given=getattr(args, "grade_given", False), rule=rule, times=times,
                        assignment=args.assignment, feedback_details=args.feedback_details,
                        feedback_html=args.feedback_html)


def _changed_roster(new: Roster, args: argparse.Namespace, parser: argparse.ArgumentParser,
                    book: Gradebook | None) -> Roster:
    """The roster given, keyed as the gradebook's students already are, and kept in ``--out``: a student graded
    under the previous roster keeps their id (matched by a stable identifier: email, login, Canvas id, SIS id);
    a graded student the new roster cannot map refuses the roster, with the list, rather than blanking them."""
    old = stored_roster(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    if old is not None and book is not None:
        graded = list(dict.fromkeys([*book.current(), *(k for k, _ in book.overrides()),
                                     *(k for k, _ in book.manual())]))
        keyed, kept, unmapped = rekey(old, new, graded)
        if unmapped:
            parser.error(f"--roster {args.roster}: {len(unmapped)} graded student(s) of the previous roster cannot "
                         "be mapped to one student of the new one (their grades would no longer be exported):\n  "
                         + "\n  ".join(unmapped) + "\nAdd an identifier they share (email, login, canvas_id, "
                         "sis_user_id) to the new roster; nothing was changed")
        for line in kept:
            _say(getattr(args, "quiet", False), f"roster change: {line}")
        write_roster(keyed, args.out / ROSTER_COPY)
        return keyed
    if book is not None and book.current():  # the first roster, after files were graded without one
        keyed, kept, unplaced = adopt(new, {k: r.file for k, r in book.current().items()})
        for line in kept:
            _say(getattr(args, "quiet", False), f"roster: {line}")
        for line in unplaced:
            print(f"course-grade: roster: graded, on no roster student (in summary.csv, not in the LMS files): {line}",
                  file=sys.stderr)
        write_roster(keyed, args.out / ROSTER_COPY)
        return keyed
    (args.out / ROSTER_COPY).write_bytes(args.roster.read_bytes())
    return new


def read_extensions(path: Path) -> dict[str, str]:
    """Per-student deadlines: a CSV with columns ``student`` and ``due`` (ISO 8601, UTC when no zone)."""
    due = {}
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames or not {"student", "due"} <= set(reader.fieldnames):
            raise ValueError(f"{path}: expected columns student and due, got {reader.fieldnames}")
        for row in reader:
            who, when = (row.get("student") or "").strip(), (row.get("due") or "").strip()
            if who and when:
                parse_time(when)
                due[who] = when
    return due


def _override(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="course-grade override",
                                     description="Set a student's points for one exercise, with a reason (kept "
                                                 "through every regrade; --clear removes it).")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("student")
    parser.add_argument("exercise")
    parser.add_argument("points", nargs="?", type=float, default=None)
    parser.add_argument("--reason", required=True)
    parser.add_argument("--clear", action="store_true", help="remove the override in force")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if (args.points is None) != args.clear:
        parser.error("give POINTS, or --clear without points")
    book = open_gradebook(args.out, parser)
    assert book is not None
    with book:
        current = book.current()
        record = current.get(args.student)
        roster = stored_roster(args.out)
        if record is None and (roster is None or args.student not in roster.by_id):
            parser.error(f"student {args.student!r}: not in the gradebook nor on the roster (students: "
                         f"{', '.join(list(current)[:20])})")
        latest = record or max(current.values(), key=lambda r: r.id, default=None)  # no file: the assignment's
        if latest is None:
            parser.error("the gradebook has no graded submission yet: its exercises are not known")
        assert latest is not None
        exercises = {g.exercise: g.max for g in book.grades(latest.id)}
        exercises.update({q: m.max for (who, q), m in book.manual().items() if who == args.student})
        if args.exercise not in exercises:
            parser.error(f"exercise {args.exercise!r}: expected one of {list(exercises)}")
        if args.points is not None and not 0 <= args.points <= exercises[args.exercise]:
            parser.error(f"points: expected 0 to {exercises[args.exercise]:g}, got {args.points:g}")
        try:
            book.add_override(args.student, args.exercise, args.points, args.reason)
        except GradebookError as err:
            parser.error(str(err))
        export(book, args.out, ClassOptions(), quiet=args.quiet)
    _say(args.quiet, f"override recorded: {args.student} {args.exercise} -> "
                     f"{'cleared' if args.clear else f'{args.points:g}'} ({args.reason}); exports rewritten")
    return 0


def _export(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="course-grade export",
                                     description="Rewrite the exports and feedback from the gradebook, with a "
                                                 "scoring rule (recorded in the gradebook from now on).")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quiet", action="store_true")
    _scoring_arguments(parser)
    args = parser.parse_args(argv)
    book = open_gradebook(args.out, parser)
    assert book is not None
    with book:
        options = _options(args, parser, book)
        export(book, args.out, options, quiet=args.quiet)
        _say(args.quiet, f"exports rewritten in {args.out}/ ({options.rule.describe() if options.rule else ''})")
    return 0


def _history(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="course-grade history",
                                     description="Every graded submission and override in the gradebook, oldest "
                                                 "first (of one student, or of everyone).")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("student", nargs="?", default=None)
    args = parser.parse_args(argv)
    book = open_gradebook(args.out, parser)
    assert book is not None
    with book:
        for r in book.history(args.student):
            print(f"#{r.id} {r.graded_at} {r.student}: {r.file} sha256 {r.sha256[:12]} ({r.why}) {r.status} "
                  f"{r.total:g}/{r.max_total:g}")
        for row in book.rows("overrides"):
            if args.student in (None, row[1]):
                points = "cleared" if row[3] is None else f"{row[3]:g}"
                print(f"override {row[5]} {row[1]} {row[2]}: {points} ({row[4]})")
        for row in book.rows("manual"):
            if args.student in (None, row[1]):
                points = "withdrawn" if row[3] is None else f"{row[3]:g}/{row[4]:g}"
                print(f"graded by hand {row[6]} {row[1]} {row[2]}: {points} ({row[5]})")
    return 0


@_terminal_safe_output
def main(argv: list[str] | None = None) -> int:
    """Entry point of ``course-grade``; returns the exit status. Its output cannot drive the terminal."""
    return _main(list(sys.argv[1:] if argv is None else argv))


def _main(argv: list[str]) -> int:
    if argv[:1] == ["override"]:
        return _override(argv[1:])
    if argv[:1] == ["export"]:
        return _export(argv[1:])
    if argv[:1] == ["history"]:
        return _history(argv[1:])
    from .commands import COMMANDS  # the class-records subcommands (imported when a command line is read)

    if argv[:1] and argv[0] in COMMANDS:
        return COMMANDS[argv[0]](argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    paths: list[Path] = []
    for p in args.submissions:
        if p.is_dir():
            paths += sorted(p.glob("*.ipynb"))
        else:
            paths.append(p)
    if not paths:
        parser.error("no submissions found")
    args.paths = paths
    if args.source is not None and not args.source.is_file():
        parser.error(f"--source {args.source}: no such notebook")
    if args.timeout_cell <= 0 or args.timeout_total <= 0 or args.memory_mb <= 0 or args.max_mb <= 0:
        parser.error("time, memory and size limits must be positive")
    if not args.unsafe_no_sandbox:
        try:
            probe()
        except SandboxUnavailable as err:
            print(f"course-grade: {err}", file=sys.stderr)
            return 2
    book = open_gradebook(args.out, parser, must_exist=False)
    options = _options(args, parser, book)
    if book is not None:
        book.close()
    config = GradeConfig(source=args.source, cell_timeout=args.timeout_cell, total_timeout=args.timeout_total,
                         memory_mb=args.memory_mb, seed=args.seed, max_bytes=int(args.max_mb * 2**20),
                         policy=not args.no_policy, extra_modules=tuple(args.allow_module),
                         sandbox=not args.unsafe_no_sandbox, flags_score_zero=args.flags_score_zero)
    started = time.monotonic()
    try:
        reports = grade_many(paths, config, args.out, jobs=args.jobs, quiet=args.quiet, options=options)
    except GradebookError as err:  # the run would mix two notebooks in one gradebook: nothing was graded
        print(f"course-grade: {err}", file=sys.stderr)
        return 2
    _say(args.quiet, f"{len(reports)} submission(s) in {time.monotonic() - started:.1f} s; gradebook and exports in "
                     f"{args.out}/ (grades.csv, summary.csv{', canvas.csv, moodle.csv' if options.roster else ''}, "
                     "feedback/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
