"""Parsing a submission's cells once, within a bound: the grader's own work stays small whatever a cell holds.

Example:
    >>> parse_cell("x = 1").body[0].__class__.__name__
    'Assign'
    >>> parse_cell("x = (") is None
    True
"""

from __future__ import annotations

import ast
import functools

__all__ = ["MAX_SOURCE", "parse_cell"]

#: Exercise cells longer than this are not parsed or run (a clear "too large" verdict instead).
MAX_SOURCE = 200_000


@functools.lru_cache(maxsize=16)
def parse_cell(source: str) -> ast.Module | None:
    """The cell's syntax tree, parsed once however many times the grader reads it (the trees are only read);
    None when it is over :data:`MAX_SOURCE` (never parsed: megabytes cost minutes and gigabytes) or is not
    Python. The cache holds a few cells: those of the submission being graded."""
    if len(source) > MAX_SOURCE:
        return None
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
