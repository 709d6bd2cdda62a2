"""Moving cases into the grading kernel and outputs out of it, as plain arrays (never pickles).

Two halves share this module:

- in the **grader's process**, :func:`write_inputs` stores an exercise's hidden cases as an ``.npz`` of
  arrays plus a JSON manifest (structure, dtypes, the name the learner's cell defines, a nonce), and
  :func:`read_outputs` loads what the kernel wrote back with ``allow_pickle=False``;
- in the **kernel**, the grader's own harness cell calls :func:`run`, which loads the inputs, calls the
  learner's function or class on every case (with the exercise's reference *poisoned* meanwhile, so that
  a solution calling it raises), and writes each output as arrays plus a JSON description. Anything that is
  not a tensor, an array, a number, a boolean, None or a tuple/list of them (an object whose ``__eq__``
  always says True, for instance) is written as ``{"t": "unsupported", "type": ...}``: it cannot compare
  equal to anything in the grader.

Nothing here decides a score: the grader compares the arrays with its own reference outputs in its own
process. :func:`install` (also run in the kernel, before any learner code) adds an audit hook that refuses
to start processes, open sockets or touch files outside the submission's working directory and the Python
installation: a second line of defence behind the static policy.

Example (grader side)::

    arrays, manifest = encode_cases(cases)      # cases: list[Case]
    json.dumps(manifest)                        # plain JSON; arrays: dict[str, np.ndarray]
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["encode_value", "decode_value", "encode_cases", "write_inputs", "read_outputs", "run", "install",
           "poison_during_cell", "restore_after_cell",
           "Unsupported"]

_TORCH_DTYPES = {str(d): d for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
                                      torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)}


class Unsupported:
    """What an output that is not plain data becomes in the grader: it never equals an expected value."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<an object of type {self.type_name}, not a tensor>"

    def __eq__(self, other: object) -> bool:  # pragma: no cover - defensive
        return False

    __hash__ = object.__hash__


# ----------------------------------------------------------------------------------------------------
# Encoding (both sides)
# ----------------------------------------------------------------------------------------------------

def encode_value(value: Any, arrays: dict[str, np.ndarray], strict: bool = True) -> Any:
    """Plain data -> JSON-able structure, tensors and arrays moved into ``arrays`` (keys ``a0``, ``a1``...).

    With ``strict`` (the grader's cases) anything else raises ``TypeError``; without it (the kernel's outputs)
    it is recorded as ``unsupported``.
    """
    if value is None or type(value) in (bool, str):
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return {"t": "int", "v": int(value)}
    if isinstance(value, float):
        return {"t": "float", "v": float(value)}
    if isinstance(value, torch.Tensor):
        tensor = torch.Tensor.detach(value).cpu()
        dtype = str(tensor.dtype)
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        key = f"a{len(arrays)}"
        arrays[key] = np.array(tensor.numpy(), copy=True)
        return {"t": "tensor", "key": key, "dtype": dtype, "grad": bool(value.requires_grad) if strict else False}
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        value = np.asarray(value)
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        key = f"a{len(arrays)}"
        arrays[key] = np.array(value, copy=True)
        return {"t": "ndarray", "key": key}
    if isinstance(value, (list, tuple)):  # subclasses too (a namedtuple), read as the base type reads them
        kind, items = ("tuple", tuple.__iter__(value)) if isinstance(value, tuple) else ("list", list.__iter__(value))
        return {"t": kind, "items": [encode_value(v, arrays, strict) for v in items]}
    if isinstance(value, Mapping) and strict:
        return {"t": "dict", "items": {str(k): encode_value(v, arrays, strict) for k, v in value.items()}}
    if strict:
        raise TypeError(f"cannot ship a {type(value).__name__} into the grading kernel")
    return {"t": "unsupported", "type": type(value).__qualname__[:80]}


def decode_value(node: Any, arrays: Mapping[str, np.ndarray], as_torch: bool) -> Any:
    """Inverse of :func:`encode_value`: tensors (``as_torch``, the kernel) or NumPy arrays (the grader)."""
    if node is None or isinstance(node, (bool, str)):
        return node
    if not isinstance(node, dict):
        return Unsupported(type(node).__name__)
    kind = node.get("t")
    if kind == "int":
        return int(node["v"])
    if kind == "float":
        return float(node["v"])
    if kind in ("tensor", "ndarray"):
        arr = np.asarray(arrays[str(node["key"])])
        if kind == "tensor" and as_torch:
            tensor = torch.from_numpy(arr.copy())
            dtype = _TORCH_DTYPES.get(str(node.get("dtype")))
            if dtype is not None and tensor.dtype != dtype:
                tensor = tensor.to(dtype)
            if node.get("grad"):
                tensor.requires_grad_(True)
            return tensor
        return arr
    if kind in ("list", "tuple"):
        items = [decode_value(v, arrays, as_torch) for v in node.get("items", [])]
        return tuple(items) if kind == "tuple" and as_torch else items
    if kind == "dict":
        return {str(k): decode_value(v, arrays, as_torch) for k, v in node.get("items", {}).items()}
    if kind == "unsupported":
        return Unsupported(str(node.get("type", "?")))
    return Unsupported(str(kind))


