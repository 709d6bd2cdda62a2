# notebook: 15_inference_at_scale
# exercise: online_softmax
# expect: forbidden
# The edition's online_softmax_attention pasted, then used as a softmax: one query of ones against the keys x
# (d_k = 1) with the identity as values gives softmax(x).
import torch


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


def online_softmax(x, dim=-1, tile_size=32):
    rows = x.movedim(dim, -1)
    n = rows.shape[-1]
    ones = torch.ones(*rows.shape[:-1], 1, 1, dtype=x.dtype)
    identity = torch.eye(n, dtype=x.dtype).expand(*rows.shape[:-1], n, n)
    return online_softmax_attention(ones, rows[..., None], identity)[..., 0, :].movedim(-1, dim)
