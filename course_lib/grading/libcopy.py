"""The sandbox's copy of ``course_lib``: the graded exercises' references withheld, the checks absent.

:func:`build_library` copies the installed ``course_lib`` into a folder of the grader's (the sandbox mounts
it read-only and imports it instead of the real one), leaving out ``course_lib.checks`` (hidden cases,
mistakes) and the grader (only its ``codec`` and ``sandbox_main`` go in), and rewrites, with ``ast``, the
module of every graded exercise's reference: the function or class is replaced by a stand-in of the same
name that forwards to the learner's own implementation once the learner's cell has defined it (so course
code that calls it, and later exercises that import it, use the learner's work) and raises
``ReferenceWithheld`` before. The reference's code is not in the copy, so nothing in the sandbox reaches it.

Example:
    >>> from course_lib.basics import stable_softmax
    >>> stand_in_source("course_lib.basics.stable_softmax", is_class=False).splitlines()[0]
    'def stable_softmax(*args, **kwargs):'
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import course_lib

__all__ = ["build_library", "reference_key", "stand_in_source", "SUBMITTED_SOURCE"]

HERE = Path(__file__).resolve().parent

#: ``course_lib/_submitted.py`` of the copy: where the learner's implementations reach the stand-ins.
SUBMITTED_SOURCE = '''"""Grading sandbox only: the learner's implementations standing in for withheld references."""

from typing import Any


class ReferenceWithheld(RuntimeError):
    """The course's reference is not available while grading; the learner's own is used once defined."""


_IMPLS: dict = {}


def provide(key: str, impl: Any) -> None:
    """Use ``impl`` wherever course code calls the reference ``key`` (module.name)."""
    _IMPLS[key] = impl


def lookup(key: str) -> Any:
    """The learner's implementation standing in for ``key``; raises ReferenceWithheld when there is none."""
    impl = _IMPLS.get(key)
    if impl is None:
        raise ReferenceWithheld(
            f"the course's {key.rpartition('.')[2]} is withheld while grading; define your own (its exercise) "
            f"to use it")
    return impl
'''


def reference_key(reference: Any) -> str | None:
    """``module.name`` of a reference defined at a module's top level, else None."""
    module, qualname = getattr(reference, "__module__", ""), getattr(reference, "__qualname__", "")
    if not module or not qualname.isidentifier():
        return None
    return f"{module}.{qualname}"


def stand_in_source(key: str, is_class: bool, bases: str = "") -> str:
    """The source of the stand-in that replaces a withheld reference in the copy."""
    name = key.rpartition(".")[2]
    call = f"    from course_lib._submitted import lookup\n    return lookup({key!r})(*args, **kwargs)\n"
    if not is_class:
        return f"def {name}(*args, **kwargs):\n    \"\"\"Withheld while grading.\"\"\"\n{call}"
    body = "\n".join("    " + line if line else line for line in call.splitlines())
    return (f"class {name}({bases}):\n    \"\"\"Withheld while grading.\"\"\"\n\n"
            f"    def __new__(cls, *args, **kwargs):\n{body}\n")


def _strip_module(path: Path, keys: Iterable[str]) -> None:
    """Rewrite one module of the copy: each withheld reference replaced by its stand-in."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    wanted = {key.rpartition(".")[2]: key for key in keys}
    body = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in wanted:
            is_class = isinstance(node, ast.ClassDef)
            bases = ", ".join(ast.unparse(b) for b in node.bases) if is_class else ""
            body += ast.parse(stand_in_source(wanted[node.name], is_class, bases)).body
        else:
            body.append(node)
    tree.body = body
    path.write_text(ast.unparse(tree) + "\n", encoding="utf-8")


def _module_path(root: Path, module: str) -> Path | None:
    """The file of ``module`` in the copy rooted at ``root`` (a module or a package), if it is there."""
    parts = module.split(".")
    for path in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
        if path.is_file():
            return path
    return None


def _copy_course(target: Path) -> None:
    source = Path(course_lib.__file__).resolve().parent
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "checks", "grading"))
    (target / "grading").mkdir()
    (target / "grading" / "__init__.py").write_text('"""Only what the sandbox needs of the grader."""\n')
    for name in ("codec.py", "sandbox_main.py"):
        shutil.copyfile(HERE / name, target / "grading" / name)
    (target / "_submitted.py").write_text(SUBMITTED_SOURCE, encoding="utf-8")


def build_library(folder: Path, references: Iterable[Any], assignment: Path | None = None,
                  checks: str = "") -> list[str]:
    """Write the sandbox's ``course_lib`` (and an assignment's own modules from ``assignment``, its checks
    module ``checks`` left out) into ``folder``; return the keys of the references withheld."""
    _copy_course(folder / "course_lib")
    if assignment is not None:
        for path in sorted(assignment.glob("*.py")):
            if path.stem != checks:
                shutil.copyfile(path, folder / path.name)
    keys = [k for k in (reference_key(r) for r in references) if k]
    by_module: dict[str, list[str]] = {}
    for key in keys:
        by_module.setdefault(key.rpartition(".")[0], []).append(key)
    for module, module_keys in by_module.items():
        path = _module_path(folder, module)
        if path is not None:
            _strip_module(path, module_keys)
    return keys
