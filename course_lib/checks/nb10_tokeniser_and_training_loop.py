"""Exercises of notebook 10 (the pieces around the model): one step of BPE training, the AdamW update, and
gradient clipping by the global norm.

Declarations, not logic to share: its mistakes are whole wrong answers, as a learner writes them, so
``duplicates`` pairs this module with the other checks modules by shape (:mod:`course_lib.checks` says why).
"""

from __future__ import annotations

import math
from collections import Counter
from itertools import pairwise

import torch

from course_lib.data.bpe import bpe_merge_step, merge_pair
from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import dtype_variants, public_and_hidden
from course_lib.training.optim import adamw_update, clip_by_global_norm

NOTEBOOK = "10_tokeniser_and_training_loop"


# ---------------------------------------------------------------------------------------------------
# 10.1 bpe_merge_step
# ---------------------------------------------------------------------------------------------------

def _merge_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    cases = [
        Case("three words, one pair most frequent", args=([[1, 2, 3], [2, 3], [4, 2, 3]], [1, 2, 1], 9)),
        Case("a tie: (5, 6) and (1, 2) both occur 3 times (the smaller left id wins)",
             args=([[5, 6], [1, 2]], [3, 3], 7)),
        Case("a tie with the same left id: (1, 4) and (1, 3) (the smaller right id wins)",
             args=([[1, 4], [1, 3], [7]], [2, 2, 5], 8)),
        Case("a three-way tie: (1, 4), (1, 3), (0, 9) (the left id decides first)",
             args=([[1, 4], [1, 3], [0, 9]], [2, 2, 2], 10)),
        Case("the word counts decide: a rare word full of one pair loses to a frequent word",
             args=([[3, 3, 3, 3, 3], [4, 5]], [1, 3], 6)),
        Case("a pair made only by joining two words is no pair (words [1, 2] and [2, 1])",
             args=([[1, 2], [2, 1], [1, 3]], [2, 2, 3], 10)),
        Case("overlapping occurrences: [3, 3, 3] merges to [new, 3], left to right",
             args=([[3, 3, 3], [3, 3, 3, 3]], [2, 1], 11)),
        Case("a pair twice in one word, apart", args=([[1, 2, 5, 1, 2], [2, 5]], [2, 1], 12)),
    ]
    if hidden:
        words = [torch.randint(0, 6, (int(n),), generator=gen).tolist()
                 for n in torch.randint(1, 7, (8,), generator=gen)]
        counts = torch.randint(1, 5, (8,), generator=gen).tolist()
        if not any(len(w) > 1 for w in words):
            words[0] = [0, 1]
        cases += [Case("random words over ids 0-5", args=(words, counts, 6)),
                  Case("a tie of three pairs: (2, 9), (2, 4), (8, 1)", args=([[8, 1], [2, 9], [2, 4]], [4, 4, 4], 20)),
                  Case("overlap at the end of a word: [0, 7, 7, 7]", args=([[0, 7, 7, 7], [7, 7]], [1, 1], 30))]
    return cases


def _counts_weighted(words, counts):
    pairs = Counter()
    for word, count in zip(words, counts, strict=True):
        for pair in pairwise(word):
            pairs[pair] += count
    return pairs


def _first_seen_wins(words, counts, new_id):
    pair = _counts_weighted(words, counts).most_common(1)[0][0]  # ties: the pair counted first
    return pair, [list(merge_pair(w, pair, new_id)) for w in words]


def _larger_ids_win(words, counts, new_id):
    pairs = _counts_weighted(words, counts)
    pair = max(pairs, key=lambda p: (pairs[p], p[0], p[1]))
    return pair, [list(merge_pair(w, pair, new_id)) for w in words]


def _right_id_first(words, counts, new_id):
    pairs = _counts_weighted(words, counts)
    pair = max(pairs, key=lambda p: (pairs[p], -p[1], -p[0]))
    return pair, [list(merge_pair(w, pair, new_id)) for w in words]


def _across_words(words, counts, new_id):
    stream = [token for word, count in zip(words, counts, strict=True) for _ in range(count) for token in word]
    pairs = Counter(pairwise(stream))
    pair = max(pairs, key=lambda p: (pairs[p], -p[0], -p[1]))
    return pair, [list(merge_pair(w, pair, new_id)) for w in words]


