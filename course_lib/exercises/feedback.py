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
from pathlib import Path
from typing import Any

import numpy as np

from . import cells
from .compare import compare_outputs, describe_value, output_problems, to_plain  # noqa: F401 (re-exported)
from .core import Case, Exercise, Mistake, get_exercise, run_case

__all__ = ["CheckResult", "check", "check_earlier", "earlier_answer", "run_check", "compare_outputs",
           "output_problems", "to_plain", "PASSED", "FAILED", "NOT_IMPLEMENTED", "NOT_DEFINED", "ERROR", "INVALID",
           "FORBIDDEN_CALL_HINT", "WEIGHTS_HINT", "KIND_HINTS", "kind_hint", "diagnose_observation", "find_mistake",
           "reference_observation", "inputs_as_plain"]

PASSED, FAILED, NOT_IMPLEMENTED, ERROR, INVALID = "passed", "failed", "not implemented yet", "error", "invalid"
NOT_DEFINED = "not defined"
NOT_DIFFERENTIABLE_HINT = (
    "stay in torch operations: .item(), .tolist(), .numpy(), float() and torch.tensor(...) cut the graph, "
    "and an in-place write into a tensor autograd still needs (w[mask] = 0 after a softmax) breaks backward; "
    "use torch.where or masked_fill, which return new tensors.")
WEIGHTS_HINT = ("keep the layers the stub's __init__ creates, with the same names and sizes (self.w_q, ...): the "
                "check gives your module the course's weights by name, so that equal code gives equal numbers.")
FORBIDDEN_CALL_HINT = ("this exercise asks you to build the function from smaller operations: the check sees "
                       "which of PyTorch's operations ran, so the library function that does it all counts "
                       "whatever name it is reached by.")
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


def _quoted(code: str, offset: int | None = None) -> str:
    """A line of code on a line of its own, indented (never inside parentheses of the message, whose closing one
    would read as part of the code), with a caret under column ``offset`` (1-based, in ``code``) when known."""
    text = code.rstrip("\n")
    shown = text.strip()
    if not shown:
        return ""
    quoted = f"\n    {shown}"
    if offset is not None and offset > 0:
        column = min(max(offset - 1 - (len(text) - len(text.lstrip())), 0), len(shown))
        quoted += "\n    " + " " * column + "^"
    return quoted


def _user_frame(err: BaseException) -> str:
    """The innermost traceback line that is the learner's code (not torch's, not course_lib's): "at line N:" and
    the code on its own line."""
    frames = traceback.extract_tb(err.__traceback__)
    for fr in reversed(frames):
        name = fr.filename.replace("\\", "/")
        if "/torch/" in name or "/course_lib/exercises/" in name:
            continue
        quoted = _quoted(fr.line or "")
        return f"at line {fr.lineno}:{quoted}" if quoted else f"at line {fr.lineno}"
    return ""


def _crash_mistake(exercise: Exercise, case: Case, err: BaseException) -> Mistake | None:
    """The first known mistake that raises the same kind of error on ``case`` (a crash can be a known mistake:
    the learning-rate schedule without its step-0 guard divides by zero)."""
    for mistake in exercise.mistakes:
        try:
            run_case(mistake.impl, case, grad=exercise.grad, seed=exercise.seed)
        except type(err):
            return mistake
        except Exception:  # noqa: BLE001 - another error says nothing about this one
            continue
    return None


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
    "gradient-values": "the output is right on this case but its gradients are not. Either the gradient is cut "
                       "somewhere (a .detach() or a value taken out of PyTorch makes a step a constant to "
                       "autograd, though it depends on the input), or the result depends on an input it should "
                       "not (or not on one it should), which these inputs happen to hide. Check which argument "
                       "feeds each step.",
    "alias": "return a new tensor built by your operations (or x.clone()), not the argument itself.",
    "train": "in evaluation mode your module is right; in training mode it is not, so dropout is missing or in "
             "another place: apply it exactly where the exercise's text says.",
    "forbidden": FORBIDDEN_CALL_HINT,
    "record": "the check records which operations your code runs: an exercise's function must not switch that "
              "record off or hand its work to another thread or process.",
    "access": "the numbers are right, but the exercise asks for them to be computed in a particular way, and the "
              "check watches how your code reads its input: read the exercise's text again.",
}


