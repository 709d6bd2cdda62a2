"""Scaled dot-product attention and multi-head attention (Vaswani et al., 2017, section 3.2).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                               (paper, eq. 1)
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
        head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

Conventions (the whole course uses them):

- batch first: activations ``(batch, seq, d_model)``, per-head tensors ``(batch, num_heads, seq, d_k)``,
  attention weights ``(batch, num_heads, seq_q, seq_k)``;
- one mask convention: a **boolean** mask, ``True`` = this key may be attended to (as in
  ``torch.nn.functional.scaled_dot_product_attention``), broadcastable to ``(..., seq_q, seq_k)``;
- a query row whose keys are **all** masked gets all-zero weights and a zero output (softmax over a row of
  ``-inf`` would be 0/0 = NaN; we define the result instead, and PyTorch's fused kernel does the same).

Two paths compute the same numbers: :func:`scaled_dot_product_attention` writes the score matrix out (the
readable path, and the only one that can return the weights), :func:`fused_attention` calls PyTorch's
fused kernel ``F.scaled_dot_product_attention`` (faster, and it never stores the ``seq_q x seq_k`` matrix).
:class:`MultiHeadAttention` uses the fused path unless the weights are asked for.

Example:
    >>> mha = MultiHeadAttention(d_model=16, num_heads=4)
    >>> x = torch.randn(2, 5, 16)
    >>> out, weights = mha(x, x, x, need_weights=True)
    >>> out.shape, weights.shape
    (torch.Size([2, 5, 16]), torch.Size([2, 4, 5, 5]))
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.models.kv_cache import KVCache
from course_lib.validation import validated_by

__all__ = [
    "scaled_dot_product_attention",
    "fused_attention",
    "split_heads",
    "merge_heads",
    "MultiHeadAttention",
]


# ---------------------------------------------------------------------------------------------------
# Input checks: bad input raises an error naming the argument, the shape expected and the shape given.
# ---------------------------------------------------------------------------------------------------

def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def _check_mask(mask: torch.Tensor | None, target: tuple[int, ...], who: str, target_name: str,
                batch: int | None = None) -> None:
    """Raise unless ``mask`` is None or a boolean tensor that broadcasts to exactly ``target``.

    The rule for 2-D masks: a 2-D mask is ``(seq_q, seq_k)``, never ``(batch, seq_k)``. When ``batch ==
    seq_q`` a (batch, seq_k) padding mask has that shape too and would be read the wrong way without an
    error, so then a 2-D mask is accepted only if it is causal (lower triangular, also with the offset of a
    key/value cache: query i sees keys 0..i + offset) or all True; any other raises and asks for the 4-D
    shape. (A padding batch whose lengths grow by exactly one per sentence looks causal and is read as
    causal: the one case this rule cannot tell apart.)
    """
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{who}: mask must be a boolean torch.Tensor (True = may attend) or None, "
                        f"got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{who}: mask must be a boolean tensor (True = may attend), got dtype {mask.dtype} with shape "
            f"{_shape(mask)}; expected a torch.bool tensor broadcastable to {target_name} {target}. "
            f"(A float mask of 0/-inf or a 1 = masked convention must be converted: e.g. mask = float_mask == 0.)")
    if not _broadcasts_to(tuple(mask.shape), target):
        raise ValueError(f"{who}: mask of shape {_shape(mask)} cannot broadcast to {target_name} {target}")
    if mask.dim() == 2 and batch is not None and batch == target[-2] > 1 and not _is_causal(mask):
        raise ValueError(
            f"{who}: a 2-D mask of shape {_shape(mask)} is ambiguous here because batch == seq_q == {batch}: "
            f"2-D masks are read as (seq_q, seq_k), but this one may be a (batch, seq_k) padding mask. Pass a "
            f"padding mask as (batch, 1, 1, seq_k) (masking.padding_mask returns it) or a per-query mask as "
            f"(1, 1, seq_q, seq_k).")


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to exactly ``target`` (each trailing size is 1 or the target's).

    Written out because ``torch.broadcast_shapes`` imports sympy on first use (over a second on a laptop),
    and a notebook's first check must answer at once.
    """
    if len(shape) > len(target):
        return False
    return all(size in (1, want) for size, want in zip(reversed(shape), reversed(target), strict=False))


