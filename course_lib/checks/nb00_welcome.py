"""Exercises of notebook 00 (welcome): the numerically stable softmax.

Declarations, not logic to share: its mistakes are whole wrong answers, as a learner writes them, so
``duplicates`` pairs this module with the other checks modules by shape (:mod:`course_lib.checks` says why).
"""

from __future__ import annotations

import torch

from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import public_and_hidden
from course_lib.exercises.verdict import FORBIDDEN_CALL_HINT
from course_lib.models.softmax import stable_softmax

NOTEBOOK = "00_welcome"
SOFTMAX_FUNCTIONS = ("torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax", "torch.special.softmax")
#: PyTorch's attention kernels, by a part of their operator's name (``aten::scaled_dot_product_attention``, its math,
#: flash, efficient, cuDNN and fused variants, ``aten::_safe_softmax`` that only they use,
#: ``aten::_native_multi_head_attention``). Each computes a softmax inside, and the CPU's
#: flash kernel (``aten::_scaled_dot_product_flash_attention_for_cpu``) runs no operator named softmax: with
#: identity keys and values and a scale of 1 it returns ``softmax(x)`` itself, so notebook 00 refuses them too.
ATTENTION_KERNELS = ("scaled_dot_product", "_safe_softmax", "multi_head_attention", "_fused_sdp", "flash_attention",
                     "efficient_attention", "cudnn_attention")


def _cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    scale = 1.0 + float(torch.rand((), generator=gen)) if hidden else 1.0
    return [
        Case("three small logits", args=(torch.tensor([1.0, 2.0, 3.0]) * scale,)),
        Case("large logits (exp would overflow)", args=(torch.tensor([1000.0, 1001.0, 999.0]) * scale,)),
        Case("a wide spread of logits (-100 to 100)", args=(torch.tensor([-100.0, 0.0, 100.0]) * scale,)),
        Case("a square (3, 3) batch (rows and columns of the same length)",
             args=(torch.randn(3, 3, generator=gen) * 3 * scale,)),
        Case("two rows far apart (1000s and -1000s)",
             args=(torch.tensor([[1000.0, 1001.0, 999.0], [-1000.0, -999.0, -1001.0]]) * scale,)),
        Case("a (2, 5) batch, softmax over the last axis", args=(torch.randn(2, 5, generator=gen) * 3,)),
        Case("a (3, 4) batch, dim=0", args=(torch.randn(3, 4, generator=gen) * 50,), kwargs={"dim": 0}),
        Case("a (2, 3, 6) batch, dim=1 (a middle axis)", args=(torch.randn(2, 3, 6, generator=gen) * 30,),
             kwargs={"dim": 1}),
    ]


# Plausible mistakes: each is rejected by the check and named in its hint.
def _naive(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)


def _wrong_axis(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    other = 0 if dim in (-1, x.dim() - 1) and x.dim() > 1 else -1
    return stable_softmax(x, dim=other)


def _not_normalised(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.exp(x - x.amax(dim=dim, keepdim=True))


def _normalised_over_everything(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    e = torch.exp(x - x.max())
    return e / e.sum()


def _shift_by_min(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    e = torch.exp(x - x.amin(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def _shift_by_global_max(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    e = torch.exp(x - x.max())  # one maximum for the whole tensor: a row far below it underflows to 0/0
    return e / e.sum(dim=dim, keepdim=True)


def _max_without_keepdim(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    e = torch.exp(x - x.amax(dim=dim))  # broadcasts along the wrong axis unless dim is the last one
    return e / e.sum(dim=dim, keepdim=True)


def _log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return x - torch.logsumexp(x, dim=dim, keepdim=True)


def _library_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.softmax(x, dim=dim)  # right numbers, but the exercise is to write it


def _method_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return x.softmax(dim)


# Correct alternatives written differently: each is accepted.
def _via_logsumexp(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))


def _with_a_loop(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    moved = x.movedim(dim, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    rows = []
    for row in flat:
        e = torch.exp(row - row.max())
        rows.append(e / e.sum())
    return torch.stack(rows).reshape(moved.shape).movedim(-1, dim)


STABLE_SOFTMAX = register(Exercise(
    name="stable_softmax",
    notebook=NOTEBOOK,
    points=1,
    differentiable=True,  # trained through in the notebooks: gradients must flow
    forbidden_calls=SOFTMAX_FUNCTIONS,  # notebook 00 says: do not call torch.softmax
    # PyTorch's softmax kernels (log_softmax too) and its attention kernels, whatever name reaches them
    forbidden_ops=("softmax", *ATTENTION_KERNELS),
    reference=stable_softmax,
    summary="softmax along a dimension that does not overflow for large inputs",
    **public_and_hidden(_cases),
    mistakes=[
        Mistake("no max shift", _naive,
                "exp(1000) overflows to inf and inf/inf is NaN: subtract the maximum along `dim` first."),
        Mistake("softmax over the wrong axis", _wrong_axis,
                "normalise along `dim` (the argument), not along a fixed axis."),
        Mistake("not normalised", _not_normalised,
                "after exp(), divide by the sum along `dim` so that each slice sums to 1."),
        Mistake("normalised over the whole tensor", _normalised_over_everything,
                "use keepdim=True sums along `dim`, not one sum over the whole tensor."),
        Mistake("shift by the minimum", _shift_by_min,
                "shift by the maximum, not the minimum: x - min can still be large and overflow."),
        Mistake("shift by the global maximum", _shift_by_global_max,
                "one maximum for the whole tensor is too much for a row far below it: its exponentials all underflow "
                "to 0 and 0/0 is NaN. Subtract each slice's own maximum along `dim`.",
                detail="x.amax(dim=dim, keepdim=True), not x.max()."),
        Mistake("max without keepdim", _max_without_keepdim,
                "the maximum along `dim` lost that axis, so it no longer lines up with x: keep the axis (keepdim) "
                "so that it broadcasts.",
                detail="x.amax(dim=dim, keepdim=True)."),
        Mistake("log-softmax", _log_softmax,
                "this is log-softmax; take exp() of it (or exponentiate before normalising)."),
        Mistake("calls torch.softmax", _library_softmax, FORBIDDEN_CALL_HINT),
        Mistake("calls Tensor.softmax", _method_softmax, FORBIDDEN_CALL_HINT),
    ],
    also_correct=[_via_logsumexp, _with_a_loop],
))
