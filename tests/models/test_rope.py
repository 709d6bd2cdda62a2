"""Rotary position embeddings: equal to Hugging Face's Llama (rotate-half) and to Meta's complex-number form
(interleaved), the permutation between the layouts, the relative-position property, notebook 03's rotation."""

from __future__ import annotations

import re

import pytest
import torch

from course_lib.models.positional import offset_matrix, sinusoidal_frequencies
from course_lib.models.rope import (
    Llama3Scaling,
    apply_rope,
    convert_rope_layout,
    convert_rope_weight,
    rope_angles,
    rope_frequencies,
    rope_permutation,
    rope_rotation,
)

transformers = pytest.importorskip("transformers")
from transformers.models.llama import modeling_llama  # noqa: E402


def _hf_cos_sin(d_k: int, base: float, positions: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's rotary embedding for head size d_k: cos, sin of shape (batch, seq, d_k)."""
    config = transformers.LlamaConfig(hidden_size=4 * d_k, num_attention_heads=4, rope_theta=base,
                                      max_position_embeddings=4096)
    rotary = modeling_llama.LlamaRotaryEmbedding(config)
    return rotary(x, positions)


@pytest.mark.parametrize("base", [10000.0, 500000.0])
@pytest.mark.parametrize("batch_positions", [False, True])
def test_half_layout_equals_hugging_face_llama(base: float, batch_positions: bool) -> None:
    torch.manual_seed(0)
    batch, heads, kv_heads, seq, d_k = 2, 4, 2, 7, 16
    q, k = torch.randn(batch, heads, seq, d_k), torch.randn(batch, kv_heads, seq, d_k)
    if batch_positions:  # each sequence at its own offset (as after a cache of different lengths)
        positions = torch.stack([torch.arange(3, 3 + seq), torch.arange(40, 40 + seq)])  # (batch, seq)
    else:
        positions = torch.arange(11, 11 + seq)  # (seq,): an offset, as with a cache
    cos, sin = _hf_cos_sin(d_k, base, positions.expand(batch, seq), q)
    q_hf, k_hf = modeling_llama.apply_rotary_pos_emb(q, k, cos, sin)
    # Bit for bit: the frequencies by their float32 formula, one float32 product per angle, the same rotation.
    assert torch.equal(apply_rope(q, positions, base, "half"), q_hf)
    assert torch.equal(apply_rope(k, positions, base, "half"), k_hf)


def _meta_rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Meta's original Llama code: each pair (2i, 2i+1) as a complex number, multiplied by exp(i p omega_i)."""
    d_k = x.shape[-1]
    omega = 1.0 / (base ** (torch.arange(0, d_k, 2).double() / d_k))
    turn = torch.polar(torch.ones(len(positions), d_k // 2, dtype=torch.float64), positions.double()[:, None] * omega)
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d_k // 2, 2))
    return torch.view_as_real(pairs * turn).flatten(-2).to(x.dtype)


def test_interleaved_layout_equals_the_complex_number_form() -> None:
    torch.manual_seed(1)
    x, positions = torch.randn(3, 2, 9, 8), torch.arange(5, 14)
    torch.testing.assert_close(apply_rope(x, positions, layout="interleaved"), _meta_rope(x, positions, 10000.0),
                               rtol=0, atol=1e-5)


def test_the_layouts_differ_and_the_permutation_maps_one_onto_the_other() -> None:
    torch.manual_seed(2)
    x, positions = torch.randn(2, 3, 6, 8), torch.arange(6)
    half, inter = apply_rope(x, positions, layout="half"), apply_rope(x, positions, layout="interleaved")
    assert not torch.allclose(half, inter, atol=1e-3)  # the two layouts are different functions
    to_half = convert_rope_layout(inter, "interleaved", "half")
    torch.testing.assert_close(to_half, apply_rope(convert_rope_layout(x, "interleaved", "half"), positions,
                                                   layout="half"))
    back = convert_rope_layout(to_half, "half", "interleaved")
    torch.testing.assert_close(back, inter, rtol=0, atol=0)
    for d_k in (2, 8, 64):
        perm = rope_permutation(d_k)
        assert torch.equal(perm[rope_permutation(d_k, "half", "interleaved")], torch.arange(d_k))


def _hf_conversion_permute(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The permutation of Hugging Face's convert_llama_weights_to_hf.py (Meta's layout -> theirs), as written there."""
    dim1, dim2 = w.shape
    return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)


def test_weight_rows_are_permuted_as_hugging_faces_conversion_script_does() -> None:
    torch.manual_seed(3)
    w = torch.randn(4 * 8, 12)  # 4 heads of d_k = 8
    torch.testing.assert_close(convert_rope_weight(w, 4, "interleaved", "half"), _hf_conversion_permute(w, 4),
                               rtol=0, atol=0)
    assert torch.equal(convert_rope_weight(convert_rope_weight(w, 4, "interleaved", "half"), 4, "half",
                                           "interleaved"), w)


def test_permuted_weights_give_the_same_attention_scores() -> None:
    """A Meta-layout W_q, W_k with interleaved RoPE == the permuted ones with rotate-half RoPE (scores)."""
    torch.manual_seed(4)
    heads, d_k, d_model, seq = 2, 8, 16, 5
    w_q, w_k, x = torch.randn(heads * d_k, d_model), torch.randn(heads * d_k, d_model), torch.randn(seq, d_model)
    positions = torch.arange(seq)

    def scores(wq: torch.Tensor, wk: torch.Tensor, layout: str) -> torch.Tensor:
        q = apply_rope((x @ wq.T).view(seq, heads, d_k).transpose(0, 1), positions, layout=layout)
        k = apply_rope((x @ wk.T).view(seq, heads, d_k).transpose(0, 1), positions, layout=layout)
        return q @ k.transpose(-2, -1)  # (heads, seq, seq)

    meta = scores(w_q, w_k, "interleaved")
    hf = scores(convert_rope_weight(w_q, heads, "interleaved", "half"),
                convert_rope_weight(w_k, heads, "interleaved", "half"), "half")
    torch.testing.assert_close(hf, meta, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_scores_depend_only_on_the_offset(layout: str) -> None:
    torch.manual_seed(5)
    q, k = torch.randn(16), torch.randn(16)

    def score(m: int, n: int) -> float:
        rq = apply_rope(q[None], torch.tensor([m]), layout=layout)
        rk = apply_rope(k[None], torch.tensor([n]), layout=layout)
        return float(rq @ rk.T)

    assert score(3, 7) == pytest.approx(score(103, 107), abs=1e-4)
    assert score(10, 2) == pytest.approx(score(50, 42), abs=1e-4)
    assert score(3, 7) != pytest.approx(score(3, 8), abs=1e-3)
    x = torch.randn(4, 16)  # a rotation keeps lengths
    torch.testing.assert_close(apply_rope(x, torch.arange(4), layout=layout).norm(dim=-1), x.norm(dim=-1))


def test_rotation_matrix_is_notebook_03s_offset_matrix_and_composes() -> None:
    torch.testing.assert_close(rope_rotation(5, 8, layout="interleaved"), offset_matrix(-5, 8), rtol=0, atol=1e-6)
    r2, r7 = rope_rotation(2, 8, layout="half"), rope_rotation(7, 8, layout="half")
    torch.testing.assert_close(r2.T @ r7, rope_rotation(5, 8, layout="half"), rtol=0, atol=1e-5)
    x = torch.randn(3, 8)
    torch.testing.assert_close(apply_rope(x, torch.full((3,), 4)), x @ rope_rotation(4, 8).T, rtol=0, atol=1e-6)


def test_angles_use_notebook_03s_frequencies() -> None:
    """Notebook 03's frequencies to float32's precision (an ulp or two apart: computed in float32, not float64)."""
    angles = rope_angles(torch.arange(4), d_k=8, base=500000.0)
    torch.testing.assert_close(angles, torch.arange(4.0)[:, None] * sinusoidal_frequencies(8, base=500000.0))
    for d_k in (8, 64, 128):
        torch.testing.assert_close(rope_frequencies(d_k, 500000.0), sinusoidal_frequencies(d_k, 500000.0),
                                   rtol=1e-6, atol=0)
    assert rope_frequencies(8).tolist() == rope_frequencies(8, base=10000).tolist()


@pytest.mark.parametrize("base", [10000.0, 500000.0])
@pytest.mark.parametrize("d_k", [64, 128])
def test_tables_equal_hugging_faces_at_8192_positions(base: float, d_k: int) -> None:
    """The cos/sin tables of positions 0..8191 equal LlamaRotaryEmbedding's exactly (float32), and so the rotated
    queries: the frequencies computed by their float32 formula, not rounded from float64 (3e-5 and 5e-4 apart
    below position 8192 with notebook 03's)."""
    positions = torch.arange(8192)
    x = torch.randn(1, 8192, d_k)
    cos_hf, sin_hf = _hf_cos_sin(d_k, base, positions[None], x)  # (1, 8192, d_k) each
    angles = rope_angles(positions, d_k, base)  # (8192, d_k/2)
    table = torch.cat([angles, angles], dim=-1)  # the 'half' layout's table
    assert torch.equal(table.cos(), cos_hf[0]) and torch.equal(table.sin(), sin_hf[0])
    q = torch.randn(1, 2, 8192, d_k)
    q_hf, _ = modeling_llama.apply_rotary_pos_emb(q, q, cos_hf, sin_hf)
    assert torch.equal(apply_rope(q, positions, base), q_hf)
    drift = (torch.arange(8192.0)[:, None] * sinusoidal_frequencies(d_k, base)).cos() - table[:, : d_k // 2].cos()
    assert drift.abs().max() > 1e-6  # what the float64 frequencies would have cost


LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 512}


@pytest.mark.parametrize("d_k", [8, 64])
def test_llama3_scaling_equals_hugging_faces(d_k: int) -> None:
    """Llama 3.1's scaling: frequencies equal to Hugging Face's, the three regimes (kept, interpolated, slowed)
    all present with d_k = 8 and an original context of 512; the tables at 8192 positions equal theirs."""
    config = transformers.LlamaConfig(hidden_size=4 * d_k, num_attention_heads=4, max_position_embeddings=4096,
                                      rope_parameters={"rope_theta": 500000.0, **LLAMA3})
    scaling = Llama3Scaling.from_config(LLAMA3, 500000.0)
    rotary = modeling_llama.LlamaRotaryEmbedding(config)
    omega = rope_frequencies(d_k, scaling)
    assert torch.equal(omega, rotary.inv_freq)
    plain = rope_frequencies(d_k, 500000.0)
    assert (omega == plain).any() and (omega == plain / 8).any() and ((omega != plain) & (omega != plain / 8)).any()
    positions = torch.arange(8192)
    cos_hf, sin_hf = rotary(torch.randn(1, 8192, d_k), positions[None])
    q = torch.randn(1, 2, 8192, d_k)
    q_hf, _ = modeling_llama.apply_rotary_pos_emb(q, q, cos_hf, sin_hf)
    assert torch.equal(apply_rope(q, positions, scaling), q_hf)


@pytest.mark.parametrize("scaling, words", [
    ({"rope_type": "yarn", "factor": 4.0}, "rope_type 'yarn' is not supported"),
    ({"type": "linear", "factor": 2.0}, "rope_type 'linear' is not supported"),
    ({"rope_type": "dynamic", "factor": 2.0}, "rope_type 'dynamic' is not supported"),
    ({"rope_type": "llama3", "factor": 8.0}, r"missing \['low_freq_factor', 'high_freq_factor'"),
    ({**LLAMA3, "factor": 0}, "factor must be a number > 0"),
    ({**LLAMA3, "high_freq_factor": 0.5}, "high_freq_factor must be > low_freq_factor"),
    ("llama3", "rope_scaling must be a dict or None"),
])
def test_other_rope_scalings_are_refused_by_name(scaling: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        Llama3Scaling.from_config(scaling, 500000.0)
    assert Llama3Scaling.from_config({"rope_type": "default", "rope_theta": 1e4}) is None
    with pytest.raises(ValueError, match="rope_theta must be a number > 1"):
        Llama3Scaling.from_config(LLAMA3, 0.5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_dtypes_are_kept(dtype: torch.dtype) -> None:
    x = torch.randn(2, 5, 8, dtype=dtype)
    out = apply_rope(x, torch.arange(5))
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), apply_rope(x.double(), torch.arange(5)), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("x, positions, words", [
    (torch.randn(2, 5, 7), torch.arange(5), "d_k even"),
    (torch.randn(2, 5, 8), torch.arange(4), r"x has seq=5 .*positions has shape \(4,\)"),
    (torch.randn(2, 5, 8), torch.arange(5.0), "integer tensor"),
    (torch.randn(2, 3, 5, 8), torch.zeros(3, 5, dtype=torch.long), r"same batch"),
    (torch.arange(10).view(5, 2), torch.arange(5), "floating-point"),
])
def test_bad_input_names_the_argument_and_shapes(x: torch.Tensor, positions: torch.Tensor, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        apply_rope(x, positions)


def test_bad_layouts_and_sizes_are_named() -> None:
    with pytest.raises(ValueError, match=r"layout must be one of \('half', 'interleaved'\), got 'neox'"):
        apply_rope(torch.randn(1, 2, 4), torch.arange(2), layout="neox")
    with pytest.raises(ValueError, match="d_k must be an even int"):
        rope_permutation(5)
    with pytest.raises(ValueError, match=r"num_heads \* d_k.*num_heads=3; got shape \(8, 2\)"):
        convert_rope_weight(torch.randn(8, 2), 3, "half", "interleaved")


@pytest.mark.parametrize("batch_positions", [False, True])
def test_seq_dim_takes_metas_batch_seq_heads_layout(batch_positions: bool) -> None:
    torch.manual_seed(6)
    x = torch.randn(2, 5, 3, 8)  # (batch, seq, heads, d_k), as in Meta's code
    positions = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]]) if batch_positions else torch.arange(2, 7)
    expected = apply_rope(x.transpose(1, 2), positions, layout="interleaved").transpose(1, 2)
    torch.testing.assert_close(apply_rope(x, positions, layout="interleaved", seq_dim=1), expected, rtol=0, atol=0)
    with pytest.raises(ValueError, match="seq_dim must index an axis of x other than the last"):
        apply_rope(x, positions, seq_dim=-1)


# seq_dim: rotating along another axis is rotating the tensor with that axis moved to -2, then moving it back.
SEQ_DIM_CASES = [
    ((2, 5, 3, 8), 1, "seq"),        # Meta's (batch, seq, heads, d_k)
    ((2, 5, 3, 8), -3, "seq"),       # the same axis counted from the end
    ((2, 5, 3, 8), 1, "batch"),      # ... with one row of positions per sequence of the batch
    ((5, 3, 8), 0, "seq"),           # (seq, heads, d_k): positions on the first axis
    ((2, 5, 2, 3, 8), 1, "batch"),   # (batch, seq, groups, heads, d_k): two axes between seq and d_k
    ((2, 3, 5, 8), 2, "seq"),        # the default axis named by its positive index
    ((2, 4, 4, 8), 1, "seq"),        # heads == seq: the shape cannot tell, seq_dim does
]


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(("shape", "seq_dim", "positions_kind"), SEQ_DIM_CASES)
def test_seq_dim_equals_rotating_the_moved_axis(layout: str, shape: tuple[int, ...], seq_dim: int,
                                                positions_kind: str) -> None:
    torch.manual_seed(7)
    x = torch.randn(shape)
    seq = shape[seq_dim]
    positions = torch.arange(3, 3 + seq) if positions_kind == "seq" else \
        torch.stack([torch.arange(seq) + 10 * b for b in range(shape[0])])      # (batch, seq), rows differ
    expected = apply_rope(x.movedim(seq_dim, -2), positions, layout=layout).movedim(-2, seq_dim)
    got = apply_rope(x, positions, layout=layout, seq_dim=seq_dim)
    assert got.shape == x.shape
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    if seq_dim % x.dim() != x.dim() - 2 and x.shape[-2] == seq:  # heads == seq: the default axis is wrong here
        assert not torch.allclose(got, apply_rope(x, positions, layout=layout), atol=1e-3)


@pytest.mark.parametrize("bad", [-1, 3, 4, -5, 1.0, True, "1", None])
def test_bad_seq_dim_values_name_the_argument(bad) -> None:
    x = torch.randn(2, 5, 3, 8)   # (batch, seq, heads, d_k): axes 0..2 may hold positions, 3 (-1) is d_k
    with pytest.raises(ValueError, match=rf"apply_rope: seq_dim must index an axis of x other than the last "
                                         rf"\(d_k\), got {re.escape(repr(bad))} for x of shape \(2, 5, 3, 8\)"):
        apply_rope(x, torch.arange(5), seq_dim=bad)


def test_seq_dim_that_does_not_fit_the_positions_is_named() -> None:
    x = torch.randn(2, 5, 3, 8)
    with pytest.raises(ValueError, match=r"x has seq=3 \(axis 2 of shape \(2, 5, 3, 8\)\), positions has shape \(5,\)"):
        apply_rope(x, torch.arange(5), seq_dim=2)                       # axis 2 has 3 rows, not 5
    with pytest.raises(ValueError, match=r"batch on axis 0 and seq on another axis, got \(5, 5, 3, 8\) \(seq_dim=0\)"):
        apply_rope(torch.randn(5, 5, 3, 8), torch.zeros(5, 5, dtype=torch.long), seq_dim=0)  # seq on the batch axis


def test_the_rotary_frequencies_do_not_answer_notebook_03() -> None:
    """rope_frequencies computes notebook 03's frequencies (in float32): its table through them, directly or through
    rope_angles, is refused by notebook 03's check as the class edition's logspace route is."""
    from course_lib.exercises import run_check

    def via_frequencies(max_len: int, d_model: int) -> torch.Tensor:
        angles = torch.arange(max_len)[:, None].double() * rope_frequencies(d_model).double()
        return torch.stack([angles.sin(), angles.cos()], -1).reshape(max_len, d_model).float()

    def via_angles(max_len: int, d_model: int) -> torch.Tensor:
        angles = rope_angles(torch.arange(max_len), d_model).double()
        return torch.stack([angles.sin(), angles.cos()], -1).reshape(max_len, d_model).float()

    for route in (via_frequencies, via_angles):
        result = run_check("sinusoidal_table", route)
        assert result.status == "failed" and "rope_frequencies" in result.message, result