def _is_causal(mask: torch.Tensor) -> bool:
    """Whether a 2-D boolean mask is all True or lower triangular with some offset (tril(ones, diagonal=d))."""
    if bool(mask.all()):
        return True
    offset = int(mask[0].sum()) - 1  # row 0 keeps keys 0..offset
    return torch.equal(mask, torch.tril(torch.ones_like(mask), diagonal=offset))


#: Signatures (shapes and dtypes of query, key, value and mask) that passed :func:`_check_attention_inputs`: a
#: model calls attention with the same few shapes again and again, and a signature seen before is checked by one
#: lookup instead of a dozen comparisons (measured: 1 us against 4-14 us, 3-9 % of a 64-token call).
_VALID_SIGNATURES: set[tuple] = set()
_MAX_SIGNATURES = 1024  # generation with a growing cache adds a signature per step: a bound, then a fresh start


def _signature(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None) -> tuple | None:
    """What the checks depend on, or None where they look further (a mask whose values decide: 2-D, batch ==
    seq_q) or the arguments are not all tensors."""
    try:
        masked = None if mask is None else (mask.shape, mask.dtype)
        if mask is not None and mask.dim() == 2 and query.dim() >= 3 and query.shape[0] == query.shape[-2] > 1:
            return None  # the ambiguous 2-D mask: its values decide
        return query.shape, key.shape, value.shape, query.dtype, key.dtype, value.dtype, masked
    except AttributeError:  # not tensors: the full checks name them
        return None


def _check_attention_inputs(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            mask: torch.Tensor | None, who: str = "scaled_dot_product_attention") -> None:
    """Check the shapes of query (..., seq_q, d_k), key (..., seq_k, d_k), value (..., seq_k, d_v), mask.

    Only Python ints and dtypes are compared (about a microsecond, no tensor operation), so the checks cost
    nothing beside the kernel even for short sequences; a mask adds its shape check (and, in the ambiguous
    2-D case only, a look at its values).
    """
    signature = _signature(query, key, value, mask)
    if signature is not None and signature in _VALID_SIGNATURES:
        return
    if not (isinstance(query, torch.Tensor) and isinstance(key, torch.Tensor) and isinstance(value, torch.Tensor)
            and query.dim() >= 2 and key.dim() >= 2 and value.dim() >= 2):
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{who}: {name} must be a torch.Tensor, got {type(t).__name__}")
            if t.dim() < 2:
                raise ValueError(f"{who}: {name} must have shape (..., seq, features), got shape {_shape(t)}")
    if not (query.dtype == key.dtype == value.dtype and query.dtype.is_floating_point):
        _check_same_dtype(who, query, key, value)  # raises, naming the three dtypes
    q_shape, k_shape, v_shape = query.shape, key.shape, value.shape
    if k_shape[-1] != q_shape[-1]:
        raise ValueError(f"{who}: query and key must have the same feature size d_k (last dimension): "
                         f"query has shape {_shape(query)}, key has shape {_shape(key)}")
    if k_shape[-2] != v_shape[-2]:
        raise ValueError(f"{who}: key and value must have the same length seq_k (dimension -2): "
                         f"key has shape {_shape(key)}, value has shape {_shape(value)}")
    if not (q_shape[:-2] == k_shape[:-2] == v_shape[:-2]):
        raise ValueError(f"{who}: query, key and value must have the same leading (batch, heads) dimensions: "
                         f"query has shape {_shape(query)}, key {_shape(key)}, value {_shape(value)}")
    if mask is not None:
        scores = (*q_shape[:-1], k_shape[-2])
        _check_mask(mask, scores, who, "the scores' shape (..., seq_q, seq_k) =",
                    batch=q_shape[0] if len(q_shape) >= 3 else None)
    if signature is not None:
        if len(_VALID_SIGNATURES) >= _MAX_SIGNATURES:
            _VALID_SIGNATURES.clear()
        _VALID_SIGNATURES.add(signature)


