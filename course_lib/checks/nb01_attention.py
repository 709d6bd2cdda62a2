"""Exercises of notebook 01 (attention): scaled dot-product attention with an optional boolean mask.

Declarations, not logic to share: its mistakes are whole wrong answers, as a learner writes them, so
``duplicates`` pairs this module with the other checks modules by shape (:mod:`course_lib.checks` says why).

The learner writes ``scaled_dot_product_attention(query, key, value, mask=None, dropout_p=0.0)`` returning
``(output, weights)``; the reference is :func:`course_lib.models.attention.scaled_dot_product_attention`. The public
cases cover every mask shape a learner will pass in the later notebooks (``(seq_k,)``, ``(seq_q, seq_k)``,
``(batch, 1, 1, seq_k)``, ``(batch, heads, seq_q, seq_k)``), seq_q != seq_k, d_v != d_k, and a query whose
keys are all masked (zero weights, zero output).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_lib.checks.nb00_welcome import ATTENTION_KERNELS
from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import bool_mask, inverted, public_and_hidden, randn, with_inputs
from course_lib.models.attention import scaled_dot_product_attention

NOTEBOOK = "01_attention"


def _cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    b, h = (3, 2) if hidden else (2, 2)
    sq, sk, d_k, d_v = (4, 7, 8, 6) if hidden else (3, 5, 4, 6)
    d_k = d_k + int(torch.randint(0, 3, (), generator=gen)) * 4 if hidden else d_k
    causal = torch.tril(torch.ones(sq + 1, sq + 1, dtype=torch.bool))
    cases = [
        Case("no mask, one sequence (seq=4, d_k=d_v=3)", args=(randn(gen, 4, 3), randn(gen, 4, 3), randn(gen, 4, 3))),
        Case(f"no mask, batch of {b}, seq_q={sq} != seq_k={sk}, d_k={d_k} != d_v={d_v}",
             args=(randn(gen, b, sq, d_k), randn(gen, b, sk, d_k), randn(gen, b, sk, d_v))),
        Case("larger scores (inputs scaled by 3), 4-D (batch, heads, seq, d_k)",
             args=(randn(gen, b, h, sq, d_k) * 3, randn(gen, b, h, sk, d_k) * 3, randn(gen, b, h, sk, d_v))),
        Case(f"mask of shape (seq_k,) = ({sk},)",
             args=(randn(gen, b, sq, d_k), randn(gen, b, sk, d_k), randn(gen, b, sk, d_v)),
             kwargs={"mask": bool_mask(gen, sk)}),
        Case(f"causal mask of shape (seq_q, seq_k) = ({sq + 1}, {sq + 1})",
             args=(randn(gen, b, sq + 1, d_k), randn(gen, b, sq + 1, d_k), randn(gen, b, sq + 1, d_v)),
             kwargs={"mask": causal}),
        Case(f"padding mask of shape (batch, 1, 1, seq_k) = ({b}, 1, 1, {sk}), 4-D inputs",
             args=(randn(gen, b, h, sq, d_k), randn(gen, b, h, sk, d_k), randn(gen, b, h, sk, d_v)),
             kwargs={"mask": bool_mask(gen, b, 1, 1, sk)}),
        Case(f"mask of shape (batch, heads, seq_q, seq_k) = ({b}, {h}, {sq}, {sk})",
             args=(randn(gen, b, h, sq, d_k), randn(gen, b, h, sk, d_k), randn(gen, b, h, sk, d_v)),
             kwargs={"mask": bool_mask(gen, b, h, sq, sk)}),
    ]
    cases.append(Case("very large scores (inputs scaled by 30: exp of a score overflows float32)",
                      args=(randn(gen, b, sq, d_k) * 30, randn(gen, b, sk, d_k) * 30, randn(gen, b, sk, d_v)),
                      kwargs={"mask": bool_mask(gen, b, sq, sk)}))
    fully = bool_mask(gen, b, sq, sk)
    fully[0, 1] = False  # query 1 of the first sequence may attend to nothing
    cases.append(Case("a query whose keys are all masked (expected: zero weights and a zero output)",
                      args=(randn(gen, b, sq, d_k), randn(gen, b, sk, d_k), randn(gen, b, sk, d_v)),
                      kwargs={"mask": fully}))
    cases.append(Case("dropout_p=1.0 (every weight dropped: expected zero weights and a zero output)",
                      args=(randn(gen, b, sq, d_k), randn(gen, b, sk, d_k), randn(gen, b, sk, d_v)),
                      kwargs={"dropout_p": 1.0}))
    return cases


# --- plausible mistakes ---------------------------------------------------------------------------------
# Each takes the reference's arguments and returns (output, weights), wrong in one way.

def _finish(scores: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The correct second half (mask, softmax, empty rows to zero, weighted sum), for mistakes in the first."""
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ value, weights


