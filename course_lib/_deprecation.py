"""Deprecating a public name before removing it, with a warning that names the replacement.

``course_lib``'s public names are stable (``tests/test_api.py`` records them with their signatures). When
one has to change, the old spelling keeps working for at least one release and warns whoever uses it,
naming what to use instead. Three tools, for the three ways a name changes:

- :func:`deprecated` -- a decorator for a function, method or class that will go away: calling it (or
  constructing the class) warns, then does what it always did.
- :func:`deprecated_alias` -- an old function name kept as a thin wrapper around its replacement.
- :func:`deprecated_attributes` -- a module ``__getattr__`` (PEP 562) for old names of classes, constants or
  functions: accessing ``module.OldName`` warns and returns the new object itself (so ``isinstance`` and
  subclassing keep working).

The warning is a :class:`CourseDeprecationWarning`, a subclass of :class:`FutureWarning`: Python shows
FutureWarnings by default everywhere (in a notebook, a script or an instructor's assignment), whereas a
plain :class:`DeprecationWarning` is hidden outside ``__main__``. NumPy and pandas make the same choice
for deprecations meant for the people who run the code.

Example::

    from course_lib._deprecation import deprecated, deprecated_attributes

    @deprecated(replacement="course_lib.masking.causal_mask", since="0.2", removal="0.3")
    def look_ahead_mask(seq_len):
        return causal_mask(seq_len)

    # in course_lib/attention.py, after renaming class MHA to MultiHeadAttention:
    __getattr__ = deprecated_attributes(__name__, {"MHA": (MultiHeadAttention, "MultiHeadAttention")})
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["CourseDeprecationWarning", "deprecated", "deprecated_alias", "deprecated_attributes",
           "deprecation_message"]

T = TypeVar("T")


class CourseDeprecationWarning(FutureWarning):
    """Warns that a ``course_lib`` name is deprecated; the message names its replacement.

    A :class:`FutureWarning` (shown by default), so that learners and instructors see it in notebooks.

    Example:
        >>> import warnings
        >>> issubclass(CourseDeprecationWarning, FutureWarning)
        True
    """


def deprecation_message(old: str, replacement: str, since: str | None = None, removal: str | None = None) -> str:
    """The sentence every deprecation warning of the course uses.

    Args:
        old: the deprecated name as a user writes it (``"course_lib.attention.MHA"``).
        replacement: what to use instead (``"course_lib.attention.MultiHeadAttention"``), or a short
            instruction (``"pass mask= instead"``).
        since: the version that deprecated it; removal: the version that will remove it.

    Example:
        >>> deprecation_message("old_fn", "new_fn", since="0.2", removal="0.3")
        'old_fn is deprecated since course_lib 0.2 and will be removed in 0.3; use new_fn instead.'
    """
    if not isinstance(replacement, str) or not replacement.strip():
        raise ValueError(f"deprecation of {old}: replacement must name what to use instead, got {replacement!r}")
    text = f"{old} is deprecated"
    if since:
        text += f" since course_lib {since}"
    text += f" and will be removed in {removal}" if removal else " and will be removed in a future release"
    return f"{text}; use {replacement} instead."


def _qualified(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or ""
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", repr(obj))
    return f"{module}.{name}" if module else name


def _add_doc_note(obj: Any, message: str) -> None:
    note = f"**Deprecated:** {message}"
    doc = inspect.cleandoc(obj.__doc__) if obj.__doc__ else ""
    try:
        obj.__doc__ = f"{note}\n\n{doc}" if doc else note
    except (AttributeError, TypeError):  # some built-in types refuse a new docstring
        pass


def deprecated(replacement: str, *, since: str | None = None, removal: str | None = None,
               name: str | None = None) -> Callable[[T], T]:
    """Decorate a function, method or class so that using it warns with a :class:`CourseDeprecationWarning`.

    The decorated object keeps working as before. A function warns on every call, a class when it is
    constructed (its subclasses too). The warning points at the caller's line (``stacklevel=2``), and the
    docstring gains a note, so the API reference shows the deprecation as well.

    Args:
        replacement: what to use instead (a qualified name, or a short instruction). Required: a deprecation
            that does not say what to do instead only annoys.
        since, removal: versions, shown in the message.
        name: the name shown in the message (default: the object's qualified name).

    Example:
        >>> @deprecated(replacement="new_add")
        ... def old_add(a, b):
        ...     return a + b
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     old_add(1, 2)
        3
        >>> "use new_add instead" in str(caught[0].message)
        True
    """
    if not isinstance(replacement, str) or not replacement.strip():
        raise ValueError(f"deprecated: replacement must name what to use instead, got {replacement!r}")

    def decorate(obj: T) -> T:
        message = deprecation_message(name or _qualified(obj), replacement, since, removal)
        if inspect.isclass(obj):
            original_init = obj.__init__  # type: ignore[misc]

            @functools.wraps(original_init)
            def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
                warnings.warn(message, CourseDeprecationWarning, stacklevel=2)
                original_init(self, *args, **kwargs)

            obj.__init__ = __init__  # type: ignore[misc]
            obj.__deprecated__ = message  # type: ignore[attr-defined]  # PEP 702's attribute
            _add_doc_note(obj, message)
            return obj
        if not callable(obj):
            raise TypeError(f"deprecated: can decorate a function, method or class, got {type(obj).__name__}")

        @functools.wraps(obj)  # type: ignore[arg-type]
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            warnings.warn(message, CourseDeprecationWarning, stacklevel=2)
            return obj(*args, **kwargs)  # type: ignore[operator]

        wrapper.__deprecated__ = message  # type: ignore[attr-defined]
        _add_doc_note(wrapper, message)
        return wrapper  # type: ignore[return-value]

    return decorate


def deprecated_alias(old_name: str, new: Callable[..., Any], *, replacement: str | None = None,
                     since: str | None = None, removal: str | None = None) -> Callable[..., Any]:
    """An old function name kept as a wrapper that warns and then calls ``new``.

    Use it when a function is renamed: ``old_name = deprecated_alias("old_name", new_name)`` in the module
    that used to define it. For classes use :func:`deprecated_attributes`, which hands back the class
    itself, so ``isinstance`` checks keep working.

    Args:
        old_name: the name shown in the warning (``"course_lib.masking.subsequent_mask"``).
        new: the replacement function.
        replacement: how to name ``new`` in the message (default: its qualified name).

    Example:
        >>> def causal(n):
        ...     return n
        >>> old = deprecated_alias("subsequent_mask", causal, replacement="causal_mask")
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     old(3)
        3
        >>> str(caught[0].message)
        'subsequent_mask is deprecated and will be removed in a future release; use causal_mask instead.'
    """
    if inspect.isclass(new) or not callable(new):
        raise TypeError(f"deprecated_alias: new must be a function (for a class use deprecated_attributes), "
                        f"got {new!r}")
    wrapper = deprecated(replacement or _qualified(new), since=since, removal=removal, name=old_name)(
        functools.wraps(new)(lambda *args, **kwargs: new(*args, **kwargs)))
    short = old_name.rsplit(".", 1)[-1]
    wrapper.__name__ = wrapper.__qualname__ = short
    return wrapper


def deprecated_attributes(module_name: str, renamed: Mapping[str, tuple[Any, str]],
                          since: str | None = None, removal: str | None = None) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` (PEP 562) that serves old names with a warning.

    Args:
        module_name: the module's ``__name__``.
        renamed: ``{old name: (the new object, how to name it in the message)}``.
        since, removal: versions, shown in the message.

    Returns:
        A function to assign to the module's ``__getattr__``: it warns and returns the new object for an old
        name, and raises the usual :class:`AttributeError` for any other missing name.

    Example:
        >>> getattr_ = deprecated_attributes("course_lib.demo", {"MHA": (dict, "dict")})
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     getattr_("MHA") is dict
        True
        >>> str(caught[0].message)
        'course_lib.demo.MHA is deprecated and will be removed in a future release; use dict instead.'
    """
    table = dict(renamed)
    for old, entry in table.items():
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], str)):
            raise ValueError(f"deprecated_attributes: renamed[{old!r}] must be (new object, replacement name), "
                             f"got {entry!r}")
        deprecation_message(old, entry[1])  # validates the replacement text

    def __getattr__(attr: str) -> Any:
        if attr in table:
            new, replacement = table[attr]
            warnings.warn(deprecation_message(f"{module_name}.{attr}", replacement, since, removal),
                          CourseDeprecationWarning, stacklevel=2)
            return new
        raise AttributeError(f"module {module_name!r} has no attribute {attr!r}")

    return __getattr__
