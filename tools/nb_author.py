"""Authoring helper (a shim): build a course notebook from Python, with the course's cell metadata.

The functions live in :mod:`course_lib.exercises.authoring` (installed with ``course_lib``); this file keeps
existing scripts working::

    import sys; sys.path.insert(0, "tools")
    from nb_author import md, code, exercise, check, write
    cells = [md("# Title"), code("import torch"), exercise("stable_softmax", STUB), check("stable_softmax",
             "softmax_fn = check('stable_softmax', stable_softmax)")]
    write("notebooks/00_welcome.ipynb", cells, notebook="00_welcome", checks="course_lib.checks.nb00_welcome")

New scripts: ``from course_lib.exercises.authoring import md, code, exercise_cell, check_cell, write_notebook``.
"""

from __future__ import annotations

from course_lib.exercises.authoring import check_cell as check
from course_lib.exercises.authoring import code, md
from course_lib.exercises.authoring import exercise_cell as exercise
from course_lib.exercises.authoring import write_notebook as write

__all__ = ["md", "code", "exercise", "check", "write"]
