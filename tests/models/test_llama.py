"""RMSNorm, SwiGLU, grouped-query attention and the pre-norm block against Hugging Face's Llama modules with
copied weights (float32, <= 1e-5); the cache (plain and rolling) against the uncached computation."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_lib.models.gqa import GroupedQueryAttention, repeat_kv, sliding_window_mask
from course_lib.models.kv_cache import KVCache, SlidingWindowCache
from course_lib.models.llama import Llama, LlamaBlock, RMSNorm, SwiGLU, swiglu_width
from course_lib.models.rope import convert_rope_weight

transformers = pytest.importorskip("transformers")
from transformers.models.llama import modeling_llama  # noqa: E402

TOL = {"rtol": 0, "atol": 1e-5}


def _config(num_kv_heads: int = 2, **extra) -> transformers.LlamaConfig:
    config = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=88, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=num_kv_heads, rms_norm_eps=1e-5,
                                      rope_theta=10000.0, max_position_embeddings=64, **extra)
    config._attn_implementation = "eager"  # the formula, as the course writes it
    return config


def _causal_additive(seq: int) -> torch.Tensor:
    """Hugging Face's eager mask: 0 where a key may be attended, the dtype's minimum elsewhere (1, 1, seq, seq)."""
    return torch.full((seq, seq), torch.finfo(torch.float32).min).triu(1)[None, None]


@torch.no_grad()
def _copy_attention(ours: GroupedQueryAttention, theirs: nn.Module) -> None:
    for mine, their in (("w_q", "q_proj"), ("w_k", "k_proj"), ("w_v", "v_proj"), ("w_o", "o_proj")):
        getattr(ours, mine).weight.copy_(getattr(theirs, their).weight)


@torch.no_grad()
def _copy_mlp(ours: SwiGLU, theirs: nn.Module) -> None:
    for mine, their in (("w_gate", "gate_proj"), ("w_up", "up_proj"), ("w_down", "down_proj")):
        getattr(ours, mine).weight.copy_(getattr(theirs, their).weight)


def _hf_positions(config: transformers.LlamaConfig, x: torch.Tensor, start: int = 0) -> tuple:
    positions = torch.arange(start, start + x.shape[1])[None].expand(x.shape[0], -1)
    return modeling_llama.LlamaRotaryEmbedding(config)(x, positions)


def test_rmsnorm_equals_llama_and_pytorch() -> None:
    torch.manual_seed(0)
    ours, theirs, torchs = RMSNorm(32, eps=1e-5), modeling_llama.LlamaRMSNorm(32, eps=1e-5), nn.RMSNorm(32, eps=1e-5)
    with torch.no_grad():
        for module in (ours, theirs, torchs):
            module.weight.copy_(torch.linspace(0.5, 2.0, 32))
    x = torch.randn(3, 5, 32) * 3
    torch.testing.assert_close(ours(x), theirs(x), **TOL)
    torch.testing.assert_close(ours(x), torchs(x), **TOL)
    tiny = torch.full((1, 32), 1e-3)  # eps inside the square root: sqrt(1e-6 + 1e-5), not sqrt(1e-6) + 1e-5
    torch.testing.assert_close(ours(tiny), theirs(tiny), **TOL)
    wrong = tiny / (tiny.pow(2).mean(-1, keepdim=True).sqrt() + 1e-5) * ours.weight
    assert not torch.allclose(ours(tiny), wrong, atol=1e-2)


def test_rmsnorm_keeps_half_precision_as_llama_does() -> None:
    ours, theirs = RMSNorm(16).to(torch.bfloat16), modeling_llama.LlamaRMSNorm(16, eps=1e-6).to(torch.bfloat16)
    x = torch.randn(2, 16, dtype=torch.bfloat16)
    assert ours(x).dtype == torch.bfloat16
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=0)


def test_swiglu_equals_llama_mlp() -> None:
    torch.manual_seed(1)
    config = _config()
    theirs, ours = modeling_llama.LlamaMLP(config), SwiGLU(32, 88)
    _copy_mlp(ours, theirs)
    x = torch.randn(2, 6, 32)
    torch.testing.assert_close(ours(x), theirs(x), **TOL)
    gate_swapped = ours.w_down(ours.w_gate(x) * nn.functional.silu(ours.w_up(x)))  # the gate on the wrong branch
    assert not torch.allclose(ours(x), gate_swapped, atol=1e-3)
    assert swiglu_width(32) == 88 and sum(p.numel() for p in SwiGLU(48).parameters()) == 2 * 48 * 4 * 48


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_repeat_kv_equals_hugging_faces(groups: int) -> None:
    x = torch.randn(2, 3, 5, 4)
    torch.testing.assert_close(repeat_kv(x, groups), modeling_llama.repeat_kv(x, groups), rtol=0, atol=0)
    if groups > 1:
        assert not torch.equal(repeat_kv(x, groups), x.repeat(1, groups, 1, 1))  # the wrong order


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])  # MHA, GQA, MQA
def test_attention_equals_llama_attention(num_kv_heads: int) -> None:
    torch.manual_seed(2)
    config = _config(num_kv_heads)
    theirs = modeling_llama.LlamaAttention(config, layer_idx=0).eval()
    ours = GroupedQueryAttention(32, 4, num_kv_heads).eval()
    _copy_attention(ours, theirs)
    x = torch.randn(3, 9, 32)
    expected, _ = theirs(x, position_embeddings=_hf_positions(config, x), attention_mask=_causal_additive(9))
    out, weights = ours(x, need_weights=True)
    torch.testing.assert_close(out, expected, **TOL)
    torch.testing.assert_close(ours(x)[0], expected, **TOL)  # the fused path too
    assert weights.shape == (3, 4, 9, 9) and float(weights.detach().triu(1).abs().max()) == 0.0


def test_block_equals_llama_decoder_layer() -> None:
    torch.manual_seed(3)
    config = _config(2)
    theirs = modeling_llama.LlamaDecoderLayer(config, layer_idx=0).eval()
    with torch.no_grad():
        theirs.input_layernorm.weight.uniform_(0.5, 1.5)
        theirs.post_attention_layernorm.weight.uniform_(0.5, 1.5)
    ours = LlamaBlock(32, 4, 2, d_ff=88, norm_eps=1e-5).eval()
    _copy_attention(ours.self_attn, theirs.self_attn)
    _copy_mlp(ours.feed_forward, theirs.mlp)
    with torch.no_grad():
        ours.norm1.weight.copy_(theirs.input_layernorm.weight)
        ours.norm2.weight.copy_(theirs.post_attention_layernorm.weight)
    x = torch.randn(2, 8, 32)
    expected = theirs(x, attention_mask=_causal_additive(8), position_embeddings=_hf_positions(config, x))
    expected = expected[0] if isinstance(expected, tuple) else expected
    torch.testing.assert_close(ours(x), expected, **TOL)


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_cached_steps_equal_the_full_forward_and_the_cache_holds_kv_heads_only(num_kv_heads: int) -> None:
    torch.manual_seed(4)
    lm = Llama(vocab_size=60, d_model=32, num_heads=4, num_layers=2, num_kv_heads=num_kv_heads).eval()
    tokens = torch.randint(0, 60, (3, 11))
    with torch.no_grad():
        full = lm(tokens)
        cache = lm.make_cache()
        steps = [lm(tokens[:, :4], cache)] + [lm(tokens[:, i:i + 1], cache) for i in range(4, 9)]
        steps.append(lm(tokens[:, 9:], cache))  # two tokens at once after single steps
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **TOL)
    assert all(c.seen == 11 and tuple(c.keys.shape) == (3, num_kv_heads, 11, 8) for c in cache)


def test_sliding_window_equals_the_uncached_windowed_computation_past_max_len() -> None:
    torch.manual_seed(5)
    window, total = 4, 23
    lm = Llama(vocab_size=50, d_model=32, num_heads=4, num_layers=2, num_kv_heads=2, max_len=8, window=window).eval()
    tokens = torch.randint(0, 50, (2, total))
    with torch.no_grad():
        full = lm(tokens)  # uncached: every query masked to its window
        cache = lm.make_cache()
        assert isinstance(cache[0], SlidingWindowCache)
        steps = [lm(tokens[:, :6], cache)]  # a prompt longer than the window
        for i in range(6, 17):
            steps.append(lm(tokens[:, i:i + 1], cache))
            assert cache[0].length == window and cache[0].seen == i + 1  # bounded memory, absolute positions
        for i in range(17, total, 3):  # chunks of 3 new tokens (the last one of 3 as well)
            steps.append(lm(tokens[:, i:i + 3], cache))
            assert cache[0].length == window  # a step of 3 reads window - 1 + 3 keys, then stores the window
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **TOL)
    # the window matters: without it the last logits differ
    unwindowed = Llama(vocab_size=50, d_model=32, num_heads=4, num_layers=2, num_kv_heads=2, max_len=8).eval()
    unwindowed.load_state_dict(lm.state_dict())
    with torch.no_grad():
        assert not torch.allclose(unwindowed(tokens)[:, -1], full[:, -1], atol=1e-4)


def test_window_mask_and_a_window_cache_smaller_than_the_window_is_refused() -> None:
    mask = sliding_window_mask(torch.arange(3, 6), torch.arange(0, 6), window=3)  # queries 3..5 over keys 0..5
    assert mask.int().tolist() == [[0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1]]
    attn = GroupedQueryAttention(16, 2, window=5)
    with pytest.raises(ValueError, match=r"SlidingWindowCache\(window=3\) drops keys.*window is 5"):
        attn(torch.randn(1, 2, 16), SlidingWindowCache(3))
    with pytest.raises(ValueError, match=r"window is None"):
        GroupedQueryAttention(16, 2)(torch.randn(1, 2, 16), SlidingWindowCache(3))


def test_padding_mask_is_combined_with_the_causal_one() -> None:
    torch.manual_seed(6)
    attn = GroupedQueryAttention(16, 4, 2).eval()
    x = torch.randn(2, 5, 16)
    keep = torch.tensor([[True] * 5, [False, False, True, True, True]])  # the second row left-padded by 2
    out, weights = attn(x, mask=keep[:, None, None, :], need_weights=True)
    assert float(weights.detach()[1, :, :, :2].abs().max()) == 0.0
    torch.testing.assert_close(out[1, 2:], attn(x[1:, 2:])[0][0], rtol=0, atol=1e-5)  # positions differ by 2,
    # but RoPE depends only on offsets: the padded row equals the unpadded sequence


def test_a_meta_layout_model_equals_its_converted_hugging_face_layout() -> None:
    """Interleaved RoPE with W_q, W_k as Meta stores them == rotate-half with the rows permuted (logits)."""
    torch.manual_seed(7)
    sizes = dict(vocab_size=40, d_model=32, num_heads=4, num_layers=2, num_kv_heads=2)
    meta, hf = Llama(**sizes, rope_layout="interleaved").eval(), Llama(**sizes, rope_layout="half").eval()
    state = meta.state_dict()
    for name in state:
        heads = 4 if name.endswith("w_q.weight") else 2 if name.endswith("w_k.weight") else None
        if heads:
            state[name] = convert_rope_weight(state[name], heads, "interleaved", "half")
    hf.load_state_dict(state)
    tokens = torch.randint(0, 40, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(hf(tokens), meta(tokens), **TOL)
        state = meta.state_dict()  # unconverted weights in the other layout: different logits
        hf.load_state_dict(state)
        assert not torch.allclose(hf(tokens), meta(tokens), atol=1e-4)


def test_a_mask_covers_the_rolling_caches_keys() -> None:
    """With a cache the mask spans the kept and the new keys; a wrong size is refused before the cache changes."""
    torch.manual_seed(8)
    attn, cache = GroupedQueryAttention(16, 4, 2, window=3).eval(), SlidingWindowCache(3)
    x = torch.randn(1, 6, 16)
    full = attn(x)[0]
    attn(x[:, :5], cache)
    with pytest.raises(ValueError, match=r"\(1, 4, 1, 3\), got torch.bool \(1, 1, 1, 6\)"):
        attn(x[:, 5:], cache, mask=torch.ones(1, 1, 1, 6, dtype=torch.bool))
    assert cache.seen == 5
    step = attn(x[:, 5:], cache, mask=torch.ones(1, 1, 1, 3, dtype=torch.bool))[0]  # keys 3, 4 kept; 5 new
    torch.testing.assert_close(step, full[:, 5:], **TOL)


def test_tied_embeddings_and_dtypes() -> None:
    lm = Llama(vocab_size=30, d_model=16, num_heads=2, num_layers=1, tie_weights=True)
    assert lm.lm_head.weight is lm.token_embedding.weight
    lm = lm.to(torch.float64).eval()
    assert lm(torch.randint(0, 30, (1, 4))).dtype == torch.float64


@pytest.mark.parametrize("call, words", [
    (lambda lm: lm(torch.randn(2, 3)), r"tokens must be an integer tensor of shape \(batch, seq >= 1\), got "
                                       r"torch.float32 \(2, 3\)"),
    (lambda lm: lm(torch.tensor([[1, 30]])), r"token ids must be in \[0, vocab_size=30\), got \[1, 30\]"),
    (lambda lm: lm(torch.tensor([[1, 2]]), [KVCache()]), r"a list of 2 KVCache .* got list of length 1"),
    (lambda lm: lm.layers[0].self_attn(torch.randn(2, 3, 15)), r"\(batch, seq >= 1, d_model=16\), got "
                                                               r"torch.float32 \(2, 3, 15\)"),
    (lambda lm: lm.layers[0].self_attn(torch.randn(2, 3, 16), mask=torch.ones(2, 1, 3, 4, dtype=torch.bool)),
     r"broadcastable to \(batch, num_heads, seq, keys\) = \(2, 4, 3, 3\), got torch.bool \(2, 1, 3, 4\)"),
])
def test_bad_input_names_the_argument_and_shapes(call, words: str) -> None:
    lm = Llama(vocab_size=30, d_model=16, num_heads=4, num_layers=2)
    with pytest.raises(ValueError, match=words):
        call(lm)


def test_bad_sizes_are_named() -> None:
    with pytest.raises(ValueError, match="num_kv_heads=3 must divide num_heads=4"):
        GroupedQueryAttention(32, 4, 3)
    with pytest.raises(ValueError, match="d_k=3 must be even"):
        GroupedQueryAttention(12, 4)
    with pytest.raises(ValueError, match="rope_layout must be one of"):
        GroupedQueryAttention(16, 2, rope_layout="neox")
