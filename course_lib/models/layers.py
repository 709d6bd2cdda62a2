"""The Transformer's layers: the position-wise feed-forward block, the encoder layer, the decoder layer,
and the stacks of N of them (notebooks 05 and 06).

Every sub-layer of the paper (self-attention, encoder-decoder attention, feed-forward) is wrapped in a
residual connection and a layer normalisation. Where the normalisation goes is the one design choice this
module exposes, with the flag ``norm_first``:

- ``norm_first=False`` (**post-LN**, the paper, section 3.1): ``x = LayerNorm(x + Dropout(Sublayer(x)))``;
- ``norm_first=True`` (**pre-LN**, most modern models): ``x = x + Dropout(Sublayer(LayerNorm(x)))``, and the
  stack ends with one more LayerNorm (as ``nn.TransformerEncoder(norm=...)``), because the residual stream
  itself is never normalised inside the layers.

The attribute names follow PyTorch's ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``
(``self_attn``, ``norm1``, ``dropout1``, ...) so that weights copy over one to one: see the
``load_from_torch`` methods, which the tests use to prove equality with PyTorch's modules.

Shapes (batch first): activations ``(batch, seq, d_model)``; masks are boolean, ``True`` = may be
attended to, broadcastable to ``(batch, num_heads, seq_q, seq_k)`` (see ``course_lib.models.masking``).

Example:
    >>> layer = EncoderLayer(d_model=16, num_heads=4, d_ff=32)
    >>> layer(torch.randn(2, 5, 16)).shape
    torch.Size([2, 5, 16])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from course_lib.models.attention import MultiHeadAttention
from course_lib.models.kv_cache import KVCache

__all__ = [
    "FeedForward",
    "EncoderLayer",
    "DecoderLayer",
    "Encoder",
    "Decoder",
    "mean_pool",
    "normal_init_",
]

# "gelu" is the exact GELU, x * Phi(x) (BERT, ViT); "gelu_tanh" is its tanh approximation (GPT-2).
_ACTIVATIONS = ("relu", "gelu", "gelu_tanh")


def _activation_module(activation: str) -> nn.Module:
    if activation == "relu":
        return nn.ReLU()
    if activation == "gelu":
        return nn.GELU()
    if activation == "gelu_tanh":
        return nn.GELU(approximate="tanh")
    raise ValueError(f"activation must be one of {_ACTIVATIONS}, got {activation!r}")


def _check_sizes(owner: str, d_model: int, num_heads: int | None, d_ff: int, dropout: float) -> None:
    for name, value in (("d_model", d_model), ("d_ff", d_ff)) + ((("num_heads", num_heads),) if num_heads
                                                                  is not None else ()):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")
    if num_heads is not None and d_model % num_heads:
        raise ValueError(f"{owner}: d_model ({d_model}) must be divisible by num_heads ({num_heads})")
    if not 0.0 <= float(dropout) < 1.0:
        raise ValueError(f"{owner}: dropout must be in [0, 1), got {dropout!r}")


def _check_activations(owner: str, name: str, x: torch.Tensor, d_model: int) -> None:
    """Raise a clear error unless ``x`` is a float tensor of shape (batch, seq, d_model) with seq >= 1."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{owner}: {name} must be a torch.Tensor of shape (batch, seq, {d_model}), "
                        f"got {type(x).__name__}")
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"{owner}: {name} must have shape (batch, seq, d_model={d_model}), "
                         f"got {tuple(x.shape)}")
    if x.shape[1] == 0:
        raise ValueError(f"{owner}: {name} is an empty sequence (shape {tuple(x.shape)}); seq must be >= 1")
    if not x.is_floating_point():
        raise TypeError(f"{owner}: {name} must be a floating-point tensor, got dtype {x.dtype} "
                        f"(token ids go through an embedding first)")


