"""Declaring an exercise: one declaration serves the in-notebook check, the tests and the grading command.

An :class:`Exercise` names the reference implementation (which lives in ``course_lib``), the public cases
a learner's check runs, the hidden cases only the grading command runs, and the known mistakes: wrong
implementations that double as diagnosis (a learner whose output equals a mistake's output is shown that
mistake's hint) and as test fixtures (the tests assert that the check rejects every one of them).

Example (the warm-up exercise of notebook 00)::

    from course_lib.exercises import Case, Exercise, Mistake, register

    def cases(gen):
        return [Case("three logits", args=(torch.tensor([1.0, 2.0, 3.0]),))]

    register(Exercise(
        name="stable_softmax", notebook="00_welcome", points=1,
        reference=course_lib.models.softmax.stable_softmax,
        public_cases=cases, hidden_cases=cases,
        mistakes=[Mistake("no shift", naive_softmax, "Subtract the maximum before exp().")],
    ))

Everything a case holds is plain data (tensors, numbers, strings, booleans, None, and lists, tuples and
dicts of them), so that the grading command can ship hidden cases into a student's kernel as arrays and
never as pickles.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import math
import pkgutil
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = [
    "InputModifiedError",
    "NotDifferentiableError",
    "ForbiddenCallError",
    "forbid_calls",
    "Case",
    "Mistake",
    "Exercise",
    "ExerciseDefinitionError",
    "register",
    "validate_exercise",
    "add_exercise_package",
    "get_exercise",
    "registered_exercises",
    "run_case",
    "validate_plain",
]


class ExerciseDefinitionError(ValueError):
    """An exercise declaration is inconsistent (raised when it is declared, never at grading time)."""


@dataclass(frozen=True)
class Case:
    """One input on which a learner's implementation is compared with the reference.

    Attributes:
        label: a short description shown to the learner ("causal mask, seq_q != seq_k").
        args: positional arguments of the call (or of ``forward`` for a module exercise).
        kwargs: keyword arguments of the call.
        init: for a class exercise, the constructor's keyword arguments (``None`` for a function).
        state: for an ``nn.Module`` exercise, the weights loaded into the learner's module and the
            reference's alike (a ``state_dict``), so that equal code gives equal numbers.
    """

    label: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    init: Mapping[str, Any] | None = None
    state: Mapping[str, torch.Tensor] | None = None


@dataclass(frozen=True)
class Mistake:
    """A plausible wrong implementation and what a learner whose output matches it should read, in two steps.

    Attributes:
        name: a short name of the mistake (reports, tests).
        impl: the wrong implementation.
        hint: the first step: names the mistake and the idea that fixes it, without the code (the tests
            check that it holds none), so that the learner still writes the fix.
        detail: the second step, shown when the learner runs the check again with the same mistake: the fix
            at the level of code (which call, which slice). Empty when the hint says all there is.
    """

    name: str
    impl: Callable[..., Any]
    hint: str
    detail: str = ""


CaseSource = Callable[[torch.Generator], Sequence[Case]] | Sequence[Case]


@dataclass(eq=False)
class Exercise:
    """The declaration of one exercise.

    Attributes:
        name: unique identifier, also the ``course.exercise`` metadata of the notebook cells.
        notebook: the notebook it belongs to (``"01_attention"``) or the assignment's name.
        points: what the grading command awards when every hidden case passes.
        reference: the course's implementation, a function or a class (``nn.Module``).
        public_cases: cases for the in-notebook check, or a function ``gen -> cases`` called with a
            generator seeded with 0.
        hidden_cases: cases for the grading command only, or a function ``gen -> cases`` that the grader
            calls with a generator seeded secretly per submission.
        mistakes: known wrong implementations with hints; the tests assert each one is rejected.
        also_correct: correct implementations written differently; the tests assert each is accepted.
        atol, rtol: tolerance of the comparison (``torch.allclose`` semantics).
        summary: one sentence saying what the learner implements (shown in reports).
        differentiable: the result is trained through in the notebooks, so it must carry gradients: the
            checks make the floating-point inputs require grad, run the case and backpropagate through the
            output (see :func:`run_case`). Catches ``.item()``/``.numpy()``/``torch.tensor(...)`` that cut the
            graph and in-place writes that autograd refuses, which give the right numbers but fail in training.
        forbidden_calls: dotted names of functions the learner is asked to do without (``"torch.softmax"``
            in the exercise that writes a softmax): the check and the grader spot a call of any of them in
            the record of what ran, whatever name reached it (:mod:`course_lib.exercises.tracing`);
            :func:`run_case` also switches them off by name while it runs (:func:`forbid_calls`).
        forbidden_ops: parts of PyTorch operator names (``"softmax"`` matches ``aten::_softmax`` and
            ``aten::_log_softmax``) that the learner's code must not run: judged from what ran, whatever
            name reached it (:mod:`course_lib.exercises.tracing`); ``forbidden_calls`` are spotted the same way.
        train_mode: for a module with dropout, the output in training mode (seeded) must equal the
            reference's too, so that dropout sits where the exercise says (eval mode alone cannot tell).
        seed: for an exercise whose answer is random (BERT's masking draws which tokens to hide): PyTorch's
            global random generator is seeded with this before each call (and restored afterwards), so that
            a check gives the same verdict every time. Such an exercise also needs ``compare``.
        compare: how an output is judged when equality with the reference's cannot be asked for (a random
            answer): ``compare(case, expected, got)`` with the plain outputs (see ``to_plain``) returns the
            problems found, each ``"what: details"``, none when the output is right. ``None``: the output
            must equal the reference's within ``atol``/``rtol``. It runs in the grader's own process on the
            untrusted output, so it must accept any plain value without raising.
        forbidden_hint: what the learner reads when the record shows a forbidden call or operation: what to
            build instead (default: the generic :data:`~course_lib.exercises.verdict.FORBIDDEN_CALL_HINT`).
        access_check: for an exercise about *how* a result is computed, when the output cannot tell (an online
            softmax equals a two-pass one): ``access_check(impl, case)`` calls the implementation once more on
            the case under its own instrumentation and returns the problems found, each ``"kind: message"``
            (:func:`course_lib.exercises.passes.row_reads`). A module-level function: the grader names it to
            its sandbox, which runs it beside the observation (:func:`~course_lib.exercises.observation.observe`).
    """

    name: str
    notebook: str
    points: float
    reference: Callable[..., Any]
    public_cases: CaseSource
    hidden_cases: CaseSource
    mistakes: Sequence[Mistake] = ()
    also_correct: Sequence[Callable[..., Any]] = ()
    atol: float = 1e-5
    rtol: float = 1e-4
    summary: str = ""
    differentiable: bool = False
    forbidden_calls: Sequence[str] = ()
    forbidden_ops: Sequence[str] = ()
    train_mode: bool = False
    seed: int | None = None
    compare: Callable[[Case, Any, Any], list[str]] | None = None
    forbidden_hint: str = ""
    access_check: Callable[[Callable[..., Any], Case], list[str]] | None = None
    declared_in: str = field(default="", repr=False)

    @property
    def is_class(self) -> bool:
        """True when learners implement a class (constructed with ``Case.init``), not a function."""
        return inspect.isclass(self.reference)

    def cases(self, which: str = "public", seed: int = 0) -> list[Case]:
        """The public or hidden cases, generated with a ``torch.Generator`` seeded with ``seed``."""
        if which not in ("public", "hidden"):
            raise ValueError(f"cases: which must be 'public' or 'hidden', got {which!r}")
        source = self.public_cases if which == "public" else self.hidden_cases
        if callable(source):
            gen = torch.Generator().manual_seed(seed)
            produced = source(gen)
        else:
            produced = source
        cases = list(produced)
        for case in cases:
            if not isinstance(case, Case):
                raise ExerciseDefinitionError(
                    f"exercise {self.name!r}: {which} cases must be Case objects, got {type(case).__name__}"
                )
        return cases


_REGISTRY: dict[str, Exercise] = {}


def validate_plain(value: Any, where: str) -> None:
    """Raise :class:`ExerciseDefinitionError` unless ``value`` is plain data (see the module docstring)."""
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ExerciseDefinitionError(f"{where}: non-finite number {value!r}")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            validate_plain(item, f"{where}[{i}]")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ExerciseDefinitionError(f"{where}: dict keys must be strings, got {key!r}")
            validate_plain(item, f"{where}[{key!r}]")
        return
    raise ExerciseDefinitionError(
        f"{where}: cases may hold tensors, numbers, strings, booleans, None, lists, tuples and dicts; "
        f"got {type(value).__name__}"
    )


class InputModifiedError(Exception):
    """The implementation wrote into one of its inputs (``x -= m``, ``t[t == eos] = pad``...).

    The caller's tensor would change behind its back (notebook 06's loss would then read a target whose
    ``<eos>`` was overwritten), so a case whose inputs changed fails, whatever the output.
    """


class NotDifferentiableError(Exception):
    """The output gives the right numbers but gradients cannot flow back through it (see ``differentiable``)."""


class ForbiddenCallError(Exception):
    """The implementation called a function that the exercise asks the learner to write without."""


def _owner_and_attribute(dotted: str) -> tuple[Any, str]:
    """The object holding the last part of ``dotted`` (a module or a class) and that part's name."""
    from .tracing import owner_and_attribute

    found = owner_and_attribute(dotted)
    if found is None:
        raise ExerciseDefinitionError(f"forbidden call {dotted!r} is not a dotted name of a module attribute")
    return found