def _counts_ignored(words, counts, new_id):
    pairs = _counts_weighted(words, [1] * len(words))
    pair = max(pairs, key=lambda p: (pairs[p], -p[0], -p[1]))
    return pair, [list(merge_pair(w, pair, new_id)) for w in words]


def _pair_once_per_word(words, counts, new_id):
    pairs = Counter()
    for word, count in zip(words, counts, strict=True):
        for pair in set(pairwise(word)):
            pairs[pair] += count
    pair = max(pairs, key=lambda p: (pairs[p], -p[0], -p[1]))
    return pair, [list(merge_pair(w, pair, new_id)) for w in words]


def _right_symbol_kept(words, counts, new_id):
    pairs = _counts_weighted(words, counts)
    pair = max(pairs, key=lambda p: (pairs[p], -p[0], -p[1]))
    out = []
    for word in words:
        merged, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
                merged.append(new_id)
            else:
                merged.append(word[i])
            i += 1  # one step on: the pair's right symbol is visited again
        out.append(merged)
    return pair, out


def _merged_from_the_right(words, counts, new_id):
    pairs = _counts_weighted(words, counts)
    pair = max(pairs, key=lambda p: (pairs[p], -p[0], -p[1]))
    out = []
    for word in words:
        merged, i = [], len(word) - 1
        while i >= 0:
            if i > 0 and (word[i - 1], word[i]) == pair:
                merged.insert(0, new_id)
                i -= 2
            else:
                merged.insert(0, word[i])
                i -= 1
        out.append(merged)
    return pair, out


def _first_occurrence_only(words, counts, new_id):
    pairs = _counts_weighted(words, counts)
    pair = max(pairs, key=lambda p: (pairs[p], -p[0], -p[1]))
    out = []
    for word in words:
        word = list(word)
        for i in range(len(word) - 1):
            if (word[i], word[i + 1]) == pair:
                word[i:i + 2] = [new_id]
                break
        out.append(word)
    return pair, out


def _sorted_then_first(words, counts, new_id):
    pairs = _counts_weighted(words, counts)
    pair = sorted(pairs, key=lambda p: (-pairs[p], p))[0]  # count down, then the ids up
    merged = []
    for word in words:
        out, skip = [], False
        for left, right in zip(word, [*word[1:], None], strict=True):
            if skip:
                skip = False
            elif (left, right) == pair:
                out.append(new_id)
                skip = True
            else:
                out.append(left)
        merged.append(out)
    return pair, merged


def _with_a_dictionary(words, counts, new_id):
    pairs: dict[tuple[int, int], int] = {}
    for word, count in zip(words, counts, strict=True):
        for i in range(len(word) - 1):
            pairs[(word[i], word[i + 1])] = pairs.get((word[i], word[i + 1]), 0) + count
    best = max(pairs.values())
    pair = min(p for p, c in pairs.items() if c == best)  # tuples compare left id first, then right
    return tuple(pair), [list(merge_pair(w, pair, new_id)) for w in words]


TIE_HINT = ("when two pairs occur equally often, the pair with the SMALLER ids must win: compare the left ids first, "
            "then the right ones (tokenizers' rule, so that the same text always gives the same merges).")
TIE_DETAIL = "max(pairs, key=lambda p: (pairs[p], -p[0], -p[1])), or the smallest pair among those with the top count."
MERGE_DETAIL = ("walk each word with an index i: where (word[i], word[i + 1]) is the pair, append new_id and jump "
                "i += 2; otherwise append word[i] and i += 1.")

