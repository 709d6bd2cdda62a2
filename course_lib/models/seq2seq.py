"""The road to attention (notebook 09): a recurrent encoder-decoder, with and without additive attention.

Before the Transformer, translation models read the source with a recurrent network and wrote the target
with another (Sutskever et al., 2014; Cho et al., 2014). Without attention the decoder sees the source only
through the encoder's **last state**: one vector of ``d_model`` numbers for the whole sentence, however
long it is (the *bottleneck*). Bahdanau, Cho and Bengio (2015) let the decoder look back at every encoder
state instead, weighting them with **additive attention**:

    e_tj = v^T tanh(W_q q_t + W_k k_j),    alpha_tj = softmax_j(e_tj),    c_t = sum_j alpha_tj v_j

(the score is a one-hidden-layer network of the query and the key). The Transformer's scaled dot-product
attention replaced the small network by ``q . k / sqrt(d_k)``: the same idea, computed as one matrix
product ("much faster and more space-efficient in practice", section 3.2.1 of the paper).

- :func:`additive_attention`: the formula above, batch first, with a boolean mask (True = may attend);
  the reference of notebook 09's exercise.
- :class:`AdditiveAttention`: the same with its three learned matrices.
- :class:`RNNEncoderDecoder`: a GRU encoder-decoder, ``attention=None`` (the bottleneck) or
  ``"additive"``, with the interface of :class:`course_lib.models.transformer.Transformer`
  (``forward(src, tgt_in)``, ``encode``, ``decode(tgt_in, memory, src_mask)``, ``pad_id``), so that
  :func:`course_lib.training.engine.train` and :mod:`course_lib.generation.decoding` use it unchanged.

The attention model takes the decoder's *current* state as the query and mixes the context into the
output (Luong et al., 2015's arrangement, with Bahdanau's additive score). Bahdanau's decoder used the
previous state and fed the context into the recurrence, which forces a Python loop over target steps;
this arrangement runs the decoder's recurrence in one call and all queries of a sentence in one batched
attention, and shows the same thing: the decoder reads every source position directly.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from course_lib.validation import validated_by

__all__ = ["additive_attention", "AdditiveAttention", "RNNEncoderDecoder"]


def _shape(x: object) -> tuple:
    return tuple(x.shape) if isinstance(x, torch.Tensor) else (type(x).__name__,)


def _check_additive_inputs(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, w_q: torch.Tensor,
                           w_k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    """Raise a ValueError naming the argument, the shape expected and the shape given."""
    for name, x, dims in (("query", query, 3), ("keys", keys, 3), ("values", values, 3), ("w_q", w_q, 2),
                          ("w_k", w_k, 2), ("v", v, 1)):
        if not isinstance(x, torch.Tensor) or x.dim() != dims:
            raise ValueError(f"additive_attention: {name} must be a {dims}-D tensor, got shape {_shape(x)}")
    batch, seq_q, d_q = query.shape
    if keys.shape[0] != batch or values.shape[:2] != keys.shape[:2]:
        raise ValueError(f"additive_attention: keys (batch={batch}, seq_k, d_k) and values (batch, seq_k, d_v) "
                         f"must share batch and seq_k, got keys {_shape(keys)}, values {_shape(values)}")
    # d_att is read off w_q, the first weight: each later argument is checked against the ones before it
    if w_q.shape[1] != d_q:
        raise ValueError(f"additive_attention: w_q must have shape (d_att, d_q={d_q}), got {_shape(w_q)}")
    d_att = w_q.shape[0]
    if w_k.shape != (d_att, keys.shape[-1]):
        raise ValueError(f"additive_attention: w_k must have shape (d_att={d_att}, d_k={keys.shape[-1]}) like "
                         f"w_q {_shape(w_q)}, got {_shape(w_k)}")
    if v.shape != (d_att,):
        raise ValueError(f"additive_attention: v must have shape (d_att={d_att},) like w_q {_shape(w_q)}, "
                         f"got {_shape(v)}")
    if mask is not None:
        target = (batch, seq_q, keys.shape[1])
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise ValueError(f"additive_attention: mask must be a bool tensor (True = may attend), got "
                             f"{getattr(mask, 'dtype', type(mask).__name__)}")
        fits = mask.dim() <= 3 and all(size in (1, want) for size, want in
                                       zip(reversed(mask.shape), reversed(target), strict=False))
        if not fits:
            raise ValueError(f"additive_attention: mask must broadcast to (batch, seq_q, seq_k) = {target}, "
                             f"e.g. (batch, 1, seq_k); got {_shape(mask)}")


@validated_by(_check_additive_inputs)
def additive_attention(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, w_q: torch.Tensor,
                       w_k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Additive (Bahdanau) attention: scores v^T tanh(W_q q + W_k k), softmax over the keys, weighted values.

    Shapes: ``query`` (batch, seq_q, d_q), ``keys`` (batch, seq_k, d_k), ``values`` (batch, seq_k, d_v),
    ``w_q`` (d_att, d_q), ``w_k`` (d_att, d_k), ``v`` (d_att,); ``mask`` boolean, True = may attend,
    broadcastable to (batch, seq_q, seq_k), e.g. a padding mask (batch, 1, seq_k). Returns
    ``(context (batch, seq_q, d_v), weights (batch, seq_q, seq_k))``. A query whose keys are all masked
    gets weights 0 and context 0 (no NaN), as in the course's dot-product attention.

    Example:
        >>> q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 6)
        >>> context, weights = additive_attention(q, k, k, torch.randn(8, 4), torch.randn(8, 6), torch.randn(8))
        >>> context.shape, weights.shape, torch.allclose(weights.sum(-1), torch.ones(2, 3))
        (torch.Size([2, 3, 6]), torch.Size([2, 3, 5]), True)
    """
    projected_q = (query @ w_q.T).unsqueeze(2)                      # (batch, seq_q, 1, d_att)
    projected_k = (keys @ w_k.T).unsqueeze(1)                       # (batch, 1, seq_k, d_att)
    scores = torch.tanh(projected_q + projected_k) @ v              # (batch, seq_q, seq_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)                         # (batch, seq_q, seq_k)
    if mask is not None:  # a fully masked row is softmax(-inf, ..., -inf) = NaN: define it as 0
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ values, weights                                # (batch, seq_q, d_v)


