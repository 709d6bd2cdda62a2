"""Exercises of notebook 14 (from the 2017 Transformer to today's models): rotary embeddings, RMSNorm and SwiGLU.

Declarations, not logic to share: its mistakes are whole wrong answers, as a learner writes them, so
``duplicates`` pairs this module with the other checks modules by shape (:mod:`course_lib.checks` says why).
The key/value heads of grouped-query attention and the online softmax moved with their sections to notebook 15
(:mod:`course_lib.checks.nb15_inference_at_scale`).

References, all in :mod:`course_lib.models`: :func:`~course_lib.models.rope.apply_rope`,
:class:`~course_lib.models.llama.RMSNorm` and :class:`~course_lib.models.llama.SwiGLU` (class exercises: the
notebook gives the constructor, the learner writes ``forward``).

The known mistakes are the ones these components are known for in the open models' issue trackers: the two RoPE
layouts confused (or one layout's cosine table with the other's pairs), the norm's epsilon outside the square
root, the SiLU on the wrong branch of the gate. Beside them, the wrong answers a review from the student's seat
wrote that got no hint or another mistake's: the interleaved pairs put back as halves, ``b`` rotated with the
rotated ``a``, the base or the module's ``eps`` ignored, ``(batch, seq)`` angles without a heads axis, a mean
square over the whole tensor, GELU for SiLU, one projection used twice.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.checks.nb05_encoder import random_state
from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import public_and_hidden, with_inputs
from course_lib.models.llama import RMSNorm, SwiGLU
from course_lib.models.rope import apply_rope

NOTEBOOK = "14_todays_models"


# ---------------------------------------------------------------------------------------------------
# 13.1 apply_rope
# ---------------------------------------------------------------------------------------------------

def _rope_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    heads, d_k = (3, 12) if hidden else (2, 8)
    x = torch.randn(2, heads, 5, d_k, generator=gen)
    cases = [
        Case("two pairs (seq=1, d_k=4) at position 1: the first pair rotated by 1 radian, the second by 0.01",
             args=(torch.tensor([[1.0, 0.0, 0.0, 1.0]]), torch.tensor([1]))),
        Case(f"(batch=2, heads={heads}, seq=5, d_k={d_k}), positions 0..4, layout='half' (Hugging Face)",
             args=(x, torch.arange(5))),
        Case("the same x, layout='interleaved' (Meta's original Llama, GPT-J)",
             args=(x, torch.arange(5)), kwargs={"layout": "interleaved"}),
        Case("positions 7..10 (the tokens after 7 cached ones), d_k=16, layout='half'",
             args=(torch.randn(1, 2, 4, 16, generator=gen), torch.arange(7, 11))),
        Case("base=500000 (Llama 3's rope_theta), (seq=6, d_k=8), layout='interleaved'",
             args=(torch.randn(6, 8, generator=gen), torch.arange(6)), kwargs={"base": 500000.0,
                                                                              "layout": "interleaved"}),
        Case("positions of shape (batch=2, seq=3): each sequence its own positions, x (2, 2, 3, 8)",
             args=(torch.randn(2, 2, 3, 8, generator=gen), torch.tensor([[0, 1, 2], [40, 41, 42]]))),
    ]
    if hidden:
        cases.append(Case("(batch=3, seq=7, d_k=6) without a heads axis, positions 20..26, layout='interleaved'",
                          args=(torch.randn(3, 7, 6, generator=gen), torch.arange(20, 27)),
                          kwargs={"layout": "interleaved"}))
    cases += _rope_seq_dim_and_dtype_cases(gen, hidden)
    return cases


def _rope_seq_dim_and_dtype_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    """Meta's layout (batch, seq, heads, d_k) told by seq_dim, with heads == seq (the shape cannot tell the axes
    apart: only seq_dim can), and a float64 input (the output keeps its dtype)."""
    seq = 5 if hidden else 4
    return [
        Case(f"Meta's layout (batch=2, seq={seq}, heads={seq}, d_k=8) with seq_dim=1, positions 3..{seq + 2}: "
             f"heads == seq, so only seq_dim says which axis holds the positions",
             args=(torch.randn(2, seq, seq, 8, generator=gen), torch.arange(3, seq + 3)), kwargs={"seq_dim": 1}),
        Case(f"Meta's layout with positions (batch=2, seq={seq}) and seq_dim=1, layout='interleaved'",
             args=(torch.randn(2, seq, seq, 8, generator=gen), torch.stack([torch.arange(seq), torch.arange(seq) + 9])),
             kwargs={"seq_dim": 1, "layout": "interleaved"}),
        Case("float64 x (1, 2, 5, 8), positions 0..4: the output is float64 too",
             args=(torch.randn(1, 2, 5, 8, generator=gen, dtype=torch.float64), torch.arange(5))),
    ]


def _swap_layout(layout):
    return "interleaved" if layout == "half" else "half"


def _pairs(x, layout):
    """The two members of every pair, ``(..., d_k/2)`` each, in the given layout."""
    if layout == "interleaved":
        return x[..., 0::2], x[..., 1::2]
    return x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]


def _unpairs(a, b, layout):
    return torch.stack([a, b], dim=-1).flatten(-2) if layout == "interleaved" else torch.cat([a, b], dim=-1)


def _angles(positions, d_k, base, dims):
    """Angles ``position * omega_i`` broadcastable against pairs of an x with ``dims`` axes."""
    omega = 1.0 / base ** (torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)  # (d_k/2,)
    angles = (positions.double()[..., None] * omega).float()  # (..., seq, d_k/2)
    if positions.dim() == 2 and dims == 4:
        angles = angles[:, None]  # (batch, 1, seq, d_k/2)
    return angles


def _rope_with(x, positions, base, layout, angles=None, direction=1.0):
    angles = _angles(positions, x.shape[-1], base, x.dim()) if angles is None else angles
    cos, sin = angles.cos().to(x.dtype), (direction * angles).sin().to(x.dtype)
    a, b = _pairs(x, layout)
    return _unpairs(a * cos - b * sin, a * sin + b * cos, layout)


_rope_layouts_confused = with_inputs(apply_rope, layout=_swap_layout)


def _rope_other_layouts_table(x, positions, base=10000.0, layout="half"):
    """Hugging Face's formula x cos + rotate_half(x) sin, but cos/sin tables laid out for the other pairing."""
    angles = _angles(positions, x.shape[-1], base, x.dim())  # (..., seq, d_k/2)
    if layout == "half":  # the pairs are (i, i + d_k/2); the table repeats each angle twice in a row instead
        full = angles.repeat_interleave(2, dim=-1)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    else:  # the pairs are (2i, 2i+1); the table is the two halves side by side instead
        full = torch.cat([angles, angles], dim=-1)
        rotated = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
    return x * full.cos().to(x.dtype) + rotated * full.sin().to(x.dtype)


