"""Grading one submission: rebuild it from the course's copy, run it under limits, compare in this process.

The steps (see ``docs/grading.md`` for the instructor's view):

1. **Read** the submission as JSON with a size cap; a file that is too big, not JSON or not a notebook gets a
   report saying so (every exercise ``missing``), never a crash.
2. **Find the course's copy** (``--source``, else the notebook id in the submission's metadata, else its file
   name, else the course notebook whose exercise names it defines). From the submission, only the *source*
   of the exercise cells is taken, matched by the name each stub defines (``def stable_softmax``) and its
   position in the course's copy; the submission's metadata, tags, kernelspec, outputs and other cells are
   dropped. With ``--source`` (or a gradebook's recorded assignment, which ``course-grade`` passes as it), a
   file whose metadata or name says it is another notebook is graded against the source all the same, with
   the status ``wrong-notebook`` and a message naming both.
3. **Static policy** (:mod:`course_lib.grading.judging.policy`) on each exercise cell: a refused cell never runs.
4. **Plan**: per exercise the learner's cell, the learner's helper cells it needs, the course's check cell,
   and the hidden inputs as ``.npz`` (:mod:`course_lib.grading.sandbox.executor`).
5. **Run it in a sandbox** (:mod:`course_lib.grading.sandbox.sandbox`): bubblewrap, no network, its own PID namespace,
   read-only system, a private size-limited ``/tmp``, resource limits, and a copy of ``course_lib`` in which
   this notebook's references are withheld (:mod:`course_lib.grading.sandbox.libcopy`). An exercise that overruns or
   kills its sandbox is marked; a fresh sandbox replays the earlier exercise cells and goes on.
6. **Compare** in this process (:mod:`course_lib.grading.judging.judge`): the outputs, loaded with hard limits
   (:mod:`course_lib.grading.judging.results`), against the reference run here on the same hidden cases, with
   :func:`course_lib.exercises.compare_outputs`. The run's report scores each exercise all or nothing,
   ``exercise.points`` when every hidden case passes, else 0 (known mistakes often pass the easy cases), and
   records its status and how many hidden cases passed. The exports and the students' feedback apply the
   gradebook's scoring rule to those (:mod:`course_lib.grading.judging.scoring`): all or nothing by default;
   with ``--partial-credit`` a ``fail`` earns ``points * cases_passed / cases_total``, any other status (an
   error, a timeout, a refused or missing cell) 0.
"""

from __future__ import annotations

import builtins
import platform
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course_lib.exercises.passes import access_check_name
from course_lib.exercises.verdict import Rules

from .course import (
    MAX_SOURCE,
    STANDARD_IMPORTS,
    CourseCopy,
    claimed_notebook,
    course_copy,
    course_notebooks,
    find_course_copy,
)
from .judging import policy as P
from .judging.flags import tampering_flags
from .judging.judge import judge
from .records.report_types import ExerciseResult, SubmissionReport
from .sandbox.executor import Limits, Plan, execute
from .sandbox.libcopy import reference_key
from .submission import display_name, helper_cells, is_stub, locate, read_submission

__all__ = ["GradeConfig", "grade_submission", "CourseCopy", "STANDARD_IMPORTS", "versions", "read_submission",
           "resolve_notebook"]

UNSANDBOXED = "graded WITHOUT a sandbox (--unsafe-no-sandbox): the submission's code ran as the grader's user"


@dataclass
class GradeConfig:
    """The grading command's options (see ``course-grade --help``)."""

    source: Path | None = None
    cell_timeout: float = 30.0
    total_timeout: float = 300.0
    memory_mb: int = 1024
    seed: int | None = None
    max_bytes: int = 20 << 20
    policy: bool = True
    flags_score_zero: bool = False  # a submission flagged for review (judging/flags.py) scores 0
    extra_modules: tuple[str, ...] = ()
    startup_timeout: float = 60.0
    sandbox: bool = True
    disk_mb: int = 64
    cpu_share: float = 1.0  # CPUs per sandbox, where the host lets the grader set a CPU limit (cgroups)

    def resolved_seed(self) -> int:
        """The seed of the hidden cases: the one given, else a secret random one drawn once."""
        if self.seed is None:
            self.seed = secrets.randbelow(2**31 - 1)
        return self.seed

    def limits(self) -> Limits:
        return Limits(self.cell_timeout, self.total_timeout, self.memory_mb, self.startup_timeout, self.disk_mb,
                      self.sandbox, self.cpu_share, tuple(self.extra_modules))


def versions() -> dict[str, str]:
    """The versions that decide a grade: course_lib, torch, numpy, Python."""
    import numpy
    import torch

    import course_lib

    return {"course_lib": course_lib.__version__, "torch": torch.__version__, "numpy": numpy.__version__,
            "python": platform.python_version()}


