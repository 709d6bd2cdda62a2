"""The class edition's stand-ins for graded components: PyTorch's own modules behind the course's signatures.

In the class edition a graded exercise's reference is gone; where a later lesson calls it, the edition puts
one of these in its place (same name, same signature, same public behaviour), each computing through the
PyTorch function or module named in :data:`BACKED`. The tests already prove the course's references equal
to those PyTorch modules, so a lesson that falls back on them shows the same numbers. The grader refuses a
route to PyTorch's own softmax and attention kernels as an answer, so these cannot be handed in either.

Each stand-in is written to be copied on its own into the edition's module in place of the reference (the
builder takes its source), so it imports what it needs inside its body. A method (``"Class.forward"``)
replaces only that method; the class's constructor and other methods stay.

Example:
    >>> import torch
    >>> torch.allclose(stable_softmax(torch.tensor([1.0, 2.0])), torch.softmax(torch.tensor([1.0, 2.0]), -1))
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Backing", "BACKED", "stable_softmax", "scaled_dot_product_attention", "multi_head_attention_forward",
           "causal_mask", "label_smoothed_cross_entropy"]


def stable_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Class edition: PyTorch's own ``torch.softmax`` (notebook 00's exercise writes it by hand).

    Shapes: ``x`` any shape -> the same shape, each slice along ``dim`` summing to 1.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"stable_softmax: x must be a torch.Tensor, got {type(x).__name__}")
    return torch.softmax(x, dim=dim)  # PyTorch's kernel (the class edition's stand-in)


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 mask: torch.Tensor | None = None,
                                 dropout_p: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Class edition: ``(output, weights)`` from PyTorch's fused ``F.scaled_dot_product_attention``.

    The weights come from the same kernel applied to an identity matrix of values (row ``i`` of ``weights @
    I`` is row ``i`` of the weights), so both results are PyTorch's. A query whose keys are all masked gets
    zero weights and a zero output, as the course's convention says. Dropout, when asked for, is applied to
    the weights once and the output is ``weights @ value``.

    Shapes: ``query`` (..., seq_q, d_k), ``key`` (..., seq_k, d_k), ``value`` (..., seq_k, d_v), ``mask``
    boolean broadcastable to (..., seq_q, seq_k), True = may attend -> (..., seq_q, d_v), (..., seq_q, seq_k).
    """
    import torch.nn.functional as F

    if mask is not None and (not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool):
        raise TypeError("scaled_dot_product_attention: mask must be a boolean tensor (True = may attend) or None")
    seq_k = key.shape[-2]
    identity = torch.eye(seq_k, dtype=query.dtype, device=query.device)  # (seq_k, seq_k)
    identity = identity.expand(*key.shape[:-2], seq_k, seq_k)  # (..., seq_k, seq_k): one per batch entry
    attn_mask = None
    if mask is not None:
        attn_mask = mask.reshape((1,) * max(0, query.dim() - mask.dim()) + tuple(mask.shape))
    weights = F.scaled_dot_product_attention(query, key, identity, attn_mask=attn_mask)  # (..., seq_q, seq_k)
    if mask is not None:
        has_a_key = attn_mask.any(dim=-1, keepdim=True)  # (..., seq_q or 1, 1)
        weights = weights.masked_fill(~has_a_key, 0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ value, weights  # (..., seq_q, d_v)


def multi_head_attention_forward(self: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 mask: torch.Tensor | None = None,
                                 need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Class edition: ``MultiHeadAttention.forward`` through PyTorch's ``F.multi_head_attention_forward``.

    The module keeps its own weights (``w_q``, ``w_k``, ``w_v``, ``w_o``: state dicts load as before); they are
    handed to PyTorch's multi-head attention (the function ``nn.MultiheadAttention`` runs) as separate
    projection weights. Masks: the course's boolean ``True = may attend``, broadcastable to (batch, heads,
    seq_q, seq_k), becomes PyTorch's ``attn_mask`` (``True = may not``) of shape (batch * heads, seq_q, seq_k).
    A query whose keys are all masked gets a zero output and zero weights.

    Shapes: ``query`` (batch, seq_q, d_model), ``key``/``value`` (batch, seq_k, d_model) -> output (batch,
    seq_q, d_model) and, with ``need_weights``, weights (batch, heads, seq_q, seq_k), else None.
    """
    import torch.nn.functional as F

    batch, seq_q, seq_k = query.shape[0], query.shape[1], key.shape[1]
    heads = self.num_heads
    blocked = empty = None
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise TypeError("MultiHeadAttention: mask must be a boolean tensor (True = may attend) or None")
        full = mask.reshape((1,) * max(0, 4 - mask.dim()) + tuple(mask.shape))
        full = full.expand(batch, heads, seq_q, seq_k)  # (batch, heads, seq_q, seq_k)
        empty = ~full.any(dim=-1, keepdim=True)  # (batch, heads, seq_q, 1): queries with no key at all
        blocked = ~full.reshape(batch * heads, seq_q, seq_k)  # PyTorch's convention: True = may NOT attend
    bias = None if self.w_q.bias is None else torch.cat([self.w_q.bias, self.w_k.bias, self.w_v.bias])

    def torch_mha(attn_mask: torch.Tensor | None, weights: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        return F.multi_head_attention_forward(
            query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1),  # (seq, batch, d_model)
            self.d_model, heads, None, bias, None, None, False, self.dropout if self.training else 0.0,
            self.w_o.weight, self.w_o.bias, training=self.training, need_weights=weights, attn_mask=attn_mask,
            use_separate_proj_weight=True, q_proj_weight=self.w_q.weight, k_proj_weight=self.w_k.weight,
            v_proj_weight=self.w_v.weight, average_attn_weights=False)

    output, _ = torch_mha(blocked, False)  # PyTorch's fused path: a query with no key gets a zero head
    output = output.transpose(0, 1)  # (batch, seq_q, d_model)
    weights = None
    if need_weights:
        opened = None if blocked is None else blocked & ~empty.reshape(batch * heads, seq_q, 1)
        _, weights = torch_mha(opened, True)  # (batch, heads, seq_q, seq_k)
        if empty is not None:
            weights = weights.masked_fill(empty, 0.0)
    return output, weights


def causal_mask(seq_len: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Class edition: PyTorch's ``nn.Transformer.generate_square_subsequent_mask`` as a boolean mask.

    PyTorch's mask is additive (0 where a query may attend, -inf elsewhere); ``== 0`` turns it into the
    course's convention (True = may attend). Shapes: -> boolean (seq_len, seq_len).
    """
    from torch import nn

    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"causal_mask: seq_len must be a positive int, got {seq_len!r}")
    additive = nn.Transformer.generate_square_subsequent_mask(seq_len, device=device)  # (seq, seq): 0 / -inf
    return additive == 0


