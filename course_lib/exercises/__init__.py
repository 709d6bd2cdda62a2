"""The exercise mechanism: declare an exercise once; check it in a notebook, test it, grade it.

See :mod:`course_lib.exercises.core` (declarations), :mod:`course_lib.exercises.verdict` (every verdict),
:mod:`course_lib.exercises.feedback` (the in-notebook check) and :mod:`course_lib.exercises.notebooks` (cell
metadata, solved and student versions).
"""

from .compare import compare_outputs, to_plain
from .core import (
    Case,
    Exercise,
    ExerciseDefinitionError,
    InputModifiedError,
    Mistake,
    NotDifferentiableError,
    add_exercise_package,
    get_exercise,
    register,
    registered_exercises,
    run_case,
    validate_exercise,
)
from .feedback import check, run_check
from .verdict import CheckResult, output_problems

__all__ = [
    "Case",
    "Exercise",
    "ExerciseDefinitionError",
    "InputModifiedError",
    "NotDifferentiableError",
    "Mistake",
    "get_exercise",
    "register",
    "registered_exercises",
    "run_case",
    "validate_exercise",
    "add_exercise_package",
    "CheckResult",
    "check",
    "compare_outputs",
    "output_problems",
    "run_check",
    "to_plain",
]
