"""The key/value cache inside the attention module: cached and uncached outputs equal (<= 1e-5) for a
prompt and many single steps, batch > 1, dropout configured but in eval mode, pre-LN and post-LN layers; the
model's own forward (GPT) and generation through it; the deprecated hand-written path kept as a wrapper."""

from __future__ import annotations

import pytest
import torch

from course_lib.models.attention import MultiHeadAttention
from course_lib.models.gpt import GPT
from course_lib.models.kv_cache import KVCache
from course_lib.models.layers import Encoder
from course_lib.models.masking import causal_mask

ATOL = 1e-5


def _steps(total: int, prompt: int) -> list[slice]:
    """A prompt of ``prompt`` positions, then one position at a time, with a chunk of 3 in the middle."""
    cuts = [0, prompt, *range(prompt + 1, total // 2), total // 2 + 3, *range(total // 2 + 4, total + 1)]
    return [slice(a, b) for a, b in zip(cuts, cuts[1:], strict=False)]


def test_mha_with_a_cache_equals_the_causal_forward_of_the_whole_sequence() -> None:
    gen = torch.Generator().manual_seed(0)
    mha = MultiHeadAttention(16, 4, dropout=0.3).eval()
    x = torch.randn(3, 20, 16, generator=gen)
    expected, _ = mha(x, x, x, mask=causal_mask(20))
    cache = KVCache()
    pieces = [mha(x[:, part], x[:, part], x[:, part], cache=cache)[0] for part in _steps(20, prompt=5)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), expected, atol=ATOL, rtol=0)
    assert cache.length == cache.seen == 20 and cache.keys.shape == (3, 4, 20, 4)


def test_a_mask_given_with_a_cache_is_combined_with_the_causal_one() -> None:
    """A padding mask over every key so far (batch, 1, 1, stored): the cache adds causality to it, the
    weights (need_weights, the explicit path) equal the uncached ones."""
    gen = torch.Generator().manual_seed(1)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 7, 8, generator=gen)
    keep = torch.ones(2, 7, dtype=torch.bool)
    keep[1, 1] = False  # the second sequence hides its position 1
    full_mask = causal_mask(7) & keep[:, None, None, :]  # (2, 1, 7, 7)
    expected, weights = mha(x, x, x, mask=full_mask, need_weights=True)
    cache = KVCache()
    first, w1 = mha(x[:, :4], x[:, :4], x[:, :4], mask=keep[:, None, None, :4], need_weights=True, cache=cache)
    second, w2 = mha(x[:, 4:], x[:, 4:], x[:, 4:], mask=keep[:, None, None, :], need_weights=True, cache=cache)
    torch.testing.assert_close(torch.cat([first, second], 1), expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(w2, weights[:, :, 4:], atol=ATOL, rtol=0)
    torch.testing.assert_close(w1, weights[:, :, :4, :4], atol=ATOL, rtol=0)


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-LN", "post-LN"])
def test_encoder_stack_with_one_cache_per_layer_equals_the_whole_sequence(norm_first) -> None:
    torch.manual_seed(2)
    encoder = Encoder(3, d_model=16, num_heads=4, d_ff=32, dropout=0.2, norm_first=norm_first).eval()
    x = torch.randn(2, 25, 16)
    expected = encoder(x, causal_mask(25))
    cache = [KVCache() for _ in encoder.layers]
    got = torch.cat([encoder(x[:, part], cache=cache) for part in _steps(25, prompt=6)], dim=1)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match="one KVCache per layer"):
        encoder(x[:, :1], cache=cache[:2])


def test_gpt_forward_with_a_cache_equals_the_uncached_logits() -> None:
    torch.manual_seed(3)
    model = GPT(50, d_model=16, num_heads=4, num_layers=2, max_len=40, dropout=0.1).eval()
    tokens = torch.randint(0, 50, (3, 40))
    full = model(tokens)  # (3, 40, 50)
    cache = model.make_cache()
    got = torch.cat([model(tokens[:, part], cache=cache) for part in _steps(40, prompt=8)], dim=1)
    torch.testing.assert_close(got, full, atol=ATOL, rtol=0)
    assert all(c.seen == 40 for c in cache)
    with pytest.raises(ValueError, match="positions must|max_len"):
        model(tokens[:, :1], cache=cache)  # position 40 has no learned embedding
    with pytest.raises(ValueError, match="list of 2 KVCache"):
        model(tokens[:, :1], cache=[KVCache()])
    with pytest.raises(ValueError, match="cache holds batch 3, tokens has batch 2"):
        model(tokens[:2, :1], cache=cache)


