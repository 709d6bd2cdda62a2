"""Record the calls a lesson makes to graded functions, so the class edition can ship their outputs as data.

A graded function with no PyTorch counterpart (notebook 04's ``padding_mask``) is still called by the lesson
after its exercise (``padding_mask_fn(tokens, PAD)``, the reference while the exercise is unsolved). To keep
the class edition's notebook running unsolved without shipping the answer, the builder runs the self-study
notebook once with :func:`install` in its kernel: every call to a graded function is recorded (a digest of
its arguments and the output, plain tensors, in the order the lesson made them), and the edition's stand-in
serves those outputs and nothing else (:func:`course_lib.edition.stored.stored_call`). A call whose arguments
are one of the exercise's public cases may be stored (notebook 03 adds positions to a table of exactly one
public case's size; the check stores that output anyway), but never all of them: then the public cases' calls
are dropped, so that no stand-in answers the public cases as a function would.

The recording run computes what the class edition will compute, so that the edition finds every call it
makes (the digests of the arguments match) even where the arguments come out of a model the lesson trains:

- the graded parts that PyTorch stands in for in the edition (:data:`course_lib.edition.backed.BACKED`) are
  swapped for those same stand-ins (``backed`` of :func:`install`);
- a recorded call returns its output as the edition's stand-in returns the stored one
  (:func:`course_lib.edition.stored.served`: a copy, no gradient back to the arguments), and leaves PyTorch's
  random generators as they were before it (the stored output draws no random number: BERT's masking, run
  by the reference here, would otherwise shift every later draw).

A training loop calls a graded part thousands of times with arguments that differ only in their floats (the
same sizes, the same integer data: one *signature*), and storing every output made the full class edition
14 GB. So at most :data:`CAP` calls are recorded per graded part and signature; a call past the cap is served
in both runs as the edition serves a call it has not stored, the next recorded call of that signature in the
lesson's order (:func:`course_lib.edition.stored.lookup`), so the two runs still compute the same numbers.
Those numbers are not the self-study edition's: past the cap the loop replays stored outputs (which carry no
gradient in either case, see below).

Same machine, same numbers. A machine whose floating-point results differ in the last bits (another CPU,
another BLAS) trains to other weights; a call on them is then served the output of the recorded call at the
same place in the lesson's order with the same signature (integer data and sizes equal), and nothing when
there is none (it says the answer is withheld). The runs that ``course_lib.training.parallel`` hands to other
processes are recorded in the kernel (``COURSE_WORKERS=1`` while recording).

Example (what the builder runs in the kernel before the notebook's first cell)::

    from course_lib.edition import record
    record.install({"course_lib.models.masking.padding_mask": "padding_mask"}, "/tmp/calls.pt")
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from course_lib.exercises import get_exercise, registered_exercises, to_plain

from . import stored
from .stored import ORDER, call_digest, served

__all__ = ["install", "save", "public_digests", "as_tensors", "argument_values", "CAP"]

#: The most calls recorded per graded part and call signature (same sizes and integer data, floats aside);
#: later calls of that signature are served from the recorded ones (see the module docstring).
CAP = 16

_TABLE: dict[str, dict[str, Any]] = {}
_PATH: list[Path] = []
_COUNT: dict[tuple[str, str], int] = {}  # (key, signature) -> calls recorded
_CAP: list[int | None] = [CAP]


def as_tensors(value: Any) -> Any:
    """A plain output (``to_plain``; dicts too) with arrays turned back into tensors, as stored files hold them."""
    plain = to_plain(value)

    def back(v: Any) -> Any:
        if isinstance(v, list):
            return [back(item) for item in v]
        if isinstance(v, dict):
            return {key: back(item) for key, item in v.items()}
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
        if _inside_a_graded_part():
            return fn(*args, **kwargs)
        try:
            values = argument_values(fn, args, kwargs, method)
            digest = call_digest(values)
        except (TypeError, AttributeError):
            return fn(*args, **kwargs)
        signature = call_digest(values, floats_by_shape=True)
        calls = table.setdefault(key, {})
        cap = _CAP[0]
        if cap is not None and _COUNT.get((key, signature), 0) >= cap:  # past the cap: served as the edition does
            output = stored.lookup(key, [calls], digest, signature)
            if output is not None:
                return served(output, values)
        with _random_state_kept([*args, *kwargs.values()]):
            raw = fn(*args, **kwargs)
            if _on_meta(raw):  # a model built on the meta device (shapes only): store the values, as on the CPU
                with torch.device("cpu"):
                    raw = fn(*args, **kwargs)
            output = as_tensors(raw)
        calls[digest] = output
        calls.setdefault(ORDER, []).append([digest, signature])
        _COUNT[(key, signature)] = _COUNT.get((key, signature), 0) + 1
        stored.lookup(key, [calls], digest, signature)  # the order's position moves as the edition's will
        return served(output, values)  # what the edition's stand-in returns for this call

    return recorded


def _on_meta(value: Any) -> bool:
    """Whether an output holds a tensor on PyTorch's ``meta`` device (a shape without values)."""
    if isinstance(value, torch.Tensor):
        return value.is_meta
    return isinstance(value, (list, tuple)) and any(_on_meta(item) for item in value)


