"""Generating text with a decoder-only language model: sampling rules and a key/value cache.

A language model gives a distribution over the next token; *generation* repeatedly picks one and appends
it. How to pick:

- **greedy**: the most probable token (``temperature=0``): deterministic, and prone to loops;
- **temperature** ``T``: sample from softmax(logits / T); ``T < 1`` sharpens, ``T > 1`` flattens;
- **top-k** (Fan et al. 2018): sample among the ``k`` most probable tokens only;
- **nucleus / top-p** (Holtzman et al. 2020): sample among the smallest set of most probable tokens whose
  probabilities sum to at least ``p``: the set is small where the model is sure and large where it is not.

Ties: both filters keep every token whose logit equals the last one kept (so the result does not depend on
how a sort orders equal values). Sampling takes a ``torch.Generator``: the same seed gives the same text.

The **key/value cache**: without it, producing token ``t`` runs the whole model on all ``t`` tokens again,
although the keys and values of positions ``0..t-1`` have not changed (the causal mask means a position
never looks at later ones). With it, each step runs the model on the one new token, appends its keys and
values to those stored for every layer, and attends over them: work per step proportional to ``t`` instead
of ``t^2``. The cache lives where Hugging Face's models keep it, inside the attention module
(:class:`course_lib.models.attention.MultiHeadAttention`'s ``cache``, one
:class:`course_lib.models.kv_cache.KVCache` per
layer): :func:`generate` calls the model's own forward, ``model(new_tokens, cache=caches)``, so cached and
uncached logits are computed by the same code. :func:`attend_with_cache` is notebook 11's exercise: one
attention step with the cache written out as tensors.

**Past the context.** A cache that keeps every position grows with the text, and a model with learned positions
(notebook 11's GPT) has none beyond ``max_len``: :func:`generate` refuses to run its cached path further. A model
whose attention looks back over a sliding window (Mistral's; ``Llama(window=W)``, notebook 14) gets a *rolling*
cache from ``make_cache()`` (:class:`course_lib.models.kv_cache.SlidingWindowCache`, the last ``W - 1`` positions
and the new one), and rotary positions have no table that ends: its memory stays constant and generation goes on
as long as asked, with the logits of a full pass over the whole text.

Shapes: cached keys and values (batch, num_heads, seq_so_far, d_k); logits (batch, vocab).
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.models import kv_cache
from course_lib.models.attention import scaled_dot_product_attention
from course_lib.models.gpt import GPT
from course_lib.validation import check_positive_ints, validated_by

__all__ = ["top_k_filter", "top_p_filter", "sample_next_token", "attend_with_cache", "generate"]


def _check_logits(logits: torch.Tensor, fn: str) -> None:
    if not isinstance(logits, torch.Tensor) or logits.dim() < 1 or not logits.is_floating_point():
        raise ValueError(f"{fn}: logits must be a floating-point tensor of shape (..., vocab), got "
                         f"{getattr(logits, 'shape', type(logits).__name__)}")


def _check_top_p_arguments(logits: torch.Tensor, p: float) -> None:
    _check_logits(logits, "top_p_filter")
    if not 0.0 < float(p) <= 1.0:
        raise ValueError(f"top_p_filter: p must be in (0, 1], got {p!r}")


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits of each row (and any tied with the k-th), set the rest to -inf.

    ``k >= vocab`` keeps everything. Shapes: (..., vocab) -> (..., vocab).

    Example:
        >>> top_k_filter(torch.tensor([1.0, 3.0, 2.0, 0.0]), 2)
        tensor([-inf, 3., 2., -inf])
    """
    _check_logits(logits, "top_k_filter")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"top_k_filter: k must be a positive int, got {k!r}")
    if k >= logits.shape[-1]:
        return logits.clone()
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1): the k-th largest logit
    return logits.masked_fill(logits < kth, float("-inf"))


