"""The decoder block of today's open models (Llama, Mistral) and a small Llama-layout language model.

Three changes to the 2017 Transformer's layer, each a simplification or a measured gain:

- **RMSNorm** (Zhang & Sennrich 2019) instead of LayerNorm: no mean subtracted, no bias, only a rescaling by
  the root mean square, ``y = x / sqrt(mean(x^2) + eps) * g``; cheaper, and as good in practice;
- **SwiGLU** (Shazeer 2020) instead of the ReLU feed-forward: ``(silu(x W_gate) * (x W_up)) W_down``, a gated
  unit whose gate is the SiLU branch; three matrices, so the width ``d_ff`` is usually ``8/3 d_model`` to keep
  the parameters of a ``4 d_model`` ReLU block;
- **pre-norm** blocks with rotary positions and grouped-query attention
  (:class:`~course_lib.models.gqa.GroupedQueryAttention`)::

      x = x + Attention(RMSNorm(x))
      x = x + SwiGLU(RMSNorm(x))

The model: token embedding (no position embedding: positions live in the rotations), ``num_layers`` blocks,
a final RMSNorm and an output layer (``lm_head``), optionally tied to the embedding. Attribute names map one to
one onto Hugging Face's ``LlamaForCausalLM`` (``course_lib.models.pretrained.load_llama`` copies them).

Shapes: tokens ``(batch, seq)`` -> logits ``(batch, seq, vocab_size)``.

Example:
    >>> lm = Llama(vocab_size=100, d_model=32, num_heads=4, num_layers=2, num_kv_heads=2).eval()
    >>> lm(torch.randint(0, 100, (2, 7))).shape
    torch.Size([2, 7, 100])
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.models.gqa import GroupedQueryAttention
from course_lib.models.kv_cache import KVCache, SlidingWindowCache
from course_lib.models.layers import normal_init_
from course_lib.models.rope import Llama3Scaling
from course_lib.validation import check_positive_ints, validated_by

__all__ = ["RMSNorm", "SwiGLU", "swiglu_width", "LlamaBlock", "Llama"]


class RMSNorm(nn.Module):
    """Root-mean-square normalisation: ``y = x / sqrt(mean(x^2) + eps) * weight`` over the last axis.

    ``eps`` goes *inside* the square root, as in Llama (and T5); ``x / (sqrt(mean(x^2)) + eps)`` is a
    different function, visibly so for small activations. The statistics are computed in float32 whatever the
    input's dtype, and the result is cast back before the gain, as Hugging Face's ``LlamaRMSNorm`` does.

    Args:
        d_model: size of the normalised axis.
        eps: added to the mean square (Llama 1e-6 or 1e-5); must be > 0, or a row of zeros gives 0/0 = NaN.

    Shapes: ``x`` ``(..., d_model)`` -> ``(..., d_model)``.

    Example:
        >>> RMSNorm(2, eps=1e-6)(torch.tensor([[3.0, 4.0]]))       # rms = sqrt((9 + 16) / 2 + 1e-6)
        tensor([[0.8485, 1.1314]], grad_fn=<MulBackward0>)
    """

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        check_positive_ints("RMSNorm", d_model=d_model)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            raise ValueError(f"RMSNorm: eps must be a number > 0 (it keeps a row of zeros from dividing 0 by 0), "
                             f"got {eps!r}")
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))  # the gain g, one per feature

    def _check_forward(self, x: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 1 or x.shape[-1] != self.d_model:
            raise ValueError(f"RMSNorm: x must be a floating-point tensor of shape (..., d_model={self.d_model}), "
                             f"got {getattr(x, 'dtype', type(x).__name__)} {tuple(getattr(x, 'shape', ()))}")

    @validated_by(_check_forward)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.to(torch.float32)
        inverse_rms = torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        return self.weight * (x32 * inverse_rms).to(x.dtype)  # (..., d_model)

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"


def swiglu_width(d_model: int, multiple_of: int = 8) -> int:
    """The SwiGLU width with the parameters of a ``4 d_model`` ReLU feed-forward: ``8/3 d_model``, rounded up.

    Three ``d_model x d_ff`` matrices against two ``d_model x 4 d_model``: ``3 d_ff = 8 d_model``. Llama rounds
    up to a multiple of 256 at full size; small models here round to ``multiple_of``.

    Example:
        >>> swiglu_width(48), swiglu_width(4096, multiple_of=256)
        (128, 11008)
    """
    check_positive_ints("swiglu_width", d_model=d_model, multiple_of=multiple_of)
    return multiple_of * math.ceil(8 * d_model / 3 / multiple_of)


class SwiGLU(nn.Module):
    """The gated feed-forward block of Llama: ``SwiGLU(x) = (silu(x W_gate) * (x W_up)) W_down``.

    ``silu(z) = z * sigmoid(z)`` (Swish with beta = 1). The SiLU goes on the *gate* branch only; the other
    branch is linear. In Shazeer's notation ``FFN_SwiGLU(x) = (Swish(x W) * x V) W_2``: ``w_gate`` is ``W``,
    ``w_up`` is ``V``, ``w_down`` is ``W_2`` (Hugging Face's ``gate_proj``, ``up_proj``, ``down_proj``).

    Args:
        d_model: input and output width.
        d_ff: hidden width (default :func:`swiglu_width`).
        bias: biases on the three projections (Llama: none).

    Shapes: ``x`` ``(..., d_model)`` -> ``(..., d_model)``.

    Example:
        >>> ffn = SwiGLU(d_model=8, d_ff=24)
        >>> ffn(torch.randn(2, 3, 8)).shape
        torch.Size([2, 3, 8])
    """

    def __init__(self, d_model: int, d_ff: int | None = None, bias: bool = False) -> None:
        super().__init__()
        d_ff = swiglu_width(d_model) if d_ff is None else d_ff
        check_positive_ints("SwiGLU", d_model=d_model, d_ff=d_ff)
        self.w_gate = nn.Linear(d_model, d_ff, bias=bias)
        self.w_up = nn.Linear(d_model, d_ff, bias=bias)
        self.w_down = nn.Linear(d_ff, d_model, bias=bias)

    def _check_forward(self, x: torch.Tensor) -> None:
        d_model = self.w_gate.in_features
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 1 or x.shape[-1] != d_model:
            raise ValueError(f"SwiGLU: x must be a floating-point tensor of shape (..., d_model={d_model}), "
                             f"got {getattr(x, 'dtype', type(x).__name__)} {tuple(getattr(x, 'shape', ()))}")

    @validated_by(_check_forward)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = F.silu(self.w_gate(x)) * self.w_up(x)  # (..., d_ff): the gate times the linear branch
        return self.w_down(hidden)  # (..., d_model)


class LlamaBlock(nn.Module):
    """One pre-norm decoder block: ``x + Attention(RMSNorm(x))``, then ``x + SwiGLU(RMSNorm(x))``.

    Args: as :class:`Llama` (the block's share of them); ``attention_bias`` and ``mlp_bias`` put biases on
    the attention's and the feed-forward's projections.

    Names: ``norm1`` (Hugging Face's ``input_layernorm``), ``self_attn``, ``norm2``
    (``post_attention_layernorm``), ``feed_forward`` (``mlp``).

    Shapes: ``x`` ``(batch, seq, d_model)``, ``cache`` this layer's :class:`~course_lib.models.kv_cache.KVCache` or
    None, ``mask`` an optional extra boolean mask (see :class:`~course_lib.models.gqa.GroupedQueryAttention`)
    -> ``(batch, seq, d_model)``.

    Example:
        >>> block = LlamaBlock(d_model=16, num_heads=4, num_kv_heads=2).eval()
        >>> block(torch.randn(2, 5, 16)).shape
        torch.Size([2, 5, 16])
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int | None = None, d_ff: int | None = None,
                 norm_eps: float = 1e-6, rope_base: float | Llama3Scaling = 10000.0, rope_layout: str = "half",
                 window: int | None = None, d_k: int | None = None, attention_bias: bool = False,
                 mlp_bias: bool = False) -> None:
        super().__init__()
        self.norm1 = RMSNorm(d_model, norm_eps)
        self.self_attn = GroupedQueryAttention(d_model, num_heads, num_kv_heads, d_k, attention_bias, rope_base,
                                               rope_layout, window)
        self.norm2 = RMSNorm(d_model, norm_eps)
        self.feed_forward = SwiGLU(d_model, d_ff, mlp_bias)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, mask: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.self_attn(self.norm1(x), cache, mask, positions=positions)[0]  # (batch, seq, d_model)
        return x + self.feed_forward(self.norm2(x))


class Llama(nn.Module):
    """A Llama-layout causal language model: embedding, pre-norm RoPE/GQA/SwiGLU blocks, RMSNorm, ``lm_head``.

    Args:
        vocab_size: number of token ids.
        d_model, num_heads, num_layers: width, query heads, depth.
        num_kv_heads: key/value heads (default ``num_heads``; fewer is GQA, 1 is MQA).
        d_ff: SwiGLU width (default :func:`swiglu_width`).
        max_len: the context the model is meant for (Hugging Face's ``max_position_embeddings``). RoPE has no
            table that ends there, so it is recorded, not enforced; a ``window`` bounds what each query sees.
        norm_eps: the RMSNorms' epsilon.
        rope_base, rope_layout: RoPE's base (``rope_theta``, or a :class:`~course_lib.models.rope.Llama3Scaling` for
            Llama 3.1's scaled frequencies) and pairing (``"half"`` for Hugging Face's
            checkpoints, ``"interleaved"`` for Meta's original ones).
        window: sliding-window attention length (Mistral), or None.
        tie_weights: share ``lm_head``'s weight with the token embedding.
        d_k: features per head (default ``d_model // num_heads``).
        attention_bias, mlp_bias: biases on the projections (Llama: none).

    Initialisation as Hugging Face's: N(0, 0.02^2) for every matrix, zeros for biases, ones for the norms.

    Shapes: ``tokens`` integer ``(batch, seq)``; ``cache`` None or one :class:`~course_lib.models.kv_cache.KVCache`
    per layer (:meth:`make_cache`), the tokens following its ``seen`` positions; ``positions`` optional integer
    ``(seq,)`` or ``(batch, seq)``, the positions the rotations use (Hugging Face's ``position_ids``; default the
    token indices) -> logits ``(batch, seq, vocab_size)``.

    Example (generation with a cache, one token at a time after the prompt):
        >>> lm = Llama(vocab_size=50, d_model=16, num_heads=4, num_layers=2, num_kv_heads=1).eval()
        >>> tokens = torch.randint(0, 50, (1, 6))
        >>> cache = lm.make_cache()
        >>> logits = torch.cat([lm(tokens[:, :5], cache), lm(tokens[:, 5:], cache)], dim=1)
        >>> torch.allclose(logits, lm(tokens), atol=1e-5), cache[0].seen
        (True, 6)
    """

    def __init__(self, vocab_size: int, d_model: int = 128, num_heads: int = 4, num_layers: int = 4,
                 num_kv_heads: int | None = None, d_ff: int | None = None, max_len: int = 2048,
                 norm_eps: float = 1e-6, rope_base: float | Llama3Scaling = 10000.0, rope_layout: str = "half",
                 window: int | None = None, tie_weights: bool = False, d_k: int | None = None,
                 attention_bias: bool = False, mlp_bias: bool = False) -> None:
        super().__init__()
        check_positive_ints("Llama", minimum=2, vocab_size=vocab_size)
        check_positive_ints("Llama", d_model=d_model, num_heads=num_heads, num_layers=num_layers, max_len=max_len)
        self.vocab_size, self.d_model, self.max_len, self.window = vocab_size, d_model, max_len, window
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(
            LlamaBlock(d_model, num_heads, num_kv_heads, d_ff, norm_eps, rope_base, rope_layout, window, d_k,
                       attention_bias, mlp_bias) for _ in range(num_layers))
        self.norm = RMSNorm(d_model, norm_eps)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self._reset_parameters()
        if tie_weights:
            self.lm_head.weight = self.token_embedding.weight  # one matrix: embedding in, logits out

    def _reset_parameters(self) -> None:
        """Llama's initialisation (Hugging Face's ``initializer_range`` 0.02): the course's one, unscaled."""
        normal_init_(self, 0.02)

    def make_cache(self) -> list[KVCache]:
        """One empty cache per layer: a :class:`~course_lib.models.kv_cache.SlidingWindowCache` when the model has a
        window (memory bounded by the window: generation runs past ``max_len``), else a plain KVCache.

        Example:
            >>> Llama(vocab_size=10, d_model=8, num_heads=2, num_layers=3, window=4).make_cache()[0]
            SlidingWindowCache(window=4, length=0, seen=0)
        """
        return [SlidingWindowCache(self.window) if self.window else KVCache() for _ in self.layers]

    def _check(self, tokens: torch.Tensor, cache: list[KVCache] | None) -> None:
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point() \
                or tokens.dtype == torch.bool or tokens.shape[1] < 1:
            raise ValueError(f"Llama: tokens must be an integer tensor of shape (batch, seq >= 1), got "
                             f"{getattr(tokens, 'dtype', type(tokens).__name__)} "
                             f"{tuple(getattr(tokens, 'shape', ()))}")
        if tokens.numel():
            low, high = (int(v) for v in torch.aminmax(tokens))
            if low < 0 or high >= self.vocab_size:
                raise ValueError(f"Llama: token ids must be in [0, vocab_size={self.vocab_size}), got [{low}, {high}]")
        if cache is not None and (not isinstance(cache, (list, tuple)) or len(cache) != len(self.layers)):
            raise ValueError(f"Llama: cache must be a list of {len(self.layers)} KVCache (one per layer, "
                             f"model.make_cache()), got {type(cache).__name__} of length "
                             f"{len(cache) if isinstance(cache, (list, tuple)) else '-'}")

    def hidden_states(self, tokens: torch.Tensor, cache: list[KVCache] | None = None,
                      mask: torch.Tensor | None = None, positions: torch.Tensor | None = None) -> torch.Tensor:
        """The final RMSNorm's output: ``(batch, seq)`` -> ``(batch, seq, d_model)``; ``cache`` is updated."""
        self._check(tokens, cache)
        x = self.token_embedding(tokens)  # (batch, seq, d_model)
        for i, layer in enumerate(self.layers):
            x = layer(x, None if cache is None else cache[i], mask, positions)
        return self.norm(x)

    def forward(self, tokens: torch.Tensor, cache: list[KVCache] | None = None,
                mask: torch.Tensor | None = None, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Next-token logits at every position: ``(batch, seq)`` -> ``(batch, seq, vocab_size)``."""
        return self.lm_head(self.hidden_states(tokens, cache, mask, positions))
