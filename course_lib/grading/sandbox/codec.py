"""Plain data in and out of the sandbox: tensors and arrays as ``.npz`` members, the structure as JSON.

Used on both sides: the grader encodes the hidden cases, the sandbox's runner decodes them, calls the
learner's code and encodes the outputs, the grader decodes those again (as NumPy, never as pickles). It
imports nothing from ``course_lib``, so the sandbox's copy of the library carries it unchanged.

Example:
    >>> import torch
    >>> arrays = {}
    >>> encode_value((torch.ones(2), 3), arrays)["t"], sorted(arrays)
    ('tuple', ['a0'])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["encode_value", "decode_value", "encode_cases", "Unsupported", "npz_bytes", "witness_mark",
           "witnessed_ops", "witnessed_processes"]

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


def encode_value(value: Any, arrays: dict[str, np.ndarray], strict: bool = True, dicts: bool = False) -> Any:
    """Plain data -> JSON-able structure, tensors and arrays moved into ``arrays`` (keys ``a0``, ``a1``...).

    With ``strict`` (the grader's cases) anything else raises ``TypeError``; without it (the kernel's outputs)
    it is recorded as ``unsupported``, and so is a dict unless ``dicts`` (the runner's own records).
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
        return {"t": kind, "items": [encode_value(v, arrays, strict, dicts) for v in items]}
    if isinstance(value, Mapping) and (strict or dicts):
        return {"t": "dict", "items": {str(k): encode_value(v, arrays, strict, dicts) for k, v in value.items()}}
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


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """Arrays as the bytes of an uncompressed ``.npz`` (a request's inputs, an answer's outputs)."""
    import io

    blob = io.BytesIO()
    np.savez(blob, **arrays)
    return blob.getvalue()


def witness_mark(nonce: str, where: str) -> str:
    """The name of the event the sandbox's witness records at ``where`` (``begin``, ``end``) of a request whose
    unguessable id is ``nonce``: the grader finds both in the record, or the record is not this request's."""
    return f"course-witness:{nonce}:{where}"


def witnessed_ops(raw: Any, nonce: str) -> list[str] | None:
    """The operators of a witness record sent for the request ``nonce`` (see
    :mod:`course_lib.grading.sandbox.sandbox_main`), or None when it is missing, malformed, incomplete or lacks
    either mark (a session switched off, replaced or forged without the request's id)."""
    if not isinstance(raw, dict) or raw.get("complete") is not True or not isinstance(raw.get("ops"), list):
        return None
    ops = [op for op in raw["ops"][:100_000] if isinstance(op, str)]
    marks = {witness_mark(nonce, "begin"), witness_mark(nonce, "end")}
    if not marks <= set(ops):
        return None
    return sorted({op[:200] for op in ops} - marks)


def witnessed_processes(raw: Any) -> int:
    """How many processes other than the runner's the witness record saw while the request ran (see
    :func:`course_lib.grading.sandbox.sandbox_main.other_processes`): their operators are in no record. A record
    without the count (malformed) counts as one."""
    count = raw.get("processes") if isinstance(raw, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else 1