def _no_scale(query, key, value, mask=None, dropout_p=0.0):
    return _finish(query @ key.transpose(-2, -1), value, mask)


def _scale_by_d_k(query, key, value, mask=None, dropout_p=0.0):
    return _finish(query @ key.transpose(-2, -1) / query.size(-1), value, mask)


def _scale_by_seq_len(query, key, value, mask=None, dropout_p=0.0):
    return _finish(query @ key.transpose(-2, -1) / math.sqrt(key.size(-2)), value, mask)  # sqrt(n), n = seq_k


def _scale_by_d_v(query, key, value, mask=None, dropout_p=0.0):
    return _finish(query @ key.transpose(-2, -1) / math.sqrt(value.size(-1)), value, mask)


def _keys_times_queries(query, key, value, mask=None, dropout_p=0.0):
    return _finish(key @ query.transpose(-2, -1) / math.sqrt(query.size(-1)), value, mask)  # (seq_k, seq_q)


def _softmax_over_queries(query, key, value, mask=None, dropout_p=0.0):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-2))
    return weights @ value, weights


def _mask_after_softmax(query, key, value, mask=None, dropout_p=0.0):
    weights = torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), dim=-1)
    if mask is not None:
        weights = weights * mask  # zeroed, but the remaining weights no longer sum to 1
    return weights @ value, weights


def _nan_for_empty_rows(query, key, value, mask=None, dropout_p=0.0):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def _large_negative_fill(query, key, value, mask=None, dropout_p=0.0):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)  # a fully masked row becomes uniform, not zero
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def _masked_with_zero(query, key, value, mask=None, dropout_p=0.0):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)  # a score of 0 is exp(0) = 1 after the softmax, not 0
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def _no_max_shift_then_nan_to_num(query, key, value, mask=None, dropout_p=0.0):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    exps = torch.exp(scores)  # overflows to inf above about 88 in float32
    weights = torch.nan_to_num(exps / exps.sum(dim=-1, keepdim=True))  # meant for empty rows, hides inf/inf too
    return weights @ value, weights


def _dropout_ignored(query, key, value, mask=None, dropout_p=0.0):
    return _finish(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), value, mask)


def _dropout_on_the_output(query, key, value, mask=None, dropout_p=0.0):
    output, weights = _finish(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), value, mask)
    return F.dropout(output, p=dropout_p), weights


def _returns_scores(query, key, value, mask=None, dropout_p=0.0):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    output, _ = _finish(scores, value, mask)
    return output, scores


# --- correct alternatives written differently --------------------------------------------------------------

def _with_einsum(query, key, value, mask=None, dropout_p=0.0):
    scores = torch.einsum("...qd,...kd->...qk", query, key) * query.shape[-1] ** -0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf")))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)  # rows with no key: 0/0 -> 0
    weights = F.dropout(weights, p=dropout_p)
    return torch.einsum("...qk,...kv->...qv", weights, value), weights


def _large_negative_then_zero_rows(query, key, value, mask=None, dropout_p=0.0):
    scores = torch.matmul(query, key.mT) / query.size(-1) ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), -1e9)
    weights = scores.softmax(-1)
    if mask is not None:
        weights = weights * mask.any(-1, keepdim=True)
    if dropout_p > 0:
        weights = torch.nn.Dropout(dropout_p)(weights)  # a fresh module is in training mode
    return torch.matmul(weights, value), weights


def _loop_over_queries(query, key, value, mask=None, dropout_p=0.0):
    """One query at a time, by broadcasting the mask first: slow, but close to the definition."""
    seq_q, seq_k = query.shape[-2], key.shape[-2]
    full = torch.ones(seq_q, seq_k, dtype=torch.bool) if mask is None else mask
    full = full.expand(*query.shape[:-2], seq_q, seq_k)
    rows, outs = [], []
    for i in range(seq_q):
        q_i = query[..., i, :]  # (..., d_k)
        s = (key * q_i.unsqueeze(-2)).sum(-1) / math.sqrt(query.shape[-1])  # (..., seq_k)
        s = s.masked_fill(~full[..., i, :], float("-inf"))
        e = torch.exp(s - s.amax(-1, keepdim=True).clamp(min=-1e30))
        w = e / e.sum(-1, keepdim=True).clamp(min=1e-30)
        w = F.dropout(w, p=dropout_p)
        rows.append(w)
        outs.append((w.unsqueeze(-1) * value).sum(-2))
    return torch.stack(outs, dim=-2), torch.stack(rows, dim=-2)


