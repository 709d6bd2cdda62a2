"""Helpers that make an exercise's declaration short: random inputs, public/hidden case sets, typical mistakes.

Most declarations repeat the same parts: random tensors from the case generator, a boolean mask in which no
query is left without a key, one function that builds the public and the hidden cases, dtype variants, and
mistakes that are "the reference, called on a changed copy of its inputs" (the mask inverted, two arguments
swapped) or "the reference, with its output changed". With these an exercise fits in about 20 lines::

    from course_lib.exercises import Case, Exercise, Mistake, register
    from course_lib.exercises.cases import inverted, public_and_hidden, randn, with_inputs

    def cases(gen, hidden):
        n = 5 + 2 * hidden                     # hidden cases: other sizes
        return [Case("a (2, n) batch", args=(randn(gen, 2, n),)), ...]

    register(Exercise(
        name="my_exercise", notebook="my_notebook", points=1, reference=my_function,
        **public_and_hidden(cases),
        mistakes=[Mistake("mask inverted", with_inputs(my_function, mask=inverted), "True = may attend ...")],
        also_correct=[...],
    ))

Every helper returns plain data (tensors, numbers) or a plain function, so that the cases stay shippable to
the grader's kernel as arrays.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .core import Case

__all__ = ["randn", "bool_mask", "public_and_hidden", "dtype_variants", "with_inputs", "with_output",
           "inverted", "swapped"]


def randn(gen: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    """A standard normal tensor of ``shape`` drawn from the case generator, times ``scale``."""
    return torch.randn(*shape, generator=gen) * scale


def bool_mask(gen: torch.Generator, *shape: int, keep: float = 0.6) -> torch.Tensor:
    """A random boolean mask (True with probability ``keep``) where every row keeps its first key.

    So no query is fully masked by chance: a case that wants one says so and sets the row to False itself.
    """
    mask = torch.rand(*shape, generator=gen) < keep
    mask[..., 0] = True
    return mask


def public_and_hidden(make: Callable[[torch.Generator, bool], Sequence[Case]]) -> dict[str, Any]:
    """``public_cases`` and ``hidden_cases`` from one function ``make(gen, hidden)``, as keyword arguments."""
    return {"public_cases": lambda gen: list(make(gen, False)), "hidden_cases": lambda gen: list(make(gen, True))}


def _converted(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, (list, tuple)):
        return type(value)(_converted(v, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _converted(v, dtype) for k, v in value.items()}
    return value


def dtype_variants(cases: Sequence[Case], dtypes: Sequence[torch.dtype] = (torch.float64,)) -> list[Case]:
    """Copies of ``cases`` with every floating-point input (and weight) converted to each of ``dtypes``."""
    return [dataclasses.replace(case, label=f"{case.label} [{str(dtype).removeprefix('torch.')}]",
                                args=_converted(tuple(case.args), dtype), kwargs=_converted(dict(case.kwargs), dtype),
                                state=None if case.state is None else _converted(dict(case.state), dtype))
            for dtype in dtypes for case in cases]


def with_inputs(fn: Callable[..., Any], **changes: Callable[[Any], Any]) -> Callable[..., Any]:
    """A mistake: ``fn`` called on a copy of its arguments in which each named argument is changed.

    ``with_inputs(attention, mask=inverted)`` is attention with the mask inverted. An argument the caller
    left out (a default) is changed too; ``None`` stays ``None``.
    """
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def mistaken(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        for name, change in changes.items():
            value = bound.arguments[name]
            bound.arguments[name] = None if value is None else change(value)
        return fn(*bound.args, **bound.kwargs)

    return mistaken


def with_output(fn: Callable[..., Any], change: Callable[[Any], Any]) -> Callable[..., Any]:
    """A mistake: ``fn``'s output passed through ``change`` (``with_output(f, lambda y: y.transpose(-2, -1))``)."""
    @functools.wraps(fn)
    def mistaken(*args: Any, **kwargs: Any) -> Any:
        return change(fn(*args, **kwargs))

    return mistaken


def inverted(mask: torch.Tensor) -> torch.Tensor:
    """A boolean mask with True and False exchanged (the most common mask mistake)."""
    return ~mask


def swapped(fn: Callable[..., Any], first: str, second: str) -> Callable[..., Any]:
    """A mistake: ``fn`` with the arguments ``first`` and ``second`` exchanged (key and value, say)."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def mistaken(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        bound.arguments[first], bound.arguments[second] = bound.arguments[second], bound.arguments[first]
        return fn(*bound.args, **bound.kwargs)

    return mistaken
