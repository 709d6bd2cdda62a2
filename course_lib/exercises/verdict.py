"""One verdict: passed, or the problem found, the known mistake it shows and the hint, decided from observations.

Every "passed / failed, because ..." of the course comes from here: the notebook check
(:func:`course_lib.exercises.feedback.run_check`), the class edition's check (:mod:`course_lib.edition.stored`),
the grader's judge (:mod:`course_lib.grading.judging.judge`) and the authoring helpers
(:func:`course_lib.exercises.core.run_case`, :func:`course_lib.exercises.authoring.agrees`). They differ only in
where the observation is made (the learner's kernel, the grader's sandbox, this process) and where the expected
values come from (the reference run here, or data stored at build time):

- :class:`Rules`: what a verdict needs to know of an exercise, as data (tolerances, the forbidden operations, the
  output judge of a random answer, the access check, the argument names), from an :class:`Exercise` or from the
  class edition's stored data; no answer in it.
- :func:`problems`: what is wrong with one plain observation (:func:`course_lib.exercises.observation.
  plain_observation`) against the reference's: output, inputs written into, aliasing, gradients, training mode,
  forbidden operations, the record of what ran, how the input was read.
- :class:`KnownMistake` and :func:`find_mistake`: the known mistake whose own observation goes wrong the same way
  (the same output, gradients, output in training mode, or way of reading the input); its observations are run
  here (:func:`known_mistakes`) or stored.
- :func:`judge_observation`, :func:`judge_error`: one case's :class:`Finding` (its status, kind, messages, hint and
  the hint's code-level detail), and :func:`run_cases`, the check of an implementation on a list of cases.

Example:
    >>> import torch
    >>> from course_lib.exercises.core import Case, Exercise
    >>> ex = Exercise(name="double", notebook="x", points=1, reference=lambda x: x * 2, public_cases=[],
    ...               hidden_cases=[])
    >>> case = Case("ones", args=(torch.ones(2),))
    >>> rules = Rules.from_exercise(ex)
    >>> from course_lib.exercises.observation import observe, plain_observation
    >>> expected = plain_observation(observe(ex.reference, case))
    >>> got = plain_observation(observe(lambda x: x * 3, case, trace=True))
    >>> judge_observation(rules, case, 0, expected, got, [torch.ones(2).numpy()], []).kind
    'output'
"""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .compare import compare_outputs, to_plain
from .observation import WeightsMismatchError, argument_names, observe, plain_observation, same_plain
from .tracing import matching_ops

__all__ = ["PASSED", "FAILED", "NOT_IMPLEMENTED", "NOT_DEFINED", "ERROR", "INVALID", "CheckResult", "Rules",
           "Problem", "problems", "output_problems", "KnownMistake", "known_mistakes", "find_mistake", "Finding",
           "judge_observation", "judge_error", "run_cases", "check_exercise", "inputs_as_plain",
           "reference_observation", "kind_hint", "KIND_HINTS", "WEIGHTS_HINT", "FORBIDDEN_CALL_HINT",
           "NOT_DIFFERENTIABLE_HINT", "modified_problem", "disconnected_problem", "quoted_code"]

PASSED, FAILED, NOT_IMPLEMENTED, ERROR, INVALID = "passed", "failed", "not implemented yet", "error", "invalid"
NOT_DEFINED = "not defined"

# --- hints -------------------------------------------------------------------------------------------------------

NOT_DIFFERENTIABLE_HINT = (
    "stay in torch operations: .item(), .tolist(), .numpy(), float() and torch.tensor(...) cut the graph, "
    "and an in-place write into a tensor autograd still needs (w[mask] = 0 after a softmax) breaks backward; "
    "use torch.where or masked_fill, which return new tensors.")
WEIGHTS_HINT = ("keep the layers the stub's __init__ creates, with the same names and sizes (self.w_q, ...): the "
                "check gives your module the course's weights by name, so that equal code gives equal numbers.")
