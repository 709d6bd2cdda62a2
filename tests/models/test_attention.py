"""course_lib.models.attention against references we did not write: F.scaled_dot_product_attention and
nn.MultiheadAttention (with copied weights), the paper's formula, and bad input.
"""

from __future__ import annotations

import math
import re
import zlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.models.attention import (
    MultiHeadAttention,
    fused_attention,
    merge_heads,
    scaled_dot_product_attention,
    split_heads,
)

ATOL = 1e-5

# (batch, heads, seq_q, seq_k, d_k, d_v): seq_q != seq_k and d_v != d_k included.
SHAPES = [(2, 3, 5, 5, 8, 8), (1, 2, 4, 7, 16, 6), (3, 1, 9, 3, 4, 10), (2, 4, 1, 6, 8, 8)]
MASK_SHAPES = ["none", "seq_k", "seq_q,seq_k", "batch,1,1,seq_k", "batch,1,seq_q,seq_k", "batch,heads,seq_q,seq_k"]


def _mask(kind: str, b: int, h: int, sq: int, sk: int, gen: torch.Generator,
          keep_one: bool = True) -> torch.Tensor | None:
    """A random boolean mask of the named shape; with ``keep_one`` every query row keeps key 0."""
    shape = {"none": None, "seq_k": (sk,), "seq_q,seq_k": (sq, sk), "batch,1,1,seq_k": (b, 1, 1, sk),
             "batch,1,seq_q,seq_k": (b, 1, sq, sk), "batch,heads,seq_q,seq_k": (b, h, sq, sk)}[kind]
    if shape is None:
        return None
    mask = torch.rand(shape, generator=gen) < 0.6
    if keep_one:
        mask[..., 0] = True
    return mask


def _qkv(b, h, sq, sk, dk, dv, gen, grad=False):
    q = torch.randn(b, h, sq, dk, generator=gen, dtype=torch.float64).float()
    k = torch.randn(b, h, sk, dk, generator=gen, dtype=torch.float64).float()
    v = torch.randn(b, h, sk, dv, generator=gen, dtype=torch.float64).float()
    return [t.requires_grad_(grad) for t in (q, k, v)]


# --- scaled dot-product attention ----------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
@pytest.mark.parametrize("kind", MASK_SHAPES)
@pytest.mark.parametrize("path", ["explicit", "fused"])
def test_equals_torch_sdpa_outputs_and_gradients(shape, kind, path) -> None:
    gen = torch.Generator().manual_seed(zlib.crc32(repr((shape, kind)).encode()))
    b, h, sq, sk, dk, dv = shape
    q, k, v = _qkv(b, h, sq, sk, dk, dv, gen, grad=True)
    mask = _mask(kind, b, h, sq, sk, gen)
    if path == "explicit":
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        assert weights.shape == (b, h, sq, sk)
    else:
        out = fused_attention(q, k, v, mask)
    assert out.shape == (b, h, sq, dv)
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    full_mask = None if mask is None else mask.expand(b, h, sq, sk)  # PyTorch's kernel rejects a 1-D mask
    ref = F.scaled_dot_product_attention(q2, k2, v2, attn_mask=full_mask)
    torch.testing.assert_close(out, ref, atol=ATOL, rtol=1e-5)
    upstream = torch.randn(out.shape, generator=gen)
    (out * upstream).sum().backward()
    (ref * upstream).sum().backward()
    for mine, theirs, name in ((q.grad, q2.grad, "query"), (k.grad, k2.grad, "key"), (v.grad, v2.grad, "value")):
        torch.testing.assert_close(mine, theirs, atol=ATOL, rtol=1e-5, msg=f"gradient of {name}")


def test_matches_the_papers_formula_written_in_float64() -> None:
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 4, 6, generator=gen, dtype=torch.float64) for _ in range(3))
    out, weights = scaled_dot_product_attention(q, k, v)
    expected_w = torch.exp(q @ k.mT / math.sqrt(6))
    expected_w = expected_w / expected_w.sum(-1, keepdim=True)
    torch.testing.assert_close(weights, expected_w)
    torch.testing.assert_close(out, expected_w @ v)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, dtype=torch.float64))