BPE_MERGE_STEP = register(Exercise(
    name="bpe_merge_step",
    notebook=NOTEBOOK,
    points=2,
    reference=bpe_merge_step,
    summary="one step of BPE training: count pairs inside words, pick the most frequent (ties: smaller ids), merge it",
    **public_and_hidden(_merge_cases),
    mistakes=[
        Mistake("ties: first seen", _first_seen_wins, TIE_HINT + " Counter.most_common keeps the pair counted first.",
                detail=TIE_DETAIL),
        Mistake("ties: larger ids", _larger_ids_win, TIE_HINT, detail=TIE_DETAIL),
        Mistake("ties: right id first", _right_id_first,
                "ties are broken by the LEFT id first, and only then by the right one.", detail=TIE_DETAIL),
        Mistake("counted across words", _across_words,
                "count pairs inside each word only: a pair never spans two pre-tokens (the end of one word and the "
                "start of the next are not neighbours).",
                detail="for word, count in zip(words, counts): for pair in zip(word, word[1:]): pairs[pair] += count"),
        Mistake("counts ignored", _counts_ignored,
                "each word stands for `count` occurrences in the text: add its count, not 1, for every pair in it.",
                detail="pairs[pair] += count"),
        Mistake("a pair once per word", _pair_once_per_word,
                "a pair that occurs twice in a word counts twice: count every position, not the set of pairs."),
        Mistake("the merged pair's right symbol kept", _right_symbol_kept,
                "after merging a pair, move past BOTH its symbols: [a, b, c] merging (b, c) gives [a, bc], and "
                "[a, a, a] merging (a, a) gives [aa, a] (the middle symbol is used once).", detail=MERGE_DETAIL),
        Mistake("merged from the right", _merged_from_the_right,
                "merge left to right: [a, a, a] becomes [aa, a], not [a, aa] (tokenizers and GPT-2 scan from the "
                "left).", detail=MERGE_DETAIL),
        Mistake("first occurrence only", _first_occurrence_only,
                "replace EVERY occurrence of the pair in every word, not just the first one.", detail=MERGE_DETAIL),
    ],
    also_correct=[_sorted_then_first, _with_a_dictionary],
))


# ---------------------------------------------------------------------------------------------------
# 10.2 adamw_update
# ---------------------------------------------------------------------------------------------------

def _adamw_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    n = 7 if hidden else 5
    param, grad = torch.randn(3, n, generator=gen), torch.randn(3, n, generator=gen) * 0.1
    m, v = torch.randn(3, n, generator=gen) * 0.05, torch.rand(3, n, generator=gen) * 0.01
    zeros = torch.zeros(3, n)
    cases = [
        Case("the first step (step=1, m = v = 0), lr 0.1, weight decay 0.1",
             args=(param, grad, zeros, zeros, 1, 0.1, (0.9, 0.999), 1e-8, 0.1)),
        Case("step 3 from running means, GPT-2's betas (0.9, 0.95)",
             args=(param, grad, m, v, 3, 0.01, (0.9, 0.95), 1e-8, 0.1)),
        Case("step 1000 (bias correction nearly 1), strong decay 0.5",
             args=(param, grad, m, v, 1000, 0.05, (0.9, 0.999), 1e-8, 0.5)),
        Case("no weight decay: Adam itself", args=(param, grad, m, v, 2, 0.1, (0.8, 0.99), 1e-8, 0.0)),
        Case("a large eps (1e-2) next to small v", args=(param, grad, m, v, 4, 0.1, (0.9, 0.999), 1e-2, 0.0)),
        Case("large gradients and strong decay (Adam-L2 would barely decay these)",
             args=(param, grad * 100, m, v, 2, 0.1, (0.9, 0.999), 1e-8, 0.5)),
    ]
    if hidden:
        cases += dtype_variants(cases[1:3])
        cases.append(Case("a vector parameter, step 10", args=(param[0], grad[0], m[0], v[0], 10, 0.003,
                                                                (0.95, 0.98), 1e-6, 0.01)))
    return cases


