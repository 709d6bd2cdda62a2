"""Exercises of the key/value-cache assignment: the one declaration behind its checks, tests and grading.

Three exercises (``notebook="kv_cache"``), each with public cases (the notebook's checks), hidden cases
(the grading command's, generated from a seeded ``torch.Generator``), at least five known mistakes with
the hint a learner whose output matches them reads, and at least two correct alternatives written
differently:

- ``kv_append`` (2 points): :func:`kv_cache_reference.append_kv`;
- ``kv_attention_step`` (3 points): :class:`kv_cache_reference.CachedSelfAttention`'s ``forward``;
- ``kv_decode_loop`` (3 points): :class:`kv_cache_reference.TinyDecoder`'s ``forward``; one of its
  correct alternatives decodes **without** the cache, so the tests prove that cached and uncached decoding
  give the same tokens and the same logits.

The notebook imports this module (it sits in the same folder) before its first check. The mistakes below are
written out whole, one function each, as a learner would write them (``duplicates`` pairs them by shape): a mutant
must read as the mistake its hint names, as in :mod:`course_lib.checks`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from kv_cache_reference import CachedSelfAttention, TinyDecoder, append_kv, uncached_generate
from torch import nn

from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import public_and_hidden
from course_lib.models.attention import merge_heads, scaled_dot_product_attention, split_heads

NOTEBOOK = "kv_cache"

__all__ = ["KV_APPEND", "KV_ATTENTION_STEP", "KV_DECODE_LOOP"]


def _random_state(cls: type[nn.Module], init: dict, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Weights for ``cls(**init)`` drawn from ``gen`` (so that a seed fixes them): weights ~ N(0, 1/fan_in)."""
    module = cls(**init)
    state = {}
    for name, tensor in module.state_dict().items():
        fan_in = tensor.shape[-1] if tensor.dim() > 1 else 10
        state[name] = torch.randn(tensor.shape, generator=gen) / math.sqrt(fan_in)
    return state


# ---------------------------------------------------------------------------------------------------
# Exercise 1: append to the cache
# ---------------------------------------------------------------------------------------------------

