"""Rotary position embeddings (RoPE; Su et al. 2021), built on notebook 03's sinusoidal frequencies.

Notebook 03 showed that the sinusoidal table turns each pair of dimensions on a circle with frequency
``omega_i = base^(-2i/d)``, so that moving ``k`` positions is a fixed rotation. RoPE uses that rotation
directly: instead of *adding* a position vector to the embedding, it *rotates* each query and key of a head,
pair by pair, by the angle ``position * omega_i``:

.. math::

    \\begin{pmatrix} x'_a \\\\ x'_b \\end{pmatrix} =
    \\begin{pmatrix} \\cos p\\omega_i & -\\sin p\\omega_i \\\\ \\sin p\\omega_i & \\cos p\\omega_i \\end{pmatrix}
    \\begin{pmatrix} x_a \\\\ x_b \\end{pmatrix}.

A rotation keeps lengths and ``R(m)^T R(n) = R(n - m)``, so the score ``(R(m) q) . (R(n) k) = q . R(n - m) k``
depends on the two positions only through their offset ``n - m``: relative positions, with nothing to learn
and no table that ends at ``max_len``.

Which two features form a pair is a convention, and both are in use (confusing them is a classic bug):

- ``"interleaved"``: pairs ``(2i, 2i+1)``, as in notebook 03's table, GPT-J, and Meta's original Llama code
  (which views each pair as one complex number and multiplies by ``e^{i p omega_i}``);
- ``"half"``: pairs ``(i, i + d_k/2)``, "rotate half", as in Hugging Face's Llama, Mistral and GPT-NeoX.

They differ by a fixed permutation of each head's features (:func:`rope_permutation`). Applying it to the
rows of ``W_q`` and ``W_k`` (:func:`convert_rope_weight`, what Hugging Face's Llama conversion script does)
turns a checkpoint of one layout into the other with the same attention scores.

**Frequencies.** Checkpoints were trained with the frequencies computed in float32 by one formula,
``1 / base ** (arange(0, d_k, 2) / d_k)`` (Meta's code, Hugging Face's, LitGPT's); :func:`rope_frequencies` computes
them the same way, operation for operation, so that the cos/sin tables equal Hugging Face's bit for bit at every
position. (Notebook 03's :func:`~course_lib.models.positional.sinusoidal_frequencies`, computed in float64 and
rounded once, is closer to the exact numbers but differs by an ulp or two: at position 8192 that is 3e-5 in a
cosine with base 1e4 and 5e-4 with base 5e5, and 1e-2 in a model's logits.) Llama 3.1's **frequency scaling**
(:class:`Llama3Scaling`, ``rope_scaling`` in ``config.json``) slows the low frequencies down for long contexts.

Shapes: ``x`` ``(..., seq, d_k)`` (e.g. ``(batch, heads, seq, d_k)``; another axis with ``seq_dim``),
``positions`` ``(seq,)`` or ``(batch, seq)`` integer absolute positions (with a key/value cache they start at
``cache.seen``).

Example:
    >>> q = torch.randn(1, 2, 5, 8)                       # (batch, heads, seq, d_k)
    >>> apply_rope(q, torch.arange(5)).shape
    torch.Size([1, 2, 5, 8])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from course_lib.validation import validated_by

__all__ = [
    "ROPE_LAYOUTS",
    "Llama3Scaling",
    "rope_frequencies",
    "rope_angles",
    "apply_rope",
    "rope_rotation",
    "rope_permutation",
    "convert_rope_layout",
    "convert_rope_weight",
]

#: The two ways of pairing a head's features: ``"half"`` (i, i + d_k/2) and ``"interleaved"`` (2i, 2i+1).
ROPE_LAYOUTS = ("half", "interleaved")


def _require_layout(layout: object, who: str, name: str = "layout") -> None:
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"{who}: {name} must be one of {ROPE_LAYOUTS}, got {layout!r}")


def _require_d_k(d_k: object, who: str) -> None:
    if isinstance(d_k, bool) or not isinstance(d_k, int) or d_k < 2 or d_k % 2:
        raise ValueError(f"{who}: d_k must be an even int >= 2 (features are rotated in pairs), got {d_k!r}")


def _require_positions(positions: object, who: str) -> None:
    if not isinstance(positions, torch.Tensor) or positions.is_floating_point() or positions.dtype == torch.bool \
            or positions.dim() not in (1, 2):
        raise ValueError(f"{who}: positions must be an integer tensor of shape (seq,) or (batch, seq), got "
                         f"{getattr(positions, 'dtype', type(positions).__name__)} "
                         f"{tuple(getattr(positions, 'shape', ()))}")


@dataclass(frozen=True)
class Llama3Scaling:
    """Llama 3.1's RoPE frequency scaling (``rope_type`` ``"llama3"``), to stretch a context of
    ``original_max_position_embeddings`` positions ``factor`` times.

    Frequencies whose wavelength ``2 pi / omega`` is longer than ``original_max_position_embeddings /
    low_freq_factor`` turn ``factor`` times slower; those shorter than ``original_max_position_embeddings /
    high_freq_factor`` are kept; in between, ``omega`` is interpolated between the two, smoothly in
    ``original_max_position_embeddings / wavelength``. Meta's formula, as Hugging Face's ``_compute_llama3_parameters``
    writes it. It holds the base ``rope_theta`` too, and goes wherever a RoPE ``base`` is asked for
    (:func:`apply_rope`, :class:`~course_lib.models.llama.Llama`'s ``rope_base``): the frequencies it describes.

    Example:
        >>> scaling = Llama3Scaling.from_config({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        ...     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, rope_theta=500000.0)
        >>> scaling.rope_theta, scaling.factor
        (500000.0, 8.0)
    """

    rope_theta: float
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int

    def __post_init__(self) -> None:
        for name in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"Llama3Scaling: {name} must be a number > 0, got {value!r}")
        _require_base(self.rope_theta, "Llama3Scaling", "rope_theta")
        if not self.high_freq_factor > self.low_freq_factor:
            raise ValueError(f"Llama3Scaling: high_freq_factor must be > low_freq_factor, got "
                             f"{self.high_freq_factor!r} and {self.low_freq_factor!r}")

    @classmethod
    def from_config(cls, scaling: dict | None, rope_theta: float = 10000.0, who: str = "Llama3Scaling",
                    max_position_embeddings: int | None = None) -> Llama3Scaling | None:
        """The scaling a ``config.json``'s ``rope_scaling`` (or ``rope_parameters``) describes: None for plain
        RoPE (``rope_type`` ``"default"`` or no entry), a :class:`Llama3Scaling` for ``"llama3"``; any other type
        is refused by name. ``original_max_position_embeddings`` defaults to ``max_position_embeddings``, as in
        Hugging Face."""
        if scaling is None:
            return None
        if not isinstance(scaling, dict):
            raise ValueError(f"{who}: rope_scaling must be a dict or None, got {type(scaling).__name__}")
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind == "default":
            return None
        if kind != "llama3":
            raise ValueError(f"{who}: rope_scaling of rope_type {kind!r} is not supported: only 'default' (plain "
                             f"RoPE) and 'llama3' (Llama 3.1's frequency scaling)")
        values = dict(scaling)
        if max_position_embeddings is not None:
            values.setdefault("original_max_position_embeddings", max_position_embeddings)
        fields = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
        missing = [name for name in fields if name not in values]
        if missing:
            raise ValueError(f"{who}: rope_scaling of rope_type 'llama3' needs {list(fields)}; missing {missing}")
        return cls(rope_theta, *(values[name] for name in fields))

    def apply(self, omega: torch.Tensor) -> torch.Tensor:
        """Scale float32 frequencies ``omega`` ``(d_k/2,)`` -> ``(d_k/2,)``."""
        old_context = self.original_max_position_embeddings
        low_freq_wavelength = old_context / self.low_freq_factor
        high_freq_wavelength = old_context / self.high_freq_factor
        wavelength = 2 * math.pi / omega  # (d_k/2,)
        slowed = torch.where(wavelength > low_freq_wavelength, omega / self.factor, omega)  # long waves: slower
        smooth = (old_context / wavelength - self.low_freq_factor) / (self.high_freq_factor - self.low_freq_factor)
        blended = (1 - smooth) * slowed / self.factor + smooth * slowed  # in between: interpolated
        medium = ~(wavelength < high_freq_wavelength) * ~(wavelength > low_freq_wavelength)
        return torch.where(medium, blended, slowed)


def _require_base(base: object, who: str, name: str = "base") -> None:
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 1:
        raise ValueError(f"{who}: {name} must be a number > 1 (rope_theta) or a Llama3Scaling, got {base!r}")


def rope_frequencies(d_k: int, base: float | Llama3Scaling = 10000.0) -> torch.Tensor:
    """The frequencies ``omega_i = 1 / base^(2i/d_k)``, ``i = 0 .. d_k/2 - 1``, computed in float32 as the
    checkpoints' own code computes them (the exponents ``2i / d_k`` in float32, then the power, then the
    reciprocal); a :class:`Llama3Scaling` as ``base`` gives its ``rope_theta``'s frequencies, scaled.

    Notebook 03's frequencies over ``d_k`` features; the float32 formula, rather than notebook 03's float64 one, is
    what makes the angles equal Hugging Face's at long positions, where an ulp of ``omega`` times a position
    of 8192 is a visible angle.

    Shapes: -> float32 ``(d_k // 2,)``.

    Example:
        >>> rope_frequencies(4)
        tensor([1.0000, 0.0100])
    """
    _require_d_k(d_k, "rope_frequencies")
    scaling = base if isinstance(base, Llama3Scaling) else None
    theta = base.rope_theta if scaling is not None else base
    _require_base(theta, "rope_frequencies")
    exponents = torch.arange(0, d_k, 2, dtype=torch.int64).to(torch.float32) / d_k  # (d_k/2,): 2i / d_k
    omega = 1.0 / (float(theta) ** exponents)
    return omega if scaling is None else scaling.apply(omega)


def rope_angles(positions: torch.Tensor, d_k: int, base: float | Llama3Scaling = 10000.0) -> torch.Tensor:
    """The rotation angles ``theta[..., i] = position * omega_i`` with ``omega_i = base^(-2i/d_k)``.

    The frequencies are :func:`rope_frequencies` (float32, as Hugging Face's Llama computes them; scaled when
    ``base`` is a :class:`Llama3Scaling`), and each angle one float32 product, as in Hugging Face's
    ``LlamaRotaryEmbedding``: the angles, and so the cos/sin tables, equal theirs exactly at every position.

    Shapes: ``positions`` integer ``(seq,)`` or ``(batch, seq)`` -> float32 ``(*positions.shape, d_k // 2)``.

    Example:
        >>> rope_angles(torch.tensor([0, 1, 2]), d_k=4)
        tensor([[0.0000, 0.0000],
                [1.0000, 0.0100],
                [2.0000, 0.0200]])
    """
    _require_positions(positions, "rope_angles")
    omega = rope_frequencies(d_k, base).to(positions.device)  # (d_k/2,)
    return positions.to(torch.float32)[..., None] * omega  # (..., seq, d_k/2)


def _check_apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0, layout: str = "half",
                      seq_dim: int = -2) -> None:
    who = "apply_rope"
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 2 or x.shape[-1] % 2:
        raise ValueError(f"{who}: x must be a floating-point tensor of shape (..., seq, d_k) with d_k even, got "
                         f"{getattr(x, 'dtype', type(x).__name__)} {tuple(getattr(x, 'shape', ()))}")
    _require_positions(positions, who)
    _require_layout(layout, who)
    if isinstance(seq_dim, bool) or not isinstance(seq_dim, int) or not -x.dim() <= seq_dim < x.dim() - 1 \
            or seq_dim == -1:
        raise ValueError(f"{who}: seq_dim must index an axis of x other than the last (d_k), got {seq_dim!r} for "
                         f"x of shape {tuple(x.shape)}")
    seq = x.shape[seq_dim]
    if positions.shape[-1] != seq:
        raise ValueError(f"{who}: positions must give one position per row of x: x has seq={seq} (axis {seq_dim} "
                         f"of shape {tuple(x.shape)}), positions has shape {tuple(positions.shape)}")
    if positions.dim() == 2 and (x.dim() < 3 or seq_dim % x.dim() == 0 or positions.shape[0] not in (1, x.shape[0])):
        raise ValueError(f"{who}: positions of shape (batch, seq) = {tuple(positions.shape)} need x with the same "
                         f"batch on axis 0 and seq on another axis, got {tuple(x.shape)} (seq_dim={seq_dim})")


@validated_by(_check_apply_rope)
def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0, layout: str = "half",
               seq_dim: int = -2) -> torch.Tensor:
    """Rotate each pair of ``x``'s features by ``position * omega_i``: queries and keys before attention.

    With ``(a, b)`` a pair (``(2i, 2i+1)`` for ``"interleaved"``, ``(i, i + d_k/2)`` for ``"half"``) and
    ``theta = position * omega_i``::

        a' = a cos(theta) - b sin(theta)
        b' = a sin(theta) + b cos(theta)

    The cosines and sines are cast to ``x``'s dtype before multiplying (as Hugging Face's Llama does).

    Args:
        x: ``(..., seq, d_k)``, e.g. queries ``(batch, heads, seq, d_k)``; ``d_k`` even.
        positions: integer ``(seq,)`` (the same for the whole batch) or ``(batch, seq)``; absolute positions.
        base: the frequencies' base (``rope_theta``), or a :class:`Llama3Scaling` (Llama 3.1's scaled frequencies).
        layout: ``"half"`` (Hugging Face) or ``"interleaved"`` (Meta's original, GPT-J).
        seq_dim: the axis of positions: -2 for the course's ``(batch, heads, seq, d_k)``, 1 for Meta's
            ``(batch, seq, heads, d_k)``. (It cannot be told from the shape when ``heads == seq``: say it.)

    Returns: a tensor of ``x``'s shape and dtype.

    Example:
        >>> x = torch.tensor([[1.0, 0.0]])                    # (seq=1, d_k=2): one pair, angle = position
        >>> apply_rope(x, torch.tensor([1]))                  # rotated by 1 radian
        tensor([[0.5403, 0.8415]])
    """
    angles = rope_angles(positions.to(x.device), x.shape[-1], base)  # (seq, d_k/2) or (batch, seq, d_k/2)
    shape = [1] * x.dim()  # angles broadcast over every axis but batch, seq and the pairs
    shape[seq_dim], shape[-1] = x.shape[seq_dim], x.shape[-1] // 2
    if positions.dim() == 2:
        shape[0] = positions.shape[0]
    angles = angles.reshape(shape)  # e.g. (batch, 1, seq, d_k/2): the same for every head
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if layout == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]  # (..., seq, d_k/2) each: features 0, 2, 4, ... and 1, 3, 5, ...
        rotated = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1)  # (..., seq, d_k/2, 2)
        return rotated.flatten(-2)  # (..., seq, d_k): pairs back side by side
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]  # (..., seq, d_k/2) each: the first and the second half
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)  # (..., seq, d_k)


def rope_rotation(position: int, d_k: int, base: float = 10000.0, layout: str = "half") -> torch.Tensor:
    """The ``(d_k, d_k)`` matrix ``R(position)`` with ``apply_rope(x, position) == x @ R.T`` (for rows ``x``).

    Block-diagonal with one 2x2 rotation per pair in the ``"interleaved"`` layout. That is notebook 03's
    :func:`~course_lib.models.positional.offset_matrix` for the offset ``-position`` (its pairs are ``(sin, cos)``,
    which turn the other way), so ``R(m).T @ R(n) == R(n - m)``: the relative-position property.

    Shapes: -> float32 ``(d_k, d_k)``.

    Example:
        >>> from course_lib.models.positional import offset_matrix
        >>> torch.allclose(rope_rotation(3, 8, layout="interleaved"), offset_matrix(-3, 8), atol=1e-6)
        True
    """
    _require_d_k(d_k, "rope_rotation")
    identity = torch.eye(d_k)  # rows e_j; apply_rope(e_j) = R e_j, the j-th column of R
    return apply_rope(identity, torch.full((d_k,), int(position)), base, layout).T


def rope_permutation(d_k: int, source: str = "interleaved", target: str = "half") -> torch.Tensor:
    """The feature order that turns a vector of layout ``source`` into layout ``target``: ``x[..., perm]``.

    Interleaved to half: ``perm = [0, 2, 4, ..., 1, 3, 5, ...]`` (pair ``(2i, 2i+1)`` moves to
    ``(i, i + d_k/2)``); half to interleaved is its inverse ``[0, d_k/2, 1, d_k/2 + 1, ...]``.

    Shapes: -> int64 ``(d_k,)``.

    Example:
        >>> rope_permutation(6)
        tensor([0, 2, 4, 1, 3, 5])
        >>> rope_permutation(6, "half", "interleaved")
        tensor([0, 3, 1, 4, 2, 5])
    """
    _require_d_k(d_k, "rope_permutation")
    _require_layout(source, "rope_permutation", "source")
    _require_layout(target, "rope_permutation", "target")
    if source == target:
        return torch.arange(d_k)
    to_half = torch.cat([torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)])  # (d_k,): evens, then odds
    return to_half if target == "half" else torch.argsort(to_half)


def convert_rope_layout(x: torch.Tensor, source: str, target: str) -> torch.Tensor:
    """Reorder the last axis of ``x`` (one head's features) from layout ``source`` to ``target``.

    ``apply_rope(convert_rope_layout(x, s, t), p, layout=t) == convert_rope_layout(apply_rope(x, p, layout=s), s, t)``:
    rotating and reordering commute, and a query and a key reordered alike keep their dot product.

    Shapes: ``(..., d_k)`` -> ``(..., d_k)``.

    Example:
        >>> convert_rope_layout(torch.tensor([0.0, 1, 2, 3]), "interleaved", "half")
        tensor([0., 2., 1., 3.])
    """
    if not isinstance(x, torch.Tensor) or x.dim() < 1:
        raise ValueError(f"convert_rope_layout: x must be a tensor of shape (..., d_k), got "
                         f"{tuple(getattr(x, 'shape', ())) or type(x).__name__}")
    return x[..., rope_permutation(x.shape[-1], source, target).to(x.device)]


def convert_rope_weight(weight: torch.Tensor, num_heads: int, source: str, target: str) -> torch.Tensor:
    """Reorder the rows of a query or key projection (or its bias) head by head, from ``source`` to ``target``.

    ``W_q`` of shape ``(num_heads * d_k, d_model)`` produces head ``h``'s features from rows
    ``h * d_k .. (h + 1) * d_k - 1``; permuting those rows permutes the features the head receives. Use it on
    ``W_q`` (with the number of query heads) and ``W_k`` (with the number of key/value heads), never on
    ``W_v`` or ``W_o``: values are not rotated.

    Shapes: ``(num_heads * d_k, ...)`` -> the same shape.

    Example:
        >>> w = torch.arange(8.0)[:, None]                     # 2 heads of d_k = 4, one column
        >>> convert_rope_weight(w, 2, "interleaved", "half").flatten()
        tensor([0., 2., 1., 3., 4., 6., 5., 7.])
    """
    if not isinstance(weight, torch.Tensor) or weight.dim() < 1 or isinstance(num_heads, bool) \
            or not isinstance(num_heads, int) or num_heads < 1 or weight.shape[0] % (2 * num_heads):
        raise ValueError(f"convert_rope_weight: weight must have shape (num_heads * d_k, ...) with d_k even, for "
                         f"num_heads={num_heads!r}; got shape {tuple(getattr(weight, 'shape', ()))}")
    d_k = weight.shape[0] // num_heads
    perm = rope_permutation(d_k, source, target).to(weight.device)
    per_head = weight.reshape(num_heads, d_k, *weight.shape[1:])  # (num_heads, d_k, ...)
    return per_head[:, perm].reshape(weight.shape)
