"""The learner's implementations standing in for graded references: one registry, two decorators.

Every graded reference in a withheld library (the class edition and the grader's sandbox hold the same one,
:func:`course_lib.edition.build.strip_library`) is a stand-in decorated with :func:`standing_in` (a function or
method) or :func:`standing_in_class` (a class exercise's layer). Until an implementation is provided for its
key, the stand-in does what the class edition says (PyTorch's own module, stored outputs, or "withheld"); once
the grader's sandbox provides the learner's own (``course_lib.grading.sandbox_main``, after the learner's cell
defines it), course code that calls the reference runs the learner's work, as the notebook's check hands it to
the cells below. The registry is empty in a class edition. This module imports nothing of the course, so that
any module of the library can use it without an import cycle.

Example:
    >>> @standing_in("example.double")
    ... def double(x):
    ...     raise RuntimeError("withheld")
    >>> provide("example.double", lambda x: 2 * x)
    >>> double(4)
    8
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["provide", "provided", "standing_in", "standing_in_class"]

#: key (``module.name`` of the reference) -> the learner's implementation.
_PROVIDED: dict[str, Any] = {}


def provide(key: str, impl: Any) -> None:
    """Run ``impl`` wherever course code calls the reference ``key`` (``module.name``) from now on."""
    _PROVIDED[key] = impl


def provided(key: str) -> Any:
    """The implementation provided for ``key``, or None."""
    return _PROVIDED.get(key)


def standing_in(key: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a reference's stand-in: the implementation provided for ``key`` once there is one, else the
    stand-in itself."""
    def decorate(stand_in: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(stand_in)
        def call(*args: Any, **kwargs: Any) -> Any:
            impl = _PROVIDED.get(key)
            return (stand_in if impl is None else impl)(*args, **kwargs)

        return call

    return decorate


def standing_in_class(key: str) -> Callable[[type], type]:
    """Decorate a class exercise's reference (its ``forward`` already a stand-in): constructing it gives the
    provided class's instance once there is one (course code building the layer builds the learner's); a
    subclass of it is built as before."""
    def decorate(cls: type) -> type:
        def __new__(klass: type, *args: Any, **kwargs: Any) -> Any:  # noqa: N807 - the hook itself
            impl = _PROVIDED.get(key)
            if impl is not None and klass is cls:
                return impl(*args, **kwargs)  # not an instance of cls: its __init__ does not run again
            return super(cls, klass).__new__(klass)  # type: ignore[misc]

        cls.__new__ = __new__  # type: ignore[method-assign]
        return cls

    return decorate