def _append_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    def kv(b: int, h: int, n: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(b, h, n, d, generator=gen), torch.randn(b, h, n, d, generator=gen)

    b, h, d = (2, 3, 4) if not hidden else (int(torch.randint(1, 4, (), generator=gen)), 3, 6)
    cases = [
        Case("empty cache (None): the prompt's 5 positions become the cache", args=(None, None, *kv(b, h, 5, d))),
        Case("a cache of 2 positions, 2 new tokens", args=(*kv(b, h, 2, d), *kv(b, h, 2, d))),
        Case("a cache of 5 positions, one new token", args=(*kv(b, h, 5, d), *kv(b, h, 1, d))),
        Case("a cache of 2 positions, a chunk of 3 new tokens", args=(*kv(b, h, 2, d), *kv(b, h, 3, d))),
        Case("batch 1, one head, a cache of 1 position", args=(*kv(1, 1, 1, d), *kv(1, 1, 1, d))),
    ]
    if hidden:
        past = int(torch.randint(3, 9, (), generator=gen))
        cases.append(Case(f"a cache of {past} positions, one new token", args=(*kv(b, h, past, d), *kv(b, h, 1, d))))
    return cases


def _append_new_first(past_k, past_v, k_new, v_new):
    if past_k is None:
        return k_new, v_new
    return torch.cat([k_new, past_k], dim=2), torch.cat([v_new, past_v], dim=2)


def _append_keys_to_values(past_k, past_v, k_new, v_new):
    if past_k is None:
        return k_new, v_new
    return torch.cat([past_k, k_new], dim=2), torch.cat([past_v, k_new], dim=2)


def _append_forgets_past(past_k, past_v, k_new, v_new):
    return k_new, v_new


def _append_on_heads_axis(past_k, past_v, k_new, v_new):
    if past_k is None:
        return k_new, v_new
    return torch.cat([past_k, k_new], dim=1), torch.cat([past_v, v_new], dim=1)


def _append_on_features(past_k, past_v, k_new, v_new):
    if past_k is None:
        return k_new, v_new
    return torch.cat([past_k, k_new], dim=-1), torch.cat([past_v, v_new], dim=-1)


def _append_zero_start(past_k, past_v, k_new, v_new):
    if past_k is None:  # "initialise the cache with zeros": one position that should not exist
        past_k = k_new.new_zeros(k_new.shape[0], k_new.shape[1], 1, k_new.shape[3])
        past_v = v_new.new_zeros(v_new.shape[0], v_new.shape[1], 1, v_new.shape[3])
    return torch.cat([past_k, k_new], dim=2), torch.cat([past_v, v_new], dim=2)


def _append_stack(past_k, past_v, k_new, v_new):
    if past_k is None:
        return k_new, v_new
    if past_k.shape != k_new.shape:
        raise RuntimeError("stack expects each tensor to be equal size")
    return torch.stack([past_k, k_new], dim=2), torch.stack([past_v, v_new], dim=2)


def _append_empty_tensor(past_k, past_v, k_new, v_new):
    if past_k is None:  # an empty cache is a tensor with zero positions
        past_k = k_new[:, :, :0]
        past_v = v_new[:, :, :0]
    return torch.concat((past_k, k_new), dim=-2), torch.concat((past_v, v_new), dim=-2)


def _append_preallocated(past_k, past_v, k_new, v_new):
    if past_k is None:
        return k_new.clone(), v_new.clone()
    p, n = past_k.shape[2], k_new.shape[2]
    k = k_new.new_empty(k_new.shape[0], k_new.shape[1], p + n, k_new.shape[3])
    v = v_new.new_empty(v_new.shape[0], v_new.shape[1], p + n, v_new.shape[3])
    k[:, :, :p], k[:, :, p:] = past_k, k_new
    v[:, :, :p], v[:, :, p:] = past_v, v_new
    return k, v


def _append_sequence_first(past_k, past_v, k_new, v_new):
    if past_k is None:
        return k_new, v_new
    k = torch.cat([past_k.transpose(1, 2), k_new.transpose(1, 2)], dim=1)  # (batch, seq, heads, d_k)
    v = torch.cat([past_v.transpose(1, 2), v_new.transpose(1, 2)], dim=1)
    return k.transpose(1, 2), v.transpose(1, 2)  # (batch, heads, seq, d_k)


KV_APPEND = register(Exercise(
    name="kv_append",
    notebook=NOTEBOOK,
    points=2,
    reference=append_kv,
    summary="append new keys and values after the cached ones, along the sequence axis",
    **public_and_hidden(_append_cases),
    mistakes=[
        Mistake("new positions first", _append_new_first,
                "put the old positions first: torch.cat([past_k, k_new], dim=2). Position order matters, "
                "because the causal mask decides by position which keys a query may see."),
        Mistake("keys appended to the values", _append_keys_to_values,
                "the value cache grows with v_new, not k_new (check the second torch.cat)."),
        Mistake("cache not kept", _append_forgets_past,
                "return the old positions AND the new ones: past_len + new_len positions in all."),
        Mistake("concatenated on the heads axis", _append_on_heads_axis,
                "the cache is (batch, num_heads, seq, d_k): the sequence axis is dim=2, not dim=1."),
        Mistake("concatenated on the feature axis", _append_on_features,
                "the cache is (batch, num_heads, seq, d_k): append along the sequence axis dim=2, not the "
                "features (dim=-1); every position keeps d_k features."),
        Mistake("cache initialised with a zero position", _append_zero_start,
                "an empty cache has no positions: when past_k is None return k_new and v_new themselves. A "
                "zero key is not harmless: softmax gives it weight exp(0) relative to the others."),
        Mistake("stacked instead of concatenated", _append_stack,
                "torch.stack adds a new axis; torch.cat joins along an existing one (dim=2)."),
    ],
    also_correct=[_append_empty_tensor, _append_preallocated, _append_sequence_first],
))


# ---------------------------------------------------------------------------------------------------
# Exercise 2: one cached attention step
# ---------------------------------------------------------------------------------------------------

def _step_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    def case(label: str, d_model: int, num_heads: int, batch: int, past: int, new: int) -> Case:
        init = {"d_model": d_model, "num_heads": num_heads}
        d_k = d_model // num_heads
        x = torch.randn(batch, new, d_model, generator=gen)
        cache = (None, None) if past == 0 else (torch.randn(batch, num_heads, past, d_k, generator=gen),
                                                torch.randn(batch, num_heads, past, d_k, generator=gen))
        return Case(label, args=(x, *cache), init=init, state=_random_state(CachedSelfAttention, init, gen))

    cases = [
        case("no cache: a prompt of 4 positions (plain causal self-attention)", 8, 2, 2, 0, 4),
        case("a cache of 4 positions, one new token", 8, 2, 2, 4, 1),
        case("a cache of 3 positions, a chunk of 2 new tokens", 8, 2, 2, 3, 2),
        case("d_model=12, num_heads=3, batch 1, a cache of 5 positions, one new token", 12, 3, 1, 5, 1),
    ]
    if hidden:
        past = int(torch.randint(2, 7, (), generator=gen))
        cases += [case(f"a cache of {past} positions, a chunk of 3 new tokens", 12, 4, 3, past, 3),
                  case("no cache, one token", 8, 4, 2, 0, 1)]
    return cases


def _project(self: CachedSelfAttention, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(split_heads(w(x), self.num_heads) for w in (self.w_q, self.w_k, self.w_v))


class _StepNoMask(CachedSelfAttention):
    def forward(self, x, past_k=None, past_v=None):
        q, k_new, v_new = _project(self, x)
        k, v = append_kv(past_k, past_v, k_new, v_new)
        heads, _ = scaled_dot_product_attention(q, k, v)
        return self.w_o(merge_heads(heads)), k, v


class _StepIsCausal(CachedSelfAttention):
    def forward(self, x, past_k=None, past_v=None):
        q, k_new, v_new = _project(self, x)
        k, v = append_kv(past_k, past_v, k_new, v_new)
        heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # aligned top-left: wrong with a cache
        return self.w_o(merge_heads(heads)), k, v


class _StepExcludesSelf(CachedSelfAttention):
    def forward(self, x, past_k=None, past_v=None):
        q, k_new, v_new = _project(self, x)
        k, v = append_kv(past_k, past_v, k_new, v_new)
        past = k.shape[2] - x.shape[1]
        mask = torch.ones(x.shape[1], k.shape[2], dtype=torch.bool).tril(diagonal=past - 1)
        heads, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(heads)), k, v


class _StepIgnoresCache(CachedSelfAttention):
    def forward(self, x, past_k=None, past_v=None):
        q, k_new, v_new = _project(self, x)
        k, v = append_kv(past_k, past_v, k_new, v_new)
        mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
        heads, _ = scaled_dot_product_attention(q, k_new, v_new, mask)  # the new keys only
        return self.w_o(merge_heads(heads)), k, v


class _StepReturnsOldCache(CachedSelfAttention):
    def forward(self, x, past_k=None, past_v=None):
        out, _, _ = CachedSelfAttention.forward(self, x, past_k, past_v)
        return out, past_k, past_v


class _StepCachesQueries(CachedSelfAttention):
    def forward(self, x, past_k=None, past_v=None):
        q, _, v_new = _project(self, x)
        k, v = append_kv(past_k, past_v, q, v_new)  # the queries went into the key cache
        past = k.shape[2] - x.shape[1]
        mask = torch.ones(x.shape[1], k.shape[2], dtype=torch.bool).tril(diagonal=past)
        heads, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(heads)), k, v