def label_smoothed_cross_entropy(logits: torch.Tensor, target: torch.Tensor, smoothing: float = 0.1,
                                 ignore_index: int = 0) -> torch.Tensor:
    """Class edition: PyTorch's ``F.cross_entropy(label_smoothing=...)`` with the course's signature.

    One documented difference from PyTorch kept as the course has it: a batch that is all padding gives 0
    (with a graph), not NaN. Shapes: ``logits`` (..., C), ``target`` (...) -> a scalar.
    """
    import torch.nn.functional as F

    flat_logits, flat_target = logits.reshape(-1, logits.shape[-1]), target.reshape(-1)  # (N, C), (N,)
    if not bool((flat_target != ignore_index).any()):
        return logits.sum() * 0.0
    return F.cross_entropy(flat_logits, flat_target, ignore_index=ignore_index, label_smoothing=smoothing)


@dataclass(frozen=True)
class Backing:
    """One stand-in: the function (its source is copied into the edition) and the PyTorch callables it runs
    through (dotted names; the tests switch them off and check that the stand-in then computes nothing)."""

    stand_in: Callable[..., Any]
    through: tuple[str, ...]


#: Key of a graded part (``module.name`` or ``module.Class.method``) -> its PyTorch-backed stand-in.
BACKED: dict[str, Backing] = {
    "course_lib.models.softmax.stable_softmax": Backing(stable_softmax, ("torch.softmax",)),
    "course_lib.models.attention.scaled_dot_product_attention": Backing(
        scaled_dot_product_attention, ("torch.nn.functional.scaled_dot_product_attention",)),
    "course_lib.models.attention.MultiHeadAttention.forward": Backing(
        multi_head_attention_forward, ("torch.nn.functional.multi_head_attention_forward",)),
    "course_lib.models.masking.causal_mask": Backing(
        causal_mask, ("torch.nn.Transformer.generate_square_subsequent_mask",)),
    "course_lib.training.engine.label_smoothed_cross_entropy": Backing(
        label_smoothed_cross_entropy, ("torch.nn.functional.cross_entropy",)),
}
