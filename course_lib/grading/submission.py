"""Reading a submission as untrusted input: a capped read of a regular file, its code cells' sources only.

:func:`read_submission` refuses what is not a regular file (a FIFO would block the grader, a device never
ends, a symlink may point anywhere) without opening it for reading first, reads at most the size cap, accepts
a UTF-8 byte-order mark (some editors save one) and keeps nothing but the source of each code cell.
:func:`choose_cells` then picks, per exercise, the learner's cell and the helper cells it needs.

Example:
    >>> is_stub("def f(x):\\n    raise NotImplementedError  # YOUR CODE\\n",
    ...         "def f(x):\\n    raise NotImplementedError\\n")
    True
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from .course import defined_names
from .parsing import parse_cell

__all__ = ["read_submission", "is_stub", "locate", "helper_cells", "display_name"]


def display_name(path: Path | str) -> str:
    """A file name of any bytes as text that can always be written (undecodable bytes shown as ``\\xNN``)."""
    raw = os.fsencode(str(path))
    return raw.decode("utf-8", "backslashreplace")


def _open_regular(path: Path, max_bytes: int) -> tuple[bytes | None, str]:
    """At most ``max_bytes + 1`` bytes of a regular file; ``(None, why)`` for anything else."""
    try:
        info = os.lstat(path)
    except OSError as err:
        return None, f"cannot read the file ({err.strerror})"
    if not stat.S_ISREG(info.st_mode):
        return None, "not a regular file (a link, a pipe or a device): not read"
    if info.st_size > max_bytes:
        return None, (f"the file is {info.st_size / 2**20:.1f} MB, over the grader's limit of "
                      f"{max_bytes / 2**20:.0f} MB (outputs or data saved in the notebook?)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # swapped between lstat and open
                return None, "not a regular file: not read"
            return f.read(max_bytes + 1), ""
    except OSError as err:
        return None, f"cannot read the file ({err.strerror})"


def _code_cells(nb: dict[str, Any]) -> list[tuple[int, str]]:
    cells: list[tuple[int, str]] = []
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(source if all(type(s) is str for s in source) else [s for s in source if type(s) is str])
        cells.append((i, source if isinstance(source, str) else ""))
    return cells


def read_submission(path: Path, max_bytes: int) -> tuple[dict[str, Any] | None, list[tuple[int, str]], str, str]:
    """``(notebook dict, [(cell index, code source)], sha256, problem)``; problem is "" when readable."""
    raw, problem = _open_regular(Path(path), max_bytes)
    if raw is None:
        return None, [], "", problem
    if len(raw) > max_bytes:
        return None, [], "", f"the file is over the grader's limit of {max_bytes / 2**20:.0f} MB"
    digest = hashlib.sha256(raw).hexdigest()
    try:
        nb = json.loads(raw.decode("utf-8-sig"))  # a byte-order mark is accepted
    except (UnicodeDecodeError, ValueError) as err:
        return None, [], digest, f"not a notebook: the file is not valid JSON ({str(err)[:120]})"
    except RecursionError:
        return None, [], digest, "not a notebook: the JSON is nested too deeply"
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return None, [], digest, "not a notebook: no list of cells"
    return nb, _code_cells(nb), digest, ""


def _same_code(a: str, b: str) -> bool:
    return [line.rstrip() for line in a.strip().splitlines()] == [line.rstrip() for line in b.strip().splitlines()]


def is_stub(source: str, stub: str) -> bool:
    """True when the learner left the course's stub as it was (comments and blank lines aside)."""
    if _same_code(source, stub):
        return True
    tree, stub_tree = parse_cell(source), parse_cell(stub)
    return tree is not None and stub_tree is not None and ast.dump(tree) == ast.dump(stub_tree)


def locate(target: str, stub: str, place: int, cells: list[tuple[int, str]], check: str = ""
           ) -> tuple[int, str] | None:
    """The learner's cell for an exercise: the definition of ``target`` that the notebook's own check saw.

    When the submission holds the course's ``check`` cell, that is the last cell before it that defines
    ``target`` (run top to bottom, the notebook's check tests that one: a solution below an edited stub
    counts); an untouched stub there yields to an earlier solution. Without the check cell: a solution
    before a stub left in place, then the definition nearest the exercise's ``place`` in the course's copy.
    """
    found = [(i, src) for i, src in cells if target in defined_names(src)]
    if not found:
        return None
    at = next((i for i, src in cells if check and _same_code(src, check) and i > min(c[0] for c in found)), None)
    if at is not None:
        before = [c for c in found if c[0] < at]
        solved = [c for c in before if not is_stub(c[1], stub)]
        return (solved or before)[-1]
    return min(found, key=lambda c: (is_stub(c[1], stub), abs(c[0] - place), c[0]))


def _names(source: str) -> tuple[set[str], set[str]]:
    """``(names a cell reads but never binds, names it binds at top level)``: a conservative estimate."""
    tree = parse_cell(source)
    if tree is None:
        return set(), set()
    read, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return read - bound, set(defined_names(source)) | {
        (a.asname or a.name).split(".")[0] for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names}


def helper_cells(cells: list[tuple[int, str]], cell: int, skip: set[int], known: set[str], limit: int = 20
                 ) -> list[str]:
    """The learner's cells before ``cell`` that define a name the exercise cell needs and the notebook's
    setup does not give (a helper function, ``PAD``...), with the cells those need in turn, in order."""
    names = {i: _names(src) for i, src in cells if i < cell and i not in skip}
    wanted = _names(dict(cells).get(cell, ""))[0] - known
    seen, chosen = set(wanted), set()
    while wanted and len(chosen) < limit:
        name = wanted.pop()
        found = [i for i, (_, bound) in names.items() if name in bound]
        if found and found[-1] not in chosen:
            chosen.add(found[-1])
            more = names[found[-1]][0] - known - seen
            seen |= more
            wanted |= more
    sources = dict(cells)
    return [sources[i] for i in sorted(chosen)]