class _StepNoOutputProjection(CachedSelfAttention):
    def forward(self, x, past_k=None, past_v=None):
        q, k_new, v_new = _project(self, x)
        k, v = append_kv(past_k, past_v, k_new, v_new)
        past = k.shape[2] - x.shape[1]
        mask = torch.ones(x.shape[1], k.shape[2], dtype=torch.bool).tril(diagonal=past)
        heads, _ = scaled_dot_product_attention(q, k, v, mask)
        return merge_heads(heads), k, v


class _StepNotScaled(CachedSelfAttention):
    def forward(self, x, past_k=None, past_v=None):
        q, k_new, v_new = _project(self, x)
        k, v = append_kv(past_k, past_v, k_new, v_new)
        past = k.shape[2] - x.shape[1]
        mask = torch.ones(x.shape[1], k.shape[2], dtype=torch.bool).tril(diagonal=past)
        scores = (q @ k.transpose(-2, -1)).masked_fill(~mask, float("-inf"))  # no / sqrt(d_k)
        return self.w_o(merge_heads(torch.softmax(scores, dim=-1) @ v)), k, v


class _StepEinsumPositions(CachedSelfAttention):
    """Correct: scores with einsum, the mask from absolute positions of queries and keys."""

    def forward(self, x, past_k=None, past_v=None):
        q, k_new, v_new = _project(self, x)
        k = k_new if past_k is None else torch.cat([past_k, k_new], dim=2)
        v = v_new if past_v is None else torch.cat([past_v, v_new], dim=2)
        total, new = k.shape[2], x.shape[1]
        query_pos = torch.arange(total - new, total)[:, None]  # (new, 1)
        key_pos = torch.arange(total)[None, :]  # (1, total)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(key_pos > query_pos, float("-inf"))
        heads = torch.einsum("bhqk,bhkd->bhqd", torch.softmax(scores, dim=-1), v)
        return self.w_o(heads.transpose(1, 2).reshape(x.shape)), k, v