FORBIDDEN_CALL_HINT = ("this exercise asks you to build the function from smaller operations: the check sees "
                       "which of PyTorch's operations ran, so the library function that does it all counts "
                       "whatever name it is reached by.")

#: The seed of an observation when the exercise names none: every entry point observes a call's random draws (a
#: mistake's dropout left on in eval mode) from the same state, so that stored and fresh observations agree.
OBSERVATION_SEED = 0

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
    "weights": WEIGHTS_HINT,
}


def kind_hint(rules: Any, kind: str) -> str:
    """The hint for a kind of problem (:data:`KIND_HINTS`); for a forbidden call or operation, the exercise's own
    ``forbidden_hint`` when it has one (what to build instead of the PyTorch function it refuses)."""
    if kind == "forbidden" and getattr(rules, "forbidden_hint", ""):
        return str(rules.forbidden_hint)
    return KIND_HINTS.get(kind, "")


def _shape_hint(problem: str) -> str:
    if "contains NaN" in problem:
        return ("NaN usually comes from exp() of a large number, from 0/0, or from a softmax over a row that "
                "is entirely -inf.")
    if "expected shape" in problem:
        return "compare the shapes step by step (print x.shape after each line)."
    if "boolean" in problem:
        return "return a torch.bool tensor: comparisons such as a <= b give one."
    return ""


# --- what a verdict knows of an exercise --------------------------------------------------------------------------

@dataclass(frozen=True)
class Rules:
    """What judging an exercise needs, as data: no reference, no mistake's code (the class edition holds this).

    ``compare``: the output judge of an exercise whose answer is random (``Exercise.compare``); ``access_check``:
    how the answer must read its input (``Exercise.access_check``); ``argument_names``: the reference's positional
    parameters (to name an input that was written into).
    """

    name: str
    atol: float
    rtol: float
    argument_names: tuple[str, ...] = ()
    compare: Callable[[Any, Any, Any], list[str]] | None = None
    forbidden_calls: tuple[str, ...] = ()
    forbidden_ops: tuple[str, ...] = ()
    forbidden_hint: str = ""
    access_check: Callable[[Callable[..., Any], Any], list[str]] | None = None
    differentiable: bool = False
    train_mode: bool = False
    seed: int | None = None

    @classmethod
    def from_exercise(cls, exercise: Any) -> Rules:
        return cls(name=exercise.name, atol=float(exercise.atol), rtol=float(exercise.rtol),
                   argument_names=tuple(_positional_names(exercise.reference)), compare=exercise.compare,
                   forbidden_calls=tuple(exercise.forbidden_calls), forbidden_ops=tuple(exercise.forbidden_ops),
                   forbidden_hint=str(exercise.forbidden_hint), access_check=exercise.access_check,
                   differentiable=bool(exercise.differentiable), train_mode=bool(exercise.train_mode),
                   seed=OBSERVATION_SEED if exercise.seed is None else exercise.seed)

    def names(self, case: Any) -> list[str]:
        """The names of ``case``'s inputs, positional then keyword (sorted), as observations list them."""
        n = len(tuple(case.args))
        given = list(self.argument_names)
        return [given[i] if i < len(given) else f"argument {i + 1}" for i in range(n)] + sorted(case.kwargs)

    def observe(self, impl: Callable[..., Any], case: Any, trace: bool = False,
                ignore_threads: frozenset[int] = frozenset()) -> dict[str, Any]:
        """``impl``'s plain observation on ``case`` as the exercise asks it made (raises what ``impl`` raises)."""
        return plain_observation(observe(impl, case, differentiable=self.differentiable, seed=self.seed,
                                         train_mode=self.train_mode, watch=self.forbidden_calls, trace=trace,
                                         ignore_threads=ignore_threads,
                                         access=self.access_check if trace else None))


def _positional_names(reference: Any) -> list[str]:
    names = argument_names(reference, 64)
    return [n for n in names if not n.startswith("argument ")]


