"""Deprecating a public name before removing it, with a warning that names the replacement.

``course_lib``'s public names are stable (``tests/test_api.py`` records them with their signatures). When
one has to change, the old spelling keeps working for at least one release and warns whoever uses it,
naming what to use instead. Five tools, for the ways a name changes:

- :func:`deprecated` -- a decorator for a function, method or class that will go away: calling it (or
  constructing the class) warns, then does what it always did.
- :func:`deprecated_alias` -- an old function name kept as a thin wrapper around its replacement.
- :func:`deprecated_attributes` -- a module ``__getattr__`` (PEP 562) for old names of classes, constants or
  functions: accessing ``module.OldName`` warns and returns the new object itself (so ``isinstance`` and
  subclassing keep working).
- :func:`moved_modules` -- old module names of a package whose modules moved (``course_lib.text`` ->
  ``course_lib.data.translation``): importing the old name gives the new module itself and warns.
- :func:`moved_attributes` -- a module ``__getattr__`` for names that moved to another module, imported only
  when an old name is used.

The warning is a :class:`CourseDeprecationWarning`, a subclass of :class:`FutureWarning`: Python shows
FutureWarnings by default everywhere (in a notebook, a script or an instructor's assignment), whereas a
plain :class:`DeprecationWarning` is hidden outside ``__main__``. NumPy and pandas make the same choice
for deprecations meant for the people who run the code.

Example::

    from course_lib._deprecation import deprecated, deprecated_attributes

    @deprecated(replacement="course_lib.models.masking.causal_mask", since="0.2", removal="0.3")
    def look_ahead_mask(seq_len):
        return causal_mask(seq_len)

    # in course_lib/models/attention.py, after renaming class MHA to MultiHeadAttention:
    __getattr__ = deprecated_attributes(__name__, {"MHA": (MultiHeadAttention, "MultiHeadAttention")})
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import inspect
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["CourseDeprecationWarning", "deprecated", "deprecated_alias", "deprecated_attributes",
           "deprecation_message", "moved_modules", "moved_attributes"]

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
        old: the deprecated name as a user writes it (``"course_lib.models.attention.MHA"``).
        replacement: what to use instead (``"course_lib.models.attention.MultiHeadAttention"``), or a short
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
        old_name: the name shown in the warning (``"course_lib.models.masking.subsequent_mask"``).
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


# --- moved modules and names -----------------------------------------------------------------------------------

# Frames of the import system, skipped so that a warning points at the line that imported the old name.
_IMPORT_FRAMES = ("<frozen importlib.", importlib.__file__, __file__)


def _importer_stacklevel(also_skip: tuple[str, ...] = ()) -> int:
    """The ``stacklevel`` (counted from the caller of this function) of the first frame outside the import
    system, this module and the files ``also_skip``: the line of code that asked for the old name."""
    skip = (*_IMPORT_FRAMES, *also_skip)
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(skip):
        frame = frame.f_back
        # warnings.warn passes over the import system's own frames without counting them (its "internal" frames)
        name = frame.f_code.co_filename
        level += not ("importlib" in name and "_bootstrap" in name)
    return level


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module name as the module that now holds its code: the same module object (so
    ``isinstance`` and monkeypatching keep working), with a :class:`CourseDeprecationWarning` naming the new path.
    A moved package's submodules follow it (``course_lib.trainer.cli`` -> ``course_lib.training.cli.cli``)."""

    def __init__(self, moved: Mapping[str, str], since: str | None, removal: str | None) -> None:
        self.moved = dict(moved)
        self.since, self.removal = since, removal
        self.roots = {old.split(".", 1)[0] for old in self.moved}
        self._specs: dict[str, Any] = {}

    def new_name(self, fullname: str) -> str | None:
        """Where the module ``fullname`` lives now (None when it did not move)."""
        if fullname.split(".", 1)[0] not in self.roots:
            return None
        if fullname in self.moved:
            return self.moved[fullname]
        for old, new in self.moved.items():
            if fullname.startswith(old + "."):
                return new + fullname[len(old):]
        return None

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        new = self.new_name(fullname)
        return None if new is None else importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> Any:
        new = self.new_name(spec.name)
        warnings.warn(deprecation_message(spec.name, new, self.since, self.removal), CourseDeprecationWarning,
                      stacklevel=_importer_stacklevel())
        module = importlib.import_module(new)
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: Any) -> None:
        # The import system gave the module the old name's spec; it keeps its own (reload, pickling by spec).
        module.__spec__ = self._specs.pop(module.__spec__.name)