def kind_hint(exercise: Any, kind: str) -> str:
    """The hint for a kind of problem (:data:`KIND_HINTS`); for a forbidden call or operation, the exercise's own
    ``forbidden_hint`` when it has one (what to build instead of the PyTorch function it refuses)."""
    if kind == "forbidden" and getattr(exercise, "forbidden_hint", ""):
        return str(exercise.forbidden_hint)
    return KIND_HINTS.get(kind, "")


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
                                            watch=exercise.forbidden_calls, trace=True,
                                            access=exercise.access_check))
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
            message = f"your code raised {type(err).__name__}: {err}" + (f"\n{where}" if where else "")
            known = _crash_mistake(exercise, case, err) if isinstance(err, Exception) else None
            return CheckResult(name, ERROR, message, case.label, known.hint if known else "", i, total,
                               detail=known.detail if known else "")
        problems = observation_problems(exercise, case, reference_observation(exercise, case), got,
                                        inputs_as_plain(case), threads=False)  # a kernel has threads of its own
        if problems:
            first = problems[0]
            mistake = find_mistake(exercise, case, got, first.kind)
            hint = mistake.hint if mistake is not None else kind_hint(exercise, first.kind)
            if first.kind == "output":
                hint = hint or _shape_hint(first.message)
            return CheckResult(name, FAILED, "\n".join(p.message for p in problems if p.kind == first.kind),
                               case.label, hint, i, total, detail=mistake.detail if mistake is not None else "")
    return CheckResult(name, PASSED, cases_passed=total, cases_total=total)


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

#: Which part of an observation a kind of problem is about, to find the known mistake that shows the same.
_ASPECT = {"gradient-values": "grads", "train": "train_output"}


def find_mistake(exercise: Exercise, case: Case, got: dict[str, Any], kind: str) -> Mistake | None:
    """The first known mistake that goes wrong the same way as the learner's observation ``got``: the same
    output (``kind`` "output"), the same gradients, or the same output in training mode."""
    if kind == "output":
        return _diagnose_mistake(exercise, case, got.get("output"))
    if kind == "access":
        return _access_mistake(exercise, case, got)
    aspect = _ASPECT.get(kind)
    if aspect is None:
        return None
    from .observation import observe, plain_observation

    for mistake in exercise.mistakes:
        try:
            wrong = plain_observation(observe(mistake.impl, case, grad=exercise.grad,
                                              differentiable=exercise.differentiable, seed=exercise.seed,
                                              train_mode=exercise.train_mode))
            if wrong.get(aspect) is not None and not compare_outputs(wrong[aspect], got.get(aspect), exercise.atol,
                                                                     exercise.rtol):
                return mistake
        except Exception:  # noqa: BLE001 - a mistake that cannot run this case says nothing about it
            continue
    return None


def _access_kind(found: Any) -> str:
    """The kind of the first problem an access check found ("" for none): the text before its colon."""
    return str(found[0]).split(":", 1)[0] if isinstance(found, list) and found else ""


def _access_mistake(exercise: Exercise, case: Case, got: dict[str, Any]) -> Mistake | None:
    """The first known mistake whose right output comes from reading the input the same wrong way."""
    kind = _access_kind(got.get("access"))
    if not kind or exercise.access_check is None:
        return None
    for mistake in exercise.mistakes:
        try:
            if _access_kind(exercise.access_check(mistake.impl, case)) == kind:
                return mistake
        except Exception:  # noqa: BLE001 - a mistake that cannot run this case says nothing about it
            continue
    return None


def diagnose_observation(exercise: Exercise, case: Case, got: dict[str, Any], kind: str) -> str:
    """The hint of :func:`find_mistake` ("" when no known mistake matches): what the grader reports."""
    mistake = find_mistake(exercise, case, got, kind)
    return "" if mistake is None else mistake.hint