class _StepTokenByToken(CachedSelfAttention):
    """Correct: the new tokens one at a time, each seeing the whole cache so far (no mask needed)."""

    def forward(self, x, past_k=None, past_v=None):
        outputs, k, v = [], past_k, past_v
        for i in range(x.shape[1]):
            q, k_i, v_i = _project(self, x[:, i:i + 1])  # (batch, heads, 1, d_k)
            k, v = append_kv(k, v, k_i, v_i)
            outputs.append(F.scaled_dot_product_attention(q, k, v))  # one query: every cached key is earlier
        return self.w_o(merge_heads(torch.cat(outputs, dim=2))), k, v


class _StepFusedExplicitMask(CachedSelfAttention):
    """Correct: PyTorch's fused kernel, given the bottom-right-aligned mask explicitly."""

    def forward(self, x, past_k=None, past_v=None):
        q, k_new, v_new = _project(self, x)
        k, v = append_kv(past_k, past_v, k_new, v_new)
        new, total = x.shape[1], k.shape[2]
        mask = torch.ones(total, total, dtype=torch.bool).tril()[total - new:]  # last `new` rows of a causal mask
        return self.w_o(merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask))), k, v


KV_ATTENTION_STEP = register(Exercise(
    name="kv_attention_step",
    notebook=NOTEBOOK,
    points=3,
    reference=CachedSelfAttention,
    summary="causal self-attention from new tokens to a key/value cache, returning the updated cache",
    **public_and_hidden(_step_cases),
    mistakes=[
        Mistake("no causal mask", _StepNoMask,
                "within a chunk of several new tokens, a token must not see the tokens after it: mask the "
                "keys at positions later than the query's own."),
        Mistake("causal mask aligned top-left (is_causal=True)", _StepIsCausal,
                "new query i sits at position past_len + i, not i: shift the diagonal, e.g. "
                "torch.ones(new_len, total).tril(diagonal=past_len). (F.scaled_dot_product_attention's "
                "is_causal=True and a plain tril() align the diagonal top-left, which is wrong with a cache.)"),
        Mistake("a token cannot see itself", _StepExcludesSelf,
                "a token attends to itself too: allow keys at positions <= its own (tril(diagonal=past_len)), "
                "not < it."),
        Mistake("attends to the new tokens only", _StepIgnoresCache,
                "attend over the whole cache (the past keys and the new ones), not only the new keys."),
        Mistake("returns the cache before appending", _StepReturnsOldCache,
                "return the updated cache (after appending), so that the next step sees these tokens."),
        Mistake("caches the queries", _StepCachesQueries,
                "the key cache holds w_k(x), not w_q(x): queries are used once, by their own step; keys and "
                "values are what later tokens look back at."),
        Mistake("no output projection", _StepNoOutputProjection,
                "after merging the heads, mix them with w_o, as MultiHeadAttention does."),
        Mistake("scores not scaled", _StepNotScaled,
                "divide the scores by sqrt(d_k) before the softmax (or use scaled_dot_product_attention)."),
    ],
    also_correct=[_StepEinsumPositions, _StepTokenByToken, _StepFusedExplicitMask],
))


