"""Exercises of notebook 11 (the decoder-only language model): the shifted LM loss, nucleus (top-p)

Declarations, not logic to share: its mistakes are whole wrong answers, as a learner writes them, so
``duplicates`` pairs this module with the other checks modules by shape (:mod:`course_lib.checks` says why).
filtering and one attention step with a key/value cache.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import public_and_hidden
from course_lib.generation.sampling import attend_with_cache, top_p_filter
from course_lib.models.attention import scaled_dot_product_attention
from course_lib.training.language_model import lm_loss

NOTEBOOK = "11_language_model"


# ---------------------------------------------------------------------------------------------------
# 10.1 lm_loss
# ---------------------------------------------------------------------------------------------------

def _loss_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    vocab = 13 if hidden else 11
    logits = torch.randn(3, 6, vocab, generator=gen) * 2
    tokens = torch.randint(0, vocab, (3, 6), generator=gen)
    uneven = torch.randn(2, 9, vocab, generator=gen)
    uneven_tokens = torch.randint(0, vocab, (2, 9), generator=gen)
    extreme = torch.tensor([[[0.0, 400.0, -400.0], [900.0, 0.0, 1.0], [1.0, 2.0, 3.0]]])
    cases = [
        Case("(batch=3, seq=6, vocab) logits", args=(logits, tokens)),
        Case("(batch=2, seq=9): the mean is over batch * (seq - 1) positions", args=(uneven, uneven_tokens)),
        Case("a batch of one sequence of length 2 (one prediction)", args=(logits[:1, :2], tokens[:1, :2])),
        Case("extreme logits (a probability underflows to 0)", args=(extreme, torch.tensor([[1, 2, 0]]))),
    ]
    if hidden:
        cases.append(Case("a batch of 5, seq 4", args=(torch.randn(5, 4, vocab, generator=gen),
                                                       torch.randint(0, vocab, (5, 4), generator=gen))))
    return cases


def _flat_ce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _not_shifted(logits, tokens):
    return _flat_ce(logits, tokens)


def _shifted_the_wrong_way(logits, tokens):
    return _flat_ce(logits[:, 1:], tokens[:, :-1])


def _rolled(logits, tokens):
    return _flat_ce(logits, torch.roll(tokens, -1, dims=1))  # the last position "predicts" the first token


def _summed(logits, tokens):
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1),
                           reduction="sum")


def _mean_of_sequence_sums(logits, tokens):
    per_position = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
    return per_position.sum(1).mean()


def _log_of_softmax(logits, tokens):
    log_probs = torch.log(torch.softmax(logits[:, :-1], dim=-1))
    return -log_probs.gather(-1, tokens[:, 1:, None]).mean()


def _via_log_softmax_gather(logits, tokens):
    log_probs = F.log_softmax(logits, dim=-1)[:, :-1]  # (batch, seq - 1, vocab)
    return -log_probs.gather(-1, tokens[:, 1:].unsqueeze(-1)).mean()


def _via_nll_loss(logits, tokens):
    return F.nll_loss(F.log_softmax(logits[:, :-1], -1).transpose(1, 2), tokens[:, 1:])


def _with_a_loop(logits, tokens):
    terms = [torch.logsumexp(logits[b, t], 0) - logits[b, t, tokens[b, t + 1]]
             for b in range(tokens.shape[0]) for t in range(tokens.shape[1] - 1)]
    return torch.stack(terms).mean()


LM_LOSS = register(Exercise(
    name="lm_loss",
    notebook=NOTEBOOK,
    points=2,
    differentiable=True,  # trained through: gradients must flow
    reference=lm_loss,
    summary="the shifted language-model loss: logits at t scored on the token at t + 1",
    **public_and_hidden(_loss_cases),
    mistakes=[
        Mistake("not shifted", _not_shifted,
                "the output at position t must predict the NEXT token, the one at t + 1: score every position but "
                "the last against the tokens shifted by one (a model scored on its own input learns to copy it).",
                detail="logits[:, :-1] against tokens[:, 1:]."),
        Mistake("shifted the wrong way", _shifted_the_wrong_way,
                "drop the LAST position of the logits (it has no next token) and the FIRST of the tokens (nothing "
                "predicts it).",
                detail="logits[:, :-1] against tokens[:, 1:]."),
        Mistake("torch.roll", _rolled,
                "torch.roll wraps around: the last position would be scored on the first token. Slice instead: drop "
                "the last logit position and the first token.",
                detail="logits[:, :-1] against tokens[:, 1:]."),
        Mistake("sum instead of mean", _summed,
                "average over the batch * (seq - 1) scored positions (cross_entropy's default 'mean')."),
        Mistake("mean of per-sequence sums", _mean_of_sequence_sums,
                "average over every scored position, not the sum per sequence averaged over the batch."),
        Mistake("log of softmax", _log_of_softmax,
                "the log of a softmax gives log(0) = -inf once a probability underflows: use the library's "
                "cross-entropy or log-softmax, which are computed stably.",
                detail="F.cross_entropy or F.log_softmax, not torch.log(torch.softmax(...))."),
    ],
    also_correct=[_via_log_softmax_gather, _via_nll_loss, _with_a_loop],
))


# ---------------------------------------------------------------------------------------------------
# 10.2 top_p_filter
# ---------------------------------------------------------------------------------------------------

def _top_p_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    vocab = 12 if hidden else 10
    logits = torch.randn(4, vocab, generator=gen) * 2
    peaked = torch.log(torch.tensor([[0.05, 0.6, 0.2, 0.15], [0.25, 0.25, 0.25, 0.25]]))
    cases = [
        Case("(4, vocab) random logits, p = 0.9", args=(logits, 0.9)),
        Case("p = 0.5", args=(logits, 0.5)),
        Case("a token above p on its own is kept alone (p = 0.5, top probability 0.6)", args=(peaked[:1], 0.5)),
        Case("a tiny p keeps the most probable token", args=(logits, 1e-4)),
        Case("p = 1 keeps everything", args=(logits, 1.0)),
        Case("(probabilities 0.6, 0.2, 0.15, 0.05), p = 0.75: the token crossing p is kept",
             args=(peaked[:1], 0.75)),
        Case("ties: four equal probabilities, p = 0.3 (every token tied with the last kept stays)",
             args=(peaked[1:], 0.3)),
        Case("a single leading dimension (vocab,)", args=(logits[0], 0.7)),
    ]
    if hidden:
        cases.append(Case("(2, 3, vocab) logits, p = 0.75", args=(torch.randn(2, 3, vocab, generator=gen), 0.75)))
    return cases


def _mass_including_itself(logits, p):
    sorted_logits, _ = torch.sort(logits, dim=-1, descending=True)
    cumulative = torch.softmax(sorted_logits, -1).cumsum(-1)
    kept = (cumulative <= p).sum(-1, keepdim=True).clamp(min=1)
    return logits.masked_fill(logits < sorted_logits.gather(-1, kept - 1), -math.inf)


def _top_token_may_vanish(logits, p):
    sorted_logits, _ = torch.sort(logits, dim=-1, descending=True)
    cumulative = torch.softmax(sorted_logits, -1).cumsum(-1)
    kept = (cumulative < p).sum(-1, keepdim=True)  # stops before the crossing token, may keep none
    threshold = torch.where(kept > 0, sorted_logits.gather(-1, (kept - 1).clamp(min=0)),
                            torch.full_like(kept, math.inf, dtype=logits.dtype))
    return logits.masked_fill(logits < threshold, -math.inf)


def _cumsum_of_logits(logits, p):
    sorted_logits, _ = torch.sort(logits, dim=-1, descending=True)
    before = sorted_logits.cumsum(-1) - sorted_logits
    kept = (before < p).sum(-1, keepdim=True).clamp(min=1)
    return logits.masked_fill(logits < sorted_logits.gather(-1, kept - 1), -math.inf)


def _ties_cut_by_position(logits, p):
    # the widely copied filter of Hugging Face's top_k_top_p_filtering: right but for ties, which it cuts by their
    # place in the sort (the exercise keeps every token tied with the last one kept)
    sorted_logits, sorted_indices = torch.sort(logits, descending=True)
    cumulative = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1)
    remove = cumulative > p
    remove[..., 1:] = remove[..., :-1].clone()
    remove[..., 0] = False
    return logits.masked_fill(remove.scatter(-1, sorted_indices, remove), -math.inf)


def _ties_cut_by_position_ascending(logits, p):
    # Hugging Face's TopPLogitsWarper: the same rule from the least probable end
    sorted_logits, sorted_indices = torch.sort(logits, descending=False)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = cumulative <= (1 - p)
    remove[..., -1:] = False
    return logits.masked_fill(remove.scatter(-1, sorted_indices, remove), -math.inf)


TIE_RULE_HINT = ("the rule for ties: a token with the same probability as the last token kept is kept too, so the "
                 "result cannot depend on how the sort orders equal values. Decide by value: find the smallest "
                 "logit kept, then keep every token whose logit reaches it.")


def _unsorted_cumsum(logits, p):
    probs = torch.softmax(logits, -1)
    before = probs.cumsum(-1) - probs  # in vocabulary order, not by probability
    return logits.masked_fill(before >= p, -math.inf)


def _zero_instead_of_minus_inf(logits, p):
    return top_p_filter(logits, p).nan_to_num(neginf=0.0)


def _by_probability_threshold(logits, p):
    if p == 1:
        return logits.clone()
    probs = torch.softmax(logits, dim=-1)
    sorted_probs, _ = torch.sort(probs, dim=-1, descending=True)
    needed = ((sorted_probs.cumsum(-1) - sorted_probs) < p).sum(-1, keepdim=True).clamp(min=1)
    smallest = sorted_probs.gather(-1, needed - 1)
    return torch.where(probs >= smallest, logits, torch.full_like(logits, -math.inf))


def _with_a_loop_over_rows(logits, p):
    if p >= 1:
        return logits + 0.0
    flat = logits.reshape(-1, logits.shape[-1])
    rows = []
    for row in flat:
        probs = torch.softmax(row.double(), 0)
        order = torch.argsort(row, descending=True)
        mass, last = 0.0, None
        for i in order.tolist():
            last = row[i]
            mass += float(probs[i])
            if mass >= p:
                break
        rows.append(torch.where(row >= last, row, torch.full_like(row, -math.inf)))
    return torch.stack(rows).reshape(logits.shape)


TOP_P = register(Exercise(
    name="top_p_filter",
    notebook=NOTEBOOK,
    points=2,
    reference=top_p_filter,
    summary="nucleus filtering: keep the smallest set of most probable tokens whose probability reaches p",
    **public_and_hidden(_top_p_cases),
    mistakes=[
        Mistake("the crossing token dropped", _mass_including_itself,
                "keep a token while the tokens ABOVE it hold less than p (cumulative mass minus its own "
                "probability): the token that makes the total reach p belongs to the nucleus."),
        Mistake("the top token can vanish", _top_token_may_vanish,
                "the most probable token is always kept, even when its probability alone exceeds p: count "
                "the tokens needed, at least one."),
        Mistake("cumulative sum of logits", _cumsum_of_logits,
                "p is a probability mass: turn the sorted logits into probabilities (softmax) before the "
                "cumulative sum."),
        Mistake("ties cut by their place in the sort", _ties_cut_by_position, TIE_RULE_HINT,
                detail="threshold = sorted_logits.gather(-1, num_kept - 1); "
                       "logits.masked_fill(logits < threshold, float('-inf'))."),
        Mistake("ties cut by their place in an ascending sort", _ties_cut_by_position_ascending, TIE_RULE_HINT,
                detail="threshold = sorted_logits.gather(-1, num_kept - 1); "
                       "logits.masked_fill(logits < threshold, float('-inf'))."),
        Mistake("cumulative sum in vocabulary order", _unsorted_cumsum,
                "sort by probability first (descending): the nucleus is made of the MOST probable tokens."),
        Mistake("0 instead of -inf", _zero_instead_of_minus_inf,
                "removed tokens get -inf, so that softmax gives them probability 0 (a logit of 0 is a "
                "perfectly possible token)."),
    ],
    also_correct=[_by_probability_threshold, _with_a_loop_over_rows],
))


# ---------------------------------------------------------------------------------------------------
# 10.3 attend_with_cache
# ---------------------------------------------------------------------------------------------------

def _cache_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    heads, d_k = (3, 4) if hidden else (2, 4)

    def qkv(new: int, batch: int = 2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return tuple(torch.randn(batch, heads, new, d_k, generator=gen) for _ in range(3))

    past_k, past_v = torch.randn(2, heads, 5, d_k, generator=gen), torch.randn(2, heads, 5, d_k, generator=gen)
    return [
        Case("one new token after 5 cached ones", args=(*qkv(1), past_k, past_v)),
        Case("the first step: nothing cached (past_keys = past_values = None)", args=(*qkv(1), None, None)),
        Case("a prompt of 4 tokens, nothing cached (causal among the new tokens)", args=(*qkv(4), None, None)),
        Case("3 new tokens after 5 cached ones (new token i sees the cache and new tokens 0..i)",
             args=(*qkv(3), past_k, past_v)),
    ]


def _no_causal_mask(q_new, k_new, v_new, past_keys, past_values):
    k = k_new if past_keys is None else torch.cat([past_keys, k_new], 2)
    v = v_new if past_values is None else torch.cat([past_values, v_new], 2)
    return scaled_dot_product_attention(q_new, k, v)[0], k, v


def _mask_without_offset(q_new, k_new, v_new, past_keys, past_values):
    k = k_new if past_keys is None else torch.cat([past_keys, k_new], 2)
    v = v_new if past_values is None else torch.cat([past_values, v_new], 2)
    new, total = q_new.shape[2], k.shape[2]
    mask = torch.ones(new, total, dtype=torch.bool).tril()  # forgets that query i sits at position past + i
    return scaled_dot_product_attention(q_new, k, v, mask)[0], k, v


def _new_before_past(q_new, k_new, v_new, past_keys, past_values):
    k = k_new if past_keys is None else torch.cat([k_new, past_keys], 2)
    v = v_new if past_values is None else torch.cat([v_new, past_values], 2)
    return attend_with_cache(q_new, k, v, None, None)


def _only_new_keys(q_new, k_new, v_new, past_keys, past_values):
    out, _, _ = attend_with_cache(q_new, k_new, v_new, None, None)
    k = k_new if past_keys is None else torch.cat([past_keys, k_new], 2)
    v = v_new if past_values is None else torch.cat([past_values, v_new], 2)
    return out, k, v


def _cache_not_extended(q_new, k_new, v_new, past_keys, past_values):
    out, _, _ = attend_with_cache(q_new, k_new, v_new, past_keys, past_values)
    return out, (k_new if past_keys is None else past_keys), (v_new if past_values is None else past_values)


def _cache_via_fused_attention(q_new, k_new, v_new, past_keys, past_values):
    if past_keys is not None:
        k_new, v_new = torch.cat((past_keys, k_new), dim=-2), torch.cat((past_values, v_new), dim=-2)
    past = k_new.shape[-2] - q_new.shape[-2]
    mask = torch.ones(q_new.shape[-2], k_new.shape[-2], dtype=torch.bool).tril(diagonal=past)
    return F.scaled_dot_product_attention(q_new, k_new, v_new, attn_mask=mask), k_new, v_new


def _cache_with_explicit_scores(q_new, k_new, v_new, past_keys, past_values):
    keys = k_new if past_keys is None else torch.cat([past_keys, k_new], 2)
    values = v_new if past_values is None else torch.cat([past_values, v_new], 2)
    scores = q_new @ keys.transpose(-1, -2) / math.sqrt(q_new.shape[-1])  # (batch, heads, new, total)
    past = keys.shape[2] - q_new.shape[2]
    future = torch.triu(torch.ones_like(scores[0, 0], dtype=torch.bool), diagonal=past + 1)
    return torch.softmax(scores.masked_fill(future, -math.inf), -1) @ values, keys, values


ATTEND_WITH_CACHE = register(Exercise(
    name="attend_with_cache",
    notebook=NOTEBOOK,
    points=2,
    reference=attend_with_cache,
    summary="one causal attention step that appends to and attends over a key/value cache",
    **public_and_hidden(_cache_cases),
    mistakes=[
        Mistake("no causal mask", _no_causal_mask,
                "with several new tokens (the prompt), new token i must not see new tokens after it: mask "
                "key j unless j <= past + i."),
        Mistake("mask without the offset", _mask_without_offset,
                "new query i sits at absolute position past + i: it may see every cached key and the new ones up to "
                "itself, so the causal mask is shifted by the cache's length.",
                detail="torch.tril(..., diagonal=past), not diagonal=0."),
        Mistake("new keys before the cached ones", _new_before_past,
                "append the new keys after the cached ones along the sequence axis, the cache first, so that "
                "position j stays at index j.",
                detail="torch.cat([past_keys, k_new], dim=2)."),
        Mistake("cache ignored", _only_new_keys,
                "attend over the cached keys and values too, not only the new ones: that is what the cache "
                "is for."),
        Mistake("cache not extended", _cache_not_extended,
                "return the extended keys and values (past + new along dim 2): the next step needs them."),
    ],
    also_correct=[_cache_via_fused_attention, _cache_with_explicit_scores],
))