@contextlib.contextmanager
def forbid_calls(names: Sequence[str], impl: Any = None) -> Iterator[None]:
    """Replace the functions ``names`` (``"torch.softmax"``, ``"torch.Tensor.softmax"``) by a tripwire.

    The tripwire raises :class:`ForbiddenCallError` naming the function. Names the learner's function
    bound to the same objects in its own module (``from torch.nn.functional import softmax``) are replaced
    too. Everything is restored on exit. This is an early, friendly message, not a defence: the verdict on
    shortcuts comes from what ran (:mod:`course_lib.exercises.tracing`), whatever name reached it.
    """
    if not names:
        yield
        return
    undo: list[tuple[Any, str, Any]] = []
    tripwires: dict[int, _Tripwire] = {}
    try:
        for dotted in names:
            owner, attribute = _owner_and_attribute(dotted)
            original = getattr(owner, attribute)
            own = attribute in vars(owner)  # False for a method Tensor inherits from its C base
            tripwires[id(original)] = wire = _Tripwire(dotted)
            undo.append((owner, attribute, original if own else _INHERITED))
            setattr(owner, attribute, wire)
        target = getattr(impl, "forward", impl) if inspect.isclass(impl) else impl
        module_globals = getattr(inspect.unwrap(target), "__globals__", None) if callable(target) else None
        if isinstance(module_globals, dict):
            for key, value in list(module_globals.items()):
                if id(value) in tripwires:
                    undo.append((module_globals, key, value))
                    module_globals[key] = tripwires[id(value)]
        yield
    finally:
        for owner, attribute, original in reversed(undo):
            if isinstance(owner, dict):
                owner[attribute] = original
            elif original is _INHERITED:
                delattr(owner, attribute)
            else:
                setattr(owner, attribute, original)


