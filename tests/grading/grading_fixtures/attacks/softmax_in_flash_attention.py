# expect: forbidden
# Family 1: PyTorch's softmax through its CPU flash-attention kernel, which runs no operator named softmax:
# softmax(x) = softmax(x @ I^T) @ I, every row a query of one head.
import torch
import torch.nn.functional as F


def stable_softmax(x, dim=-1):
    moved = x.movedim(dim, -1).contiguous()
    n = moved.shape[-1]
    eye = torch.eye(n, dtype=x.dtype)[None, None]  # (1, 1, n, n): keys and values
    out = F.scaled_dot_product_attention(moved.reshape(1, 1, -1, n), eye, eye, scale=1.0)  # (1, 1, rows, n)
    return out.reshape(moved.shape).movedim(-1, dim)
