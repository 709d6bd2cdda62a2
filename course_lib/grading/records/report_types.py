"""What the grader says about a submission: one exercise's line and the whole report.

Plain data, written by :mod:`course_lib.grading.runner` and read by the report, the gradebook and the exports
(which therefore never import the orchestrator).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ExerciseResult", "SubmissionReport", "STATUSES"]

#: Every status an exercise can get in a report.
STATUSES = ("pass", "fail", "error", "timeout", "missing", "not-implemented", "forbidden")

@dataclass
class ExerciseResult:
    """One exercise's line in a report."""

    exercise: str
    score: float
    max: float
    status: str
    message: str = ""
    hint: str = ""
    cases_passed: int = 0
    cases_total: int = 0
    cell: int | None = None  # 1-based index of the submission's cell graded for this exercise
    line: str = ""


@dataclass
class SubmissionReport:
    """Everything the grader says about one submission (written as JSON, Markdown and CSV rows)."""

    submission: str
    sha256: str = ""
    notebook: str = ""
    source: str = ""
    status: str = "graded"  # graded, wrong-notebook, unreadable, unknown-notebook, internal-error
    message: str = ""
    total: float = 0.0
    max_total: float = 0.0
    exercises: list[ExerciseResult] = field(default_factory=list)
    elapsed_s: float = 0.0
    kernel_starts: int = 0  # sandboxes started (more than one: an exercise had to be isolated)
    seed: int | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    sandbox: bool = True
    versions: dict[str, str] = field(default_factory=dict)
    graded_at: str = ""
    notes: list[str] = field(default_factory=list)  # what the sandbox sent beyond its answers (ignored)
    # lines of the graded cells that name the grader's internals: {"reason", "lines"} (judging/flags.py)
    flags: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