def test_generate_calls_the_models_forward_and_matches_the_uncached_tokens() -> None:
    from course_lib.generation.sampling import generate

    torch.manual_seed(4)
    model = GPT(30, d_model=16, num_heads=2, num_layers=2, max_len=32).eval()
    prompt = torch.randint(0, 30, (2, 5))
    calls = []
    handle = model.register_forward_pre_hook(lambda module, args, kwargs: calls.append(kwargs.get("cache")),
                                             with_kwargs=True)
    cached = generate(model, prompt, 12, temperature=0.0)
    handle.remove()
    assert len(calls) == 12 and all(c is calls[0] and len(c) == 2 for c in calls)  # one cache list, reused
    assert torch.equal(cached, generate(model, prompt, 12, temperature=0.0, use_cache=False))


def test_the_generation_module_holds_no_copy_of_a_layers_forward() -> None:
    """Generation calls the model's own forward (``model(tokens, cache=caches)``):
    no call of a layer's parts (norms, projections, feed-forward) is left in generation."""
    import ast
    import inspect

    from course_lib import generation

    tree = ast.parse(inspect.getsource(generation))
    parts = {"norm1", "norm2", "w_q", "w_k", "w_v", "w_o", "feed_forward", "dropout1", "dropout2", "lm_head"}
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)} & parts
    assert not used, f"generation reaches into a layer's parts: {sorted(used)}"


def test_a_cache_needs_self_attention_and_a_kv_cache() -> None:
    mha = MultiHeadAttention(8, 2)
    x, memory = torch.randn(1, 2, 8), torch.randn(1, 5, 8)
    with pytest.raises(ValueError, match="query and key must be the same new positions"):
        mha(x, memory, memory, cache=KVCache())
    with pytest.raises(TypeError, match="cache must be a course_lib.models.kv_cache.KVCache"):
        mha(x, x, x, cache=[KVCache()])


def test_cache_causal_mask() -> None:
    cache = KVCache()
    cache.update(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4))
    cache.update(torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 4))
    assert cache.causal_mask(3).tolist() == [[True, True, True, False, False], [True, True, True, True, False],
                                             [True] * 5]
    assert torch.equal(cache.causal_mask(5), causal_mask(5))
    with pytest.raises(ValueError, match="num_queries must be between 1 and the 5"):
        cache.causal_mask(6)


