"""Reference implementations of the key/value-cache assignment (the instructor's copy).

Built only from ``course_lib``'s public API: :class:`course_lib.models.attention.MultiHeadAttention`,
:func:`~course_lib.models.attention.split_heads`, :func:`~course_lib.models.attention.merge_heads`,
:func:`~course_lib.models.attention.scaled_dot_product_attention`, :func:`course_lib.models.masking.causal_mask`,
:func:`course_lib.models.positional.sinusoidal_table` and :class:`~course_lib.models.positional.PositionalEncoding`.

A decoder generates one token at a time, and at step ``t`` its self-attention needs the keys and values
of every position ``0..t``. Those of positions ``0..t-1`` do not change from one step to the next (the mask
keeps earlier positions from seeing later ones), so recomputing them is wasted work: a **key/value cache**
keeps them, and each step projects only the new token. This module holds the three graded pieces:

- :func:`append_kv` -- append the new keys and values to the cache (exercise ``kv_append``);
- :class:`CachedSelfAttention` -- one attention step for new tokens against the cache
  (exercise ``kv_attention_step``);
- :class:`TinyDecoder` ``.forward`` -- greedy decoding that feeds each new token once, through the cache
  (exercise ``kv_decode_loop``);

and the uncached path they are tested against: :func:`uncached_logits` (recomputes every position with
``MultiHeadAttention``, a causal mask and ``PositionalEncoding``) and :func:`uncached_generate`.

Example:
    >>> model = TinyDecoder(vocab_size=11, d_model=16, num_heads=4, max_len=32).eval()
    >>> tokens, logits = model(torch.tensor([[1, 2, 3]]), max_new_tokens=5)
    >>> tokens.shape, logits.shape
    (torch.Size([1, 8]), torch.Size([1, 5, 11]))
    >>> bool(torch.allclose(logits, uncached_logits(model, tokens)[:, 2:-1], atol=1e-5))
    True
"""

from __future__ import annotations

import math

import torch
from torch import nn

from course_lib.models.attention import MultiHeadAttention
from course_lib.models.masking import causal_mask
from course_lib.models.positional import PositionalEncoding, sinusoidal_table

__all__ = ["append_kv", "CachedSelfAttention", "TinyDecoder", "uncached_logits", "uncached_generate"]