def _rope_wrong_direction(x, positions, base=10000.0, layout="half"):
    return _rope_with(x, positions, base, layout, direction=-1.0)  # a' = a cos + b sin: rotated by -theta


def _rope_frequencies_without_the_two(x, positions, base=10000.0, layout="half"):
    d_k = x.shape[-1]
    omega = 1.0 / base ** (torch.arange(0, d_k // 2, dtype=torch.float64) / d_k)  # base^(-i/d_k), not -2i/d_k
    angles = (positions.double()[..., None] * omega).float()
    if positions.dim() == 2 and x.dim() == 4:
        angles = angles[:, None]
    return _rope_with(x, positions, base, layout, angles=angles)


def _rope_positions_ignored(x, positions, base=10000.0, layout="half"):
    counted = torch.arange(x.shape[-2])  # 0 .. seq-1, whatever positions says
    return _rope_with(x, counted if positions.dim() == 1 else counted.expand_as(positions), base, layout)


def _rope_rows_reversed(x, positions, base=10000.0, layout="half"):
    return _rope_with(x, positions, base, layout).flip(-2)  # rows rotated, then handed back in reverse order


def _rope_interleaved_put_back_as_halves(x, positions, base=10000.0, layout="half"):
    """The layout's pairs rotated, but the results always concatenated: a' of every pair, then every b'."""
    angles = _angles(positions, x.shape[-1], base, x.dim())  # (..., seq, d_k/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = _pairs(x, layout)
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)  # the 'half' places, whatever the layout


def _rope_b_from_rotated_a(x, positions, base=10000.0, layout="half"):
    """a overwritten by a' before b' is computed: b' = a' sin + b cos reads the rotated a."""
    angles = _angles(positions, x.shape[-1], base, x.dim())
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = _pairs(x, layout)
    a = a * cos - b * sin
    return _unpairs(a, a * sin + b * cos, layout)


def _rope_base_ignored(x, positions, base=10000.0, layout="half"):
    return apply_rope(x, positions, layout=layout)  # the default base 10 000, whatever base says


def _rope_batch_angles_without_heads_axis(x, positions, base=10000.0, layout="half"):
    """(batch, seq, d_k/2) angles broadcast straight against (batch, heads, seq, d_k/2): batch meets heads."""
    angles = _angles(positions, x.shape[-1], base, dims=0)  # no heads axis added
    return _rope_with(x, positions, base, layout, angles=angles)


def _rope_seq_dim_ignored(x, positions, base=10000.0, layout="half", seq_dim=-2):
    return apply_rope(x, positions, base, layout)  # the positions always on axis -2, whatever seq_dim says


def _rope_float32_result(x, positions, base=10000.0, layout="half", seq_dim=-2):
    angles = _angles(positions, x.shape[-1], base, x.dim())  # float32
    a, b = _pairs(x.movedim(seq_dim, -2).float(), layout)  # x brought to float32 with the tables
    out = _unpairs(a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos(), layout)
    return out.movedim(-2, seq_dim)


def _rope_frequencies_counted_from_one(x, positions, base=10000.0, layout="half"):
    d_k = x.shape[-1]
    omega = 1.0 / base ** (torch.arange(2, d_k + 2, 2, dtype=torch.float64) / d_k)  # i = 1 .. d_k/2, not 0 ..
    angles = (positions.double()[..., None] * omega).float()
    if positions.dim() == 2 and x.dim() == 4:
        angles = angles[:, None]
    return _rope_with(x, positions, base, layout, angles=angles)


def _seq_dim_moved(rope):
    """An answer for the course's layout made to take seq_dim: the positions' axis moved to -2 and back."""
    def with_seq_dim(x, positions, base=10000.0, layout="half", seq_dim=-2):
        return rope(x.movedim(seq_dim, -2), positions, base, layout).movedim(-2, seq_dim)
    with_seq_dim.__name__ = with_seq_dim.__qualname__ = rope.__name__
    with_seq_dim.__doc__ = rope.__doc__
    return with_seq_dim


@_seq_dim_moved
def _rope_with_complex_numbers(x, positions, base=10000.0, layout="half"):
    """Meta's original code: each pair is one complex number, multiplied by e^(i theta)."""
    a, b = _pairs(x.double(), layout)
    angles = _angles(positions, x.shape[-1], base, x.dim()).double()
    turned = torch.complex(a, b) * torch.polar(torch.ones_like(angles), angles)  # (..., seq, d_k/2)
    return _unpairs(turned.real, turned.imag, layout).to(x.dtype)


@_seq_dim_moved
def _rope_with_rotation_matrices(x, positions, base=10000.0, layout="half"):
    """One (d_k, d_k) rotation matrix per position, applied as a matrix product."""
    d_k = x.shape[-1]
    angles = _angles(positions, d_k, base, x.dim())  # (..., seq, d_k/2)
    first, second = (torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)) if layout == "interleaved" else (
        torch.arange(d_k // 2), torch.arange(d_k // 2, d_k))
    rotation = torch.zeros(*angles.shape[:-1], d_k, d_k, dtype=x.dtype)  # (..., seq, d_k, d_k)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    rotation[..., first, first], rotation[..., first, second] = cos, -sin
    rotation[..., second, first], rotation[..., second, second] = sin, cos
    return (rotation @ x[..., None]).squeeze(-1)


@_seq_dim_moved
def _rope_rotate_half(x, positions, base=10000.0, layout="half"):
    """Hugging Face's x * cos + rotate_half(x) * sin (tables built for the layout's own pairing)."""
    d_k = x.shape[-1]
    angles = _angles(positions, d_k, base, x.dim())
    if layout == "half":
        full = torch.cat([angles, angles], dim=-1)  # (..., seq, d_k): feature i and i + d_k/2 share omega_i
        rotated = torch.cat([-x[..., d_k // 2:], x[..., : d_k // 2]], dim=-1)
    else:
        full = angles.repeat_interleave(2, dim=-1)  # features 2i and 2i + 1 share omega_i
        rotated = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
    return x * full.cos().to(x.dtype) + rotated * full.sin().to(x.dtype)


APPLY_ROPE = register(Exercise(
    name="apply_rope",
    notebook=NOTEBOOK,
    points=2,
    differentiable=True,  # queries and keys are trained through it
    atol=1e-4,  # angles in float32 (as Hugging Face computes them) or float64 may differ by ~1e-6 rad
    reference=apply_rope,
    summary="rotary position embeddings: each pair of features rotated by position * omega_i, in either layout",
    **public_and_hidden(_rope_cases),
    mistakes=[
        Mistake("layouts confused", _rope_layouts_confused,
                "the two layouts pair different features: 'half' rotates feature i with feature i + d_k/2 "
                "(Hugging Face), 'interleaved' rotates feature 2i with feature 2i + 1 (Meta's original code). "
                "Take the pairs the layout argument names.",
                detail="half: a, b = x[..., :d_k // 2], x[..., d_k // 2:]; interleaved: a, b = x[..., 0::2], "
                       "x[..., 1::2] (and put the results back in the same places)."),
        Mistake("one layout's angle table with the other's pairs", _rope_other_layouts_table,
                "the two features of a pair must turn by the same angle: with 'half' pairs, feature i and feature "
                "i + d_k/2 share frequency omega_i, so the table of angles is the d_k/2 angles twice, one copy "
                "after the other (each angle repeated twice in a row belongs to the 'interleaved' pairs).",
                detail="half: torch.cat([angles, angles], dim=-1); interleaved: angles.repeat_interleave(2, dim=-1)."),
        Mistake("rotated the wrong way", _rope_wrong_direction,
                "a rotation by +theta maps a pair (a, b) to (a cos theta - b sin theta, a sin theta + b cos theta); "
                "your signs turn it by -theta (the order in which notebook 03's (sin, cos) pairs turn)."),
        Mistake("frequencies without the 2", _rope_frequencies_without_the_two,
                "pair i turns with omega_i = base^(-2i/d_k), i = 0 .. d_k/2 - 1: notebook 03's frequencies over a "
                "head's d_k features (the exponent steps by 2/d_k, so the slowest pair's wavelength is about "
                "2 pi base).",
                detail="omega = 1.0 / base ** (torch.arange(0, d_k, 2) / d_k)."),
        Mistake("frequencies counted from 1", _rope_frequencies_counted_from_one,
                "the pairs are counted from i = 0: the first pair turns with omega_0 = base^0 = 1 (one radian per "
                "position), the last with base^(-(d_k - 2)/d_k). Counting from 1 makes every pair turn as slowly "
                "as the next one should.",
                detail="omega = 1.0 / base ** (torch.arange(0, d_k, 2) / d_k): the exponents 0, 2/d_k, 4/d_k, ..."),
        Mistake("positions ignored", _rope_positions_ignored,
                "rotate each row by the angle of its own absolute position, the one the positions argument gives: "
                "with a cache, the new tokens start at the number of tokens seen, not at 0."),
        Mistake("rows reordered", _rope_rows_reversed,
                "return the rows in the order of x: each row is one token, rotated by the angles of its own position."),
        Mistake("interleaved pairs put back as halves", _rope_interleaved_put_back_as_halves,
                "the pairs are right but the results go back to the wrong places: with 'interleaved' pairs, the "
                "rotated a and b of pair i return to features 2i and 2i + 1, side by side; joining all the a's, "
                "then all the b's, lists them in the 'half' layout's order.",
                detail="interleaved: torch.stack([a_rot, b_rot], dim=-1).flatten(-2), not torch.cat([a_rot, b_rot], "
                       "dim=-1) (that is the 'half' layout's way back)."),
        Mistake("b rotated with the already rotated a", _rope_b_from_rotated_a,
                "both members of a pair turn together: compute the new b from the OLD a and b. Once a has been "
                "overwritten by its rotated value, the formula for the new b reads the wrong a."),
        Mistake("base ignored", _rope_base_ignored,
                "the frequencies depend on the base argument, omega_i = base^(-2i/d_k): Llama 3 uses 500 000 "
                "(rope_theta), not the default 10 000. Pass base on to where the angles are computed."),
        Mistake("(batch, seq) angles without a heads axis", _rope_batch_angles_without_heads_axis,
                "with positions of shape (batch, seq), the table of angles is (batch, seq, d_k/2); against x of "
                "shape (batch, heads, seq, d_k) it lines up from the right, so its batch axis meets the heads axis "
                "(silently, when both have the same size). Give it a heads axis of size 1 so that every head of "
                "sequence b turns by sequence b's positions.",
                detail="angles[:, None] (batch, 1, seq, d_k/2) when positions.dim() == 2 and x has a heads axis."),
        Mistake("seq_dim ignored", _rope_seq_dim_ignored,
                "the positions lie on the axis the seq_dim argument names: 1 for Meta's layout (batch, seq, heads, "
                "d_k), not always the one before the last. When there are as many heads as positions the shapes "
                "fit either way and nothing fails: only seq_dim tells the axes apart.",
                detail="x = x.movedim(seq_dim, -2), rotate, then move the axis back with movedim(-2, seq_dim)."),
        Mistake("float32 result for a float64 input", _rope_float32_result,
                "return a tensor of x's dtype: the angles may be computed in float32, but cast their cosines and "
                "sines to x's dtype and rotate x as it is, so that a float64 input gives a float64 output.",
                detail="cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)."),
    ],
    also_correct=[_rope_with_complex_numbers, _rope_with_rotation_matrices, _rope_rotate_half],
))


# ---------------------------------------------------------------------------------------------------
# 13.2 RMSNorm.forward
# ---------------------------------------------------------------------------------------------------

def _norm_case(gen: torch.Generator, label: str, x: torch.Tensor, eps: float) -> Case:
    init = {"d_model": x.shape[-1], "eps": eps}
    return Case(label, args=(x,), init=init, state=random_state(RMSNorm(**init), gen))


def _rms_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    d = 12 if hidden else 8
    zero_row = torch.randn(4, 2 * d, generator=gen)
    zero_row[1] = 0.0
    return [
        _norm_case(gen, f"x (2, 5, {d}) of mean 0.5 and scale 2, eps=1e-6",
                   torch.randn(2, 5, d, generator=gen) * 2 + 0.5, 1e-6),
        _norm_case(gen, "small activations (scale 1e-3), eps=1e-6: the mean square is as small as eps",
                   torch.randn(3, d, generator=gen) * 1e-3, 1e-6),
        _norm_case(gen, f"a large eps=0.1 with activations of scale 0.5, x (2, {d})",
                   torch.randn(2, d, generator=gen) * 0.5, 0.1),
        _norm_case(gen, f"x (4, {2 * d}) with a row of zeros (its output is zeros)", zero_row, 1e-5),
        _norm_case(gen, f"a (2, 3, {d}) input of scale 30 and mean -4, eps=1e-5",
                   torch.randn(2, 3, d, generator=gen) * 30 - 4, 1e-5),
    ]


class _RmsEpsOutside(RMSNorm):
    def forward(self, x):
        return self.weight * x / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps)


class _RmsNoEps(RMSNorm):
    def forward(self, x):
        return self.weight * x / x.pow(2).mean(-1, keepdim=True).sqrt()


class _RmsCentred(RMSNorm):
    """LayerNorm without its bias: the mean subtracted first."""

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        return self.weight * centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + self.eps)


class _RmsByStd(RMSNorm):
    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + self.eps)


class _RmsSumNotMean(RMSNorm):
    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + self.eps)


class _RmsNoGain(RMSNorm):
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class _RmsGainFirst(RMSNorm):
    def forward(self, x):
        scaled = self.weight * x
        return scaled * torch.rsqrt(scaled.pow(2).mean(-1, keepdim=True) + self.eps)


class _RmsWrongAxis(RMSNorm):
    def forward(self, x):
        axis = 0 if x.dim() > 1 else -1
        return self.weight * x * torch.rsqrt(x.pow(2).mean(axis, keepdim=True) + self.eps)


class _RmsEpsFixed(RMSNorm):
    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)  # Llama's value, not self.eps