def reference_observation(exercise: Any, case: Any) -> dict[str, Any]:
    """The reference's plain observation on ``case``: what a learner's is judged against (stored by the class
    edition, computed by the grader and the checks)."""
    return Rules.from_exercise(exercise).observe(exercise.reference, case)


def inputs_as_plain(case: Any) -> list[Any]:
    """A case's inputs as plain data, positional then keyword (sorted), as observations record them after."""
    return to_plain([*case.args, *[case.kwargs[k] for k in sorted(case.kwargs)]])


# --- the problems of one observation -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Problem:
    """One thing wrong with an observation: its kind (``output``, ``modified``, ``gradient`` (none flows back),
    ``gradient-values`` (they flow, wrong), ``alias``, ``train``, ``forbidden``, ``record``, ``access`` (read
    its input otherwise than asked, see ``Exercise.access_check``) and what to tell the learner."""

    kind: str
    message: str


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def output_problems(rules: Any, case: Any, expected: Any, got: Any) -> list[str]:
    """What is wrong with the plain output ``got`` (nothing: it is right): equality with the reference's output
    ``expected`` (:func:`~course_lib.exercises.compare.compare_outputs`), or the exercise's own ``compare`` for an
    exercise whose answer is random."""
    if rules.compare is not None:
        try:
            return [str(problem) for problem in rules.compare(case, expected, got)]
        except Exception as err:  # noqa: BLE001 - an output the judge cannot read is a wrong output
            return [f"output: could not be judged ({type(err).__name__}: {str(err)[:200]})"]
    return compare_outputs(expected, got, rules.atol, rules.rtol)


def modified_problem(names: Sequence[str], before: Sequence[Any], after: Any) -> Problem | None:
    """The inputs (by name) that a call wrote into: ``before`` the case's plain inputs, ``after`` as it left them."""
    after = _list(after)
    changed = [names[i] if i < len(names) else f"argument {i + 1}" for i, value in enumerate(before)
               if i >= len(after) or not same_plain(value, after[i])]
    if not changed:
        return None
    return Problem("modified", f"your code changed its input {', '.join(repr(n) for n in changed)} in place; "
                               "the caller's tensor must stay as it was")


def disconnected_problem(want_connected: Sequence[Any], got_connected: Any) -> Problem | None:
    """An output that carries no graph where the reference's does (it was computed off autograd)."""
    got_connected = _list(got_connected)
    if any(w is True and (i >= len(got_connected) or got_connected[i] is not True)
           for i, w in enumerate(want_connected)):
        return Problem("gradient", "your output is not connected to the inputs' gradients (it was computed off "
                                   "the autograd graph): the numbers are right but a model trained through it "
                                   "would not learn")
    return None


def _forbidden(rules: Any, trace: Any, threads: bool) -> list[Problem]:
    """What a trace shows of the operations and functions the exercise asks the learner to do without."""
    if not isinstance(trace, dict):
        return [Problem("record", "no record of what your code ran came back (the grader's record was "
                                  "removed or never made)")]
    found = []
    ops = [str(o)[:100] for o in _list(trace.get("ops"))][:10_000]
    hit = matching_ops(ops, tuple(getattr(rules, "forbidden_ops", ())))
    calls = sorted({str(c)[:100] for c in _list(trace.get("calls"))})[:20]
    if hit or calls:
        what = ", ".join(calls + hit[:4])
        found.append(Problem("forbidden", f"your code ran {what}, which this exercise asks you to build "
                                          f"yourself from smaller operations (whatever name reached it)"))
    tampering = sorted({str(t)[:100] for t in _list(trace.get("tampering"))})[:5]
    count = trace.get("threads")
    if tampering or trace.get("complete") is not True:
        found.append(Problem("record", "the record of what your code ran was switched off, or your code "
                                       "started a thread or a process, while it ran" + (
                                           f" (it called {', '.join(tampering)})" if tampering else "")))
    elif threads and isinstance(count, int) and not isinstance(count, bool) and count > 0:
        found.append(Problem("record", f"{count} other thread(s) ran beside your code while it was "
                                       f"checked: an exercise's function must do its work itself"))
    return found


