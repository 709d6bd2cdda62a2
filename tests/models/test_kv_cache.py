"""The key/value cache of one layer: appends along the positions, counts what it has seen, rejects bad shapes."""

import pytest
import torch

from course_lib.models.kv_cache import KVCache, SlidingWindowCache


def test_update_appends_and_returns_everything_stored():
    torch.manual_seed(0)
    cache = KVCache()
    k1, v1 = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 6)
    k2, v2 = torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 6)
    keys, values = cache.update(k1, v1)
    assert torch.equal(keys, k1) and torch.equal(values, v1)
    keys, values = cache.update(k2, v2)
    assert torch.equal(keys, torch.cat([k1, k2], dim=2)) and torch.equal(values, torch.cat([v1, v2], dim=2))
    assert cache.length == 6 and cache.seen == 6
    assert cache.key_positions().tolist() == [0, 1, 2, 3, 4, 5]


def test_empty_cache():
    cache = KVCache()
    assert cache.length == 0 and cache.seen == 0 and cache.key_positions().numel() == 0


@pytest.mark.parametrize("keys, values, words", [
    (torch.zeros(1, 2, 3), torch.zeros(1, 2, 3), "4-D"),
    (torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 2, 4), "agree"),
    (torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4), "match"),  # heads differ from the stored ones
])
def test_bad_updates_name_the_shapes(keys, values, words):
    cache = KVCache()
    cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match=words):
        cache.update(keys, values)
    assert cache.length == 3  # a refused update changes nothing


def test_sliding_window_cache_keeps_window_minus_one_earlier_positions():
    torch.manual_seed(1)
    cache = SlidingWindowCache(window=4)
    k1, v1 = torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 5)  # a prompt longer than the window
    keys, values = cache.update(k1, v1)
    assert torch.equal(keys, k1) and torch.equal(values, v1)  # this step needs all of its own keys
    assert cache.length == 4 and cache.seen == 6  # but only the window is stored
    assert cache.key_positions().tolist() == [0, 1, 2, 3, 4, 5]  # the keys returned, which the step's mask spans
    assert torch.equal(cache.keys, k1[:, :, 2:]) and torch.equal(cache.values, v1[:, :, 2:])
    assert cache.keys.untyped_storage().nbytes() == cache.keys.numel() * 4  # not a view of the prompt's keys
    k2, v2 = torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 5)
    keys, values = cache.update(k2, v2)  # positions 3, 4, 5 kept, 6 added
    assert torch.equal(keys, torch.cat([k1[:, :, 3:], k2], dim=2)) and torch.equal(values[:, :, -1:], v2)
    assert cache.length == 4 and cache.seen == 7 and cache.key_positions().tolist() == [3, 4, 5, 6]
    assert keys.untyped_storage().nbytes() == keys.numel() * 4  # the dropped positions are not held by a view
    with pytest.raises(ValueError, match="match"):
        cache.update(torch.zeros(2, 2, 1, 4), torch.zeros(2, 2, 1, 5))
    assert cache.length == 4  # a refused update drops nothing


def test_sliding_window_of_one_keeps_only_the_step():
    cache = SlidingWindowCache(window=1)
    for step in range(3):
        keys, _ = cache.update(torch.full((1, 1, 1, 2), float(step)), torch.zeros(1, 1, 1, 2))
        assert keys.shape[2] == 1 and float(keys[0, 0, 0, 0]) == step and cache.length == 1
    assert cache.seen == 3 and cache.key_positions().tolist() == [2]


@pytest.mark.parametrize("window", [0, -1, 2.5, True, None])
def test_sliding_window_must_be_a_positive_int(window):
    with pytest.raises(ValueError, match="window must be an int >= 1"):
        SlidingWindowCache(window)


def test_nbytes_counts_the_stored_keys_and_values():
    cache = KVCache()
    assert cache.nbytes == 0
    cache.update(torch.zeros(2, 3, 5, 4), torch.zeros(2, 3, 5, 6, dtype=torch.float64))
    assert cache.nbytes == 2 * 3 * 5 * 4 * 4 + 2 * 3 * 5 * 6 * 8


def test_a_rolling_cache_after_a_long_prefill_stores_the_window_and_decodes_as_the_full_computation():
    """Mistral's convention: a prompt longer than the window is prefilled in one step, then the cache holds only
    the last ``window`` positions; decoding token by token then equals the full sequence under the sliding-window
    mask (no cache) and the same steps with a cache that keeps everything, and the stored memory stays that of
    ``window`` positions at every step."""
    from course_lib.models.gqa import GroupedQueryAttention

    torch.manual_seed(5)
    window, prompt, total = 4, 11, 17
    attn = GroupedQueryAttention(16, 4, 2, window=window).eval()
    x = torch.randn(2, total, 16)
    with torch.no_grad():
        full = attn(x)[0]  # (2, total, 16): the whole sequence, sliding_window_mask, no cache
        rolling, everything = SlidingWindowCache(window), KVCache()
        steps = [(attn(x[:, :prompt], rolling)[0], attn(x[:, :prompt], everything)[0])]
        per_position = 2 * 2 * 4 * 4 * 2  # (batch, kv_heads, d_k) keys and values, float32: bytes per position
        assert rolling.length == window and rolling.seen == prompt and everything.length == prompt
        assert rolling.nbytes == window * per_position
        for p in range(prompt, total):
            steps.append((attn(x[:, p:p + 1], rolling)[0], attn(x[:, p:p + 1], everything)[0]))
            assert rolling.length == window and rolling.nbytes == window * per_position
            assert rolling.keys.untyped_storage().nbytes() == window * per_position // 2  # no hidden older keys
    cached = torch.cat([r for r, _ in steps], dim=1)
    kept_all = torch.cat([e for _, e in steps], dim=1)
    torch.testing.assert_close(cached, full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cached, kept_all, atol=1e-5, rtol=1e-5)
    assert torch.equal(rolling.keys, everything.keys[:, :, -window:])  # the same keys, the last window of them


def test_a_llama_with_a_window_generates_after_a_long_prompt_as_the_full_pass():
    """The model's caches (``make_cache``) after a prompt of 3 windows: logits of every decoding step equal a full
    pass over the whole text, and every layer's cache stores ``window`` positions."""
    from course_lib.models.llama import Llama

    torch.manual_seed(6)
    window = 3
    lm = Llama(vocab_size=40, d_model=16, num_heads=4, num_layers=2, num_kv_heads=2, window=window).eval()
    tokens = torch.randint(0, 40, (1, 14))
    with torch.no_grad():
        full = lm(tokens)  # (1, 14, vocab)
        caches = lm.make_cache()
        logits = [lm(tokens[:, :9], caches)]
        assert all(c.length == window and c.seen == 9 for c in caches)
        for p in range(9, 14):
            logits.append(lm(tokens[:, p:p + 1], caches))
            assert all(c.length == window for c in caches)
    torch.testing.assert_close(torch.cat(logits, dim=1), full, atol=1e-5, rtol=1e-5)