class _RmsMeanOfEverything(RMSNorm):
    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean() + self.eps)  # one mean square for the whole tensor


class _RmsSquareOfMean(RMSNorm):
    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.mean(-1, keepdim=True).pow(2) + self.eps)  # mean(x)^2, not mean(x^2)


class _RmsWithSqrtDivision(RMSNorm):
    def forward(self, x):
        rms = torch.sqrt((x * x).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        return x / rms * self.weight


class _RmsWithVectorNorm(RMSNorm):
    def forward(self, x):
        d = x.shape[-1]
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)  # sqrt(sum x^2) = sqrt(d) * rms
        return self.weight * x / torch.sqrt(norm**2 / d + self.eps)


class _RmsWithEinsum(RMSNorm):
    def forward(self, x):
        mean_square = torch.einsum("...d,...d->...", x, x)[..., None] / x.shape[-1]  # (..., 1)
        return torch.einsum("...d,d->...d", x * (mean_square + self.eps) ** -0.5, self.weight)


RMS_NORM_FORBIDDEN_HINT = ("compute the root mean square yourself: the mean of x squared over the last axis, plus "
                           "eps, then its reciprocal square root (torch.rsqrt) times x, times the gain. PyTorch's own "
                           "RMSNorm (F.rms_norm, nn.RMSNorm) is not accepted here.")


