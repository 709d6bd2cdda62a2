"""Notebooks 14's and 15's checks (``course_lib/checks/nb14_todays_models.py`` and ``nb15_inference_at_scale.py``):
each known mistake is rejected with its own hint, the reference and the correct alternatives pass, and the public
cases are built so that each mistake shows (the two RoPE layouts coincide at d_k = 2, the head orders at one
key/value head, the online softmax without rescaling whenever the first tile holds the maximum: the cases must go
beyond those).

``tests/checks/test_exercises.py`` sweeps every exercise too (hidden cases, seeds, sampled in CI); this file runs the
five exercises of notebooks 14 and 15 whole, on their public cases, in the fast tier.
"""

from __future__ import annotations

import pytest
import torch

from course_lib.exercises import get_exercise, run_check

EXERCISES = ["apply_rope", "rms_norm", "swiglu", "repeat_kv", "online_softmax"]
MISTAKES = [(name, m) for name in EXERCISES for m in get_exercise(name).mistakes]
#: The mistakes the issue names, by exercise: each must be declared (and is then tested below).
NAMED = {
    "apply_rope": ["layouts confused", "one layout's angle table with the other's pairs"],
    "rms_norm": ["eps outside the square root"],
    "swiglu": ["gate on the wrong branch"],
    "repeat_kv": ["heads repeated in the wrong order"],
    "online_softmax": ["running sum not rescaled"],
}
#: Wrong answers a student-seat review wrote (round 3) that failed with no hint, or with another mistake's hint
#: ("eps fixed instead of the module's" was told that eps was left out): each is declared, so it gets its own.
FOUND_BY_THE_SEAT = {
    "apply_rope": ["interleaved pairs put back as halves", "b rotated with the already rotated a", "base ignored",
                   "(batch, seq) angles without a heads axis"],
    "rms_norm": ["eps fixed instead of the module's", "one mean square for the whole tensor", "square of the mean"],
    "swiglu": ["GELU instead of SiLU", "w_gate never used", "w_up never used"],
    "online_softmax": ["new tile measured against the old maximum", "a short last tile dropped", "dim ignored"],
}


@pytest.mark.parametrize("name, mistake", MISTAKES, ids=[f"{n}-{m.name}" for n, m in MISTAKES])
def test_each_mistake_is_rejected_with_its_own_hint(name: str, mistake) -> None:
    result = run_check(name, mistake.impl)
    assert result.status == "failed", result
    assert result.hint == mistake.hint, f"{mistake.name} was told: {result.hint!r}"


@pytest.mark.parametrize("name", EXERCISES)
def test_the_reference_and_every_alternative_pass(name: str) -> None:
    ex = get_exercise(name)
    assert len(ex.mistakes) >= 5 and len(ex.also_correct) >= 2
    for impl in (ex.reference, *ex.also_correct):
        result = run_check(name, impl)
        assert result.passed, f"{getattr(impl, '__name__', impl)}: {result}"


#: The four wrong answers that passed (issue 48), and the misleading hints made specific: each is declared.
ISSUE_48 = {
    "apply_rope": ["seq_dim ignored", "float32 result for a float64 input", "frequencies counted from 1"],
    "online_softmax": ["one maximum for all rows", "running maximum never updated", "computed outside PyTorch (NumPy)"],
}


@pytest.mark.parametrize("declared", [NAMED, FOUND_BY_THE_SEAT, ISSUE_48], ids=["issue", "student seat", "issue 48"])
def test_the_mistakes_the_issue_names_are_declared(declared: dict[str, list[str]]) -> None:
    for name, wanted in declared.items():
        declared = {m.name for m in get_exercise(name).mistakes}
        assert set(wanted) <= declared, f"{name}: missing {set(wanted) - declared}"


def _mistake(name: str, mistake: str):
    return next(m for m in get_exercise(name).mistakes if m.name == mistake).impl


def test_the_layouts_coincide_on_one_pair_and_differ_beyond() -> None:
    """With d_k = 2 there is one pair either way; the half-layout case is where confusing them shows."""
    apply_rope = get_exercise("apply_rope").reference
    confused = _mistake("apply_rope", "layouts confused")
    one_pair, positions = torch.tensor([[1.0, 2.0]]), torch.tensor([3])
    assert torch.allclose(confused(one_pair, positions), apply_rope(one_pair, positions))
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0))
    assert (confused(x, torch.arange(5)) - apply_rope(x, torch.arange(5))).abs().max() > 0.1


def test_rope_keeps_lengths_and_scores_depend_on_the_offset_only() -> None:
    """The property the notebook checks, here on the reference: rotations, and q.k a function of n - m."""
    apply_rope = get_exercise("apply_rope").reference
    gen = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 16, generator=gen), torch.randn(1, 16, generator=gen)
    for layout in ("half", "interleaved"):
        def score(m: int, n: int, layout: str = layout) -> float:
            return float(apply_rope(q, torch.tensor([m]), layout=layout) @ apply_rope(k, torch.tensor([n]),
                                                                                   layout=layout).T)
        assert abs(score(4, 9) - score(104, 109)) < 1e-4 and abs(score(4, 9) - score(4, 10)) > 1e-3
        rotated = apply_rope(q.expand(7, 16), torch.arange(7), layout=layout)
        assert torch.allclose(rotated.norm(dim=-1), q.norm().expand(7), atol=1e-5)


