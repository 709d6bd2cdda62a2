"""Exercise of notebook 09's section on the road to attention: additive (Bahdanau) attention.

Declared in its own module (beside ``nb09_why_self_attention``) so that the section can be merged on its
own; ``registered_exercises("09_why_self_attention")`` lists both modules' exercises.
"""

from __future__ import annotations

import math

import torch

from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import public_and_hidden
from course_lib.models.seq2seq import additive_attention

NOTEBOOK = "09_why_self_attention"


def _additive_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    batch, seq_q, seq_k, d_q, d_k, d_v, d_att = (3, 4, 6, 5, 7, 3, 8) if hidden else (2, 3, 5, 4, 6, 2, 8)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * scale

    query, keys, values = randn(batch, seq_q, d_q), randn(batch, seq_k, d_k), randn(batch, seq_k, d_v)
    w_q, w_k, v = randn(d_att, d_q, scale=0.7), randn(d_att, d_k, scale=0.7), randn(d_att, scale=1.5)
    padding = torch.ones(batch, 1, seq_k, dtype=torch.bool)  # (batch, 1, seq_k): the last keys are padding
    padding[0, 0, seq_k - 2:] = False
    padding[-1, 0, 1:] = False
    one_query = query[:, :1]
    all_masked = padding.clone()
    all_masked[1] = False
    cases = [
        Case("(batch=2, seq_q=3) queries over 5 keys, no mask", args=(query, keys, values, w_q, w_k, v)),
        Case("a padding mask (batch, 1, seq_k): padded keys get weight 0",
             args=(query, keys, values, w_q, w_k, v, padding)),
        Case("one query per sentence (seq_q=1), as in a decoder step", args=(one_query, keys, values, w_q, w_k, v)),
        Case("large projections: tanh saturates (scores stay within +-sum|v|)",
             args=(query * 10, keys * 10, values, w_q, w_k, v)),
        Case("a sentence whose keys are all masked: weights and context 0, no NaN",
             args=(query, keys, values, w_q, w_k, v, all_masked)),
    ]
    if hidden:
        causal = torch.ones(seq_q, seq_k, dtype=torch.bool).tril()  # (seq_q, seq_k), broadcast over the batch
        cases.append(Case("a (seq_q, seq_k) mask", args=(query, keys, values, w_q, w_k, v, causal)))
    return cases


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None, dim: int = -1) -> torch.Tensor:
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=dim)
    return weights if mask is None else weights.masked_fill(~mask, 0.0)


def _no_tanh(query, keys, values, w_q, w_k, v, mask=None):
    scores = ((query @ w_q.T).unsqueeze(2) + (keys @ w_k.T).unsqueeze(1)) @ v
    weights = _masked_softmax(scores, mask)
    return weights @ values, weights


def _softmax_over_queries(query, keys, values, w_q, w_k, v, mask=None):
    scores = torch.tanh((query @ w_q.T).unsqueeze(2) + (keys @ w_k.T).unsqueeze(1)) @ v
    weights = _masked_softmax(scores, mask, dim=1)  # over seq_q
    return weights @ values, weights


def _mask_ignored(query, keys, values, w_q, w_k, v, mask=None):
    return additive_attention(query, keys, values, w_q, w_k, v)


def _mask_inverted(query, keys, values, w_q, w_k, v, mask=None):
    return additive_attention(query, keys, values, w_q, w_k, v, None if mask is None else ~mask)


def _tanh_of_each_term(query, keys, values, w_q, w_k, v, mask=None):
    scores = (torch.tanh(query @ w_q.T).unsqueeze(2) + torch.tanh(keys @ w_k.T).unsqueeze(1)) @ v
    weights = _masked_softmax(scores, mask)
    return weights @ values, weights


def _no_v(query, keys, values, w_q, w_k, v, mask=None):
    scores = torch.tanh((query @ w_q.T).unsqueeze(2) + (keys @ w_k.T).unsqueeze(1)).sum(-1)
    weights = _masked_softmax(scores, mask)
    return weights @ values, weights


