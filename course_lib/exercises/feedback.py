"""The in-notebook check: run a learner's implementation on the public cases and explain the verdict.

The check is advisory feedback for the learner (it runs in the learner's own kernel, where anything can be
changed); the grading command decides points in a process of its own. A check never raises on a learner's
mistake: it prints a verdict and returns what the notebook should go on with (the learner's
implementation when it passed, the course's reference otherwise).
"""

from __future__ import annotations

import inspect
import re
import sys
import traceback
from collections import ChainMap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .compare import compare_outputs, describe_value, output_problems, to_plain  # noqa: F401 (re-exported)
from .core import Case, Exercise, get_exercise, run_case

__all__ = ["CheckResult", "check", "run_check", "compare_outputs", "output_problems", "to_plain", "PASSED", "FAILED",
           "NOT_IMPLEMENTED", "NOT_DEFINED", "ERROR", "INVALID", "FORBIDDEN_CALL_HINT", "WEIGHTS_HINT", "KIND_HINTS",
           "diagnose_observation", "reference_observation", "inputs_as_plain"]

PASSED, FAILED, NOT_IMPLEMENTED, ERROR, INVALID = "passed", "failed", "not implemented yet", "error", "invalid"
NOT_DEFINED = "not defined"
NOT_DIFFERENTIABLE_HINT = (
    "stay in torch operations: .item(), .tolist(), .numpy(), float() and torch.tensor(...) cut the graph, "
    "and an in-place write into a tensor autograd still needs (w[mask] = 0 after a softmax) breaks backward; "
    "use torch.where or masked_fill, which return new tensors.")
WEIGHTS_HINT = ("keep the layers the stub's __init__ creates, with the same names and sizes (self.w_q, ...): the "
                "check gives your module the course's weights by name, so that equal code gives equal numbers.")
FORBIDDEN_CALL_HINT = ("this exercise asks you to build the function from smaller operations: the library "
                       "function that does it all is switched off while the check runs.")
_SYMBOL = {PASSED: "✅", FAILED: "❌", NOT_IMPLEMENTED: "⏳", NOT_DEFINED: "❓", ERROR: "💥", INVALID: "⚠️"}


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


#: The hint for each kind of problem an observation shows (an output's own hint comes from the known mistakes).
KIND_HINTS = {
    "modified": "work on a copy: an in-place operation (-=, /=, x[...] = ..., .add_()) on an argument changes "
                "the caller's tensor too.",
    "gradient": NOT_DIFFERENTIABLE_HINT,
    "gradient-values": "the output is right on this case but its gradients are not: the result depends on an "
                       "input it should not (or not on one it should), which these inputs happen to hide. Check "
                       "which argument feeds each step.",
    "alias": "return a new tensor built by your operations (or x.clone()), not the argument itself.",
    "train": "in evaluation mode your module is right; in training mode it is not, so dropout is missing or in "
             "another place: apply it exactly where the exercise's text says.",
    "forbidden": FORBIDDEN_CALL_HINT,
    "record": "the check records which operations your code runs: an exercise's function must not switch that "
              "record off or hand its work to another thread or process.",
}


def inputs_as_plain(case: Case) -> list[Any]:
    """A case's inputs as plain data, positional then keyword (sorted), as observations record them after."""
    return to_plain([*case.args, *[case.kwargs[k] for k in sorted(case.kwargs)]])


def reference_observation(exercise: Exercise, case: Case) -> dict[str, Any]:
    """The reference's plain observation on ``case``: what a learner's is judged against."""
    from .observation import observe, plain_observation

    return plain_observation(observe(exercise.reference, case, grad=exercise.grad,
                                     differentiable=exercise.differentiable, seed=exercise.seed,
                                     train_mode=exercise.train_mode))