def _adam_l2(param, grad, m, v, step, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    beta1, beta2 = betas
    grad = grad + weight_decay * param  # L2 in the gradient: Adam, not AdamW
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad ** 2
    m_hat, v_hat = m / (1 - beta1 ** step), v / (1 - beta2 ** step)
    return param - lr * m_hat / (v_hat.sqrt() + eps), m, v


def _no_bias_correction(param, grad, m, v, step, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad ** 2
    return param - lr * m / (v.sqrt() + eps), m, v


def _bias_correction_from_step_0(param, grad, m, v, step, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad ** 2
    t = step - 1  # counted from 0: the first step divides by 1 - beta**0 = 0
    m_hat, v_hat = m / (1 - beta1 ** t), v / (1 - beta2 ** t)
    return param - lr * m_hat / (v_hat.sqrt() + eps), m, v


def _decay_not_scaled_by_lr(param, grad, m, v, step, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    beta1, beta2 = betas
    param = param * (1 - weight_decay)
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad ** 2
    m_hat, v_hat = m / (1 - beta1 ** step), v / (1 - beta2 ** step)
    return param - lr * m_hat / (v_hat.sqrt() + eps), m, v


def _decay_after_the_step(param, grad, m, v, step, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    beta1, beta2 = betas
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad ** 2
    m_hat, v_hat = m / (1 - beta1 ** step), v / (1 - beta2 ** step)
    param = param - lr * m_hat / (v_hat.sqrt() + eps)
    return param * (1 - lr * weight_decay), m, v


def _eps_inside_sqrt(param, grad, m, v, step, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad ** 2
    m_hat, v_hat = m / (1 - beta1 ** step), v / (1 - beta2 ** step)
    return param - lr * m_hat / (v_hat + eps).sqrt(), m, v


def _betas_swapped(param, grad, m, v, step, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)
    m = (1 - beta1) * m + beta1 * grad  # the weights of the old mean and the new gradient swapped
    v = (1 - beta2) * v + beta2 * grad ** 2
    m_hat, v_hat = m / (1 - beta1 ** step), v / (1 - beta2 ** step)
    return param - lr * m_hat / (v_hat.sqrt() + eps), m, v


def _old_means_returned(param, grad, m_old, v_old, step, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)
    m = beta1 * m_old + (1 - beta1) * grad
    v = beta2 * v_old + (1 - beta2) * grad ** 2
    m_hat, v_hat = m / (1 - beta1 ** step), v / (1 - beta2 ** step)
    return param - lr * m_hat / (v_hat.sqrt() + eps), m_old, v_old


def _as_the_paper_writes_it(param, grad, m, v, step, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    beta1, beta2 = betas
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    m_hat = m / (1 - beta1 ** step)
    v_hat = v / (1 - beta2 ** step)
    return param - lr * (m_hat / (torch.sqrt(v_hat) + eps) + weight_decay * param), m, v


def _folded_step_size(param, grad, m, v, step, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    beta1, beta2 = betas
    m = m + (1 - beta1) * (grad - m)
    v = v + (1 - beta2) * (grad.square() - v)
    step_size = lr * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)  # Adam's section 2 form, eps moved
    denom = v.sqrt() + eps * math.sqrt(1 - beta2 ** step)
    return param * (1 - lr * weight_decay) - step_size * m / denom, m, v


ADAMW_UPDATE = register(Exercise(
    name="adamw_update",
    notebook=NOTEBOOK,
    points=2,
    reference=adamw_update,
    summary="one AdamW update: decoupled weight decay, running means of g and g², bias correction",
    **public_and_hidden(_adamw_cases),
    mistakes=[
        Mistake("Adam-L2 (weight decay inside the gradient)", _adam_l2,
                "that is Adam with L2 regularisation: the decay went into the gradient, so it is divided by √v̂ like "
                "the gradient and hardly acts where gradients are large. AdamW DECOUPLES it: shrink the parameter "
                "by lr · weight_decay · θ apart from the Adam step, and keep the gradient as it is.",
                detail="param = param * (1 - lr * weight_decay), then the Adam step with the untouched grad."),
        Mistake("no bias correction", _no_bias_correction,
                "m and v start at 0, so in the first steps they are too small: divide m by (1 - β₁ᵗ) and v by "
                "(1 - β₂ᵗ) before using them (bias correction).",
                detail="m_hat = m / (1 - beta1 ** step); v_hat = v / (1 - beta2 ** step)."),
        Mistake("bias correction with step 0", _bias_correction_from_step_0,
                "`step` counts from 1: the first update is step 1, so the correction is 1 - β^step, never 1 - β^0 "
                "= 0 (a division by zero at the first step).",
                detail="m_hat = m / (1 - beta1 ** step), with step as given (not step - 1)."),
        Mistake("decay not scaled by lr", _decay_not_scaled_by_lr,
                "the decoupled decay is scaled by the learning rate (PyTorch's convention, the paper's η_t): shrink "
                "by lr · weight_decay, not by weight_decay alone.",
                detail="param = param * (1 - lr * weight_decay)."),
        Mistake("decay after the step", _decay_after_the_step,
                "apply the weight decay to the parameter as it was BEFORE the Adam step (both read the old θ).",
                detail="decay first: param = param * (1 - lr * weight_decay); then subtract the Adam step."),
        Mistake("eps inside the square root", _eps_inside_sqrt,
                "eps is added AFTER the square root: m̂ / (√v̂ + ε), not m̂ / √(v̂ + ε)."),
        Mistake("betas swapped in the running means", _betas_swapped,
                "a running mean keeps β of the old value and adds (1 - β) of the new one: m ← β₁·m + (1 − β₁)·g.",
                detail="m = beta1 * m + (1 - beta1) * grad; v = beta2 * v + (1 - beta2) * grad ** 2."),
        Mistake("old means returned", _old_means_returned,
                "return the UPDATED m and v: the next step starts from them.",
                detail="return param, m, v with the m and v you just computed."),
    ],
    also_correct=[_as_the_paper_writes_it, _folded_step_size],
))


# ---------------------------------------------------------------------------------------------------
# 10.3 clip_by_global_norm
# ---------------------------------------------------------------------------------------------------

def _clip_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    n = 6 if hidden else 4
    grads = [torch.randn(n, 3, generator=gen) * 3, torch.randn(3, generator=gen), torch.randn(2, n, generator=gen)]
    small = [g * 0.01 for g in grads]
    cases = [
        Case("three gradients, global norm above max_norm 1", args=(grads, 1.0)),
        Case("one tensor's norm is below max_norm, the global norm above it", args=([grads[1] * 0.3, grads[0]], 2.0)),
        Case("already short enough: nothing changes (global norm below 1)", args=(small, 1.0)),
        Case("max_norm 0.5", args=(grads, 0.5)),
        Case("one gradient", args=([grads[0]], 1.0)),
    ]
    if hidden:
        cases += dtype_variants(cases[:2])
        cases.append(Case("tensors below and far above", args=([small[0], grads[2] * 50], 3.0)))
    return cases


def _per_tensor(grads, max_norm, eps=1e-6):
    clipped = []
    for g in grads:
        norm = g.norm()
        clipped.append(g * min(1.0, max_norm / (float(norm) + eps)))
    total = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    return clipped, total


def _always_scaled(grads, max_norm, eps=1e-6):
    total = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    return [g * (max_norm / (total + eps)) for g in grads], total


def _clipped_entries(grads, max_norm, eps=1e-6):
    total = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    return [g.clamp(-max_norm, max_norm) for g in grads], total


def _norm_after_clipping(grads, max_norm, eps=1e-6):
    total = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    scale = min(1.0, max_norm / (float(total) + eps))
    clipped = [g * scale for g in grads]
    return clipped, torch.sqrt(sum(g.pow(2).sum() for g in clipped))


def _sum_of_norms(grads, max_norm, eps=1e-6):
    total = sum(g.norm() for g in grads)  # the norms added, not their squares
    scale = torch.clamp(max_norm / (total + eps), max=1.0)
    return [g * scale for g in grads], total


def _concatenated(grads, max_norm, eps=1e-6):
    flat = torch.cat([g.reshape(-1) for g in grads])
    total = flat.norm()
    if total > max_norm:
        return [g * (max_norm / (total + eps)) for g in grads], total
    return [g.clone() for g in grads], total


def _without_eps(grads, max_norm, eps=1e-6):
    total = torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt()
    scale = (max_norm / total).clamp(max=1.0)
    return [g * scale for g in grads], total


CLIP_BY_GLOBAL_NORM = register(Exercise(
    name="clip_by_global_norm",
    notebook=NOTEBOOK,
    points=1,
    reference=clip_by_global_norm,
    summary="gradient clipping: scale all gradients together so that their global L2 norm is at most max_norm",
    **public_and_hidden(_clip_cases),
    mistakes=[
        Mistake("per-tensor norms", _per_tensor,
                "the norm is GLOBAL: one norm over every entry of every gradient, √(Σ ‖g_p‖²), and one scale for all "
                "of them. Clipping each tensor by its own norm turns the direction of the step.",
                detail="total = sqrt(sum of g.pow(2).sum() over grads); every g times min(1, max_norm / total)."),
        Mistake("clipped when below max_norm", _always_scaled,
                "clip only when the global norm EXCEEDS max_norm: a shorter gradient is left as it is (the scale "
                "is at most 1).",
                detail="scale = min(1, max_norm / (total + eps))."),
        Mistake("entries clipped", _clipped_entries,
                "that clips each entry (clip by value): clip by NORM instead, scaling every gradient by the same "
                "factor so that the direction stays."),
        Mistake("norm measured after clipping", _norm_after_clipping,
                "return the global norm measured BEFORE clipping (what clip_grad_norm_ returns: the training log "
                "shows how large the gradients were)."),
        Mistake("sum of norms", _sum_of_norms,
                "the global norm is the square root of the sum of SQUARED norms, √(Σ ‖g_p‖²), not Σ ‖g_p‖."),
    ],
    also_correct=[_concatenated, _without_eps],
))