# ---------------------------------------------------------------------------------------------------
# Exercise 3: the cached decoding loop
# ---------------------------------------------------------------------------------------------------

def _decode_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    def case(label: str, init: dict, prompt_shape: tuple[int, int], new: int) -> Case:
        prompt = torch.randint(0, init["vocab_size"], prompt_shape, generator=gen)
        return Case(label, args=(prompt, new), init=init, state=_random_state(TinyDecoder, init, gen))

    small = {"vocab_size": 13, "d_model": 8, "num_heads": 2, "max_len": 24}
    cases = [
        case("one prompt of 3 tokens, 5 new tokens", small, (1, 3), 5),
        case("a batch of 2 prompts of 4 tokens, 6 new tokens", small, (2, 4), 6),
        case("a one-token prompt, 4 new tokens", small, (1, 1), 4),
        case("max_new_tokens=1: the prompt alone decides", small, (2, 3), 1),
    ]
    if hidden:
        wide = {"vocab_size": 17, "d_model": 12, "num_heads": 3, "max_len": 32}
        prompt_len = int(torch.randint(2, 6, (), generator=gen))
        cases.append(case(f"a batch of 3 prompts of {prompt_len} tokens, 8 new tokens", wide, (3, prompt_len), 8))
    return cases


class _DecodeRefeedsEverything(TinyDecoder):
    def forward(self, prompt, max_new_tokens):
        logits, k, v = self.step(prompt, 0)
        tokens, scores = prompt, []
        for _ in range(max_new_tokens):
            scores.append(logits[:, -1])
            tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            if len(scores) < max_new_tokens:
                logits, k, v = self.step(tokens, 0, k, v)  # the whole sequence again, on top of the cache
        return tokens, torch.stack(scores, dim=1)


class _DecodeWithStart(TinyDecoder):
    """Shared loop of the position mistakes: ``start_of(tokens)`` gives the new token's position."""

    def start_of(self, tokens):
        return tokens.shape[1] - 1

    def forward(self, prompt, max_new_tokens):
        logits, k, v = self.step(prompt, 0)
        tokens, scores = prompt, []
        for _ in range(max_new_tokens):
            scores.append(logits[:, -1])
            next_token = logits[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, next_token], dim=1)
            if len(scores) < max_new_tokens:
                logits, k, v = self.step(next_token, self.start_of(tokens), k, v)
        return tokens, torch.stack(scores, dim=1)


class _DecodePositionZero(_DecodeWithStart):
    def start_of(self, tokens):
        return 0


class _DecodePositionOffByOne(_DecodeWithStart):
    def start_of(self, tokens):
        return tokens.shape[1]


class _DecodeDropsCache(TinyDecoder):
    def forward(self, prompt, max_new_tokens):
        logits, _, _ = self.step(prompt, 0)
        tokens, scores = prompt, []
        for _ in range(max_new_tokens):
            scores.append(logits[:, -1])
            next_token = logits[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, next_token], dim=1)
            if len(scores) < max_new_tokens:
                logits, _, _ = self.step(next_token, tokens.shape[1] - 1)  # no cache: sees only itself
        return tokens, torch.stack(scores, dim=1)


class _DecodeStaleCache(TinyDecoder):
    def forward(self, prompt, max_new_tokens):
        logits, k, v = self.step(prompt, 0)
        tokens, scores = prompt, []
        for _ in range(max_new_tokens):
            scores.append(logits[:, -1])
            next_token = logits[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, next_token], dim=1)
            if len(scores) < max_new_tokens:
                logits, _, _ = self.step(next_token, tokens.shape[1] - 1, k, v)  # the returned cache is dropped
        return tokens, torch.stack(scores, dim=1)


