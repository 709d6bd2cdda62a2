"""The in-notebook check: run a learner's implementation on the public cases and explain the verdict.

The check is advisory feedback for the learner (it runs in the learner's own kernel, where anything can be
changed); the grading command decides points in a process of its own. A check never raises on a learner's
mistake: it prints a verdict and returns what the notebook should go on with (the learner's
implementation when it passed, the course's reference otherwise).
"""

from __future__ import annotations

import inspect
import sys
import traceback
from collections import ChainMap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import cells
from .core import (
    Case,
    Exercise,
    ForbiddenCallError,
    InputModifiedError,
    Mistake,
    NotDifferentiableError,
    get_exercise,
    run_case,
)

__all__ = ["CheckResult", "check", "run_check", "compare_outputs", "output_problems", "to_plain", "PASSED", "FAILED",
           "NOT_IMPLEMENTED", "NOT_DEFINED", "ERROR", "INVALID", "FORBIDDEN_CALL_HINT"]

PASSED, FAILED, NOT_IMPLEMENTED, ERROR, INVALID = "passed", "failed", "not implemented yet", "error", "invalid"
NOT_DEFINED = "not defined"
NOT_DIFFERENTIABLE_HINT = (
    "stay in torch operations: .item(), .tolist(), .numpy(), float() and torch.tensor(...) cut the graph, "
    "and an in-place write into a tensor autograd still needs (w[mask] = 0 after a softmax) breaks backward; "
    "use torch.where or masked_fill, which return new tensors.")
FORBIDDEN_CALL_HINT = ("this exercise asks you to build the function from smaller operations: the library "
                       "function that does it all is switched off while the check runs.")
_SYMBOL = {PASSED: "✅", FAILED: "❌", NOT_IMPLEMENTED: "⏳", NOT_DEFINED: "❓", ERROR: "💥", INVALID: "⚠️"}


def to_plain(value: Any) -> Any:
    """Turn an output into plain data: tensors become NumPy arrays, tuples become lists.

    Anything else (an object whose ``__eq__`` always says True, say) is kept as it is and will not compare
    equal to an array.
    """
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu").numpy().copy() if value.dtype != torch.bfloat16 else (
            value.detach().float().cpu().numpy().copy())
    if isinstance(value, tuple):  # a namedtuple too, read as a tuple (its own __iter__ is not trusted)
        return [to_plain(v) for v in tuple.__iter__(value)]
    if isinstance(value, list):
        return [to_plain(v) for v in list.__iter__(value)]
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return np.asarray(value)  # a NumPy scalar (np.float32(0.5)) counts as the number it is
    return value


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, list):
        return f"a sequence of {len(value)} items"
    return f"{type(value).__name__} {value!r}"[:120]


def compare_outputs(expected: Any, got: Any, atol: float, rtol: float, where: str = "output") -> list[str]:
    """Compare plain outputs (see :func:`to_plain`); return the problems found, none when they agree.

    Shapes must match exactly (no broadcasting), booleans must be booleans, NaN anywhere fails.
    """
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return [f"{where}: expected a tuple of {len(expected)} items, got {_describe(got)}"]
        problems: list[str] = []
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            problems += compare_outputs(e, g, atol, rtol, f"{where}[{i}]")
        return problems
    if expected is None:
        return [] if got is None else [f"{where}: expected None, got {_describe(got)}"]
    from_tensor = isinstance(expected, np.ndarray)
    if not from_tensor:
        expected = np.asarray(expected)
        if isinstance(got, (bool, int, float)):
            got = np.asarray(got)
    if type(got) is not np.ndarray:
        wanted = f"a tensor of shape {tuple(expected.shape)}" if from_tensor else "a number"
        return [f"{where}: expected {wanted}, got {_describe(got)}"]
    if got.shape != expected.shape:
        return [f"{where}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"]
    if expected.dtype == np.bool_ and got.dtype != np.bool_:
        return [f"{where}: expected a boolean tensor (True/False), got dtype {got.dtype}"]
    if got.dtype.kind not in "biuf":
        return [f"{where}: expected numbers, got dtype {got.dtype}"]
    if from_tensor and expected.dtype.kind in "iu" and got.dtype.kind not in "iu":
        return [f"{where}: expected an integer tensor (dtype {expected.dtype}), got dtype {got.dtype}"]
    e64, g64 = expected.astype(np.float64), got.astype(np.float64)
    if np.isnan(g64).any() and not np.isnan(e64).any():
        idx = tuple(int(i) for i in np.argwhere(np.isnan(g64))[0])
        return [f"{where}: contains NaN (first at index {list(idx)})"]
    if expected.dtype == np.bool_:
        wrong = np.argwhere(e64 != g64)
        if len(wrong):
            idx = tuple(int(i) for i in wrong[0])
            return [f"{where}: {len(wrong)} of {e64.size} entries differ; first at index {list(idx)}: "
                    f"expected {bool(e64[idx])}, got {bool(g64[idx])}"]
        return []
    if np.allclose(g64, e64, atol=atol, rtol=rtol, equal_nan=True):
        return []
    err = np.abs(g64 - e64)
    err = np.where(np.isnan(err), np.inf, err)
    idx = np.unravel_index(int(np.argmax(err)), err.shape) if err.ndim else ()
    idx = tuple(int(i) for i in idx)
    return [f"{where}: values differ (largest error {float(err[idx]):.4g} at index {list(idx)}: "
            f"expected {float(e64[idx]):.6g}, got {float(g64[idx]):.6g})"]