def test_key_size_is_an_option_of_multi_head_attention() -> None:
    """Table 3, row B: queries and keys of d_k per head, values of d_model / h; the formula written out here."""
    torch.manual_seed(6)
    mha = MultiHeadAttention(16, 4, d_k=2).eval()
    assert mha.w_q.weight.shape == mha.w_k.weight.shape == (8, 16) and mha.w_v.weight.shape == (16, 16)
    q_in, kv = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    q = mha.w_q(q_in).view(2, 3, 4, 2).transpose(1, 2)  # (batch, heads, seq_q, d_k)
    k = mha.w_k(kv).view(2, 5, 4, 2).transpose(1, 2)
    v = mha.w_v(kv).view(2, 5, 4, 4).transpose(1, 2)  # (batch, heads, seq_k, d_v = d_model / h)
    weights = torch.softmax(q @ k.transpose(-2, -1) / 2 ** 0.5, dim=-1)
    expected = mha.w_o((weights @ v).transpose(1, 2).reshape(2, 3, 16))
    torch.testing.assert_close(mha(q_in, kv, kv)[0], expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(mha(q_in, kv, kv, need_weights=True)[1], weights, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="d_k=2"):
        mha.to_torch()


# ------------------------------------------------------------------------------------------------
# Generation past the context: a sliding-window model's rolling cache; learned positions refuse
# ------------------------------------------------------------------------------------------------

def _windowed_llama(window: int | None = 4):
    from course_lib.models.llama import Llama

    torch.manual_seed(6)
    return Llama(vocab_size=40, d_model=32, num_heads=4, num_layers=2, num_kv_heads=2, max_len=8, window=window).eval()


def test_generate_runs_a_sliding_window_model_past_max_len_with_constant_memory() -> None:
    """A context of 8, a window of 4, 2 layers: 40 new tokens (5 x max_len). Every step's logits, as generate's
    cached path computed them, equal an uncached forward over the tokens the window chain reaches (2 x 3 + 1 = 7)
    and over the whole text (<= 1e-5); the caches' bytes stop growing once the window is full."""
    from course_lib.generation.sampling import generate

    model, window, new = _windowed_llama(), 4, 40
    prompt = torch.randint(0, 40, (2, 3), generator=torch.Generator().manual_seed(0))
    steps: list[torch.Tensor] = []   # the last position's logits of every forward call, (batch, vocab)
    nbytes: list[int] = []           # the caches' bytes after every call

    def record(module, args, kwargs, output) -> None:
        steps.append(output[:, -1])
        nbytes.append(sum(c.nbytes for c in (args[1] if len(args) > 1 else kwargs["cache"])))

    handle = model.register_forward_hook(record, with_kwargs=True)
    try:
        text = generate(model, prompt, new, temperature=0.9, generator=torch.Generator().manual_seed(1))
    finally:
        handle.remove()
    assert text.shape == (2, 3 + new) and text.shape[1] > 5 * model.max_len
    assert len(steps) == new
    reach = 2 * (window - 1) + 1
    with torch.no_grad():
        full = model(text)  # (2, 43, vocab): one pass, every query masked to its window
        for i, logits in enumerate(steps):
            seen = 3 + i  # the tokens before the one this step chose
            torch.testing.assert_close(logits, model(text[:, max(0, seen - reach):seen])[:, -1], atol=ATOL, rtol=0)
            torch.testing.assert_close(logits, full[:, seen - 1], atol=ATOL, rtol=0)
    per_position = 2 * 2 * (32 // 4) * 4 * 2  # keys and values x 2 kv heads x d_k x float32 bytes x batch 2
    assert nbytes[0] == 2 * 3 * per_position  # 2 layers x the prompt's 3 positions
    assert nbytes[1:] == [2 * window * per_position] * (new - 1)  # 2 layers x window positions, from step 2 on
    # the uncached path reads the same reach and writes the same text
    again = generate(model, prompt, new, temperature=0.9, generator=torch.Generator().manual_seed(1), use_cache=False)
    assert torch.equal(again, text)


def test_generate_past_max_len_refuses_a_cache_that_keeps_every_position() -> None:
    """Learned positions (the GPT) and full attention (a Llama without a window) stop at max_len, naming the
    argument, the limit and the value; within it, or uncached, they generate."""
    from course_lib.generation.sampling import generate

    gpt = GPT(30, d_model=16, num_heads=2, num_layers=1, max_len=8).eval()
    prompt = torch.randint(0, 30, (1, 3))
    with pytest.raises(ValueError, match=r"generate: prompt \(3 tokens\) \+ max_new_tokens \(10\) = 13 exceed "
                                         r"max_len=8, the context GPT was built for .*at most max_new_tokens=5"):
        generate(gpt, prompt, 10)
    assert generate(gpt, prompt, 5, temperature=0).shape == (1, 8)
    assert generate(gpt, prompt, 10, temperature=0, use_cache=False).shape == (1, 13)
    with pytest.raises(ValueError, match=r"= 12 exceed max_len=8, the context Llama was built for.*Llama\(window=W\)"):
        generate(_windowed_llama(window=None), prompt, 9)
    with pytest.raises(ValueError, match=r"a prompt of at most 8 tokens"):
        generate(gpt, torch.randint(0, 30, (1, 9)), 1)
