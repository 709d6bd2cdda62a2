"""The sandbox's copy of ``course_lib``: the graded exercises' answers withheld, the checks absent.

:func:`build_library` copies the installed ``course_lib`` into a folder of the grader's (the sandbox mounts
it read-only and imports it instead of the real one) as the class edition does
(:func:`course_lib.edition.build.copy_package`: no ``course_lib.checks``, no grader, no edition builder; only
the grader's ``codec`` and ``sandbox_main`` go in), and removes the answers of the exercises graded in this
run with the class edition's stripping (:func:`course_lib.edition.build.rewrite_parts`, one implementation
of "remove the answers"): each exercise's reference is replaced by a stand-in of the same name that forwards
to the learner's own implementation once the learner's cell has defined it (so course code that calls it,
and later exercises that import it, use the learner's work) and raises ``ReferenceWithheld`` before; the
helpers that give the same answer away (:func:`course_lib.edition.answers.graded_parts`: the reference's
private helpers, and public ones such as notebook 03's sinusoidal frequencies) get the class edition's
stand-ins (stored outputs of the lessons' calls, or withheld). The reference of an exercise the submission
left as a stub stays, so that a later exercise can build on it, as in the notebook.

Example:
    >>> from course_lib.models.softmax import stable_softmax
    >>> stand_in_source("course_lib.models.softmax.stable_softmax", is_class=False).splitlines()[0]
    'def stable_softmax(*args, **kwargs):'
"""

from __future__ import annotations

import ast
import inspect
import shutil
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from course_lib.edition.answers import graded_parts, stand_in_kind
from course_lib.edition.build import copy_package, rewrite_parts, store_calls
from course_lib.edition.build import stand_in_source as edition_stand_in
from course_lib.exercises import registered_exercises

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


def _bases(cls: type) -> str:
    """The base classes of ``cls`` as its source spells them (``nn.Module``)."""
    node = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    return ", ".join(ast.unparse(b) for b in node.bases) if isinstance(node, ast.ClassDef) else ""


def _copy_course(target: Path) -> None:
    copy_package(target, checks=False)
    room = target / "grading" / "sandbox"
    room.mkdir(parents=True)
    (target / "grading" / "__init__.py").write_text('"""Only what the sandbox needs of the grader."""\n')
    (room / "__init__.py").write_text('"""The runner inside the sandbox and its codec."""\n')
    for name in ("codec.py", "sandbox_main.py"):
        shutil.copyfile(HERE / name, room / name)
    (target / "_submitted.py").write_text(SUBMITTED_SOURCE, encoding="utf-8")


def build_library(folder: Path, references: Iterable[Any], assignment: Path | None = None,
                  checks: str = "", exercises: Iterable[Any] | None = None) -> list[str]:
    """Write the sandbox's ``course_lib`` (and an assignment's own modules from ``assignment``, its checks
    module ``checks`` left out) into ``folder``; return the keys of the references withheld.

    ``exercises``: the exercises those references belong to (the grader passes its course copy's, so that no
    other notebook's checks module is imported); by default looked up among all registered exercises."""
    _copy_course(folder / "course_lib")
    if assignment is not None:
        for path in sorted(assignment.glob("*.py")):
            if path.stem != checks:
                shutil.copyfile(path, folder / path.name)
    references = list(references)
    in_copy = [r for r in references if _module_file(folder, getattr(r, "__module__", "")) is not None]
    known = registered_exercises() if exercises is None else list(exercises)
    exercises = [ex for ex in known if any(ex.reference is r for r in in_copy)]
    helpers = [p for p in graded_parts(exercises)
               if p.role == "helper" and _module_file(folder, p.key.rpartition(".")[0]) is not None]
    rewrite_parts(folder, {p.key: edition_stand_in(p, _helper_kind(p.key)) for p in helpers}, keep_decorators=True)
    store_calls(helpers, folder / "course_lib" / "edition" / "data", {})
    keys = [k for k in (reference_key(r) for r in in_copy) if k]
    rewrite_parts(folder, {reference_key(r): stand_in_source(reference_key(r), inspect.isclass(r),
                                                             _bases(r) if inspect.isclass(r) else "")
                           for r in in_copy if reference_key(r)}, keep_decorators=False)
    return keys


def _helper_kind(key: str) -> str:
    """The stand-in of a graded helper in the sandbox: the class edition's (stored outputs or withheld), except
    that a helper the edition computes through PyTorch (notebook 03's frequencies, notebook 13's tiled attention) is
    withheld here: absence, not only the refusal of that route by the exercise's ``forbidden_ops``."""
    kind = stand_in_kind(key)
    return "withheld" if kind == "backed" else kind


def _module_file(root: Path, module: str) -> Path | None:
    """The file of ``module`` in the copy rooted at ``root`` (a module or a package), if it is there."""
    parts = module.split(".")
    for path in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
        if module and path.is_file():
            return path
    return None
