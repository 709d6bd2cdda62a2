"""A small instructor's assignment with five exercises, used by the grading tests and benchmark.

It shows what ``course-grade --source`` expects of an assignment outside the course: a notebook whose metadata
names a checks module (``{"course": {"notebook": "fx_assignment", "checks": "fx_checks"}}``) and that module,
beside the notebook, declaring the exercises with :func:`course_lib.exercises.register`. The references live
here too (the course's own live in ``course_lib``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from course_lib.exercises import Case, Exercise, Mistake, register

NOTEBOOK = "fx_assignment"


def fx_scaled_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Attention scores q k^T / sqrt(d_k): (..., seq_q, d_k), (..., seq_k, d_k) -> (..., seq_q, seq_k)."""
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def fx_causal_mask(seq_len: int) -> torch.Tensor:
    """Boolean (seq_len, seq_len) mask, True on and below the diagonal."""
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()


def fx_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(softmax(q k^T / sqrt(d_k)) v, the weights)."""
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v, weights


class FxScale(nn.Module):
    """Multiply the last axis by a learned vector: (..., d) -> (..., d)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x * weight, broadcast over the leading axes."""
        return x * self.weight


def fx_masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the sequence of the positions where mask is True: (batch, seq, d), (batch, seq) -> (batch, d)."""
    weights = mask.to(x.dtype).unsqueeze(-1)
    return (x * weights).sum(dim=1) / weights.sum(dim=1)


def _qk(gen: torch.Generator, hidden: bool) -> list[Case]:
    n = 2 if hidden else 1
    return [Case(f"batch {n}, seq 3 and 4", args=(torch.randn(n, 3, 8, generator=gen),
                                                   torch.randn(n, 4, 8, generator=gen)))]


def _qkv(gen: torch.Generator, hidden: bool) -> list[Case]:
    n = 2 if hidden else 1
    return [Case(f"batch {n}", args=(torch.randn(n, 3, 4, generator=gen), torch.randn(n, 5, 4, generator=gen),
                                      torch.randn(n, 5, 6, generator=gen)))]


def _scale(gen: torch.Generator, hidden: bool) -> list[Case]:
    return [Case("d=4", args=(torch.randn(2, 3, 4, generator=gen),), init={"d": 4},
                 state={"weight": torch.randn(4, generator=gen)})]


def _mean(gen: torch.Generator, hidden: bool) -> list[Case]:
    mask = torch.tensor([[True, True, False], [True, False, False]])
    return [Case("two rows", args=(torch.randn(2, 3, 5, generator=gen), mask))]


register(Exercise(
    name="fx_scaled_scores", notebook=NOTEBOOK, points=1, reference=fx_scaled_scores,
    public_cases=lambda g: _qk(g, False), hidden_cases=lambda g: _qk(g, True),
    mistakes=[Mistake("no scale", lambda q, k: q @ k.transpose(-2, -1), "divide by sqrt(d_k).")],
))
register(Exercise(
    name="fx_causal_mask", notebook=NOTEBOOK, points=1, reference=fx_causal_mask,
    public_cases=[Case("3", args=(3,))], hidden_cases=[Case("1", args=(1,)), Case("5", args=(5,))],
    mistakes=[Mistake("upper", lambda n: torch.ones(n, n, dtype=torch.bool).triu(), "below, not above.")],
))
register(Exercise(
    name="fx_attend", notebook=NOTEBOOK, points=2, reference=fx_attend,
    public_cases=lambda g: _qkv(g, False), hidden_cases=lambda g: _qkv(g, True),
))
register(Exercise(
    name="fx_scale", notebook=NOTEBOOK, points=1, reference=FxScale,
    public_cases=lambda g: _scale(g, False), hidden_cases=lambda g: _scale(g, True),
))
register(Exercise(
    name="fx_masked_mean", notebook=NOTEBOOK, points=1, reference=fx_masked_mean,
    public_cases=lambda g: _mean(g, False), hidden_cases=lambda g: _mean(g, True),
))
