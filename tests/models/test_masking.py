"""course_lib.models.masking: the masks, the conversions between conventions, causality on the course's attention."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.models.attention import MultiHeadAttention, scaled_dot_product_attention
from course_lib.models.masking import (
    causal_mask,
    decoder_mask,
    from_additive_mask,
    from_key_padding_mask,
    from_tf_mask,
    padding_mask,
    to_additive_mask,
    to_key_padding_mask,
    to_tf_mask,
)

TOKENS = torch.tensor([[5, 6, 7, 0, 0], [8, 9, 0, 0, 0], [1, 2, 3, 4, 3]])


# ---------------------------------------------------------------------------------------------------
# The three builders
# ---------------------------------------------------------------------------------------------------

def test_padding_mask_values_and_shape() -> None:
    mask = padding_mask(TOKENS, pad_id=0)
    assert mask.shape == (3, 1, 1, 5) and mask.dtype == torch.bool
    lengths = [3, 2, 5]
    for b, n in enumerate(lengths):
        assert mask[b, 0, 0].tolist() == [True] * n + [False] * (5 - n)
    # another pad id: only that id is padding
    assert padding_mask(TOKENS, pad_id=3)[2, 0, 0].tolist() == [True, True, False, True, False]


def test_padding_mask_broadcasts_to_the_scores() -> None:
    mask = padding_mask(TOKENS, pad_id=0)
    assert torch.broadcast_shapes(mask.shape, (3, 4, 5, 5)) == (3, 4, 5, 5)
    assert torch.broadcast_shapes(mask.shape, (3, 4, 2, 5)) == (3, 4, 2, 5)  # cross-attention: seq_q != seq_k


@pytest.mark.parametrize("bad", [torch.tensor([1, 2, 0]), torch.zeros(2, 3, 4, dtype=torch.long),
                                 torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bool)])
def test_padding_mask_refuses_wrong_rank_or_dtype(bad: torch.Tensor) -> None:
    expected = f"(batch, seq), got shape {tuple(bad.shape)} and dtype {bad.dtype}"
    with pytest.raises(ValueError, match=re.escape(expected)):
        padding_mask(bad, pad_id=0)


@pytest.mark.parametrize("n", [1, 2, 5, 33])
def test_causal_mask_is_j_at_most_i(n: int) -> None:
    mask = causal_mask(n)
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    assert mask.dtype == torch.bool and mask.shape == (n, n)
    assert torch.equal(mask, j <= i)


def test_causal_mask_matches_pytorch() -> None:
    """nn.Transformer's float mask (-inf above the diagonal) says the same thing."""
    reference = nn.Transformer.generate_square_subsequent_mask(7)
    assert torch.equal(from_additive_mask(reference), causal_mask(7))


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_causal_mask_refuses_bad_lengths(bad) -> None:
    with pytest.raises(ValueError, match="seq_len must be a positive int"):
        causal_mask(bad)


def test_decoder_mask_is_causal_and_padding() -> None:
    mask = decoder_mask(TOKENS, pad_id=0)
    assert mask.shape == (3, 1, 5, 5) and mask.dtype == torch.bool
    for b in range(3):
        for i in range(5):
            for j in range(5):
                assert mask[b, 0, i, j].item() == (j <= i and TOKENS[b, j].item() != 0)
    with pytest.raises(ValueError, match=r"tgt_tokens must have shape \(batch, seq\), got shape \(5,\)"):
        decoder_mask(TOKENS[0], pad_id=0)
    with pytest.raises(TypeError, match="integer token ids"):
        decoder_mask(TOKENS.float(), pad_id=0)


# ---------------------------------------------------------------------------------------------------
# Conversions round-trip, and mean the same thing to PyTorch
# ---------------------------------------------------------------------------------------------------

RANDOM_MASKS = [torch.rand(shape, generator=torch.Generator().manual_seed(i)) > 0.4
                for i, shape in enumerate([(5,), (4, 6), (2, 1, 1, 6), (2, 3, 4, 6)])]