RMS_NORM = register(Exercise(
    name="rms_norm",
    notebook=NOTEBOOK,
    points=1,
    differentiable=True,  # every block of the model is trained through it
    forbidden_calls=("torch.nn.functional.rms_norm", "torch.nn.RMSNorm.forward"),
    forbidden_ops=("rms_norm",),  # PyTorch's own RMSNorm kernels, whatever name reaches them
    forbidden_hint=RMS_NORM_FORBIDDEN_HINT,  # the class edition's RMSNorm runs F.rms_norm: pasted, it earns 0
    reference=RMSNorm,
    summary="RMSNorm.forward: x / sqrt(mean(x^2) + eps) * weight over the last axis",
    **public_and_hidden(_rms_cases),
    mistakes=[
        Mistake("eps outside the square root", _RmsEpsOutside,
                "eps goes inside the square root, added to the mean square (Llama, T5, PyTorch's RMSNorm): "
                "dividing by the root plus eps is another function, far off once the mean square is as small as "
                "eps.",
                detail="x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps), not x / (rms + self.eps)."),
        Mistake("eps fixed instead of the module's", _RmsEpsFixed,
                "use the module's own epsilon, the eps its constructor was given (a model chooses it: 1e-5 or "
                "1e-6 in Llama's configurations), not a number written into forward."),
        Mistake("eps left out", _RmsNoEps,
                "add eps to the mean square before the square root: without it a row of zeros gives 0/0 = NaN, "
                "and tiny activations are blown up."),
        Mistake("mean subtracted", _RmsCentred,
                "RMSNorm does not centre: no mean is subtracted (that is LayerNorm's first step). Divide x itself "
                "by its root mean square."),
        Mistake("divided by the standard deviation", _RmsByStd,
                "the root MEAN SQUARE is the square root of the mean of x squared, not the standard deviation "
                "(which measures the spread around the mean)."),
        Mistake("sum of squares, not their mean", _RmsSumNotMean,
                "average the squares over the d_model features (a mean, not a sum): the output should have a "
                "root mean square of about 1 per feature, whatever d_model is."),
        Mistake("gain left out", _RmsNoGain,
                "multiply the normalised x by the learned gain self.weight, one factor per feature."),
        Mistake("gain applied before normalising", _RmsGainFirst,
                "normalise x first, then multiply by the gain: a gain applied before the normalisation is "
                "divided out again."),
        Mistake("one mean square for the whole tensor", _RmsMeanOfEverything,
                "each position's vector is divided by its OWN root mean square, averaged over its d_model "
                "features only: a mean over every axis divides all positions by one shared number."),
        Mistake("square of the mean", _RmsSquareOfMean,
                "the root mean square squares each feature first, then averages: the mean of the squares, not the "
                "square of the mean (which is 0 for a vector of mean 0)."),
        Mistake("normalised over the wrong axis", _RmsWrongAxis,
                "normalise each position's vector over its features, the last axis, keeping that axis so the "
                "result broadcasts."),
    ],
    also_correct=[_RmsWithSqrtDivision, _RmsWithVectorNorm, _RmsWithEinsum],
))