def problems(rules: Rules, case: Any, expected: dict[str, Any], got: Any, inputs_before: list[Any],
             traced: bool = True, threads: bool = True) -> list[Problem]:
    """What is wrong with the learner's plain observation ``got`` on ``case`` against the reference's
    ``expected`` (both from :func:`~course_lib.exercises.observation.plain_observation`); ``inputs_before``: the
    case's inputs as plain data. ``threads``: other threads alive during the call count against it (the grader's
    sandbox, whose runner has none; a Jupyter kernel has its own, so the checks in a kernel pass False).

    Runs where the verdict is made, on untrusted data: anything malformed is a problem, never an exception.
    """
    if not isinstance(got, dict):
        return [Problem("output", "no observation came back")]
    if traced:
        found = _forbidden(rules, got.get("trace"), threads)
        if found:
            return found
    wrong = [Problem("output", p) for p in output_problems(rules, case, expected.get("output"), got.get("output"))]
    if wrong:
        return wrong
    if rules.access_check is not None:
        access = got.get("access")
        if not isinstance(access, list):
            return [Problem("record", "no record of how your code read its input came back")]
        if access:
            return [Problem("access", str(access[0])[:300])]
    modified = modified_problem(rules.names(case), inputs_before, got.get("inputs_after"))
    if modified is not None:
        return [modified]
    if set(_list(got.get("aliases"))) - set(_list(expected.get("aliases"))):
        return [Problem("alias", "your output is one of the inputs itself (the same memory, not a new tensor): "
                                 "a change to one would change the other")]
    found = _gradient_problems(rules, expected, got)
    if not found and expected.get("train_output") is not None:
        found += [Problem("train", "in training mode (dropout on, same seed): " + p) for p in compare_outputs(
            expected["train_output"], got.get("train_output"), rules.atol, rules.rtol)]
    return found


def _gradient_problems(rules: Rules, expected: dict[str, Any], got: dict[str, Any]) -> list[Problem]:
    """Gradients must flow where the reference's do, and (for a deterministic exercise) equal them."""
    if expected.get("grads") is None:
        return []
    error = got.get("gradient_error")
    if isinstance(error, str) and error:
        return [Problem("gradient", error[:400])]
    disconnected = disconnected_problem(_list(expected.get("connected")), got.get("connected"))
    if disconnected is not None:
        return [disconnected]
    pairs = [(f"the gradient of input {i + 1}", e, g) for i, (e, g) in enumerate(
        zip(_list(expected.get("grads")), _list(got.get("grads")) + [None] * len(_list(expected.get("grads"))),
            strict=False))]
    weights = expected.get("param_grads") or {}
    got_weights = got.get("param_grads") if isinstance(got.get("param_grads"), dict) else {}
    pairs += [(f"the gradient of weight {k}", e, got_weights.get(k)) for k, e in sorted(weights.items())]
    for where, e, g in pairs:
        problem = _one_gradient(rules, where, e, g)
        if problem:
            kind = "gradient" if "no gradient flows" in problem or "not finite" in problem else "gradient-values"
            return [Problem(kind, problem)]
    return []


def _one_gradient(rules: Rules, where: str, expected: Any, got: Any) -> str:
    flows = expected is not None and isinstance(expected, np.ndarray) and bool(np.any(expected != 0))
    if not flows:
        return ""
    if got is None:
        return (f"{where}: no gradient flows back to it (the result is right, but training through it would not "
                f"reach it)")
    if rules.compare is not None:  # a random answer: gradients must flow, their values are random too
        ok = isinstance(got, np.ndarray) and got.dtype.kind == "f" and bool(np.isfinite(got).all())
        return "" if ok else f"{where}: not finite numbers"
    scale = max(1.0, float(np.abs(expected).max()))
    found = compare_outputs(expected, got, rules.atol * 10 * scale, rules.rtol * 10, where)
    return found[0] if found else ""


