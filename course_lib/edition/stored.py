"""The class edition's checks and stored outputs: what a student's ``course_lib`` holds instead of answers.

In the class edition, ``from course_lib.checks import check`` is this module's :func:`check`. It observes the
learner's implementation on the exercise's public cases (stored as plain tensors at build time) as the notebook
check does (output, inputs after the call, gradients, aliasing, training mode, what ran, how it read its input),
and the one verdict of the course (:mod:`course_lib.exercises.verdict`) judges that against the reference's
observation stored beside them, naming a known mistake when the learner's observation goes wrong as that
mistake's stored observation does: the same verdict and hints as the notebook check, with neither the reference
nor the mistakes' code in the edition. The cells after a check go on with the learner's implementation when it
passed, otherwise with the edition's stand-in (PyTorch's own module, stored outputs, or a stand-in that
says the answer is withheld).

Stored files (``course_lib/edition/data/``) are read with ``torch.load(..., weights_only=True)``: tensors,
numbers, strings, lists and dicts only, never pickled code.

Example (in the class edition)::

    from course_lib.checks import check
    softmax_fn = check("stable_softmax")
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
import sys
from collections import ChainMap
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import torch

from course_lib.exercises.compare import to_plain
from course_lib.exercises.core import Case
from course_lib.exercises.feedback import earlier_answer
from course_lib.exercises.judges import JUDGES
from course_lib.exercises.passes import resolve_access_check
from course_lib.exercises.verdict import NOT_DEFINED, CheckResult, KnownMistake, Rules, run_cases

__all__ = ["AnswerWithheld", "DATA", "ORDER", "add_data_folder", "remove_data_folder", "check", "check_earlier",
           "run_check", "rules_of", "stored_call", "served", "fallback_words", "withheld", "call_digest",
           "load_exercise", "stored_exercises", "lookup"]

#: Where the edition's stored data lives: one ``<exercise>.pt`` per exercise and ``calls.pt``.
DATA = Path(__file__).resolve().parent / "data"


#: The folders searched for stored data: the edition's own, then those added by an assignment.
_FOLDERS: list[Path] = [DATA]


class AnswerWithheld(RuntimeError):
    """A graded exercise's answer is not in the class edition; the learner's own implementation stands in."""


def withheld(key: str, exercise: str) -> None:
    """Raise :class:`AnswerWithheld` for the graded part ``key`` (what a withheld stand-in does)."""
    raise AnswerWithheld(
        f"{key} is the answer of exercise {exercise!r}, which this class edition of the course does not contain: "
        f"solve that exercise (its check then hands your implementation to the cells below)")


#: In a stored table, the key of a graded part's calls in the order the lesson made them: ``[digest, signature]``.
ORDER = "__order__"

#: Per graded part: the position in its recorded order just after the last call served (this process).
_NEXT: dict[str, int] = {}


def call_digest(values: Sequence[Any], floats_by_shape: bool = False) -> str:
    """A digest of a call's argument values (plain data: tensors by dtype, shape and bytes).

    With ``floats_by_shape`` a floating-point tensor counts by its dtype and shape only (the call's
    *signature*: the same data, tokens and sizes, whatever the last bits of the floats).
    """
    h = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            if floats_by_shape and (t.is_floating_point() or t.is_complex()):
                return
            h.update(t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.float().numpy().tobytes())
        elif isinstance(value, torch.Generator):  # by its state: the same draws follow
            h.update(b"G")
            h.update(value.get_state().numpy().tobytes())
        elif isinstance(value, (list, tuple)):
            h.update(f"L{len(value)}".encode())
            for item in value:
                feed(item)
        elif isinstance(value, dict):
            h.update(f"D{len(value)}".encode())
            for k in sorted(value):
                h.update(str(k).encode())
                feed(value[k])
        else:
            h.update(f"{type(value).__name__}:{value!r};".encode())

    feed(list(values))
    return h.hexdigest()


def _tables(key: str) -> list[dict[str, Any]]:
    return [_load(folder / "calls.pt").get(key, {}) for folder in _FOLDERS if (folder / "calls.pt").is_file()]


def _in_order(key: str, table: dict[str, Any], column: int, wanted: str) -> str | None:
    """The digest of the first recorded call of ``key`` from the current position on (then from the start)
    whose digest (``column`` 0) or signature (1) is ``wanted``; the position moves past it."""
    order = table.get(ORDER, [])
    start = min(_NEXT.get(key, 0), len(order))
    for i in itertools.chain(range(start, len(order)), range(start)):  # lazily: a call in order is found at once
        if order[i][column] == wanted:
            _NEXT[key] = i + 1
            return str(order[i][0])
    return None


def stored_call(key: str, exercise: str, values: Sequence[Any]) -> Any:
    """The stored output of graded part ``key`` for the argument ``values`` (in signature order, defaults
    applied; a method's ``self`` as its ``state_dict()``), as computed or recorded when the edition was
    built; :class:`AnswerWithheld` for a call not stored.

    A call that was recorded is found by its digest. On a machine whose floating-point results differ in the
    last bits from the build machine's, a model the lesson trains has other weights, and its calls other
    digests: such a call gets the output of the next recorded call in the lesson's order with the same
    *signature* (the same integer data, sizes and dtypes, floats by shape: :func:`call_digest`). The stored
    outputs are all it ever returns.
    """
    found = lookup(key, _tables(key), call_digest(values), call_digest(values, floats_by_shape=True))
    if found is None:
        withheld(key, exercise)
    return served(found, values)


def lookup(key: str, tables: Sequence[dict[str, Any]], digest: str, signature: str) -> Any:
    """The stored output a call of ``key`` with this ``digest`` and ``signature`` is served from ``tables``, or
    None: the call itself if it was recorded, else the next recorded call in the lesson's order with the same
    signature (the order's position moves past it). One implementation for the edition's stand-ins
    (:func:`stored_call`) and the builder's recording run, which serves the calls past its cap the same way
    (:mod:`course_lib.edition.record`), so that both runs compute the same numbers."""
    for table in tables:
        if digest in table:
            _in_order(key, table, 0, digest)
            return table[digest]
    for table in tables:
        found = _in_order(key, table, 1, signature)
        if found is not None:
            return table[found]
    return None


def _needs_grad(values: Sequence[Any]) -> bool:
    """Whether autograd is on and a tensor among the call's arguments (nested in lists and dicts) requires grad."""
    if not torch.is_grad_enabled():
        return False
    todo = list(values)
    while todo:
        value = todo.pop()
        if isinstance(value, torch.Tensor) and value.requires_grad:
            return True
        if isinstance(value, (list, tuple)):
            todo += list(value)
        elif isinstance(value, dict):
            todo += list(value.values())
    return False


def served(value: Any, values: Sequence[Any] = ()) -> Any:
    """A stored output as a stand-in returns it: a copy the caller may change (tensors cloned, sequences as
    tuples: the stored files keep a function's tuple of results as a list).

    Stored data carries no gradient to the arguments. So that a lesson that trains through the call still
    runs (``loss.backward()``), a floating-point output requires grad when autograd is on and an argument
    requires grad: it is then a leaf, and nothing flows back from it. The builder's recording run
    (:mod:`course_lib.edition.record`) returns the same, so the two runs see the same numbers.
    """
    grad = _needs_grad(values)

    def copy(item: Any) -> Any:
        if isinstance(item, torch.Tensor):
            fresh = item.clone()
            return fresh.requires_grad_(True) if grad and fresh.is_floating_point() else fresh
        if isinstance(item, list):
            return tuple(copy(part) for part in item)
        return item

    return copy(value)


def add_data_folder(folder: Path) -> None:
    """Also look for exercises' stored data in ``folder`` (an assignment's student folder adds its own)."""
    folder = Path(folder)
    if folder not in _FOLDERS:
        _FOLDERS.append(folder)


def remove_data_folder(folder: Path) -> None:
    """Stop looking for stored data in ``folder`` (added by :func:`add_data_folder`)."""
    folder = Path(folder)
    if folder in _FOLDERS and folder != DATA:
        _FOLDERS.remove(folder)


def load_exercise(name: str) -> dict[str, Any]:
    """The stored data of exercise ``name`` (public cases, expected outputs, mistakes' outputs and hints)."""
    for folder in _FOLDERS:
        path = folder / f"{name}.pt"
        if path.is_file():
            return _load(path)
    known = ", ".join(stored_exercises()) or "none"
    raise KeyError(f"no exercise called {name!r} in this edition; known exercises: {known}")


@cache
def _load(path: Path) -> dict[str, Any]:
    return torch.load(path, weights_only=True)


def stored_exercises() -> list[str]:
    """The names of the exercises whose checks this edition holds."""
    return sorted(p.stem for folder in _FOLDERS for p in folder.glob("*.pt") if p.stem != "calls")


def _case(entry: dict[str, Any]) -> Case:
    return Case(entry["label"], args=tuple(entry["args"]), kwargs=dict(entry["kwargs"]), init=entry["init"],
                state=entry["state"])


def _plain(value: Any) -> Any:
    """Stored data (tensors, lists, dicts) as the check compares it (NumPy arrays, lists, dicts)."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return to_plain(value)


def rules_of(data: dict[str, Any]) -> Rules:
    """The verdict's rules of an exercise from its stored data (no reference, no mistake's code)."""
    return Rules(name=str(data["name"]), atol=float(data["atol"]), rtol=float(data["rtol"]),
                 argument_names=tuple(data["argument_names"]), compare=JUDGES.get(str(data["judge"])),
                 forbidden_calls=tuple(data["forbidden"]), forbidden_ops=tuple(data["forbidden_ops"]),
                 forbidden_hint=str(data.get("forbidden_hint", "")), access_check=resolve_access_check(data["access"]),
                 differentiable=bool(data["differentiable"]), train_mode=bool(data["train_mode"]), seed=data["seed"])


def _stored_mistake(mistake: dict[str, Any]) -> KnownMistake:
    observations = mistake["observations"]

    def observed(index: int, case: Case) -> dict[str, Any] | None:
        found = observations[index] if index < len(observations) else None
        return None if found is None else _plain(found)
    return KnownMistake(str(mistake["name"]), str(mistake["hint"]), str(mistake.get("detail", "")), observed)


def run_check(name: str, impl: Any) -> CheckResult:
    """Run exercise ``name``'s stored public cases on ``impl``; the verdict, not printed.

    The notebook check's verdict (:func:`course_lib.exercises.verdict.run_cases`) on the same cases, with the
    reference's observations and the known mistakes' observations read from the stored data instead of run.
    """
    data = load_exercise(name)
    cases = [_case(entry) for entry in data["cases"]]
    observations = data["observations"]
    return run_cases(rules_of(data), impl, cases, lambda index, case: _plain(observations[index]),
                     [_stored_mistake(m) for m in data["mistakes"]], bool(data["is_class"]))


def _fallback(data: dict[str, Any]) -> Any:
    module, _, name = data["fallback"].rpartition(".")
    return getattr(importlib.import_module(module), name)


_FROM_NOTEBOOK: Any = object()


def check(name: str, impl: Any = _FROM_NOTEBOOK) -> Any:
    """Check a learner's implementation of exercise ``name`` on the stored public cases; print the verdict.

    ``check("stable_softmax")`` checks what the name the stub defines holds where ``check`` is called (the
    notebook's variables). Returns the learner's implementation when it passed, else the edition's stand-in.
    """
    data = load_exercise(name)
    result = None
    if impl is _FROM_NOTEBOOK:
        caller = sys._getframe(1)
        namespace = ChainMap(caller.f_locals, caller.f_globals)
        target = data["target"]
        if target in namespace:
            impl = namespace[target]
        else:
            result = CheckResult(name, NOT_DEFINED, f"`{target}` is not defined: did the cell above run without "
                                 f"error?", hint=f"run the cell above (Shift+Enter); keep the name `{target}`.")
    if result is None:
        result = run_check(name, impl)
    print(result)
    if result.passed:
        return impl
    print(f"   → {fallback_words(data['fallback'], _manifest())}")
    return _fallback(data)


@cache
def _manifest() -> dict[str, Any]:
    """The edition's manifest (what stands in for each graded part), written beside this module by the build."""
    path = Path(__file__).with_name("manifest.json")
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def fallback_words(fallback: str, manifest: dict[str, Any]) -> str:
    """What the cells below a failed check go on with in this edition, said as it is: the course's reference where
    the edition ships it, else what stands in for it (PyTorch's own function, the outputs stored with the
    edition, or nothing: the answer is withheld), from the manifest's ``parts`` (key -> ``kind``, ``through``).

    Example:
        >>> fallback_words("m.f", {"parts": {"m.f": {"kind": "backed", "through": ["torch.softmax"]}}}).split(" (")[0]
        "the cells below use PyTorch's own torch.softmax in its place for now"
    """
    parts = [part for key, part in manifest.get("parts", {}).items() if key == fallback or key.startswith(
        fallback + ".")]
    kinds = {part.get("kind") for part in parts}
    if not parts:
        return "the cells below use the course's reference implementation for now."
    missing = " (this edition does not hold the course's answer)."
    if "backed" in kinds:
        through = sorted({name for part in parts for name in part.get("through", [])})
        return f"the cells below use PyTorch's own {', '.join(through) or 'module'} in its place for now{missing}"
    if "stored" in kinds:
        return f"the cells below use outputs stored with this edition for the calls the lesson makes{missing}"
    return f"the cells below that need it stop with a message until yours passes{missing}"


def check_earlier(name: str, folder: str | Path = ".") -> Any:
    """The class edition's :func:`course_lib.exercises.feedback.check_earlier`: the learner's answer to an earlier
    notebook's exercise, read from its file and judged on the stored public cases; else the edition's stand-in."""
    data = load_exercise(name)
    impl = earlier_answer(name, data["notebook"], data["target"], folder, run_check)
    if impl is not None:
        return impl
    print(f"   → {fallback_words(data['fallback'], _manifest())}")
    return _fallback(data)
