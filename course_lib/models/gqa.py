"""Grouped-query attention (GQA; Ainslie et al. 2023) with rotary positions, a key/value cache and an optional
sliding window: the attention of Llama 2/3, Mistral and most open models since.

Multi-head attention gives every head its own keys and values. During generation those are what the cache
stores, ``2 * num_layers * num_heads * d_k`` numbers per token, and reading them back dominates the time of a
step. GQA keeps ``num_heads`` query heads but only ``num_kv_heads`` key/value heads; each key/value head serves
a *group* of ``num_heads / num_kv_heads`` consecutive query heads (:func:`repeat_kv`). The cache shrinks by
that factor. ``num_kv_heads = num_heads`` is multi-head attention, ``num_kv_heads = 1`` multi-query attention
(MQA; Shazeer 2019).

Positions enter by rotating queries and keys (:func:`course_lib.models.rope.apply_rope`) at their absolute
positions, which start at ``cache.seen`` when a cache is given. A **sliding window** of ``window`` positions
(Mistral) lets query ``p`` see keys ``p - window + 1 .. p`` only (:func:`sliding_window_mask`); with a
:class:`~course_lib.models.kv_cache.SlidingWindowCache` the cache then stores at most ``window`` positions after
any step (a prefill longer than the window included) and a step reads the last ``window - 1`` and its own.

The attention itself is the course's (:func:`course_lib.models.attention.fused_attention`, or
:func:`course_lib.models.attention.scaled_dot_product_attention` when the weights are asked for), with the course's
mask convention: boolean, ``True`` = may attend.

Example:
    >>> attn = GroupedQueryAttention(d_model=32, num_heads=4, num_kv_heads=2)
    >>> out, _ = attn(torch.randn(2, 5, 32))
    >>> out.shape
    torch.Size([2, 5, 32])
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.models.attention import fused_attention, merge_heads, scaled_dot_product_attention, split_heads
from course_lib.models.kv_cache import KVCache, SlidingWindowCache
from course_lib.models.masking import sliding_window_mask
from course_lib.models.rope import ROPE_LAYOUTS, Llama3Scaling, apply_rope
from course_lib.validation import check_positive_ints, validated_by

__all__ = ["repeat_kv", "sliding_window_mask", "GroupedQueryAttention"]


def _check_repeat_kv(x: torch.Tensor, num_groups: int) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"repeat_kv: x must have shape (batch, num_kv_heads, seq, d_k), got "
                         f"{tuple(getattr(x, 'shape', ())) or type(x).__name__}")
    check_positive_ints("repeat_kv", num_groups=num_groups)


@validated_by(_check_repeat_kv)
def repeat_kv(x: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Repeat each key/value head ``num_groups`` times, in place: head ``j`` becomes heads ``j*g .. j*g + g - 1``.

    Query head ``h`` then meets key/value head ``h // num_groups``: consecutive query heads share one
    key/value head (the order of Hugging Face's ``repeat_kv``; ``x.repeat(1, g, 1, 1)`` would pair them the
    wrong way, ``h % num_kv_heads``).

    Shapes: ``(batch, num_kv_heads, seq, d_k)`` -> ``(batch, num_kv_heads * num_groups, seq, d_k)``.

    Example:
        >>> repeat_kv(torch.tensor([10.0, 20.0]).view(1, 2, 1, 1), 2).flatten()
        tensor([10., 10., 20., 20.])
    """
    if num_groups == 1:
        return x
    batch, kv_heads, seq, d_k = x.shape
    x = x[:, :, None].expand(batch, kv_heads, num_groups, seq, d_k)  # (batch, kv_heads, groups, seq, d_k)
    return x.reshape(batch, kv_heads * num_groups, seq, d_k)  # (batch, num_heads, seq, d_k)