class FeedForward(nn.Module):
    """The position-wise feed-forward network of the paper (section 3.3).

    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to every position separately and identically: two
    linear maps with a ReLU (or GELU) between them, d_model -> d_ff -> d_model. Because it acts on each
    position alone, it equals a convolution with kernel size 1 over the sequence ("two convolutions with
    kernel size 1", as the paper puts it). Dropout, when used, sits after the activation (as in PyTorch's
    ``nn.TransformerEncoderLayer``); the residual dropout belongs to the layer that wraps this block.

    Args:
        d_model: width of the input and output (512 in the paper's base model).
        d_ff: width of the hidden layer (2048 in the base model).
        dropout: dropout probability on the hidden activations.
        activation: ``"relu"`` (the paper), ``"gelu"`` (exact) or ``"gelu_tanh"`` (GPT-2's approximation).

    Shapes: ``x`` (..., d_model) -> (..., d_model).

    Example:
        >>> ffn = FeedForward(d_model=8, d_ff=32)
        >>> ffn(torch.randn(2, 3, 8)).shape
        torch.Size([2, 3, 8])
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu") -> None:
        super().__init__()
        _check_sizes("FeedForward", d_model, None, d_ff, dropout)
        self.linear1 = nn.Linear(d_model, d_ff)  # W_1, b_1
        self.activation = _activation_module(activation)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)  # W_2, b_2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the block to every position: (..., d_model) -> (..., d_model)."""
        hidden = self.activation(self.linear1(x))  # (..., d_ff)
        return self.linear2(self.dropout(hidden))  # (..., d_model)