def _scaled_like_dot_product(query, keys, values, w_q, w_k, v, mask=None):
    scores = torch.tanh((query @ w_q.T).unsqueeze(2) + (keys @ w_k.T).unsqueeze(1)) @ v / math.sqrt(w_q.shape[0])
    weights = _masked_softmax(scores, mask)
    return weights @ values, weights


def _masked_rows_nan(query, keys, values, w_q, w_k, v, mask=None):
    scores = torch.tanh((query @ w_q.T).unsqueeze(2) + (keys @ w_k.T).unsqueeze(1)) @ v
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ values, weights


def _with_einsum(query, keys, values, w_q, w_k, v, mask=None):
    hidden = torch.tanh(torch.einsum("bqd,ad->bqa", query, w_q)[:, :, None]
                        + torch.einsum("bkd,ad->bka", keys, w_k)[:, None])  # (batch, seq_q, seq_k, d_att)
    scores = torch.einsum("bqka,a->bqk", hidden, v)
    if mask is not None:
        scores = torch.where(mask, scores, torch.full_like(scores, -1e30))
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    if mask is not None:
        weights = weights * mask
    weights = weights / weights.sum(-1, keepdim=True).clamp(min=1e-30)
    return torch.einsum("bqk,bkd->bqd", weights, values), weights


def _with_loops(query, keys, values, w_q, w_k, v, mask=None):
    batch, seq_q, _ = query.shape
    seq_k = keys.shape[1]
    full = torch.ones(batch, seq_q, seq_k, dtype=torch.bool) if mask is None else mask.expand(batch, seq_q, seq_k)
    contexts, all_weights = [], []
    for b in range(batch):
        for i in range(seq_q):
            scores = torch.stack([v @ torch.tanh(w_q @ query[b, i] + w_k @ keys[b, j]) for j in range(seq_k)])
            keep = full[b, i]
            if keep.any():
                weights = torch.zeros(seq_k).masked_scatter(keep, torch.softmax(scores[keep], dim=0))
            else:
                weights = torch.zeros(seq_k)
            all_weights.append(weights)
            contexts.append(weights @ values[b])
    return (torch.stack(contexts).reshape(batch, seq_q, -1), torch.stack(all_weights).reshape(batch, seq_q, seq_k))


ADDITIVE_ATTENTION = register(Exercise(
    name="additive_attention",
    notebook=NOTEBOOK,
    points=2,
    differentiable=True,  # trained through in the RNN encoder-decoder
    reference=additive_attention,
    summary="additive (Bahdanau) attention: v^T tanh(W_q q + W_k k), softmax over the keys, weighted values",
    **public_and_hidden(_additive_cases),
    mistakes=[
        Mistake("no tanh", _no_tanh,
                "the score is v^T tanh(W_q q + W_k k): without the tanh it is linear in q and k, and the part "
                "that depends on the query alone cancels in the softmax."),
        Mistake("softmax over the queries", _softmax_over_queries,
                "each query's weights must sum to 1 over the keys: softmax over the last axis (seq_k)."),
        Mistake("mask ignored", _mask_ignored,
                "positions where mask is False (padding) must get weight 0: masked_fill the scores with -inf "
                "before the softmax."),
        Mistake("mask inverted", _mask_inverted,
                "True in the mask means 'may attend' (the course's convention): fill where ~mask, not where mask."),
        Mistake("tanh of each projection", _tanh_of_each_term,
                "add the two projections first and apply tanh to the sum: tanh(W_q q + W_k k), so the score "
                "depends on the query and the key together."),
        Mistake("no v", _no_v,
                "the hidden layer's d_att values are combined with the learned vector v (a dot product with v), "
                "not summed."),
        Mistake("scaled like dot-product attention", _scaled_like_dot_product,
                "additive attention has no 1/sqrt(d) factor: tanh already bounds the hidden layer, and v learns "
                "the scale."),
        Mistake("fully masked rows give NaN", _masked_rows_nan,
                "a sentence whose keys are all masked gives the softmax of a row of -inf, which is NaN: set the "
                "masked weights to 0 after the softmax.",
                detail="weights.masked_fill(~mask, 0.0)."),
    ],
    also_correct=[_with_einsum, _with_loops],
))
