"""Exercises of notebook 09 (why self-attention): the paper's Table 1 in exact numbers, and the road to attention.

Declarations, not logic to share: its mistakes are whole wrong answers, as a learner writes them, so
``duplicates`` pairs this module with the other checks modules by shape (:mod:`course_lib.checks` says why).

- ``max_path_length(layer, n, k=3, r=4)``: fewest layers connecting the first and last of n positions;
- ``layer_flops(layer, n, d, k=3, r=4)``: multiply-adds of one layer on n vectors of width d;
- ``additive_attention(query, keys, values, w_q, w_k, v, mask=None)``: Bahdanau's additive attention.

The first two references live in :mod:`course_lib.models.complexity` (``tests/models/test_baselines.py`` verifies them
against real layer stacks and PyTorch's ``FlopCounterMode``), the third in :mod:`course_lib.models.seq2seq`.
"""

from __future__ import annotations

import math

import torch

from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import public_and_hidden
from course_lib.models.complexity import layer_flops, max_path_length
from course_lib.models.seq2seq import additive_attention

NOTEBOOK = "09_why_self_attention"


def _randint(gen: torch.Generator, low: int, high: int) -> int:
    """A random integer in [low, high] from ``gen``."""
    return int(torch.randint(low, high + 1, (), generator=gen))


# --- max_path_length ------------------------------------------------------------------------------------

def _path_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    cases = [
        Case("self-attention, n=100", args=("self_attention", 100)),
        Case("self-attention, a single position (n=1)", args=("self_attention", 1)),
        Case("recurrent, n=100", args=("recurrent", 100)),
        Case("recurrent, n=1", args=("recurrent", 1)),
        Case("convolution, n=9, k=3 (divides evenly)", args=("convolution", 9), kwargs={"k": 3}),
        Case("convolution, n=10, k=3 (does not divide evenly)", args=("convolution", 10), kwargs={"k": 3}),
        Case("convolution, n=100, k=5", args=("convolution", 100), kwargs={"k": 5}),
        Case("dilated convolution, n=9, k=3 (n is a power of k)", args=("dilated_convolution", 9), kwargs={"k": 3}),
        Case("dilated convolution, n=10, k=3", args=("dilated_convolution", 10), kwargs={"k": 3}),
        Case("dilated convolution, n=125, k=5 (log(125)/log(5) is 3.0000000000000004 in floats)",
             args=("dilated_convolution", 125), kwargs={"k": 5}),
        Case("restricted self-attention, n=100, r=4", args=("restricted_self_attention", 100), kwargs={"r": 4}),
        Case("restricted self-attention, n=9, r=4", args=("restricted_self_attention", 9), kwargs={"r": 4}),
        Case("restricted self-attention, n=100, r=7 (use r, not 4)", args=("restricted_self_attention", 100),
             kwargs={"r": 7}),
    ]
    if hidden:
        for kind in ("recurrent", "convolution", "dilated_convolution", "restricted_self_attention"):
            n, k, r = _randint(gen, 2, 500), _randint(gen, 2, 7), _randint(gen, 1, 9)
            cases.append(Case(f"{kind}, n={n}, k={k}, r={r}", args=(kind, n), kwargs={"k": k, "r": r}))
        k = _randint(gen, 2, 6)
        power = _randint(gen, 2, 5)
        cases.append(Case(f"dilated convolution at a power, n={k ** power}, k={k}",
                          args=("dilated_convolution", k ** power), kwargs={"k": k}))
        cases.append(Case("dilated convolution, n=1000, k=10", args=("dilated_convolution", 1000), kwargs={"k": 10}))
    return cases


