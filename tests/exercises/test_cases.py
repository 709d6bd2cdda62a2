"""The helpers of course_lib.exercises.cases, and the short declaration docs/instructors.md shows."""

from __future__ import annotations

import torch

from course_lib.exercises import Case, Exercise, Mistake, register, run_check
from course_lib.exercises.cases import (
    bool_mask,
    dtype_variants,
    inverted,
    public_and_hidden,
    randn,
    swapped,
    with_inputs,
    with_output,
)


def test_random_inputs_follow_the_generator() -> None:
    a = randn(torch.Generator().manual_seed(3), 2, 5, scale=4.0)
    b = torch.randn(2, 5, generator=torch.Generator().manual_seed(3)) * 4.0
    assert torch.equal(a, b)
    mask = bool_mask(torch.Generator().manual_seed(0), 6, 3, 7, keep=0.1)
    assert mask.dtype == torch.bool and mask.shape == (6, 3, 7) and bool(mask.any(-1).all())


def test_public_and_hidden_call_one_function() -> None:
    def make(gen, hidden):
        return [Case("hidden" if hidden else "public", args=(randn(gen, 2),))]

    kinds = public_and_hidden(make)
    gen = torch.Generator().manual_seed(0)
    assert kinds["public_cases"](gen)[0].label == "public" and kinds["hidden_cases"](gen)[0].label == "hidden"


def test_dtype_variants_convert_only_floating_inputs() -> None:
    case = Case("c", args=(torch.ones(2), torch.tensor([1, 2])), kwargs={"mask": torch.tensor([True, False])},
                state={"w": torch.zeros(3)})
    [double] = dtype_variants([case])
    assert double.label == "c [float64]" and double.args[0].dtype == torch.float64
    assert double.args[1].dtype == torch.long and double.kwargs["mask"].dtype == torch.bool
    assert double.state["w"].dtype == torch.float64 and case.args[0].dtype == torch.float32


def test_mistakes_built_from_the_reference() -> None:
    def attend(query, key, value, mask=None):
        return (query + 10 * key + 100 * value) * (1 if mask is None else mask)

    q, k, v, m = torch.tensor(1.0), torch.tensor(2.0), torch.tensor(3.0), torch.tensor(True)
    assert float(with_inputs(attend, mask=inverted)(q, k, v, mask=m)) == 0.0
    assert float(with_inputs(attend, mask=inverted)(q, k, v)) == 321.0  # None stays None
    assert float(swapped(attend, "key", "value")(q, k, v)) == 231.0
    assert float(with_output(attend, lambda y: -y)(q, k, v)) == -321.0
    assert with_inputs(attend, mask=inverted).__name__ == "attend"


# --- the instructor's example of docs/instructors.md (about 20 lines) ---------------------------------------

def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x over the positions where mask is True (dim -1)."""
    return (x * mask).sum(-1) / mask.sum(-1).clamp(min=1)


def _cases(gen, hidden):
    n = 7 if hidden else 5
    return [Case(f"a (3, {n}) batch", args=(randn(gen, 3, n), bool_mask(gen, 3, n))),
            Case("one row", args=(randn(gen, 1, n, scale=5.0), bool_mask(gen, 1, n)))]


def _declare() -> Exercise:
    """Registered inside the test, after collection, so that no other test's list of exercises holds it."""
    return register(Exercise(
        name="masked_mean_example", notebook="instructor_example", points=1, reference=masked_mean,
        **public_and_hidden(_cases),
        mistakes=[Mistake("mask inverted", with_inputs(masked_mean, mask=inverted), "True marks the kept positions."),
                  Mistake("mean over every position", lambda x, mask: x.mean(-1), "divide by the number of kept "
                          "positions, mask.sum(-1), not by the length")],
        also_correct=[lambda x, mask: torch.where(mask, x, 0.0).sum(-1) / mask.sum(-1).clamp(min=1)],
    ))


def test_the_guides_example_exercise_works() -> None:
    example = _declare()
    assert run_check("masked_mean_example", masked_mean).passed
    assert run_check("masked_mean_example", example.also_correct[0]).passed
    for mistake in example.mistakes:
        result = run_check("masked_mean_example", mistake.impl)
        assert result.status == "failed" and result.hint == mistake.hint
