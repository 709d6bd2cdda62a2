"""Observing one call of an implementation as data, and judging those data against the reference's.

The check in a notebook and the grading command decide the same way, from the same facts, wherever the
learner's code ran: :func:`observe` calls an implementation on one case and records *what happened* as plain
data (:func:`plain_observation`): the output, the inputs as they are after the call, the gradients that a
fixed upstream gradient sends back to the floating-point inputs and to a module's weights, which inputs an
output shares memory with, for a module with dropout the output in training mode under a fixed seed, and
what ran (:mod:`course_lib.exercises.tracing`). Nothing is decided there. :func:`observation_problems` then
compares the learner's facts with the reference's on the same case, in the judge's own process: for the
grader that is outside the sandbox, so replacing anything inside the sandbox changes no verdict, and
answering with made-up facts needs the right outputs *and* the right gradients.

Example:
    >>> import torch
    >>> from course_lib.exercises.core import Case
    >>> obs = observe(lambda x: x * 2, Case("x", args=(torch.ones(2),)), differentiable=True)
    >>> [round(g, 3) for g in plain_observation(obs)["grads"][0].tolist()]  # d(sum(2x * g))/dx = 2g (seed 0)
    [0.993, 1.536]
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .tracing import Trace, matching_ops, tracing

__all__ = ["Observation", "WeightsMismatchError", "observe", "plain_observation", "observation_problems",
           "Problem", "floating_tensors", "same_plain", "argument_names"]

#: The seed of the upstream gradient (the same on both sides of every comparison).
GRADIENT_SEED = 0


class WeightsMismatchError(Exception):
    """The learner's module does not take the course's weights: its parameters are named or shaped otherwise."""


@dataclass
class Observation:
    """What one call did (see the module docstring); tensors as the call left them."""

    output: Any = None
    inputs_after: list[Any] = field(default_factory=list)  # positional args, then kwargs values (sorted keys)
    grads: list[Any] | None = None  # per floating-point input: the gradient, None where none flows back
    param_grads: dict[str, Any] | None = None  # per weight of the case's state: the gradient, None where none
    connected: list[bool] = field(default_factory=list)  # per floating-point output: does it carry a graph?
    aliases: list[str] = field(default_factory=list)  # inputs an output shares memory with
    train_output: Any = None  # a module in training mode, seeded (exercises with ``train_mode``)
    gradient_error: str = ""  # backpropagating failed: why
    trace: Trace | None = None
    access: list[str] | None = None  # what the exercise's access_check found (None: not asked)


def floating_tensors(value: Any) -> list[torch.Tensor]:
    """Every floating-point tensor in a plain value (tensors, lists, tuples, dicts in key order), in order."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, (list, tuple)):
        items = tuple.__iter__(value) if isinstance(value, tuple) else list.__iter__(value)
        return [t for item in items for t in floating_tensors(item)]
    if isinstance(value, Mapping):
        return [t for key in sorted(value) for t in floating_tensors(value[key])]
    return []


def _all_tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        items = tuple.__iter__(value) if isinstance(value, tuple) else list.__iter__(value)
        return [t for item in items for t in _all_tensors(item)]
    if isinstance(value, Mapping):
        return [t for key in sorted(value) for t in _all_tensors(value[key])]
    return []


def _clone(value: Any, grad: bool = False) -> Any:
    """A deep copy of plain data; with ``grad``, floating tensors require grad (as non-leaves, as activations
    inside a model are, so that an in-place write stays possible and shows in the inputs after the call)."""
    if isinstance(value, torch.Tensor):
        copy = value.detach().clone()
        return copy.requires_grad_(True).clone() if grad and copy.is_floating_point() else copy
    if isinstance(value, tuple):
        return tuple(_clone(v, grad) for v in value)
    if isinstance(value, list):
        return [_clone(v, grad) for v in value]
    if isinstance(value, Mapping):
        return {k: _clone(v, grad) for k, v in value.items()}
    return value


