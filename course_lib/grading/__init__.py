"""The grading command: grade submitted notebooks outside the learner's kernel (see ``docs/grading.md``).

    course-grade submissions/*.ipynb --out grades/

Modules: :mod:`~course_lib.grading.runner` (one submission, from reading to scores),
:mod:`~course_lib.grading.executor` (nbclient, limits, restarts), :mod:`~course_lib.grading.policy` (the static
policy), :mod:`~course_lib.grading.harness` (plain arrays in and out of the kernel),
:mod:`~course_lib.grading.kernel` (the memory-limited kernel), :mod:`~course_lib.grading.report` (JSON,
Markdown, CSV) and :mod:`~course_lib.grading.cli` (the command).

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
