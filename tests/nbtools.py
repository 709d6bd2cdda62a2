"""Helpers for the notebook tests (a shim): they are :mod:`course_lib.exercises.authoring`'s public API."""

from __future__ import annotations

from course_lib.exercises.authoring import agrees, check_statuses, run_smoke
from course_lib.exercises.authoring import load_notebook as load

__all__ = ["load", "run_smoke", "check_statuses", "agrees"]