# ---------------------------------------------------------------------------------------------------
# 13.3 SwiGLU.forward
# ---------------------------------------------------------------------------------------------------

def _swiglu_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    d_model, d_ff = (12, 32) if hidden else (8, 24)
    cases = []
    for label, shape, bias in ((f"x (2, 5, {d_model}), d_ff={d_ff}", (2, 5, d_model), False),
                               (f"x (3, {d_model}) (position-wise: any leading axes)", (3, d_model), False),
                               (f"bias=True (biases on the three projections), x (2, 4, {d_model})",
                                (2, 4, d_model), True)):
        init = {"d_model": d_model, "d_ff": d_ff, "bias": bias}
        cases.append(Case(label, args=(torch.randn(*shape, generator=gen) * 2,), init=init,
                          state=random_state(SwiGLU(**init), gen)))
    return cases


class _SwigluGateOnUp(SwiGLU):
    def forward(self, x):
        return self.w_down(self.w_gate(x) * F.silu(self.w_up(x)))


class _SwigluNoActivation(SwiGLU):
    def forward(self, x):
        return self.w_down(self.w_gate(x) * self.w_up(x))


class _SwigluRelu(SwiGLU):
    def forward(self, x):
        return self.w_down(F.relu(self.w_gate(x)) * self.w_up(x))


