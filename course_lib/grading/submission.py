"""Reading a submission as untrusted input: a capped read of a regular file, its code cells' sources only.

:func:`read_submission` refuses what is not a regular file (a FIFO would block the grader, a device never
ends, a symlink may point anywhere) without opening it for reading first, accepts a UTF-8 byte-order mark
(some editors save one) and keeps nothing but the source of each code cell.

Two limits, so that an honest notebook saved with its outputs is never refused: the grader's limit
(``--max-mb``, :class:`~course_lib.grading.runner.GradeConfig` ``max_bytes``) is on what is *executed*, the
total source of the code cells (UTF-8 bytes); outputs, images and data saved in the notebook do not count.
The file itself has a much larger hard cap, :data:`MAX_FILE_BYTES` (256 MB), so that parsing stays bounded:
the file is read once and parsed with ``json.loads`` (about three times the file's size in memory at the
peak), and each output is dropped as soon as its cell is parsed.
:func:`locate` and :func:`helper_cells` then pick, per exercise, the learner's cell and the helper cells it
needs.

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
from .judging.parsing import parse_cell

__all__ = ["read_submission", "is_stub", "locate", "helper_cells", "display_name", "file_sha256", "MAX_FILE_BYTES"]

#: Hard cap on a submission file (saved outputs included): a larger file is not read.
MAX_FILE_BYTES = 256 << 20


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
                      f"{max_bytes / 2**20:.0f} MB for a whole notebook file, outputs included")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # swapped between lstat and open
                return None, "not a regular file: not read"
            return f.read(max_bytes + 1), ""
    except OSError as err:
        return None, f"cannot read the file ({err.strerror})"


def file_sha256(path: Path, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The SHA-256 of a submission file, read in blocks ("" for what :func:`read_submission` would not read).

    The gradebook uses it to tell a new or changed submission from one it has graded (the same digest as the
    reports' ``sha256``)."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
            return ""
        digest = hashlib.sha256()
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
        return digest.hexdigest()
    except OSError:
        return ""


def _drop_outputs(obj: dict[str, Any]) -> dict[str, Any]:
    """``json.loads`` hook: a cell's outputs are never needed, so they are released as soon as it is parsed."""
    if "outputs" in obj and "cell_type" in obj:
        obj["outputs"] = []
    return obj


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


def read_submission(path: Path, max_bytes: int, max_file_bytes: int = MAX_FILE_BYTES
                    ) -> tuple[dict[str, Any] | None, list[tuple[int, str]], str, str]:
    """``(notebook dict, [(cell index, code source)], sha256, problem)``; problem is "" when readable.

    ``max_bytes`` caps the total source of the code cells (what would be executed), ``max_file_bytes`` the
    file (outputs included)."""
    raw, problem = _open_regular(Path(path), max_file_bytes)
    if raw is None:
        return None, [], "", problem
    if len(raw) > max_file_bytes:
        return None, [], "", f"the file is over the grader's limit of {max_file_bytes / 2**20:.0f} MB"
    digest = hashlib.sha256(raw).hexdigest()
    try:
        nb = json.loads(raw.decode("utf-8-sig"), object_hook=_drop_outputs)  # a byte-order mark is accepted
    except (UnicodeDecodeError, ValueError) as err:
        return None, [], digest, f"not a notebook: the file is not valid JSON ({str(err)[:120]})"
    except RecursionError:
        return None, [], digest, "not a notebook: the JSON is nested too deeply"
    finally:
        del raw
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return None, [], digest, "not a notebook: no list of cells"
    cells = _code_cells(nb)
    code_bytes = sum(len(src.encode("utf-8", "replace")) for _, src in cells)
    if code_bytes > max_bytes:
        return None, [], digest, (f"the code cells hold {code_bytes / 2**20:.1f} MB of source, over the grader's "
                                  f"limit of {max_bytes / 2**20:g} MB on executed code (saved outputs do not count)")
    return nb, cells, digest, ""


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
