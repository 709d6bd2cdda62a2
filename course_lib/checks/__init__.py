"""The course's autograded checks: one module per notebook (``nb00_welcome``, ``nb01_attention``, ...).

Each module declares its exercises with :func:`course_lib.exercises.register`. Notebooks call::

    from course_lib.checks import check
    softmax_fn = check("stable_softmax")   # checks the function `stable_softmax` defined above
"""

from course_lib.exercises import add_exercise_package, check, run_check

add_exercise_package(__name__)  # check("name") imports only the module here that declares "name"

__all__ = ["check", "run_check"]