SCALED_DOT_PRODUCT_ATTENTION = register(Exercise(
    name="scaled_dot_product_attention",
    notebook=NOTEBOOK,
    points=2,
    differentiable=True,  # trained through in the notebooks: gradients must flow
    # PyTorch's one-call attention is the exercise's answer: switched off while the learner's code runs.
    forbidden_calls=("torch.nn.functional.scaled_dot_product_attention",),
    forbidden_ops=ATTENTION_KERNELS,  # PyTorch's attention, whatever name reaches it
    reference=scaled_dot_product_attention,
    summary="softmax(Q K^T / sqrt(d_k)) V with an optional boolean mask (True = may attend), "
            "returning (output, weights)",
    **public_and_hidden(_cases),
    mistakes=[
        Mistake("dropout_p ignored", _dropout_ignored,
                "apply dropout to the attention weights, right after the softmax, with probability dropout_p. With "
                "dropout_p=1.0 every weight is dropped, so the weights and the output are all zeros.",
                detail="weights = F.dropout(weights, p=dropout_p), before multiplying by the values."),
        Mistake("dropout applied to the output", _dropout_on_the_output,
                "attention dropout drops weights, not outputs: drop the weights, then multiply by the values, and "
                "return the weights after dropout (so that the output is the returned weights times the values).",
                detail="weights = F.dropout(weights, p=dropout_p); output = weights @ value."),
        Mistake("scale missing", _no_scale,
                "divide the scores by sqrt(d_k): without it their spread grows with d_k and the softmax saturates."),
        Mistake("divided by d_k instead of sqrt(d_k)", _scale_by_d_k,
                "the scale is 1/sqrt(d_k), not 1/d_k: q.k has variance d_k, so its standard deviation is sqrt(d_k).",
                detail="scores / math.sqrt(query.size(-1))."),
        Mistake("divided by sqrt(seq_len) instead of sqrt(d_k)", _scale_by_seq_len,
                "the scale is 1/sqrt(d_k), the size of each query and key vector, not the square root of the "
                "sequence length: q.k sums d_k products, so its spread grows with d_k however many keys there are.",
                detail="scores / math.sqrt(query.size(-1)), not key.size(-2)."),
        Mistake("scaled by the value's size", _scale_by_d_v,
                "d_k is the size of the query and key vectors; the values' size d_v may differ.",
                detail="d_k = query.size(-1)."),
        Mistake("K Q^T instead of Q K^T", _keys_times_queries,
                "the scores have one row per query and one column per key: Q K^T, not K Q^T.",
                detail="query @ key.transpose(-2, -1)."),
        Mistake("softmax over the queries (dim=-2)", _softmax_over_queries,
                "take the softmax over the keys, the last axis (dim=-1): each query's weights must sum to 1."),
        Mistake("mask inverted", with_inputs(scaled_dot_product_attention, mask=inverted),
                "in this course's convention True means 'may attend': fill the scores where the mask is False "
                "(masked_fill(~mask, float('-inf')))."),
        Mistake("mask applied after the softmax", _mask_after_softmax,
                "mask the scores before the softmax (set them to -inf); zeroing weights afterwards leaves rows "
                "that no longer sum to 1."),
        Mistake("NaN for a query with no key", _nan_for_empty_rows,
                "a query whose keys are all masked gives the softmax of a row of -inf, which is NaN: set such rows' "
                "weights to zero. Multiplying by a 0/1 mask keeps them NaN (NaN * 0 = NaN); replace the values "
                "instead.",
                detail="weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0) (or torch.where)."),
        Mistake("-1e9 fill leaves a fully masked row uniform", _large_negative_fill,
                "filling with -1e9 gives a query with no key uniform weights, not zeros: set the weights of rows "
                "whose mask is all False to zero."),
        Mistake("masked scores set to 0 instead of -inf", _masked_with_zero,
                "a masked score set to 0 still gets weight, since exp(0) = 1: fill masked scores with minus "
                "infinity, so that their weight after the softmax is exactly 0.",
                detail="scores.masked_fill(~mask, float('-inf'))."),
        Mistake("exp without the max shift, NaN hidden by nan_to_num", _no_max_shift_then_nan_to_num,
                "exp() of a score above about 88 is inf in float32 and inf/inf = NaN; nan_to_num then turns a "
                "whole row into zeros. Subtract each row's maximum before exp() (or use torch.softmax) and zero "
                "only the rows whose keys are all masked."),
        Mistake("returned the scores instead of the weights", _returns_scores,
                "return the weights after the softmax (rows summing to 1), not the raw scores."),
    ],
    also_correct=[_with_einsum, _large_negative_then_zero_rows, _loop_over_queries],
))