def moved_modules(package: str, moved: Mapping[str, str], since: str | None = None,
                  removal: str | None = None) -> Callable[[str], Any]:
    """Keep old module names of ``package`` importable after their modules moved; returns the package's
    ``__getattr__`` (PEP 562), so that ``package.old`` works without an import too.

    ``import course_lib.text``, ``from course_lib.text import Vocab`` and ``from course_lib import text`` all
    give the module that now holds the code (the same object: ``isinstance`` and monkeypatching keep working)
    and warn once with a :class:`CourseDeprecationWarning` naming the new path.

    Args:
        package: the package's ``__name__``.
        moved: ``{old submodule: new submodule}``, relative to ``package`` (``{"text": "data.translation"}``).
            A moved package takes its submodules along.

    Example:
        >>> import sys
        >>> getattr_ = moved_modules("course_lib", {"old_softmax": "models.softmax"})
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     import course_lib.old_softmax as old
        >>> old is sys.modules["course_lib.models.softmax"]
        True
        >>> str(caught[0].message).split(";")[1]
        ' use course_lib.models.softmax instead.'
    """
    table = {f"{package}.{old}": f"{package}.{new}" for old, new in moved.items()}
    finder = next((f for f in sys.meta_path if isinstance(f, _MovedModuleFinder) and f.since == since
                   and f.removal == removal), None)
    if finder is None:
        finder = _MovedModuleFinder({}, since, removal)
        sys.meta_path.insert(0, finder)
    finder.moved.update(table)
    finder.roots = {old.split(".", 1)[0] for old in finder.moved}

    def __getattr__(attr: str) -> Any:
        if f"{package}.{attr}" in table:
            return importlib.import_module(f"{package}.{attr}")
        raise AttributeError(f"module {package!r} has no attribute {attr!r}")

    return __getattr__


def moved_attributes(module_name: str, moved: Mapping[str, str] | None = None, *, names_of: str | None = None,
                     since: str | None = None, removal: str | None = None) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` (PEP 562) for names that moved to another module, imported only when an
    old name is used (so the old module needs no import of the new one).

    Args:
        module_name: the module's ``__name__``.
        moved: ``{old name: "new.module.name"}`` (the name may differ: ``"course_lib.models.baselines.SmallCNN"``).
        names_of: a module whose public names (its ``__all__``) all used to live here: a package that took an old
            module's name (``course_lib.training`` serves the names of ``course_lib.training.engine``).

    Example:
        >>> getattr_ = moved_attributes("course_lib.demo", {"softmax": "course_lib.models.softmax.stable_softmax"})
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     getattr_("softmax").__name__
        'stable_softmax'
        >>> str(caught[0].message).split(";")[1]
        ' use course_lib.models.softmax.stable_softmax instead.'
    """
    table = dict(moved or {})

    def __getattr__(attr: str) -> Any:
        new = table.get(attr)
        if new is None and names_of is not None and not attr.startswith("_") \
                and attr in getattr(importlib.import_module(names_of), "__all__", ()):
            new = f"{names_of}.{attr}"
        if new is None:
            raise AttributeError(f"module {module_name!r} has no attribute {attr!r}")
        home, _, name = new.rpartition(".")
        warnings.warn(deprecation_message(f"{module_name}.{attr}", new, since, removal), CourseDeprecationWarning,
                      stacklevel=_importer_stacklevel())
        return getattr(importlib.import_module(home), name)

    return __getattr__