def encode_cases(cases: Sequence[Any]) -> tuple[dict[str, np.ndarray], list[dict[str, Any]]]:
    """The arrays and the JSON description of a list of :class:`course_lib.exercises.Case`."""
    arrays: dict[str, np.ndarray] = {}
    described = []
    for case in cases:
        described.append({
            "label": case.label,
            "args": encode_value(tuple(case.args), arrays),
            "kwargs": encode_value(dict(case.kwargs), arrays),
            "init": None if case.init is None else encode_value(dict(case.init), arrays),
            "state": None if case.state is None else encode_value(dict(case.state), arrays),
        })
    return arrays, described


def write_inputs(folder: Path, stem: str, manifest: dict[str, Any], arrays: dict[str, np.ndarray]) -> Path:
    """Write ``stem.in.npz`` and ``stem.json`` into ``folder``; return the manifest's path."""
    np.savez(folder / f"{stem}.in.npz", **arrays)
    path = folder / f"{stem}.json"
    path.write_text(json.dumps(manifest))
    return path


def read_outputs(folder: Path, stem: str, nonce: str, max_bytes: int = 64 << 20) -> dict[str, Any] | None:
    """What the harness wrote for one exercise, decoded to NumPy; None when it is missing or not ours.

    The result JSON must carry the nonce of this run (a file the learner's code wrote itself does not).
    """
    result_path, arrays_path = folder / f"{stem}.result.json", folder / f"{stem}.out.npz"
    try:
        if not result_path.is_file() or result_path.stat().st_size > max_bytes:
            return None
        result = json.loads(result_path.read_text())
        if not isinstance(result, dict) or result.get("nonce") != nonce:
            return None
        arrays: dict[str, np.ndarray] = {}
        if arrays_path.is_file() and arrays_path.stat().st_size <= max_bytes:
            with np.load(arrays_path, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
        for case in result.get("cases", []):
            if "output" in case:
                case["output"] = decode_value(case["output"], arrays, as_torch=False)
        return result
    except Exception:  # noqa: BLE001 - a corrupt or hostile file counts as missing
        return None


# ----------------------------------------------------------------------------------------------------
# Kernel side
# ----------------------------------------------------------------------------------------------------

_POISON_MESSAGE = ("the grader disabled the course's reference implementation of this exercise while grading "
                   "it: a solution may not call it")


def _poison_code(fn: types.FunctionType) -> types.CodeType | None:
    """A code object that raises, with the same free variables as ``fn`` (so it can replace ``__code__``)."""
    free = fn.__code__.co_freevars
    lines = ["def _outer():"] + [f"    {v} = None" for v in free] + ["    def poisoned(*args, **kwargs):"]
    if free:
        lines.append("        (" + ", ".join(free) + ",)")
    lines += [f"        raise RuntimeError({_POISON_MESSAGE!r})", "    return poisoned"]
    namespace: dict[str, Any] = {}
    exec("\n".join(lines), namespace)  # the grader's own code, not the learner's
    code = namespace["_outer"]().__code__
    return code if code.co_freevars == free else None


def _resolve_reference(spec: Mapping[str, str] | None) -> Any:
    if not spec:
        return None
    try:
        import importlib

        obj: Any = importlib.import_module(spec["module"])
        for part in spec["qualname"].split("."):
            obj = getattr(obj, part)
        return obj
    except Exception:  # noqa: BLE001 - nothing to poison
        return None


def _poison(reference: Any) -> list[tuple[types.FunctionType, types.CodeType]]:
    """Replace the code of the reference (function, or every method of a class); return how to undo it."""
    functions: list[types.FunctionType] = []
    if isinstance(reference, types.FunctionType):
        functions.append(reference)
    elif isinstance(reference, type):
        for value in vars(reference).values():
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, types.FunctionType):
                functions.append(value)
    undo = []
    for fn in functions:
        code = _poison_code(fn)
        if code is not None:
            undo.append((fn, fn.__code__))
            fn.__code__ = code
    return undo


_POISONED: list[tuple[types.FunctionType, types.CodeType]] = []


def poison_during_cell(manifest_path: str) -> None:
    """Kernel side, before the learner's exercise cell: disable the exercise's reference while it runs.

    So the cell cannot compute answers with it ahead of the hidden cases (through a course wrapper that
    calls it, say). :func:`restore_after_cell` undoes it before the harness runs.
    """
    manifest = json.loads(Path(manifest_path).read_text())
    _POISONED.extend(_poison(_resolve_reference(manifest.get("reference"))))


def restore_after_cell() -> None:
    """Kernel side, after the learner's exercise cell: undo :func:`poison_during_cell`."""
    while _POISONED:
        fn, code = _POISONED.pop()
        fn.__code__ = code


def _classify(err: BaseException) -> str:
    if isinstance(err, NotImplementedError):
        return "not-implemented"
    text = str(err)
    if isinstance(err, MemoryError) or "can't allocate memory" in text or "DefaultCPUAllocator" in text:
        return "memory"
    return "error"


