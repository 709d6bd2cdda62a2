"""The full encoder-decoder Transformer of "Attention Is All You Need" (notebook 06).

Source tokens are embedded, scaled by sqrt(d_model), added to the sinusoidal positional encodings and run
through the encoder; target tokens, shifted right (``<bos>`` first), go through the decoder, which attends
to the encoder's output ("memory"); a linear map then gives one logit per target-vocabulary entry (the
softmax is left to the loss, ``nn.CrossEntropyLoss``, or to decoding).

Section 3.4 of the paper: "we share the same weight matrix between the two embedding layers and the
pre-softmax linear transformation [...] In the embedding layers, we multiply those weights by
sqrt(d_model)." ``tie_embeddings`` ties the target embedding and the output projection;
``share_src_tgt_embeddings`` also shares the source embedding (one joint vocabulary, as the paper's 37000
shared byte-pair tokens for English-German).

Masks are built from ``pad_id`` (see ``course_lib.models.masking``): the encoder and the cross-attention ignore
padded source positions, the decoder's self-attention is causal and ignores padded target positions.

Example:
    >>> model = Transformer(src_vocab_size=20, tgt_vocab_size=30, d_model=32, num_heads=4,
    ...                     num_encoder_layers=2, num_decoder_layers=2, d_ff=64).eval()
    >>> src = torch.tensor([[5, 6, 7, 0]]); tgt_in = torch.tensor([[1, 8, 9]])
    >>> model(src, tgt_in).shape   # (batch, tgt_len, tgt_vocab_size)
    torch.Size([1, 3, 30])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from course_lib.models.attention import MultiHeadAttention
from course_lib.models.layers import Decoder, Encoder
from course_lib.models.masking import decoder_mask, padding_mask
from course_lib.models.positional import LearnedPositionalEmbedding, PositionalEncoding

__all__ = [
    "Transformer",
    "with_key_size",
    "with_learned_positions",
    "shift_right",
    "PaperConfig",
    "PAPER_BASE",
    "PAPER_BIG",
    "count_parameters",
    "transformer_parameter_count",
]


def _check_tokens(name: str, tokens: torch.Tensor, vocab_size: int, max_len: int) -> None:
    """Raise a clear error unless ``tokens`` is a (batch, seq) integer tensor of valid ids, 1 <= seq <= max_len.

    The course's one rule for batch 0, as in every module: an empty batch is accepted (the result is empty
    too); an empty sequence is refused (every sequence needs at least one token).
    """
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"Transformer: {name} must be a LongTensor of shape (batch, seq), got "
                        f"{type(tokens).__name__}")
    if tokens.dtype in (torch.bool,) or tokens.is_floating_point() or tokens.is_complex():
        raise TypeError(f"Transformer: {name} must hold integer token ids (dtype torch.long), got dtype "
                        f"{tokens.dtype}")
    if tokens.dim() != 2:
        raise ValueError(f"Transformer: {name} must have shape (batch, seq), got {tuple(tokens.shape)}"
                         + (" (add a batch axis with .unsqueeze(0))" if tokens.dim() == 1 else ""))
    batch, seq = tokens.shape
    if seq == 0:
        raise ValueError(f"Transformer: {name} has sequences of length 0 (shape {tuple(tokens.shape)}); every "
                         f"sequence needs at least one token")
    if seq > max_len:
        raise ValueError(f"Transformer: {name} has {seq} positions but the model has positional encodings for "
                         f"max_len={max_len}; shorten the sequence or build the model with a larger max_len")
    if batch == 0:
        return
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"Transformer: {name} contains token id {bad}, outside the vocabulary "
                         f"[0, {vocab_size}); map unknown words to the <unk> id before calling the model")


def shift_right(tgt_out: torch.Tensor, bos_id: int = 1, eos_id: int = 2, pad_id: int = 0) -> torch.Tensor:
    """The decoder's input for teacher forcing: the targets shifted one position to the right.

    Position t of the decoder predicts target token t from the tokens *before* it, so its input at
    position t must be target token t-1; position 0 gets ``<bos>`` (nothing precedes the first token).
    The last target (``<eos>``, or padding) is never an input. An ``<eos>`` that lands inside a shorter
    row's input becomes padding: nothing follows it (as ``course_lib.data.translation.collate`` builds batches).

    Shapes: ``tgt_out`` (batch, tgt_len) integer ids ``y1 ... yn <eos> <pad> ...`` ->
    ``tgt_in`` (batch, tgt_len) ``<bos> y1 ... yn <pad> ...``.

    Example:
        >>> shift_right(torch.tensor([[5, 6, 2], [7, 2, 0]]), bos_id=1, eos_id=2, pad_id=0)
        tensor([[1, 5, 6],
                [1, 7, 0]])
    """
    if tgt_out.dim() != 2 or tgt_out.shape[1] == 0 or tgt_out.is_floating_point():
        raise ValueError(f"shift_right: tgt_out must be integer ids of shape (batch, tgt_len >= 1), got shape "
                         f"{tuple(tgt_out.shape)} and dtype {tgt_out.dtype}")
    tgt_in = torch.full_like(tgt_out, pad_id)  # (batch, tgt_len)
    tgt_in[:, 0] = bos_id  # every decoder input starts with <bos>
    tgt_in[:, 1:] = tgt_out[:, :-1]  # then the targets, one step late: the last target is never an input
    return tgt_in.masked_fill(tgt_in == eos_id, pad_id)  # nothing follows <eos>


class Transformer(nn.Module):
    """The encoder-decoder Transformer (Vaswani et al., 2017, figure 1), batch first.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes (pad, bos, eos, unk included).
        d_model, num_heads, num_encoder_layers, num_decoder_layers, d_ff: the paper's sizes (defaults: the
            base model, 512, 8, 6, 6, 2048).
        dropout: P_drop, on the embeddings + positions and on every sub-layer's output (0.1 in the base model).
        max_len: the longest sequence the positional table covers.
        norm_first: False for post-LN (the paper), True for pre-LN.
        tie_embeddings: share the target embedding with the pre-softmax projection (the paper's choice).
        share_src_tgt_embeddings: also share the source embedding (needs src_vocab_size == tgt_vocab_size).
        pad_id: the padding token's id; its embedding is zero and masks hide it.
        activation: ``"relu"`` (the paper) or ``"gelu"`` in the feed-forward blocks.

    Attributes: ``src_embed``, ``tgt_embed`` (``nn.Embedding``), ``positional`` (``PositionalEncoding``),
    ``encoder`` (``Encoder``), ``decoder`` (``Decoder``), ``generator`` (``nn.Linear(d_model, tgt_vocab_size,
    bias=False)``, the pre-softmax projection; its weight *is* ``tgt_embed.weight`` when tied).

    Shapes: ``src`` (batch, src_len), ``tgt_in`` (batch, tgt_len) integer ids ->
    logits (batch, tgt_len, tgt_vocab_size).

    Example:
        >>> model = Transformer(20, 30, d_model=32, num_heads=4, num_encoder_layers=1, num_decoder_layers=1,
        ...                     d_ff=64).eval()
        >>> model(torch.tensor([[5, 6, 7, 0]]), torch.tensor([[1, 8, 9]])).shape
        torch.Size([1, 3, 30])
        >>> model.generator.weight is model.tgt_embed.weight   # tied (tie_embeddings=True)
        True
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_model: int = 512, num_heads: int = 8,
                 num_encoder_layers: int = 6, num_decoder_layers: int = 6, d_ff: int = 2048,
                 dropout: float = 0.1, max_len: int = 512, norm_first: bool = False,
                 tie_embeddings: bool = True, share_src_tgt_embeddings: bool = False, pad_id: int = 0,
                 activation: str = "relu") -> None:
        super().__init__()
        for name, value in (("src_vocab_size", src_vocab_size), ("tgt_vocab_size", tgt_vocab_size),
                            ("max_len", max_len), ("d_model", d_model)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Transformer: {name} must be a positive integer, got {value!r}")
        if not 0 <= pad_id < min(src_vocab_size, tgt_vocab_size):
            raise ValueError(f"Transformer: pad_id must be a valid id of both vocabularies "
                             f"(0 <= pad_id < {min(src_vocab_size, tgt_vocab_size)}), got {pad_id}")
        if share_src_tgt_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(f"Transformer: share_src_tgt_embeddings needs one joint vocabulary, but "
                             f"src_vocab_size={src_vocab_size} != tgt_vocab_size={tgt_vocab_size}")
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        self.d_model, self.max_len, self.pad_id = d_model, max_len, pad_id
        self.tie_embeddings, self.share_src_tgt_embeddings = tie_embeddings, share_src_tgt_embeddings
        self.embed_scale = math.sqrt(d_model)  # section 3.4: embeddings are multiplied by sqrt(d_model)

        self.src_embed = nn.Embedding(src_vocab_size, d_model, padding_idx=pad_id)
        self.tgt_embed = (self.src_embed if share_src_tgt_embeddings
                          else nn.Embedding(tgt_vocab_size, d_model, padding_idx=pad_id))
        self.positional = PositionalEncoding(d_model, max_len=max_len, dropout=dropout)
        self.encoder = Encoder(num_encoder_layers, d_model, num_heads, d_ff, dropout, norm_first, activation)
        self.decoder = Decoder(num_decoder_layers, d_model, num_heads, d_ff, dropout, norm_first, activation)
        self.generator = nn.Linear(d_model, tgt_vocab_size, bias=False)
        if tie_embeddings:
            self.generator.weight = self.tgt_embed.weight  # one (tgt_vocab_size, d_model) matrix, two uses
        self._reset_parameters()

    @torch.no_grad()
    def _reset_parameters(self) -> None:
        """Xavier-uniform for every weight matrix of the stacks (as ``nn.Transformer``); embeddings
        N(0, 1/d_model), so that after the sqrt(d_model) scale each coordinate has unit variance, like the
        positional encodings, and tied output logits start with variance about 1."""
        for stack in (self.encoder, self.decoder):
            for p in stack.parameters():
                if p.dim() > 1:
                    nn.init.xavier_uniform_(p)
        for embed in {id(e): e for e in (self.src_embed, self.tgt_embed)}.values():
            nn.init.normal_(embed.weight, mean=0.0, std=self.d_model ** -0.5)
            embed.weight[self.pad_id].zero_()
        if not self.tie_embeddings:
            nn.init.xavier_uniform_(self.generator.weight)

    # --- the three steps --------------------------------------------------------------------------

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        """Encode source ids (batch, src_len) into memory (batch, src_len, d_model)."""
        _check_tokens("src", src, self.src_vocab_size, self.max_len)
        x = self.positional(self.src_embed(src) * self.embed_scale)  # (batch, src_len, d_model)
        return self.encoder(x, padding_mask(src, self.pad_id))

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor,
               src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (batch, tgt_len, tgt_vocab_size) for every position of the shifted-right targets ``tgt_in``.

        ``memory`` is ``encode(src)``; ``src_mask`` is ``padding_mask(src, pad_id)`` (batch, 1, 1, src_len),
        or None when the source has no padding. Position t of the output predicts target token t, having
        seen ``tgt_in[:, :t+1]`` only (the causal mask).
        """
        _check_tokens("tgt_in", tgt_in, self.tgt_vocab_size, self.max_len)
        if not isinstance(memory, torch.Tensor) or memory.dim() != 3 or memory.shape[0] != tgt_in.shape[0] \
                or memory.shape[-1] != self.d_model:
            got = tuple(memory.shape) if isinstance(memory, torch.Tensor) else type(memory).__name__
            raise ValueError(f"Transformer.decode: memory must have shape (batch={tgt_in.shape[0]}, src_len, "
                             f"d_model={self.d_model}) (the output of encode), got {got}")
        y = self.positional(self.tgt_embed(tgt_in) * self.embed_scale)  # (batch, tgt_len, d_model)
        h = self.decoder(y, memory, decoder_mask(tgt_in, self.pad_id), src_mask)
        return self.generator(h)  # (batch, tgt_len, tgt_vocab_size)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits: (batch, src_len), (batch, tgt_len) -> (batch, tgt_len, tgt_vocab_size)."""
        memory = self.encode(src)
        return self.decode(tgt_in, memory, padding_mask(src, self.pad_id))

    def cross_attention_weights(self, src: torch.Tensor, tgt_in: torch.Tensor) -> list[torch.Tensor]:
        """Encoder-decoder attention weights of every decoder layer: a list of
        (batch, num_heads, tgt_len, src_len), row t showing where target position t looked in the source."""
        memory = self.encode(src)
        _check_tokens("tgt_in", tgt_in, self.tgt_vocab_size, self.max_len)
        y = self.positional(self.tgt_embed(tgt_in) * self.embed_scale)
        return self.decoder.cross_attention_weights(y, memory, decoder_mask(tgt_in, self.pad_id),
                                                    padding_mask(src, self.pad_id))

    @torch.no_grad()
    def load_from_torch(self, model: nn.Transformer) -> Transformer:
        """Copy ``nn.Transformer``'s encoder and decoder weights into ``self.encoder`` / ``self.decoder``.

        ``nn.Transformer`` has no embeddings, positions or output projection, so those stay as they are.
        It also ends both stacks with a LayerNorm whatever the norm placement; for a post-LN model (the
        paper) remove them first: ``model.encoder.norm = None; model.decoder.norm = None``.
        """
        self.encoder.load_from_torch(model.encoder)
        self.decoder.load_from_torch(model.decoder)
        return self


# ---------------------------------------------------------------------------------------------------
# The paper's configurations and their parameter counts (Table 3)
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PaperConfig:
    """One row of the paper's Table 3: sizes, and the parameter count the paper reports (in millions).

    Example:
        >>> PAPER_BASE.kwargs()["d_ff"], PAPER_BASE.paper_params
        (2048, 65)
    """

    name: str
    d_model: int
    num_heads: int
    num_layers: int
    d_ff: int
    dropout: float
    paper_params: float  # as printed in Table 3, in millions

    def kwargs(self) -> dict:
        """Keyword arguments of :class:`Transformer` for this configuration."""
        return dict(d_model=self.d_model, num_heads=self.num_heads, num_encoder_layers=self.num_layers,
                    num_decoder_layers=self.num_layers, d_ff=self.d_ff, dropout=self.dropout)


PAPER_BASE = PaperConfig("base", d_model=512, num_heads=8, num_layers=6, d_ff=2048, dropout=0.1, paper_params=65)
PAPER_BIG = PaperConfig("big", d_model=1024, num_heads=16, num_layers=6, d_ff=4096, dropout=0.3, paper_params=213)


def count_parameters(model: nn.Module) -> int:
    """The number of distinct trainable numbers in ``model`` (a tied matrix counts once).

    Works on the ``meta`` device too (no memory is allocated there), e.g.
    ``with torch.device("meta"): m = Transformer(37000, 37000)``.

    Example:
        >>> count_parameters(nn.Linear(3, 2))
        8
    """
    return sum(p.numel() for p in model.parameters())  # .parameters() yields a shared tensor once


def transformer_parameter_count(vocab_size: int, d_model: int, num_heads: int, num_layers: int, d_ff: int,
                                shared_embeddings: int = 1, final_norms: bool = False,
                                output_bias: bool = False) -> int:
    """The parameter count of the encoder-decoder, from the paper's formulas (independent of the modules).

    Per encoder layer: attention 4 (d_model^2 + d_model) (W_Q, W_K, W_V, W_O and biases; the count does not
    depend on num_heads, since h heads of d_k = d_model / h split the same matrices), feed-forward
    2 d_model d_ff + d_ff + d_model, two LayerNorms 2 * 2 d_model. A decoder layer adds a second attention
    and a third LayerNorm. ``shared_embeddings`` counts the (vocab_size, d_model) matrices: 1 when source
    embedding, target embedding and output projection are one matrix (the paper), 2 with separate source and
    target embeddings and a tied output, 3 with nothing shared.

    Example:
        >>> transformer_parameter_count(37000, d_model=512, num_heads=8, num_layers=6, d_ff=2048)  # base
        63082496
    """
    if d_model % num_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
    attention = 4 * (d_model * d_model + d_model)
    ffn = 2 * d_model * d_ff + d_ff + d_model
    norm = 2 * d_model
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    total = num_layers * (encoder_layer + decoder_layer)
    total += shared_embeddings * vocab_size * d_model
    total += 2 * norm if final_norms else 0
    total += vocab_size if output_bias else 0
    return total


# The paper's Table 3, rows B and E: variants of the model, here where the arrow of imports runs down (the
# command's tasks and notebook 13's grid both build them).

def with_key_size(model: nn.Module, d_k: int) -> nn.Module:
    """Replace every ``MultiHeadAttention`` of ``model``'s encoder and decoder layers by a
    :class:`~course_lib.models.attention.MultiHeadAttention` with the same d_model, heads and dropout but key size
    ``d_k``; returns ``model``.

    The new attention is freshly initialised (call this before training). Xavier-uniform weights, as the
    course's :class:`~course_lib.models.transformer.Transformer` gives its stacks. Shapes are unchanged: the values
    keep d_model / num_heads features per head, so every layer still maps (batch, seq, d_model) to the same.

    Example:
        >>> model = with_key_size(Transformer(20, 20, d_model=16, num_heads=4, num_encoder_layers=1,
        ...                                   num_decoder_layers=1, d_ff=32), d_k=2)
        >>> model.encoder.layers[0].self_attn.w_q.weight.shape  # (num_heads * d_k, d_model)
        torch.Size([8, 16])
    """
    replaced = 0
    for stack in (model.encoder, model.decoder):
        for layer in stack.layers:
            for name in ("self_attn", "cross_attn"):
                old = getattr(layer, name, None)
                if old is None:
                    continue
                new = MultiHeadAttention(old.d_model, old.num_heads, dropout=old.dropout, d_k=d_k)
                for p in new.parameters():
                    if p.dim() > 1:
                        nn.init.xavier_uniform_(p)
                setattr(layer, name, new.to(next(old.parameters()).device))
                replaced += 1
    if replaced == 0:
        raise ValueError("with_key_size: model has no encoder/decoder layers with self_attn or cross_attn")
    return model


def with_learned_positions(model: nn.Module) -> nn.Module:
    """Replace ``model.positional`` (sinusoids) by a :class:`LearnedPositionalEmbedding` with the same
    ``max_len``, width and dropout; returns ``model`` (Table 3, row E). Shapes are unchanged: (batch, seq, d_model).

    Example:
        >>> model = with_learned_positions(Transformer(20, 20, d_model=16, num_heads=4, num_encoder_layers=1,
        ...                                            num_decoder_layers=1, d_ff=32, max_len=10))
        >>> type(model.positional).__name__
        'LearnedPositionalEmbedding'
    """
    old = model.positional
    d_model, max_len = model.d_model, model.max_len
    dropout = old.dropout.p if isinstance(getattr(old, "dropout", None), nn.Dropout) else 0.0
    model.positional = LearnedPositionalEmbedding(max_len, d_model, dropout=dropout)
    return model
