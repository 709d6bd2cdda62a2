"""The mistakes a student-seat review found unnamed or accepted (issue 17): each is rejected with its own hint.

``tests/checks/test_exercises.py`` already asserts that every declared mistake is rejected by the public check and by
the hidden cases; here: the hint a learner reads is the mistake's own (not another mistake's, not a generic
one), and the softmax tripwire of notebook 00 works in the check and in the grader's kernel-side harness.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_lib.exercises import get_exercise, run_check
from course_lib.exercises.core import ForbiddenCallError, forbid_calls

NAMED = [
    ("stable_softmax", "max without keepdim"),
    ("stable_softmax", "calls torch.softmax"),
    ("stable_softmax", "calls Tensor.softmax"),
    ("scaled_dot_product_attention", "masked scores set to 0 instead of -inf"),
    ("scaled_dot_product_attention", "exp without the max shift, NaN hidden by nan_to_num"),
    ("scaled_dot_product_attention", "dropout_p ignored"),
    ("scaled_dot_product_attention", "divided by sqrt(seq_len) instead of sqrt(d_k)"),
    ("scaled_dot_product_attention", "dropout applied to the output"),
    ("multi_head_attention", "keys and values taken from the query"),
    ("multi_head_attention", "-1e9 fill leaves a fully masked query uniform"),
    ("padding_mask", "TensorFlow's float mask, 1 = padding"),
    ("patchify", "reshape splits each side as (p, H/p)"),
    ("patchify", "grid axes moved last before the reshape"),
    ("add_cls_and_positions", "position embeddings left out"),
    # the class edition's stand-ins pasted: refused by what ran, with the exercise's own hint (issue 32)
    ("causal_mask", "PyTorch's generate_square_subsequent_mask"),
    ("label_smoothed_cross_entropy", "PyTorch's label smoothing with the guard"),
    ("sinusoidal_table", "frequencies from torch.logspace"),
]


def _mistake(exercise: str, name: str):
    found = [m for m in get_exercise(exercise).mistakes if m.name == name]
    assert len(found) == 1, f"{exercise}: no mistake called {name!r}"
    return found[0]


@pytest.mark.parametrize("exercise,name", NAMED, ids=[f"{e}-{n}" for e, n in NAMED])
def test_mistake_is_rejected_with_its_own_hint(exercise: str, name: str) -> None:
    mistake = _mistake(exercise, name)
    result = run_check(exercise, mistake.impl)
    assert result.status == "failed", result
    assert result.hint == mistake.hint, result


def test_missing_keepdim_is_a_wrong_value_not_an_error() -> None:
    """It used to raise on the first 2-D case, and an error verdict carries no hint."""
    result = run_check("stable_softmax", lambda x, dim=-1: (lambda e: e / e.sum(dim, keepdim=True))(
        torch.exp(x - x.amax(dim=dim))))
    assert result.status == "failed" and "keepdim" in result.hint


@pytest.mark.parametrize("which", ["public", "hidden"])
def test_the_new_cases_are_public_and_hidden(which: str) -> None:
    """Overflowing scores and dropout_p=1 in 01, a fully masked query in 02's multi-head cases."""
    labels = [c.label for c in get_exercise("scaled_dot_product_attention").cases(which, seed=5)]
    assert any("overflows float32" in label for label in labels)
    assert any("dropout_p=1.0" in label for label in labels)
    mha = get_exercise("multi_head_attention").cases(which, seed=5)
    fully = [c for c in mha if "all masked" in c.label]
    assert fully and not bool(fully[0].kwargs["mask"].any(-1).all())


def test_dropout_one_gives_exact_zeros_in_the_reference() -> None:
    """The oracle of the dropout case is exact: p = 1 drops every weight (PyTorch's F.dropout)."""
    ex = get_exercise("scaled_dot_product_attention")
    case = next(c for c in ex.cases("public") if "dropout_p=1.0" in c.label)
    output, weights = ex.reference(*case.args, **case.kwargs)
    assert torch.count_nonzero(output) == 0 and torch.count_nonzero(weights) == 0
    assert torch.count_nonzero(F.dropout(torch.ones(5), p=1.0)) == 0


def test_overflow_case_really_overflows_without_the_shift() -> None:
    ex = get_exercise("scaled_dot_product_attention")
    case = next(c for c in ex.cases("hidden", seed=3) if "overflows" in c.label)
    query, key = case.args[0], case.args[1]
    scores = query @ key.transpose(-2, -1) / query.shape[-1] ** 0.5
    assert torch.isinf(torch.exp(scores)).any()


def test_softmax_tripwire_catches_every_spelling_and_restores() -> None:
    from torch.nn.functional import softmax as imported_softmax

    names = ("torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax", "torch.special.softmax")
    x = torch.randn(4)
    spellings = [lambda t: torch.softmax(t, -1), lambda t: F.softmax(t, -1), lambda t: t.softmax(-1),
                 lambda t: torch.special.softmax(t, -1), lambda t: torch.nn.Softmax(-1)(t),
                 lambda t: imported_softmax(t, -1)]
    for spelling in spellings:
        with pytest.raises(ForbiddenCallError, match="softmax"), forbid_calls(names, spelling):
            spelling(x)
    expected = torch.exp(x) / torch.exp(x).sum()
    for spelling in spellings:  # everything restored
        assert torch.allclose(spelling(x), expected)
    assert imported_softmax is F.softmax and "softmax" not in vars(torch.Tensor)


def test_softmax_call_fails_the_check_and_later_checks_may_use_it() -> None:
    result = run_check("stable_softmax", lambda x, dim=-1: F.softmax(x, dim=dim))
    assert result.status == "failed" and "torch.nn.functional.softmax" in result.message
    assert run_check("scaled_dot_product_attention", get_exercise("scaled_dot_product_attention").reference).passed
