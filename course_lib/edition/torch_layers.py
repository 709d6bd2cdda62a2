"""Hand the course's layers' weights to PyTorch's own Transformer layers (shipped in the class edition).

The class edition's stand-ins for the graded layers (:mod:`course_lib.edition.backed`) run PyTorch's
``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` with the course module's own parameters
(``torch.func.functional_call``: the same tensors, so gradients reach the course module and training works).
This module holds what they share: the course's mask turned into PyTorch's, and the course's parameter names
turned into PyTorch's. Nothing here computes attention, a layer or any other graded result.

The names follow ``load_from_torch`` (:mod:`course_lib.models.layers`): PyTorch's ``in_proj_weight`` is the course's
``w_q``, ``w_k`` and ``w_v`` stacked (rows ``0..d-1`` are W^Q), ``out_proj`` is ``w_o``; the decoder's
cross-attention is ``multihead_attn`` in PyTorch and ``cross_attn`` in the course.

Example:
    >>> import torch
    >>> blocked_mask(torch.tensor([[True, False]]), batch=1, heads=2, seq_q=1, seq_k=2).tolist()
    [[[False, True]], [[False, True]]]
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["blocked_mask", "attention_parameters", "layer_parameters", "run_torch_layer", "CourseAttention"]


def blocked_mask(mask: torch.Tensor | None, batch: int, heads: int, seq_q: int, seq_k: int) -> torch.Tensor | None:
    """The course's mask (boolean, True = may attend, broadcastable to (batch, heads, seq_q, seq_k)) as PyTorch's
    ``attn_mask`` (True = may NOT attend) of shape (batch * heads, seq_q, seq_k); None stays None."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor (True = may attend) or None, got "
                        f"{getattr(mask, 'dtype', type(mask).__name__)}")
    full = mask.reshape((1,) * max(0, 4 - mask.dim()) + tuple(mask.shape))
    full = full.expand(batch, heads, seq_q, seq_k)  # (batch, heads, seq_q, seq_k)
    return ~full.reshape(batch * heads, seq_q, seq_k)  # PyTorch's convention: True = may NOT attend


def _bias(linear: nn.Linear) -> torch.Tensor:
    """A linear map's bias, zeros when it has none (PyTorch's layers keep one)."""
    return linear.bias if linear.bias is not None else linear.weight.new_zeros(linear.out_features)


def attention_parameters(prefix: str, attention: Any) -> dict[str, torch.Tensor]:
    """The course ``MultiHeadAttention``'s weights under ``nn.MultiheadAttention``'s names at ``prefix``."""
    return {
        f"{prefix}.in_proj_weight": torch.cat([attention.w_q.weight, attention.w_k.weight, attention.w_v.weight]),
        f"{prefix}.in_proj_bias": torch.cat([_bias(attention.w_q), _bias(attention.w_k), _bias(attention.w_v)]),
        f"{prefix}.out_proj.weight": attention.w_o.weight,
        f"{prefix}.out_proj.bias": _bias(attention.w_o),
    }


def layer_parameters(layer: Any, attentions: dict[str, str], norms: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """A course layer's weights under PyTorch's layer names: ``attentions`` maps PyTorch's attribute to the
    course's (``{"multihead_attn": "cross_attn"}``); the feed-forward block and the LayerNorms keep their names."""
    params: dict[str, torch.Tensor] = {}
    for theirs, ours in attentions.items():
        params.update(attention_parameters(theirs, getattr(layer, ours)))
    for name in ("linear1", "linear2"):
        linear = getattr(layer.feed_forward, name)
        params[f"{name}.weight"], params[f"{name}.bias"] = linear.weight, _bias(linear)
    for name in norms:
        norm = getattr(layer, name)
        params[f"{name}.weight"], params[f"{name}.bias"] = norm.weight, norm.bias
    return params


class CourseAttention(nn.Module):
    """Fills the ``self_attn`` slot of PyTorch's layer with the course's attention module, so that a key/value
    cache reaches it: PyTorch's layer still does the wiring (norms, residuals, dropout, feed-forward), and
    the attention is the course module's forward (in the class edition, PyTorch's
    ``F.multi_head_attention_forward``: :func:`course_lib.edition.backed.multi_head_attention_forward`).

    ``batch_first`` is False so that PyTorch's layer takes its Python path (which calls this module), never
    its fused kernel (which reads ``in_proj_weight`` and would bypass the cache). The course module is held
    as a plain attribute, not a submodule: its weights stay its own, and gradients reach them.
    """

    batch_first = False

    def __init__(self, attention: Any, mask: torch.Tensor | None, cache: Any) -> None:
        super().__init__()
        object.__setattr__(self, "attention", attention)
        self.mask, self.cache = mask, cache

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **_: Any
                ) -> tuple[torch.Tensor, None]:
        """PyTorch's layer calls ``self_attn(x, x, x, attn_mask=None, ...)``: attend with the course's mask
        (True = may attend) and cache instead. Shapes: (batch, new, d_model) -> (batch, new, d_model)."""
        return self.attention(query, key, value, mask=self.mask, cache=self.cache)[0], None


def run_torch_layer(kind: type[nn.Module], layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                    attentions: dict[str, str], norms: tuple[str, ...],
                    course_attention: CourseAttention | None = None) -> torch.Tensor:
    """Run PyTorch's layer class ``kind`` (``nn.TransformerEncoderLayer`` or ``nn.TransformerDecoderLayer``)
    with the weights, sizes, dropout and train/eval mode of the course layer ``layer``.

    PyTorch's layer is built on the ``meta`` device (no memory of its own) and every one of its parameters is
    replaced by the course layer's tensor for the call, so the result and the gradients are the course layer's.
    ``course_attention``: put in PyTorch's ``self_attn`` slot (a key/value cache; then ``attentions`` must not
    name ``self_attn``).
    """
    from torch.func import functional_call

    attention, ffn = layer.self_attn, layer.feed_forward
    torch_layer = kind(layer.d_model, attention.num_heads, ffn.linear1.out_features, dropout=float(attention.dropout),
                       activation=ffn.activation, layer_norm_eps=getattr(layer, norms[0]).eps, batch_first=True,
                       norm_first=layer.norm_first, device="meta")
    if course_attention is not None:
        torch_layer.self_attn = course_attention
    torch_layer.train(layer.training)
    return functional_call(torch_layer, layer_parameters(layer, attentions, norms), args, kwargs, strict=True)
