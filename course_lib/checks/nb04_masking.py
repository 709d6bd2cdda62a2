"""Exercises of notebook 04 (masking): the look-ahead (causal) mask and the padding mask.

Declarations, not logic to share: its mistakes are whole wrong answers, as a learner writes them, so
``duplicates`` pairs this module with the other checks modules by shape (:mod:`course_lib.checks` says why).

Both follow the course's convention (boolean, True = may attend) and must have exactly the shapes that
broadcast against attention scores of shape (batch, num_heads, seq_q, seq_k): (seq, seq) for the causal
mask, (batch, 1, 1, seq) for the padding mask.
"""

from __future__ import annotations

import torch

from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import inverted, public_and_hidden, with_output
from course_lib.models.masking import causal_mask, padding_mask

NOTEBOOK = "04_masking"


# ---------------------------------------------------------------------------------------------------
# causal_mask
# ---------------------------------------------------------------------------------------------------

def _causal_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    cases = [Case(f"seq_len={n}", args=(n,)) for n in (4, 2, 7, 1)]
    if hidden:
        cases += [Case(f"seq_len={n}", args=(n,)) for n in torch.randint(3, 40, (2,), generator=gen).tolist()]
    return cases


def _strictly_below(seq_len: int, device=None) -> torch.Tensor:
    return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device), diagonal=-1)


def _one_step_ahead(seq_len: int, device=None) -> torch.Tensor:
    return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device), diagonal=1)


def _upper_triangle(seq_len: int, device=None) -> torch.Tensor:
    return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device))


def _float_ones(seq_len: int, device=None) -> torch.Tensor:
    return torch.tril(torch.ones(seq_len, seq_len, device=device))


def _additive(seq_len: int, device=None) -> torch.Tensor:
    return torch.triu(torch.full((seq_len, seq_len), float("-inf"), device=device), diagonal=1)


def _batched(seq_len: int, device=None) -> torch.Tensor:
    return causal_mask(seq_len, device)[None, None]  # (1, 1, seq, seq)


def _causal_by_comparison(seq_len: int, device=None) -> torch.Tensor:
    i = torch.arange(seq_len, device=device)
    return i[None, :] <= i[:, None]  # key index j <= query index i


def _causal_with_loops(seq_len: int, device=None) -> torch.Tensor:
    mask = torch.zeros(seq_len, seq_len, dtype=torch.bool, device=device)
    for i in range(seq_len):
        mask[i, : i + 1] = True
    return mask


def _causal_not_triu(seq_len: int, device=None) -> torch.Tensor:
    return ~torch.ones(seq_len, seq_len, device=device).triu(1).bool()


def _pytorch_square_subsequent_mask(seq_len: int, device=None) -> torch.Tensor:
    """The class edition's stand-in pasted into the cell: PyTorch's additive mask turned boolean."""
    return torch.nn.Transformer.generate_square_subsequent_mask(seq_len, device=device) == 0


#: PyTorch's own causal masks: ``nn.Transformer``'s additive one (and the function behind it) and the boolean
#: triangle of ``torch.nn.attention.bias.CausalBias``. The class edition computes ``causal_mask`` through the
#: first, so the grader refuses them here (recorded by what ran, whatever name reached them).
PYTORCH_CAUSAL_MASKS = (
    "torch.nn.Transformer.generate_square_subsequent_mask",
    "torch.nn.modules.transformer._generate_square_subsequent_mask",
    "torch.nn.attention.bias.CausalBias._upper_left",
    "torch.nn.attention.bias.CausalBias._lower_right",
)
PYTORCH_MASK_HINT = ("build the triangle yourself: a square boolean matrix of ones cut to its lower triangle "
                     "(diagonal included), or a comparison of query and key indices. PyTorch's own causal masks "
                     "(nn.Transformer's generate_square_subsequent_mask, CausalBias) are not accepted here.")
PYTORCH_MASK_DETAIL = "torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device))."