def _dtype_kinds(value: Any) -> list[str]:
    """The dtype kind of every array in a plain output, in order (so a float output never matches a bool one)."""
    if isinstance(value, list):
        return [kind for item in value for kind in _dtype_kinds(item)]
    return [value.dtype.kind] if isinstance(value, np.ndarray) else [type(value).__name__]


_FROM_NOTEBOOK: Any = object()  # check(name) without an implementation: look it up where check was called
cells.install()  # in an IPython kernel, record how each exercise cell last ran (no-op elsewhere)


def _error_details(err: BaseException) -> str:
    """What an error says: for a syntax error its line and message, then the line of code on its own line with a
    caret under the place Python points at; for another error, its first line."""
    if isinstance(err, SyntaxError):
        where = f"line {err.lineno}: " if err.lineno else ""
        return f"{where}{err.msg}" + _quoted(err.text or "", err.offset)
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


#: What an earlier notebook's exercise cell finds at hand when :func:`check_earlier` runs it on its own.
EARLIER_CELL_NAMESPACE = ("import math", "import numpy as np", "import torch", "import torch.nn.functional as F",
                          "from torch import nn")


def check_earlier(name: str, folder: str | Path = ".") -> Callable[..., Any]:
    """The learner's answer to exercise ``name`` of an EARLIER notebook, checked here; or the reference.

    A notebook's kernel does not hold another notebook's variables, so this reads the earlier notebook's file
    (``<its notebook>.ipynb`` in ``folder``, where the learner saved it), runs its exercise cell on its own
    (:func:`earlier_answer`), checks what it defines with the same check as :func:`check` and prints the
    verdict. Returns the learner's function when it passes, the course's reference otherwise (also when the
    file is missing or the cell raises), so a later lesson trains with the learner's own pieces where they
    work. Notebook 11 trains with notebook 10's. (The class edition's is :func:`course_lib.edition.stored.
    check_earlier`, judged on stored data.)

    Example:
        >>> fn = check_earlier("adamw_update", folder="no-such-folder")  # doctest: +ELLIPSIS
        ⏳ adamw_update: no-such-folder/10_tokeniser_and_training_loop.ipynb is not there...
    """
    exercise = get_exercise(name)
    impl = earlier_answer(name, exercise.notebook, getattr(exercise.reference, "__name__", name), folder, run_check)
    if impl is not None:
        return impl
    print("   → the cells below use the course's reference implementation for now.")
    return exercise.reference


def earlier_answer(name: str, notebook: str, target: str, folder: str | Path,
                   judge: Callable[[str, Any], CheckResult]) -> Any:
    """Run exercise ``name``'s cell of ``<folder>/<notebook>.ipynb`` on its own (with ``math``, ``np``, ``torch``,
    ``F`` and ``nn`` at hand, as the notebooks import them), judge what it defines as ``target`` with ``judge``
    and print the verdict; return it when it passed, else None (a missing file, an error, a wrong answer)."""
    import nbformat

    from .notebooks import exercise_cells

    path = Path(folder) / f"{notebook}.ipynb"
    sources = []
    if path.is_file():
        nb = nbformat.read(path, as_version=4)
        sources = [cell.source for _, cell, cell_name in exercise_cells(nb) if cell_name == name]
    if not sources:
        print(f"⏳ {name}: {path.as_posix()} is not there (or has no exercise cell {name!r}).")
        return None
    namespace: dict[str, Any] = {"__name__": f"earlier_{notebook}"}
    try:
        exec("\n".join(EARLIER_CELL_NAMESPACE), namespace)  # noqa: S102 - the learner's own cell, in their kernel
        exec(compile(sources[0], str(path), "exec"), namespace)  # noqa: S102
    except Exception as err:  # noqa: BLE001 - any error of the learner's cell is a verdict, not a crash
        result = CheckResult(name, ERROR, f"your exercise cell in {path.name} raised {type(err).__name__}: "
                             f"{_error_details(err)}")
    else:
        impl = namespace.get(target)
        result = judge(name, impl) if impl is not None else CheckResult(
            name, NOT_IMPLEMENTED, f"the exercise cell in {path.name} does not define `{target}`.")
    print(f"{result} (your answer in {path.name})")
    return namespace[target] if result.passed else None
