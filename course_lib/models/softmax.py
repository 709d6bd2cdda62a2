"""Warm-up building blocks (notebook 00): a numerically stable softmax."""

from __future__ import annotations

import torch

__all__ = ["stable_softmax"]


def stable_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax of ``x`` along ``dim`` that does not overflow for large inputs.

    softmax(x)_i = exp(x_i) / sum_j exp(x_j) = exp(x_i - m) / sum_j exp(x_j - m) for any m; choosing
    m = max_j x_j keeps every exponent <= 0, so exp() never overflows and the largest term is exactly 1.

    Shapes: ``x`` of any shape; the result has the same shape and sums to 1 along ``dim``.

    Example:
        >>> stable_softmax(torch.tensor([1000.0, 1000.0]))
        tensor([0.5000, 0.5000])
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"stable_softmax: x must be a torch.Tensor, got {type(x).__name__}")
    shifted = x - x.amax(dim=dim, keepdim=True)  # every entry <= 0 now
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)
