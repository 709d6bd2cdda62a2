"""Exercises of notebook 03 (positional encoding): the sinusoidal table of the paper.

Declarations, not logic to share: its mistakes are whole wrong answers, as a learner writes them, so
``duplicates`` pairs this module with the other checks modules by shape (:mod:`course_lib.checks` says why).
"""

from __future__ import annotations

import math

import torch

from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import public_and_hidden
from course_lib.models.positional import sinusoidal_table

NOTEBOOK = "03_positional_encoding"


def _cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    cases = [
        Case("max_len=4, d_model=4 (a square table)", args=(4, 4)),
        Case("max_len=10, d_model=8", args=(10, 8)),
        Case("max_len=50, d_model=16", args=(50, 16)),
        Case("max_len=3, d_model=2 (a single sin/cos pair)", args=(3, 2)),
        Case("max_len=100, d_model=64", args=(100, 64)),
    ]
    if hidden:
        for _ in range(3):
            max_len = int(torch.randint(2, 128, (), generator=gen))
            d_model = 2 * int(torch.randint(1, 48, (), generator=gen))
            cases.append(Case(f"max_len={max_len}, d_model={d_model}", args=(max_len, d_model)))
    return cases


# Plausible mistakes ---------------------------------------------------------------------------------

def _angles(max_len: int, d_model: int, base: float = 10000.0, exponent_scale: float = 2.0,
            start: int = 0) -> torch.Tensor:
    """pos / base^(exponent_scale * i / d_model) for pairs i: (max_len, d_model/2), float64."""
    pos = torch.arange(start, start + max_len, dtype=torch.float64)[:, None]
    i = torch.arange(d_model // 2, dtype=torch.float64)
    return pos / base ** (exponent_scale * i / d_model)


def _interleave(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    return torch.stack([first, second], dim=-1).flatten(-2).float()  # (max_len, d_model)


def _sin_cos_swapped(max_len: int, d_model: int) -> torch.Tensor:
    a = _angles(max_len, d_model)
    return _interleave(torch.cos(a), torch.sin(a))


def _exponent_i_not_2i(max_len: int, d_model: int) -> torch.Tensor:
    a = _angles(max_len, d_model, exponent_scale=1.0)  # 10000^(i/d_model): the pair index without the 2
    return _interleave(torch.sin(a), torch.cos(a))


def _exponent_of_the_column(max_len: int, d_model: int) -> torch.Tensor:
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    col = torch.arange(d_model, dtype=torch.float64)  # every column its own frequency: 10000^(j/d_model)
    angle = pos / 10000 ** (col / d_model)
    table = torch.where(torch.arange(d_model) % 2 == 0, torch.sin(angle), torch.cos(angle))
    return table.float()


def _exponent_2j_of_the_column(max_len: int, d_model: int) -> torch.Tensor:
    a = _angles(max_len, d_model, exponent_scale=4.0)  # 2 * (2i) / d_model: the column index doubled again
    return _interleave(torch.sin(a), torch.cos(a))


def _base_1000(max_len: int, d_model: int) -> torch.Tensor:
    a = _angles(max_len, d_model, base=1000.0)
    return _interleave(torch.sin(a), torch.cos(a))


def _multiplied_not_divided(max_len: int, d_model: int) -> torch.Tensor:
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    i = torch.arange(d_model // 2, dtype=torch.float64)
    a = pos * 10000 ** (2 * i / d_model)
    return _interleave(torch.sin(a), torch.cos(a))


def _halves_concatenated(max_len: int, d_model: int) -> torch.Tensor:
    a = _angles(max_len, d_model)
    return torch.cat([torch.sin(a), torch.cos(a)], dim=-1).float()  # [sin..., cos...] instead of interleaved


def _pos_and_i_swapped(max_len: int, d_model: int) -> torch.Tensor:
    return sinusoidal_table(max_len, d_model).T.contiguous()  # rows are dimensions, columns positions


def _degrees(max_len: int, d_model: int) -> torch.Tensor:
    a = _angles(max_len, d_model) * math.pi / 180  # the angle read as degrees
    return _interleave(torch.sin(a), torch.cos(a))


def _positions_from_one(max_len: int, d_model: int) -> torch.Tensor:
    a = _angles(max_len, d_model, start=1)
    return _interleave(torch.sin(a), torch.cos(a))


# Correct alternatives written differently -------------------------------------------------------------

def _with_loops(max_len: int, d_model: int) -> torch.Tensor:
    table = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            table[pos, 2 * i] = math.sin(angle)
            table[pos, 2 * i + 1] = math.cos(angle)
    return table


def _annotated_transformer_float32(max_len: int, d_model: int) -> torch.Tensor:
    """The exp(-log(10000) 2i / d_model) form, entirely in float32."""
    position = torch.arange(0, max_len).unsqueeze(1).float()
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def _stacked(max_len: int, d_model: int) -> torch.Tensor:
    a = torch.outer(torch.arange(max_len).double(), torch.pow(10000.0, -torch.arange(0, d_model, 2).double() / d_model))
    return torch.stack([a.sin(), a.cos()], dim=-1).reshape(max_len, d_model).float()


def _frequencies_from_logspace(max_len: int, d_model: int) -> torch.Tensor:
    """The class edition's frequencies pasted into the cell: omega_i from PyTorch's geometric sequence."""
    omega = torch.logspace(0, -(d_model - 2) / d_model, d_model // 2, base=10000.0, dtype=torch.float64)
    angle = torch.arange(max_len, dtype=torch.float64)[:, None] * omega  # (max_len, d_model/2)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(max_len, d_model).float()


#: The class edition computes notebook 03's frequencies (notebook 14's RoPE needs them) with ``torch.logspace``
#: (:func:`course_lib.edition.backed.sinusoidal_frequencies`): the grader refuses that route here.
FREQUENCIES_HINT = ("compute the frequencies from the formula, one over 10000 to the power 2i/d_model for the even "
                    "column indices 2i: PyTorch's geometric sequence (logspace, which the class edition's "
                    "sinusoidal_frequencies runs) and the rotary embeddings' frequencies (rope_frequencies, "
                    "rope_angles) do that part of the exercise for you, so they are not accepted here.")
FREQUENCIES_DETAIL = "two_i = torch.arange(0, d_model, 2); angles = pos / 10000 ** (two_i / d_model)."


SINUSOIDAL_TABLE = register(Exercise(
    name="sinusoidal_table",
    notebook=NOTEBOOK,
    points=2,
    reference=sinusoidal_table,
    summary="the (max_len, d_model) table PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(...)",
    **public_and_hidden(_cases),
    # the rotary embeddings' frequencies are notebook 03's, computed in float32 as the checkpoints do: another route
    forbidden_calls=("torch.logspace", "course_lib.models.rope.rope_frequencies"),
    forbidden_ops=("logspace",),  # aten::logspace, whatever name reaches it
    forbidden_hint=FREQUENCIES_HINT,
    atol=1e-4,  # a table computed entirely in float32 (the Annotated Transformer's way) is correct too
    rtol=0.0,
    mistakes=[
        Mistake("sin and cos swapped", _sin_cos_swapped,
                "even columns (0, 2, 4, ...) hold the sine and odd columns the cosine; yours are the other "
                "way round (row 0 should start 0, 1, 0, 1, ...)."),
        Mistake("exponent i/d_model", _exponent_i_not_2i,
                "the exponent is 2i/d_model, where 2i is the even column index of the pair: you divided by "
                "10000^(i/d_model), so the frequencies fall off half as fast."),
        Mistake("each column its own frequency", _exponent_of_the_column,
                "both columns of a pair (2i, 2i+1) share ONE frequency, 10000^(2i/d_model); the cosine "
                "column uses the same angle as the sine column before it, not 10000^((2i+1)/d_model)."),
        Mistake("exponent 2j/d_model with the column index j", _exponent_2j_of_the_column,
                "in 10000^(2i/d_model), i counts pairs (0, 1, 2, ...), so 2i is the even column index "
                "(0, 2, 4, ...); you doubled the column index again."),
        Mistake("base 1000", _base_1000, "the base is 10000 (ten thousand), not 1000."),
        Mistake("multiplied by the frequency term", _multiplied_not_divided,
                "divide the position by 10000^(2i/d_model) (or multiply by its inverse); multiplying makes "
                "the angles explode instead of slowing down."),
        Mistake("halves concatenated", _halves_concatenated,
                "interleave sines and cosines: columns 0, 2, 4, ... are sines and 1, 3, 5, ... cosines, not all "
                "sines followed by all cosines.",
                detail="table[:, 0::2] = torch.sin(angles); table[:, 1::2] = torch.cos(angles)."),
        Mistake("positions and dimensions swapped", _pos_and_i_swapped,
                "the table has one ROW per position and one COLUMN per dimension: shape (max_len, d_model)."),
        Mistake("angle in degrees", _degrees,
                "torch.sin and torch.cos take radians: use pos / 10000^(2i/d_model) as it is, with no "
                "degree conversion."),
        Mistake("positions start at 1", _positions_from_one,
                "positions start at 0 (the first row is sin 0 = 0 and cos 0 = 1).",
                detail="positions = torch.arange(max_len)."),
        Mistake("frequencies from torch.logspace", _frequencies_from_logspace, FREQUENCIES_HINT,
                detail=FREQUENCIES_DETAIL),
    ],
    also_correct=[_with_loops, _annotated_transformer_float32, _stacked],
))
