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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cli import grade_many
    from .judging.policy import check_source
    from .records.report_types import ExerciseResult, SubmissionReport
    from .runner import GradeConfig, grade_submission

__all__ = ["GradeConfig", "SubmissionReport", "ExerciseResult", "grade_submission", "grade_many", "check_source"]

#: Where each public name lives. They are imported on first use (PEP 562), not with the package: the runner in
#: the sandbox imports ``course_lib.grading.sandbox.codec``, and importing the front door with it (nbformat, whose
#: jsonschema builds a URI grammar at import) cost every sandbox about 3 s of its start.
_HOMES = {"grade_many": ".cli", "check_source": ".judging.policy", "ExerciseResult": ".records.report_types",
          "SubmissionReport": ".records.report_types", "GradeConfig": ".runner", "grade_submission": ".runner"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name], __name__), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