class _SwigluSigmoid(SwiGLU):
    def forward(self, x):
        return self.w_down(torch.sigmoid(self.w_gate(x)) * self.w_up(x))


class _SwigluSiluAfterProduct(SwiGLU):
    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x) * self.w_up(x)))


class _SwigluSum(SwiGLU):
    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) + self.w_up(x))


class _SwigluSiluOnBoth(SwiGLU):
    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * F.silu(self.w_up(x)))


class _SwigluGelu(SwiGLU):
    def forward(self, x):
        return self.w_down(F.gelu(self.w_gate(x)) * self.w_up(x))  # GeGLU


class _SwigluUpTwice(SwiGLU):
    def forward(self, x):
        return self.w_down(F.silu(self.w_up(x)) * self.w_up(x))  # w_gate never used


class _SwigluGateTwice(SwiGLU):
    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * self.w_gate(x))  # w_up never used


class _SwigluSpelledOut(SwiGLU):
    def forward(self, x):
        gate = F.linear(x, self.w_gate.weight, self.w_gate.bias)
        up = F.linear(x, self.w_up.weight, self.w_up.bias)
        return F.linear(gate * torch.sigmoid(gate) * up, self.w_down.weight, self.w_down.bias)


class _SwigluOneMatrix(SwiGLU):
    """Gate and up projections stacked into one matrix, as some checkpoints store them (Phi-3's gate_up_proj)."""

    def forward(self, x):
        weight = torch.cat([self.w_gate.weight, self.w_up.weight])  # (2 d_ff, d_model)
        bias = None if self.w_gate.bias is None else torch.cat([self.w_gate.bias, self.w_up.bias])
        gate, up = F.linear(x, weight, bias).chunk(2, dim=-1)  # (..., d_ff) each
        return self.w_down(nn.functional.silu(gate) * up)


