"""Where the answers are: every part of a library that is, or computes, a graded exercise's result.

For each registered exercise (:func:`course_lib.exercises.registered_exercises`), its **graded parts**:

- the reference itself: a function (``course_lib.models.softmax.stable_softmax``), or, for a class exercise, the
  method the learner writes (``course_lib.models.attention.MultiHeadAttention.forward``; the constructor is given to
  the learner, so it stays);
- the private helpers that part calls in its own module (``_frequencies64``), except input checks (a name
  passed to ``validated_by``, or one starting with ``_check`` or ``_require``): they are pieces of the answer;
- the public helpers :data:`ALSO_ANSWERS` names: functions that are not the answer but give it away in a
  line or two (the sinusoidal frequencies give notebook 03's table as ``sin``/``cos`` of one product).

Notebook 14's rotary embeddings need those frequencies for any head size and base (its exercise builds on
``rope_angles``), which a few stored calls cannot serve: the class edition computes them through
``torch.logspace`` (:func:`course_lib.edition.backed.sinusoidal_frequencies`), a route the grader of notebook 03
refuses (``forbidden_ops``), and the grader's sandbox copy withholds them. Likewise notebook 14's tiled
``online_softmax_attention`` (a softmax when its values are the identity) runs PyTorch's fused attention,
which the grader of ``online_softmax`` refuses.

:func:`graded_parts` lists them (a key is ``module.name`` or ``module.Class.method``), and
:func:`stand_in_kind` says what the class edition puts in each one's place: PyTorch's own module
(:data:`course_lib.edition.backed.BACKED`), stored outputs for the calls the lessons make
(:data:`STORED_CALLS`), or nothing that computes (a stand-in that says the answer is withheld).

Example:
    >>> from course_lib.exercises import get_exercise
    >>> [p.key for p in graded_parts([get_exercise("stable_softmax")])]
    ['course_lib.models.softmax.stable_softmax']
"""

from __future__ import annotations

import ast
import inspect
import pkgutil
import sys
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from course_lib.exercises import Exercise

from .backed import BACKED

__all__ = ["GradedPart", "graded_parts", "stand_in_kind", "ALSO_ANSWERS", "STORED_CALLS", "CLASS_METHODS"]

#: The methods a learner writes in a class exercise (the stub's ``raise NotImplementedError()``).
CLASS_METHODS = ("forward",)

#: Public helpers that give a graded answer away, by the key of the exercise's reference.
ALSO_ANSWERS: dict[str, tuple[str, ...]] = {
    "course_lib.models.positional.sinusoidal_table": (
        "course_lib.models.positional.sinusoidal_frequencies", "course_lib.models.positional.offset_matrix"),
    # found by the behavioural search (tests/grading/test_withheld_library.py): the causal rule over positions (also the
    # cache's mask), and the key-padding conversion applied to ``tokens == pad_id``
    "course_lib.models.masking.causal_mask": ("course_lib.models.masking.sliding_window_mask",),
    "course_lib.models.masking.padding_mask": ("course_lib.models.masking.from_key_padding_mask",),
    # the tiled attention runs the online softmax on its scores: with keys = the identity it is the answer
    "course_lib.models.flash_attention.online_softmax": ("course_lib.models.flash_attention.online_softmax_attention",),
    # train_bpe takes notebook 10's merge step with these three: together they are the answer; train_bpe itself
    # repeats that step and ByteBPE's encoding merges with merge_pair (the class edition does both with tokenizers
    # instead: backed.train_bpe, backed.byte_bpe_merge_piece)
    "course_lib.data.bpe.bpe_merge_step": (
        "course_lib.data.bpe.merge_pair", "course_lib.data.bpe._pair_counts", "course_lib.data.bpe._best_pair",
        "course_lib.data.bpe.train_bpe", "course_lib.data.bpe.ByteBPE._merge_piece"),
}

#: Calls the lessons make to a graded part that has no PyTorch counterpart: the class edition ships their
#: outputs (computed at build time with the reference) and serves exactly these calls, nothing else.
#: Each entry is ``(args, kwargs)``; notebook 03 draws and compares these tables.
STORED_CALLS: dict[str, tuple[tuple[tuple[Any, ...], dict[str, Any]], ...]] = {
    "course_lib.models.positional.sinusoidal_table": tuple(
        ((max_len, d_model), {}) for max_len, d_model in (
            (3, 4), (100, 128), (200, 128), (1000, 64), (200, 64), (128, 128), (100, 512),
            (50, 32), (5000, 32), (64, 32))),
    "course_lib.models.positional.offset_matrix": (((7, 64), {}), ((-3, 4), {})),  # notebooks 03 and 14
}


