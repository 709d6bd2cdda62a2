"""Attention masks: which keys each query may look at (notebook 04).

The course has **one** mask convention: a boolean tensor, ``True`` = this key may be attended to, the
convention of ``torch.nn.functional.scaled_dot_product_attention``. A mask broadcasts against the attention
scores, shape ``(batch, num_heads, seq_q, seq_k)``:

=====================  =======================  ==========================================================
builder                shape                    meaning
=====================  =======================  ==========================================================
:func:`padding_mask`   ``(batch, 1, 1, seq)``   key ``j`` is a real token (not padding); same for every
                                                head and every query
:func:`causal_mask`    ``(seq, seq)``           query ``i`` may see key ``j`` only if ``j <= i``
:func:`decoder_mask`   ``(batch, 1, seq, seq)`` both at once, for a decoder's self-attention
=====================  =======================  ==========================================================

Two other conventions are common, and confusing them is the most frequent bug in this field. The
converters below translate between them (each pair round-trips):

* the TensorFlow tutorial's: a float mask with ``1.0`` = masked, used as ``scores += mask * -1e9``
  (:func:`to_tf_mask`, :func:`from_tf_mask`);
* ``nn.MultiheadAttention``'s ``key_padding_mask``: boolean ``(batch, seq_k)`` with ``True`` = *ignore*
  (:func:`to_key_padding_mask`, :func:`from_key_padding_mask`); its boolean ``attn_mask`` is inverted too;
* an additive float mask (``0`` = attend, ``-inf`` = masked), the float form that both
  ``nn.MultiheadAttention`` and ``F.scaled_dot_product_attention`` accept (:func:`to_additive_mask`,
  :func:`from_additive_mask`).

Example:
    >>> tokens = torch.tensor([[5, 6, 0]])            # one sentence of two tokens, padded with id 0
    >>> padding_mask(tokens, pad_id=0)[0, 0, 0]
    tensor([ True,  True, False])
    >>> causal_mask(3).int()
    tensor([[1, 0, 0],
            [1, 1, 0],
            [1, 1, 1]], dtype=torch.int32)
"""

from __future__ import annotations

import torch

from course_lib.validation import check_positive_ints

__all__ = [
    "padding_mask",
    "causal_mask",
    "decoder_mask",
    "to_tf_mask",
    "from_tf_mask",
    "to_key_padding_mask",
    "from_key_padding_mask",
    "to_additive_mask",
    "from_additive_mask",
    "sliding_window_mask",
]


def _require_tokens(tokens: object, fn: str, argument: str) -> None:
    """Raise unless ``tokens`` is an integer tensor of shape (batch, seq)."""
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{fn}: {argument} must be a torch.Tensor of token ids, got {type(tokens).__name__}")
    if tokens.dim() != 2:
        raise ValueError(f"{fn}: {argument} must have shape (batch, seq), got shape {tuple(tokens.shape)} "
                         f"({tokens.dim()} dimensions); add a batch axis with {argument}.unsqueeze(0)")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise TypeError(f"{fn}: {argument} must hold integer token ids (torch.long), got dtype {tokens.dtype}")


def _require_bool(mask: object, fn: str, argument: str = "mask") -> None:
    """Raise unless ``mask`` is a boolean tensor (the course's convention)."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{fn}: {argument} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"{fn}: {argument} must be a boolean tensor (True = may attend), got dtype {mask.dtype} "
                        f"with shape {tuple(mask.shape)}; a 0/1 float mask is ambiguous (which value means "
                        f"'masked'?): convert it explicitly, e.g. with from_tf_mask")


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """The padding mask of a batch of token ids: ``True`` at real tokens, ``False`` at padding.

    Why: sentences of different lengths are padded to one length to form a batch. The padding positions
    carry no meaning, so no query may put attention weight on them as *keys*.

    Shapes: ``tokens`` (batch, seq) of integer ids -> boolean (batch, 1, 1, seq). The two singleton axes
    let it broadcast against attention scores of shape (batch, num_heads, seq_q, seq_k): the same keys are
    hidden for every head and every query.

    Example:
        >>> padding_mask(torch.tensor([[7, 8, 0, 0], [9, 0, 0, 0]]), pad_id=0).shape
        torch.Size([2, 1, 1, 4])
    """
    if tokens.dim() != 2 or tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise ValueError(f"padding_mask: tokens must be integer ids of shape (batch, seq), got shape "
                         f"{tuple(tokens.shape)} and dtype {tokens.dtype}")
    is_real = tokens != pad_id  # (batch, seq_k)
    return is_real[:, None, None, :]  # (batch, 1, 1, seq_k)


def causal_mask(seq_len: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The look-ahead (causal) mask: query ``i`` may attend to key ``j`` only when ``j <= i``.

    Why: a decoder predicts token ``i + 1`` from tokens ``0..i``. In training all positions are computed at
    once, so without this mask position ``i`` could simply read the answer at position ``i + 1``.

    Shapes: boolean (seq_len, seq_len), ``True`` on and below the diagonal; it broadcasts against scores
    of shape (batch, num_heads, seq_len, seq_len).

    Example:
        >>> causal_mask(3)
        tensor([[ True, False, False],
                [ True,  True, False],
                [ True,  True,  True]])
    """
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"causal_mask: seq_len must be a positive int, got {seq_len!r}")
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device)  # (seq_q, seq_k)
    return torch.tril(ones)  # keep j <= i: the diagonal and everything below it


