"""Exercises of notebook 02 (multi-head attention): split_heads, merge_heads, and MultiHeadAttention.forward.

Declarations, not logic to share: its mistakes are whole wrong answers, as a learner writes them, so
``duplicates`` pairs this module with the other checks modules by shape (:mod:`course_lib.checks` says why).

References: :func:`course_lib.models.attention.split_heads`, :func:`course_lib.models.attention.merge_heads` and
:class:`course_lib.models.attention.MultiHeadAttention` (a class exercise: the notebook gives the constructor, the
learner writes ``forward``; each case loads the same weights into the learner's module and the reference).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import public_and_hidden
from course_lib.models.attention import MultiHeadAttention, merge_heads, split_heads

NOTEBOOK = "02_multi_head_attention"


# =========================================================================================================
# split_heads
# =========================================================================================================

def _split_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    cases = [
        Case("features 0..7 of one position, 2 heads: x of shape (1, 1, 8)",
             args=(torch.arange(8.0).reshape(1, 1, 8), 2)),
        Case("(batch=2, seq=3, d_model=8), 2 heads", args=(torch.randn(2, 3, 8, generator=gen), 2)),
        Case("(batch=2, seq=5, d_model=12), 3 heads", args=(torch.randn(2, 5, 12, generator=gen), 3)),
        Case("(batch=1, seq=4, d_model=16), 4 heads (seq == num_heads)",
             args=(torch.randn(1, 4, 16, generator=gen), 4)),
        Case("one head: (2, 3, 6), num_heads=1", args=(torch.randn(2, 3, 6, generator=gen), 1)),
    ]
    if hidden:
        h = int(torch.randint(2, 5, (), generator=gen))
        cases.append(Case(f"(3, 7, {6 * h}), {h} heads", args=(torch.randn(3, 7, 6 * h, generator=gen), h)))
    return cases


def _split_no_transpose(x, num_heads):
    batch, seq, d_model = x.shape
    return x.view(batch, num_heads, seq, d_model // num_heads)  # right shape, positions and heads mixed


def _split_forgot_transpose(x, num_heads):
    batch, seq, d_model = x.shape
    return x.view(batch, seq, num_heads, d_model // num_heads)


def _split_interleaved(x, num_heads):
    batch, seq, d_model = x.shape
    return x.view(batch, seq, d_model // num_heads, num_heads).permute(0, 3, 1, 2)  # head h gets features h, h+H, ...


def _split_wrong_transpose(x, num_heads):
    batch, seq, d_model = x.shape
    return x.view(batch, seq, num_heads, d_model // num_heads).transpose(2, 3)


def _split_transpose_then_view(x, num_heads):
    batch, seq, d_model = x.shape
    return x.transpose(1, 2).reshape(batch, num_heads, seq, d_model // num_heads)


def _split_keys_layout(x, num_heads):
    batch, seq, d_model = x.shape
    return x.view(batch, seq, num_heads, d_model // num_heads).permute(0, 2, 3, 1)  # (batch, heads, d_k, seq)


def _split_with_chunk(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)  # (batch, heads, seq, d_k)


def _split_with_loop(x, num_heads):
    d_k = x.shape[-1] // num_heads
    return torch.stack([x[:, :, h * d_k:(h + 1) * d_k] for h in range(num_heads)], dim=1)


def _split_with_unflatten(x, num_heads):
    return x.unflatten(-1, (num_heads, -1)).permute(0, 2, 1, 3)


SPLIT_HEADS = register(Exercise(
    name="split_heads",
    notebook=NOTEBOOK,
    points=1,
    differentiable=True,  # trained through in the notebooks: gradients must flow
    reference=split_heads,
    summary="(batch, seq, d_model) -> (batch, num_heads, seq, d_k): head h gets features h*d_k..(h+1)*d_k-1",
    **public_and_hidden(_split_cases),
    atol=0.0, rtol=0.0,
    mistakes=[
        Mistake("view straight to (batch, heads, seq, d_k)", _split_no_transpose,
                "the shape is right but the numbers are not: viewing straight to (batch, heads, seq, d_k) cuts the "
                "memory in the wrong order. View as (batch, seq, num_heads, d_k) first, then swap the seq and head "
                "axes.",
                detail="x.view(batch, seq, num_heads, d_k).transpose(1, 2)."),
        Mistake("transpose forgotten", _split_forgot_transpose,
                "after viewing as (batch, seq, num_heads, d_k), move the head axis before the sequence axis.",
                detail="transpose(1, 2)."),
        Mistake("features interleaved across heads", _split_interleaved,
                "viewing as (batch, seq, d_k, num_heads) gives head h the features h, h + num_heads, ...: each head "
                "must get a contiguous slice, so the head axis comes before d_k in the view.",
                detail="x.view(batch, seq, num_heads, d_k).transpose(1, 2)."),
        Mistake("transposed the last two axes", _split_wrong_transpose,
                "you swapped the last two axes (heads and d_k); the axes to swap are seq and heads.",
                detail="transpose(1, 2), not transpose(2, 3)."),
        Mistake("transpose before the view", _split_transpose_then_view,
                "cut each position's feature vector first (view the last axis as (num_heads, d_k)), then move the "
                "head axis: transposing first mixes positions into the heads."),
        Mistake("permuted to (batch, heads, d_k, seq)", _split_keys_layout,
                "the result is (batch, num_heads, seq, d_k): only the seq and head axes change places; the keys' "
                "transpose for Q K^T happens later, inside attention.",
                detail="transpose(1, 2) (or permute(0, 2, 1, 3))."),
    ],
    also_correct=[_split_with_chunk, _split_with_loop, _split_with_unflatten],
))


# =========================================================================================================
# merge_heads
# =========================================================================================================

def _merge_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    cases = [
        Case("2 heads of 4 features at one position: x of shape (1, 2, 1, 4)",
             args=(torch.arange(8.0).reshape(1, 2, 1, 4),)),
        Case("(batch=2, heads=2, seq=3, d_k=4)", args=(torch.randn(2, 2, 3, 4, generator=gen),)),
        Case("(batch=2, heads=3, seq=5, d_k=4)", args=(torch.randn(2, 3, 5, 4, generator=gen),)),
        Case("(batch=1, heads=4, seq=4, d_k=4) (seq == heads == d_k)", args=(torch.randn(1, 4, 4, 4, generator=gen),)),
        Case("non-contiguous input (as attention returns it): (2, 3, 6, 2) transposed view",
             args=(torch.randn(2, 6, 3, 2, generator=gen).transpose(1, 2),)),
    ]
    if hidden:
        h = int(torch.randint(2, 5, (), generator=gen))
        cases.append(Case(f"(3, {h}, 7, 5)", args=(torch.randn(3, h, 7, 5, generator=gen),)))
    return cases


def _merge_no_transpose(x):
    batch, heads, seq, d_k = x.shape
    return x.reshape(batch, seq, heads * d_k)


def _merge_d_k_major(x):
    batch, heads, seq, d_k = x.shape
    return x.permute(0, 2, 3, 1).reshape(batch, seq, d_k * heads)  # features interleaved across heads


def _merge_reversed_heads(x):
    batch, heads, seq, d_k = x.shape
    return x.flip(1).transpose(1, 2).reshape(batch, seq, heads * d_k)


def _merge_sum(x):
    return x.sum(dim=1)  # (batch, seq, d_k): heads added, not concatenated


def _merge_mean_repeated(x):
    batch, heads, seq, d_k = x.shape
    return x.mean(dim=1).repeat(1, 1, heads)


def _merge_wrong_transpose(x):
    batch, heads, seq, d_k = x.shape
    return x.transpose(2, 3).reshape(batch, seq, heads * d_k)


def _merge_with_cat(x):
    return torch.cat(x.unbind(dim=1), dim=-1)  # heads side by side


def _merge_with_flatten(x):
    return x.permute(0, 2, 1, 3).flatten(start_dim=2)


def _merge_with_loop(x):
    batch, heads, seq, d_k = x.shape
    out = torch.empty(batch, seq, heads * d_k, dtype=x.dtype)
    for h in range(heads):
        out[:, :, h * d_k:(h + 1) * d_k] = x[:, h]
    return out


MERGE_HEADS = register(Exercise(
    name="merge_heads",
    notebook=NOTEBOOK,
    points=1,
    differentiable=True,  # trained through in the notebooks: gradients must flow
    reference=merge_heads,
    summary="(batch, num_heads, seq, d_k) -> (batch, seq, num_heads * d_k): concatenate the heads, in order",
    **public_and_hidden(_merge_cases),
    atol=0.0, rtol=0.0,
    mistakes=[
        Mistake("reshape without moving the head axis", _merge_no_transpose,
                "reshaping alone reads the memory in (heads, seq) order and mixes positions: bring the head axis "
                "next to d_k first, then flatten.",
                detail="x.transpose(1, 2).reshape(batch, seq, num_heads * d_k) (or .contiguous().view(...))."),
        Mistake("features interleaved (d_k before heads)", _merge_d_k_major,
                "each head's d_k features must stay together: bring the tensor to (batch, seq, heads, d_k), not "
                "(batch, seq, d_k, heads), before flattening the last two axes."),
        Mistake("heads merged in the wrong order", _merge_reversed_heads,
                "head 0 comes first: features 0..d_k-1 of the result are head 0's, then head 1's, and so on."),
        Mistake("heads summed instead of concatenated", _merge_sum,
                "concatenate the heads (the result has num_heads * d_k = d_model features), do not add them."),
        Mistake("heads averaged", _merge_mean_repeated,
                "each head keeps its own output: concatenate them, do not average."),
        Mistake("transposed the last two axes", _merge_wrong_transpose,
                "move the head axis next to d_k, (batch, heads, seq, d_k) -> (batch, seq, heads, d_k), before "
                "flattening; you swapped seq and d_k instead.",
                detail="transpose(1, 2), not transpose(2, 3)."),
    ],
    also_correct=[_merge_with_cat, _merge_with_flatten, _merge_with_loop],
))


# =========================================================================================================
# MultiHeadAttention.forward (a class exercise)
# =========================================================================================================

def _state(gen: torch.Generator, d_model: int, bias: bool = True) -> dict[str, torch.Tensor]:
    """Random weights for the four projections (biases included: zero biases would hide some mistakes)."""
    state: dict[str, torch.Tensor] = {}
    for name in ("w_q", "w_k", "w_v", "w_o"):
        state[f"{name}.weight"] = torch.randn(d_model, d_model, generator=gen) / math.sqrt(d_model)
        if bias:
            state[f"{name}.bias"] = torch.randn(d_model, generator=gen) * 0.3
    return state


def _mha_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    b, sq, sk = (3, 5, 7) if hidden else (2, 4, 6)
    d_model, h = (12, 3) if hidden else (8, 2)
    init = {"d_model": d_model, "num_heads": h}
    x = torch.randn(b, sq, d_model, generator=gen)
    memory = torch.randn(b, sk, d_model, generator=gen)
    values = torch.randn(b, sk, d_model, generator=gen)  # keys and values that differ
    padding = torch.ones(b, 1, 1, sk, dtype=torch.bool)
    padding[0, ..., -2:] = False  # the first sequence has two padding positions
    causal = torch.tril(torch.ones(sq, sq, dtype=torch.bool))
    no_key = torch.rand(b, 1, sq, sk, generator=gen) < 0.7
    no_key[..., 0] = True
    no_key[0, :, 1] = False  # query 1 of the first sequence may attend to no key at all
    weights = {"need_weights": True}
    return [
        Case(f"self-attention, no mask, d_model={d_model}, {h} heads", args=(x, x, x), kwargs=weights,
             init=init, state=_state(gen, d_model)),
        Case(f"cross-attention: seq_q={sq}, seq_k={sk}", args=(x, memory, memory), kwargs=weights,
             init=init, state=_state(gen, d_model)),
        Case(f"cross-attention with a padding mask of shape {tuple(padding.shape)}", args=(x, memory, memory),
             kwargs={"mask": padding, **weights}, init=init, state=_state(gen, d_model)),
        Case(f"self-attention with a causal mask of shape {tuple(causal.shape)}", args=(x, x, x),
             kwargs={"mask": causal, **weights}, init=init, state=_state(gen, d_model)),
        Case("need_weights=False: returns (output, None)", args=(x, memory, memory), kwargs={"mask": padding},
             init=init, state=_state(gen, d_model)),
        Case("4 heads, no biases (bias=False)", args=(x, memory, memory), kwargs=weights,
             init={"d_model": d_model, "num_heads": 4 if d_model % 4 == 0 else 2, "bias": False},
             state=_state(gen, d_model, bias=False)),
        Case("key and value are different tensors (w_k projects the key, w_v the value)",
             args=(x, memory, values), kwargs={"mask": padding, **weights}, init=init, state=_state(gen, d_model)),
        Case(f"a query whose keys are all masked, mask of shape {tuple(no_key.shape)} (expected: zero weights "
             f"for that query in every head)", args=(x, memory, values), kwargs={"mask": no_key, **weights},
             init=init, state=_state(gen, d_model)),
        Case("dropout=0.5 in eval mode (the check calls model.eval(): no dropout may apply)",
             args=(x, memory, memory), kwargs={"mask": padding, **weights},
             init={**init, "dropout": 0.5}, state=_state(gen, d_model)),
    ]


class _Given(nn.Module):
    """The constructor the notebook gives the learner (the same attributes as the reference)."""

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        assert d_model % num_heads == 0, "d_model must be divisible by num_heads"
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.dropout = dropout
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def _heads(self, query, key, value):
        return (split_heads(self.w_q(query), self.num_heads), split_heads(self.w_k(key), self.num_heads),
                split_heads(self.w_v(value), self.num_heads))


def _attend(q, k, v, mask, scale=True):
    scores = q @ k.transpose(-2, -1)
    if scale:
        scores = scores / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # a query with no key: zeros
    return weights @ v, weights


class _NoOutputProjection(_Given):
    def forward(self, query, key, value, mask=None, need_weights=False):
        heads, weights = _attend(*self._heads(query, key, value), mask)
        return merge_heads(heads), weights if need_weights else None


class _KeyValueSwapped(_Given):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q = split_heads(self.w_q(query), self.num_heads)
        k = split_heads(self.w_k(value), self.num_heads)  # projects the value as the key
        v = split_heads(self.w_v(key), self.num_heads)
        heads, weights = _attend(q, k, v, mask)
        return self.w_o(merge_heads(heads)), weights if need_weights else None


class _DropoutAlwaysOn(_Given):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self._heads(query, key, value)
        _, weights = _attend(q, k, v, mask)
        weights = F.dropout(weights, self.dropout, training=True)  # ignores eval mode
        return self.w_o(merge_heads(weights @ v)), weights if need_weights else None


class _NoScale(_Given):
    def forward(self, query, key, value, mask=None, need_weights=False):
        heads, weights = _attend(*self._heads(query, key, value), mask, scale=False)
        return self.w_o(merge_heads(heads)), weights if need_weights else None


class _ScaleByDModel(_Given):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self._heads(query, key, value)
        heads, weights = _attend(q * math.sqrt(self.d_k / self.d_model), k, v, mask)  # = dividing by sqrt(d_model)
        return self.w_o(merge_heads(heads)), weights if need_weights else None


class _MergedWithoutTranspose(_Given):
    def forward(self, query, key, value, mask=None, need_weights=False):
        heads, weights = _attend(*self._heads(query, key, value), mask)
        batch, _, seq_q, _ = heads.shape
        return self.w_o(heads.reshape(batch, seq_q, self.d_model)), weights if need_weights else None


class _SplitWithoutTranspose(_Given):
    def forward(self, query, key, value, mask=None, need_weights=False):
        def split(t):
            return t.view(t.shape[0], self.num_heads, t.shape[1], self.d_k)
        heads, weights = _attend(split(self.w_q(query)), split(self.w_k(key)), split(self.w_v(value)), mask)
        return self.w_o(merge_heads(heads)), weights if need_weights else None


class _KeyProjectedWithWq(_Given):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q = split_heads(self.w_q(query), self.num_heads)
        k = split_heads(self.w_q(key), self.num_heads)
        v = split_heads(self.w_v(value), self.num_heads)
        heads, weights = _attend(q, k, v, mask)
        return self.w_o(merge_heads(heads)), weights if need_weights else None


class _OneBigHead(_Given):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self.w_q(query).unsqueeze(1), self.w_k(key).unsqueeze(1), self.w_v(value).unsqueeze(1)
        out, weights = _attend(q, k, v, mask)  # one head of size d_model
        weights = weights.expand(-1, self.num_heads, -1, -1)
        return self.w_o(out.squeeze(1)), weights if need_weights else None


class _MaskInverted(_Given):
    def forward(self, query, key, value, mask=None, need_weights=False):
        heads, weights = _attend(*self._heads(query, key, value), None if mask is None else ~mask)
        return self.w_o(merge_heads(heads)), weights if need_weights else None


class _AlwaysReturnsWeights(_Given):
    def forward(self, query, key, value, mask=None, need_weights=False):
        heads, weights = _attend(*self._heads(query, key, value), mask)
        return self.w_o(merge_heads(heads)), weights


class _LargeNegativeFill(_Given):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self._heads(query, key, value)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, -1e9)  # a query with no key gets uniform weights, not zeros
        weights = torch.softmax(scores, dim=-1)
        return self.w_o(merge_heads(weights @ v)), weights if need_weights else None


class _KeysAndValuesFromQuery(_Given):
    def forward(self, query, key, value, mask=None, need_weights=False):
        heads, weights = _attend(*self._heads(query, query, query), mask)  # self-attention only
        return self.w_o(merge_heads(heads)), weights if need_weights else None


class _PerHeadLoop(_Given):
    """The paper's form: head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V), with row slices of the weights."""

    def forward(self, query, key, value, mask=None, need_weights=False):
        outs, all_weights = [], []
        for i in range(self.num_heads):
            rows = slice(i * self.d_k, (i + 1) * self.d_k)

            def project(layer, x, rows=rows):
                b = None if layer.bias is None else layer.bias[rows]
                return nn.functional.linear(x, layer.weight[rows], b)

            q, k, v = project(self.w_q, query), project(self.w_k, key), project(self.w_v, value)
            head_mask = None if mask is None else mask.expand(query.shape[0], self.num_heads, query.shape[1],
                                                              key.shape[1])[:, i]
            out, w = _attend(q, k, v, head_mask)
            outs.append(out)
            all_weights.append(w)
        output = self.w_o(torch.cat(outs, dim=-1))
        return output, torch.stack(all_weights, dim=1) if need_weights else None