@pytest.mark.parametrize("kind", MASK_SHAPES[1:])
def test_masked_keys_get_exactly_zero_weight(kind) -> None:
    gen = torch.Generator().manual_seed(2)
    q, k, v = _qkv(2, 3, 4, 6, 8, 8, gen)
    mask = _mask(kind, 2, 3, 4, 6, gen)
    _, weights = scaled_dot_product_attention(q, k, v, mask)
    full = mask.expand(weights.shape)
    assert torch.all(weights[~full] == 0)
    assert torch.all(weights[full] > 0)


def test_three_dimensional_inputs_and_masks_work() -> None:
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 3, 4, generator=gen)
    k, v = torch.randn(2, 5, 4, generator=gen), torch.randn(2, 5, 7, generator=gen)
    for mask in (torch.tensor([True, False, True, True, False]), torch.rand(3, 5, generator=gen) < 0.7,
                 torch.rand(2, 1, 5, generator=gen) < 0.7):
        mask[..., 0] = True
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.expand(2, 3, 5))
        torch.testing.assert_close(out, ref, atol=ATOL, rtol=0)
        torch.testing.assert_close(fused_attention(q, k, v, mask), out, atol=ATOL, rtol=0)


@pytest.mark.parametrize("path", ["explicit", "fused"])
@pytest.mark.parametrize("size", [(4, 6, 8), (64, 200, 64)])  # small, and large enough for the blocked kernel
def test_fully_masked_query_rows_give_zeros_and_no_nan(path, size) -> None:
    sq, sk, d = size
    gen = torch.Generator().manual_seed(4)
    q, k, v = _qkv(2, 2, sq, sk, d, d, gen, grad=True)
    mask = torch.rand(2, 2, sq, sk, generator=gen) < 0.5
    mask[..., 0] = True
    mask[0, 1, 2] = False  # query 2 of head 1 in batch 0 may attend to nothing
    mask[1, :, -1] = False
    if path == "explicit":
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        assert torch.all(weights[0, 1, 2] == 0) and torch.all(weights[1, :, -1] == 0)
    else:
        out = fused_attention(q, k, v, mask)
    assert not torch.isnan(out).any()
    assert torch.all(out[0, 1, 2] == 0) and torch.all(out[1, :, -1] == 0)
    out.sum().backward()
    for t in (q, k, v):
        assert not torch.isnan(t.grad).any()
    assert torch.all(q.grad[0, 1, 2] == 0)
    # and the rows that do have keys still equal PyTorch's kernel
    ref = F.scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), attn_mask=mask)
    torch.testing.assert_close(out.detach(), torch.nan_to_num(ref), atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize("where", ["query", "key", "value"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("size", [(3, 5, 8), (4, 15, 8), (4, 16, 8), (64, 64, 64)],
                         ids=["small", "below-bound", "at-bound", "blocked"])
def test_fused_path_gives_the_formulas_nan_for_non_finite_input(where, bad, masked, size) -> None:
    """A NaN or inf anywhere (one element, or a whole row) is never hidden by the fused path.

    PyTorch's kernel alone zeroes a NaN query's row below 16 keys: there fused_attention tests finiteness and
    gives the formula's output exactly. From 16 keys on it returns the kernel's output untested, trusting it to
    keep every NaN of the formula: the "at-bound" and "blocked" cases check that trust (they fail if a PyTorch
    release changes it). There the one allowed difference is a non-finite *masked* key, which the formula drops
    and the kernel does not: more NaN, never fewer, and equal numbers wherever both are finite."""
    sq, sk, d = size
    gen = torch.Generator().manual_seed(7)
    for whole_row in (False, True):
        q, k, v = _qkv(2, 2, sq, sk, d, d, gen)
        mask = _mask("batch,heads,seq_q,seq_k", 2, 2, sq, sk, gen) if masked else None
        if mask is not None:
            mask[1, 1, :, 1] = False  # key 1 of head 1 in batch 1 is masked for every query
        tensor = {"query": q, "key": k, "value": v}[where]
        tensor[1, 1, 1, :] = bad  # row 1 of head 1 in batch 1 (the masked key for key and value)
        if not whole_row:
            tensor[1, 1, 1, 1:] = 0.5
        formula = scaled_dot_product_attention(q, k, v, mask)[0]
        fused = fused_attention(q, k, v, mask)
        if masked and where in ("key", "value") and sk >= 16:
            assert torch.all(fused.isnan() | ~formula.isnan())  # every NaN of the formula is kept
            assert torch.all(fused.isnan() | fused.isinf() | ~formula.isinf())
            both = fused.isfinite() & formula.isfinite()
            assert torch.equal(both, fused.isfinite())  # where the kernel gives a number, so does the formula
            torch.testing.assert_close(fused[both], formula[both], atol=ATOL, rtol=1e-5)
            continue
        assert torch.equal(fused.isnan(), formula.isnan()) and torch.equal(fused.isinf(), formula.isinf())
        torch.testing.assert_close(fused.nan_to_num(7.0), formula.nan_to_num(7.0), atol=ATOL, rtol=1e-5)


def test_a_mask_of_all_false_gives_all_zeros() -> None:
    q, k, v = torch.randn(1, 3, 4), torch.randn(1, 5, 4), torch.randn(1, 5, 2)
    out, weights = scaled_dot_product_attention(q, k, v, torch.zeros(5, dtype=torch.bool))
    assert torch.all(out == 0) and torch.all(weights == 0)
    assert torch.all(fused_attention(q, k, v, torch.zeros(5, dtype=torch.bool)) == 0)


def test_dropout_zeroes_and_rescales_weights() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 1, 50, 8), torch.randn(1, 1, 60, 8), torch.randn(1, 1, 60, 8)
    _, clean = scaled_dot_product_attention(q, k, v)
    out, dropped = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    zeros = dropped == 0
    assert 0.4 < zeros.float().mean() < 0.6
    torch.testing.assert_close(dropped[~zeros], clean[~zeros] * 2)  # kept weights are scaled by 1 / (1 - p)
    torch.testing.assert_close(out, dropped @ v)  # the returned weights are those applied
    # the fused path applies dropout too (PyTorch draws its own random numbers)
    assert not torch.allclose(fused_attention(q, k, v, dropout_p=0.5), fused_attention(q, k, v))


# --- heads ----------------------------------------------------------------------------------------------

def test_split_heads_puts_consecutive_features_in_each_head() -> None:
    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4)
    for h in range(3):
        torch.testing.assert_close(heads[:, h], x[..., 4 * h: 4 * (h + 1)], atol=0, rtol=0)
    torch.testing.assert_close(merge_heads(heads), x, atol=0, rtol=0)


def test_split_and_merge_match_nn_multihead_attentions_layout() -> None:
    """nn.MultiheadAttention reshapes (seq, batch * heads, d_k): the same feature-to-head assignment."""
    x = torch.randn(2, 5, 12)
    theirs = x.transpose(0, 1).reshape(5, 2 * 3, 4).transpose(0, 1).reshape(2, 3, 5, 4)
    torch.testing.assert_close(split_heads(x, 3), theirs, atol=0, rtol=0)


def test_head_helpers_reject_bad_shapes() -> None:
    with pytest.raises(ValueError, match=r"num_heads=3.*\(2, 5, 10\)"):
        split_heads(torch.randn(2, 5, 10), 3)
    with pytest.raises(ValueError, match=r"\(2, 5, 10\)"):
        merge_heads(torch.randn(2, 5, 10))


# --- multi-head attention against nn.MultiheadAttention ---------------------------------------------------

def _torch_masks(mask: torch.Tensor | None, b: int, h: int, sq: int, sk: int):
    """Our mask (True = attend) as nn.MultiheadAttention's (attn_mask, key_padding_mask), True = ignore."""
    if mask is None:
        return None, None
    if mask.shape == (b, 1, 1, sk):
        return None, ~mask[:, 0, 0, :]
    full = mask.expand(b, h, sq, sk)
    return ~full.reshape(b * h, sq, sk), None


@pytest.mark.parametrize("kind", MASK_SHAPES)
@pytest.mark.parametrize("attention", ["self", "cross"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("need_weights", [True, False])
def test_module_equals_nn_multihead_attention(kind, attention, bias, need_weights) -> None:
    gen = torch.Generator().manual_seed(5)
    torch.manual_seed(5)
    b, h, d_model, sq = 3, 4, 16, 6
    sk = sq if attention == "self" else 9
    theirs = nn.MultiheadAttention(d_model, h, bias=bias, batch_first=True).eval()
    if bias:  # PyTorch initialises biases to zero: make them matter
        with torch.no_grad():
            theirs.in_proj_bias.normal_()
            theirs.out_proj.bias.normal_()
    ours = MultiHeadAttention.from_torch(theirs).eval()
    x = torch.randn(b, sq, d_model, generator=gen)
    memory = x if attention == "self" else torch.randn(b, sk, d_model, generator=gen)
    mask = _mask(kind, b, h, sq, sk, gen)
    attn_mask, key_padding_mask = _torch_masks(mask, b, h, sq, sk)
    with torch.no_grad():
        out, weights = ours(x, memory, memory, mask=mask, need_weights=need_weights)
        ref_out, ref_weights = theirs(x, memory, memory, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                      need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, atol=ATOL, rtol=1e-5)
    if need_weights:
        torch.testing.assert_close(weights, ref_weights, atol=ATOL, rtol=1e-5)
    else:
        assert weights is None


def test_module_and_nn_multihead_attention_have_the_same_gradients() -> None:
    torch.manual_seed(6)
    ours = MultiHeadAttention(8, 2)
    theirs = ours.to_torch()
    x = torch.randn(2, 5, 8)
    mask = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    ours(x, x, x, mask=mask)[0].pow(2).sum().backward()
    theirs(x, x, x, attn_mask=~mask, need_weights=False)[0].pow(2).sum().backward()
    grads = torch.cat([ours.w_q.weight.grad, ours.w_k.weight.grad, ours.w_v.weight.grad])
    torch.testing.assert_close(grads, theirs.in_proj_weight.grad, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(ours.w_o.weight.grad, theirs.out_proj.weight.grad, atol=ATOL, rtol=1e-5)


def test_weights_round_trip_to_torch_and_back() -> None:
    ours = MultiHeadAttention(12, 3, dropout=0.1)
    back = MultiHeadAttention.from_torch(ours.to_torch(batch_first=False))
    for (name, p), (name2, p2) in zip(ours.state_dict().items(), back.state_dict().items(), strict=True):
        assert name == name2 and torch.equal(p, p2)
    assert back.dropout == 0.1 and back.num_heads == 3


def test_fused_and_explicit_paths_agree_inside_the_module() -> None:
    torch.manual_seed(7)
    mha = MultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 40, 32)
    mask = torch.rand(2, 1, 1, 40) < 0.8
    mask[..., 0] = True
    fused, none = mha(x, x, x, mask=mask)
    explicit, weights = mha(x, x, x, mask=mask, need_weights=True)
    assert none is None and weights.shape == (2, 4, 40, 40)
    torch.testing.assert_close(fused, explicit, atol=ATOL, rtol=1e-5)


def test_module_dropout_only_in_training_mode() -> None:
    torch.manual_seed(8)
    mha = MultiHeadAttention(16, 2, dropout=0.5)
    x = torch.randn(2, 10, 16)
    train_out, _ = mha(x, x, x)
    mha.eval()
    eval_a, _ = mha(x, x, x)
    eval_b, w = mha(x, x, x, need_weights=True)
    assert not torch.allclose(train_out, eval_a)
    torch.testing.assert_close(eval_a, eval_b, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 10))


def test_each_head_is_an_attention_with_its_slice_of_the_projections() -> None:
    """MultiHead(Q,K,V) = Concat(head_1..head_h) W^O with head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)."""
    torch.manual_seed(9)
    mha = MultiHeadAttention(12, 3).eval()
    x = torch.randn(1, 4, 12)
    heads = []
    for i in range(3):
        rows = slice(4 * i, 4 * (i + 1))
        q = x @ mha.w_q.weight[rows].T + mha.w_q.bias[rows]
        k = x @ mha.w_k.weight[rows].T + mha.w_k.bias[rows]
        v = x @ mha.w_v.weight[rows].T + mha.w_v.bias[rows]
        w = torch.softmax(q @ k.mT / math.sqrt(4), dim=-1)
        heads.append(w @ v)
    expected = mha.w_o(torch.cat(heads, dim=-1))
    torch.testing.assert_close(mha(x, x, x)[0], expected, atol=ATOL, rtol=1e-5)


# --- bad input -------------------------------------------------------------------------------------------

def test_mismatched_feature_sizes_name_both_shapes() -> None:
    q, k, v = torch.randn(2, 3, 8), torch.randn(2, 5, 7), torch.randn(2, 5, 7)
    for fn in (scaled_dot_product_attention, fused_attention):
        with pytest.raises(ValueError, match=r"query.*\(2, 3, 8\).*key.*\(2, 5, 7\)"):
            fn(q, k, v)
    with pytest.raises(ValueError, match=r"key.*\(2, 5, 8\).*value.*\(2, 4, 8\)"):
        scaled_dot_product_attention(q, torch.randn(2, 5, 8), torch.randn(2, 4, 8))
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"key.*d_model=8.*\(2, 5, 7\)"):
        mha(q, k, k)


def test_d_model_not_divisible_by_num_heads() -> None:
    with pytest.raises(ValueError, match=r"d_model=10.*num_heads=3"):
        MultiHeadAttention(10, 3)


@pytest.mark.parametrize("bad", [(4,), (3, 4), (2, 3, 1, 5)])
def test_mask_that_cannot_broadcast_names_both_shapes(bad) -> None:
    q, k, v = torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    mask = torch.ones(bad, dtype=torch.bool)
    for fn in (scaled_dot_product_attention, fused_attention):
        with pytest.raises(ValueError, match=rf"mask of shape {re.escape(str(bad))}.*\(2, 3, 5\)"):
            fn(q, k, v, mask)
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=rf"mask of shape {re.escape(str(bad))}.*\(2, 2, 3, 5\)"):
        mha(q, k, v, mask)