SWIGLU = register(Exercise(
    name="swiglu",
    notebook=NOTEBOOK,
    points=1,
    differentiable=True,
    reference=SwiGLU,
    summary="SwiGLU.forward: (silu(x W_gate) * x W_up) W_down, the gated feed-forward of Llama",
    **public_and_hidden(_swiglu_cases),
    mistakes=[
        Mistake("gate on the wrong branch", _SwigluGateOnUp,
                "the SiLU goes on the gate branch, w_gate; the up branch, w_up, stays linear. The weights are not "
                "interchangeable: a checkpoint's gate_proj is trained to be the gate."),
        Mistake("no activation", _SwigluNoActivation,
                "the gate branch goes through the SiLU: without it the block is a product of two linear maps, "
                "a quadratic form with no gate."),
        Mistake("ReLU instead of SiLU", _SwigluRelu,
                "SwiGLU's gate is the SiLU (Swish), silu(z) = z sigmoid(z), smooth and slightly negative below 0; "
                "a ReLU gate is ReGLU, another of Shazeer's variants."),
        Mistake("GELU instead of SiLU", _SwigluGelu,
                "SwiGLU's gate is the SiLU (Swish), silu(z) = z sigmoid(z), not the GELU of GPT-2 and BERT: the two "
                "curves are close but not equal, and a GELU gate is GeGLU (Gemma's block)."),
        Mistake("w_gate never used", _SwigluUpTwice,
                "the block has two different projections of x: the gate branch, w_gate, through the SiLU, and the "
                "linear up branch, w_up. Yours uses w_up for both, so w_gate's weights are never read."),
        Mistake("w_up never used", _SwigluGateTwice,
                "the block has two different projections of x: the gate branch, w_gate, through the SiLU, and the "
                "linear up branch, w_up. Yours uses w_gate for both, so w_up's weights are never read."),
        Mistake("sigmoid instead of SiLU", _SwigluSigmoid,
                "the gate is silu(z) = z sigmoid(z), not sigmoid(z) alone (that is the original GLU)."),
        Mistake("SiLU after the product", _SwigluSiluAfterProduct,
                "apply the SiLU to the gate branch alone, then multiply by the up branch; the product itself "
                "goes straight into w_down."),
        Mistake("sum instead of product", _SwigluSum,
                "a gated unit multiplies, feature by feature: the gate scales the up branch."),
        Mistake("SiLU on both branches", _SwigluSiluOnBoth,
                "only the gate branch goes through the SiLU; the up branch stays linear."),
    ],
    also_correct=[_SwigluSpelledOut, _SwigluOneMatrix],
))
