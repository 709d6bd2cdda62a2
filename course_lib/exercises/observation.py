"""Observing one call of an implementation as data, and judging those data against the reference's.

The check in a notebook and the grading command decide the same way, from the same facts, wherever the
learner's code ran: :func:`observe` calls an implementation on one case and records *what happened* as plain
data (:func:`plain_observation`): the output, the inputs as they are after the call, the gradients that a
fixed upstream gradient sends back to the floating-point inputs and to a module's weights, which inputs an
output shares memory with, for a module with dropout the output in training mode under a fixed seed, and
what ran (:mod:`course_lib.exercises.tracing`). Nothing is decided here: :mod:`course_lib.exercises.verdict`
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

from .tracing import Trace, tracing

__all__ = ["Observation", "WeightsMismatchError", "observe", "plain_observation", "floating_tensors", "same_plain",
           "argument_names"]

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