@contextlib.contextmanager
def _random_state_kept(arguments: Sequence[Any]) -> Iterator[None]:
    """PyTorch's global generator and every ``torch.Generator`` among ``arguments`` as they were before."""
    generators = [g for g in arguments if isinstance(g, torch.Generator)]
    states = [g.get_state() for g in generators]
    with torch.random.fork_rng(devices=[]):
        yield
    for generator, state in zip(generators, states, strict=True):
        generator.set_state(state)


def _swap_in(key: str, stand_in: Callable[..., Any]) -> None:
    """Put the class edition's PyTorch-backed ``stand_in`` in place of graded part ``key`` in this kernel: a
    method in its class, a function wherever ``course_lib``'s modules hold it."""
    owner = _lookup(key.rpartition(".")[0])
    name = key.rpartition(".")[2]
    if isinstance(owner, type):
        setattr(owner, name, stand_in)
        return
    original = getattr(owner, name)
    for module in [m for n, m in list(sys.modules.items()) if n == "course_lib" or n.startswith("course_lib.")]:
        for attribute, value in list(vars(module).items()):
            if value is original:
                setattr(module, attribute, stand_in)
    for exercise in registered_exercises():
        if exercise.reference is original:
            exercise.reference = stand_in


def install(parts: Mapping[str, str], path: str | Path, checks: str = "course_lib.checks",
            outer: Sequence[str] = (), backed: Sequence[str] = (), cap: int | None = CAP) -> None:
    """Record every call to the graded functions and methods ``parts`` (key -> exercise name); :func:`save`
    writes them. ``backed``: keys of :data:`~course_lib.edition.backed.BACKED` to run as the edition runs them.
    ``cap``: the most calls recorded per part and signature (None: every call).

    A function is replaced wherever ``course_lib``'s modules hold it (its own module and those that imported
    it by name), and so is the exercise's ``reference`` (what a failing check hands to the cells below); a
    method (``module.Class.forward``) is replaced in its class. ``checks``: the module that declares the
    exercises (an assignment's, beside its notebook).
    """
    import sys

    import course_lib.checks  # noqa: F401 - the course's exercises, looked up below with ``checks``'s
    importlib.import_module(checks)
    _PATH[:] = [Path(path)]
    _CAP[:] = [cap]
    if backed:
        from .backed import BACKED

        for key in backed:
            _swap_in(key, BACKED[key].stand_in)
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
    for cut in range(len(parts), 0, -1):  # the whole key first: a module (the owner of a function) is found too
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
            calls[ORDER] = [entry for entry in calls.get(ORDER, []) if entry[0] not in public]
    partial = _PATH[0].with_suffix(".partial")
    torch.save(_TABLE, partial)
    partial.replace(_PATH[0])  # whole or not at all, even if the kernel is stopped while saving