@validated_by(_check_top_p_arguments)
def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filtering: keep the smallest set of most probable tokens whose probabilities sum to >= ``p``.

    The most probable token is always kept; ``p = 1`` keeps everything (with a nonzero probability); tokens
    tied with the last one kept are kept too. Shapes: (..., vocab) -> (..., vocab), the rest set to -inf.

    Example:
        >>> top_p_filter(torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])), 0.7).exp()
        tensor([0.5000, 0.3000, 0.0000, 0.0000])
    """
    if p >= 1.0:  # everything (rounding in a float cumsum must not drop the tail's tiny probabilities)
        return logits.clone()
    sorted_logits, _ = torch.sort(logits, dim=-1, descending=True)  # (..., vocab)
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs  # (..., vocab): probability of the tokens above
    keep_sorted = mass_before < p  # a token is needed while the ones above it hold less than p
    num_kept = keep_sorted.sum(dim=-1, keepdim=True).clamp(min=1)  # (..., 1)
    threshold = sorted_logits.gather(-1, num_kept - 1)  # (..., 1): the smallest logit kept
    return logits.masked_fill(logits < threshold, float("-inf"))


def sample_next_token(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                      top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Pick one token per row from next-token logits (batch, vocab) -> (batch,) long.

    ``temperature=0`` is greedy (the argmax; ``top_k``/``top_p`` are then irrelevant). Otherwise the logits
    are divided by the temperature, filtered by top-k and then top-p (when given), and sampled.
    """
    _check_logits(logits, "sample_next_token")
    if logits.dim() != 2:
        raise ValueError(f"sample_next_token: logits must have shape (batch, vocab), got {tuple(logits.shape)}")
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not temperature >= 0:
        raise ValueError(f"sample_next_token: temperature must be a number >= 0, got {temperature!r}")
    _check_samplable(logits)
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = torch.softmax(logits, dim=-1)  # (batch, vocab)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _check_samplable(logits: torch.Tensor) -> None:
    """Raise a ValueError naming the first row that holds NaN or +inf, or only -inf (nothing to sample):
    softmax would turn it into NaN probabilities, which ``torch.multinomial`` reports without saying why."""
    bad = logits.isnan() | (logits == float("inf"))  # (batch, vocab)
    empty = (logits == float("-inf")).all(dim=-1)  # (batch,): every token ruled out
    if bool(bad.any()) or bool(empty.any()):
        row = int((bad.any(dim=-1) | empty).nonzero()[0, 0])
        found = "NaN" if bool(logits[row].isnan().any()) else "+inf" if bool(bad[row].any()) else "only -inf"
        raise ValueError(f"sample_next_token: logits must be finite (or -inf for ruled-out tokens) with at "
                         f"least one finite value per row; row {row} holds {found}")