def _check_same_dtype(who: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      expected: torch.dtype | None = None) -> None:
    """Raise unless query, key and value are floating-point tensors of one dtype (``expected`` if given)."""
    wanted = expected or query.dtype
    if wanted.is_floating_point and query.dtype == key.dtype == value.dtype == wanted:
        return
    given = f"query {query.dtype}, key {key.dtype}, value {value.dtype}"
    whose = "the module's weights' dtype " if expected else ""
    raise TypeError(f"{who}: query, key and value must be floating-point tensors of the same dtype "
                    f"({whose}{wanted}); got {given}. Convert them, e.g. key = key.to(query.dtype)")


def _check_sdpa_arguments(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                          who: str = "scaled_dot_product_attention") -> None:
    """The checks of :func:`scaled_dot_product_attention` and :func:`fused_attention` (same arguments)."""
    _check_attention_inputs(query, key, value, mask, who)
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"{who}: dropout_p must be in [0, 1], got {dropout_p}")


# ---------------------------------------------------------------------------------------------------
# Scaled dot-product attention: the explicit path and the fused path
# ---------------------------------------------------------------------------------------------------

@validated_by(_check_sdpa_arguments)
def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V, with an optional boolean mask; returns ``(output, weights)``.

    Each query is compared with every key by a dot product; the scores are divided by sqrt(d_k) so that
    their variance does not grow with d_k (which would saturate the softmax and starve it of gradient);
    the softmax turns each query's scores into weights that sum to 1, and the output is the weighted sum
    of the values.

    Args:
        query: ``(..., seq_q, d_k)``.
        key: ``(..., seq_k, d_k)``.
        value: ``(..., seq_k, d_v)``; d_v may differ from d_k, seq_k from seq_q.
        mask: optional boolean tensor, ``True`` = this key may be attended to, broadcastable to
            ``(..., seq_q, seq_k)``: e.g. ``(seq_k,)``, ``(seq_q, seq_k)``, ``(batch, 1, 1, seq_k)``.
        dropout_p: probability of zeroing a weight (attention dropout; always applied when > 0, as in
            ``F.scaled_dot_product_attention``: pass 0.0 in evaluation).

    Returns:
        ``output`` of shape ``(..., seq_q, d_v)`` and ``weights`` of shape ``(..., seq_q, seq_k)``: the
        weights actually applied (after dropout, so ``output == weights @ value`` always). A query whose keys
        are all masked gets all-zero weights and a zero output.

    Example:
        >>> q, k, v = torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 4)
        >>> out, w = scaled_dot_product_attention(q, k, v, mask=torch.tensor([True, True, True, False, False]))
        >>> out.shape, w.shape, bool(w[..., 3:].eq(0).all())
        (torch.Size([2, 3, 4]), torch.Size([2, 3, 5]), True)
    """
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., seq_q, seq_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # exp(-inf) = 0: masked keys get no weight
    weights = torch.softmax(scores, dim=-1)  # (..., seq_q, seq_k), each row sums to 1
    if mask is not None:
        # A row of only -inf gives 0/0 = NaN: a query with no key to attend to gets zero weights instead.
        has_a_key = mask.any(dim=-1, keepdim=True)  # (..., seq_q or 1, 1)
        weights = weights.masked_fill(~has_a_key, 0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    output = weights @ value  # (..., seq_q, d_v)
    return output, weights


def _with_leading_ones(mask: torch.Tensor, ndim: int) -> torch.Tensor:
    """A view of ``mask`` with leading size-1 dimensions up to ``ndim``, which every fused kernel accepts.

    A mask that has them already is returned as it is (a reshape to the same shape still costs 2 us).
    """
    if mask.dim() == ndim:
        return mask
    return mask.reshape((1,) * (ndim - mask.dim()) + tuple(mask.shape))


def _all_finite(*tensors: torch.Tensor) -> bool:
    """True when no tensor holds a NaN or an inf: one sum each, read as a Python float.

    A sum is NaN or inf whenever one of its terms is, so a finite total proves every element finite (and
    inf + -inf of two totals is NaN, not finite). Half-precision tensors are summed in float32 so that a sum
    of ordinary values does not overflow. A total that overflows from large finite values is a false alarm:
    it only sends the input through the formula, which gives the same numbers. On a GPU, reading the total
    waits for the kernels queued before it.
    """
    total = 0.0
    for t in tensors:
        t = t.detach() if t.requires_grad else t  # no graph for the test (and no op where there is none)
        # sum(dtype=...) only where it changes something: on a float32 tensor it takes a slower path
        total += (t.sum(dtype=torch.float32) if t.element_size() < 4 else t.sum()).item()
    return math.isfinite(total)


# From this many keys on, PyTorch's CPU kernel gives NaN wherever the formula does, for every NaN or inf in the
# query, key or value (tests/models/test_attention.py checks it on both sides of the bound, with and without a mask).
_KERNEL_KEEPS_NAN_FROM_SEQ_K = 16


def _kernel_keeps_nan(key: torch.Tensor) -> bool:
    """Whether PyTorch's kernel is known to keep every NaN the formula gives: on the CPU, from 16 keys on.

    Below 16 keys it zeroes a NaN query's row (as for a fully masked one), which would hide the NaN; on other
    devices it is untested here. There :func:`fused_attention` tests finiteness; here it costs nothing.
    """
    return key.shape[-2] >= _KERNEL_KEEPS_NAN_FROM_SEQ_K and key.is_cpu


def fused_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """The same output as :func:`scaled_dot_product_attention`, computed by PyTorch's fused kernel.

    ``F.scaled_dot_product_attention`` never stores the ``(seq_q, seq_k)`` score matrix in memory (on CPU
    and CUDA it processes keys in blocks), so it is faster and its memory grows linearly, not
    quadratically, with the sequence length. It cannot return the weights. Same arguments, shapes and mask
    convention as :func:`scaled_dot_product_attention` (fully masked queries also give zeros); returns only
    the output ``(..., seq_q, d_v)``. NaN or inf in an input never gives a plausible number: the output is NaN
    wherever the formula's is. Below 16 keys PyTorch's kernel alone would zero a NaN query's row, so there a
    query or output that is not finite sends the input through the formula. From 16 keys on (on the CPU) the
    kernel's output is returned as it is, with no test on the hot path: it keeps every NaN of the formula,
    and in one case gives more: a NaN or inf in a *masked* key gives NaN where the formula, which drops that
    key (its score is replaced by -inf before it is used), gives numbers. Bad input is reported, never hidden.

    Example:
        >>> q, k, v = torch.randn(2, 4, 3, 8), torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8)
        >>> torch.allclose(fused_attention(q, k, v), scaled_dot_product_attention(q, k, v)[0], atol=1e-6)
        True
    """
    _check_attention_inputs(query, key, value, mask, "fused_attention")
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"fused_attention: dropout_p must be in [0, 1], got {dropout_p}")
    attn_mask = None if mask is None else _with_leading_ones(mask, query.dim())  # e.g. (seq_k,) -> (1, 1, 1, seq_k)
    output = F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p)
    if _kernel_keeps_nan(key) or _all_finite(query, output):
        return output
    # Below 16 keys (or off the CPU) the kernel may have zeroed a NaN query's row: a NaN must never be laundered
    # into a plausible number, so such input takes the formula.
    return scaled_dot_product_attention(query, key, value, mask, dropout_p)[0]


# ---------------------------------------------------------------------------------------------------
# Heads: split d_model into num_heads slices of d_k = d_model / num_heads, and merge them back
# ---------------------------------------------------------------------------------------------------

def _check_split_heads(x: torch.Tensor, num_heads: int) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or num_heads < 1 or x.shape[-1] % num_heads != 0:
        raise ValueError(f"split_heads: x must have shape (batch, seq, d_model) with d_model divisible by "
                         f"num_heads={num_heads}, got shape {tuple(getattr(x, 'shape', ()))}")


def _check_merge_heads(x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"merge_heads: x must have shape (batch, num_heads, seq, d_k), got shape "
                         f"{tuple(getattr(x, 'shape', ()))}")


@validated_by(_check_split_heads)
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Split the features into heads: ``(batch, seq, d_model) -> (batch, num_heads, seq, d_k)``.

    Head ``h`` receives features ``h * d_k`` to ``(h + 1) * d_k - 1`` of every position, where
    ``d_k = d_model // num_heads``. The head axis is moved before the sequence axis so that each head is
    an independent ``(seq, d_k)`` matrix for attention.

    Example:
        >>> split_heads(torch.arange(8.0).reshape(1, 1, 8), num_heads=2)[0, :, 0]
        tensor([[0., 1., 2., 3.],
                [4., 5., 6., 7.]])
    """
    batch, seq, d_model = x.shape
    d_k = d_model // num_heads
    x = x.view(batch, seq, num_heads, d_k)  # (batch, seq, num_heads, d_k): cut each feature vector in pieces
    return x.transpose(1, 2)  # (batch, num_heads, seq, d_k)