@dataclass
class CheckResult:
    """The verdict of one check: status, the case that decided it, and what to tell the learner."""

    exercise: str
    status: str
    message: str = ""
    case: str = ""
    hint: str = ""
    cases_passed: int = 0
    cases_total: int = 0
    detail: str = ""  # the hint's second, code-level step (printed by check when it is asked again)

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def __str__(self) -> str:
        head = f"{_SYMBOL.get(self.status, '')} {self.exercise}: {self.status}"
        if self.status == PASSED:
            return f"{head} ({self.cases_passed}/{self.cases_total} cases)"
        lines = [head + (f" on case {self.case!r} ({self.cases_passed}/{self.cases_total} passed before it)"
                         if self.case else "")]
        if self.message:
            lines += [f"   {line}" for line in self.message.splitlines()]
        if self.hint:
            lines.append(f"   hint: {self.hint}")
        return "\n".join(lines)


def _user_frame(err: BaseException) -> str:
    """The innermost traceback line that is the learner's code (not torch's, not course_lib's)."""
    frames = traceback.extract_tb(err.__traceback__)
    for fr in reversed(frames):
        name = fr.filename.replace("\\", "/")
        if "/torch/" in name or "/course_lib/exercises/" in name:
            continue
        return f"line {fr.lineno}: {fr.line}".strip()
    return ""


def _shape_hint(problem: str) -> str:
    if "contains NaN" in problem:
        return ("NaN usually comes from exp() of a large number, from 0/0, or from a softmax over a row that "
                "is entirely -inf.")
    if "expected shape" in problem:
        return "compare the shapes step by step (print x.shape after each line)."
    if "boolean" in problem:
        return "return a torch.bool tensor: comparisons such as a <= b give one."
    return ""


def run_check(name: str, impl: Any, seed: int = 0) -> CheckResult:
    """Run exercise ``name``'s public cases on ``impl`` and return the verdict without printing it."""
    exercise: Exercise = get_exercise(name)
    cases = exercise.cases("public", seed=seed)
    total = len(cases)
    kind = "class" if exercise.is_class else "function"
    if impl is None or not callable(impl):
        return CheckResult(name, INVALID, f"check({name!r}, ...) expected your {kind}, got {_describe(impl)}.",
                           cases_total=total)
    if exercise.is_class and not inspect.isclass(impl):
        return CheckResult(name, INVALID, f"check({name!r}, ...) expected a class (pass the class itself, "
                           f"not an instance), got {_describe(impl)}.", cases_total=total)
    for i, case in enumerate(cases):
        try:
            got = to_plain(run_case(impl, case, grad=exercise.grad, differentiable=exercise.differentiable,
                                    forbidden=exercise.forbidden_calls, seed=exercise.seed))
        except NotImplementedError:
            return CheckResult(name, NOT_IMPLEMENTED,
                               "replace `raise NotImplementedError()` with your code, then run this cell again.",
                               cases_total=total)
        except InputModifiedError as err:
            return CheckResult(name, FAILED, str(err), case.label,
                               "work on a copy: an in-place operation (-=, /=, x[...] = ..., .add_()) on an "
                               "argument changes the caller's tensor too.", i, total)
        except NotDifferentiableError as err:
            return CheckResult(name, FAILED, str(err), case.label, NOT_DIFFERENTIABLE_HINT, i, total)
        except ForbiddenCallError as err:
            return CheckResult(name, FAILED, str(err), case.label, FORBIDDEN_CALL_HINT, i, total)
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # noqa: BLE001 - a learner's error (even sys.exit()) becomes a verdict
            where = _user_frame(err)
            message = f"your code raised {type(err).__name__}: {err}" + (f"\n({where})" if where else "")
            return CheckResult(name, ERROR, message, case.label, cases_passed=i, cases_total=total)
        expected = to_plain(run_case(exercise.reference, case, grad=exercise.grad, seed=exercise.seed))
        problems = output_problems(exercise, case, expected, got)
        if problems:
            mistake = _diagnose_mistake(exercise, case, got)
            hint = mistake.hint if mistake is not None else _shape_hint(problems[0])
            return CheckResult(name, FAILED, "\n".join(problems), case.label, hint, i, total,
                               detail=mistake.detail if mistake is not None else "")
    return CheckResult(name, PASSED, cases_passed=total, cases_total=total)