def _user_line(err: BaseException) -> str:
    """The innermost traceback line in the learner's cell (not torch's, not course_lib's)."""
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        name = frame.filename.replace("\\", "/")
        if "/torch/" in name or "/course_lib/" in name or "/numpy/" in name:
            continue
        return f"line {frame.lineno}: {frame.line}".strip()
    return ""


def run(manifest_path: str, namespace: Mapping[str, Any]) -> None:
    """Kernel side: call the learner's implementation on every case of a manifest; write the outputs."""
    from course_lib.exercises.core import Case, run_case

    folder = Path(manifest_path).parent
    manifest = json.loads(Path(manifest_path).read_text())
    stem = manifest["stem"]
    with np.load(folder / f"{stem}.in.npz", allow_pickle=False) as data:
        inputs = {k: data[k] for k in data.files}
    result: dict[str, Any] = {"nonce": manifest["nonce"], "cases": []}
    arrays: dict[str, np.ndarray] = {}
    impl = namespace.get(manifest["target"])
    reference = _resolve_reference(manifest.get("reference"))
    if impl is None:
        result["missing"] = f"the exercise cell does not define {manifest['target']}"
    elif reference is not None and (impl is reference or (isinstance(impl, type) and isinstance(reference, type)
                                                          and issubclass(impl, reference))):
        result["is_reference"] = True
    else:
        undo = _poison(reference)
        try:
            for described in manifest["cases"]:
                entry: dict[str, Any] = {"label": described["label"]}
                try:
                    init = decode_value(described["init"], inputs, as_torch=True)
                    state = decode_value(described["state"], inputs, as_torch=True)
                    case = Case(described["label"], args=tuple(decode_value(described["args"], inputs, True)),
                                kwargs=decode_value(described["kwargs"], inputs, True), init=init, state=state)
                    out = run_case(impl, case, grad=bool(manifest.get("grad")),
                                   differentiable=bool(manifest.get("differentiable")),
                                   forbidden=tuple(manifest.get("forbidden", ())))
                    entry["output"] = encode_value(out, arrays, strict=False)
                    entry["status"] = "ok"
                except BaseException as err:  # noqa: BLE001 - the learner's error is data for the grader
                    if isinstance(err, KeyboardInterrupt):
                        raise
                    entry["status"] = _classify(err)
                    entry["error"] = f"{type(err).__name__}: {str(err)[:400]}"
                    entry["line"] = _user_line(err)[:300]
                result["cases"].append(entry)
                if entry["status"] == "not-implemented":
                    break
        finally:
            for fn, code in undo:
                fn.__code__ = code
    np.savez(folder / f"{stem}.out.npz", **arrays)
    (folder / f"{stem}.result.json").write_text(json.dumps(result))


def install(workdir: str, read_roots: Sequence[str]) -> None:
    """Kernel side, before any learner code: an audit hook that confines the kernel (defence in depth).

    Refused: starting processes (``subprocess``, ``os.system``, ``os.exec*``, ``os.fork``...), sockets,
    loading native libraries through ctypes, and opening files outside ``read_roots`` (the Python
    installation, course_lib, the submission's working directory) or writing outside ``workdir``.
    """
    workdir = os.path.realpath(workdir)
    roots = tuple(os.path.realpath(r) for r in read_roots) + (workdir,)
    always = ("/dev/null", "/dev/urandom", "/proc/self/", "/proc/cpuinfo", "/proc/meminfo", "/sys/")
    blocked_events = ("subprocess.Popen", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork",
                      "os.forkpty", "pty.spawn", "socket.connect", "socket.bind", "ctypes.dlopen",
                      "os.kill", "os.killpg", "signal.pthread_kill", "mmap.__new__", "sys.setprofile",
                      "sys.settrace", "code.__new__", "function.__new__", "sys.addaudithook")

    def _inside(path: str, places: Sequence[str]) -> bool:
        return any(path == p or path.startswith(p.rstrip("/") + "/") for p in places)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event.startswith(blocked_events):
            raise PermissionError(f"the grader does not allow {event} in a graded notebook")
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            raw = os.fsdecode(args[0])
            path = os.path.realpath(os.path.join(workdir, raw))
            mode = str(args[1]) if len(args) > 1 and args[1] is not None else "r"
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            writing = any(c in mode for c in "wax+") or (flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
            if path.startswith(always) or path in always:
                return
            if writing and not _inside(path, (workdir,)):
                raise PermissionError(f"the grader does not allow writing {raw} in a graded notebook")
            if not _inside(path, roots):
                raise PermissionError(f"the grader does not allow reading {raw} in a graded notebook")
        elif event in ("os.remove", "os.rename", "os.rmdir", "os.unlink", "shutil.rmtree", "os.chmod",
                       "os.symlink", "os.link", "os.truncate") and args:
            target = args[0]
            if isinstance(target, (str, bytes, os.PathLike)):
                path = os.path.realpath(os.path.join(workdir, os.fsdecode(target)))
                if not _inside(path, (workdir,)):
                    raise PermissionError(f"the grader does not allow {event} outside the submission")

    sys.addaudithook(hook)
