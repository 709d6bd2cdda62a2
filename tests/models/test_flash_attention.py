"""The online softmax equals notebook 00's stable softmax; tiled attention equals PyTorch's fused kernel (tile
sizes, lengths that are not multiples of a tile, causal, masks, a fully masked row); the memory measurement
counts what it should and shows the score matrix's quadratic growth that tiling removes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_lib.models.attention import scaled_dot_product_attention
from course_lib.models.flash_attention import measure_memory, online_softmax, online_softmax_attention
from course_lib.models.softmax import stable_softmax


@pytest.mark.parametrize("tile_size", [1, 3, 8, 100])
def test_online_softmax_equals_the_stable_softmax(tile_size: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 3, 37) * 20
    x[0, 0, 30] = 1000.0  # a late maximum: the sums read before it must be rescaled
    torch.testing.assert_close(online_softmax(x, tile_size=tile_size), stable_softmax(x), rtol=0, atol=1e-6)
    torch.testing.assert_close(online_softmax(x, dim=1, tile_size=tile_size), stable_softmax(x, dim=1),
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize("tile_size", [1, 4, 16, 64])
@pytest.mark.parametrize("seq_q, seq_k", [(1, 1), (7, 7), (33, 33), (5, 50), (50, 13)])
def test_equals_pytorchs_attention(tile_size: int, seq_q: int, seq_k: int) -> None:
    torch.manual_seed(seq_q * 100 + seq_k)
    q, k, v = torch.randn(2, 3, seq_q, 8), torch.randn(2, 3, seq_k, 8), torch.randn(2, 3, seq_k, 5)
    torch.testing.assert_close(online_softmax_attention(q, k, v, tile_size=tile_size),
                               F.scaled_dot_product_attention(q, k, v), rtol=0, atol=1e-5)


@pytest.mark.parametrize("tile_size", [1, 5, 16, 128])
@pytest.mark.parametrize("seq", [1, 9, 40])
def test_causal_equals_pytorchs_is_causal(tile_size: int, seq: int) -> None:
    torch.manual_seed(seq)
    q, k, v = (torch.randn(3, 2, seq, 16) for _ in range(3))
    torch.testing.assert_close(online_softmax_attention(q, k, v, causal=True, tile_size=tile_size),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True), rtol=0, atol=1e-5)


@pytest.mark.parametrize("seq_q, seq_k", [(3, 10), (10, 4)])
def test_causal_with_fewer_or_more_queries_aligns_them_at_the_end(seq_q: int, seq_k: int) -> None:
    """The queries are the last positions (as with a cache): query i sees keys j <= i + seq_k - seq_q."""
    torch.manual_seed(7)
    q, k, v = torch.randn(2, seq_q, 8), torch.randn(2, seq_k, 8), torch.randn(2, seq_k, 8)
    mask = torch.ones(seq_q, seq_k, dtype=torch.bool).tril(seq_k - seq_q)
    expected, _ = scaled_dot_product_attention(q, k, v, mask)  # rows with no key: zero, the course's rule
    torch.testing.assert_close(online_softmax_attention(q, k, v, causal=True, tile_size=3), expected,
                               rtol=0, atol=1e-5)


def test_masks_and_a_fully_masked_row() -> None:
    torch.manual_seed(8)
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 11, 8), torch.randn(2, 4, 11, 8)
    padding = torch.ones(2, 1, 1, 11, dtype=torch.bool)
    padding[1, ..., 7:] = False
    torch.testing.assert_close(online_softmax_attention(q, k, v, padding, tile_size=4),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=padding), rtol=0, atol=1e-5)
    per_query = torch.rand(2, 1, 6, 11) > 0.3
    per_query[0, 0, 2] = False  # query 2 of the first sequence may attend to nothing
    ours = online_softmax_attention(q, k, v, per_query, causal=True, tile_size=4)
    expected, _ = scaled_dot_product_attention(q, k, v, per_query & torch.ones(6, 11, dtype=torch.bool).tril(5))
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-5)
    assert float(ours[0, :, 2].abs().max()) == 0.0 and not ours.isnan().any()


def test_gradients_flow_and_match() -> None:
    torch.manual_seed(9)
    q, k, v = (torch.randn(1, 2, 10, 4, requires_grad=True) for _ in range(3))
    online_softmax_attention(q, k, v, causal=True, tile_size=3).sum().backward()
    ours = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    for mine, theirs in zip(ours, (q.grad, k.grad, v.grad), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-5)


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-12), (torch.bfloat16, 2e-2)])
def test_dtypes(dtype: torch.dtype, atol: float) -> None:
    torch.manual_seed(10)
    q, k, v = (torch.randn(2, 19, 8, dtype=dtype) for _ in range(3))
    out = online_softmax_attention(q, k, v, causal=True, tile_size=4)
    assert out.dtype == dtype
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=atol)


def test_memory_counts_allocations_and_not_views() -> None:
    x = torch.ones(100, 100)
    assert measure_memory(lambda: x.t().reshape(-1)[:10]).peak_bytes == 40_000  # one copy (reshape of a transpose)
    assert measure_memory(lambda: x.view(-1)).peak_bytes == 0  # a view allocates nothing
    use = measure_memory(lambda: (x + 1) * 2)  # two temporaries alive at once
    assert use.peak_bytes == 80_000 and use.largest_bytes == 40_000


def test_the_explicit_path_grows_quadratically_and_the_tiled_one_linearly() -> None:
    heads, d_k, tile = 2, 16, 32
    peaks = {}
    for seq in (128, 256, 512):
        q, k, v = (torch.randn(1, heads, seq, d_k) for _ in range(3))
        mask = torch.ones(seq, seq, dtype=torch.bool).tril()
        explicit = measure_memory(scaled_dot_product_attention, q, k, v, mask)
        tiled = measure_memory(online_softmax_attention, q, k, v, causal=True, tile_size=tile)
        assert explicit.largest_bytes >= heads * seq * seq * 4  # the (heads, seq, seq) float32 weights
        assert tiled.largest_bytes < heads * seq * seq * 4 / 4
        peaks[seq] = (explicit.peak_bytes, tiled.peak_bytes)
    assert peaks[512][0] / peaks[128][0] > 12  # about 16 when the sequence is 4 times longer
    assert peaks[512][1] / peaks[128][1] < 6  # about 4


@pytest.mark.parametrize("args, words", [
    ((torch.randn(2, 3, 8), torch.randn(2, 4, 7), torch.randn(2, 4, 8)), r"query \(\.\.\., seq_q, d_k\).*got query "
                                                                        r"\(2, 3, 8\), key \(2, 4, 7\)"),
    ((torch.randn(2, 3, 8), torch.randn(2, 4, 8), torch.randn(2, 5, 8)), r"value \(2, 5, 8\)"),
    ((torch.randn(8), torch.randn(4, 8), torch.randn(4, 8)), "query must be a floating-point tensor"),
])
def test_bad_shapes_are_named(args, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        online_softmax_attention(*args)


def test_bad_masks_and_tiles_are_named() -> None:
    q = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match=r"mask must be a boolean .*\(2, 3, 3\), got torch.float32 \(3, 3\)"):
        online_softmax_attention(q, q, q, torch.zeros(3, 3))
    with pytest.raises(ValueError, match="tile_size must be an int >= 1, got 0"):
        online_softmax_attention(q, q, q, tile_size=0)
    with pytest.raises(ValueError, match="online_softmax: x must be a floating-point tensor"):
        online_softmax(torch.arange(4))
