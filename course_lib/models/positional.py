"""Positional information for attention, which by itself cannot see word order (notebook 03).

Attention is permutation-equivariant: shuffle the input tokens and its outputs are shuffled the same way.
To tell "dog bites man" from "man bites dog", the paper adds to each token embedding a vector that depends
on the token's position (section 3.5):

.. math::

    PE_{(pos, 2i)} = \\sin\\left(pos / 10000^{2i/d_{model}}\\right), \\qquad
    PE_{(pos, 2i+1)} = \\cos\\left(pos / 10000^{2i/d_{model}}\\right).

Each pair of dimensions ``(2i, 2i+1)`` is a point turning on a circle with angular frequency
``omega_i = 10000^(-2i/d_model)``, so for any offset ``k`` a fixed rotation ``M_k`` (:func:`offset_matrix`)
maps ``PE[pos]`` to ``PE[pos + k]`` for every ``pos``.

Public names:

* :func:`sinusoidal_table` - the (max_len, d_model) table of the formula above;
* :func:`sinusoidal_frequencies` - the angular frequencies omega_i (wavelengths ``2 pi / omega_i``);
* :func:`offset_matrix` - the (d_model, d_model) rotation M_k with ``PE[pos + k] = M_k @ PE[pos]``;
* :class:`PositionalEncoding` - adds the fixed table to a batch (the paper's choice);
* :class:`LearnedPositionalEmbedding` - adds a trained table instead (BERT, GPT-2, ViT).

Example:
    >>> pe = PositionalEncoding(d_model=8, max_len=50)
    >>> pe(torch.zeros(2, 10, 8)).shape
    torch.Size([2, 10, 8])
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = [
    "sinusoidal_table",
    "sinusoidal_frequencies",
    "offset_matrix",
    "PositionalEncoding",
    "LearnedPositionalEmbedding",
]


def _require_even_d_model(d_model: object, fn: str) -> None:
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 2 or d_model % 2:
        raise ValueError(f"{fn}: d_model must be an even int >= 2 (dimensions come in sin/cos pairs "
                         f"(2i, 2i+1)), got {d_model!r}")


def sinusoidal_frequencies(d_model: int) -> torch.Tensor:
    """The angular frequencies ``omega_i = 1 / 10000^(2i / d_model)`` for ``i = 0 .. d_model/2 - 1``.

    Dimension pair ``(2i, 2i+1)`` turns with frequency ``omega_i``: its wavelength ``2 pi / omega_i`` grows
    geometrically from ``2 pi`` (i = 0) towards ``10000 * 2 pi``.

    Shapes: -> float32 (d_model // 2,).

    Example:
        >>> sinusoidal_frequencies(4)
        tensor([1.0000, 0.0100])
    """
    _require_even_d_model(d_model, "sinusoidal_frequencies")
    return _frequencies64(d_model).float()


def _frequencies64(d_model: int) -> torch.Tensor:
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model/2,): 0, 2, 4, ...
    return 1.0 / 10000 ** (two_i / d_model)


def sinusoidal_table(max_len: int, d_model: int) -> torch.Tensor:
    """The paper's sinusoidal positional encodings for positions ``0 .. max_len - 1``.

    ``PE[pos, 2i] = sin(pos / 10000^(2i/d_model))`` and ``PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model))``:
    even columns hold sines, odd columns cosines, and both columns of a pair share one frequency. Computed
    in float64 and returned in float32, so that large positions keep their precision.

    Shapes: -> float32 (max_len, d_model). ``d_model`` must be even.

    Example:
        >>> sinusoidal_table(3, 4)
        tensor([[ 0.0000,  1.0000,  0.0000,  1.0000],
                [ 0.8415,  0.5403,  0.0100,  0.9999],
                [ 0.9093, -0.4161,  0.0200,  0.9998]])
    """
    if d_model < 2 or d_model % 2 != 0:
        raise ValueError(f"sinusoidal_table: d_model must be even and >= 2 (sin/cos pairs), got d_model={d_model}")
    if max_len < 1:
        raise ValueError(f"sinusoidal_table: max_len must be >= 1, got max_len={max_len}")
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model/2,): the even indices 2i
    angle = pos / 10000 ** (two_i / d_model)  # (max_len, d_model/2), in radians
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)  # columns 0, 2, 4, ...
    table[:, 1::2] = torch.cos(angle)  # columns 1, 3, 5, ...
    return table.float()


def offset_matrix(k: int | float, d_model: int) -> torch.Tensor:
    """The fixed linear map ``M_k`` with ``PE[pos + k] = M_k @ PE[pos]`` for every position ``pos``.

    Why it exists (the paper's motivation): with ``theta = pos * omega_i`` and ``delta = k * omega_i``,
    the angle-sum identities give, for each pair (sin, cos),

        sin(theta + delta) =  cos(delta) sin(theta) + sin(delta) cos(theta)
        cos(theta + delta) = -sin(delta) sin(theta) + cos(delta) cos(theta),

    a rotation by ``delta`` that depends on the offset ``k`` but not on ``pos``. ``M_k`` is block
    diagonal with one 2x2 rotation per frequency; it is orthogonal, and ``M_{-k}`` is its inverse.

    Shapes: -> float32 (d_model, d_model). Acting on rows: ``table[pos + k] = table[pos] @ M_k.T``.

    Example:
        >>> table = sinusoidal_table(20, 8)
        >>> torch.allclose(table[:15] @ offset_matrix(5, 8).T, table[5:], atol=1e-5)
        True
    """
    _require_even_d_model(d_model, "offset_matrix")
    delta = k * _frequencies64(d_model)  # (d_model/2,): the rotation angle of each pair
    cos, sin = torch.cos(delta), torch.sin(delta)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    even = torch.arange(0, d_model, 2)
    m[even, even] = cos  # new sin <- cos(delta) * sin
    m[even, even + 1] = sin  # new sin <- sin(delta) * cos
    m[even + 1, even] = -sin  # new cos <- -sin(delta) * sin
    m[even + 1, even + 1] = cos  # new cos <- cos(delta) * cos
    return m.float()


def _require_activations(x: object, d_model: int, max_len: int, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"{name}: x must have shape (batch, seq, d_model={d_model}), got {tuple(x.shape)}")
    if x.shape[1] > max_len:
        raise ValueError(f"{name}: the sequence is longer than max_len: x has seq={x.shape[1]} positions "
                         f"(shape {tuple(x.shape)}) but the table was built for max_len={max_len}; build "
                         f"the module with a larger max_len")


class PositionalEncoding(nn.Module):
    """Add the paper's fixed sinusoidal encodings to a batch of embeddings, then apply dropout.

    ``forward(x) = dropout(x + PE[:seq])`` (section 3.5; the paper uses dropout 0.1 here). The table is a
    non-persistent buffer: it moves with ``.to(device)`` but is not saved in the ``state_dict`` (it is a
    function of ``max_len`` and ``d_model``, not a parameter). The paper multiplies token embeddings by
    ``sqrt(d_model)`` *before* this module; that scaling belongs to the embedding, not here.

    Shapes: ``x`` (batch, seq, d_model) with ``seq <= max_len`` -> (batch, seq, d_model).

    Example:
        >>> pe = PositionalEncoding(d_model=4, max_len=10)
        >>> pe(torch.zeros(1, 2, 4))[0, 1]
        tensor([0.8415, 0.5403, 0.0100, 0.9999])
    """

    pe: torch.Tensor

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0) -> None:
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)  # (max_len, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _require_activations(x, self.d_model, self.max_len, "PositionalEncoding")
        seq = x.shape[1]
        return self.dropout(x + self.pe[:seq].to(x.dtype))  # (batch, seq, d_model) + (seq, d_model)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"


class LearnedPositionalEmbedding(nn.Module):
    """Add a trained vector per position (BERT, GPT-2 and ViT do this instead of sinusoids).

    ``forward(x) = dropout(x + embedding(0 .. seq-1))``. The table starts as N(0, 0.02^2) noise (as in
    BERT and GPT-2) and is learned with the rest of the model. Unlike the sinusoidal table it has no rows
    beyond ``max_len``, and rows for positions never seen in training stay at their random start: it
    cannot extrapolate to longer sequences.

    Shapes: ``x`` (batch, seq, d_model) with ``seq <= max_len`` -> (batch, seq, d_model).

    Example:
        >>> emb = LearnedPositionalEmbedding(max_len=16, d_model=8)
        >>> emb(torch.zeros(2, 5, 8)).shape
        torch.Size([2, 5, 8])
    """

    def __init__(self, max_len: int, d_model: int, dropout: float = 0.0) -> None:
        super().__init__()
        if max_len < 1 or d_model < 1:
            raise ValueError(f"LearnedPositionalEmbedding: max_len and d_model must be >= 1, got "
                             f"max_len={max_len}, d_model={d_model}")
        self.d_model, self.max_len = d_model, max_len
        self.embedding = nn.Embedding(max_len, d_model)  # one row per position
        nn.init.normal_(self.embedding.weight, mean=0.0, std=0.02)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _require_activations(x, self.d_model, self.max_len, "LearnedPositionalEmbedding")
        positions = torch.arange(x.shape[1], device=x.device)  # (seq,)
        return self.dropout(x + self.embedding(positions))  # (batch, seq, d_model) + (seq, d_model)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}"