def append_kv(past_k: torch.Tensor | None, past_v: torch.Tensor | None, k_new: torch.Tensor,
              v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Append new keys and values to a key/value cache, along the sequence axis.

    Why: in incremental decoding the keys and values of earlier positions never change, so they are kept
    (cached) and each step only appends those of its new tokens, in order, after the old ones.

    Args:
        past_k, past_v: the cache, ``(batch, num_heads, past_len, d_k)`` each, or both ``None`` when
            nothing has been cached yet.
        k_new, v_new: keys and values of the new tokens, ``(batch, num_heads, new_len, d_k)`` each.

    Returns:
        ``(k, v)``, each ``(batch, num_heads, past_len + new_len, d_k)``: the old positions first.

    Example:
        >>> k, v = append_kv(None, None, torch.zeros(2, 4, 3, 8), torch.zeros(2, 4, 3, 8))
        >>> k, v = append_kv(k, v, torch.ones(2, 4, 1, 8), torch.ones(2, 4, 1, 8))
        >>> k.shape, float(k[0, 0, -1, 0])
        (torch.Size([2, 4, 4, 8]), 1.0)
    """
    if (past_k is None) != (past_v is None):
        raise ValueError("append_kv: past_k and past_v must both be None (empty cache) or both be tensors")
    for name, t in (("past_k", past_k), ("past_v", past_v), ("k_new", k_new), ("v_new", v_new)):
        if t is not None and (not isinstance(t, torch.Tensor) or t.dim() != 4):
            got = f"shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"append_kv: {name} must have shape (batch, num_heads, seq, d_k), got {got}")
    if past_k is None:
        return k_new, v_new  # an empty cache: the new positions are the whole cache
    k = torch.cat([past_k, k_new], dim=2)  # (batch, heads, past_len + new_len, d_k)
    v = torch.cat([past_v, v_new], dim=2)  # (batch, heads, past_len + new_len, d_v)
    return k, v


class CachedSelfAttention(MultiHeadAttention):
    """Causal multi-head self-attention that attends from new tokens to a key/value cache.

    It has exactly :class:`~course_lib.models.attention.MultiHeadAttention`'s weights (``w_q``, ``w_k``, ``w_v``,
    ``w_o``; load one's ``state_dict`` into the other), but its ``forward`` takes only the new tokens and
    the cache: it projects the new tokens, appends their keys and values to the cache (as :func:`append_kv`
    does), and lets new query ``i`` (at absolute position ``past_len + i``) attend to every key
    at position ``<= past_len + i``. Fed one token at a time, it gives the numbers that
    ``MultiHeadAttention(x, x, x, mask=causal_mask(seq))`` gives for the whole sequence at once.

    Shapes (forward): ``x`` ``(batch, new_len, d_model)``; ``past_k``/``past_v``
    ``(batch, num_heads, past_len, d_k)`` or ``None``; returns ``(output (batch, new_len, d_model),
    k (batch, num_heads, past_len + new_len, d_k), v (same))``: the output and the updated cache.

    Example:
        >>> attn = CachedSelfAttention(d_model=8, num_heads=2).eval()
        >>> out, k, v = attn(torch.randn(1, 3, 8))          # the prompt: three positions
        >>> out, k, v = attn(torch.randn(1, 1, 8), k, v)    # one new token
        >>> out.shape, k.shape
        (torch.Size([1, 1, 8]), torch.Size([1, 2, 4, 4]))
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = True) -> None:
        super().__init__(d_model, num_heads, dropout=0.0, bias=bias)

    def forward(self, x: torch.Tensor, past_k: torch.Tensor | None = None,  # type: ignore[override]
                past_v: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Attend from the new tokens ``x`` to the cache and themselves; see the class docstring."""
        # The course's building blocks (notebook 02), imported here so that the solved notebook shows where from.
        from course_lib.models.attention import merge_heads, scaled_dot_product_attention, split_heads

        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"CachedSelfAttention: x must have shape (batch, new_len, d_model={self.d_model}), "
                             f"got shape {tuple(x.shape)}")
        q = split_heads(self.w_q(x), self.num_heads)  # (batch, heads, new_len, d_k)
        k_new = split_heads(self.w_k(x), self.num_heads)  # (batch, heads, new_len, d_k)
        v_new = split_heads(self.w_v(x), self.num_heads)  # (batch, heads, new_len, d_k)
        k, v = k_new, v_new
        if past_k is not None:  # append after the cached positions, as append_kv does
            k = torch.cat([past_k, k_new], dim=2)  # (batch, heads, past_len + new_len, d_k)
            v = torch.cat([past_v, v_new], dim=2)  # (batch, heads, past_len + new_len, d_k)
        new_len, total = x.shape[1], k.shape[2]
        past_len = total - new_len
        # New query i sits at position past_len + i: it may see keys 0 .. past_len + i.
        mask = torch.ones(new_len, total, dtype=torch.bool, device=x.device).tril(diagonal=past_len)
        heads, _ = scaled_dot_product_attention(q, k, v, mask)  # (batch, heads, new_len, d_k)
        output = self.w_o(merge_heads(heads))  # (batch, new_len, d_model)
        return output, k, v


class TinyDecoder(nn.Module):
    """A one-layer, attention-only language model that generates greedily with a key/value cache.

    ``logits = out(h + attn(h))`` with ``h = tok(tokens) * sqrt(d_model) + PE[positions]``: token embeddings
    scaled as in the paper, sinusoidal positions (:func:`course_lib.models.positional.sinusoidal_table`), one
    :class:`CachedSelfAttention` with a residual connection, and a projection to the vocabulary. Small, so
    that every step of the decoding loop can be checked against the uncached computation.

    Args:
        vocab_size: number of token ids; d_model, num_heads: as in the paper; max_len: the longest sequence
            (prompt and generated tokens together).

    Shapes: :meth:`step` ``(tokens (batch, new_len), start, cache) -> (logits (batch, new_len, vocab_size),
    k, v)``; ``forward(prompt (batch, prompt_len), max_new_tokens) -> (tokens (batch, prompt_len +
    max_new_tokens), logits (batch, max_new_tokens, vocab_size))``, where ``logits[:, i]`` are the scores
    from which generated token ``i`` was chosen.

    Example:
        >>> model = TinyDecoder(vocab_size=7, d_model=8, num_heads=2, max_len=16).eval()
        >>> tokens, logits = model(torch.tensor([[3, 1], [2, 2]]), max_new_tokens=4)
        >>> tokens.shape, logits.shape
        (torch.Size([2, 6]), torch.Size([2, 4, 7]))
    """

    def __init__(self, vocab_size: int, d_model: int, num_heads: int, max_len: int = 64) -> None:
        super().__init__()
        self.vocab_size, self.d_model, self.max_len = vocab_size, d_model, max_len
        self.tok = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)  # (max_len, d_model)
        self.attn = CachedSelfAttention(d_model, num_heads)
        self.out = nn.Linear(d_model, vocab_size)

    def step(self, tokens: torch.Tensor, start: int, past_k: torch.Tensor | None = None,
             past_v: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run new tokens at positions ``start .. start + new_len - 1`` against the cache.

        Returns ``(logits (batch, new_len, vocab_size), k, v)`` with the updated cache.

        Example:
            >>> model = TinyDecoder(vocab_size=7, d_model=8, num_heads=2).eval()
            >>> logits, k, v = model.step(torch.tensor([[3, 1, 4]]), start=0)
            >>> logits, k, v = model.step(torch.tensor([[5]]), start=3, past_k=k, past_v=v)
            >>> logits.shape, k.shape
            (torch.Size([1, 1, 7]), torch.Size([1, 2, 4, 4]))
        """
        if tokens.dim() != 2:
            raise ValueError(f"TinyDecoder.step: tokens must have shape (batch, new_len), got {tuple(tokens.shape)}")
        new_len = tokens.shape[1]
        if start + new_len > self.max_len:
            raise ValueError(f"TinyDecoder.step: positions {start}..{start + new_len - 1} exceed max_len="
                             f"{self.max_len}")
        h = self.tok(tokens) * math.sqrt(self.d_model) + self.pe[start:start + new_len]  # (batch, new_len, d_model)
        a, k, v = self.attn(h, past_k, past_v)  # a: (batch, new_len, d_model)
        return self.out(h + a), k, v  # (batch, new_len, vocab_size)

    def forward(self, prompt: torch.Tensor, max_new_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy decoding with the cache; see the class docstring for shapes."""
        if prompt.dim() != 2 or prompt.shape[1] < 1:
            raise ValueError(f"TinyDecoder: prompt must have shape (batch, prompt_len >= 1), got "
                             f"{tuple(prompt.shape)}")
        if max_new_tokens < 1:
            raise ValueError(f"TinyDecoder: max_new_tokens must be >= 1, got {max_new_tokens}")
        logits, k, v = self.step(prompt, 0)  # the prompt in one go ("prefill"): (batch, prompt_len, vocab)
        tokens, scores = prompt, []
        for _ in range(max_new_tokens):
            last = logits[:, -1]  # (batch, vocab): the prediction made at the last position
            scores.append(last)
            next_token = last.argmax(dim=-1, keepdim=True)  # (batch, 1)
            tokens = torch.cat([tokens, next_token], dim=1)  # (batch, seq + 1)
            if len(scores) < max_new_tokens:  # feed only the new token, at the next position
                logits, k, v = self.step(next_token, tokens.shape[1] - 1, k, v)
        return tokens, torch.stack(scores, dim=1)  # (batch, prompt_len + max_new), (batch, max_new, vocab)


def uncached_logits(model: TinyDecoder, tokens: torch.Tensor) -> torch.Tensor:
    """The logits of every position of ``tokens`` computed without any cache, from the course's modules.

    A plain :class:`~course_lib.models.attention.MultiHeadAttention` gets ``model.attn``'s weights and a
    :func:`~course_lib.models.masking.causal_mask`; positions come from
    :class:`~course_lib.models.positional.PositionalEncoding`. This is the computation the cache must reproduce.

    Shapes: ``tokens`` ``(batch, seq)`` -> logits ``(batch, seq, vocab_size)``.

    Example:
        >>> model = TinyDecoder(vocab_size=7, d_model=8, num_heads=2).eval()
        >>> uncached_logits(model, torch.tensor([[3, 1, 4]])).shape
        torch.Size([1, 3, 7])
    """
    where = {"device": model.pe.device, "dtype": model.pe.dtype}  # follow the model (e.g. after .double())
    mha = MultiHeadAttention(model.d_model, model.attn.num_heads).to(**where)
    mha.load_state_dict(model.attn.state_dict())
    mha.eval()
    positions = PositionalEncoding(model.d_model, max_len=model.max_len).to(**where)
    h = positions(model.tok(tokens) * math.sqrt(model.d_model))  # (batch, seq, d_model)
    a, _ = mha(h, h, h, mask=causal_mask(tokens.shape[1], device=tokens.device))  # (batch, seq, d_model)
    return model.out(h + a)  # (batch, seq, vocab_size)


def uncached_generate(model: TinyDecoder, prompt: torch.Tensor, max_new_tokens: int
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding without a cache: every step recomputes every position with :func:`uncached_logits`.

    The same contract as :meth:`TinyDecoder.forward`; it costs ``O(seq^2)`` projections where the cached
    loop costs ``O(seq)``.

    Shapes: ``prompt`` ``(batch, prompt_len)`` -> ``(tokens (batch, prompt_len + max_new_tokens), logits
    (batch, max_new_tokens, vocab_size))``.

    Example:
        >>> model = TinyDecoder(vocab_size=7, d_model=8, num_heads=2).eval()
        >>> tokens, logits = uncached_generate(model, torch.tensor([[3, 1]]), max_new_tokens=3)
        >>> bool(torch.equal(tokens, model(torch.tensor([[3, 1]]), 3)[0]))
        True
    """
    tokens, scores = prompt, []
    for _ in range(max_new_tokens):
        last = uncached_logits(model, tokens)[:, -1]  # (batch, vocab)
        scores.append(last)
        tokens = torch.cat([tokens, last.argmax(dim=-1, keepdim=True)], dim=1)  # (batch, seq + 1)
    return tokens, torch.stack(scores, dim=1)