def test_a_mask_that_would_grow_the_batch_is_rejected() -> None:
    """A (batch, 1, 1, seq_k) mask on 3-D inputs would silently broadcast to 4-D: refuse it."""
    q = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match=r"\(2, 1, 1, 3\).*\(2, 3, 3\)"):
        scaled_dot_product_attention(q, q, q, torch.ones(2, 1, 1, 3, dtype=torch.bool))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_float_or_int_mask_is_rejected_with_its_dtype_and_shape(dtype) -> None:
    q = torch.randn(2, 3, 8)
    mask = torch.zeros(3, 3, dtype=dtype)
    for fn in (scaled_dot_product_attention, fused_attention):
        with pytest.raises(TypeError, match=rf"mask must be a boolean.*{dtype}.*\(3, 3\).*\(2, 3, 3\)"):
            fn(q, q, q, mask)
    with pytest.raises(TypeError, match=r"mask must be a boolean.*\(3, 3\).*\(2, 2, 3, 3\)"):
        MultiHeadAttention(8, 2)(q, q, q, mask)


def test_wrong_number_of_dimensions_is_named() -> None:
    with pytest.raises(ValueError, match=r"query.*\(8,\)"):
        scaled_dot_product_attention(torch.randn(8), torch.randn(3, 8), torch.randn(3, 8))
    with pytest.raises(ValueError, match=r"query.*\(3, 8\)"):
        MultiHeadAttention(8, 2)(torch.randn(3, 8), torch.randn(1, 3, 8), torch.randn(1, 3, 8))