# --- known mistakes -----------------------------------------------------------------------------------------------

@dataclass
class KnownMistake:
    """A known mistake as a verdict sees it: its hint in two steps and its own observation of each case
    (``observed(index, case)``: a plain observation, ``{"raised": the exception's name}`` when the mistake raises
    on that case, or None when nothing is known of it), run in this process or stored."""

    name: str
    hint: str
    detail: str
    observed: Callable[[int, Any], dict[str, Any] | None]


def known_mistakes(exercise: Any, rules: Rules) -> list[KnownMistake]:
    """An exercise's mistakes, each observed here when a verdict asks (once per case)."""
    def observer(impl: Callable[..., Any]) -> Callable[[int, Any], dict[str, Any] | None]:
        seen: dict[int, dict[str, Any] | None] = {}

        def observed(index: int, case: Any) -> dict[str, Any] | None:
            if index not in seen:
                seen[index] = mistake_observation(rules, impl, case)
            return seen[index]
        return observed
    return [KnownMistake(m.name, m.hint, m.detail, observer(m.impl)) for m in exercise.mistakes]


def mistake_observation(rules: Rules, impl: Callable[..., Any], case: Any) -> dict[str, Any]:
    """A known mistake's plain observation of ``case`` (its access check's findings included), or, when it raises
    on the case, ``{"raised": the exception's name}``: a crash can be a known mistake too (the learning-rate
    schedule without its step-0 guard divides by zero), named by :func:`judge_error`."""
    try:
        found = rules.observe(impl, case)
        if rules.access_check is not None:
            found["access"] = [str(p)[:300] for p in rules.access_check(impl, case)][:10]
        return found
    except Exception as err:  # noqa: BLE001 - a mistake that raises on this case is known by what it raises
        return {"raised": type(err).__name__}


def _problem_kinds(found: list[str]) -> set[str]:
    """The kinds of a ``compare`` function's problems: the text before the first colon of each."""
    return {problem.split(":", 1)[0] for problem in found}


def _dtype_kinds(value: Any) -> list[str]:
    """The dtype kind of every array in a plain output, in order (so a float output never matches a bool one)."""
    if isinstance(value, list):
        return [kind for item in value for kind in _dtype_kinds(item)]
    return [value.dtype.kind] if isinstance(value, np.ndarray) else [type(value).__name__]


def _access_kind(found: Any) -> str:
    """The kind of the first problem an access check found ("" for none): the text before its colon."""
    return str(found[0]).split(":", 1)[0] if isinstance(found, list) and found else ""


#: Which part of an observation a kind of problem is about, to find the known mistake that shows the same.
_ASPECT = {"output": "output", "gradient-values": "grads", "train": "train_output", "access": "access"}


def _same(rules: Rules, case: Any, kind: str, expected: dict[str, Any], wrong: dict[str, Any],
          got: dict[str, Any]) -> bool:
    """Whether a mistake's observation ``wrong`` goes wrong as the learner's ``got`` does, in ``kind``."""
    aspect = _ASPECT[kind]
    if kind == "access":
        return bool(_access_kind(got.get(aspect))) and _access_kind(wrong.get(aspect)) == _access_kind(got.get(aspect))
    if kind == "output" and rules.compare is not None:  # a random answer: the same kinds of problems
        learner = _problem_kinds(output_problems(rules, case, expected.get("output"), got.get("output")))
        return bool(learner) and _problem_kinds(
            output_problems(rules, case, expected.get("output"), wrong.get("output"))) == learner
    if wrong.get(aspect) is None:
        return False
    if kind == "output" and _dtype_kinds(wrong[aspect]) != _dtype_kinds(got.get(aspect)):
        return False
    return not compare_outputs(wrong[aspect], got.get(aspect), rules.atol, rules.rtol)