class EncoderLayer(nn.Module):
    """One encoder layer: self-attention, then the feed-forward block, each with residual and LayerNorm.

    Post-LN (``norm_first=False``, the paper)::

        x = LayerNorm(x + Dropout(SelfAttention(x)))
        x = LayerNorm(x + Dropout(FFN(x)))

    Pre-LN (``norm_first=True``)::

        x = x + Dropout(SelfAttention(LayerNorm(x)))
        x = x + Dropout(FFN(LayerNorm(x)))

    Args:
        d_model, num_heads, d_ff: sizes from the paper (512, 8, 2048 for the base model).
        dropout: the residual dropout P_drop (also used inside attention and the feed-forward block).
        norm_first: False for post-LN (the paper), True for pre-LN.
        activation: ``"relu"``, ``"gelu"`` or ``"gelu_tanh"`` in the feed-forward block.
        layer_norm_eps: the LayerNorms' epsilon (PyTorch's and BERT's 1e-5 and 1e-12; ViT's 1e-6).

    Shapes: ``x`` (batch, seq, d_model), ``mask`` bool broadcastable to (batch, num_heads, seq, seq)
    (``padding_mask(tokens, pad_id)`` gives (batch, 1, 1, seq)) -> (batch, seq, d_model).

    Example:
        >>> layer = EncoderLayer(d_model=16, num_heads=4, d_ff=32).eval()
        >>> layer(torch.randn(2, 5, 16)).shape
        torch.Size([2, 5, 16])
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu", layer_norm_eps: float = 1e-5) -> None:
        super().__init__()
        _check_sizes("EncoderLayer", d_model, num_heads, d_ff, dropout)
        self.d_model = d_model
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)  # around self-attention
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)  # around the feed-forward block
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, cache: KVCache | None = None
                ) -> torch.Tensor:
        """(batch, seq, d_model) -> (batch, seq, d_model); ``mask`` True where a key may be attended to.

        ``cache`` (generation with a causal model): ``x`` holds only the new positions; the self-attention
        appends their keys and values to the cache and attends causally over everything stored
        (:class:`~course_lib.models.attention.MultiHeadAttention`'s ``cache``), in both norm placements.
        """
        if self.norm_first:  # pre-LN: normalise the sub-layer's input, add to the raw residual stream
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=mask, cache=cache)[0])
            x = x + self.dropout2(self.feed_forward(self.norm2(x)))
        else:  # post-LN (the paper): normalise the sum of the residual and the sub-layer's output
            x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=mask, cache=cache)[0]))
            x = self.norm2(x + self.dropout2(self.feed_forward(x)))
        return x

    def attention_weights(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The self-attention weights ``forward`` uses on ``x``: (batch, num_heads, seq, seq)."""
        h = self.norm1(x) if self.norm_first else x
        return self.self_attn(h, h, h, mask=mask, need_weights=True)[1]

    @torch.no_grad()
    def load_from_torch(self, layer: nn.TransformerEncoderLayer) -> EncoderLayer:
        """Copy the weights of PyTorch's ``nn.TransformerEncoderLayer`` into this layer; returns self.

        Raises ValueError when the two layers differ in shape, norm placement or activation (then equal
        weights would not give equal outputs).
        """
        _same_norm_placement(self, layer)
        self.self_attn.load_from_torch(layer.self_attn)
        _copy_ffn(self.feed_forward, layer)
        _copy_norms(self, layer, ("norm1", "norm2"))
        return self


class DecoderLayer(nn.Module):
    """One decoder layer: masked self-attention, encoder-decoder (cross) attention, feed-forward.

    Post-LN (``norm_first=False``, the paper)::

        x = LayerNorm(x + Dropout(SelfAttention(x, self_mask)))          # causal: no peeking ahead
        x = LayerNorm(x + Dropout(CrossAttention(q=x, k=v=memory, cross_mask)))
        x = LayerNorm(x + Dropout(FFN(x)))

    Pre-LN (``norm_first=True``) normalises each sub-layer's input instead (the cross-attention then takes
    ``LayerNorm(x)`` as queries and the encoder's output ``memory`` unchanged as keys and values).

    Shapes: ``x`` (batch, tgt_len, d_model), ``memory`` (batch, src_len, d_model); ``self_mask`` bool
    broadcastable to (batch, num_heads, tgt_len, tgt_len) (``decoder_mask``), ``cross_mask`` to
    (batch, num_heads, tgt_len, src_len) (``padding_mask`` of the source) -> (batch, tgt_len, d_model).

    Example:
        >>> layer = DecoderLayer(d_model=16, num_heads=4, d_ff=32).eval()
        >>> layer(torch.randn(2, 3, 16), torch.randn(2, 7, 16)).shape
        torch.Size([2, 3, 16])
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu", layer_norm_eps: float = 1e-5) -> None:
        super().__init__()
        _check_sizes("DecoderLayer", d_model, num_heads, d_ff, dropout)
        self.d_model = d_model
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)  # around masked self-attention
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)  # around cross-attention
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps)  # around the feed-forward block
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                cross_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(batch, tgt_len, d_model), memory (batch, src_len, d_model) -> (batch, tgt_len, d_model)."""
        if self.norm_first:  # pre-LN
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=self_mask)[0])
            h = self.norm2(x)  # queries from the decoder; keys and values from the encoder
            x = x + self.dropout2(self.cross_attn(h, memory, memory, mask=cross_mask)[0])
            x = x + self.dropout3(self.feed_forward(self.norm3(x)))
        else:  # post-LN (the paper)
            x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=self_mask)[0]))
            x = self.norm2(x + self.dropout2(self.cross_attn(x, memory, memory, mask=cross_mask)[0]))
            x = self.norm3(x + self.dropout3(self.feed_forward(x)))
        return x

    def cross_attention_weights(self, x: torch.Tensor, memory: torch.Tensor,
                                self_mask: torch.Tensor | None = None,
                                cross_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder-decoder attention weights ``forward`` uses: (batch, num_heads, tgt_len, src_len)."""
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=self_mask)[0])
            queries = self.norm2(x)
        else:
            queries = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=self_mask)[0]))
        return self.cross_attn(queries, memory, memory, mask=cross_mask, need_weights=True)[1]

    @torch.no_grad()
    def load_from_torch(self, layer: nn.TransformerDecoderLayer) -> DecoderLayer:
        """Copy the weights of PyTorch's ``nn.TransformerDecoderLayer`` into this layer; returns self.

        PyTorch calls the cross-attention ``multihead_attn``; the course calls it ``cross_attn``.
        """
        _same_norm_placement(self, layer)
        self.self_attn.load_from_torch(layer.self_attn)
        self.cross_attn.load_from_torch(layer.multihead_attn)
        _copy_ffn(self.feed_forward, layer)
        _copy_norms(self, layer, ("norm1", "norm2", "norm3"))
        return self


def _stack(owner: str, num_layers: int, d_model: int, norm_first: bool, layer_norm_eps: float,
           make_layer: Callable[[], nn.Module]) -> tuple[nn.ModuleList, nn.LayerNorm | None]:
    """The parts of a stack (:class:`Encoder`, :class:`Decoder`): ``num_layers`` layers from ``make_layer``, and the
    final LayerNorm that a pre-LN stack ends with (``None`` for post-LN, whose every layer already ends with one)."""
    if not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"{owner}: num_layers must be a positive integer, got {num_layers!r}")
    layers = nn.ModuleList(make_layer() for _ in range(num_layers))
    return layers, (nn.LayerNorm(d_model, eps=layer_norm_eps) if norm_first else None)


class Encoder(nn.Module):
    """A stack of ``num_layers`` identical encoder layers (N = 6 in the paper).

    With ``norm_first=True`` (pre-LN) a final LayerNorm follows the stack, as
    ``nn.TransformerEncoder(layer, num_layers, norm=nn.LayerNorm(d_model))``: the residual stream is never
    normalised inside pre-LN layers. Post-LN (the paper) has none: every layer already ends with one.
    (Note that ``nn.Transformer`` adds the final LayerNorm in both placements.)

    Shapes: ``x`` (batch, seq, d_model), ``mask`` as in :class:`EncoderLayer` -> (batch, seq, d_model).

    Example:
        >>> enc = Encoder(num_layers=2, d_model=16, num_heads=4, d_ff=32).eval()
        >>> enc(torch.randn(2, 5, 16)).shape
        torch.Size([2, 5, 16])
    """

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu", layer_norm_eps: float = 1e-5) -> None:
        super().__init__()
        self.d_model = d_model
        self.norm_first = norm_first
        self.layers, self.norm = _stack("Encoder", num_layers, d_model, norm_first, layer_norm_eps,
                                        lambda: EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first,
                                                             activation, layer_norm_eps))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, cache: list[KVCache] | None = None
                ) -> torch.Tensor:
        """Run the layers in order: (batch, seq, d_model) -> (batch, seq, d_model).

        ``cache``: one :class:`~course_lib.models.kv_cache.KVCache` per layer (generation; ``x`` holds the new
        positions only), as :meth:`EncoderLayer.forward` takes it.
        """
        _check_activations("Encoder", "x", x, self.d_model)
        if cache is not None and (not isinstance(cache, list | tuple) or len(cache) != len(self.layers)):
            raise ValueError(f"Encoder: cache must be a list of one KVCache per layer ({len(self.layers)} layers), "
                             f"got {type(cache).__name__} of length {len(cache) if hasattr(cache, '__len__') else '?'}")
        for i, layer in enumerate(self.layers):  # a layer without a cache is called as (x, mask) alone
            x = layer(x, mask) if cache is None else layer(x, mask, cache=cache[i])
        return self.norm(x) if self.norm is not None else x

    def attention_weights(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Each layer's self-attention weights on the way up: a list of (batch, num_heads, seq, seq)."""
        _check_activations("Encoder", "x", x, self.d_model)
        weights = []
        for layer in self.layers:
            weights.append(layer.attention_weights(x, mask))
            x = layer(x, mask)
        return weights

    @torch.no_grad()
    def load_from_torch(self, encoder: nn.TransformerEncoder) -> Encoder:
        """Copy the weights of ``nn.TransformerEncoder`` (its layers and its final norm); returns self."""
        _copy_stack(self, encoder, "nn.TransformerEncoder")
        return self


class Decoder(nn.Module):
    """A stack of ``num_layers`` identical decoder layers, with a final LayerNorm when ``norm_first``.

    Shapes: ``x`` (batch, tgt_len, d_model), ``memory`` (batch, src_len, d_model), masks as in
    :class:`DecoderLayer` -> (batch, tgt_len, d_model).

    Example:
        >>> dec = Decoder(num_layers=2, d_model=16, num_heads=4, d_ff=32).eval()
        >>> dec(torch.randn(2, 3, 16), torch.randn(2, 7, 16)).shape
        torch.Size([2, 3, 16])
    """

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu", layer_norm_eps: float = 1e-5) -> None:
        super().__init__()
        self.d_model = d_model
        self.norm_first = norm_first
        self.layers, self.norm = _stack("Decoder", num_layers, d_model, norm_first, layer_norm_eps,
                                        lambda: DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first,
                                                             activation, layer_norm_eps))

    def _check(self, x: torch.Tensor, memory: torch.Tensor) -> None:
        _check_activations("Decoder", "x", x, self.d_model)
        _check_activations("Decoder", "memory", memory, self.d_model)
        if memory.shape[0] != x.shape[0]:
            raise ValueError(f"Decoder: x and memory must have the same batch size, got x {tuple(x.shape)} "
                             f"and memory {tuple(memory.shape)}")

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                cross_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Run the layers in order: (batch, tgt_len, d_model) -> (batch, tgt_len, d_model)."""
        self._check(x, memory)
        for layer in self.layers:
            x = layer(x, memory, self_mask, cross_mask)
        return self.norm(x) if self.norm is not None else x

    def cross_attention_weights(self, x: torch.Tensor, memory: torch.Tensor,
                                self_mask: torch.Tensor | None = None,
                                cross_mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Each layer's encoder-decoder attention weights: a list of (batch, num_heads, tgt_len, src_len)."""
        self._check(x, memory)
        weights = []
        for layer in self.layers:
            weights.append(layer.cross_attention_weights(x, memory, self_mask, cross_mask))
            x = layer(x, memory, self_mask, cross_mask)
        return weights

    @torch.no_grad()
    def load_from_torch(self, decoder: nn.TransformerDecoder) -> Decoder:
        """Copy the weights of ``nn.TransformerDecoder`` (its layers and its final norm); returns self."""
        _copy_stack(self, decoder, "nn.TransformerDecoder")
        return self