@pytest.mark.parametrize("d_in, d_model, num_heads", [(3, 2, 2), (12, 8, 4), (8, 16, 4)])
def test_inputs_of_another_width_than_the_model_equal_pytorchs_module(d_in: int, d_model: int, num_heads: int) -> None:
    """The book's ``MultiHeadAttention(d_in, d_out, ...)``: inputs of width d_in, heads and output of width d_model.
    Reference: PyTorch's nn.MultiheadAttention with kdim = vdim = d_in, its query projection the identity after
    ours (PyTorch's queries must have the model's width)."""
    torch.manual_seed(0)
    ours = MultiHeadAttention(d_model, num_heads, d_in=d_in).eval()
    theirs = nn.MultiheadAttention(d_model, num_heads, kdim=d_in, vdim=d_in, batch_first=True).eval()
    with torch.no_grad():
        theirs.q_proj_weight.copy_(torch.eye(d_model))
        theirs.k_proj_weight.copy_(ours.w_k.weight)
        theirs.v_proj_weight.copy_(ours.w_v.weight)
        theirs.in_proj_bias.copy_(torch.cat([torch.zeros(d_model), ours.w_k.bias, ours.w_v.bias]))
        theirs.out_proj.weight.copy_(ours.w_o.weight)
        theirs.out_proj.bias.copy_(ours.w_o.bias)
    x = torch.randn(2, 6, d_in)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    with torch.no_grad():
        out, weights = ours(x, x, x, causal, need_weights=True)
        expected, expected_weights = theirs(ours.w_q(x), x, x, attn_mask=~causal, average_attn_weights=False)
        fused, _ = ours(x, x, x, causal)
    assert out.shape == (2, 6, d_model) and weights.shape == (2, num_heads, 6, 6)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-6)
    torch.testing.assert_close(fused, out, rtol=0, atol=1e-6)


