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
    assert cache.length == 6 and cache.seen == 6
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