def mean_pool(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The average of each sequence's vectors over its real (not padded) positions.

    One way to turn an encoder's output into one vector per sequence, for a whole-sequence task
    (classification); the other is to read the output at a [CLS] token (notebook 05 compares the two).
    Padding must not count: a sequence of 3 tokens padded to 8 is averaged over 3 positions, not 8.

    Args:
        x: encoder outputs (batch, seq, d_model).
        mask: boolean (batch, seq), True at real tokens (``tokens != pad_id``); every row needs at least one.

    Returns: (batch, d_model).

    Example:
        >>> x = torch.tensor([[[1.0], [3.0], [100.0]]])          # (1, 3, 1); the 100 is padding
        >>> mean_pool(x, torch.tensor([[True, True, False]]))
        tensor([[2.]])
    """
    if mask.dtype != torch.bool or mask.shape != x.shape[:2]:
        raise ValueError(f"mean_pool: mask must be a boolean tensor of shape (batch, seq) = {tuple(x.shape[:2])}, "
                         f"got dtype {mask.dtype} and shape {tuple(mask.shape)}")
    if not bool(mask.any(dim=1).all()):
        raise ValueError("mean_pool: a row of mask has no real token; its mean is undefined")
    weights = mask.unsqueeze(-1).to(x.dtype)  # (batch, seq, 1): 1 at real tokens, 0 at padding
    total = (x * weights).sum(dim=1)  # (batch, d_model)
    count = weights.sum(dim=1)  # (batch, 1): the number of real tokens
    return total / count


# ---------------------------------------------------------------------------------------------------
# Copying weights from PyTorch's modules (used by the tests and the notebooks' equality demonstrations)
# ---------------------------------------------------------------------------------------------------

def normal_init_(model: nn.Module, std: float = 0.02, residual: Sequence[str] = (), num_layers: int = 1) -> None:
    """GPT-2's and BERT's initialisation, in place: N(0, ``std``^2) for every matrix, zero for every bias.

    The one initialisation of the course's language models (GPT, BERT, Llama), as their reference implementations
    do it (Hugging Face's ``_init_weights``, nanoGPT's ``_init_weights``): weight matrices and embeddings (any
    parameter with two or more dimensions) drawn from a normal of standard deviation ``std``, biases (1-D
    parameters whose name ends in ``bias``) set to zero, and LayerNorm / RMSNorm gains left at 1. The matrices
    whose name ends with one of ``residual`` write into the residual stream; GPT-2 scales their ``std`` by
    ``1 / sqrt(2 * num_layers)`` (two such writes per layer), so that the stream's variance does not grow with
    depth. Parameters are drawn in ``model.named_parameters()`` order, so one seed gives one model.

    Example:
        >>> block = nn.Sequential(nn.Linear(256, 256), nn.LayerNorm(256))
        >>> normal_init_(block)
        >>> linear, norm = block[0].state_dict(), block[1].state_dict()
        >>> linear["bias"].abs().sum().item(), norm["weight"].mean().item(), round(linear["weight"].std().item(), 2)
        (0.0, 1.0, 0.02)
    """
    if std <= 0 or num_layers < 1:
        raise ValueError(f"normal_init_: need std > 0 and num_layers >= 1, got std={std}, num_layers={num_layers}")
    residual = tuple(residual)
    for name, param in model.named_parameters():
        if param.dim() >= 2:
            scaled = residual and name.endswith(residual)  # a residual write: keep the stream's scale
            nn.init.normal_(param, mean=0.0, std=std / math.sqrt(2 * num_layers) if scaled else std)
        elif name.endswith("bias"):
            nn.init.zeros_(param)


def _copy_param(dst: torch.Tensor, src: torch.Tensor, name: str) -> None:
    if dst.shape != src.shape:
        raise ValueError(f"load_from_torch: {name} has shape {tuple(dst.shape)} here but "
                         f"{tuple(src.shape)} in the PyTorch module")
    dst.copy_(src)


def _same_norm_placement(ours: nn.Module, theirs: nn.Module) -> None:
    if bool(ours.norm_first) != bool(theirs.norm_first):
        raise ValueError(f"load_from_torch: norm_first is {ours.norm_first} here but {theirs.norm_first} in "
                         f"the PyTorch layer; build both with the same norm placement")
    name, ours_act = _activation_name(theirs.activation), _activation_name(ours.feed_forward.activation)
    if name != ours_act:
        raise ValueError(f"load_from_torch: activation is {ours_act} here but {name} in the PyTorch layer")


def _activation_name(act: object) -> str:
    """``"relu"``, ``"gelu"`` or ``"gelu_tanh"`` for a module or function PyTorch's layers accept."""
    name = getattr(act, "__name__", type(act).__name__).lower()
    return "gelu_tanh" if getattr(act, "approximate", "none") == "tanh" else name


def _copy_ffn(ffn: FeedForward, layer: nn.Module) -> None:
    for name in ("linear1", "linear2"):
        _copy_param(getattr(ffn, name).weight, getattr(layer, name).weight, f"feed_forward.{name}.weight")
        _copy_param(getattr(ffn, name).bias, getattr(layer, name).bias, f"feed_forward.{name}.bias")


def _copy_norms(ours: nn.Module, theirs: nn.Module, names: tuple[str, ...]) -> None:
    for name in names:
        _copy_layer_norm(getattr(ours, name), getattr(theirs, name), name)


def _copy_layer_norm(ours: nn.LayerNorm, theirs: nn.LayerNorm, name: str) -> None:
    if abs(ours.eps - theirs.eps) > 0:
        raise ValueError(f"load_from_torch: {name}.eps is {ours.eps} here but {theirs.eps} in PyTorch's")
    _copy_param(ours.weight, theirs.weight, f"{name}.weight")
    _copy_param(ours.bias, theirs.bias, f"{name}.bias")


def _copy_stack(ours: Encoder | Decoder, theirs: nn.Module, what: str) -> None:
    if len(ours.layers) != len(theirs.layers):
        raise ValueError(f"load_from_torch: {len(ours.layers)} layers here but {len(theirs.layers)} in {what}")
    for mine, other in zip(ours.layers, theirs.layers, strict=True):
        mine.load_from_torch(other)
    if ours.norm is None and theirs.norm is not None:
        raise ValueError(
            f"load_from_torch: {what} ends with a final LayerNorm but this post-LN stack has none (the paper's "
            f"post-LN layers already end with one). nn.Transformer adds it in both placements: set "
            f"`torch_module.norm = None` on it to compare with the paper's architecture.")
    if ours.norm is not None and theirs.norm is None:
        raise ValueError(f"load_from_torch: this pre-LN stack ends with a LayerNorm but {what} has no norm; "
                         f"build it with norm=nn.LayerNorm(d_model)")
    if ours.norm is not None:
        _copy_layer_norm(ours.norm, theirs.norm, "norm")