class _WithEinsum(_Given):
    def forward(self, query, key, value, mask=None, need_weights=False):
        b, sq, _ = query.shape
        sk = key.shape[1]
        q = self.w_q(query).view(b, sq, self.num_heads, self.d_k)
        k = self.w_k(key).view(b, sk, self.num_heads, self.d_k)
        v = self.w_v(value).view(b, sk, self.num_heads, self.d_k)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / self.d_k ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask.logical_not(), float("-inf"))
        weights = scores.softmax(dim=-1).nan_to_num(0.0)  # a query with no key: 0/0 -> 0
        out = torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, sq, self.d_model)
        return self.w_o(out), (weights if need_weights else None)


class _WithTorchKernel(_Given):
    def forward(self, query, key, value, mask=None, need_weights=False):
        q, k, v = self._heads(query, key, value)
        if mask is not None:
            mask = mask.expand(q.shape[0], self.num_heads, q.shape[2], k.shape[2])
        out = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        weights = None
        if need_weights:
            scores = (q @ k.mT / math.sqrt(self.d_k))
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = torch.where(scores.isneginf().all(-1, keepdim=True), 0.0, scores.softmax(-1))
        return self.w_o(merge_heads(out)), weights


MULTI_HEAD_ATTENTION = register(Exercise(
    name="multi_head_attention",
    notebook=NOTEBOOK,
    points=3,
    differentiable=True,  # trained through in the notebooks: gradients must flow
    reference=MultiHeadAttention,
    # PyTorch's module is the exercise's answer (notebook 02 compares with it): wrapping it is not writing it.
    forbidden_calls=("torch.nn.MultiheadAttention.forward", "torch.nn.functional.multi_head_attention_forward",
                     "torch._native_multi_head_attention"),
    forbidden_ops=("multi_head_attention",),  # aten::_native_multi_head_attention, whatever name reaches it
    summary="MultiHeadAttention.forward: project, split into heads, attend, merge, project with W^O",
    **public_and_hidden(_mha_cases),
    mistakes=[
        Mistake("output projection W^O missing", _NoOutputProjection,
                "after merging the heads, mix them with the output projection W^O.",
                detail="output = self.w_o(merged)."),
        Mistake("key and value swapped", _KeyValueSwapped,
                "project the key with W^K and the value with W^V, not the other way round.",
                detail="self.w_k(key), self.w_v(value)."),
        Mistake("dropout applied in eval mode", _DropoutAlwaysOn,
                "dropout is for training only: in eval mode (self.training is False) the attention must not drop "
                "anything.",
                detail="dropout_p=self.dropout if self.training else 0.0 (or F.dropout(..., "
                       "training=self.training))."),
        Mistake("scale missing", _NoScale,
                "each head's scores are divided by sqrt(d_k) (d_k = d_model / num_heads), as in notebook 01."),
        Mistake("scaled by sqrt(d_model) instead of sqrt(d_k)", _ScaleByDModel,
                "each head compares d_k-dimensional vectors: divide by sqrt(self.d_k), not sqrt(d_model)."),
        Mistake("heads merged without moving the head axis", _MergedWithoutTranspose,
                "merge the heads as merge_heads does: move the head axis back next to d_k before reshaping to "
                "(batch, seq_q, d_model); a plain reshape mixes positions.",
                detail="out.transpose(1, 2).reshape(batch, seq_q, d_model)."),
        Mistake("heads split without the transpose", _SplitWithoutTranspose,
                "split the heads as split_heads does: view as (batch, seq, num_heads, d_k), then swap the seq and "
                "head axes; viewing straight to (batch, heads, seq, d_k) mixes positions.",
                detail="x.view(batch, seq, num_heads, d_k).transpose(1, 2)."),
        Mistake("key projected with w_q", _KeyProjectedWithWq,
                "queries, keys and values have their own projections: the key goes through W^K and the value through "
                "W^V.",
                detail="k = self.w_k(key), v = self.w_v(value)."),
        Mistake("one head of size d_model", _OneBigHead,
                "split the projected queries, keys and values into num_heads heads of d_k features, attend in each "
                "head separately, then merge."),
        Mistake("keys and values taken from the query", _KeysAndValuesFromQuery,
                "project the key and value arguments, not the query. In self-attention all three are the same "
                "tensor, in cross-attention (the decoder reading the encoder) they are not.",
                detail="k = self.w_k(key), v = self.w_v(value)."),
        Mistake("-1e9 fill leaves a fully masked query uniform", _LargeNegativeFill,
                "filling masked scores with -1e9 gives a query whose keys are all masked uniform weights over "
                "the masked keys; its weights must be zero: set them to zero with masked_fill or torch.where "
                "(or use the notebook 01 attention, which does)."),
        Mistake("mask inverted", _MaskInverted,
                "True in the mask means 'may attend': fill the scores with -inf where the mask is False."),
        Mistake("weights returned when need_weights=False", _AlwaysReturnsWeights,
                "return (output, None) when need_weights is False, and the weights only when they are asked for."),
    ],
    also_correct=[_PerHeadLoop, _WithEinsum, _WithTorchKernel],
))
