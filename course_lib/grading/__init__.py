"""The grading command: grade submitted notebooks outside the learner's kernel (see ``docs/grading.md``).

    course-grade submissions/*.ipynb --out grades/

Modules: :mod:`~course_lib.grading.runner` (one submission, from reading to scores),
:mod:`~course_lib.grading.submission` (reading a submission), :mod:`~course_lib.grading.course` (the course's
copy, hidden cases, reference outputs), :mod:`~course_lib.grading.libcopy` (course_lib with the references
withheld), :mod:`~course_lib.grading.sandbox` (bubblewrap), :mod:`~course_lib.grading.sandbox_main` (the
runner inside it), :mod:`~course_lib.grading.executor` (time limits, restarts),
:mod:`~course_lib.grading.codec` and :mod:`~course_lib.grading.results` (plain arrays in and out, read with
limits), :mod:`~course_lib.grading.judge` (the verdicts), :mod:`~course_lib.grading.policy` (an early, friendly
static check), :mod:`~course_lib.grading.report` (JSON, Markdown, CSV) and :mod:`~course_lib.grading.cli`.
For a class: :mod:`~course_lib.grading.gradebook` (SQLite, records never rewritten),
:mod:`~course_lib.grading.roster` (files to students), :mod:`~course_lib.grading.scoring` (partial credit, late
penalty), :mod:`~course_lib.grading.exports` (CSV, Canvas, Moodle) and :mod:`~course_lib.grading.handback`
(feedback for students).

Example:
    >>> from pathlib import Path
    >>> from course_lib.grading import GradeConfig, grade_submission
    >>> report = grade_submission(Path("alice.ipynb"), GradeConfig(timeout_total=120))  # doctest: +SKIP
    >>> report.total, [(r.exercise, r.status) for r in report.exercises]  # doctest: +SKIP
    (1.0, [('stable_softmax', 'pass')])
"""

from __future__ import annotations

from .cli import grade_many
from .policy import check_source
from .runner import ExerciseResult, GradeConfig, SubmissionReport, grade_submission

__all__ = ["GradeConfig", "SubmissionReport", "ExerciseResult", "grade_submission", "grade_many", "check_source"]