@pytest.mark.parametrize("mask", RANDOM_MASKS, ids=lambda m: str(tuple(m.shape)))
def test_tf_and_additive_round_trips(mask: torch.Tensor) -> None:
    tf = to_tf_mask(mask)
    assert tf.dtype == torch.float32 and set(tf.unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(tf == 1, ~mask)  # 1 = masked
    assert torch.equal(from_tf_mask(tf), mask)
    assert torch.equal(to_tf_mask(from_tf_mask(tf)), tf)
    additive = to_additive_mask(mask)
    assert torch.equal(additive == 0, mask) and torch.isneginf(additive[~mask]).all()
    assert torch.equal(from_additive_mask(additive), mask)
    assert torch.equal(from_additive_mask(tf * -1e9), mask)  # what the TF tutorial adds is masked too


def test_key_padding_round_trip() -> None:
    course = padding_mask(TOKENS, pad_id=0)
    kpm = to_key_padding_mask(course)
    assert kpm.shape == (3, 5) and torch.equal(kpm, TOKENS == 0)  # True = ignore = padding
    assert torch.equal(from_key_padding_mask(kpm), course)
    assert torch.equal(to_key_padding_mask(from_key_padding_mask(kpm)), kpm)
    assert torch.equal(to_key_padding_mask(course[:, 0, 0]), kpm)  # (batch, seq) input works too


def test_conversion_errors() -> None:
    with pytest.raises(TypeError, match="must be a boolean tensor.*dtype torch.float32"):
        to_tf_mask(torch.ones(3))
    with pytest.raises(TypeError, match="boolean already"):
        from_tf_mask(torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="only 0 and 1, got 0.5"):
        from_tf_mask(torch.tensor([0.0, 0.5]))
    with pytest.raises(ValueError, match=r"\(batch, 1, 1, seq_k\) or \(batch, seq_k\), got \(2, 1, 4, 4\)"):
        to_key_padding_mask(decoder_mask(TOKENS[:2, :4], 0))
    with pytest.raises(ValueError, match=r"\(batch, seq_k\), got \(5,\)"):
        from_key_padding_mask(torch.zeros(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="a bias, not a mask"):
        from_additive_mask(torch.tensor([0.0, -2.0]))
    with pytest.raises(TypeError, match="floating-point"):
        from_additive_mask(torch.tensor([0, 1]))


def test_tf_convention_gives_the_same_attention() -> None:
    """scores + tf_mask * -1e9 (TensorFlow tutorial) = the course's boolean mask = F.sdpa's float mask."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 5, 8, generator=g) for _ in range(3))
    mask = decoder_mask(TOKENS, pad_id=0)  # (3, 1, 5, 5)
    scores = q @ k.transpose(-2, -1) / 8 ** 0.5
    tf_out = torch.softmax(scores + to_tf_mask(mask) * -1e9, dim=-1) @ v
    course_out, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    torch.testing.assert_close(course_out, tf_out)
    sdpa_float = F.scaled_dot_product_attention(q, k, v, attn_mask=to_additive_mask(mask))
    sdpa_bool = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(sdpa_float, course_out)
    torch.testing.assert_close(sdpa_bool, course_out)


def test_key_padding_mask_means_the_same_to_nn_multiheadattention() -> None:
    torch.manual_seed(0)
    torch_mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    ours = MultiHeadAttention.from_torch(torch_mha).eval()
    x = torch.randn(3, 5, 16)
    mask = padding_mask(TOKENS, pad_id=0)
    expected, _ = torch_mha(x, x, x, key_padding_mask=to_key_padding_mask(mask), need_weights=False)
    got, _ = ours(x, x, x, mask=mask)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    # and the classic bug: passing the course's mask straight in attends to padding ONLY
    wrong, _ = torch_mha(x, x, x, key_padding_mask=mask[:, 0, 0], need_weights=False)
    assert not torch.allclose(wrong, expected, atol=1e-3)


# ---------------------------------------------------------------------------------------------------
# Causality and padding on the course's own attention
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("need_weights", [True, False])
def test_causality_by_perturbation(need_weights: bool) -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=16, num_heads=4).eval()
    x = torch.randn(2, 8, 16)
    mask = causal_mask(8)
    out, _ = mha(x, x, x, mask=mask, need_weights=need_weights)
    for i in range(8):
        changed = x.clone()
        changed[:, i + 1:] = torch.randn(2, 8 - i - 1, 16) * 10  # everything after position i
        new, _ = mha(changed, changed, changed, mask=mask, need_weights=need_weights)
        torch.testing.assert_close(new[:, : i + 1], out[:, : i + 1], atol=1e-6, rtol=0)
        if i < 7:
            assert not torch.allclose(new[:, i + 1:], out[:, i + 1:], atol=1e-3)
    # without the mask the same perturbation does change the past: the test can fail
    unmasked, _ = mha(x, x, x, need_weights=need_weights)
    changed = x.clone()
    changed[:, 4:] += 1.0
    new, _ = mha(changed, changed, changed, need_weights=need_weights)
    assert not torch.allclose(new[:, :4], unmasked[:, :4], atol=1e-3)


@pytest.mark.parametrize("need_weights", [True, False])
def test_causality_by_gradient_is_exactly_zero(need_weights: bool) -> None:
    torch.manual_seed(1)
    seq = 6
    mha = MultiHeadAttention(d_model=8, num_heads=2).eval()
    x = torch.randn(1, seq, 8, requires_grad=True)
    out, _ = mha(x, x, x, mask=causal_mask(seq), need_weights=need_weights)
    for i in range(seq):
        (grad,) = torch.autograd.grad(out[0, i].sum(), x, retain_graph=True)
        per_position = grad[0].abs().sum(-1)  # (seq,)
        assert (per_position[i + 1:] == 0).all(), f"output {i} depends on a later input"
        assert (per_position[: i + 1] > 0).all()


def test_padding_keys_are_ignored_and_padded_queries_are_harmless() -> None:
    """With a padding mask, what sits at padded positions cannot change the real positions' outputs."""
    torch.manual_seed(2)
    mha = MultiHeadAttention(d_model=16, num_heads=4).eval()
    x = torch.randn(3, 5, 16)
    mask = padding_mask(TOKENS, pad_id=0)
    out, weights = mha(x, x, x, mask=mask, need_weights=True)
    assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()
    noisy = x.masked_fill(~mask[:, 0, 0, :, None], 0.0) + (~mask[:, 0, 0, :, None]) * torch.randn(3, 5, 16) * 100
    new, _ = mha(noisy, noisy, noisy, mask=mask)
    real = mask[:, 0, 0]  # (batch, seq)
    torch.testing.assert_close(new[real], out[real], atol=1e-5, rtol=0)
    assert torch.isfinite(out).all()  # padded query rows still see the real keys: finite, and ignored later


@pytest.mark.parametrize("need_weights", [True, False])
def test_a_fully_masked_query_row_gives_zeros_not_nan(need_weights: bool) -> None:
    torch.manual_seed(3)
    mha = MultiHeadAttention(d_model=8, num_heads=2).eval()
    x = torch.randn(1, 4, 8)
    mask = causal_mask(4).clone()
    mask[2] = False  # query 2 may attend to nothing
    out, _ = mha(x, x, x, mask=mask, need_weights=need_weights)
    assert torch.isfinite(out).all()
    heads_out = mha.w_o.bias  # zero attention output -> only the output projection's bias remains
    torch.testing.assert_close(out[0, 2], heads_out, atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------------------
# The notebook's checks: every known mistake is diagnosed with its own hint
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["causal_mask", "padding_mask"])
def test_each_known_mistake_gets_its_own_hint(name: str) -> None:
    from course_lib.exercises import get_exercise, run_check

    exercise = get_exercise(name)
    for mistake in exercise.mistakes:
        result = run_check(name, mistake.impl)
        assert result.status == "failed" and result.hint == mistake.hint, mistake.name
