"""The sandbox's copy of ``course_lib``: the class edition's library of the graded week, the checks absent.

:func:`build_library` writes, for a course notebook ``NN``, exactly the library the week-``NN`` class edition
ships (:func:`course_lib.edition.build.strip_library` over :func:`course_lib.edition.build.withheld_for`: one
builder, one rule): every graded part of notebook ``NN`` and of every later notebook replaced by the edition's
stand-in (PyTorch's own module, which the exercise's grader refuses as an answer, stored outputs of the
lessons' calls, or "withheld"), the earlier notebooks' references shipped as published. The grader's copy
differs only in what it adds and leaves out: no ``course_lib.checks`` and no stored cases (the grader brings
its own), and the runner's two modules (``course_lib.grading.sandbox.codec`` and ``.sandbox_main``).
Each withheld reference is marked (:mod:`course_lib.edition.provided`) so that the learner's own
implementation stands in wherever course code calls it, once the learner's cell has defined it.

An instructor's assignment (``--source``, its own modules beside it): the course's library is the whole course
(its public API, nothing withheld) and the assignment's modules get the same stand-ins as its student
folder (:func:`course_lib.edition.build.build_student_folder`), its checks module left out.

**Restored** exercises: a sandbox that grades an exercise after an earlier one of the same notebook did not pass
(a stub, a wrong answer, an error) gets that earlier exercise's reference back, not its stand-in, because the
notebook's check binds the reference in that case and the later exercise builds on it (the key/value-cache
assignment's decoder on the cached attention). The earlier exercise is already judged, so its answer gains
nothing there; that a restored reference computes no *later* exercise's result is the behavioural search's
(``tests/grading/test_withheld_library.py``). Only exercises before the one being graded are ever restored
(:mod:`course_lib.grading.sandbox.executor`).

Example:
    >>> from course_lib.edition.build import withheld_for
    >>> sorted({e.notebook for e in withheld_for(14)})
    ['14_todays_models', '15_inference_at_scale']
"""

from __future__ import annotations

import shutil
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from course_lib.edition.answers import graded_parts, stand_in_kind
from course_lib.edition.build import mark_references, rewrite_parts, stand_in_source, strip_library, withheld_for
from course_lib.exercises import Exercise

__all__ = ["build_library", "reference_key"]

HERE = Path(__file__).resolve().parent

#: What of the grader goes into the copy: the runner and its codec, nothing that judges.
RUNNER = ("codec.py", "sandbox_main.py")


def reference_key(reference: Any) -> str | None:
    """``module.name`` of a reference defined at a module's top level, else None."""
    module, qualname = getattr(reference, "__module__", ""), getattr(reference, "__qualname__", "")
    if not module or not qualname.isidentifier():
        return None
    return f"{module}.{qualname}"


def build_library(folder: Path, number: int | None, assignment: Path | None = None, checks: str = "",
                  exercises: Sequence[Exercise] = (), restored: Collection[str] = ()) -> list[str]:
    """Write the sandbox's ``course_lib`` into ``folder``: the class edition's library of course notebook
    ``number``, or (``number`` None) the whole course, nothing of it withheld, with an assignment's own modules
    from ``assignment``
    (its checks module ``checks`` left out, the graded parts of its ``exercises`` withheld); the exercises named
    in ``restored`` keep their references (see the module docstring); return the keys of the graded parts
    withheld."""
    # An instructor's own assignment is built on the course's public API (assignments/kv_cache calls notebook 01's
    # attention): it gets the whole course, only its own graded parts withheld.
    withheld = [] if number is None else [e for e in withheld_for(number) if e.name not in restored]
    manifest = strip_library(folder, withheld, checks=False)
    room = folder / "course_lib" / "grading" / "sandbox"
    room.mkdir(parents=True)
    (room.parent / "__init__.py").write_text('"""Only what the sandbox needs of the grader."""\n')
    (room / "__init__.py").write_text('"""The runner inside the sandbox and its codec."""\n')
    for name in RUNNER:
        shutil.copyfile(HERE / name, room / name)
    keys = list(manifest["parts"])
    if assignment is not None:
        keys += _strip_assignment(folder, assignment, checks, [e for e in exercises if e.name not in restored])
    return keys


def _strip_assignment(folder: Path, assignment: Path, checks: str, exercises: list[Exercise]) -> list[str]:
    """The assignment's modules into ``folder``, with the student folder's stand-ins for its graded parts."""
    for path in sorted(assignment.glob("*.py")):
        if path.stem != checks:
            shutil.copyfile(path, folder / path.name)
    parts = [p for p in graded_parts(exercises) if (folder / f"{p.key.split('.')[0]}.py").is_file()]
    rewrite_parts(folder, {p.key: stand_in_source(p, stand_in_kind(p.key)) for p in parts}, keep_decorators=True)
    mark_references(folder, exercises)
    return [p.key for p in parts]