def output_problems(exercise: Exercise, case: Case, expected: Any, got: Any) -> list[str]:
    """What is wrong with the plain output ``got`` on ``case`` (nothing: it is right).

    Equality with the reference's output ``expected`` (:func:`compare_outputs`), or the exercise's own
    ``compare`` for an exercise whose answer is random. Used by the check and by the grading command alike.
    """
    if exercise.compare is not None:
        try:
            return [str(problem) for problem in exercise.compare(case, expected, got)]
        except Exception as err:  # noqa: BLE001 - an output the judge cannot read is a wrong output
            return [f"output: could not be judged ({type(err).__name__}: {str(err)[:200]})"]
    return compare_outputs(expected, got, exercise.atol, exercise.rtol)


def _problem_kinds(problems: list[str]) -> set[str]:
    """The kinds of a ``compare`` function's problems: the text before the first colon of each."""
    return {problem.split(":", 1)[0] for problem in problems}


def _diagnose(exercise: Exercise, case: Case, got: Any) -> str:
    """The hint of the first known mistake whose output equals the learner's on this case ("" if none)."""
    mistake = _diagnose_mistake(exercise, case, got)
    return "" if mistake is None else mistake.hint


def _diagnose_mistake(exercise: Exercise, case: Case, got: Any) -> Mistake | None:
    """The first known mistake whose output equals the learner's on this case.

    For an exercise judged by its own ``compare`` (a random answer, never equal to anything), the first
    mistake that shows the same kinds of problems as the learner's output, run with the same seed.
    """
    learner_kinds = None
    if exercise.compare is not None:
        expected = to_plain(run_case(exercise.reference, case, grad=exercise.grad, seed=exercise.seed))
        learner_kinds = _problem_kinds(output_problems(exercise, case, expected, got))
    for mistake in exercise.mistakes:
        try:
            wrong = to_plain(run_case(mistake.impl, case, grad=exercise.grad, seed=exercise.seed))
        except Exception:  # noqa: BLE001 - a mistake that cannot run this case says nothing about it
            continue
        if learner_kinds is not None:
            if learner_kinds and _problem_kinds(output_problems(exercise, case, expected, wrong)) == learner_kinds:
                return mistake
        elif _dtype_kinds(wrong) == _dtype_kinds(got) and not compare_outputs(wrong, got, exercise.atol,
                                                                              exercise.rtol):
            return mistake
    return None


diagnose = _diagnose  # the grader's name for it (it judges outputs outside the notebook)


def _dtype_kinds(value: Any) -> list[str]:
    """The dtype kind of every array in a plain output, in order (so a float output never matches a bool one)."""
    if isinstance(value, list):
        return [kind for item in value for kind in _dtype_kinds(item)]
    return [value.dtype.kind] if isinstance(value, np.ndarray) else [type(value).__name__]


_FROM_NOTEBOOK: Any = object()  # check(name) without an implementation: look it up where check was called
cells.install()  # in an IPython kernel, record how each exercise cell last ran (no-op elsewhere)


def _error_details(err: BaseException) -> str:
    """What an error says, in one line: for a syntax error its line, message and text."""
    if isinstance(err, SyntaxError):
        where = f"line {err.lineno}: " if err.lineno else ""
        text = f": {err.text.strip()}" if err.text and err.text.strip() else ""
        return f"{where}{err.msg}{text}"
    return str(err).splitlines()[0][:200] if str(err) else ""