_INHERITED = object()


class _Tripwire:
    """Stands in for a forbidden function: calling it raises :class:`ForbiddenCallError`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise ForbiddenCallError(f"your code calls {self.name}, which this exercise asks you to write "
                                 f"yourself from smaller operations")


def run_case(impl: Callable[..., Any], case: Case, differentiable: bool = False, forbidden: Sequence[str] = (),
             seed: int | None = None) -> Any:
    """Call ``impl`` on ``case`` and return its output; raise on the problems a single call shows.

    A class is constructed first (``case.init``), given ``case.state``'s weights and put in eval mode.
    Inputs are copied for the call: one that the implementation changed raises
    :class:`InputModifiedError`. With ``differentiable``, a floating output that carries no gradient back to
    the inputs (or the module's weights) raises :class:`NotDifferentiableError`. The functions named in
    ``forbidden`` raise :class:`ForbiddenCallError` while it runs (:func:`forbid_calls`). With ``seed``,
    PyTorch's global generator is seeded for the call and restored afterwards. The messages are the verdict's
    (:mod:`course_lib.exercises.verdict`), which judges everything else a check judges from the same observation.
    """
    from .compare import to_plain
    from .observation import argument_names, observe
    from .verdict import disconnected_problem, inputs_as_plain, modified_problem

    with forbid_calls(forbidden, impl):
        obs = observe(impl, case, differentiable=differentiable, seed=seed)
    names = [*argument_names(impl, len(case.args)), *sorted(case.kwargs)]
    modified = modified_problem(names, inputs_as_plain(case), to_plain(list(obs.inputs_after)))
    if modified is not None:
        raise InputModifiedError(modified.message + " (compute a new tensor: x = x - m, not x -= m; clone() "
                                 "before assigning into a copy)")
    if differentiable:
        cut = disconnected_problem([True] * len(obs.connected), list(obs.connected))
        nothing_flows = obs.grads is not None and obs.grads and all(g is None for g in obs.grads) \
            and not any(g is not None for g in (obs.param_grads or {}).values())
        if obs.gradient_error or cut is not None or nothing_flows:
            raise NotDifferentiableError(obs.gradient_error or (cut.message if cut is not None else
                                                                "no gradient reaches any input or weight"))
    return obs.output


def register(exercise: Exercise) -> Exercise:
    """Add an exercise to the registry after the cheap checks of its declaration; returns it.

    Raises :class:`ExerciseDefinitionError` at once for a name that is not an identifier or is already used
    by another module, a missing or non-callable reference, or non-positive points. Registering is cheap on
    purpose (a notebook's first check imports the declaring module): running the reference on every case
    is :func:`validate_exercise`'s work, which the tests do for every registered exercise.
    """
    name = exercise.name
    if not isinstance(name, str) or not name.isidentifier():
        raise ExerciseDefinitionError(f"exercise name must be a Python identifier, got {name!r}")
    if exercise.reference is None or not callable(exercise.reference):
        raise ExerciseDefinitionError(
            f"exercise {name!r}: reference must be a function or class, got {exercise.reference!r}"
        )
    if not (isinstance(exercise.points, (int, float)) and exercise.points > 0):
        raise ExerciseDefinitionError(f"exercise {name!r}: points must be > 0, got {exercise.points!r}")
    if exercise.compare is not None and not callable(exercise.compare):
        raise ExerciseDefinitionError(f"exercise {name!r}: compare must be a function, got {exercise.compare!r}")
    if not exercise.declared_in:
        exercise.declared_in = sys._getframe(1).f_globals.get("__name__", "")  # the declaring module
    previous = _REGISTRY.get(name)
    if previous is not None and previous.declared_in == exercise.declared_in and (
            getattr(previous.reference, "__qualname__", None) != getattr(exercise.reference, "__qualname__", None)
            or previous.notebook != exercise.notebook):
        raise ExerciseDefinitionError(f"exercise name {name!r} is declared twice in {exercise.declared_in}")
    if previous is not None and previous.declared_in != exercise.declared_in:
        raise ExerciseDefinitionError(
            f"exercise name {name!r} is used twice: in {previous.declared_in} and in {exercise.declared_in}"
        )
    _REGISTRY[name] = exercise
    return exercise


def validate_exercise(exercise: Exercise, seeds: Sequence[int] = (0,)) -> None:
    """Raise :class:`ExerciseDefinitionError` unless every case is plain data that the reference accepts.

    Runs the reference on every public and hidden case generated with each of ``seeds``, as the checks and
    the grading command will. The tests call it for every registered exercise (``tests/checks/test_exercises.py``);
    it is not run at import, so that a notebook's first check stays fast.
    """
    name = exercise.name
    for seed in seeds:
        for which in ("public", "hidden"):
            cases = exercise.cases(which, seed=seed)
            if not cases:
                raise ExerciseDefinitionError(f"exercise {name!r}: no {which} cases")
            for case in cases:
                where = f"exercise {name!r}, {which} case {case.label!r} (seed {seed})"
                validate_plain(tuple(case.args), f"{where} args")
                validate_plain(dict(case.kwargs), f"{where} kwargs")
                validate_plain(None if case.init is None else dict(case.init), f"{where} init")
                validate_plain(None if case.state is None else dict(case.state), f"{where} state")
                try:
                    run_case(exercise.reference, case, seed=exercise.seed)
                except Exception as err:  # noqa: BLE001 - reported as a declaration error
                    raise ExerciseDefinitionError(
                        f"{where}: the reference rejects it ({type(err).__name__}: {err})"
                    ) from err


# Packages whose modules declare exercises, each added by the package itself when it is imported (the course's
# ``course_lib.checks``, an assignment's package): the mechanism names no package of exercises, so that the
# checks import the mechanism and never the other way round. A package that holds a table ``EXERCISES``
# ({module: exercise names}) is looked up in it; any other has every module imported. The mechanism imports no
# declaring module until an exercise is looked up.
_PACKAGES: list[str] = []


def add_exercise_package(package: str) -> None:
    """Let :func:`get_exercise` find exercises declared in the modules of ``package`` (a package's name).

    A package adds itself in its ``__init__.py``: ``add_exercise_package(__name__)``. When the package holds
    a table ``EXERCISES = {"module": ("exercise", ...)}``, looking an exercise up imports only the module the
    table names (one notebook's checks); otherwise every module of the package is imported.
    """
    if package not in _PACKAGES:
        _PACKAGES.append(package)


def _package(package: str) -> Any:
    """The exercise package ``package`` (imported: it added itself), or None when it is gone."""
    return sys.modules.get(package)


def _declaring_modules(package: str, name: str | None) -> list[str]:
    """The modules of ``package`` that declare exercise ``name`` (every module when ``name`` is None), by
    the package's table ``EXERCISES`` when it has one."""
    pkg = _package(package)
    if pkg is None:
        return []
    table: Mapping[str, Sequence[str]] | None = getattr(pkg, "EXERCISES", None)
    if table is not None:
        return [f"{package}.{module}" for module, names in table.items() if name is None or name in names]
    return [f"{package}.{info.name}" for info in pkgutil.iter_modules(getattr(pkg, "__path__", []))
            if not info.name.startswith("_")]


def _import_declaring(name: str | None) -> None:
    """Import the modules that declare exercise ``name`` (every exercise module when ``name`` is None)."""
    for package in list(_PACKAGES):
        for module in _declaring_modules(package, name):
            importlib.import_module(module)


def get_exercise(name: str) -> Exercise:
    """The registered exercise called ``name``; the module that declares it is imported on first use.

    Searched: the exercises registered so far, then the exercise packages (those given to
    :func:`add_exercise_package`: the course's ``course_lib.checks`` adds itself when it is imported) by their
    tables.
    """
    if name not in _REGISTRY:
        _import_declaring(name)
    try:
        return _REGISTRY[name]
    except KeyError:
        tables = [getattr(_package(p), "EXERCISES", {}) for p in _PACKAGES]
        known = ", ".join(sorted(set(_REGISTRY).union(*(n for t in tables for n in t.values())))) or "none"
        raise KeyError(f"no exercise called {name!r}; known exercises: {known} (the package that declares it must "
                       f"be imported first: `import course_lib.checks` for the course's)") from None


def registered_exercises(notebook: str | None = None) -> list[Exercise]:
    """All registered exercises (every module of the exercise packages imported), or those of one notebook."""
    _import_declaring(None)
    return [ex for ex in _REGISTRY.values() if notebook is None or ex.notebook == notebook]