def test_the_wrong_head_order_is_invisible_with_one_kv_head() -> None:
    repeat_kv = get_exercise("repeat_kv").reference
    tiled = _mistake("repeat_kv", "heads repeated in the wrong order")
    one = torch.randn(2, 1, 3, 4)
    assert torch.equal(tiled(one, 4), repeat_kv(one, 4))
    two = torch.tensor([10.0, 20.0]).view(1, 2, 1, 1)
    assert repeat_kv(two, 2).flatten().tolist() == [10.0, 10.0, 20.0, 20.0]
    assert tiled(two, 2).flatten().tolist() == [10.0, 20.0, 10.0, 20.0]


def test_a_missing_rescale_is_exact_when_the_maximum_comes_first() -> None:
    online_softmax = get_exercise("online_softmax").reference
    unscaled = _mistake("online_softmax", "running sum not rescaled")
    falling, rising = torch.arange(9.0, 0.0, -1.0), torch.arange(1.0, 10.0)
    assert torch.allclose(unscaled(falling, tile_size=3), online_softmax(falling, tile_size=3))
    assert (unscaled(rising, tile_size=3) - torch.softmax(rising, -1)).abs().max() > 0.1
    assert torch.allclose(online_softmax(rising, tile_size=3), torch.softmax(rising, -1), atol=1e-6)


def test_eps_inside_and_outside_the_root_part_ways_on_small_activations() -> None:
    ex = get_exercise("rms_norm")
    small = next(c for c in ex.cases("public") if "small activations" in c.label)
    outside = _mistake("rms_norm", "eps outside the square root")
    module_in, module_out = ex.reference(**small.init), outside(**small.init)
    module_in.load_state_dict(small.state)
    module_out.load_state_dict(small.state)
    with torch.no_grad():
        x = small.args[0]
        assert (module_in(x) - module_out(x)).abs().max() > 100 * ex.atol
        ordinary = torch.randn(3, x.shape[-1]) * 2
        assert torch.allclose(module_in(ordinary), module_out(ordinary), atol=1e-5)


def test_pytorchs_own_rms_norm_counts_as_a_shortcut() -> None:
    """F.rms_norm gives the right numbers; the exercise asks for it to be written, so the check refuses it."""
    class Shortcut(get_exercise("rms_norm").reference):
        def forward(self, x):
            return torch.nn.functional.rms_norm(x, (self.d_model,), self.weight, self.eps)

    result = run_check("rms_norm", Shortcut)
    assert result.status == "failed" and "rms_norm" in result.message


def test_batch_angles_without_a_heads_axis_broadcast_silently_when_batch_equals_heads() -> None:
    """Why the public case has batch = heads = 2: the mistake then raises nothing, it only turns head h of every
    sequence by sequence h's positions; the check's verdict is the only sign of it."""
    apply_rope = get_exercise("apply_rope").reference
    wrong = _mistake("apply_rope", "(batch, seq) angles without a heads axis")
    x, positions = torch.randn(2, 2, 3, 8), torch.tensor([[0, 1, 2], [40, 41, 42]])
    assert wrong(x, positions).shape == x.shape
    assert torch.allclose(wrong(x[:, :1], positions[:1]), apply_rope(x[:, :1], positions[:1]))
    assert (wrong(x, positions) - apply_rope(x, positions)).abs().max() > 0.1


def test_the_four_wrong_answers_were_right_on_the_older_cases_and_fail_on_the_new_ones() -> None:
    """Why the new cases exist: each of the four answers equals the reference wherever the older cases looked
    (the course's layout, float32, rows of one scale, no late large score) and differs on its new case."""
    rope = get_exercise("apply_rope").reference
    x, positions = torch.randn(2, 5, 2, 8, generator=torch.Generator().manual_seed(3)), torch.arange(5)
    ignored = _mistake("apply_rope", "seq_dim ignored")
    assert torch.equal(ignored(x.transpose(1, 2), positions), rope(x.transpose(1, 2), positions))
    square = torch.randn(2, 4, 4, 8, generator=torch.Generator().manual_seed(4))  # (batch, seq, heads = seq, d_k)
    assert (ignored(square, torch.arange(4), seq_dim=1) - rope(square, torch.arange(4), seq_dim=1)).abs().max() > 0.1
    float32 = _mistake("apply_rope", "float32 result for a float64 input")
    assert torch.equal(float32(x, positions, seq_dim=1), rope(x, positions, seq_dim=1))
    course = x.transpose(1, 2).double()  # (batch, heads, seq, d_k)
    assert float32(course, positions).dtype == torch.float32 and rope(course, positions).dtype == torch.float64
    softmax = get_exercise("online_softmax").reference
    shared = _mistake("online_softmax", "one maximum for all rows")
    same_scale = torch.randn(3, 10, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(shared(same_scale, tile_size=4), softmax(same_scale, tile_size=4))
    scales = same_scale + torch.tensor([[0.0], [200.0], [-300.0]])
    assert shared(scales, tile_size=4).isnan().any() and not softmax(scales, tile_size=4).isnan().any()
    frozen = _mistake("online_softmax", "running maximum never updated")
    rising = torch.arange(1.0, 10.0)
    torch.testing.assert_close(frozen(rising, tile_size=3), softmax(rising, tile_size=3))
    late = torch.tensor([0.0, 1, 2, 150, 151, 152])
    assert frozen(late, tile_size=3).isnan().any()
    torch.testing.assert_close(softmax(late, tile_size=3), torch.softmax(late, -1))


def test_a_detached_root_mean_square_is_told_its_gradient_is_cut() -> None:
    """Right numbers, wrong gradients: the hint names a cut gradient (.detach()), not only a wrong dependency."""
    class Detached(get_exercise("rms_norm").reference):
        def forward(self, x):
            return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps).detach()

    result = run_check("rms_norm", Detached)
    assert result.status == "failed" and ".detach()" in result.hint, result