def run_check(name: str, impl: Any, seed: int = 0) -> CheckResult:
    """Run exercise ``name``'s public cases on ``impl`` and return the verdict without printing it.

    Each case is observed (:func:`course_lib.exercises.observation.observe`, what ran traced) and judged
    against the reference's observation by :func:`~course_lib.exercises.observation.observation_problems`,
    the grader's judge too: the check and the grader agree on every honest answer.
    """
    from .observation import WeightsMismatchError, observation_problems, observe, plain_observation

    exercise: Exercise = get_exercise(name)
    cases = exercise.cases("public", seed=seed)
    total = len(cases)
    kind = "class" if exercise.is_class else "function"
    if impl is None or not callable(impl):
        return CheckResult(name, INVALID, f"check({name!r}, ...) expected your {kind}, got {describe_value(impl)}.",
                           cases_total=total)
    if exercise.is_class and not inspect.isclass(impl):
        return CheckResult(name, INVALID, f"check({name!r}, ...) expected a class (pass the class itself, "
                           f"not an instance), got {describe_value(impl)}.", cases_total=total)
    for i, case in enumerate(cases):
        try:
            got = plain_observation(observe(impl, case, grad=exercise.grad, differentiable=exercise.differentiable,
                                            seed=exercise.seed, train_mode=exercise.train_mode,
                                            watch=exercise.forbidden_calls, trace=True))
        except NotImplementedError:
            return CheckResult(name, NOT_IMPLEMENTED,
                               "replace `raise NotImplementedError()` with your code, then run this cell again.",
                               cases_total=total)
        except WeightsMismatchError as err:
            return CheckResult(name, FAILED, str(err), case.label, WEIGHTS_HINT, i, total)
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # noqa: BLE001 - a learner's error (even sys.exit()) becomes a verdict
            where = _user_frame(err)
            message = f"your code raised {type(err).__name__}: {err}" + (f"\n({where})" if where else "")
            return CheckResult(name, ERROR, message, case.label, cases_passed=i, cases_total=total)
        problems = observation_problems(exercise, case, reference_observation(exercise, case), got,
                                        inputs_as_plain(case), threads=False)  # a kernel has threads of its own
        if problems:
            first = problems[0]
            hint = diagnose_observation(exercise, case, got, first.kind) or KIND_HINTS.get(first.kind, "")
            if first.kind == "output":
                hint = hint or _shape_hint(first.message)
            return CheckResult(name, FAILED, "\n".join(p.message for p in problems if p.kind == first.kind),
                               case.label, hint, i, total)
    return CheckResult(name, PASSED, cases_passed=total, cases_total=total)


def _problem_kinds(problems: list[str]) -> set[str]:
    """The kinds of a ``compare`` function's problems: the text before the first colon of each."""
    return {problem.split(":", 1)[0] for problem in problems}


