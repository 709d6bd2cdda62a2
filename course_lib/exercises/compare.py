"""Comparing a learner's plain output with the reference's: the one comparison of the checks and the grader.

:func:`to_plain` turns outputs into plain data (NumPy arrays, lists); :func:`compare_outputs` says what
differs (exact shapes and dtypes, booleans stay booleans, integers stay integers, NaN fails, tolerances);
:mod:`course_lib.exercises.verdict` judges with them (and with an exercise's own ``compare`` for a random
answer).

Example:
    >>> import numpy as np
    >>> compare_outputs(np.zeros(2, np.float32), np.ones(2, np.float32), 1e-5, 1e-4)[0][:40]
    'output: values differ (largest error 1 a'
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["to_plain", "compare_outputs", "describe_value"]


def to_plain(value: Any) -> Any:
    """Turn an output into plain data: tensors become NumPy arrays, tuples become lists.

    Anything else (an object whose ``__eq__`` always says True, say) is kept as it is and will not compare
    equal to an array.
    """
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu").numpy().copy() if value.dtype != torch.bfloat16 else (
            value.detach().float().cpu().numpy().copy())
    if isinstance(value, tuple):  # a namedtuple too, read as a tuple (its own __iter__ is not trusted)
        return [to_plain(v) for v in tuple.__iter__(value)]
    if isinstance(value, list):
        return [to_plain(v) for v in list.__iter__(value)]
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return np.asarray(value)  # a NumPy scalar (np.float32(0.5)) counts as the number it is
    return value


def describe_value(value: Any) -> str:
    """A short description of a plain value for a message (an array by its shape and dtype)."""
    if isinstance(value, np.ndarray):
        return f"an array of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, list):
        return f"a sequence of {len(value)} items"
    return f"{type(value).__name__} {value!r}"[:120]


def compare_outputs(expected: Any, got: Any, atol: float, rtol: float, where: str = "output") -> list[str]:
    """Compare plain outputs (see :func:`to_plain`); return the problems found, none when they agree.

    Shapes must match exactly (no broadcasting), booleans must be booleans, NaN anywhere fails.
    """
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return [f"{where}: expected a tuple of {len(expected)} items, got {describe_value(got)}"]
        problems: list[str] = []
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            problems += compare_outputs(e, g, atol, rtol, f"{where}[{i}]")
        return problems
    if expected is None:
        return [] if got is None else [f"{where}: expected None, got {describe_value(got)}"]
    from_tensor = isinstance(expected, np.ndarray)
    if not from_tensor:
        expected = np.asarray(expected)
        if isinstance(got, (bool, int, float)):
            got = np.asarray(got)
    if type(got) is not np.ndarray:
        wanted = f"a tensor of shape {tuple(expected.shape)}" if from_tensor else "a number"
        return [f"{where}: expected {wanted}, got {describe_value(got)}"]
    if got.shape != expected.shape:
        return [f"{where}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"]
    if expected.dtype == np.bool_ and got.dtype != np.bool_:
        return [f"{where}: expected a boolean tensor (True/False), got dtype {got.dtype}"]
    if got.dtype.kind not in "biuf":
        return [f"{where}: expected numbers, got dtype {got.dtype}"]
    if from_tensor and expected.dtype.kind in "iu" and got.dtype.kind not in "iu":
        return [f"{where}: expected an integer tensor (dtype {expected.dtype}), got dtype {got.dtype}"]
    if from_tensor and expected.dtype.kind == "f" and got.dtype != expected.dtype:
        return [f"{where}: expected dtype {expected.dtype}, got {got.dtype} (keep the precision of the inputs: "
                f"a float64 result doubles memory and changes every later computation's dtype)"]
    e64, g64 = expected.astype(np.float64), got.astype(np.float64)
    if np.isnan(g64).any() and not np.isnan(e64).any():
        idx = tuple(int(i) for i in np.argwhere(np.isnan(g64))[0])
        return [f"{where}: contains NaN (first at index {list(idx)})"]
    if expected.dtype == np.bool_:
        wrong = np.argwhere(e64 != g64)
        if len(wrong):
            idx = tuple(int(i) for i in wrong[0])
            return [f"{where}: {len(wrong)} of {e64.size} entries differ; first at index {list(idx)}: "
                    f"expected {bool(e64[idx])}, got {bool(g64[idx])}"]
        return []
    if np.allclose(g64, e64, atol=atol, rtol=rtol, equal_nan=True):
        return []
    with np.errstate(invalid="ignore"):
        err = np.where(g64 == e64, 0.0, np.abs(g64 - e64))  # equal infinities are no error
    err = np.where(np.isnan(err), np.inf, err)
    idx = np.unravel_index(int(np.argmax(err)), err.shape) if err.ndim else ()
    idx = tuple(int(i) for i in idx)
    return [f"{where}: values differ (largest error {float(err[idx]):.4g} at index {list(idx)}: "
            f"expected {float(e64[idx]):.6g}, got {float(g64[idx]):.6g})"]