def test_inputs_of_another_width_are_named_and_pytorchs_module_refused() -> None:
    mha = MultiHeadAttention(8, 2, d_in=5)
    with pytest.raises(ValueError, match=r"query must have shape \(batch, seq, d_in=5\), got shape \(1, 3, 8\)"):
        mha(torch.randn(1, 3, 8), torch.randn(1, 3, 5), torch.randn(1, 3, 5))
    with pytest.raises(ValueError, match="d_in=5 != d_model=8"):
        mha.to_torch()
    with pytest.raises(ValueError, match="d_in must be a positive int"):
        MultiHeadAttention(8, 2, d_in=0)
    assert "d_in=5" in repr(mha) and MultiHeadAttention(8, 2).d_in == 8


def test_checks_remembered_for_a_shape_still_refuse_what_differs() -> None:
    """fused_attention remembers the signatures (shapes, dtypes) it has checked; a call that differs in anything the
    checks read is still refused, and the ambiguous 2-D mask (batch == seq_q) is always looked at."""
    q, k, v = torch.randn(3, 2, 3, 8), torch.randn(3, 2, 3, 8), torch.randn(3, 2, 3, 8)
    causal = torch.ones(3, 3, dtype=torch.bool).tril()
    for _ in range(2):
        fused_attention(q, k, v, causal)  # causal: read as (seq_q, seq_k), accepted (and remembered)
    padding = torch.tensor([[True, True, False], [True, False, False], [True, True, True]])  # not causal
    with pytest.raises(ValueError, match="ambiguous"):
        fused_attention(q, k, v, padding)
    with pytest.raises(TypeError, match="boolean"):
        fused_attention(q, k, v, causal.float())
    with pytest.raises(ValueError, match="same feature size"):
        fused_attention(q, k[..., :4], v)
    with pytest.raises(TypeError, match="same dtype"):
        fused_attention(q, k.double(), v)
