"""The in-notebook check: run a learner's implementation on the public cases and print the verdict.

The check is advisory feedback for the learner (it runs in the learner's own kernel, where anything can be
changed); the grading command decides points in a process of its own. Both take their verdict from
:mod:`course_lib.exercises.verdict`. A check never raises on a learner's mistake: it prints a verdict and returns
what the notebook should go on with (the learner's implementation when it passed, the course's reference
otherwise).
"""

from __future__ import annotations

import sys
from collections import ChainMap
from collections.abc import Callable, Mapping
from typing import Any

from . import cells
from .core import Exercise, get_exercise
from .verdict import FAILED, NOT_IMPLEMENTED, CheckResult, check_exercise, quoted_code

__all__ = ["check", "run_check"]


def run_check(name: str, impl: Any, seed: int = 0) -> CheckResult:
    """Run exercise ``name``'s public cases on ``impl`` and return the verdict without printing it.

    Each case is observed (what ran traced, the access check run) and judged against the reference's
    observation by :mod:`course_lib.exercises.verdict`, the grader's judge too: the check and the grader agree.
    """
    return check_exercise(get_exercise(name), impl, "public", seed)


_FROM_NOTEBOOK: Any = object()  # check(name) without an implementation: look it up where check was called
cells.install()  # in an IPython kernel, record how each exercise cell last ran (no-op elsewhere)


def _error_details(err: BaseException) -> str:
    """What an error says: for a syntax error its line and message, then the line of code on its own line with a
    caret under the place Python points at; for another error, its first line."""
    if isinstance(err, SyntaxError):
        where = f"line {err.lineno}: " if err.lineno else ""
        return f"{where}{err.msg}" + quoted_code(err.text or "", err.offset)
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
                       f"it and run it again, then this check." + (f"\n{details}" if details else ""))


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
        >>> from course_lib.models.softmax import stable_softmax
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
