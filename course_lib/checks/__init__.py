"""The course's autograded checks: one module per notebook (``nb00_welcome``, ``nb01_attention``, ...).

Each module declares its exercises with :func:`course_lib.exercises.register`. Notebooks call::

    from course_lib.checks import check
    softmax_fn = check("stable_softmax", stable_softmax)
"""

from course_lib.exercises import check, run_check

__all__ = ["check", "run_check"]
