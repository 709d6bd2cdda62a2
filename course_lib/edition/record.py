"""Record the calls a lesson makes to graded functions, so the class edition can ship their outputs as data.

A graded function with no PyTorch counterpart (notebook 04's ``padding_mask``) is still called by the lesson
after its exercise (``padding_mask_fn(tokens, PAD)``, the reference while the exercise is unsolved). To keep
the class edition's notebook running unsolved without shipping the answer, the builder runs the self-study
notebook once with :func:`install` in its kernel: every call to a graded function is recorded (a digest of
its arguments and the output, plain tensors), and the edition's stand-in serves exactly those calls
(:func:`course_lib.edition.stored.stored_call`), nothing else. A call whose arguments are one of the exercise's
public cases may be stored (notebook 03 adds positions to a table of exactly one public case's size; the
check stores that output anyway), but never all of them: then the public cases' calls are dropped, so that
no stand-in answers the public cases as a function would.

Example (what the builder runs in the kernel before the notebook's first cell)::

    from course_lib.edition import record
    record.install({"course_lib.models.masking.padding_mask": "padding_mask"}, "/tmp/calls.pt")
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from course_lib.exercises import get_exercise, to_plain

from .stored import call_digest

__all__ = ["install", "save", "public_digests", "as_tensors", "argument_values"]

_TABLE: dict[str, dict[str, Any]] = {}
_PATH: list[Path] = []


def as_tensors(value: Any) -> Any:
    """A plain output (``to_plain``) with arrays turned back into tensors, as stored files hold them."""
    plain = to_plain(value)

    def back(v: Any) -> Any:
        if isinstance(v, list):
            return [back(item) for item in v]
        if hasattr(v, "dtype") and hasattr(v, "shape"):
            return torch.from_numpy(v.copy())
        return v

    return back(plain)


def argument_values(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any],
                    method: bool = False) -> list[Any]:
    """The values of a call's arguments in ``fn``'s signature order, defaults applied (what is digested).

    For a ``method`` of an ``nn.Module``, ``self`` counts as its weights: ``dict(self.state_dict())``.
    """
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    values = list(bound.arguments.values())
    if method:
        values[0] = dict(values[0].state_dict())
    return values


def public_digests(exercise_name: str, fn: Callable[..., Any]) -> set[str]:
    """Digests of the exercise's public cases as calls of ``fn`` (never all of them are stored)."""
    found = set()
    for case in get_exercise(exercise_name).cases("public", seed=0):
        try:
            found.add(call_digest(argument_values(fn, tuple(case.args), dict(case.kwargs))))
        except TypeError:
            continue
    return found


_PUBLIC: dict[str, set[str]] = {}  # digests of each recorded part's public cases
_OUTER: set[Any] = set()  # code objects of every graded part: a call made inside one is not recorded


def _inside_a_graded_part() -> bool:
    """Whether the current call comes from inside a graded part (which the edition replaces as a whole, so
    the call never happens there)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code in _OUTER:
            return True
        frame = frame.f_back
    return False


def _recording(fn: Callable[..., Any], key: str, exercise: str, table: dict[str, dict[str, Any]],
               method: bool = False) -> Callable[..., Any]:
    _PUBLIC[key] = set() if method else public_digests(exercise, fn)

    @functools.wraps(fn)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        if _inside_a_graded_part():
            return out
        try:
            digest = call_digest(argument_values(fn, args, kwargs, method))
        except (TypeError, AttributeError):
            return out
        table.setdefault(key, {})[digest] = as_tensors(out)
        return out

    return recorded


def install(parts: Mapping[str, str], path: str | Path, checks: str = "course_lib.checks",
            outer: Sequence[str] = ()) -> None:
    """Record every call to the graded functions and methods ``parts`` (key -> exercise name); :func:`save`
    writes them.

    A function is replaced wherever ``course_lib``'s modules hold it (its own module and those that imported
    it by name), and so is the exercise's ``reference`` (what a failing check hands to the cells below); a
    method (``module.Class.forward``) is replaced in its class. ``checks``: the module that declares the
    exercises (an assignment's, beside its notebook).
    """
    import sys

    importlib.import_module("course_lib.checks")  # the course's exercises and ``checks``'s, looked up below
    importlib.import_module(checks)
    _PATH[:] = [Path(path)]
    for key in outer:
        obj = _lookup(key)
        code = getattr(inspect.unwrap(obj), "__code__", None) if obj is not None else None
        if code is not None:
            _OUTER.add(code)
    for key, exercise in parts.items():
        declared = get_exercise(exercise)
        if inspect.isclass(declared.reference) and key.endswith("." + declared.reference.__name__ + ".forward"):
            cls = declared.reference
            cls.forward = _recording(vars(cls)["forward"], key, exercise, _TABLE, method=True)
            continue
        module_name, _, name = key.rpartition(".")
        original = getattr(importlib.import_module(module_name), name)
        wrapper = _recording(original, key, exercise, _TABLE)
        for module in [m for n, m in list(sys.modules.items()) if n in (module_name, "course_lib")
                       or n.startswith("course_lib.")]:
            for attribute, value in list(vars(module).items()):
                if value is original:
                    setattr(module, attribute, wrapper)
        if declared.reference is original:
            declared.reference = wrapper


def _lookup(key: str) -> Any:
    """The object a key names (``module.name`` or ``module.Class.method``, the module being the longest
    importable prefix; a method as its class holds it), or None."""
    parts = key.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            obj = vars(obj).get(attribute) if isinstance(obj, type) else getattr(obj, attribute, None)
        return obj
    return None


def save() -> None:
    """Write the calls recorded so far to the path given to :func:`install`."""
    if not _PATH:
        return
    for key, calls in _TABLE.items():
        public = _PUBLIC.get(key, set())
        if public and public <= set(calls):  # every public case: none of them is kept
            for digest in public:
                calls.pop(digest)
    partial = _PATH[0].with_suffix(".partial")
    torch.save(_TABLE, partial)
    partial.replace(_PATH[0])  # whole or not at all, even if the kernel is stopped while saving