def find_mistake(rules: Rules, case: Any, index: int, expected: dict[str, Any], got: dict[str, Any], kind: str,
                 mistakes: Sequence[KnownMistake]) -> KnownMistake | None:
    """The first known mistake that goes wrong the same way as the learner's observation ``got`` on case
    ``index``: the same output (``kind`` "output"), gradients, output in training mode, or way of reading the
    input. None for another kind, or when no mistake matches."""
    if kind not in _ASPECT:
        return None
    for mistake in mistakes:
        try:
            wrong = mistake.observed(index, case)
            if isinstance(wrong, dict) and "raised" not in wrong and _same(rules, case, kind, expected, wrong, got):
                return mistake
        except Exception:  # noqa: BLE001 - a mistake that cannot be compared says nothing about it
            continue
    return None


# --- one case's finding, and an implementation's check -------------------------------------------------------------

@dataclass(frozen=True)
class Finding:
    """What one case shows: a status (failed, error, not implemented yet), the kind of problem (a
    :class:`Problem`'s, or ``weights``/``raised``/``not-implemented`` for an exception), the messages, the hint,
    its code-level detail and the known mistake it names ("" for none)."""

    status: str
    kind: str
    messages: tuple[str, ...]
    hint: str = ""
    detail: str = ""
    mistake: str = ""
    every_problem: tuple[str, ...] = ()  # every problem found, of every kind (the grader's report lists them)


def judge_observation(rules: Rules, case: Any, index: int, expected: dict[str, Any], got: Any,
                      inputs_before: list[Any], mistakes: Sequence[KnownMistake], threads: bool = False,
                      traced: bool = True) -> Finding | None:
    """The finding of one case (None: it passed): the problems of ``got`` against ``expected`` and, for the first
    kind found, the known mistake that shows the same, or the kind's own hint."""
    try:
        found = problems(rules, case, expected, got, inputs_before, traced=traced, threads=threads)
    except Exception as err:  # noqa: BLE001 - whatever came back, it is a wrong answer, not a crash
        found = [Problem("output", f"the output could not be compared ({type(err).__name__})")]
    if not found:
        return None
    kind = found[0].kind
    mistake = find_mistake(rules, case, index, expected, got, kind, mistakes) if isinstance(got, dict) else None
    messages = tuple(p.message for p in found if p.kind == kind)
    hint = mistake.hint if mistake is not None else kind_hint(rules, kind)
    if kind == "output":
        hint = hint or _shape_hint(messages[0])
    return Finding(FAILED, kind, messages, hint, mistake.detail if mistake is not None else "",
                   mistake.name if mistake is not None else "", tuple(p.message for p in found))


def judge_error(ename: str, text: str, where: str = "", case: Any = None, index: int = 0,
                mistakes: Sequence[KnownMistake] = ()) -> Finding:
    """The finding of case ``index`` (``case``) whose call raised ``ename`` (its message ``text``; ``where``: the
    learner's line): not implemented yet, the module's weights refused, or an error, named by the first known
    mistake that raises the same exception on that case (its hint then goes with it)."""
    if ename == "NotImplementedError":
        return Finding(NOT_IMPLEMENTED, "not-implemented",
                       ("replace `raise NotImplementedError()` with your code, then run this cell again.",))
    if ename == WeightsMismatchError.__name__:
        return Finding(FAILED, "weights", (text,), WEIGHTS_HINT)
    message = f"your code raised {ename}: {text}" + (f"\n{where}" if where else "")
    mistake = _crash_mistake(ename, case, index, mistakes) if case is not None else None
    if mistake is None:
        return Finding(ERROR, "raised", (message,))
    return Finding(ERROR, "raised", (message,), mistake.hint, mistake.detail, mistake.name)


def _crash_mistake(ename: str, case: Any, index: int, mistakes: Sequence[KnownMistake]) -> KnownMistake | None:
    """The first known mistake that raises ``ename`` on case ``index`` too."""
    for mistake in mistakes:
        try:
            wrong = mistake.observed(index, case)
        except Exception:  # noqa: BLE001 - a mistake that cannot be observed says nothing about it
            continue
        if isinstance(wrong, dict) and wrong.get("raised") == ename:
            return mistake
    return None


