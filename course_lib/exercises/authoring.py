"""Writing an assignment: build its notebook from Python, and test it (the instructor's guide, section 1).

Notebook authoring (the course's cell metadata set for you, so that the checks, ``course-notebooks`` and
``course-grade`` find the exercises): :func:`md`, :func:`code`, :func:`exercise_cell`, :func:`check_cell`,
:func:`write_notebook`. Testing: :func:`load_notebook` (read it and import its checks module),
:func:`run_smoke` (execute it with the training loops shortened), :func:`check_statuses` (what each check
printed), :func:`agrees` (an implementation against the reference on the public or hidden cases).

``tools/nb_author.py`` (``md, code, exercise, check, write``) is a thin shim over this module.

Example:
    >>> cells = [md("# Masked mean"), code("import torch\\nfrom course_lib.checks import check"),
    ...          exercise_cell("masked_mean", "def masked_mean(x, mask):\\n    raise NotImplementedError()"),
    ...          check_cell("masked_mean", "mean_fn = check('masked_mean', masked_mean)")]
    >>> [c.metadata.get("course", {}).get("role") for c in cells]
    [None, None, 'exercise', 'check']
    >>> write_notebook("hw1.ipynb", cells, notebook="hw1", checks="hw1_checks")  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import json
import os
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from .core import Exercise
from .execute import check_statuses, execute_notebook
from .notebooks import check_metadata, exercise_metadata, notebook_metadata
from .verdict import check_exercise

__all__ = ["md", "code", "exercise_cell", "check_cell", "write_notebook", "kernel_metadata", "load_notebook",
           "run_smoke", "check_statuses", "agrees"]


def _clean(source: str) -> str:
    return textwrap.dedent(source).strip("\n")


def md(text: str) -> nbformat.NotebookNode:
    """A Markdown cell (indentation common to every line removed)."""
    return new_markdown_cell(_clean(text))


def code(source: str) -> nbformat.NotebookNode:
    """A plain code cell (setup, experiments, figures)."""
    return new_code_cell(_clean(source))


def exercise_cell(name: str, stub: str) -> nbformat.NotebookNode:
    """The exercise cell of exercise ``name``: its stub (signature, docstring, ``raise NotImplementedError()``)."""
    return new_code_cell(_clean(stub), metadata=exercise_metadata(name))


def check_cell(name: str, source: str) -> nbformat.NotebookNode:
    """The check cell after exercise ``name``, e.g. ``mean_fn = check("masked_mean", masked_mean)``."""
    return new_code_cell(_clean(source), metadata=check_metadata(name))


def kernel_metadata() -> dict[str, dict[str, Any]]:
    """The ``kernelspec`` and ``language_info`` JupyterLab writes into a notebook run in this environment.

    JupyterLab sets both from the kernel it starts (the ``python3`` kernelspec's name, display name and language;
    the kernel's ``language_info`` reply, which holds the Python version) and marks the notebook modified when
    they differ from the stored ones: notebooks stored with these open unmodified (``tools/notebook_metadata.py``
    writes them; checked in a real JupyterLab 4.6 with ipykernel 7.4).
    """
    from ipykernel.ipkernel import IPythonKernel
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    return {"kernelspec": {"display_name": spec.display_name, "language": spec.language, "name": "python3"},
            "language_info": json.loads(json.dumps(IPythonKernel.language_info))}


def write_notebook(path: str | Path, cells: list[nbformat.NotebookNode], notebook: str, checks: str) -> None:
    """Write a valid notebook of ``cells`` whose metadata names its id and the module declaring its exercises."""
    nb = new_notebook(cells=cells)
    nb.metadata.update(kernel_metadata())
    nb.metadata["course"] = notebook_metadata(notebook, checks)
    nbformat.validate(nb)
    nbformat.write(nb, str(path))


def load_notebook(path: str | Path) -> nbformat.NotebookNode:
    """Read a notebook and import the module that declares its exercises (its metadata's ``checks``)."""
    nb = nbformat.read(str(path), as_version=4)
    module = nb.metadata.get("course", {}).get("checks")
    if module:
        importlib.import_module(module)
    return nb


def run_smoke(nb: nbformat.NotebookNode, cwd: str | Path, allow_errors: bool = False) -> nbformat.NotebookNode:
    """Execute ``nb`` from folder ``cwd`` with ``COURSE_SMOKE=1`` (training loops shortened), in place.

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


def agrees(ex: Exercise, impl: Callable[..., Any], which: str, seed: int) -> bool:
    """True when the check passes ``impl`` on every case of ``which`` (public, or hidden drawn with ``seed``):
    the notebook check's verdict (:func:`course_lib.exercises.verdict.check_exercise`), on the cases asked for."""
    return check_exercise(ex, impl, which, seed).passed
