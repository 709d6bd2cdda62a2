"""Input checks kept apart from the formulas they guard.

A function of the course reads like the paper (The Annotated Transformer's eleven-line ``attention()`` is
the model); the checks that give a clear error for wrong input (naming the argument, the shape expected and
the shape given) live in a separate function and are attached with :func:`validated_by`::

    def _check_inputs(query, key, value, mask=None, dropout_p=0.0): ...      # raises on bad input

    @validated_by(_check_inputs)
    def scaled_dot_product_attention(query, key, value, mask=None, dropout_p=0.0):
        scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
        ...

The public name is the thin wrapper: it calls the check with the same arguments, then the plain function.
``functools.wraps`` makes the wrapper show the plain function's name, docstring, signature and source, so
the solved notebooks (built from the source of the course's references) show the formula, not the checks.
The plain function stays reachable as ``fn.__wrapped__``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["validated_by", "check_positive_ints"]

F = TypeVar("F", bound=Callable[..., Any])


def validated_by(check: Callable[..., None]) -> Callable[[F], F]:
    """Decorator: call ``check`` with the function's arguments first (it raises on bad input).

    Example:
        >>> def _positive(x):
        ...     if x <= 0:
        ...         raise ValueError(f"half: x must be > 0, got {x}")
        >>> @validated_by(_positive)
        ... def half(x):
        ...     return x / 2
        >>> half(4.0)
        2.0
    """
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            check(*args, **kwargs)
            return fn(*args, **kwargs)

        return checked  # type: ignore[return-value]

    return decorate


def check_positive_ints(fn: str, minimum: int = 1, **values: object) -> None:
    """Raise a ValueError unless every value is an int (not a bool) >= ``minimum``, naming the first that is not.

    ``fn`` is the public name the message starts with, so a learner sees which call and which argument.

    Example:
        >>> check_positive_ints("train_lm", steps=10, batch_size=0)
        Traceback (most recent call last):
        ...
        ValueError: train_lm: batch_size must be an int >= 1, got 0
    """
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{fn}: {name} must be an int >= {minimum}, got {value!r}")
