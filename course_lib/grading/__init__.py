"""The grading command: grade submitted notebooks outside the learner's kernel (see ``docs/grading.md``).

    course-grade submissions/*.ipynb --out grades/

Rooms, named by their job:

- the front door: :mod:`~course_lib.grading.cli` (the command), :mod:`~course_lib.grading.runner` (one
  submission, from reading to scores), :mod:`~course_lib.grading.submission` (reading a submission),
  :mod:`~course_lib.grading.course` (the course's copy, hidden cases, reference outputs);
- :mod:`course_lib.grading.sandbox`: running untrusted code (bubblewrap, the runner inside it, the library copy
  with the answers withheld, limits, the codec of what crosses the wall);
- :mod:`course_lib.grading.judging`: deciding (the static policy, reading the sandbox's answers, the verdicts,
  points);
- :mod:`course_lib.grading.records`: the class's records (the report types and files, the gradebook, the
  roster, the exports, the feedback handed back).

Example:
    >>> from pathlib import Path
    >>> from course_lib.grading import GradeConfig, grade_submission
    >>> report = grade_submission(Path("alice.ipynb"), GradeConfig(timeout_total=120))  # doctest: +SKIP
    >>> report.total, [(r.exercise, r.status) for r in report.exercises]  # doctest: +SKIP
    (1.0, [('stable_softmax', 'pass')])
"""

from __future__ import annotations

from .cli import grade_many
from .judging.policy import check_source
from .records.report_types import ExerciseResult, SubmissionReport
from .runner import GradeConfig, grade_submission

__all__ = ["GradeConfig", "SubmissionReport", "ExerciseResult", "grade_submission", "grade_many", "check_source"]
