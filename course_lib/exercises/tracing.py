"""What ran: the PyTorch operations and the watched functions one call executed, whatever name reached them.

An exercise that asks a learner to write softmax or attention from smaller operations cannot be judged by
names: PyTorch's kernel is reached as ``torch.softmax``, ``x.softmax``, ``torch._softmax``,
``torch.ops.aten._softmax``, ``torch.log_softmax(x).exp()``, or through a reference captured before any
tripwire was set. Whatever the route, the same *operation* executes. :func:`tracing` records, while a call
runs:

- ``ops``: every operator PyTorch's dispatcher ran (``aten::_softmax``, ``aten::scaled_dot_product_attention``,
  composite ones included), from PyTorch's own profiler, which sees them whatever Python name reached them;
- ``calls``: which *watched* functions ran (a Python function is recognised by its code object, a built-in by
  its owner and name), so a pure-Python route such as ``F.multi_head_attention_forward`` is seen too;
- ``tampering``: calls that would switch the record off (``sys.setprofile``, the profiler's own switches) or
  start a thread or a process during the call (the record follows one thread), and ``threads``: Python
  threads other than the caller's alive when the call starts or ends.

The record is *data*: the grader receives it from its sandbox and decides there (``Trace.as_plain``), the
in-notebook check decides on it in the learner's kernel. In the grader's sandbox the operators are not this
record's: the runner's own profiler session (its *witness*, :mod:`course_lib.grading.sandbox.sandbox_main`),
started before this block and closed after the grader's observation of the result, records them out of reach of
anything that rewrites this object; :func:`tracing` then leaves ``ops`` empty (``witnessed``) and only checks
that the session is still on when the block ends. Code running in the same interpreter could still
forge it with enough effort (writing memory through ``ctypes``); that is the limit stated in
``docs/grading.md``, and such code is visible to anyone reading the submission.

Example:
    >>> import torch
    >>> with tracing() as trace:
    ...     _ = torch.log_softmax(torch.zeros(3), -1).exp()
    >>> matching_ops(trace.ops, ("softmax",))
    ['aten::_log_softmax', 'aten::log_softmax']
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import threading
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["Trace", "tracing", "matching_ops", "watch_key", "resolve_watch", "unimported_key", "thread_idents",
           "owner_and_attribute"]

# Captured once, at import: later changes to these modules' attributes do not change what is used here.
_SETPROFILE = sys.setprofile
_GETPROFILE = sys.getprofile
_CURRENT_FRAMES = sys._current_frames
_GET_IDENT = threading.get_ident
_PROFILER_ENABLED = torch._C._autograd._profiler_enabled

#: Built-ins whose call switches the record off or hides work from it: their call is itself recorded.
_TAMPER_NAMES = {
    ("sys", "setprofile"), ("sys", "settrace"), ("threading", "setprofile"), ("threading", "settrace"),
    ("threading", "setprofile_all_threads"), ("threading", "settrace_all_threads"),
    ("torch._C._autograd", "_disable_profiler_legacy"), ("torch._C._autograd", "_disable_profiler"),
    ("torch._C._autograd", "_enable_profiler_legacy"), ("torch._C._autograd", "_enable_profiler"),
    ("torch._C._autograd", "_prepare_profiler"), ("torch._C._autograd", "_enable_record_function"),
    ("torch._C._autograd", "_toggle_collection_dynamic"), ("torch._C", "_pop_torch_dispatch_stack"),
    ("torch._C", "_set_dispatch_mode"), ("torch._C", "_unset_dispatch_mode"),
    # work handed to a thread or a process started during the call, where the record does not follow
    ("_thread", "start_new_thread"), ("_thread", "start_joinable_thread"), ("_thread", "start_new"),
    ("os", "fork"), ("os", "forkpty"), ("os", "posix_spawn"), ("os", "posix_spawnp"), ("os", "system"),
    ("os", "execv"), ("os", "execve"), ("_posixsubprocess", "fork_exec"),
}


@dataclass
class Trace:
    """What one traced call ran (see the module docstring)."""

    ops: set[str] = field(default_factory=set)
    calls: set[str] = field(default_factory=set)
    tampering: set[str] = field(default_factory=set)
    threads: int = 0
    complete: bool = False
    witnessed: bool = False  # the operators went to an enclosing profiler session (the grader's witness)

    def as_plain(self) -> dict[str, Any]:
        """JSON-friendly data (sorted lists), what the sandbox sends to the grader."""
        return {"ops": sorted(self.ops), "calls": sorted(self.calls), "tampering": sorted(self.tampering),
                "threads": int(self.threads), "complete": bool(self.complete), "witnessed": bool(self.witnessed)}


def watch_key(obj: Any) -> str | None:
    """The key under which a call of ``obj`` is recorded: ``code:<file>:<line>:<name>`` for Python code,
    ``builtin:<owner>.<name>`` for a built-in; None for anything else."""
    obj = getattr(obj, "__func__", obj)
    code = getattr(obj, "__code__", None)
    if isinstance(code, types.CodeType):
        return f"code:{code.co_filename}:{code.co_firstlineno}:{code.co_name}"
    if isinstance(obj, (types.BuiltinFunctionType, types.MethodDescriptorType)):
        owner = getattr(obj, "__self__", None) if isinstance(obj, types.BuiltinFunctionType) else None
        owner_name = getattr(owner, "__name__", None) if isinstance(owner, (type, types.ModuleType)) else None
        if owner_name is None:
            owner_name = getattr(getattr(obj, "__objclass__", None), "__name__", None) or (
                type(owner).__name__ if owner is not None else getattr(obj, "__module__", "") or "")
        return f"builtin:{owner_name}.{obj.__name__}"
    return None


def _builtin_key(func: Any) -> str:
    """``watch_key`` of a built-in at the moment it is called (a bound method's owner is its type)."""
    owner = getattr(func, "__self__", None)
    if owner is None or isinstance(owner, types.ModuleType):
        owner_name = getattr(owner, "__name__", None) or getattr(func, "__module__", "") or ""
    elif isinstance(owner, type):
        owner_name = owner.__name__
    else:
        owner_name = type(owner).__name__
    return f"builtin:{owner_name}.{getattr(func, '__name__', '?')}"


def resolve_watch(dotted: Sequence[str]) -> dict[str, str]:
    """``{watch key: dotted name}`` for functions named like ``"torch.nn.functional.softmax"``.

    A function of a module nobody has imported yet is watched by its file and qualified name
    (``qual:<file>:<qualname>``, :func:`unimported_key`) rather than imported to find its code: importing
    ``torch.nn.attention.bias`` for a check would pull in ``torch._dynamo`` and SymPy (seconds). Code that
    imports it during the call is still seen. Names that do not resolve (another PyTorch version) are skipped:
    the operations still are recorded.
    """
    found: dict[str, str] = {}
    for name in dotted:
        key = unimported_key(name)
        if key is None:
            obj = _resolve(name)
            key = watch_key(obj) if obj is not None else None
        if key is not None:
            found[key] = name
    return found


def unimported_key(dotted: str) -> str | None:
    """``qual:<source file>:<qualified name>`` of a function whose module is not imported yet, found without
    importing it (``importlib.util.find_spec``); None when its module is imported (or not found).

    Example:
        >>> unimported_key("torch.softmax") is None  # torch is imported: watched by its code object
        True
    """
    parts = dotted.split(".")
    for split in range(1, len(parts)):
        module_name = ".".join(parts[:split])
        module = sys.modules.get(module_name)
        if module is not None:
            if hasattr(module, "__path__"):  # an imported package: its submodule may not be
                continue
            return None
        try:
            spec = importlib.util.find_spec(module_name)  # imports its parent package only
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.origin or spec.submodule_search_locations is not None:
            return None
        return f"qual:{spec.origin}:{'.'.join(parts[split:])}"
    return None


def owner_and_attribute(dotted: str) -> tuple[Any, str] | None:
    """``(the module or class holding the last part of dotted, that part's name)``: the module is the longest
    importable prefix (``"torch.Tensor.softmax"`` gives ``(torch.Tensor, "softmax")``); None if none resolves."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for part in parts[split:-1]:
                owner = getattr(owner, part)
        except AttributeError:
            return None
        return owner, parts[-1]
    return None


def _resolve(dotted: str) -> Any:
    found = owner_and_attribute(dotted)
    return None if found is None else getattr(found[0], found[1], None)

def _tamper_keys() -> set[str]:
    keys = set()
    for module, name in _TAMPER_NAMES:
        try:
            obj = getattr(importlib.import_module(module), name, None)
        except ImportError:
            obj = None
        key = watch_key(obj) if obj is not None else None
        if key is not None:
            keys.add(key)
    return keys


_TAMPER = _tamper_keys()
#: Where a call of a ``torch.compile``'d function enters PyTorch's compiled code.
_COMPILED_ENTRY = os.path.join("torch", "_dynamo", "eval_frame.py")


def matching_ops(ops: Sequence[str] | set[str], patterns: Sequence[str]) -> list[str]:
    """The recorded operators whose name contains one of ``patterns`` (``"softmax"``), sorted."""
    return sorted(op for op in ops if any(p and p in op for p in patterns))


class _Recorder:
    """The profile function: watched Python code and built-ins, and calls that switch the record off."""

    def __init__(self, watched: dict[str, str], thread: int) -> None:
        self.watched, self.thread = watched, thread
        self.by_name = any(key.startswith("qual:") for key in watched)  # functions of modules not yet imported
        self.trace = Trace()

    def __call__(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            key = f"code:{code.co_filename}:{code.co_firstlineno}:{code.co_name}"
            if key in self.watched:
                self.trace.calls.add(self.watched[key])
            elif self.by_name and (key := f"qual:{code.co_filename}:{code.co_qualname}") in self.watched:
                self.trace.calls.add(self.watched[key])
            if code.co_filename.endswith(_COMPILED_ENTRY):  # torch.compile'd code: its kernels are not operators
                self.trace.tampering.add("torch.compile (compiled code, whose operators the record cannot see)")
        elif event == "c_call":
            key = _builtin_key(arg)
            if key in self.watched:
                self.trace.calls.add(self.watched[key])
            if key in _TAMPER and frame.f_code is not _TRACING_CODE:  # not this module's own switch-off
                self.trace.tampering.add(key.removeprefix("builtin:"))


def thread_idents() -> frozenset[int]:
    """The Python threads alive now (a baseline that :func:`tracing` can leave out of its count)."""
    return frozenset(_CURRENT_FRAMES())


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 sent to the null device for the block (C++ code writes there, not to sys.stderr)."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 2)
        finally:
            os.close(null)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _other_threads(own: int, ignore: frozenset[int]) -> int:
    return sum(1 for ident in _CURRENT_FRAMES() if ident != own and ident not in ignore)


@contextlib.contextmanager
def tracing(watch: Sequence[str] = (), ignore_threads: frozenset[int] = frozenset()) -> Iterator[Trace]:
    """Record what the block runs (see the module docstring); ``watch``: dotted names of functions to spot;
    ``ignore_threads``: idents of threads that were there before any learner code ran (not counted).

    ``trace.complete`` is True only when the record was still in place when the block ended: the profiler
    still on and this recorder still the profile function. When a profiler session is already on (the grader's
    witness), the operators are left to it (``trace.witnessed``).
    """
    own = _GET_IDENT()
    recorder = _Recorder(resolve_watch(watch), own)
    trace = recorder.trace
    trace.threads = _other_threads(own, ignore_threads)
    trace.witnessed = bool(_PROFILER_ENABLED())
    previous = _GETPROFILE()
    profiler = None if trace.witnessed else torch.autograd.profiler.profile(use_kineto=False)
    intact = False
    try:
        if profiler is not None:
            with _quiet_stderr():  # PyTorch's profiler logs its start and stop on the process's stderr
                profiler.__enter__()
        _SETPROFILE(recorder)
        try:
            yield trace
        finally:
            intact = _GETPROFILE() is recorder
            _SETPROFILE(previous)
            trace.threads = max(trace.threads, _other_threads(own, ignore_threads))
    finally:
        try:
            if profiler is not None:
                with _quiet_stderr():
                    profiler.__exit__(None, None, None)
                trace.ops |= {event.name for event in profiler.function_events or ()}
            elif not _PROFILER_ENABLED():  # the witness's session was switched off inside the block
                intact = False
        except Exception:  # noqa: BLE001 - the profiler was switched off inside the block
            intact = False
        trace.complete = intact and not trace.tampering


_TRACING_CODE = tracing.__wrapped__.__code__  # type: ignore[attr-defined]