def _check_mask(mask: object, target: tuple[int, ...]) -> None:
    """A mask must be boolean and broadcast to ``target`` (batch, num_heads, seq, keys)."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() > 4 or any(
            size not in (1, want) for size, want in zip(reversed(mask.shape), reversed(target), strict=False)):
        raise ValueError(f"GroupedQueryAttention: mask must be a boolean tensor (True = may attend) broadcastable "
                         f"to (batch, num_heads, seq, keys) = {target}, got "
                         f"{getattr(mask, 'dtype', type(mask).__name__)} {tuple(getattr(mask, 'shape', ()))}")


def _check_positions(positions: object, batch: int, seq: int) -> None:
    """Token positions must be an integer tensor ``(seq,)`` or ``(batch or 1, seq)``, one per token of ``x``."""
    if not isinstance(positions, torch.Tensor) or positions.is_floating_point() or positions.dtype == torch.bool \
            or positions.dim() not in (1, 2) or positions.shape[-1] != seq \
            or (positions.dim() == 2 and positions.shape[0] not in (1, batch)):
        raise ValueError(f"GroupedQueryAttention: positions must be an integer tensor of shape (seq={seq},) or "
                         f"(batch={batch}, seq={seq}), one position per token of x, got "
                         f"{getattr(positions, 'dtype', type(positions).__name__)} "
                         f"{tuple(getattr(positions, 'shape', ()))}")


class GroupedQueryAttention(nn.Module):
    """Causal self-attention with ``num_heads`` query heads sharing ``num_kv_heads`` key/value heads, RoPE,
    an optional key/value cache and an optional sliding window.

    Args:
        d_model: model width.
        num_heads: query heads.
        num_kv_heads: key/value heads, a divisor of ``num_heads`` (default ``num_heads``: multi-head
            attention; 1: multi-query attention).
        d_k: features per head (default ``d_model // num_heads``; some models choose another).
        bias: biases on the four projections (Llama: none).
        rope_base: RoPE's ``base`` (``rope_theta``), or a :class:`~course_lib.models.rope.Llama3Scaling` (Llama 3.1's
            scaled frequencies, its ``rope_theta`` included).
        rope_layout: ``"half"`` (Hugging Face) or ``"interleaved"`` (Meta's original checkpoints).
        window: sliding-window length, or None for full causal attention.

    Weights: ``w_q`` ``(num_heads * d_k, d_model)``, ``w_k`` and ``w_v`` ``(num_kv_heads * d_k, d_model)``,
    ``w_o`` ``(d_model, num_heads * d_k)`` (Hugging Face's ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``).

    Shapes (forward): ``x`` ``(batch, seq, d_model)``; ``cache`` a :class:`~course_lib.models.kv_cache.KVCache` that
    stores keys and values ``(batch, num_kv_heads, stored, d_k)`` (the tokens in ``x`` follow its ``seen``
    positions); ``mask`` an optional extra boolean mask broadcastable to ``(batch, num_heads, seq, keys)``
    (e.g. padding), ANDed with the causal/window mask; ``positions`` optional integer ``(seq,)`` or ``(batch, seq)``:
    the token positions the queries and keys are rotated by (Hugging Face's ``position_ids``; default the indices
    ``cache.seen ..``: the causal and window masks always follow the order of the tokens). Returns
    ``(output (batch, seq, d_model), weights (batch, num_heads, seq, keys) or None)``.

    Example:
        >>> from course_lib.models.kv_cache import KVCache
        >>> attn = GroupedQueryAttention(d_model=16, num_heads=4, num_kv_heads=1).eval()   # MQA
        >>> x, cache = torch.randn(1, 6, 16), KVCache()
        >>> full, _ = attn(x)
        >>> steps = torch.cat([attn(x[:, :4], cache)[0], attn(x[:, 4:5], cache)[0], attn(x[:, 5:], cache)[0]], 1)
        >>> torch.allclose(full, steps, atol=1e-6), tuple(cache.keys.shape)
        (True, (1, 1, 6, 4))
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int | None = None, d_k: int | None = None,
                 bias: bool = False, rope_base: float | Llama3Scaling = 10000.0, rope_layout: str = "half",
                 window: int | None = None) -> None:
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        check_positive_ints("GroupedQueryAttention", d_model=d_model, num_heads=num_heads, num_kv_heads=num_kv_heads)
        if d_k is None and d_model % num_heads:
            raise ValueError(f"GroupedQueryAttention: d_model={d_model} must be divisible by num_heads={num_heads} "
                             f"(each head gets d_k = d_model / num_heads features; {num_heads} x "
                             f"{d_model // num_heads} = {num_heads * (d_model // num_heads)} != {d_model}), or give "
                             f"d_k explicitly")
        d_k = d_model // num_heads if d_k is None else d_k
        check_positive_ints("GroupedQueryAttention", d_k=d_k)
        if num_heads % num_kv_heads:
            raise ValueError(f"GroupedQueryAttention: num_kv_heads={num_kv_heads} must divide "
                             f"num_heads={num_heads} (each key/value head serves a whole group of query heads)")
        if d_k % 2:
            raise ValueError(f"GroupedQueryAttention: d_k={d_k} must be even (RoPE rotates pairs of features)")
        if rope_layout not in ROPE_LAYOUTS:
            raise ValueError(f"GroupedQueryAttention: rope_layout must be one of {ROPE_LAYOUTS}, got {rope_layout!r}")
        if window is not None:
            check_positive_ints("GroupedQueryAttention", window=window)
        if not isinstance(rope_base, Llama3Scaling) and (isinstance(rope_base, bool) or not isinstance(
                rope_base, (int, float)) or not rope_base > 1):
            raise ValueError(f"GroupedQueryAttention: rope_base must be a number > 1 (rope_theta) or a "
                             f"Llama3Scaling, got {rope_base!r}")
        self.d_model, self.num_heads, self.num_kv_heads, self.d_k = d_model, num_heads, num_kv_heads, d_k
        self.rope_base, self.rope_layout, self.window = rope_base, rope_layout, window
        self.w_q = nn.Linear(d_model, num_heads * d_k, bias=bias)
        self.w_k = nn.Linear(d_model, num_kv_heads * d_k, bias=bias)  # fewer heads: the cache's saving
        self.w_v = nn.Linear(d_model, num_kv_heads * d_k, bias=bias)
        self.w_o = nn.Linear(num_heads * d_k, d_model, bias=bias)

    def _check_forward(self, x: torch.Tensor, cache: KVCache | None = None, mask: torch.Tensor | None = None,
                       need_weights: bool = False, positions: torch.Tensor | None = None) -> None:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != 3 \
                or x.shape[-1] != self.d_model or x.shape[1] < 1:
            raise ValueError(f"GroupedQueryAttention: x must be a floating-point tensor of shape (batch, seq >= 1, "
                             f"d_model={self.d_model}), got {getattr(x, 'dtype', type(x).__name__)} "
                             f"{tuple(getattr(x, 'shape', ()))}")
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"GroupedQueryAttention: cache must be a KVCache or None, got {type(cache).__name__}")
        if isinstance(cache, SlidingWindowCache) and (self.window is None or cache.window < self.window):
            raise ValueError(f"GroupedQueryAttention: a SlidingWindowCache(window={cache.window}) drops keys this "
                             f"attention still reads (its window is {self.window}); give it window >= "
                             f"{self.window} or a plain KVCache")
        if mask is not None:  # checked before the cache is updated: a refused call changes nothing
            kept = 0 if cache is None else cache.length if not isinstance(cache, SlidingWindowCache) \
                else min(cache.length, cache.window - 1)
            _check_mask(mask, (x.shape[0], self.num_heads, x.shape[1], kept + x.shape[1]))
        if positions is not None:
            _check_positions(positions, x.shape[0], x.shape[1])

    @validated_by(_check_forward)
    def forward(self, x: torch.Tensor, cache: KVCache | None = None, mask: torch.Tensor | None = None,
                need_weights: bool = False, positions: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from every position of ``x`` to the earlier ones (and the cached ones); see the class docstring."""
        seq = x.shape[1]
        start = cache.seen if cache is not None else 0  # the index of x's first token
        indices = torch.arange(start, start + seq, device=x.device)  # (seq,): the order the masks follow
        positions = indices if positions is None else positions.to(x.device)  # (seq,) or (batch, seq): rotations
        q = split_heads(self.w_q(x), self.num_heads)  # (batch, num_heads, seq, d_k)
        k = split_heads(self.w_k(x), self.num_kv_heads)  # (batch, num_kv_heads, seq, d_k)
        v = split_heads(self.w_v(x), self.num_kv_heads)  # (batch, num_kv_heads, seq, d_k)
        q = apply_rope(q, positions, self.rope_base, self.rope_layout)
        k = apply_rope(k, positions, self.rope_base, self.rope_layout)  # rotated once, then cached
        key_indices = indices  # (keys,): without a cache, the keys are these tokens
        if cache is not None:
            k, v = cache.update(k, v)  # (batch, num_kv_heads, keys, d_k): the cached positions, then these
            key_indices = cache.key_positions(x.device)  # (keys,): absolute, a rolling cache's included
        allowed = sliding_window_mask(indices, key_indices, self.window)[None, None]  # (1, 1, seq, keys)
        if mask is not None:
            allowed = allowed & mask  # (batch or 1, num_heads or 1, seq, keys)
        groups = self.num_heads // self.num_kv_heads
        if groups > 1:  # one key/value head per query head (multi-head attention) needs no repeat
            k, v = repeat_kv(k, groups), repeat_kv(v, groups)  # (batch, num_heads, keys, d_k)
        if need_weights:
            heads, weights = scaled_dot_product_attention(q, k, v, allowed)  # weights (batch, heads, seq, keys)
        else:
            heads, weights = fused_attention(q, k, v, allowed), None  # (batch, num_heads, seq, d_k)
        return self.w_o(merge_heads(heads)), weights  # (batch, seq, d_model)

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
                f"d_k={self.d_k}, rope_layout={self.rope_layout!r}, window={self.window}")