def _diagnose(exercise: Exercise, case: Case, got: Any) -> str:
    """The hint of the first known mistake whose output equals the learner's on this case.

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
                return mistake.hint
        elif _dtype_kinds(wrong) == _dtype_kinds(got) and not compare_outputs(wrong, got, exercise.atol,
                                                                              exercise.rtol):
            return mistake.hint
    return ""


diagnose = _diagnose  # the grader's name for it (it judges outputs outside the notebook)

#: Which part of an observation a kind of problem is about, to find the known mistake that shows the same.
_ASPECT = {"gradient-values": "grads", "train": "train_output"}


def diagnose_observation(exercise: Exercise, case: Case, got: dict[str, Any], kind: str) -> str:
    """The hint of the first known mistake that goes wrong the same way as the learner's observation ``got``:
    the same output (``kind`` "output"), the same gradients, or the same output in training mode."""
    if kind == "output":
        return _diagnose(exercise, case, got.get("output"))
    aspect = _ASPECT.get(kind)
    if aspect is None:
        return ""
    from .observation import observe, plain_observation

    for mistake in exercise.mistakes:
        try:
            wrong = plain_observation(observe(mistake.impl, case, grad=exercise.grad,
                                              differentiable=exercise.differentiable, seed=exercise.seed,
                                              train_mode=exercise.train_mode))
            if wrong.get(aspect) is not None and not compare_outputs(wrong[aspect], got.get(aspect), exercise.atol,
                                                                     exercise.rtol):
                return mistake.hint
        except Exception:  # noqa: BLE001 - a mistake that cannot run this case says nothing about it
            continue
    return ""


def _dtype_kinds(value: Any) -> list[str]:
    """The dtype kind of every array in a plain output, in order (so a float output never matches a bool one)."""
    if isinstance(value, list):
        return [kind for item in value for kind in _dtype_kinds(item)]
    return [value.dtype.kind] if isinstance(value, np.ndarray) else [type(value).__name__]


_FROM_NOTEBOOK: Any = object()  # check(name) without an implementation: look it up where check was called


def _failed_cell_defining(target: str) -> BaseException | None:
    """The error of the last cell IPython ran, when that cell defines ``target`` (the exercise cell); else None.

    A cell that stops with an error (a syntax error stops it before its first line) leaves the name as it
    was: undefined, or an older definition from an earlier run. Outside IPython there is no such cell.
    """
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    last = getattr(shell, "last_execution_result", None)
    if last is None or last.success:
        return None
    source = getattr(getattr(last, "info", None), "raw_cell", "") or ""
    if not re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(target)}\b", source, re.MULTILINE):
        return None
    return last.error_before_exec or last.error_in_exec


def _describe_error(err: BaseException) -> str:
    if isinstance(err, SyntaxError):
        where = f" on line {err.lineno}" if err.lineno else ""
        text = f": {err.text.strip()}" if err.text and err.text.strip() else ""
        return f"{type(err).__name__}{where} ({err.msg}){text}"
    return f"{type(err).__name__}: {err}"


def _from_notebook(name: str, exercise: Exercise, namespace: Mapping[str, Any]) -> tuple[Any, CheckResult | None]:
    """The learner's implementation of ``exercise`` in ``namespace`` (the notebook's variables), or a verdict.

    The name looked up is the reference's (``stable_softmax``, ``MultiHeadAttention``): the exercise cell
    defines the same name. A verdict comes back instead when the name is missing or the cell that defines it
    failed the last time it ran, so the check never stops on a ``NameError`` itself.
    """
    target = getattr(exercise.reference, "__name__", name)
    failed = _failed_cell_defining(target)
    if failed is not None:
        return None, CheckResult(
            name, ERROR, f"the cell above stopped with {_describe_error(failed)}, so `{target}` is "
            f"{'not defined' if target not in namespace else 'still what an earlier run left'}.",
            hint="fix that line and run the cell above again, then this one.")
    if target not in namespace:
        return None, CheckResult(
            name, NOT_DEFINED, f"`{target}` is not defined: did the cell above run without error?",
            hint=f"run the cell above (Shift+Enter); if it shows an error, fix it first. The check looks for "
                 f"the name `{target}`: keep it as the stub spells it.")
    return namespace[target], None


def check(name: str, impl: Any = _FROM_NOTEBOOK) -> Callable[..., Any]:
    """Check a learner's implementation of exercise ``name``; print the verdict.

    ``check("stable_softmax")`` checks what the name ``stable_softmax`` holds where ``check`` is called (the
    notebook's variables): a missing name, or an exercise cell that stopped with an error, is a verdict
    like any other, never a ``NameError``. ``check("stable_softmax", fn)`` checks ``fn``.

    Returns the implementation the rest of the notebook should use: the learner's when it passed, the
    course's reference otherwise (so one stuck exercise does not block the lessons after it).

    Example:
        >>> from course_lib.basics import stable_softmax
        >>> fn = check("stable_softmax")
        ✅ stable_softmax: passed (8/8 cases)
    """
    exercise = get_exercise(name)
    result = None
    if impl is _FROM_NOTEBOOK:
        caller = sys._getframe(1)
        impl, result = _from_notebook(name, exercise, ChainMap(caller.f_locals, caller.f_globals))
    if result is None:
        result = run_check(name, impl)
    print(result)
    if result.passed:
        return impl
    print("   → the cells below use the course's reference implementation for now.")
    return exercise.reference
