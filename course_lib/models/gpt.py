"""The decoder-only language model (GPT): the Transformer's encoder stack under a causal mask.

GPT (Radford et al. 2018) and GPT-2 (2019) keep one stack of the Transformer and drop the other: there is
no source sentence, so no cross-attention. What remains is exactly the course's :class:`~course_lib.Encoder`
(self-attention and feed-forward blocks) with one change, the **causal mask**, so that position ``i`` sees
tokens ``0..i`` only and can be trained to predict token ``i + 1``. GPT-2's layout, expressed with the
course's parts:

- token embedding + learned positions (:class:`~course_lib.LearnedPositionalEmbedding`);
- ``num_layers`` pre-LN blocks (``norm_first=True``) with GELU (GPT-2 uses the tanh approximation,
  ``activation="gelu_tanh"``) and LayerNorm epsilon ``layer_norm_eps`` (1e-5 in GPT-2);
- a final LayerNorm (the pre-LN Encoder's own) and an output layer that shares its weight matrix with the
  token embedding (**weight tying**, as in the paper's section 3.4 and in GPT-2), without bias;
- GPT-2's initialisation: N(0, 0.02^2) everywhere, the projections that write into the residual stream
  (``w_o`` and the second feed-forward linear) scaled by ``1 / sqrt(2 * num_layers)``.

Shapes: ``tokens`` (batch, seq) of ids with ``seq <= max_len`` -> logits (batch, seq, vocab_size).

Generation feeds only the new tokens with a **key/value cache**, one :class:`~course_lib.models.kv_cache.KVCache` per
layer (``GPT.forward(tokens, cache=[KVCache() for _ in range(model.num_layers)])``, as Hugging Face's models
take their ``past_key_values``): positions continue at ``cache[0].seen``, and the logits equal those of the
whole sequence.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.models.kv_cache import KVCache
from course_lib.models.layers import Encoder, normal_init_
from course_lib.models.masking import causal_mask
from course_lib.models.positional import LearnedPositionalEmbedding
from course_lib.validation import check_positive_ints

__all__ = ["GPT"]


class GPT(nn.Module):
    """A decoder-only Transformer language model (GPT-2's layout) built from the course's layers.

    Args:
        vocab_size: number of token ids.
        d_model, num_heads, num_layers: the stack's width, heads and depth.
        d_ff: feed-forward width (default ``4 * d_model``, as in GPT-2).
        max_len: the longest context (number of learned positions).
        dropout: dropout on embeddings, attention weights and residual branches.
        activation: ``"gelu_tanh"`` (GPT-2), ``"gelu"`` or ``"relu"``.
        layer_norm_eps: the LayerNorms' epsilon.
        tie_weights: share the output layer's weight with the token embedding.

    Example:
        >>> lm = GPT(vocab_size=50, d_model=16, num_heads=2, num_layers=2, max_len=32).eval()
        >>> lm(torch.randint(0, 50, (3, 10))).shape
        torch.Size([3, 10, 50])
    """

    def __init__(self, vocab_size: int, d_model: int = 128, num_heads: int = 4, num_layers: int = 4,
                 d_ff: int | None = None, max_len: int = 256, dropout: float = 0.0,
                 activation: str = "gelu_tanh", layer_norm_eps: float = 1e-5, tie_weights: bool = True) -> None:
        super().__init__()
        check_positive_ints("GPT", minimum=2, vocab_size=vocab_size)
        check_positive_ints("GPT", d_model=d_model, num_heads=num_heads, num_layers=num_layers, max_len=max_len)
        self.vocab_size, self.d_model, self.max_len = vocab_size, d_model, max_len
        self.num_heads, self.num_layers = num_heads, num_layers
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.positions = LearnedPositionalEmbedding(max_len, d_model, dropout)
        # The encoder stack, pre-LN, with its final LayerNorm: GPT-2's blocks and ln_f.
        self.blocks = Encoder(num_layers, d_model, num_heads, d_ff or 4 * d_model, dropout, norm_first=True,
                              activation=activation, layer_norm_eps=layer_norm_eps)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self._reset_parameters()
        if tie_weights:
            self.lm_head.weight = self.token_embedding.weight  # one matrix: embedding in, logits out

    def _reset_parameters(self) -> None:
        """GPT-2's initialisation (see the module docstring): the course's one, with the residual writes scaled."""
        normal_init_(self, 0.02, residual=("self_attn.w_o.weight", "feed_forward.linear2.weight"),
                     num_layers=self.num_layers)

    def _check_ids(self, tokens: torch.Tensor, who: str = "GPT") -> None:
        """Raise a ValueError unless ``tokens`` is an integer (batch, seq) tensor of ids in ``[0, vocab_size)``
        with seq >= 1; ``who`` names the caller in the message (the cached path has its own length rule)."""
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point() \
                or tokens.dtype == torch.bool:
            raise ValueError(f"{who}: tokens must be an integer tensor of shape (batch, seq), got "
                             f"{getattr(tokens, 'dtype', type(tokens).__name__)} "
                             f"{tuple(getattr(tokens, 'shape', ()))}")
        if tokens.shape[1] < 1:
            raise ValueError(f"{who}: tokens must hold at least one position, got shape {tuple(tokens.shape)}")
        if tokens.numel():
            low, high = (int(v) for v in torch.aminmax(tokens))  # one pass, one read back
            if low < 0 or high >= self.vocab_size:
                raise ValueError(f"{who}: token ids must be in [0, vocab_size={self.vocab_size}), got "
                                 f"[{low}, {high}]")

    def _check_tokens(self, tokens: torch.Tensor) -> None:
        self._check_ids(tokens)
        self._check_length(tokens.shape[1])

    def _check_length(self, seq: int, start: int = 0) -> None:
        """Raise a ValueError unless positions ``start .. start + seq - 1`` have learned embeddings."""
        if start + seq > self.max_len:
            after = f" after {start} cached positions" if start else ""
            raise ValueError(f"GPT: tokens has seq={seq}{after}; it must be between 1 and max_len={self.max_len}"
                             + (f" - {start} = {self.max_len - start}" if start else ""))

    def _check_cache(self, cache: list[KVCache], tokens: torch.Tensor) -> int:
        """Raise a ValueError unless ``cache`` holds one KVCache per layer, all at one position, for this batch;
        return that position (where the new tokens start)."""
        if not isinstance(cache, list | tuple) or len(cache) != self.num_layers \
                or not all(isinstance(c, KVCache) for c in cache):
            raise ValueError(f"GPT: cache must be a list of {self.num_layers} KVCache (one per layer), got "
                             f"{type(cache).__name__} of {[type(c).__name__ for c in cache][:4]}")
        seen = {c.seen for c in cache}
        if len(seen) != 1:
            raise ValueError(f"GPT: the layers' caches have seen different numbers of positions {sorted(seen)}")
        stored = cache[0].keys
        if stored is not None and stored.shape[0] != tokens.shape[0]:
            raise ValueError(f"GPT: the cache holds batch {stored.shape[0]}, tokens has batch {tokens.shape[0]}")
        return cache[0].seen

    def embed(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Token embedding plus the learned positions ``start .. start + seq - 1``: (batch, seq, d_model)."""
        x = self.token_embedding(tokens)  # (batch, seq, d_model)
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)  # (seq,)
        return self.positions.dropout(x + self.positions.embedding(positions))

    def hidden_states(self, tokens: torch.Tensor, cache: list[KVCache] | None = None) -> torch.Tensor:
        """The final LayerNorm's output: (batch, seq) -> (batch, seq, d_model); ``cache`` as in :meth:`forward`."""
        if cache is None:
            self._check_tokens(tokens)
            mask = causal_mask(tokens.shape[1], device=tokens.device)  # (seq, seq), True = may attend
            return self.blocks(self.embed(tokens), mask)
        self._check_ids(tokens)
        start = self._check_cache(cache, tokens)
        self._check_length(tokens.shape[1], start)
        # no mask: each layer's attention masks its cache causally by position (KVCache.causal_mask)
        return self.blocks(self.embed(tokens, start=start), cache=cache)

    def make_cache(self) -> list[KVCache]:
        """An empty key/value cache for :meth:`forward`: one :class:`~course_lib.models.kv_cache.KVCache` per layer."""
        return [KVCache() for _ in range(self.num_layers)]

    def forward(self, tokens: torch.Tensor, cache: list[KVCache] | None = None) -> torch.Tensor:
        """Next-token logits at every position: (batch, seq) -> (batch, seq, vocab_size).

        With ``cache`` (one :class:`~course_lib.models.kv_cache.KVCache` per layer, empty at first) ``tokens`` are the
        positions after those the cache has seen: each layer appends their keys and values, and the logits
        equal those the whole sequence would give at these positions (generation feeds the prompt, then one
        token at a time).
        """
        return self.lm_head(self.hidden_states(tokens, cache))

    @torch.no_grad()
    def attention_weights(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """Each block's attention weights: a list of (batch, num_heads, seq, seq), zero above the diagonal."""
        self._check_tokens(tokens)
        mask = causal_mask(tokens.shape[1], device=tokens.device)
        return self.blocks.attention_weights(self.embed(tokens), mask)
