"""The key/value cache of one layer: appends along the positions, counts what it has seen, rejects bad shapes."""

import pytest
import torch

from course_lib.models.kv_cache import KVCache


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
