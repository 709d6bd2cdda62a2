"""Helpers for the notebook tests: load a course notebook, execute it in smoke mode."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import nbformat

from course_lib.exercises.execute import check_statuses, execute_notebook

__all__ = ["load", "run_smoke", "check_statuses"]


def load(path: Path) -> nbformat.NotebookNode:
    """Read a notebook and import the module that declares its exercises."""
    nb = nbformat.read(path, as_version=4)
    module = nb.metadata.get("course", {}).get("checks")
    if module:
        importlib.import_module(module)
    return nb


def run_smoke(nb: nbformat.NotebookNode, cwd: Path) -> nbformat.NotebookNode:
    """Execute ``nb`` from folder ``cwd`` with COURSE_SMOKE=1 (training loops shortened)."""
    saved = {k: os.environ.get(k) for k in ("COURSE_SMOKE", "MPLBACKEND")}
    os.environ["COURSE_SMOKE"] = "1"
    os.environ["MPLBACKEND"] = "Agg"
    try:
        return execute_notebook(nb, cwd=cwd, timeout=900)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