CAUSAL_MASK = register(Exercise(
    name="causal_mask",
    notebook=NOTEBOOK,
    points=1,
    reference=causal_mask,
    summary="the (seq_len, seq_len) boolean look-ahead mask, True on and below the diagonal",
    **public_and_hidden(_causal_cases),
    forbidden_calls=PYTORCH_CAUSAL_MASKS,
    forbidden_hint=PYTORCH_MASK_HINT,
    mistakes=[
        Mistake("diagonal excluded", _strictly_below,
                "a position may attend to itself: keep the diagonal. Without it, the first query sees no key at all.",
                detail="torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=0)."),
        Mistake("one step into the future", _one_step_ahead,
                "query i may see keys j <= i only; diagonal=1 lets it see the next token, the very one it "
                "must predict."),
        Mistake("upper triangle", _upper_triangle,
                "rows are queries and columns keys: query i sees the PAST, columns 0..i, the lower "
                "triangle (torch.tril), not the upper one."),
        Mistake("inverted (True = masked)", with_output(causal_mask, inverted),
                "this is PyTorch's nn.Transformer / TensorFlow convention (True = forbidden). The course's "
                "mask says True = may attend: invert it."),
        Mistake("float 0/1 instead of bool", _float_ones,
                "the right pattern, but a float tensor: return a boolean one; a float 0/1 mask is ambiguous (is 1 "
                "'keep' or 'masked'?).",
                detail="torch.ones(..., dtype=torch.bool), or a comparison, which is boolean already."),
        Mistake("additive -inf mask", _additive,
                "this is an additive float mask (0 / -inf, nn.Transformer.generate_square_subsequent_mask); "
                "the course's mask is boolean, True where attention is allowed."),
        Mistake("PyTorch's generate_square_subsequent_mask", _pytorch_square_subsequent_mask, PYTORCH_MASK_HINT,
                detail=PYTORCH_MASK_DETAIL),
        Mistake("extra batch axes", _batched,
                "return shape (seq_len, seq_len): it broadcasts against (batch, heads, seq_q, seq_k) by "
                "itself; the caller adds axes if needed."),
    ],
    also_correct=[_causal_by_comparison, _causal_with_loops, _causal_not_triu],
))


# ---------------------------------------------------------------------------------------------------
# padding_mask
# ---------------------------------------------------------------------------------------------------

def _padding_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    cases = [
        Case("one sentence (1, 5) padded with 0", args=(torch.tensor([[4, 9, 2, 0, 0]]), 0)),
        Case("a (3, 6) batch of different lengths", args=(
            torch.tensor([[5, 6, 7, 8, 0, 0], [3, 0, 0, 0, 0, 0], [9, 8, 7, 6, 5, 4]]), 0)),
        Case("pad_id=1 (token 0 is a real token here)", args=(torch.tensor([[0, 7, 1, 1], [2, 0, 3, 1]]), 1)),
        Case("a batch of 4 sequences of 4 tokens (batch = seq)", args=(
            torch.tensor([[1, 2, 0, 0], [1, 0, 0, 0], [1, 2, 3, 0], [1, 2, 3, 4]]), 0)),
        Case("no padding at all (2, 3)", args=(torch.tensor([[3, 4, 5], [6, 7, 8]]), 0)),
        Case("padding on the left, and in the middle (compare tokens, do not count lengths)",
             args=(torch.tensor([[0, 0, 5, 6, 7], [4, 0, 8, 0, 9]]), 0)),
    ]
    if hidden:
        for _ in range(2):
            batch = int(torch.randint(2, 6, (), generator=gen))
            seq = int(torch.randint(2, 12, (), generator=gen)) + batch  # seq != batch
            pad_id = int(torch.randint(0, 3, (), generator=gen))
            tokens = torch.randint(3, 50, (batch, seq), generator=gen)
            lengths = torch.randint(1, seq + 1, (batch,), generator=gen)
            tokens[torch.arange(seq)[None, :] >= lengths[:, None]] = pad_id
            cases.append(Case(f"a random ({batch}, {seq}) batch, pad_id={pad_id}", args=(tokens, pad_id)))
    return cases


