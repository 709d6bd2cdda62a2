"""Authoring helper: build a course notebook from Python, with the course's cell metadata.

Usage in a throwaway script (the committed .ipynb is the source of truth afterwards)::

    import sys; sys.path.insert(0, "tools")
    from nb_author import md, code, exercise, check, write
    cells = [md("# Title"), code("import torch"), exercise("stable_softmax", STUB), check("stable_softmax",
             "softmax_fn = check('stable_softmax', stable_softmax)")]
    write("notebooks/00_welcome.ipynb", cells, notebook="00_welcome", checks="course_lib.checks.nb00_welcome")
"""

from __future__ import annotations

import textwrap

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from course_lib.exercises.notebooks import check_metadata, exercise_metadata, notebook_metadata


def md(text: str) -> nbformat.NotebookNode:
    return new_markdown_cell(textwrap.dedent(text).strip("\n"))


def code(src: str) -> nbformat.NotebookNode:
    return new_code_cell(textwrap.dedent(src).strip("\n"))


def exercise(name: str, src: str) -> nbformat.NotebookNode:
    return new_code_cell(textwrap.dedent(src).strip("\n"), metadata=exercise_metadata(name))


def check(name: str, src: str) -> nbformat.NotebookNode:
    return new_code_cell(textwrap.dedent(src).strip("\n"), metadata=check_metadata(name))


def write(path: str, cells: list, notebook: str, checks: str) -> None:
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata["course"] = notebook_metadata(notebook, checks)
    nbformat.validate(nb)
    nbformat.write(nb, path)