class _DecodeFirstPosition(TinyDecoder):
    def forward(self, prompt, max_new_tokens):
        logits, k, v = self.step(prompt, 0)
        tokens, scores = prompt, []
        for _ in range(max_new_tokens):
            scores.append(logits[:, 0])  # the first position's prediction, not the last one's
            next_token = logits[:, 0].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, next_token], dim=1)
            if len(scores) < max_new_tokens:
                logits, k, v = self.step(next_token, tokens.shape[1] - 1, k, v)
        return tokens, torch.stack(scores, dim=1)


class _DecodeScoresAfterStep(TinyDecoder):
    def forward(self, prompt, max_new_tokens):
        logits, k, v = self.step(prompt, 0)
        tokens, scores = prompt, []
        for _ in range(max_new_tokens):
            next_token = logits[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, next_token], dim=1)
            logits, k, v = self.step(next_token, tokens.shape[1] - 1, k, v)
            scores.append(logits[:, -1])  # the scores of the NEXT choice, one step late
        return tokens, torch.stack(scores, dim=1)


class _DecodeUncached(TinyDecoder):
    """Correct: no cache at all; every step recomputes every position (the slow, obviously right way)."""

    def forward(self, prompt, max_new_tokens):
        return uncached_generate(self, prompt, max_new_tokens)


class _DecodePromptTokenByToken(TinyDecoder):
    """Correct: the prompt too goes through the cache one token at a time."""

    def forward(self, prompt, max_new_tokens):
        k = v = None
        for i in range(prompt.shape[1]):
            logits, k, v = self.step(prompt[:, i:i + 1], i, k, v)
        tokens, scores = prompt, []
        while len(scores) < max_new_tokens:
            scores.append(logits[:, -1])
            tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            logits, k, v = self.step(tokens[:, -1:], tokens.shape[1] - 1, k, v)  # one step more than needed
        return tokens, torch.stack(scores, dim=1)


class _DecodePreallocated(TinyDecoder):
    """Correct: outputs written into preallocated tensors."""

    def forward(self, prompt, max_new_tokens):
        batch, prompt_len = prompt.shape
        tokens = prompt.new_zeros(batch, prompt_len + max_new_tokens)
        tokens[:, :prompt_len] = prompt
        scores = torch.empty(batch, max_new_tokens, self.vocab_size)
        logits, k, v = self.step(prompt, 0)
        for i in range(max_new_tokens):
            scores[:, i] = logits[:, -1]
            pos = prompt_len + i
            tokens[:, pos] = logits[:, -1].argmax(-1)
            if i + 1 < max_new_tokens:
                logits, k, v = self.step(tokens[:, pos:pos + 1], pos, k, v)
        return tokens, scores


KV_DECODE_LOOP = register(Exercise(
    name="kv_decode_loop",
    notebook=NOTEBOOK,
    points=3,
    reference=TinyDecoder,
    summary="greedy decoding that feeds each new token once, through the key/value cache",
    **public_and_hidden(_decode_cases),
    mistakes=[
        Mistake("re-feeds the whole sequence on top of the cache", _DecodeRefeedsEverything,
                "with a cache, feed only the newest token: the cache already holds the keys and values of "
                "every earlier position, so feeding them again duplicates them."),
        Mistake("new token at position 0", _DecodePositionZero,
                "the new token's position is its index in the sequence, tokens.shape[1] - 1, not 0: "
                "positions decide which sinusoid is added to its embedding."),
        Mistake("position off by one", _DecodePositionOffByOne,
                "off by one: after appending, the new token is the last one, at index tokens.shape[1] - 1."),
        Mistake("cache not passed to step", _DecodeDropsCache,
                "pass the cache (k, v) to each step: without it the new token attends only to itself."),
        Mistake("cache not updated", _DecodeStaleCache,
                "keep the cache that step returns (logits, k, v = self.step(...)), or later tokens will not see "
                "the tokens generated before them."),
        Mistake("prediction read at the first position", _DecodeFirstPosition,
                "the next token is predicted at the LAST position of the prompt: logits[:, -1], not logits[:, 0]."),
        Mistake("logits recorded one step late", _DecodeScoresAfterStep,
                "record logits[:, -1] BEFORE feeding the chosen token: logits[:, i] must be the scores token i "
                "was chosen from."),
    ],
    also_correct=[_DecodeUncached, _DecodePromptTokenByToken, _DecodePreallocated],
))