def grade_submission(path: Path, config: GradeConfig, courses: dict[Path, CourseCopy] | None = None
                     ) -> SubmissionReport:
    """Grade one submission; always returns a report (never raises for anything in the submission)."""
    started = time.monotonic()
    report = SubmissionReport(submission=display_name(path), seed=config.resolved_seed(), sandbox=config.sandbox,
                              limits={"cell_timeout_s": config.cell_timeout, "total_timeout_s": config.total_timeout,
                                      "memory_mb": config.memory_mb, "max_bytes": config.max_bytes,
                                      "disk_mb": config.disk_mb, "policy": config.policy, "sandbox": config.sandbox},
                              versions=versions(), graded_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    try:
        _grade_into(report, Path(path), config, {} if courses is None else courses, started)
    except Exception as err:  # noqa: BLE001 - the grader never crashes on a submission
        report.status = "internal-error"
        report.message = f"the grader failed: {type(err).__name__}: {err}"
        for result in report.exercises:
            if result.status != "pass":
                result.score = 0.0
    report.total = float(sum(r.score for r in report.exercises))
    if not config.sandbox:
        report.message = f"{UNSANDBOXED}. {report.message}".strip()
    report.elapsed_s = round(time.monotonic() - started, 3)
    return report


#: The code the grader reads of one submission, in notebook order (a notebook's exercises and helpers are a
#: few kB; the bound keeps the grader's own parsing under a second whatever a submission holds).
MAX_CODE = 400_000


def within_budget(cells: list[tuple[int, str]]) -> tuple[list[tuple[int, str]], int]:
    """The code cells that fit in :data:`MAX_CODE` characters, in order (a cell that does not fit is skipped,
    the smaller ones after it still read), and how many were skipped. A cell over :data:`MAX_SOURCE` is never
    parsed: only its beginning is kept (a regular expression finds what it defines, and its exercise is
    reported as too large), at a small cost against the budget."""
    kept, used = [], 0
    for index, source in cells:
        if len(source) > MAX_SOURCE:
            source, cost = source[:MAX_SOURCE + 1], MAX_CODE // 200
        else:
            cost = len(source)
        if used + cost <= MAX_CODE:
            kept.append((index, source))
            used += cost
    return kept, len(cells) - len(kept)


def resolve_notebook(path: Path, max_bytes: int = 20 << 20) -> Path | None:
    """The course notebook a submission resolves to when no ``--source`` is given (its metadata's id, else its
    file name, else the notebook whose exercises it defines most), or None. ``course-grade`` asks this of every
    file of a gradebook's first run, so that a folder holding two notebooks is refused before anything runs."""
    nb, cells, _, _ = read_submission(Path(path), max_bytes)
    return _find_source(nb, Path(path), cells, None)


_COURSES_LOCK = threading.Lock()


def _course_for(path: Path, config: GradeConfig, courses: dict[Path, CourseCopy]) -> CourseCopy:
    key = Path(path).resolve()
    with _COURSES_LOCK:  # graded in parallel threads (--jobs): build each course copy once
        if key not in courses:
            courses[key] = course_copy(key, config.resolved_seed())
        return courses[key]


def _find_source(nb: dict[str, Any] | None, path: Path, cells: list[tuple[int, str]], source: Path | None
                 ) -> Path | None:
    if source is not None:
        return source
    if nb is not None:
        return find_course_copy(nb, path, [s for _, s in cells])
    stem = display_name(path.stem)
    return next((p for p in course_notebooks() if stem.startswith(p.stem)), None)


def _screen(spec: Any, cells: list[tuple[int, str]], result: ExerciseResult, course: CourseCopy,
            config: GradeConfig) -> tuple[int, str] | None:
    """Find the learner's cell and decide what needs no sandbox; ``(index, source)`` when it must run."""
    result.cases_total = len(spec.cases)
    where = locate(spec.target, spec.stub, spec.index, cells, spec.check)
    if where is None:
        result.status, result.message = "missing", f"no cell defines {spec.target}"
        return None
    index, source = where
    result.cell = index + 1
    if len(source) > MAX_SOURCE:
        result.status = "error"
        result.message = f"the exercise cell is too large (over {MAX_SOURCE} characters): not run"
        return None
    if is_stub(source, spec.stub):
        result.status, result.message = "not-implemented", "the exercise cell is still the stub"
        return None
    violations = P.check_source(source, spec.exercise.reference, course.namespace, config.extra_modules) \
        if config.policy else []
    if violations:
        kind = violations[0].kind
        result.status = "error" if kind == "syntax" else "forbidden"
        result.message = "; ".join(str(v) for v in violations[:4])
        if kind == "reference":
            result.message = "no points for calling the course's reference: " + result.message
        result.line = str(violations[0])
        return None
    return where


def _plan(course: CourseCopy, cells: list[tuple[int, str]], chosen: dict[int, tuple[int, str] | None]) -> Plan:
    """The sandbox's job: per exercise its cell (None: not run), helper cells, check cell and cases."""
    plan = Plan(setup=STANDARD_IMPORTS + course.setup_lines)
    known = set(course.namespace) | set(dir(builtins))
    known |= {"check"} | {t for s in course.specs for t in s.check_targets + [s.target]}
    skip = {w[0] for w in chosen.values() if w is not None}
    for number, spec in enumerate(course.specs):
        where = chosen.get(number)
        exercise = spec.exercise
        plan.exercises.append({
            "name": exercise.name, "target": spec.target, "key": reference_key(exercise.reference),
            "cell": where[1] if where else None, "cell_number": where[0] + 1 if where else 0,
            "helpers": helper_cells(cells, where[0], skip, known) if where else [], "check": spec.check,
            "differentiable": exercise.differentiable, "train_mode": exercise.train_mode,
            "watch": list(exercise.forbidden_calls), "seed": Rules.from_exercise(exercise).seed,
            "access": access_check_name(exercise.access_check)})
        plan.cases.append((spec.arrays, spec.described) if where else None)
    return plan


def _graded_cells(plan: Plan, cells: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The cells the sandbox runs, ``(index, source)``: each exercise's cell and the helper cells it needs."""
    graded: dict[int, str] = {}
    for exercise in plan.exercises:
        if exercise["cell"] is None:
            continue
        at = exercise["cell_number"] - 1
        graded[at] = exercise["cell"]
        for helper in exercise["helpers"]:
            where = max((i for i, src in cells if src == helper and i < at), default=None)
            if where is not None:
                graded[where] = helper
    return sorted(graded.items())


def _record(result: ExerciseResult, outcome: dict[str, Any]) -> None:
    """Put one exercise's outcome (judged as it arrived, when it ran) into its report line."""
    if outcome["status"] == "judged":
        status, message, hint, passed, line = outcome["verdict"]
    else:
        status, message, hint, passed, line = outcome["status"], outcome.get("message", ""), "", 0, ""
    result.status, result.message, result.hint, result.cases_passed, result.line = status, message, hint, passed, line
    result.score = result.max if status == "pass" else 0.0


def _grade_into(report: SubmissionReport, path: Path, config: GradeConfig, courses: dict[Path, CourseCopy],
                started: float) -> None:
    nb, cells, report.sha256, problem = read_submission(path, config.max_bytes)
    source_path = _find_source(nb, path, cells, config.source)
    if source_path is None:
        report.status = "unknown-notebook" if nb is not None else "unreadable"
        report.message = problem or ("could not tell which course notebook this submission is: it defines none "
                                     "of the exercises (grade it with --source NOTEBOOK)")
        return
    course = _course_for(source_path, config, courses)
    report.notebook, report.source, report.max_total = course.notebook_id, str(course.path), course.max_total
    report.exercises = [ExerciseResult(s.exercise.name, 0.0, float(s.exercise.points), "missing", problem)
                        for s in course.specs]
    if nb is None:
        report.status, report.message = "unreadable", problem
        return
    claimed = claimed_notebook(nb, path) if config.source is not None else None
    if claimed is not None and claimed != course.notebook_id:  # graded as the assignment, and said
        report.status = "wrong-notebook"
        report.message = (f"this file is notebook {claimed}, not {course.notebook_id} (the assignment): graded "
                          f"against {course.notebook_id}, whose exercises it does not define are missing")
    cells, dropped = within_budget(cells)
    if dropped:
        report.notes.append(f"{dropped} code cell(s) beyond {MAX_CODE // 1000} kB of code in all were not read")
    chosen = {n: _screen(s, cells, report.exercises[n], course, config) for n, s in enumerate(course.specs)}
    if not any(chosen.values()):
        return
    def verdict(number: int, header: dict[str, Any], blob: bytes) -> tuple:
        return judge(course.specs[number], header, blob, config.memory_mb)

    plan = _plan(course, cells, chosen)
    report.flags = tampering_flags(_graded_cells(plan, cells))
    outcomes, report.kernel_starts, notes = execute(course.library, plan, config.limits(),
                                                    started + config.total_timeout, verdict)
    report.notes += notes
    for number, outcome in outcomes.items():
        _record(report.exercises[number], outcome)
    if report.flags and config.flags_score_zero:
        for result in report.exercises:
            if result.score:
                result.score = 0.0
                result.message = f"flagged for review, scored 0 (--flags-score-zero); {result.message}"[:2000]