@dataclass(frozen=True)
class GradedPart:
    """One part of a library that is (or gives away) a graded answer.

    Attributes:
        key: ``module.name`` or ``module.Class.method``.
        exercise: the exercise it answers.
        role: ``"reference"`` (the learner's function or method itself) or ``"helper"``.
        obj: the live function (for a method, the function in the class's ``__dict__``).
    """

    key: str
    exercise: str
    role: str
    obj: Any


def _key(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def _validators(module: Any) -> set[str]:
    """Names of the input checks in ``module``: arguments of ``validated_by(...)`` and ``_check``/``_require``
    functions (they raise on bad input and compute nothing)."""
    names = {n for n in vars(module) if n.startswith(("_check", "_require"))}
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError):
        return names
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "validated_by":
            names |= {a.id for a in node.args if isinstance(a, ast.Name)}
    return names


def _private_helpers(fn: Any, seen: set[str]) -> list[Any]:
    """Private module-level functions of ``fn``'s module that ``fn`` calls, recursively (input checks left out)."""
    fn = inspect.unwrap(fn)
    module = sys.modules.get(fn.__module__)
    if module is None:
        return []
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return []
    skip = _validators(module)
    found = []
    for node in ast.walk(tree):
        name = node.id if isinstance(node, ast.Name) else None
        helper = getattr(module, name, None) if name and name.startswith("_") and name not in skip else None
        if inspect.isfunction(helper) and helper.__module__ == module.__name__ and _key(helper) not in seen:
            seen.add(_key(helper))
            found += [helper, *_private_helpers(helper, seen)]
    return found


def _reference_parts(exercise: Exercise) -> list[Any]:
    ref = exercise.reference
    if not inspect.isclass(ref):
        return [ref]
    return [vars(ref)[m] for m in CLASS_METHODS if m in vars(ref)]


def graded_parts(exercises: Iterable[Exercise]) -> list[GradedPart]:
    """Every graded part of ``exercises`` (references, their private helpers, :data:`ALSO_ANSWERS`), each once."""
    parts: dict[str, GradedPart] = {}
    seen: set[str] = set()
    for exercise in exercises:
        for ref in _reference_parts(exercise):
            key = _key(ref)
            parts.setdefault(key, GradedPart(key, exercise.name, "reference", ref))
            seen.add(key)
        for ref in _reference_parts(exercise):
            for helper in _private_helpers(ref, seen):
                parts.setdefault(_key(helper), GradedPart(_key(helper), exercise.name, "helper", helper))
        for extra in ALSO_ANSWERS.get(_key(exercise.reference), ()):
            obj = pkgutil.resolve_name(extra)  # module.name or module.Class.method
            parts.setdefault(extra, GradedPart(extra, exercise.name, "helper", obj))
            for helper in _private_helpers(obj, seen):
                parts.setdefault(_key(helper), GradedPart(_key(helper), exercise.name, "helper", helper))
    return list(parts.values())


def stand_in_kind(key: str, recorded: Iterable[str] = ()) -> str:
    """What the class edition puts in place of a graded part: ``"backed"``, ``"stored"`` or ``"withheld"``.

    ``recorded``: keys whose calls were recorded from the lessons (:mod:`course_lib.edition.record`).
    """
    if key in BACKED:
        return "backed"
    if key in STORED_CALLS or key in set(recorded):
        return "stored"
    return "withheld"


def keys_by_module(keys: Sequence[str]) -> dict[str, list[str]]:
    """Keys grouped by the module that defines them (``module`` -> ``["name", "Class.method"]``)."""
    grouped: dict[str, list[str]] = {}
    for key in keys:
        obj_module = _module_of(key)
        grouped.setdefault(obj_module, []).append(key[len(obj_module) + 1:])
    return grouped


def _module_of(key: str) -> str:
    parts = key.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:cut])
        if name in sys.modules:
            return name
    raise KeyError(f"no imported module defines {key!r}")