class AdditiveAttention(nn.Module):
    """Additive attention with learned W_q (d_att x d_q), W_k (d_att x d_k) and v (d_att,).

    ``forward(query, keys, values, mask=None)`` -> ``(context, weights)`` as :func:`additive_attention`.
    The score network has a hidden layer of ``d_att`` tanh units; every (query, key) pair runs through it,
    so the score costs O(seq_q * seq_k * d_att) additions and tanh evaluations on top of the projections,
    where dot-product attention needs one (seq_q x d) (d x seq_k) matrix product.

    Example:
        >>> att = AdditiveAttention(d_query=4, d_key=6, d_att=8)
        >>> context, weights = att(torch.randn(2, 3, 4), torch.randn(2, 5, 6), torch.randn(2, 5, 7))
        >>> context.shape, weights.shape
        (torch.Size([2, 3, 7]), torch.Size([2, 3, 5]))
    """

    def __init__(self, d_query: int, d_key: int, d_att: int) -> None:
        super().__init__()
        for name, value in (("d_query", d_query), ("d_key", d_key), ("d_att", d_att)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"AdditiveAttention: {name} must be a positive integer, got {value!r}")
        self.w_q = nn.Linear(d_query, d_att, bias=False)  # W_q
        self.w_k = nn.Linear(d_key, d_att, bias=False)    # W_k
        self.v = nn.Parameter(torch.empty(d_att).uniform_(-d_att ** -0.5, d_att ** -0.5))  # v

    def forward(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return additive_attention(query, keys, values, self.w_q.weight, self.w_k.weight, self.v, mask)


class RNNEncoderDecoder(nn.Module):
    """A GRU encoder-decoder for translation, without attention (``attention=None``) or with additive attention.

    - Encoder: embedding -> ``nn.GRU``; padding (on the right, as :func:`course_lib.data.translation.collate` makes it)
      is skipped with a packed sequence, so each sentence's final state is that of its last real token.
    - Without attention, that final state h_S (``d_model`` numbers) starts the decoder GRU, which reads the
      shifted target ``tgt_in``; the source reaches the output only through h_S: the bottleneck.
    - With ``attention="additive"``, the decoder also starts from h_S, and at every target position t its
      state s_t queries all encoder states with :class:`AdditiveAttention`; the output is
      ``generator(tanh(W_c [s_t; c_t]))``.

    Interface of :class:`course_lib.models.transformer.Transformer`: ``forward(src, tgt_in) -> logits`` (batch,
    tgt_len, tgt_vocab_size); ``encode(src) -> memory`` (batch, src_len, d_model), the encoder's states;
    ``decode(tgt_in, memory, src_mask)`` with ``src_mask`` = ``padding_mask(src)`` (batch, 1, 1, src_len);
    ``pad_id``. So :func:`course_lib.generation.decoding.greedy_decode` and ``translate`` work on it.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes; d_model: embedding and GRU width;
        attention: None or ``"additive"``; d_att: width of the additive score's hidden layer (default
        d_model); pad_id: the padding id.

    Example:
        >>> model = RNNEncoderDecoder(12, 9, d_model=16, attention="additive")
        >>> model(torch.tensor([[5, 6, 7], [4, 5, 0]]), torch.tensor([[1, 4], [1, 5]])).shape
        torch.Size([2, 2, 9])
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_model: int = 64,
                 attention: Literal["additive"] | None = None, d_att: int | None = None, pad_id: int = 0) -> None:
        super().__init__()
        if attention not in (None, "additive"):
            raise ValueError(f"RNNEncoderDecoder: attention must be None or 'additive', got {attention!r}")
        for name, value in (("src_vocab_size", src_vocab_size), ("tgt_vocab_size", tgt_vocab_size),
                            ("d_model", d_model)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"RNNEncoderDecoder: {name} must be a positive integer, got {value!r}")
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        self.d_model, self.attention_kind, self.pad_id = d_model, attention, pad_id
        self.src_embed = nn.Embedding(src_vocab_size, d_model, padding_idx=pad_id)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, d_model, padding_idx=pad_id)
        self.encoder = nn.GRU(d_model, d_model, batch_first=True)
        self.decoder = nn.GRU(d_model, d_model, batch_first=True)
        if attention == "additive":
            self.attention = AdditiveAttention(d_model, d_model, d_att or d_model)
            self.combine = nn.Linear(2 * d_model, d_model)  # W_c [s_t; c_t]
        self.generator = nn.Linear(d_model, tgt_vocab_size)

    def _check_ids(self, name: str, ids: torch.Tensor, vocab_size: int) -> None:
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype != torch.long or ids.shape[1] == 0:
            raise ValueError(f"RNNEncoderDecoder: {name} must be a non-empty LongTensor (batch, seq), got "
                             f"{getattr(ids, 'dtype', type(ids).__name__)} {_shape(ids)}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
            raise ValueError(f"RNNEncoderDecoder: {name} holds ids outside [0, {vocab_size})")

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        """src (batch, src_len) -> the encoder's states (batch, src_len, d_model), zero at padding."""
        self._check_ids("src", src, self.src_vocab_size)
        lengths = (src != self.pad_id).sum(dim=1).clamp(min=1).cpu()  # (batch,)
        packed = nn.utils.rnn.pack_padded_sequence(self.src_embed(src), lengths, batch_first=True,
                                                   enforce_sorted=False)
        states, _ = self.encoder(packed)
        memory, _ = nn.utils.rnn.pad_packed_sequence(states, batch_first=True, total_length=src.shape[1])
        return memory  # (batch, src_len, d_model)

    def _decoder_states(self, tgt_in: torch.Tensor, memory: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """The decoder GRU's states (batch, tgt_len, d_model), started from the last real source state."""
        last = (keep.sum(dim=1) - 1).clamp(min=0)                     # (batch,) index of the last real token
        h_last = memory[torch.arange(memory.shape[0], device=memory.device), last]  # (batch, d_model): the bottleneck
        states, _ = self.decoder(self.tgt_embed(tgt_in), h_last.unsqueeze(0).contiguous())
        return states

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor,
               src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (batch, tgt_len, tgt_vocab_size) from the shifted targets and the encoder's states.

        ``src_mask`` (batch, 1, 1, src_len) or (batch, src_len), True at real source tokens; None means no
        padding. The decoder starts from the state of the last real source token.
        """
        self._check_ids("tgt_in", tgt_in, self.tgt_vocab_size)
        if not isinstance(memory, torch.Tensor) or memory.dim() != 3 or memory.shape[0] != tgt_in.shape[0] \
                or memory.shape[-1] != self.d_model:
            raise ValueError(f"RNNEncoderDecoder.decode: memory must have shape (batch={tgt_in.shape[0]}, src_len, "
                             f"d_model={self.d_model}) (the output of encode), got {_shape(memory)}")
        batch, src_len, _ = memory.shape
        if src_mask is None:
            keep = torch.ones(batch, src_len, dtype=torch.bool, device=memory.device)
        else:
            keep = src_mask.reshape(batch, src_len)                   # (batch, src_len)
        states = self._decoder_states(tgt_in, memory, keep)           # (batch, tgt_len, d_model)
        if self.attention_kind is None:
            return self.generator(states)
        context, _ = self.attention(states, memory, memory, keep.unsqueeze(1))  # (batch, tgt_len, d_model)
        return self.generator(torch.tanh(self.combine(torch.cat([states, context], dim=-1))))

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits: (batch, src_len), (batch, tgt_len) -> (batch, tgt_len, tgt_vocab_size)."""
        if src.shape[0] != tgt_in.shape[0]:
            raise ValueError(f"RNNEncoderDecoder: src and tgt_in must have the same batch size, got "
                             f"{_shape(src)} and {_shape(tgt_in)}")
        return self.decode(tgt_in, self.encode(src), src != self.pad_id)

    @torch.no_grad()
    def attention_weights(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """The additive attention's weights (batch, tgt_len, src_len): where each target position looked."""
        if self.attention_kind is None:
            raise ValueError("RNNEncoderDecoder.attention_weights: this model has no attention (attention=None)")
        memory, keep = self.encode(src), src != self.pad_id
        states = self._decoder_states(tgt_in, memory, keep)
        return self.attention(states, memory, memory, keep.unsqueeze(1))[1]