def decoder_mask(tgt_tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """The mask of a decoder's self-attention: causal AND the key is not padding.

    Shapes: ``tgt_tokens`` (batch, seq) -> boolean (batch, 1, seq, seq).

    Example:
        >>> decoder_mask(torch.tensor([[4, 5, 0]]), pad_id=0)[0, 0].int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 1, 0]], dtype=torch.int32)
    """
    _require_tokens(tgt_tokens, "decoder_mask", "tgt_tokens")
    keys = padding_mask(tgt_tokens, pad_id)  # (batch, 1, 1, seq)
    look_ahead = causal_mask(tgt_tokens.shape[1], device=tgt_tokens.device)  # (seq, seq)
    return keys & look_ahead  # broadcasts to (batch, 1, seq, seq)


# ---------------------------------------------------------------------------------------------------
# Converting between the conventions a learner will meet
# ---------------------------------------------------------------------------------------------------

def to_tf_mask(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Convert a course mask (bool, True = attend) to the TensorFlow tutorial's (float, 1.0 = masked).

    The TensorFlow tutorial adds ``mask * -1e9`` to the scores, so its mask is 1 where attention is
    *forbidden*: the opposite truth value of the course's, in a float dtype. Same shape as ``mask``.

    Example:
        >>> to_tf_mask(torch.tensor([True, False]))
        tensor([0., 1.])
    """
    _require_bool(mask, "to_tf_mask")
    return (~mask).to(dtype)


def from_tf_mask(tf_mask: torch.Tensor) -> torch.Tensor:
    """Convert a TensorFlow-tutorial mask (1 = masked, 0 = attend; any numeric dtype) to the course's.

    Shapes: any shape, e.g. ``(batch, 1, 1, seq_k)`` or ``(seq_q, seq_k)``; the result has the same shape,
    dtype ``torch.bool``.

    Raises ``ValueError`` if the mask holds values other than 0 and 1 (it would then not be a mask).

    Example:
        >>> from_tf_mask(torch.tensor([0.0, 1.0]))
        tensor([ True, False])
    """
    if not isinstance(tf_mask, torch.Tensor):
        raise TypeError(f"from_tf_mask: tf_mask must be a torch.Tensor, got {type(tf_mask).__name__}")
    if tf_mask.dtype == torch.bool:
        raise TypeError("from_tf_mask: tf_mask is boolean already; the TensorFlow tutorial's mask is a 0/1 "
                        "float (1 = masked). If yours is True = ignore, use ~tf_mask; if True = attend, it "
                        "is the course's convention already")
    bad = (tf_mask != 0) & (tf_mask != 1)
    if bad.any():
        raise ValueError(f"from_tf_mask: tf_mask must hold only 0 and 1, got {tf_mask[bad].flatten()[0].item()} "
                         f"in a tensor of shape {tuple(tf_mask.shape)}")
    return tf_mask == 0


def to_key_padding_mask(mask: torch.Tensor) -> torch.Tensor:
    """Convert a course padding mask to ``nn.MultiheadAttention``'s ``key_padding_mask`` (True = ignore).

    Shapes: ``mask`` (batch, 1, 1, seq_k) as :func:`padding_mask` returns it, or (batch, seq_k) ->
    boolean (batch, seq_k), ``True`` at the keys to ignore.

    Example:
        >>> to_key_padding_mask(padding_mask(torch.tensor([[3, 0]]), pad_id=0))
        tensor([[False,  True]])
    """
    _require_bool(mask, "to_key_padding_mask")
    if mask.dim() == 4 and mask.shape[1] == 1 and mask.shape[2] == 1:
        mask = mask[:, 0, 0, :]  # (batch, seq_k)
    elif mask.dim() != 2:
        raise ValueError(f"to_key_padding_mask: mask must have shape (batch, 1, 1, seq_k) or (batch, seq_k), "
                         f"got {tuple(mask.shape)}; a mask that differs per query or per head is not a "
                         f"key padding mask (pass it as attn_mask instead)")
    return ~mask


def from_key_padding_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """Convert ``nn.MultiheadAttention``'s ``key_padding_mask`` (True = ignore) to a course padding mask.

    Shapes: (batch, seq_k) -> boolean (batch, 1, 1, seq_k), ``True`` at the keys that may be attended to.

    Example:
        >>> from_key_padding_mask(torch.tensor([[False, True]]))
        tensor([[[[ True, False]]]])
    """
    _require_bool(key_padding_mask, "from_key_padding_mask", "key_padding_mask")
    if key_padding_mask.dim() != 2:
        raise ValueError(f"from_key_padding_mask: key_padding_mask must have shape (batch, seq_k), got "
                         f"{tuple(key_padding_mask.shape)}")
    return (~key_padding_mask)[:, None, None, :]  # (batch, 1, 1, seq_k)


def to_additive_mask(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Convert a course mask to an additive float mask: 0.0 where attending, -inf where masked.

    This is the float form of ``attn_mask`` that ``nn.MultiheadAttention`` and
    ``F.scaled_dot_product_attention`` add to the scores. Same shape as ``mask``. (Beware: a query row
    whose keys are all -inf gives NaN in a plain softmax; the course's attention returns zeros there.)

    Example:
        >>> to_additive_mask(torch.tensor([True, False]))
        tensor([0., -inf])
    """
    _require_bool(mask, "to_additive_mask")
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return zeros.masked_fill(~mask, float("-inf"))


def from_additive_mask(additive_mask: torch.Tensor, threshold: float = -1e4) -> torch.Tensor:
    """Convert an additive float mask (0 = attend; -inf or a large negative number = masked) to the course's.

    Entries ``<= threshold`` (``-inf``, ``-1e9``, ``torch.finfo(dtype).min``...) count as masked, entries
    equal to 0 as allowed. Any other value is a *bias* (ALiBi, relative positions), not a mask: that
    raises ``ValueError`` rather than being silently rounded.

    Shapes: any shape, e.g. ``(seq_q, seq_k)`` or ``(batch, heads, seq_q, seq_k)``; the result has the same
    shape, dtype ``torch.bool``.

    Example:
        >>> from_additive_mask(torch.tensor([0.0, float("-inf"), -1e9]))
        tensor([ True, False, False])
    """
    if not isinstance(additive_mask, torch.Tensor) or not additive_mask.dtype.is_floating_point:
        what = additive_mask.dtype if isinstance(additive_mask, torch.Tensor) else type(additive_mask).__name__
        raise TypeError(f"from_additive_mask: additive_mask must be a floating-point tensor, got {what}")
    allowed = additive_mask == 0
    masked = additive_mask <= threshold
    neither = ~(allowed | masked)
    if neither.any():
        raise ValueError(f"from_additive_mask: additive_mask must hold 0 (attend) or values <= {threshold} "
                         f"(masked); got {additive_mask[neither].flatten()[0].item()} in a tensor of shape "
                         f"{tuple(additive_mask.shape)} (a bias, not a mask)")
    return allowed


def sliding_window_mask(query_positions: torch.Tensor, key_positions: torch.Tensor,
                        window: int | None = None) -> torch.Tensor:
    """Which keys each query may attend to: key position ``k <= q``, and ``k > q - window`` when windowed.

    Without a window this is the causal mask (:func:`causal_mask`), written with absolute positions (so it also
    holds for the queries of a later step against the cached keys); with one, each query sees itself and the
    ``window - 1`` positions before it (Mistral's rule).

    Shapes: ``query_positions`` ``(seq_q,)``, ``key_positions`` ``(seq_k,)`` -> boolean ``(seq_q, seq_k)``,
    ``True`` = may attend.

    Example:
        >>> sliding_window_mask(torch.arange(4), torch.arange(4), window=2).int()
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0],
                [0, 1, 1, 0],
                [0, 0, 1, 1]], dtype=torch.int32)
    """
    for name, p in (("query_positions", query_positions), ("key_positions", key_positions)):
        if not isinstance(p, torch.Tensor) or p.dim() != 1 or p.is_floating_point():
            raise ValueError(f"sliding_window_mask: {name} must be an integer tensor of shape (seq,), got "
                             f"{tuple(getattr(p, 'shape', ())) or type(p).__name__}")
    q, k = query_positions[:, None], key_positions[None, :]  # (seq_q, 1) and (1, seq_k)
    allowed = k <= q  # (seq_q, seq_k): causal
    if window is not None:
        check_positive_ints("sliding_window_mask", window=window)
        allowed = allowed & (k > q - window)  # and no further back than window - 1 positions
    return allowed
