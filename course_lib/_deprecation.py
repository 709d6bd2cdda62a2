"""Deprecating a released public name before removing it: a warning that names the replacement and the release
that removes it.

``course_lib``'s public names are recorded with their signatures (``tests/repository/test_api.py``). When a *released*
one has to change, the old spelling keeps working until a stated release and warns whoever uses it, naming what to use
instead. Names that never reached a release are simply changed (the old layout of issue #35 lived three days at
version 0.1.0, and its 26 old paths were removed). Two tools:

- :func:`deprecated` -- a decorator for a function, method or class that will go away: calling it (or
  constructing the class) warns, then does what it always did.
- :func:`deprecated_attributes` -- a module ``__getattr__`` (PEP 562) for old names of classes, constants or
  functions: accessing ``module.OldName`` warns and returns the new object itself (so ``isinstance`` and
  subclassing keep working).

Both *require* the release that removes the name (``removal``), later than the current version: a deprecation
without an end is never removed. :func:`overdue` lists the deprecations whose removal release the package has
reached, and ``tests/repository/test_api.py`` fails on any, so the name goes in that release.

The warning is a :class:`CourseDeprecationWarning`, a subclass of :class:`FutureWarning`: Python shows
FutureWarnings by default everywhere (in a notebook, a script or an instructor's assignment), whereas a
plain :class:`DeprecationWarning` is hidden outside ``__main__``. NumPy and pandas make the same choice
for deprecations meant for the people who run the code.

Example::

    from course_lib._deprecation import deprecated, deprecated_attributes

    @deprecated(replacement="course_lib.models.masking.causal_mask", since="0.2.0", removal="0.3.0")
    def look_ahead_mask(seq_len):
        return causal_mask(seq_len)

    # in course_lib/models/attention.py, after renaming class MHA to MultiHeadAttention:
    __getattr__ = deprecated_attributes(__name__, {"MHA": (MultiHeadAttention, "MultiHeadAttention")},
                                        removal="0.3.0")
"""

from __future__ import annotations

import functools
import inspect
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["CourseDeprecationWarning", "deprecated", "deprecated_attributes", "deprecation_message", "overdue"]

T = TypeVar("T")

#: Every deprecation declared in this process: (the old name, the release that removes it).
_DECLARED: list[tuple[str, str]] = []


class CourseDeprecationWarning(FutureWarning):
    """Warns that a ``course_lib`` name is deprecated; the message names its replacement and its removal.

    A :class:`FutureWarning` (shown by default), so that learners and instructors see it in notebooks.

    Example:
        >>> issubclass(CourseDeprecationWarning, FutureWarning)
        True
    """


def _release(version: str, what: str) -> tuple[int, int, int]:
    """``"0.3"`` or ``"0.3.1"`` as a comparable tuple; a ValueError naming ``what`` for anything else."""
    found = re.fullmatch(r"(\d+)\.(\d+)(?:\.(\d+))?", version) if isinstance(version, str) else None
    if found is None:
        raise ValueError(f"{what} must be a release such as '0.3.0', got {version!r}")
    return tuple(int(part or 0) for part in found.groups())  # type: ignore[return-value]


def _current() -> str:
    import course_lib

    return course_lib.__version__


def deprecation_message(old: str, replacement: str, removal: str, since: str | None = None) -> str:
    """The sentence every deprecation warning of the course uses.

    Args:
        old: the deprecated name as a user writes it (``"course_lib.models.attention.MHA"``).
        replacement: what to use instead (``"course_lib.models.attention.MultiHeadAttention"``), or a short
            instruction (``"pass mask= instead"``).
        removal: the release that removes it (required); since: the release that deprecated it.

    Example:
        >>> deprecation_message("old_fn", "new_fn", removal="0.3.0", since="0.2.0")
        'old_fn is deprecated since course_lib 0.2.0 and will be removed in 0.3.0; use new_fn instead.'
    """
    if not isinstance(replacement, str) or not replacement.strip():
        raise ValueError(f"deprecation of {old}: replacement must name what to use instead, got {replacement!r}")
    _release(removal, f"deprecation of {old}: removal")
    since_text = f" since course_lib {since}" if since else ""
    return f"{old} is deprecated{since_text} and will be removed in {removal}; use {replacement} instead."