def _path_recurrent_n(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    return n if layer == "recurrent" else max_path_length(layer, n, k=k, r=r)


def _path_conv_n_over_k(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    return math.ceil(n / k) if layer == "convolution" else max_path_length(layer, n, k=k, r=r)


def _path_conv_floor(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    return (n - 1) // (k - 1) if layer == "convolution" else max_path_length(layer, n, k=k, r=r)


def _path_float_log(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    if layer == "dilated_convolution":
        return math.ceil(math.log(n) / math.log(k))
    return max_path_length(layer, n, k=k, r=r)


def _path_dilated_strict(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    if layer == "dilated_convolution":
        layers = 0
        while k ** layers <= n:  # one layer too many when n is a power of k
            layers += 1
        return layers
    return max_path_length(layer, n, k=k, r=r)


def _path_single_position(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    return 1 if layer == "self_attention" else max_path_length(layer, n, k=k, r=r)


def _path_restricted_n_over_r(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    return math.ceil(n / r) if layer == "restricted_self_attention" else max_path_length(layer, n, k=k, r=r)


def _path_with_floats(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    if n == 1:
        return 0
    steps = {
        "self_attention": 1,
        "recurrent": n - 1,
        "convolution": math.ceil((n - 1) / (k - 1)),
        "restricted_self_attention": math.ceil((n - 1) / r),
    }
    if layer in steps:
        return steps[layer]
    return next(depth for depth in range(n + 1) if k ** depth >= n)


def _path_by_reach(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    """Grow the set of positions the last output sees, one layer at a time."""
    seen_from_last, depth = 1, 0  # how many positions (counting back from the last) it depends on
    while seen_from_last < n:
        depth += 1
        if layer == "self_attention":
            seen_from_last = n
        elif layer == "recurrent":
            seen_from_last += 1
        elif layer == "convolution":
            seen_from_last += k - 1
        elif layer == "dilated_convolution":
            seen_from_last *= k
        else:
            seen_from_last += r
    return depth


MAX_PATH_LENGTH = register(Exercise(
    name="max_path_length",
    notebook=NOTEBOOK,
    points=1,
    reference=max_path_length,
    summary="the maximum path length column of the paper's Table 1, in exact numbers of layers",
    **public_and_hidden(_path_cases),
    mistakes=[
        Mistake("recurrent: n steps", _path_recurrent_n,
                "from the first to the last of n positions a recurrence takes n - 1 steps, not n."),
        Mistake("convolution: n / k", _path_conv_n_over_k,
                "a kernel of width k adds k - 1 new positions per layer (not k), the last position needs to "
                "reach n - 1 others, and a partial layer still counts: ceil((n - 1) / (k - 1))."),
        Mistake("convolution: rounded down", _path_conv_floor,
                "a partial layer is still a layer: round up (ceil), not down."),
        Mistake("dilated: math.log rounds", _path_float_log,
                "a ratio of floating-point logarithms is not exact (log 125 / log 5 = 3.0000000000000004): count "
                "with integers, e.g. multiply the receptive field by k until it reaches n.",
                detail="layers = 0; reach = 1; while reach < n: reach *= k; layers += 1."),
        Mistake("dilated: one layer too many", _path_dilated_strict,
                "k to the power L positions are enough when that equals n exactly: stop as soon as the receptive "
                "field reaches n.",
                detail="stop when k ** L >= n."),
        Mistake("one position still needs a layer", _path_single_position,
                "with n = 1 there is nothing to connect: every layer kind needs 0 layers."),
        Mistake("restricted attention: n / r", _path_restricted_n_over_r,
                "a query reaches keys up to distance r, so one layer covers r more positions; the last "
                "position must reach n - 1 others: ceil((n - 1) / r)."),
    ],
    also_correct=[_path_with_floats, _path_by_reach],
))


# --- layer_flops ------------------------------------------------------------------------------------------

def _flops_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    cases = [
        Case("self-attention, n=10, d=4", args=("self_attention", 10, 4)),
        Case("self-attention, n=512, d=64", args=("self_attention", 512, 64)),
        Case("recurrent (LSTM), n=10, d=4", args=("recurrent", 10, 4)),
        Case("recurrent (LSTM), n=50, d=512", args=("recurrent", 50, 512)),
        Case("convolution, n=10, d=4, k=3", args=("convolution", 10, 4), kwargs={"k": 3}),
        Case("dilated convolution, n=10, d=6, k=5", args=("dilated_convolution", 10, 6), kwargs={"k": 5}),
        Case("restricted self-attention, n=100, d=8, r=4", args=("restricted_self_attention", 100, 8),
             kwargs={"r": 4}),
        Case("restricted self-attention, n=50, d=8, r=2 (use r, not 4)", args=("restricted_self_attention", 50, 8),
             kwargs={"r": 2}),
    ]
    if hidden:
        for kind in ("self_attention", "recurrent", "convolution", "restricted_self_attention"):
            n, d, k, r = _randint(gen, 2, 300), _randint(gen, 2, 128), _randint(gen, 2, 7), _randint(gen, 1, 9)
            n = max(n, 2 * r + 1)  # the paper's r-neighbourhood assumes n >= 2r + 1 (no clipping at short n)
            cases.append(Case(f"{kind}, n={n}, d={d}, k={k}, r={r}", args=(kind, n, d), kwargs={"k": k, "r": r}))
    return cases


def _flops_no_projections(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    if layer == "self_attention":
        return 2 * n * n * d
    return layer_flops(layer, n, d, k=k, r=r)


def _flops_scores_once(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    if layer == "self_attention":
        return 4 * n * d * d + n * n * d
    return layer_flops(layer, n, d, k=k, r=r)


def _flops_lstm_one_gate(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    return 2 * n * d * d if layer == "recurrent" else layer_flops(layer, n, d, k=k, r=r)


def _flops_lstm_hidden_only(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    return 4 * n * d * d if layer == "recurrent" else layer_flops(layer, n, d, k=k, r=r)


def _flops_conv_depthwise(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    return k * n * d if layer in ("convolution", "dilated_convolution") else layer_flops(layer, n, d, k=k, r=r)


def _flops_restricted_r_keys(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    if layer == "restricted_self_attention":
        return 4 * n * d * d + 2 * n * r * d
    return layer_flops(layer, n, d, k=k, r=r)


def _flops_counted_twice(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    return 2 * layer_flops(layer, n, d, k=k, r=r)


def _flops_from_products(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    """Sum p*q*s over the (p, q) @ (q, s) products the layer performs."""
    products: list[tuple[int, int, int]]
    if layer in ("self_attention", "restricted_self_attention"):
        keys = n if layer == "self_attention" else 2 * r + 1
        products = [(n, d, d)] * 4 + [(n, d, keys), (n, keys, d)]  # projections, Q K^T, weights @ V
    elif layer == "recurrent":
        products = [(1, d, 4 * d), (1, d, 4 * d)] * n  # x_t W_ih and h_{t-1} W_hh for the four gates
    else:
        products = [(n, d, d)] * k  # one d x d matrix per tap
    return sum(p * q * s for p, q, s in products)


def _flops_by_table(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    projections = 4 * n * d ** 2
    table = {
        "self_attention": projections + 2 * d * n ** 2,
        "restricted_self_attention": projections + 2 * d * n * (2 * r + 1),
        "recurrent": 2 * 4 * n * d ** 2,
        "convolution": k * n * d ** 2,
        "dilated_convolution": k * n * d ** 2,
    }
    return table[layer]


LAYER_FLOPS = register(Exercise(
    name="layer_flops",
    notebook=NOTEBOOK,
    points=1,
    reference=layer_flops,
    summary="the complexity-per-layer column of the paper's Table 1, in exact multiply-adds",
    **public_and_hidden(_flops_cases),
    mistakes=[
        Mistake("attention without projections", _flops_no_projections,
                "a self-attention layer also projects Q, K, V and the output: four (n, d) @ (d, d) products."),
        Mistake("attention: only the scores", _flops_scores_once,
                "there are two n x n products: the scores Q K^T and the weighted sum of the values."),
        Mistake("LSTM: one gate", _flops_lstm_one_gate,
                "an LSTM has four gates (input, forget, cell, output), each with its own matrices."),
        Mistake("LSTM: hidden matrices only", _flops_lstm_hidden_only,
                "each gate multiplies the input x_t by W_ih and the previous state h_{t-1} by W_hh: "
                "two d x d products per gate per step."),
        Mistake("convolution: one weight per channel", _flops_conv_depthwise,
                "each of the k taps is a full d x d matrix (every output channel mixes every input channel)."),
        Mistake("restricted attention: r keys", _flops_restricted_r_keys,
                "a neighbourhood of radius r holds 2r + 1 keys (r on each side and the position itself)."),
        Mistake("FLOPs instead of multiply-adds", _flops_counted_twice,
                "count one multiply-add per (i, j, l) of a product; FLOPs (2 per multiply-add) are twice that."),
    ],
    also_correct=[_flops_from_products, _flops_by_table],
))


# --- additive_attention (the road to attention) ------------------------------------------------------------

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
