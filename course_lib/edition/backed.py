"""The class edition's stand-ins for graded components: PyTorch's own modules behind the course's signatures.

In the class edition a graded exercise's reference is gone; where a later lesson calls it, the edition puts
one of these in its place (same name, same signature, same public behaviour), each computing through the
PyTorch function or module named in :data:`BACKED` (byte-level BPE: Hugging Face ``tokenizers``, which notebook
10 compares with). The tests already prove the course's references equal to those modules, so a lesson that falls
back on them shows the same numbers. The grader refuses a route to PyTorch's own softmax and attention kernels as
an answer, so these cannot be handed in either.

Each stand-in is written to be copied on its own into the edition's module in place of the reference (the
builder takes its source), so it imports what it needs inside its body. A method (``"Class.forward"``)
replaces only that method; the class's constructor and other methods stay.

Example:
    >>> import torch
    >>> torch.allclose(stable_softmax(torch.tensor([1.0, 2.0])), torch.softmax(torch.tensor([1.0, 2.0]), -1))
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Backing", "BACKED", "stable_softmax", "scaled_dot_product_attention", "multi_head_attention_forward",
           "causal_mask", "sliding_window_mask", "from_key_padding_mask", "label_smoothed_cross_entropy",
           "feed_forward_forward", "encoder_layer_forward", "decoder_layer_forward", "mean_pool",
           "sinusoidal_frequencies", "online_softmax_attention", "train_bpe",
           "byte_bpe_merge_piece"]


def stable_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Class edition: PyTorch's own ``torch.softmax`` (notebook 00's exercise writes it by hand).

    Shapes: ``x`` any shape -> the same shape, each slice along ``dim`` summing to 1.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"stable_softmax: x must be a torch.Tensor, got {type(x).__name__}")
    return torch.softmax(x, dim=dim)  # PyTorch's kernel (the class edition's stand-in)


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 mask: torch.Tensor | None = None,
                                 dropout_p: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Class edition: ``(output, weights)`` from PyTorch's fused ``F.scaled_dot_product_attention``.

    The weights come from the same kernel applied to an identity matrix of values (row ``i`` of ``weights @
    I`` is row ``i`` of the weights), so both results are PyTorch's. A query whose keys are all masked gets
    zero weights and a zero output, as the course's convention says. Dropout, when asked for, is applied to
    the weights once and the output is ``weights @ value``.

    Shapes: ``query`` (..., seq_q, d_k), ``key`` (..., seq_k, d_k), ``value`` (..., seq_k, d_v), ``mask``
    boolean broadcastable to (..., seq_q, seq_k), True = may attend -> (..., seq_q, d_v), (..., seq_q, seq_k).
    """
    import torch.nn.functional as F

    if mask is not None and (not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool):
        raise TypeError("scaled_dot_product_attention: mask must be a boolean tensor (True = may attend) or None")
    seq_k = key.shape[-2]
    identity = torch.eye(seq_k, dtype=query.dtype, device=query.device)  # (seq_k, seq_k)
    identity = identity.expand(*key.shape[:-2], seq_k, seq_k)  # (..., seq_k, seq_k): one per batch entry
    attn_mask = None
    if mask is not None:
        attn_mask = mask.reshape((1,) * max(0, query.dim() - mask.dim()) + tuple(mask.shape))
    weights = F.scaled_dot_product_attention(query, key, identity, attn_mask=attn_mask)  # (..., seq_q, seq_k)
    if mask is not None:
        has_a_key = attn_mask.any(dim=-1, keepdim=True)  # (..., seq_q or 1, 1)
        weights = weights.masked_fill(~has_a_key, 0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ value, weights  # (..., seq_q, d_v)


def multi_head_attention_forward(self: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 mask: torch.Tensor | None = None, need_weights: bool = False, *,
                                 cache: Any = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Class edition: ``MultiHeadAttention.forward`` through PyTorch's ``F.multi_head_attention_forward``.

    The module keeps its own weights (``w_q``, ``w_k``, ``w_v``, ``w_o``: state dicts load as before); they are
    handed to PyTorch's multi-head attention (the function ``nn.MultiheadAttention`` runs) as separate
    projection weights. Masks: the course's boolean ``True = may attend``, broadcastable to (batch, heads,
    seq_q, seq_k), becomes PyTorch's ``attn_mask`` (``True = may not``) of shape (batch * heads, seq_q, seq_k).
    A query whose keys are all masked gets a zero output and zero weights.

    **Key/value cache** (``cache``, a :class:`course_lib.models.kv_cache.KVCache`), as the course's module
    has it: the new positions' keys and values (``w_k``/``w_v`` applied, split into heads) are appended to the
    cache, and PyTorch's function attends over everything stored, handed to it as ``static_k``/``static_v``
    (its argument for keys and values already projected); each new query sees the stored keys at its
    position or before (``cache.causal_mask``, combined with ``mask``, which then spans the stored keys).

    Shapes: ``query`` (batch, seq_q, d_model), ``key``/``value`` (batch, seq_k, d_model) -> output (batch,
    seq_q, d_model) and, with ``need_weights``, weights (batch, heads, seq_q, seq_k), else None. With a cache,
    ``seq_k`` is the number of positions stored after this call's are appended.
    """
    import torch.nn.functional as F

    from course_lib.edition.torch_layers import blocked_mask

    batch, seq_q, seq_k = query.shape[0], query.shape[1], key.shape[1]
    heads = self.num_heads
    stored_k = stored_v = None  # (batch * heads, stored, d_model / heads): the cache's keys and values
    if cache is not None:
        per_head = self.d_model // heads

        def heads_of(x: torch.Tensor, linear: Any) -> torch.Tensor:  # (batch, new, d_model) -> (batch, heads, new, d)
            return F.linear(x, linear.weight, linear.bias).reshape(batch, -1, heads, per_head).transpose(1, 2)

        all_k, all_v = cache.update(heads_of(key, self.w_k), heads_of(value, self.w_v))  # (batch, heads, stored, d)
        seq_k = all_k.shape[2]
        stored_k, stored_v = (t.reshape(batch * heads, seq_k, per_head) for t in (all_k, all_v))
        if seq_q > 1 or mask is not None:  # one new query is the newest position: it sees every stored key
            causal = cache.causal_mask(seq_q, device=query.device)  # (seq_q, stored)
            mask = causal if mask is None else causal & mask
        if mask is not None and key.shape[1] != seq_k:  # PyTorch sizes attn_mask by key: give it the stored length
            key = value = key.new_zeros(()).expand(batch, seq_k, self.d_model)  # never read: static_k/v are
    blocked = blocked_mask(mask, batch, heads, seq_q, seq_k)  # (batch * heads, seq_q, seq_k), True = may NOT
    empty = None if blocked is None else blocked.all(dim=-1).reshape(batch, heads, seq_q, 1)  # no key at all
    bias = None if self.w_q.bias is None else torch.cat([self.w_q.bias, self.w_k.bias, self.w_v.bias])

    def torch_mha(attn_mask: torch.Tensor | None, weights: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        return F.multi_head_attention_forward(
            query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1),  # (seq, batch, d_model)
            self.d_model, heads, None, bias, None, None, False, self.dropout if self.training else 0.0,
            self.w_o.weight, self.w_o.bias, training=self.training, need_weights=weights, attn_mask=attn_mask,
            use_separate_proj_weight=True, q_proj_weight=self.w_q.weight, k_proj_weight=self.w_k.weight,
            v_proj_weight=self.w_v.weight, static_k=stored_k, static_v=stored_v, average_attn_weights=False)

    output, _ = torch_mha(blocked, False)  # PyTorch's fused path: a query with no key gets a zero head
    output = output.transpose(0, 1)  # (batch, seq_q, d_model)
    weights = None
    if need_weights:
        opened = None if blocked is None else blocked & ~empty.reshape(batch * heads, seq_q, 1)
        _, weights = torch_mha(opened, True)  # (batch, heads, seq_q, seq_k)
        if empty is not None:
            weights = weights.masked_fill(empty, 0.0)
    return output, weights


def sinusoidal_frequencies(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """Class edition: notebook 03's frequencies ``omega_i = base^(-2i/d_model)`` as PyTorch's geometric sequence
    ``torch.logspace`` (exponents 0, -2/d_model, ..., -(d_model-2)/d_model), in float64, returned in float32.

    Why this route: notebook 14's rotary embeddings need the frequencies for every head size ``d_k`` and every
    ``base`` (its exercise builds on ``rope_angles``), so stored outputs of a few calls would not do; and the
    frequencies give notebook 03's table away. The grader of ``sinusoidal_table`` refuses ``torch.logspace``
    (its ``forbidden_ops``, whatever name reaches it), so this function, pasted into notebook 03's cell, earns
    nothing there; the grader's own sandbox copy withholds it outright.

    Shapes: -> float32 (d_model // 2,).
    """
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 2 or d_model % 2:
        raise ValueError(f"sinusoidal_frequencies: d_model must be an even int >= 2, got {d_model!r}")
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 1:
        raise ValueError(f"sinusoidal_frequencies: base must be a number > 1, got {base!r}")
    end = -(d_model - 2) / d_model  # the last pair's exponent
    return torch.logspace(0.0, end, d_model // 2, base=float(base), dtype=torch.float64).float()  # PyTorch's kernel


def online_softmax_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             mask: torch.Tensor | None = None, causal: bool = False,
                             tile_size: int = 128) -> torch.Tensor:
    """Class edition: PyTorch's fused ``F.scaled_dot_product_attention`` (which tiles its keys with an online
    softmax inside the kernel; ``tile_size`` is its choice, not this argument's).

    The course's conventions kept: a boolean ``mask``, True = may attend; with ``causal`` query ``i`` sees keys
    ``j <= i + seq_k - seq_q`` (PyTorch's own lower-right causal bias, ``torch.nn.attention.bias.causal_lower_right``);
    a query whose keys are all masked gets a zero output. The grader of notebook 14's ``online_softmax`` refuses
    PyTorch's attention kernels, so this function computes no answer there. Notebook 14's memory measure of
    "tiles + online softmax" then shows PyTorch's kernel, whose workspace it cannot see.

    Shapes: ``query`` (..., seq_q, d_k), ``key`` (..., seq_k, d_k), ``value`` (..., seq_k, d_v), ``mask``
    broadcastable to (..., seq_q, seq_k) -> (..., seq_q, d_v).
    """
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    allowed = mask
    if causal:  # PyTorch's lower-right causal bias, as a boolean (seq_q, seq_k)
        lower_right = causal_lower_right(query.shape[-2], key.shape[-2])._materialize(query.device)
        allowed = lower_right if allowed is None else allowed & lower_right
    if allowed is not None:
        allowed = allowed.reshape((1,) * max(0, query.dim() - allowed.dim()) + tuple(allowed.shape))
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=allowed)  # PyTorch's kernel
    if allowed is not None:
        output = output.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)  # no key at all: a zero output
    return output  # (..., seq_q, d_v)


def causal_mask(seq_len: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Class edition: PyTorch's ``nn.Transformer.generate_square_subsequent_mask`` as a boolean mask.

    PyTorch's mask is additive (0 where a query may attend, -inf elsewhere); ``== 0`` turns it into the
    course's convention (True = may attend). Shapes: -> boolean (seq_len, seq_len).
    """
    from torch import nn

    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"causal_mask: seq_len must be a positive int, got {seq_len!r}")
    additive = nn.Transformer.generate_square_subsequent_mask(seq_len, device=device)  # (seq, seq): 0 / -inf
    return additive == 0


def sliding_window_mask(query_positions: torch.Tensor, key_positions: torch.Tensor,
                        window: int | None = None) -> torch.Tensor:
    """Class edition: the causal rule over absolute positions, read from PyTorch's
    ``nn.Transformer.generate_square_subsequent_mask`` (0 where a query may attend, -inf elsewhere).

    Shapes: ``query_positions`` ``(seq_q,)``, ``key_positions`` ``(seq_k,)`` of non-negative integers -> boolean
    ``(seq_q, seq_k)``, ``True`` = may attend; with ``window``, no key further back than ``window - 1``.
    """
    from torch import nn

    for name, p in (("query_positions", query_positions), ("key_positions", key_positions)):
        if not isinstance(p, torch.Tensor) or p.dim() != 1 or p.is_floating_point():
            raise ValueError(f"sliding_window_mask: {name} must be an integer tensor of shape (seq,), got "
                             f"{tuple(getattr(p, 'shape', ())) or type(p).__name__}")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"sliding_window_mask: window must be a positive int or None, got {window!r}")
    size = int(torch.cat([query_positions, key_positions]).max()) + 1 if query_positions.numel() + \
        key_positions.numel() else 1
    square = nn.Transformer.generate_square_subsequent_mask(size, device=query_positions.device) == 0  # (size, size)
    allowed = square[query_positions][:, key_positions]  # (seq_q, seq_k): key position <= query position
    if window is not None:
        allowed = allowed & (key_positions[None, :] > query_positions[:, None] - window)
    return allowed


def from_key_padding_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """Class edition: PyTorch's own conversion of ``nn.MultiheadAttention``'s ``key_padding_mask`` (True = ignore)
    into an additive mask (``F._canonical_mask``: -inf where ignored), read back as the course's convention.

    Shapes: (batch, seq_k) boolean -> boolean (batch, 1, 1, seq_k), ``True`` at the keys that may be attended to.
    """
    import torch.nn.functional as F

    if not isinstance(key_padding_mask, torch.Tensor) or key_padding_mask.dtype != torch.bool \
            or key_padding_mask.dim() != 2:
        raise ValueError(f"from_key_padding_mask: key_padding_mask must be a boolean tensor of shape (batch, seq_k), "
                         f"got {getattr(key_padding_mask, 'dtype', type(key_padding_mask).__name__)} "
                         f"{tuple(getattr(key_padding_mask, 'shape', ()))}")
    additive = F._canonical_mask(mask=key_padding_mask, mask_name="key_padding_mask", other_type=None,
                                 other_name="", target_type=torch.float32)  # (batch, seq_k): 0 / -inf
    return (additive == 0)[:, None, None, :]  # (batch, 1, 1, seq_k)


def label_smoothed_cross_entropy(logits: torch.Tensor, target: torch.Tensor, smoothing: float = 0.1,
                                 ignore_index: int = 0) -> torch.Tensor:
    """Class edition: PyTorch's ``F.cross_entropy(label_smoothing=...)`` with the course's signature.

    One documented difference from PyTorch kept as the course has it: a batch that is all padding gives 0
    (with a graph), not NaN. Shapes: ``logits`` (..., C), ``target`` (...) -> a scalar.
    """
    import torch.nn.functional as F

    flat_logits, flat_target = logits.reshape(-1, logits.shape[-1]), target.reshape(-1)  # (N, C), (N,)
    if not bool((flat_target != ignore_index).any()):
        return logits.sum() * 0.0
    return F.cross_entropy(flat_logits, flat_target, ignore_index=ignore_index, label_smoothing=smoothing)


def feed_forward_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """Class edition: ``FeedForward.forward`` through the feed-forward block of PyTorch's own
    ``nn.TransformerEncoderLayer`` (its ``_ff_block``: ``linear2(dropout(activation(linear1(x))))``), run on
    this module's ``linear1``, ``activation``, ``dropout`` and ``linear2``; the layer's residual dropout
    (``dropout2``) belongs to the layer that wraps this block, so it is left out here.

    Shapes: ``x`` (..., d_model) -> (..., d_model).
    """
    from types import SimpleNamespace

    from torch import nn

    block = SimpleNamespace(linear1=self.linear1, activation=self.activation, dropout=self.dropout,
                            linear2=self.linear2, dropout2=nn.Identity())
    return nn.TransformerEncoderLayer._ff_block(block, x)  # (..., d_model)


def encoder_layer_forward(self: Any, x: torch.Tensor, mask: torch.Tensor | None = None,
                          cache: Any = None) -> torch.Tensor:
    """Class edition: ``EncoderLayer.forward`` through PyTorch's own ``nn.TransformerEncoderLayer``, built with
    this layer's sizes, norm placement, activation, LayerNorm epsilon and dropout and run on its weights
    (:func:`course_lib.edition.torch_layers.run_torch_layer`; gradients reach this layer's parameters).

    With a key/value ``cache`` (generation: ``x`` holds the new positions only), PyTorch's layer runs with the
    course's attention module in its ``self_attn`` slot (:class:`~course_lib.edition.torch_layers.CourseAttention`),
    which appends to the cache and attends over everything stored, as the course's layer does.

    Shapes: ``x`` (batch, seq, d_model), ``mask`` boolean broadcastable to (batch, num_heads, seq, seq),
    True = may attend (with a cache: to (batch, num_heads, seq, stored)) -> (batch, seq, d_model).
    """
    from torch import nn

    from course_lib.edition.torch_layers import CourseAttention, blocked_mask, run_torch_layer

    if cache is not None:
        return run_torch_layer(nn.TransformerEncoderLayer, self, (x,), {}, {}, ("norm1", "norm2"),
                               CourseAttention(self.self_attn, mask, cache))
    src_mask = blocked_mask(mask, x.shape[0], self.self_attn.num_heads, x.shape[1], x.shape[1])
    return run_torch_layer(nn.TransformerEncoderLayer, self, (x,), {"src_mask": src_mask},
                           {"self_attn": "self_attn"}, ("norm1", "norm2"))


def decoder_layer_forward(self: Any, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                          cross_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Class edition: ``DecoderLayer.forward`` through PyTorch's own ``nn.TransformerDecoderLayer`` on this
    layer's weights (PyTorch calls the cross-attention ``multihead_attn``, the course ``cross_attn``).

    Shapes: ``x`` (batch, tgt_len, d_model), ``memory`` (batch, src_len, d_model); ``self_mask`` boolean
    broadcastable to (batch, num_heads, tgt_len, tgt_len), ``cross_mask`` to (batch, num_heads, tgt_len,
    src_len), True = may attend -> (batch, tgt_len, d_model).
    """
    from torch import nn

    from course_lib.edition.torch_layers import blocked_mask, run_torch_layer

    batch, tgt_len, src_len, heads = x.shape[0], x.shape[1], memory.shape[1], self.self_attn.num_heads
    masks = {"tgt_mask": blocked_mask(self_mask, batch, heads, tgt_len, tgt_len),
             "memory_mask": blocked_mask(cross_mask, batch, heads, tgt_len, src_len)}
    return run_torch_layer(nn.TransformerDecoderLayer, self, (x, memory), masks,
                           {"self_attn": "self_attn", "multihead_attn": "cross_attn"}, ("norm1", "norm2", "norm3"))


def mean_pool(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Class edition: PyTorch's ``torch.nanmean`` over the real positions (padding set to NaN first).

    One documented difference from the course's: a NaN in ``x`` at a real position is skipped, not propagated.
    Shapes: ``x`` (batch, seq, d_model), ``mask`` boolean (batch, seq), True at real tokens -> (batch, d_model).
    """
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != x.shape[:2]:
        raise ValueError(f"mean_pool: mask must be a boolean tensor of shape (batch, seq) = {tuple(x.shape[:2])}, "
                         f"got {getattr(mask, 'dtype', type(mask).__name__)} {tuple(getattr(mask, 'shape', ()))}")
    if not bool(mask.any(dim=1).all()):
        raise ValueError("mean_pool: a row of mask has no real token; its mean is undefined")
    padded = x.masked_fill(~mask.unsqueeze(-1), float("nan"))  # (batch, seq, d_model): padding is NaN
    return torch.nanmean(padded, dim=1)  # (batch, d_model)


def rms_norm_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """Class edition: PyTorch's ``F.rms_norm`` over the last axis, in float32, cast back before the gain (as the
    course's ``RMSNorm`` and Hugging Face's ``LlamaRMSNorm`` do). Gradients reach ``x`` and the gain, so a Llama
    trains through it. Shapes: ``x`` (..., d_model) -> (..., d_model)."""
    import torch.nn.functional as F

    normalised = F.rms_norm(x.to(torch.float32), (self.d_model,), eps=self.eps)  # (..., d_model), float32
    return self.weight * normalised.to(x.dtype)  # (..., d_model)


def train_bpe(texts: Any, vocab_size: int, min_frequency: int = 2, special_tokens: Any = ()) -> Any:
    """Class edition: byte-level BPE learned by Hugging Face ``tokenizers`` (notebook 10's exercise writes its
    merge step by hand, and ``train_bpe`` repeats that step). Returns ``(vocab, merges)`` as the course's
    ``train_bpe`` does: ``tokenizers`` learns the same merges in the same order and the same vocabulary
    (``tests/edition/test_edition.py`` holds them equal, ties included), so ``ByteBPE.train`` and the cells after
    it show the same tokens while the merge step stays the learner's to write.
    """
    import json

    from course_lib.data.bpe import check_train_arguments, split_special
    from course_lib.data.translation import learn_bpe

    specials = [*special_tokens]
    check_train_arguments(vocab_size, min_frequency, specials)
    chunks = [chunk for text in texts for chunk in split_special(text, specials)  # as the course: a special token
              if chunk not in specials]                                           # is never merged
    learned = learn_bpe(chunks, vocab_size, min_frequency, specials, "byte")  # tokenizers' BpeTrainer
    merges = [tuple(pair) for pair in json.loads(learned.to_str())["model"]["merges"]]
    return learned.get_vocab(), merges


def byte_bpe_merge_piece(self: Any, piece: str) -> tuple[int, ...]:
    """Class edition: ``ByteBPE._merge_piece`` (one pre-token's ids, the learned merges applied earliest first)
    through the BPE model of Hugging Face ``tokenizers``, built once per tokeniser from its vocabulary and merges.
    The course's merge applies notebook 10's merge step (``merge_pair``, withheld until the exercise is solved);
    ``tokenizers`` gives the same ids (``tests/edition/test_edition.py``)."""
    from tokenizers import models

    model = self.__dict__.get("_tokenizers_model")
    if model is None:
        model = self.__dict__["_tokenizers_model"] = models.BPE(vocab=dict(self.vocab), merges=list(self.merges))
    return tuple(token.id for token in model.tokenize(piece))


@dataclass(frozen=True)
class Backing:
    """One stand-in: the function (its source is copied into the edition) and the PyTorch callables it runs
    through (dotted names; the tests switch them off and check that the stand-in then computes nothing)."""

    stand_in: Callable[..., Any]
    through: tuple[str, ...]


#: Key of a graded part (``module.name`` or ``module.Class.method``) -> its PyTorch-backed stand-in.
BACKED: dict[str, Backing] = {
    "course_lib.models.softmax.stable_softmax": Backing(stable_softmax, ("torch.softmax",)),
    "course_lib.models.attention.scaled_dot_product_attention": Backing(
        scaled_dot_product_attention, ("torch.nn.functional.scaled_dot_product_attention",)),
    "course_lib.models.attention.MultiHeadAttention.forward": Backing(
        multi_head_attention_forward, ("torch.nn.functional.multi_head_attention_forward",)),
    "course_lib.models.masking.causal_mask": Backing(
        causal_mask, ("torch.nn.Transformer.generate_square_subsequent_mask",)),
    "course_lib.models.masking.sliding_window_mask": Backing(
        sliding_window_mask, ("torch.nn.Transformer.generate_square_subsequent_mask",)),
    "course_lib.models.masking.from_key_padding_mask": Backing(
        from_key_padding_mask, ("torch.nn.functional._canonical_mask",)),
    "course_lib.training.engine.label_smoothed_cross_entropy": Backing(
        label_smoothed_cross_entropy, ("torch.nn.functional.cross_entropy",)),
    "course_lib.models.layers.FeedForward.forward": Backing(
        feed_forward_forward, ("torch.nn.TransformerEncoderLayer._ff_block",)),
    "course_lib.models.layers.EncoderLayer.forward": Backing(
        encoder_layer_forward, ("torch.nn.TransformerEncoderLayer.forward",)),
    "course_lib.models.layers.DecoderLayer.forward": Backing(
        decoder_layer_forward, ("torch.nn.TransformerDecoderLayer.forward",)),
    "course_lib.models.layers.mean_pool": Backing(mean_pool, ("torch.nanmean",)),
    "course_lib.models.positional.sinusoidal_frequencies": Backing(sinusoidal_frequencies, ("torch.logspace",)),
    "course_lib.models.llama.RMSNorm.forward": Backing(rms_norm_forward, ("torch.nn.functional.rms_norm",)),
    "course_lib.models.flash_attention.online_softmax_attention": Backing(
        online_softmax_attention, ("torch.nn.functional.scaled_dot_product_attention",)),
    "course_lib.data.bpe.train_bpe": Backing(train_bpe, ("tokenizers.trainers.BpeTrainer",)),
    "course_lib.data.bpe.ByteBPE._merge_piece": Backing(byte_bpe_merge_piece, ("tokenizers.models.BPE",)),
}
