"""The mistakes a student-seat review found unnamed or accepted (issue 17): each is rejected with its own hint.

``tests/test_exercises.py`` already asserts that every declared mistake is rejected by the public check and by
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


def test_grader_sandbox_side_trips_on_softmax() -> None:
    """The grader's sandbox runs the same declaration: its job carries the forbidden calls to run_case."""
    from course_lib.grading.codec import encode_cases
    from course_lib.grading.sandbox_main import run_cases

    ex = get_exercise("stable_softmax")
    arrays, described = encode_cases(ex.cases("hidden", seed=11))
    job = {"cases": described, "grad": ex.grad, "differentiable": ex.differentiable,
           "forbidden": list(ex.forbidden_calls)}

    def library(x, dim=-1):
        return torch.softmax(x, dim=dim)

    result, _ = run_cases(job, library, arrays)
    assert result["cases"] and all(c["status"] == "error" and "ForbiddenCallError" in c["error"]
                                   for c in result["cases"])

    def own(x, dim=-1):
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return e / e.sum(dim, keepdim=True)

    result, _ = run_cases(job, own, arrays)
    assert all(c["status"] == "ok" for c in result["cases"])


def test_pytorchs_one_call_attention_fails_the_attention_check() -> None:
    """F.scaled_dot_product_attention is the exercise's answer: the check switches it off, as softmax in 00."""

    def library(query, key, value, mask=None, dropout_p=0.0):
        d_k = query.size(-1)
        scores = query @ key.transpose(-2, -1) / d_k ** 0.5
        weights = torch.softmax(scores if mask is None else scores.masked_fill(~mask, float("-inf")), dim=-1)
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout_p), weights

    result = run_check("scaled_dot_product_attention", library)
    assert result.status == "failed" and "scaled_dot_product_attention" in result.message
    assert run_check("scaled_dot_product_attention", get_exercise("scaled_dot_product_attention").reference).passed


class _WrapsTorchMultiheadAttention(torch.nn.Module):
    """A learner's answer that hands the work to PyTorch's multi-head attention, with the notebook's attributes
    (so the check's weights load) and a fix for the query with no key (PyTorch gives NaN there)."""

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        self.d_model, self.num_heads, self.d_k, self.dropout = d_model, num_heads, d_model // num_heads, dropout
        self.w_q, self.w_k, self.w_v, self.w_o = (torch.nn.Linear(d_model, d_model, bias=bias) for _ in range(4))

    def forward(self, query, key, value, mask=None, need_weights=False):
        batch, seq_q, seq_k = query.shape[0], query.shape[1], key.shape[1]
        in_weight = torch.cat([self.w_q.weight, self.w_k.weight, self.w_v.weight])
        in_bias = None if self.w_q.bias is None else torch.cat([self.w_q.bias, self.w_k.bias, self.w_v.bias])
        blocked = None
        if mask is not None:  # the course's mask (True = may attend) -> PyTorch's (True = blocked), per head
            allowed = mask.expand(batch, self.num_heads, seq_q, seq_k)
            blocked = ~allowed.reshape(batch * self.num_heads, seq_q, seq_k)
        out, weights = F.multi_head_attention_forward(
            query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), self.d_model, self.num_heads,
            in_weight, in_bias, None, None, False, self.dropout if self.training else 0.0, self.w_o.weight,
            self.w_o.bias, training=self.training, need_weights=True, attn_mask=blocked,
            average_attn_weights=False)
        out = out.transpose(0, 1)  # (batch, seq_q, d_model)
        if mask is not None:
            no_key = ~mask.expand(batch, self.num_heads, seq_q, seq_k).any(-1, keepdim=True)  # (b, h, seq_q, 1)
            weights = weights.masked_fill(no_key, 0.0)
            out = torch.where(no_key.all(1), self.w_o.bias if self.w_o.bias is not None else 0.0, out)
        return out, weights if need_weights else None


def test_wrapping_pytorchs_multihead_attention_fails_the_class_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the tripwire the wrapper passes the check (so the tripwire is what stops it); with it, the check
    fails naming the function, the reference still passes, and PyTorch's module is restored afterwards."""
    exercise = get_exercise("multi_head_attention")
    with monkeypatch.context() as patch:
        patch.setattr(exercise, "forbidden_calls", ())
        unguarded = run_check("multi_head_attention", _WrapsTorchMultiheadAttention)
        assert unguarded.passed, unguarded.message
    result = run_check("multi_head_attention", _WrapsTorchMultiheadAttention)
    assert result.status == "failed" and "multi_head_attention_forward" in result.message, result.message
    assert run_check("multi_head_attention", exercise.reference).passed
    module = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(1, 3, 8)
    assert module(x, x, x)[0].shape == (1, 3, 8)  # PyTorch's module works again