def _declare(old: str, replacement: str, removal: str, since: str | None) -> str:
    """Check a new deprecation (its removal still ahead), remember it for :func:`overdue`; its message."""
    message = deprecation_message(old, replacement, removal, since)
    if _release(removal, "removal") <= _release(_current(), "course_lib.__version__"):
        raise ValueError(f"deprecation of {old}: removal must be a release after the current {_current()}, "
                         f"got {removal!r} (remove the name now instead)")
    _DECLARED.append((old, removal))
    return message


def overdue(version: str | None = None) -> list[str]:
    """The deprecated names whose removal release ``version`` (default: ``course_lib.__version__``) has reached.

    Example:
        >>> overdue("99.0.0") == [name for name, _ in _DECLARED]
        True
    """
    reached = _release(version or _current(), "version")
    return [old for old, removal in _DECLARED if _release(removal, "removal") <= reached]


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


def deprecated(replacement: str, *, removal: str, since: str | None = None,
               name: str | None = None) -> Callable[[T], T]:
    """Decorate a function, method or class so that using it warns with a :class:`CourseDeprecationWarning`.

    The decorated object keeps working as before. A function warns on every call, a class when it is
    constructed (its subclasses too). The warning points at the caller's line (``stacklevel=2``), and the
    docstring gains a note, so the API reference shows the deprecation as well.

    Args:
        replacement: what to use instead (a qualified name, or a short instruction). Required: a deprecation
            that does not say what to do instead only annoys.
        removal: the release that removes the name, after the current version. Required.
        since: the release that deprecated it, shown in the message.
        name: the name shown in the message (default: the object's qualified name).

    Example:
        >>> @deprecated(replacement="new_add", removal="99.0.0")
        ... def old_add(a, b):
        ...     return a + b
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     old_add(1, 2)
        3
        >>> str(caught[0].message)
        'course_lib._deprecation.old_add is deprecated and will be removed in 99.0.0; use new_add instead.'
    """
    deprecation_message("the name", replacement, removal)  # a clear error before anything is decorated

    def decorate(obj: T) -> T:
        message = _declare(name or _qualified(obj), replacement, removal, since)
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


def deprecated_attributes(module_name: str, renamed: Mapping[str, tuple[Any, str]], *, removal: str,
                          since: str | None = None) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` (PEP 562) that serves old names with a warning.

    Args:
        module_name: the module's ``__name__``.
        renamed: ``{old name: (the new object, how to name it in the message)}``.
        removal: the release that removes the old names, after the current version. Required.
        since: the release that deprecated them, shown in the message.

    Returns:
        A function to assign to the module's ``__getattr__``: it warns and returns the new object for an old
        name, and raises the usual :class:`AttributeError` for any other missing name.

    Example:
        >>> getattr_ = deprecated_attributes("course_lib.demo", {"MHA": (dict, "dict")}, removal="99.0.0")
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     getattr_("MHA") is dict
        True
        >>> str(caught[0].message)
        'course_lib.demo.MHA is deprecated and will be removed in 99.0.0; use dict instead.'
    """
    table: dict[str, tuple[Any, str]] = {}
    for old, entry in dict(renamed).items():
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], str)):
            raise ValueError(f"deprecated_attributes: renamed[{old!r}] must be (new object, replacement name), "
                             f"got {entry!r}")
        table[old] = (entry[0], _declare(f"{module_name}.{old}", entry[1], removal, since))

    def __getattr__(attr: str) -> Any:
        if attr in table:
            new, message = table[attr]
            warnings.warn(message, CourseDeprecationWarning, stacklevel=2)
            return new
        raise AttributeError(f"module {module_name!r} has no attribute {attr!r}")

    return __getattr__