def _padding_2d(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return tokens != pad_id  # (batch, seq): lines up with (seq_q, seq_k), not with batch


def _padding_3d(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return (tokens != pad_id)[:, None, :]  # (batch, 1, seq): broadcasts as (1, batch, 1, seq)


def _padding_of_queries(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return (tokens != pad_id)[:, None, :, None]  # (batch, 1, seq, 1): masks query rows, not keys


def _padding_float(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return (tokens != pad_id).float()[:, None, None, :]


def _padding_tensorflow_style(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return (tokens == pad_id).float()[:, None, None, :]  # TensorFlow tutorial: 1.0 = padding, add mask * -1e9


def _padding_pad_is_zero(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return (tokens != 0)[:, None, None, :]  # ignores pad_id


def _padding_both_sides(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    real = tokens != pad_id
    return real[:, None, :, None] & real[:, None, None, :]  # (batch, 1, seq, seq): queries masked too


def _padding_unsqueeze(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return tokens.ne(pad_id).unsqueeze(1).unsqueeze(2)


def _padding_view(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    batch, seq = tokens.shape
    return (tokens != pad_id).view(batch, 1, 1, seq)


def _padding_loops(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    batch, seq = tokens.shape
    mask = torch.zeros(batch, 1, 1, seq, dtype=torch.bool)
    for b in range(batch):
        for j in range(seq):
            mask[b, 0, 0, j] = bool(tokens[b, j] != pad_id)
    return mask


PADDING_MASK = register(Exercise(
    name="padding_mask",
    notebook=NOTEBOOK,
    points=1,
    reference=padding_mask,
    summary="the (batch, 1, 1, seq) boolean padding mask, True at real tokens",
    **public_and_hidden(_padding_cases),
    # the class edition's from_key_padding_mask runs PyTorch's own conversion of a key_padding_mask (issue 45)
    forbidden_calls=("torch.nn.functional._canonical_mask",),
    mistakes=[
        Mistake("inverted (True at padding)", with_output(padding_mask, inverted),
                "True must mark the REAL tokens, the keys that may be attended to; True at padding is "
                "nn.MultiheadAttention's key_padding_mask convention.",
                detail="tokens != pad_id."),
        Mistake("shape (batch, seq)", _padding_2d,
                "a (batch, seq) mask lines up with the scores' LAST two axes (seq_q, seq_k), not with the "
                "batch: return shape (batch, 1, 1, seq) so it broadcasts over heads and queries."),
        Mistake("shape (batch, 1, seq)", _padding_3d,
                "with 3 axes the mask aligns with (heads, seq_q, seq_k) and the batch axis lands on the "
                "heads: add two singleton axes, (batch, 1, 1, seq)."),
        Mistake("mask of the queries", _padding_of_queries,
                "padding hides KEYS (the last axis, seq_k), not query rows: shape (batch, 1, 1, seq), "
                "not (batch, 1, seq, 1)."),
        Mistake("float instead of bool", _padding_float,
                "the right pattern, but a float tensor: the comparison with the pad id is boolean already, return it "
                "as it is.",
                detail="(tokens != pad_id), without .float()."),
        Mistake("TensorFlow's float mask, 1 = padding", _padding_tensorflow_style,
                "this is the TensorFlow tutorial's convention: a float mask with 1.0 at PADDING, added to the scores "
                "times -1e9. This course's mask means the opposite and has another type: a boolean tensor, True at "
                "the real tokens that may be attended to, shape (batch, 1, 1, seq).",
                detail="(tokens != pad_id)[:, None, None, :]."),
        Mistake("pad id hard-coded as 0", _padding_pad_is_zero,
                "compare with the argument pad_id, not with 0: some vocabularies put padding elsewhere."),
        Mistake("queries and keys both masked", _padding_both_sides,
                "mask only the keys, shape (batch, 1, 1, seq): a padded query row whose keys are all "
                "hidden has nothing to attend to, and its output is ignored anyway."),
    ],
    also_correct=[_padding_unsqueeze, _padding_view, _padding_loops],
))