def _from_notebook(name: str, exercise: Exercise, namespace: Mapping[str, Any]) -> tuple[Any, CheckResult | None]:
    """The learner's implementation of ``exercise`` in ``namespace`` (the notebook's variables), or a verdict.

    The name looked up is the reference's (``stable_softmax``, ``MultiHeadAttention``): the exercise cell
    defines the same name. A verdict comes back instead when the cell that defines it failed the last time it
    ran (whatever the name still holds is not that run's work) or the name is missing, so the check never
    stops on a ``NameError`` itself and never judges what an earlier run left.
    """
    target = getattr(exercise.reference, "__name__", name)
    stale = _stale_verdict(name, target)
    if stale is not None:
        return None, stale
    if target not in namespace:
        return None, CheckResult(
            name, NOT_IMPLEMENTED, f"`{target}` is not defined yet: run the exercise cell above (Shift+Enter), "
            f"then this one.", hint=f"the check looks for the name `{target}`: keep it as the stub spells it.")
    return namespace[target], None


def _stale_verdict(name: str, target: str) -> CheckResult | None:
    """A verdict when the kernel saw the exercise cell defining ``target`` fail or drop it on its last run.

    Known only inside IPython, where :mod:`course_lib.exercises.cells` records every cell's outcome.
    """
    run = cells.last_run(target)
    if run is None or run.succeeded:
        return None
    if run.removed:
        return CheckResult(name, NOT_IMPLEMENTED, f"the exercise cell no longer defines `{target}` (its last run "
                           f"defined other names): keep the name as the stub spells it and run the cell again.")
    assert run.error is not None
    details = _error_details(run.error)
    return CheckResult(name, FAILED, f"your exercise cell raised {type(run.error).__name__} when it last ran: fix "
                       f"it and run it again, then this check." + (f"\n({details})" if details else ""))


_HINTS_GIVEN: dict[str, str] = {}  # exercise -> the hint its last check printed (asked again: its code follows)


def _second_step(result: CheckResult) -> str:
    """The hint's code-level step when the learner asks again (the same hint twice in a row), else how to ask.

    The first verdict names the mistake and the idea, so that the learner writes the fix; running the check
    again with the same mistake shows the fix in code.
    """
    asked_again = _HINTS_GIVEN.get(result.exercise) == result.hint
    _HINTS_GIVEN[result.exercise] = result.hint
    if asked_again:
        return f"   in code: {result.detail}"
    return "   (still stuck? run this check again to see the fix in code)"


def check(name: str, impl: Any = _FROM_NOTEBOOK) -> Callable[..., Any]:
    """Check a learner's implementation of exercise ``name``; print the verdict.

    ``check("stable_softmax")`` (the notebooks' form) checks what the name ``stable_softmax`` holds where
    ``check`` is called (the notebook's variables). In IPython, an exercise cell whose last run raised (a
    ``SyntaxError`` included) is reported as failed whatever the name still holds from an earlier run, and a
    missing name is "not implemented yet": a verdict like any other, never a ``NameError``.
    ``check("stable_softmax", fn)`` checks ``fn`` (kept for instructors' code).

    A known mistake is explained in two steps: first the mistake and the idea that fixes it; the fix in code
    (the mistake's ``detail``) when the check is run again and finds the same mistake.

    Returns the implementation the rest of the notebook should use: the learner's when it passed, the
    course's reference otherwise (so one stuck exercise does not block the lessons after it).

    Example:
        >>> from course_lib.basics import stable_softmax
        >>> fn = check("stable_softmax")
        ✅ stable_softmax: passed (8/8 cases)
    """
    exercise = get_exercise(name)
    result = None
    caller = sys._getframe(1)
    namespace = ChainMap(caller.f_locals, caller.f_globals)
    if impl is _FROM_NOTEBOOK:
        impl, result = _from_notebook(name, exercise, namespace)
    elif (target := getattr(exercise.reference, "__name__", name)) in namespace and namespace[target] is impl:
        result = _stale_verdict(name, target)  # check("lm_loss", lm_loss): the name as its failed cell left it
    if result is None:
        result = run_check(name, impl)
    print(result)
    if result.detail:
        print(_second_step(result))
    if result.passed:
        _HINTS_GIVEN.pop(name, None)
        return impl
    print("   → the cells below use the course's reference implementation for now.")
    return exercise.reference