def argument_names(impl: Callable[..., Any], n_args: int) -> list[str]:
    """Parameter names for the first ``n_args`` positional arguments (of ``forward`` for a class)."""
    target = getattr(impl, "forward", impl) if inspect.isclass(impl) else impl
    try:
        names = [p.name for p in inspect.signature(target).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"]
    except (TypeError, ValueError):
        names = []
    return [names[i] if i < len(names) else f"argument {i + 1}" for i in range(n_args)]


def _build(impl: Any, case: Any) -> Any:
    """The callable of a case: the function itself, or the class constructed with the case's weights loaded."""
    if not inspect.isclass(impl):
        if case.init is not None or case.state is not None:
            raise TypeError(f"case {case.label!r} constructs a class, but got a function {impl!r}")
        return impl
    obj = impl(**_clone(dict(case.init or {})))
    if case.state is not None:
        if not isinstance(obj, torch.nn.Module):
            raise TypeError(f"{impl.__name__} must be a torch.nn.Module to load weights")
        _load_weights(obj, dict(case.state))
    return obj


def _load_weights(module: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    own = module.state_dict()
    missing, unexpected = sorted(set(state) - set(own)), sorted(set(own) - set(state))
    shaped = sorted(k for k in set(own) & set(state) if tuple(own[k].shape) != tuple(state[k].shape))
    if missing or unexpected or shaped:
        parts = [f"the course's weights are called {', '.join(missing[:6])}" if missing else "",
                 f"yours are called {', '.join(unexpected[:6])}" if unexpected else "",
                 "shapes differ for " + ", ".join(f"{k} (expected {tuple(state[k].shape)}, yours "
                                                  f"{tuple(own[k].shape)})" for k in shaped[:4]) if shaped else ""]
        raise WeightsMismatchError(
            "; ".join(p for p in parts if p) + ". The check loads the course's weights by name: keep the "
            "layers the stub's __init__ creates, with their names and sizes, and write forward only.")
    module.load_state_dict(_clone(state))


def _aliases(out: Any, args: Sequence[Any], kwargs: Mapping[str, Any], names: list[str]) -> list[str]:
    """Names of the inputs whose memory an output tensor shares (a view or the tensor itself)."""
    def storage(t: torch.Tensor) -> int:
        try:
            return t.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):
            return -1
    outputs = {storage(t) for t in _all_tensors(out) if t.numel()} - {-1, 0}
    found = []
    for name, value in [*zip(names, args, strict=False), *sorted(kwargs.items())]:
        if any(storage(t) in outputs for t in _all_tensors(value) if t.numel()):
            found.append(name)
    return found


def _vjp(out: Any, sources: list[torch.Tensor], params: dict[str, torch.Tensor]
         ) -> tuple[list[Any], dict[str, Any], str]:
    """Gradients of ``sum(output * g)`` (``g`` drawn with :data:`GRADIENT_SEED`) w.r.t. inputs and weights."""
    connected = [t for t in floating_tensors(out) if t.requires_grad]
    wanted = [t for t in sources if t.requires_grad] + list(params.values())
    none_in = [None] * len(sources), dict.fromkeys(params)
    if not connected or not wanted:
        return *none_in, ""
    gen = torch.Generator().manual_seed(GRADIENT_SEED)
    total = sum((t * torch.rand(t.shape, generator=gen, dtype=t.dtype).to(t.device)).nan_to_num().sum()
                for t in connected)
    try:
        grads = torch.autograd.grad(total, wanted, allow_unused=True)  # type: ignore[arg-type]
    except RuntimeError as err:
        return *none_in, f"backpropagating through your output failed: {str(err)[:300]}"
    it = iter(grads)
    inputs = [next(it) if t.requires_grad else None for t in sources]
    return inputs, {name: next(it) for name in params}, ""


def observe(impl: Callable[..., Any], case: Any, grad: bool = False, differentiable: bool = False,
            seed: int | None = None, train_mode: bool = False, watch: Sequence[str] = (),
            trace: bool = False, ignore_threads: frozenset[int] = frozenset(),
            access: Callable[[Callable[..., Any], Any], list[str]] | None = None) -> Observation:
    """Call ``impl`` on ``case`` and record what happened (see the module docstring); exceptions propagate.

    A class is constructed with ``case.init`` and given ``case.state``'s weights (by name: a module whose
    weights are named otherwise raises :class:`WeightsMismatchError` with the names), then put in eval
    mode. With ``trace`` the call runs under :func:`~course_lib.exercises.tracing.tracing` (``watch``:
    functions to spot; ``ignore_threads``: threads there before the learner's code, not counted).
    With ``seed``, PyTorch's global generator is seeded for the call and restored after. With ``access``
    (an exercise's ``access_check``), the implementation is called once more, untraced, under that check's
    instrumentation, and what it found is recorded (``access``).
    """
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        obs = _observe(impl, case, grad or differentiable, differentiable, seed, train_mode, watch,
                       trace, ignore_threads)
    if access is not None:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            if seed is not None:
                torch.manual_seed(seed)
            obs.access = [str(problem)[:300] for problem in access(impl, case)][:10]
    return obs


def _observe(impl: Callable[..., Any], case: Any, grad: bool, differentiable: bool, seed: int | None,
             train_mode: bool, watch: Sequence[str], trace: bool, ignore_threads: frozenset[int]) -> Observation:
    obs = Observation()
    args, kwargs = _clone(tuple(case.args), differentiable), _clone(dict(case.kwargs), differentiable)
    with torch.set_grad_enabled(grad):
        with tracing(watch, ignore_threads) if trace else _no_trace() as record:
            obj = _build(impl, case)
            if isinstance(obj, torch.nn.Module):
                obj.eval()
            out = obj(*args, **kwargs)
        obs.trace = record
    names = argument_names(impl, len(args))
    obs.output = out
    obs.inputs_after = [_clone(a) for a in args] + [_clone(kwargs[k]) for k in sorted(kwargs)]
    obs.aliases = _aliases(out, args, kwargs, names)
    obs.connected = [t.requires_grad for t in floating_tensors(out)]
    if differentiable:
        params = {k: v for k, v in obj.named_parameters() if k in (case.state or {})} if isinstance(
            obj, torch.nn.Module) and inspect.isclass(impl) else {}
        with torch.enable_grad():
            obs.grads, obs.param_grads, obs.gradient_error = _vjp(out, floating_tensors((args, kwargs)), params)
    if train_mode and isinstance(obj, torch.nn.Module):
        obj.train()
        torch.manual_seed(0 if seed is None else seed)
        with torch.no_grad():
            obs.train_output = obj(*_clone(tuple(case.args)), **_clone(dict(case.kwargs)))
    return obs


class _no_trace:
    """A stand-in for :func:`tracing` when nothing is traced (the reference's own runs)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def plain_observation(obs: Observation) -> dict[str, Any]:
    """The observation as plain data (NumPy arrays, lists, dicts, numbers, strings), ready to compare or send."""
    from .compare import to_plain

    return {"output": to_plain(obs.output), "inputs_after": to_plain(list(obs.inputs_after)),
            "grads": None if obs.grads is None else [None if g is None else to_plain(g) for g in obs.grads],
            "param_grads": None if obs.param_grads is None else {
                k: None if g is None else to_plain(g) for k, g in obs.param_grads.items()},
            "connected": [bool(c) for c in obs.connected], "aliases": [str(a) for a in obs.aliases],
            "train_output": to_plain(obs.train_output), "gradient_error": str(obs.gradient_error),
            "trace": obs.trace.as_plain() if obs.trace is not None else None,
            "access": None if obs.access is None else [str(p) for p in obs.access]}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an observation: its kind (``output``, ``modified``, ``gradient`` (none flows back),
    ``gradient-values`` (they flow, wrong), ``alias``, ``train``, ``forbidden``, ``record``, ``access`` (read
    its input otherwise than asked, see ``Exercise.access_check``) and what to tell the learner."""

    kind: str
    message: str


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def same_plain(before: Any, after: Any) -> bool:
    """Whether two plain values hold the same data (arrays: same shape, dtype and values, NaN equal to NaN)."""
    if isinstance(before, np.ndarray):
        return (isinstance(after, np.ndarray) and after.shape == before.shape and after.dtype == before.dtype
                and bool(np.array_equal(before, after, equal_nan=before.dtype.kind in "fc")))
    if isinstance(before, list):
        return isinstance(after, list) and len(after) == len(before) and all(
            same_plain(b, a) for b, a in zip(before, after, strict=True))
    if isinstance(before, dict):
        return isinstance(after, dict) and after.keys() == before.keys() and all(
            same_plain(before[k], after[k]) for k in before)
    return type(after) is type(before) and after == before


def _forbidden(exercise: Any, trace: Any, threads: bool) -> list[Problem]:
    """What a trace shows of the operations and functions the exercise asks the learner to do without."""
    if not isinstance(trace, dict):
        return [Problem("record", "no record of what your code ran came back (the grader's record was "
                                  "removed or never made)")]
    problems = []
    ops = [str(o)[:100] for o in _list(trace.get("ops"))][:10_000]
    hit = matching_ops(ops, tuple(getattr(exercise, "forbidden_ops", ())))
    calls = sorted({str(c)[:100] for c in _list(trace.get("calls"))})[:20]
    if hit or calls:
        what = ", ".join(calls + hit[:4])
        problems.append(Problem("forbidden", f"your code ran {what}, which this exercise asks you to build "
                                             f"yourself from smaller operations (whatever name reached it)"))
    tampering = sorted({str(t)[:100] for t in _list(trace.get("tampering"))})[:5]
    count = trace.get("threads")
    if tampering or trace.get("complete") is not True:
        problems.append(Problem("record", "the record of what your code ran was switched off, or your code "
                                          "started a thread or a process, while it ran" + (
                                              f" (it called {', '.join(tampering)})" if tampering else "")))
    elif threads and isinstance(count, int) and not isinstance(count, bool) and count > 0:
        problems.append(Problem("record", f"{count} other thread(s) ran beside your code while it was "
                                          f"checked: an exercise's function must do its work itself"))
    return problems


def observation_problems(exercise: Any, case: Any, expected: dict[str, Any], got: dict[str, Any],
                         inputs_before: list[Any], traced: bool = True, threads: bool = True) -> list[Problem]:
    """What is wrong with the learner's plain observation ``got`` on ``case`` against the reference's
    ``expected`` (both from :func:`plain_observation`); ``inputs_before``: the case's inputs as plain data.
    ``threads``: other threads alive during the call count against it (the grader's sandbox, whose runner has
    none; a Jupyter kernel has its own, so the advisory check passes False).

    Runs where the verdict is made (the grader's process, or the learner's kernel for the advisory check),
    on untrusted data: anything malformed is a problem, never an exception.
    """
    from .compare import compare_outputs, output_problems

    if not isinstance(got, dict):
        return [Problem("output", "no observation came back")]
    if traced:
        found = _forbidden(exercise, got.get("trace"), threads)
        if found:
            return found
    problems = [Problem("output", p) for p in output_problems(exercise, case, expected.get("output"),
                                                              got.get("output"))]
    if problems:
        return problems
    if getattr(exercise, "access_check", None) is not None:
        access = got.get("access")
        if not isinstance(access, list):
            return [Problem("record", "no record of how your code read its input came back")]
        if access:
            return [Problem("access", str(access[0])[:300])]
    names = argument_names(exercise.reference, len(tuple(case.args))) + sorted(case.kwargs)
    after = _list(got.get("inputs_after"))
    changed = [names[i] if i < len(names) else f"argument {i + 1}" for i, before in enumerate(inputs_before)
               if i >= len(after) or not same_plain(before, after[i])]
    if changed:
        return [Problem("modified", f"your code changed its input {', '.join(repr(n) for n in changed)} in place; "
                                    "the caller's tensor must stay as it was")]
    if set(_list(got.get("aliases"))) - set(_list(expected.get("aliases"))):
        return [Problem("alias", "your output is one of the inputs itself (the same memory, not a new tensor): "
                                 "a change to one would change the other")]
    problems += _gradient_problems(exercise, expected, got)
    if not problems and expected.get("train_output") is not None:
        problems += [Problem("train", "in training mode (dropout on, same seed): " + p) for p in compare_outputs(
            expected["train_output"], got.get("train_output"), exercise.atol, exercise.rtol)]
    return problems


def _gradient_problems(exercise: Any, expected: dict[str, Any], got: dict[str, Any]) -> list[Problem]:
    """Gradients must flow where the reference's do, and (for a deterministic exercise) equal them."""
    if expected.get("grads") is None:
        return []
    error = got.get("gradient_error")
    if isinstance(error, str) and error:
        return [Problem("gradient", error[:400])]
    want_connected, got_connected = _list(expected.get("connected")), _list(got.get("connected"))
    if any(w is True and (i >= len(got_connected) or got_connected[i] is not True)
           for i, w in enumerate(want_connected)):
        return [Problem("gradient", "your output is not connected to the inputs' gradients (it was computed off "
                                    "the autograd graph): the numbers are right but a model trained through it "
                                    "would not learn")]
    pairs = [(f"the gradient of input {i + 1}", e, g) for i, (e, g) in enumerate(
        zip(_list(expected.get("grads")), _list(got.get("grads")) + [None] * len(_list(expected.get("grads"))),
            strict=False))]
    weights = expected.get("param_grads") or {}
    got_weights = got.get("param_grads") if isinstance(got.get("param_grads"), dict) else {}
    pairs += [(f"the gradient of weight {k}", e, got_weights.get(k)) for k, e in sorted(weights.items())]
    for where, e, g in pairs:
        problem = _one_gradient(exercise, where, e, g)
        if problem:
            kind = "gradient" if "no gradient flows" in problem or "not finite" in problem else "gradient-values"
            return [Problem(kind, problem)]
    return []


def _one_gradient(exercise: Any, where: str, expected: Any, got: Any) -> str:
    from .compare import compare_outputs

    flows = expected is not None and isinstance(expected, np.ndarray) and bool(np.any(expected != 0))
    if not flows:
        return ""
    if got is None:
        return (f"{where}: no gradient flows back to it (the result is right, but training through it would not "
                f"reach it)")
    if exercise.compare is not None:  # a random answer: gradients must flow, their values are random too
        ok = isinstance(got, np.ndarray) and got.dtype.kind == "f" and bool(np.isfinite(got).all())
        return "" if ok else f"{where}: not finite numbers"
    scale = max(1.0, float(np.abs(expected).max()))
    found = compare_outputs(expected, got, exercise.atol * 10 * scale, exercise.rtol * 10, where)
    return found[0] if found else ""