def quoted_code(code: str, offset: int | None = None) -> str:
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
    """The innermost traceback line that is the learner's code (not torch's, not the exercise mechanism's): "at
    line N:" and the code on its own line."""
    for fr in reversed(traceback.extract_tb(err.__traceback__)):
        name = fr.filename.replace("\\", "/")
        if "/torch/" in name or "/course_lib/exercises/" in name:
            continue
        quoted = quoted_code(fr.line or "")
        return f"at line {fr.lineno}:{quoted}" if quoted else f"at line {fr.lineno}"
    return ""


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
    kind: str = ""  # the kind of problem found (a Problem's kind, or weights/raised/not-implemented)
    mistake: str = ""  # the known mistake named ("" for none)
    findings: list[Finding] = field(default_factory=list, repr=False)

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


def _result(name: str, finding: Finding, label: str, index: int, total: int) -> CheckResult:
    if finding.status == NOT_IMPLEMENTED:
        return CheckResult(name, NOT_IMPLEMENTED, finding.messages[0], cases_total=total, kind=finding.kind)
    return CheckResult(name, finding.status, "\n".join(finding.messages), label, finding.hint, index, total,
                       finding.detail, finding.kind, finding.mistake)


def invalid(name: str, impl: Any, is_class: bool, total: int) -> CheckResult | None:
    """The verdict for something that is not an implementation to check (None when ``impl`` is one)."""
    kind = "class (pass the class itself, not an instance)" if is_class else "function"
    if impl is None or not callable(impl) or (is_class and not inspect.isclass(impl)):
        from .compare import describe_value

        return CheckResult(name, INVALID, f"check({name!r}, ...) expected your {kind}, got {describe_value(impl)}.",
                           cases_total=total, kind="invalid")
    return None


def run_cases(rules: Rules, impl: Any, cases: Sequence[Any], expected: Callable[[int, Any], dict[str, Any]],
              mistakes: Sequence[KnownMistake], is_class: bool) -> CheckResult:
    """Check ``impl`` on ``cases`` in this process (the notebook's check, the class edition's, the authoring
    helpers'): each case observed with what ran traced and the access check run, judged against ``expected(index,
    case)`` (the reference's plain observation, run here or stored); the first case that fails decides."""
    total = len(cases)
    bad = invalid(rules.name, impl, is_class, total)
    if bad is not None:
        return bad
    for i, case in enumerate(cases):
        try:
            got = rules.observe(impl, case, trace=True)
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # noqa: BLE001 - a learner's error (even sys.exit()) becomes a verdict
            finding = judge_error(type(err).__name__, str(err), _user_frame(err), case, i,
                                  mistakes if isinstance(err, Exception) else ())
            return _result(rules.name, finding, case.label, i, total)
        finding = judge_observation(rules, case, i, expected(i, case), got, inputs_as_plain(case), mistakes,
                                    threads=False)  # a kernel has threads of its own
        if finding is not None:
            return _result(rules.name, finding, case.label, i, total)
    return CheckResult(rules.name, PASSED, cases_passed=total, cases_total=total)


def check_exercise(exercise: Any, impl: Any, which: str = "public", seed: int = 0) -> CheckResult:
    """Check ``impl`` against ``exercise`` on its ``which`` cases (``public``, or ``hidden`` drawn with ``seed``),
    the reference and the known mistakes run in this process: the notebook's check and the authoring helpers."""
    rules = Rules.from_exercise(exercise)
    cases = exercise.cases(which, seed=seed)
    expected: dict[int, dict[str, Any]] = {}

    def reference(index: int, case: Any) -> dict[str, Any]:
        if index not in expected:
            expected[index] = rules.observe(exercise.reference, case)
        return expected[index]
    return run_cases(rules, impl, cases, reference, known_mistakes(exercise, rules), exercise.is_class)