@validated_by(_check_merge_heads)
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Concatenate the heads again: ``(batch, num_heads, seq, d_k) -> (batch, seq, num_heads * d_k)``.

    The inverse of :func:`split_heads`: ``merge_heads(split_heads(x, h))`` equals ``x``.

    Example:
        >>> x = torch.randn(2, 5, 12)
        >>> torch.equal(merge_heads(split_heads(x, 3)), x)
        True
    """
    batch, num_heads, seq, d_k = x.shape
    x = x.transpose(1, 2).contiguous()  # (batch, seq, num_heads, d_k), laid out in memory in this order
    return x.view(batch, seq, num_heads * d_k)  # (batch, seq, d_model)


# ---------------------------------------------------------------------------------------------------
# Multi-head attention
# ---------------------------------------------------------------------------------------------------

def _check_mha_forward(self: MultiHeadAttention, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       mask: torch.Tensor | None = None, need_weights: bool = False, *,
                       cache: KVCache | None = None) -> None:
    """The checks of :meth:`MultiHeadAttention.forward` (same arguments)."""
    if cache is not None:
        if not isinstance(cache, KVCache):
            raise TypeError(f"MultiHeadAttention: cache must be a course_lib.models.kv_cache.KVCache or None, got "
                            f"{type(cache).__name__}")
        if isinstance(query, torch.Tensor) and isinstance(key, torch.Tensor) and key.shape[:2] != query.shape[:2]:
            raise ValueError(f"MultiHeadAttention: with a cache (self-attention over the positions fed so far), "
                             f"query and key must be the same new positions (batch, new, d_model), got query "
                             f"{_shape(query)} and key {_shape(key)}")
    past = cache.length if cache is not None else 0
    _check_mha_inputs(query, key, value, mask, self.d_in, self.num_heads, past,
                      "d_model" if self.d_in == self.d_model else "d_in")
    # Under autocast the inputs may be float16/bfloat16 while the weights stay float32: only their agreement
    # is required then.
    autocast = torch.is_autocast_enabled(query.device.type)
    _check_same_dtype("MultiHeadAttention", query, key, value, expected=None if autocast else self.w_q.weight.dtype)


def _check_mha_inputs(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                      d_in: int, num_heads: int, past: int = 0, width: str = "d_model") -> None:
    """Check query (batch, seq_q, d_in), key/value (batch, seq_k, d_in) and the mask's shape (over the
    ``past`` cached keys and the new ones); ``d_in`` is the inputs' width (the model's d_model unless the module
    was built with another ``d_in``), named ``width`` in the message."""
    who = "MultiHeadAttention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{who}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 3 or t.shape[-1] != d_in:
            raise ValueError(f"{who}: {name} must have shape (batch, seq, {width}={d_in}), got shape {_shape(t)}")
    if not (query.shape[0] == key.shape[0] == value.shape[0]):
        raise ValueError(f"{who}: query, key and value must have the same batch size: query has shape "
                         f"{_shape(query)}, key {_shape(key)}, value {_shape(value)}")
    if key.shape[1] != value.shape[1]:
        raise ValueError(f"{who}: key and value must have the same length seq_k: key has shape {_shape(key)}, "
                         f"value has shape {_shape(value)}")
    target = (query.shape[0], num_heads, query.shape[1], past + key.shape[1])
    _check_mask(mask, target, who, "(batch, num_heads, seq_q, seq_k) =", batch=query.shape[0])


class MultiHeadAttention(nn.Module):
    """Multi-head attention: ``num_heads`` attentions of size ``d_k = d_model / num_heads`` side by side.

    Each head projects queries, keys and values into its own ``d_k``-dimensional subspace, so different
    heads can score relevance differently; the heads' outputs are concatenated and mixed by ``w_o``. All
    heads together cost about as much as one head of size ``d_model``. The per-head projections
    ``W_i^Q`` are stored as one ``nn.Linear(d_model, d_model)`` (``w_q``) whose output is split into heads:
    head ``i`` uses rows ``i*d_k:(i+1)*d_k`` of ``w_q.weight``.

    Args:
        d_model: model width; must be divisible by ``num_heads``.
        num_heads: number of heads h.
        dropout: attention dropout on the weights (active in training mode only).
        bias: whether the four projections have biases.
        d_k: the key size per head (default ``d_model / num_heads``, the paper's). Another value changes
            only the queries and keys (the score q . k / sqrt(d_k) in a smaller or larger space): the values
            keep ``d_v = d_model / num_heads`` per head, so the output keeps width d_model (Table 3, row B).
        d_in: the width of the inputs query, key and value (default ``d_model``). Another value makes the
            three projections ``(d_in -> ...)`` while the heads and the output keep ``d_model``: the
            ``MultiHeadAttention(d_in, d_out, ...)`` of Raschka's book, whose ``d_out`` is ``d_model`` here.

    **Key/value cache** (generation, as Hugging Face's models do it): ``forward(x, x, x, cache=cache)`` with a
    :class:`course_lib.models.kv_cache.KVCache` projects only the new positions ``x`` (batch, new, d_model), appends
    their keys and values to the cache, and lets each new query attend to the stored keys at its position or
    before (:meth:`~course_lib.models.kv_cache.KVCache.causal_mask`): the same output as the whole sequence under a
    causal mask. A ``mask`` given with a cache is combined with that causal mask; it spans the cached keys
    and the new ones, ``(..., new, cache.length + new)``.

    Shapes (forward):
        query ``(batch, seq_q, d_in)``, key and value ``(batch, seq_k, d_in)`` (``d_in`` = ``d_model`` by default);
        mask boolean, ``True`` = may attend, broadcastable to ``(batch, num_heads, seq_q, seq_k)``, e.g.
        ``(seq_k,)``, ``(seq_q, seq_k)``, ``(batch, 1, 1, seq_k)``, ``(batch, 1, seq_q, seq_k)``;
        returns ``(output (batch, seq_q, d_model), weights (batch, num_heads, seq_q, seq_k) or None)``.

    Weights can be copied from and to PyTorch's ``nn.MultiheadAttention``: :meth:`load_from_torch` (in
    place; :meth:`from_torch` builds a matching module and calls it), :meth:`to_torch`; with the same weights
    and dropout off, both give the same numbers.

    Example:
        >>> mha = MultiHeadAttention(d_model=8, num_heads=2)
        >>> x, memory = torch.randn(3, 4, 8), torch.randn(3, 6, 8)
        >>> out, w = mha(x, memory, memory, need_weights=True)   # cross-attention
        >>> out.shape, w.shape
        (torch.Size([3, 4, 8]), torch.Size([3, 2, 4, 6]))
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 d_k: int | None = None, d_in: int | None = None) -> None:
        super().__init__()
        if num_heads < 1 or d_model % num_heads != 0:
            raise ValueError(f"MultiHeadAttention: d_model={d_model} must be divisible by num_heads={num_heads} "
                             f"(each head gets d_k = d_model / num_heads features)")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"MultiHeadAttention: dropout must be in [0, 1), got {dropout}")
        if d_k is not None and (isinstance(d_k, bool) or not isinstance(d_k, int) or d_k < 1):
            raise ValueError(f"MultiHeadAttention: d_k must be a positive int (the key size per head) or None, "
                             f"got {d_k!r}")
        if d_in is not None and (isinstance(d_in, bool) or not isinstance(d_in, int) or d_in < 1):
            raise ValueError(f"MultiHeadAttention: d_in must be a positive int (the inputs' width) or None (d_model), "
                             f"got {d_in!r}")
        self.d_model = d_model
        self.d_in = d_model if d_in is None else d_in
        self.num_heads = num_heads
        self.d_k = d_k if d_k is not None else d_model // num_heads
        self.dropout = dropout
        self.w_q = nn.Linear(self.d_in, num_heads * self.d_k, bias=bias)  # the h projections W_i^Q, side by side
        self.w_k = nn.Linear(self.d_in, num_heads * self.d_k, bias=bias)
        self.w_v = nn.Linear(self.d_in, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)  # W^O mixes the concatenated heads

    @validated_by(_check_mha_forward)
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
        *,
        cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``query`` to ``key``/``value``; see the class docstring for shapes and the ``cache``.

        Both paths (the fused kernel, and the formula when ``need_weights``) give the same output, NaN
        included: a NaN in the input is a NaN in the output on both, never a finite number.
        """
        q = split_heads(self.w_q(query), self.num_heads)  # (batch, heads, seq_q, d_k)
        k = split_heads(self.w_k(key), self.num_heads)  # (batch, heads, seq_k, d_k)
        v = split_heads(self.w_v(value), self.num_heads)  # (batch, heads, seq_k, d_v)
        if cache is not None:
            k, v = cache.update(k, v)  # (batch, heads, stored, d_k): the cached positions, then the new ones
            if q.shape[2] > 1 or mask is not None:  # one new query is the newest position: it sees every key
                causal = cache.causal_mask(q.shape[2], device=q.device)  # (seq_q, stored)
                mask = causal if mask is None else mask & causal
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            # weights: (batch, heads, seq_q, seq_k)
            heads, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p)
        else:
            heads, weights = fused_attention(q, k, v, mask, dropout_p), None  # same numbers, faster
        output = self.w_o(merge_heads(heads))  # (batch, seq_q, d_model)
        return output, weights

    def extra_repr(self) -> str:
        d_in = f", d_in={self.d_in}" if self.d_in != self.d_model else ""
        return f"d_model={self.d_model}, num_heads={self.num_heads}, d_k={self.d_k}, dropout={self.dropout}{d_in}"

    def _check_paper_key_size(self, who: str) -> None:
        """PyTorch's module has d_k = d_model / num_heads and queries of width d_model: raise before copying weights
        of another shape."""
        if self.d_in != self.d_model:
            raise ValueError(f"{who}: this module has d_in={self.d_in} != d_model={self.d_model}; "
                             f"nn.MultiheadAttention's queries have the model's width")
        if self.d_k * self.num_heads != self.d_model:
            raise ValueError(f"{who}: this module has d_k={self.d_k} (not d_model / num_heads = "
                             f"{self.d_model // self.num_heads}); nn.MultiheadAttention has no such option")

    # --- weights to and from PyTorch's nn.MultiheadAttention --------------------------------------------

    @torch.no_grad()
    def load_from_torch(self, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy ``mha``'s weights into this module (in place) and return it: the course's one way in.

        ``nn.MultiheadAttention`` stores W^Q, W^K, W^V stacked in one ``in_proj_weight`` of shape
        ``(3 * d_model, d_model)`` (rows ``0..d-1`` are W^Q, then W^K, then W^V) and W^O in ``out_proj``;
        this copies them into ``w_q``, ``w_k``, ``w_v``, ``w_o``. The same name as the layers' and the
        Transformer's ``load_from_torch``, which call this one for their attention blocks. Only the plain
        configuration is supported (no ``kdim``/``vdim``, ``add_bias_kv``, ``add_zero_attn``);
        ``batch_first`` does not matter for the weights. Raises ValueError when sizes, heads or biases differ.

        Example:
            >>> theirs = nn.MultiheadAttention(8, 2, batch_first=True)
            >>> ours = MultiHeadAttention(8, 2).load_from_torch(theirs)
            >>> x = torch.randn(1, 3, 8)
            >>> torch.allclose(ours(x, x, x)[0], theirs(x, x, x)[0], atol=1e-6)
            True
        """
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"load_from_torch: mha must be an nn.MultiheadAttention, got {type(mha).__name__}")
        self._check_paper_key_size("load_from_torch")
        if not mha._qkv_same_embed_dim or mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError("load_from_torch: only nn.MultiheadAttention without kdim/vdim, add_bias_kv and "
                             "add_zero_attn is supported")
        if (mha.embed_dim, mha.num_heads) != (self.d_model, self.num_heads):
            raise ValueError(f"load_from_torch: d_model and num_heads are ({self.d_model}, {self.num_heads}) "
                             f"here but ({mha.embed_dim}, {mha.num_heads}) in the PyTorch module")
        theirs_bias, ours_bias = mha.in_proj_bias is not None, self.w_q.bias is not None
        if theirs_bias != ours_bias:
            raise ValueError(f"load_from_torch: bias is {ours_bias} here but {theirs_bias} in the PyTorch module")
        w_q, w_k, w_v = mha.in_proj_weight.chunk(3, dim=0)  # each (d_model, d_model)
        self.w_q.weight.copy_(w_q)
        self.w_k.weight.copy_(w_k)
        self.w_v.weight.copy_(w_v)
        self.w_o.weight.copy_(mha.out_proj.weight)
        if theirs_bias:
            b_q, b_k, b_v = mha.in_proj_bias.chunk(3, dim=0)  # each (d_model,)
            self.w_q.bias.copy_(b_q)
            self.w_k.bias.copy_(b_k)
            self.w_v.bias.copy_(b_v)
            self.w_o.bias.copy_(mha.out_proj.bias)
        return self

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """A new :class:`MultiHeadAttention` shaped like ``mha`` (sizes, dropout, bias, device, dtype, train or
        eval mode), its weights copied by :meth:`load_from_torch`.

        Example:
            >>> torch_mha = nn.MultiheadAttention(8, 2, batch_first=True)
            >>> ours = MultiHeadAttention.from_torch(torch_mha)
        """
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"from_torch: mha must be an nn.MultiheadAttention, got {type(mha).__name__}")
        ours = cls(mha.embed_dim, mha.num_heads, dropout=mha.dropout, bias=mha.in_proj_bias is not None)
        ours.to(device=mha.in_proj_weight.device, dtype=mha.in_proj_weight.dtype)
        return ours.load_from_torch(mha).train(mha.training)

    def to_torch(self, batch_first: bool = True) -> nn.MultiheadAttention:
        """An ``nn.MultiheadAttention`` holding a copy of this module's weights (inverse of :meth:`load_from_torch`).

        Remember its mask conventions differ: ``attn_mask`` and ``key_padding_mask`` use ``True`` = may NOT
        attend, the opposite of the course's (pass ``~mask``).

        Example:
            >>> ours = MultiHeadAttention(8, 2)
            >>> theirs = ours.to_torch()
            >>> x = torch.randn(1, 3, 8)
            >>> torch.allclose(ours.eval()(x, x, x)[0], theirs.eval()(x, x, x)[0], atol=1e-6)
            True
        """
        self._check_paper_key_size("to_torch")
        bias = self.w_q.bias is not None
        mha = nn.MultiheadAttention(self.d_model, self.num_heads, dropout=self.dropout, bias=bias,
                                    batch_first=batch_first)
        mha.to(device=self.w_q.weight.device, dtype=self.w_q.weight.dtype)
        with torch.no_grad():
            mha.in_proj_weight.copy_(torch.cat([self.w_q.weight, self.w_k.weight, self.w_v.weight], dim=0))
            mha.out_proj.weight.copy_(self.w_o.weight)
            if bias:
                mha.in_proj_bias.copy_(torch.cat([self.w_q.bias, self.w_k.bias, self.w_v.bias], dim=0))
                mha.out_proj.bias.copy_(self.w_o.bias)
        mha.train(self.training)
        return mha
