"""Helpers for the notebook tests: load a course notebook, execute it in smoke mode."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import nbformat

from course_lib.exercises import output_problems, run_case, to_plain
from course_lib.exercises.execute import check_statuses, execute_notebook

__all__ = ["load", "run_smoke", "check_statuses", "agrees"]


def load(path: Path) -> nbformat.NotebookNode:
    """Read a notebook and import the module that declares its exercises."""
    nb = nbformat.read(path, as_version=4)
    module = nb.metadata.get("course", {}).get("checks")
    if module:
        importlib.import_module(module)
    return nb


def run_smoke(nb: nbformat.NotebookNode, cwd: Path, allow_errors: bool = False) -> nbformat.NotebookNode:
    """Execute ``nb`` from folder ``cwd`` with COURSE_SMOKE=1 (training loops shortened).

    With ``allow_errors`` every cell runs even after one fails (the errors stay in the outputs).
    """
    saved = {k: os.environ.get(k) for k in ("COURSE_SMOKE", "MPLBACKEND")}
    os.environ["COURSE_SMOKE"] = "1"
    os.environ["MPLBACKEND"] = "Agg"
    try:
        return execute_notebook(nb, cwd=cwd, timeout=900, allow_errors=allow_errors)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def agrees(ex, impl, which: str, seed: int) -> bool:
    """True when ``impl`` matches exercise ``ex``'s reference on every case of ``which`` (public or hidden)."""
    for case in ex.cases(which, seed=seed):
        expected = to_plain(run_case(ex.reference, case, grad=ex.grad, seed=ex.seed))
        try:
            got = to_plain(run_case(impl, case, grad=ex.grad, differentiable=ex.differentiable,
                                    forbidden=ex.forbidden_calls, seed=ex.seed))
        except Exception:  # noqa: BLE001 - an implementation that raises does not agree
            return False
        if output_problems(ex, case, expected, got):
            return False
    return True