def _check_cache_inputs(q_new: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
                        past_keys: torch.Tensor | None, past_values: torch.Tensor | None) -> None:
    """Raise a ValueError naming the argument, the shape expected and the shape given."""
    who = "attend_with_cache"
    for name, x in (("q_new", q_new), ("k_new", k_new), ("v_new", v_new)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise ValueError(f"{who}: {name} must be a 4-D tensor (batch, heads, new, d_k), got "
                             f"{tuple(getattr(x, 'shape', ())) or type(x).__name__}")
    if k_new.shape != q_new.shape or v_new.shape[:3] != q_new.shape[:3]:
        raise ValueError(f"{who}: q_new and k_new must have the same shape (batch, heads, new, d_k) and v_new "
                         f"the same (batch, heads, new); got q_new {tuple(q_new.shape)}, k_new "
                         f"{tuple(k_new.shape)}, v_new {tuple(v_new.shape)}")
    if (past_keys is None) != (past_values is None):
        raise ValueError(f"{who}: past_keys and past_values must both be None (first step) or both tensors, got "
                         f"{type(past_keys).__name__} and {type(past_values).__name__}")
    if past_keys is None:
        return
    batch, heads, _, d_k = k_new.shape
    for name, past, new in (("past_keys", past_keys, k_new), ("past_values", past_values, v_new)):
        if not isinstance(past, torch.Tensor) or past.dim() != 4 or past.shape[:2] != (batch, heads) \
                or past.shape[3] != new.shape[3]:
            raise ValueError(f"{who}: {name} must have shape (batch={batch}, heads={heads}, past, "
                             f"{new.shape[3]}) to extend {tuple(new.shape)}, got "
                             f"{tuple(getattr(past, 'shape', ())) or type(past).__name__}")
    if past_keys.shape[2] != past_values.shape[2]:
        raise ValueError(f"{who}: past_keys and past_values must hold the same number of positions, got "
                         f"{past_keys.shape[2]} and {past_values.shape[2]}")


@validated_by(_check_cache_inputs)
def attend_with_cache(q_new: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
                      past_keys: torch.Tensor | None, past_values: torch.Tensor | None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One causal attention step with a key/value cache, per head.

    Append the new keys and values to the cached ones (along the sequence axis), then let new query ``i``
    (absolute position ``past + i``) attend to keys ``0 .. past + i``: all the cached ones and the new ones
    up to itself. ``past_keys``/``past_values`` are None at the first step (nothing cached).

    Shapes: ``q_new``, ``k_new``, ``v_new`` (batch, heads, new, d_k); ``past_*`` (batch, heads, past, d_k)
    -> ``(output (batch, heads, new, d_k), keys (batch, heads, past + new, d_k), values (same))``.
    """
    if past_keys is not None:
        k = torch.cat([past_keys, k_new], dim=2)  # (batch, heads, past + new, d_k)
        v = torch.cat([past_values, v_new], dim=2)
    else:
        k, v = k_new, v_new
    new, total = q_new.shape[2], k.shape[2]
    if new == 1:  # one new query, the last position: every key is at or before it, nothing to mask
        mask = None
    else:
        past = total - new
        key_pos = torch.arange(total, device=q_new.device)  # (total,)
        query_pos = past + torch.arange(new, device=q_new.device)  # (new,): absolute positions
        mask = key_pos[None, :] <= query_pos[:, None]  # (new, total), True = may attend
    output, _ = scaled_dot_product_attention(q_new, k, v, mask)  # (batch, heads, new, d_k)
    return output, k, v


def _check_generate_inputs(model: nn.Module, prompt: torch.Tensor, max_new_tokens: int, use_cache: bool) -> None:
    """Raise a clear error for a model without a cache, bad prompt ids, or a prompt that cannot grow."""
    if use_cache and not callable(getattr(model, "make_cache", None)):
        raise TypeError(f"generate: use_cache=True needs a model with make_cache() whose forward takes "
                        f"cache= (such as course_lib.models.gpt.GPT), got {type(model).__name__}; pass use_cache=False "
                        f"for another model")
    if isinstance(model, GPT):
        model._check_ids(prompt, "generate")  # the prompt's ids, once: sampled ids are in range by construction
    elif not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"generate: prompt must have shape (batch, prompt_len >= 1), got "
                         f"{tuple(getattr(prompt, 'shape', ())) or type(prompt).__name__}")
    check_positive_ints("generate", minimum=0, max_new_tokens=max_new_tokens)
    total = prompt.shape[1] + max_new_tokens
    if use_cache and _reach(model) is None and total > model.max_len:
        room = (f"at most max_new_tokens={model.max_len - prompt.shape[1]}" if prompt.shape[1] <= model.max_len
                else f"a prompt of at most {model.max_len} tokens")
        raise ValueError(f"generate: prompt ({prompt.shape[1]} tokens) + max_new_tokens ({max_new_tokens}) = {total} "
                         f"exceed max_len={model.max_len}, the context {type(model).__name__} was built for (its "
                         f"cache keeps every position); ask for {room}, pass use_cache=False (each step then reads "
                         f"the last max_len tokens), or use a model with a sliding window (Llama(window=W): its "
                         f"rolling cache runs past max_len)")


def _reach(model: nn.Module) -> int | None:
    """How many of the latest tokens the next token's logits depend on, for a model whose caches roll (every
    layer's ``make_cache()`` entry a :class:`~course_lib.models.kv_cache.SlidingWindowCache`); None otherwise.

    Each layer looks ``window - 1`` positions further back than the one below it, so after ``L`` layers the
    last position has read ``L (window - 1) + 1`` tokens: the full pass over those equals the full pass over the
    whole text. (A cache's window may exceed its attention's; the reach is then an upper bound, still exact.)"""
    make_cache = getattr(model, "make_cache", None)
    caches = make_cache() if callable(make_cache) else None
    if not caches or not all(isinstance(c, kv_cache.SlidingWindowCache) for c in caches):
        return None
    return sum(c.window - 1 for c in caches) + 1


@torch.no_grad()
def generate(model: nn.Module, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, generator: torch.Generator | None = None,
             use_cache: bool = True) -> torch.Tensor:
    """Continue ``prompt`` (batch, prompt_len) by ``max_new_tokens`` tokens; returns (batch, prompt_len + new).

    With ``use_cache`` the model's own forward runs with its key/value caches (``model.make_cache()``): the
    prompt once, then only the newest token each step. Prompt + new tokens must fit in ``max_len`` unless the
    model's caches roll (a sliding-window model: memory bounded by the window, no limit on the length). Without
    it each step reruns the model on the latest tokens: its last ``max_len`` (a sliding-window model: the
    ``num_layers (window - 1) + 1`` its last position reads, so both paths give the same logits).

    Example (a sliding window of 4 over a context of 8; 20 new tokens):
        >>> from course_lib.models.llama import Llama
        >>> lm = Llama(vocab_size=30, d_model=16, num_heads=2, num_layers=2, max_len=8, window=4).eval()
        >>> generate(lm, torch.zeros(1, 3, dtype=torch.long), 20, temperature=0).shape
        torch.Size([1, 23])
    """
    _check_generate_inputs(model, prompt, max_new_tokens, use_cache)
    was_training = model.training
    model.eval()
    cache = model.make_cache() if use_cache else None
    context = (_reach(model) or model.max_len) if not use_cache else None  # the uncached path's tokens
    tokens, next_input = prompt, prompt
    for _ in range(max_new_tokens):
        if use_cache:
            logits = model(next_input, cache=cache)  # (batch, new, vocab): the new positions only
        else:
            logits = model(tokens[:, -context:])  # (batch, min(seq, context), vocab)
        next_token = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)  # (batch,)
        next_input = next_token[:, None]  # (batch, 1)
        tokens = torch.cat([tokens, next_input], dim=1)
    model.train(was_training)
    return tokens
