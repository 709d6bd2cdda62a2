"""course_lib.models.positional: the sinusoidal table against the paper's formula, the offset map, the modules."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.models.positional import (
    LearnedPositionalEmbedding,
    PositionalEncoding,
    offset_matrix,
    sinusoidal_frequencies,
    sinusoidal_table,
)


def _formula(max_len: int, d_model: int) -> torch.Tensor:
    """The paper's formula, entry by entry with Python's math module (independent of the vectorised code)."""
    rows = []
    for pos in range(max_len):
        row = []
        for dim in range(d_model):
            i = dim // 2
            angle = pos / (10000 ** (2 * i / d_model))
            row.append(math.sin(angle) if dim % 2 == 0 else math.cos(angle))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


@pytest.mark.parametrize("max_len,d_model", [(1, 2), (7, 4), (50, 16), (200, 6), (64, 512)])
def test_table_equals_the_formula(max_len: int, d_model: int) -> None:
    table = sinusoidal_table(max_len, d_model)
    assert table.shape == (max_len, d_model) and table.dtype == torch.float32
    torch.testing.assert_close(table.double(), _formula(max_len, d_model), atol=1e-6, rtol=0)


def test_table_known_values() -> None:
    table = sinusoidal_table(3, 4)
    assert table[0].tolist() == [0.0, 1.0, 0.0, 1.0]  # sin 0 = 0, cos 0 = 1 in every pair
    assert table[1, 0].item() == pytest.approx(math.sin(1.0))
    assert table[2, 3].item() == pytest.approx(math.cos(2 / 100))  # 10000^(2/4) = 100


def test_table_is_precise_at_large_positions() -> None:
    """Computed in float64: at position 10^4 the angle is still right to float32 rounding."""
    table = sinusoidal_table(10001, 8)
    assert table[10000, 0].item() == pytest.approx(math.sin(10000.0), abs=1e-6)


def test_a_longer_table_extends_a_shorter_one() -> None:
    torch.testing.assert_close(sinusoidal_table(100, 32)[:40], sinusoidal_table(40, 32))


@pytest.mark.parametrize("d_model", [3, 7, 0, -2])
def test_odd_or_tiny_d_model_is_refused(d_model: int) -> None:
    with pytest.raises(ValueError, match=f"d_model.*got d_model={d_model}"):
        sinusoidal_table(10, d_model)
    with pytest.raises(ValueError, match="d_model must be an even int"):
        offset_matrix(1, d_model)


def test_zero_max_len_is_refused() -> None:
    with pytest.raises(ValueError, match="max_len must be >= 1, got max_len=0"):
        sinusoidal_table(0, 8)


def test_frequencies_and_wavelengths() -> None:
    d_model = 512
    omega = sinusoidal_frequencies(d_model)
    assert omega.shape == (256,)
    wavelengths = 2 * math.pi / omega.double()
    assert wavelengths[0].item() == pytest.approx(2 * math.pi)
    # the last pair (2i = d_model - 2) has wavelength 2 pi 10000^((d-2)/d): just under 10000 * 2 pi
    assert wavelengths[-1].item() == pytest.approx(2 * math.pi * 10000 ** (510 / 512), rel=1e-5)
    assert (wavelengths[1:] > wavelengths[:-1]).all()  # a geometric progression, increasing
    ratios = wavelengths[1:] / wavelengths[:-1]
    torch.testing.assert_close(ratios, torch.full_like(ratios, 10000 ** (2 / 512)))


# ---------------------------------------------------------------------------------------------------
# The offset map: PE[pos + k] = M_k PE[pos] for every pos
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("d_model", [2, 8, 64])
@pytest.mark.parametrize("k", [0, 1, 3, 17, 250, -5])
def test_offset_map_moves_every_position_by_k(d_model: int, k: int) -> None:
    table = sinusoidal_table(1000, d_model).double()
    m_k = offset_matrix(k, d_model).double()
    positions = torch.arange(max(0, -k), min(1000, 1000 - k))  # those with pos and pos + k in the table
    assert len(positions) > 700
    moved = table[positions] @ m_k.T  # row form of M_k @ PE[pos]
    torch.testing.assert_close(moved, table[positions + k], atol=2e-6, rtol=0)


def test_offset_map_is_one_map_for_far_apart_windows_and_not_the_identity() -> None:
    """The same M_k works at positions 0..99 and 5000..5099, and it really moves the encodings."""
    d_model, k = 16, 7
    table = sinusoidal_table(5200, d_model).double()
    m_k = offset_matrix(k, d_model).double()
    for start in (0, 5000):
        rows = torch.arange(start, start + 100)
        torch.testing.assert_close(table[rows] @ m_k.T, table[rows + k], atol=2e-6, rtol=0)
    assert not torch.allclose(table[:100] @ m_k.T, table[:100], atol=1e-2)


def test_offset_maps_are_rotations_that_compose() -> None:
    d_model = 32
    m3, m4, m7 = (offset_matrix(k, d_model).double() for k in (3, 4, 7))
    torch.testing.assert_close(m3 @ m3.T, torch.eye(d_model, dtype=torch.float64), atol=1e-6, rtol=0)
    torch.testing.assert_close(m3 @ m4, m7, atol=1e-6, rtol=0)
    torch.testing.assert_close(offset_matrix(-3, d_model).double(), m3.T, atol=1e-6, rtol=0)
    torch.testing.assert_close(offset_matrix(0, d_model), torch.eye(d_model))


def test_dot_products_depend_only_on_the_distance() -> None:
    """PE[p] . PE[p + k] = sum_i cos(k omega_i): symmetric in k and the same for every p."""
    d_model = 64
    table = sinusoidal_table(300, d_model).double()
    omega = sinusoidal_frequencies(d_model).double()
    for k in (0, 1, 5, 40):
        expected = torch.cos(k * omega).sum()
        dots = (table[:200] * table[k:200 + k]).sum(-1)
        torch.testing.assert_close(dots, expected.expand(200), atol=1e-5, rtol=0)
    assert (table[100] @ table[100]).item() == pytest.approx(d_model / 2)


# ---------------------------------------------------------------------------------------------------
# The modules
# ---------------------------------------------------------------------------------------------------

def test_positional_encoding_adds_the_table() -> None:
    pe = PositionalEncoding(d_model=16, max_len=30)
    x = torch.randn(3, 12, 16)
    torch.testing.assert_close(pe(x), x + sinusoidal_table(12, 16))
    assert "pe" not in pe.state_dict()  # a function of the sizes, not a parameter
    assert list(pe.parameters()) == []


def test_positional_encoding_dropout_only_in_training() -> None:
    pe = PositionalEncoding(d_model=8, max_len=10, dropout=0.5)
    x = torch.randn(4, 10, 8)
    pe.eval()
    torch.testing.assert_close(pe(x), x + sinusoidal_table(10, 8))
    pe.train()
    torch.manual_seed(0)
    out = pe(x)
    zeros = (out == 0).float().mean().item()
    assert 0.3 < zeros < 0.7
    kept = out != 0
    torch.testing.assert_close(out[kept], 2 * (x + sinusoidal_table(10, 8))[kept])


def test_positional_encoding_errors_name_the_shapes() -> None:
    pe = PositionalEncoding(d_model=8, max_len=10)
    with pytest.raises(ValueError, match=r"seq=11.*\(2, 11, 8\).*max_len=10"):
        pe(torch.zeros(2, 11, 8))
    with pytest.raises(ValueError, match=r"\(batch, seq, d_model=8\), got \(2, 5, 6\)"):
        pe(torch.zeros(2, 5, 6))
    with pytest.raises(ValueError, match=r"got \(5, 8\)"):
        pe(torch.zeros(5, 8))
    with pytest.raises(ValueError, match="d_model must be even"):
        PositionalEncoding(d_model=7)


def test_positional_encoding_follows_dtype() -> None:
    pe = PositionalEncoding(d_model=8, max_len=10).double()
    out = pe(torch.zeros(1, 3, 8, dtype=torch.float64))
    assert out.dtype == torch.float64


def test_learned_embedding_adds_one_trained_row_per_position() -> None:
    torch.manual_seed(0)
    emb = LearnedPositionalEmbedding(max_len=20, d_model=8)
    x = torch.randn(2, 6, 8)
    torch.testing.assert_close(emb(x), x + emb.embedding.weight[:6])
    assert 0.01 < emb.embedding.weight.std().item() < 0.03
    emb(x).sum().backward()
    grad = emb.embedding.weight.grad
    assert grad is not None and (grad[:6] != 0).all() and (grad[6:] == 0).all()  # unseen rows never learn
    with pytest.raises(ValueError, match=r"seq=21.*max_len=20"):
        emb(torch.zeros(1, 21, 8))
    with pytest.raises(ValueError, match=r"d_model=8\), got \(1, 3, 4\)"):
        emb(torch.zeros(1, 3, 4))


def test_each_known_mistake_of_the_exercise_gets_its_own_hint() -> None:
    from course_lib.exercises import get_exercise, run_check

    exercise = get_exercise("sinusoidal_table")
    for mistake in exercise.mistakes:
        result = run_check("sinusoidal_table", mistake.impl)
        assert result.status == "failed" and result.hint == mistake.hint, mistake.name
