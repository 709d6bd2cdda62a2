"""course_lib.models.layers against PyTorch's own modules (weights copied, dropout off) and against the paper.

References we did not write: nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, nn.TransformerEncoder,
nn.TransformerDecoder, nn.Conv1d (the feed-forward block as two 1x1 convolutions).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from course_lib.models.attention import MultiHeadAttention
from course_lib.models.layers import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    FeedForward,
    normal_init_,
)
from course_lib.models.masking import causal_mask, decoder_mask, padding_mask

D_MODEL, HEADS, D_FF = 16, 4, 40
ATOL = 1e-5


def _tokens(gen: torch.Generator, batch: int, seq: int, lengths: list[int]) -> torch.Tensor:
    tokens = torch.randint(1, 9, (batch, seq), generator=gen)
    for b, n in enumerate(lengths):
        tokens[b, n:] = 0
    return tokens


def _randomise(module: nn.Module, gen: torch.Generator) -> None:
    """Random weights everywhere (LayerNorm gains and biases too), so that no copy mistake hides."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)


# --- FeedForward --------------------------------------------------------------------------------------

def test_feed_forward_is_the_papers_formula() -> None:
    gen = torch.Generator().manual_seed(0)
    ffn = FeedForward(D_MODEL, D_FF).eval()
    x = torch.randn(2, 5, D_MODEL, generator=gen)
    w1, b1, w2, b2 = ffn.linear1.weight, ffn.linear1.bias, ffn.linear2.weight, ffn.linear2.bias
    expected = torch.clamp(x @ w1.T + b1, min=0) @ w2.T + b2  # max(0, x W1 + b1) W2 + b2
    torch.testing.assert_close(ffn(x), expected, atol=ATOL, rtol=1e-5)


def test_feed_forward_equals_two_1x1_convolutions() -> None:
    gen = torch.Generator().manual_seed(1)
    ffn = FeedForward(D_MODEL, D_FF).eval()
    conv1, conv2 = nn.Conv1d(D_MODEL, D_FF, kernel_size=1), nn.Conv1d(D_FF, D_MODEL, kernel_size=1)
    with torch.no_grad():
        conv1.weight.copy_(ffn.linear1.weight[:, :, None])
        conv1.bias.copy_(ffn.linear1.bias)
        conv2.weight.copy_(ffn.linear2.weight[:, :, None])
        conv2.bias.copy_(ffn.linear2.bias)
    x = torch.randn(3, 7, D_MODEL, generator=gen)
    via_conv = conv2(torch.relu(conv1(x.transpose(1, 2)))).transpose(1, 2)  # Conv1d wants (batch, channels, seq)
    torch.testing.assert_close(ffn(x), via_conv, atol=ATOL, rtol=1e-5)


def test_feed_forward_is_position_wise() -> None:
    gen = torch.Generator().manual_seed(2)
    ffn = FeedForward(D_MODEL, D_FF, activation="gelu").eval()
    x = torch.randn(2, 6, D_MODEL, generator=gen)
    perm = torch.randperm(6, generator=gen)
    torch.testing.assert_close(ffn(x[:, perm]), ffn(x)[:, perm], atol=ATOL, rtol=1e-5)


def test_feed_forward_rejects_a_bad_activation() -> None:
    with pytest.raises(ValueError, match="activation"):
        FeedForward(8, 16, activation="tanh")


# --- EncoderLayer against nn.TransformerEncoderLayer ------------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_equals_pytorch(norm_first: bool, activation: str) -> None:
    gen = torch.Generator().manual_seed(3)
    theirs = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, activation=activation,
                                        batch_first=True, norm_first=norm_first)
    _randomise(theirs, gen)
    ours = EncoderLayer(D_MODEL, HEADS, D_FF, norm_first=norm_first, activation=activation).load_from_torch(theirs)
    ours.eval()
    theirs.eval()
    x = torch.randn(3, 6, D_MODEL, generator=gen)
    tokens = _tokens(gen, 3, 6, [6, 4, 2])
    # no mask
    torch.testing.assert_close(ours(x), theirs(x), atol=ATOL, rtol=1e-5)
    # padding: ours True = attend, PyTorch's key_padding_mask True = ignore
    got = ours(x, padding_mask(tokens, 0))
    expected = theirs(x, src_key_padding_mask=tokens == 0)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=1e-5)
    # a 2-D mask (seq, seq): causal
    got = ours(x, causal_mask(6))
    expected = theirs(x, src_mask=~causal_mask(6))
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_gelu_tanh_and_layer_norm_eps_equal_pytorch(norm_first: bool) -> None:
    """GPT-2's layout needs the tanh GELU and BERT's/ViT's a LayerNorm eps other than 1e-5: both equal torch's."""
    gen = torch.Generator().manual_seed(5)
    eps = 1e-6
    t_layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, 0.0, activation=nn.GELU(approximate="tanh"),
                                         layer_norm_eps=eps, batch_first=True, norm_first=norm_first)
    t_enc = nn.TransformerEncoder(t_layer, 2, norm=nn.LayerNorm(D_MODEL, eps=eps) if norm_first else None,
                                  enable_nested_tensor=False)
    _randomise(t_enc, gen)
    ours = Encoder(2, D_MODEL, HEADS, D_FF, norm_first=norm_first, activation="gelu_tanh",
                   layer_norm_eps=eps).load_from_torch(t_enc).eval()
    t_enc.eval()
    x = torch.randn(3, 6, D_MODEL, generator=gen) * 1e-3  # small activations: eps matters
    torch.testing.assert_close(ours(x, causal_mask(6)), t_enc(x, mask=~causal_mask(6)), atol=ATOL, rtol=1e-5)
    assert all(norm.eps == eps for norm in ours.modules() if isinstance(norm, nn.LayerNorm))
    with pytest.raises(ValueError, match="eps"):  # a different eps is refused, not silently copied
        Encoder(2, D_MODEL, HEADS, D_FF, norm_first=norm_first, activation="gelu_tanh").load_from_torch(t_enc)
    with pytest.raises(ValueError, match="activation"):  # exact GELU is not the tanh approximation
        Encoder(2, D_MODEL, HEADS, D_FF, norm_first=norm_first, activation="gelu",
                layer_norm_eps=eps).load_from_torch(t_enc)


def test_encoder_layer_equals_pytorch_fast_path_at_real_tokens() -> None:
    """Under no_grad in eval, PyTorch takes its fused fast path: the same numbers at real positions."""
    gen = torch.Generator().manual_seed(4)
    theirs = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, batch_first=True).eval()
    ours = EncoderLayer(D_MODEL, HEADS, D_FF).load_from_torch(theirs).eval()
    x = torch.randn(2, 5, D_MODEL, generator=gen)
    tokens = _tokens(gen, 2, 5, [5, 3])
    with torch.no_grad():
        got = ours(x, padding_mask(tokens, 0))
        expected = theirs(x, src_key_padding_mask=tokens == 0)
    real = tokens != 0
    torch.testing.assert_close(got[real], expected[real], atol=ATOL, rtol=1e-5)


def test_encoder_layer_post_ln_output_is_normalised_pre_ln_is_not() -> None:
    """Post-LN ends with LayerNorm (zero mean, unit variance per position before the affine map); pre-LN
    leaves the residual stream un-normalised."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 5, D_MODEL, generator=gen) * 4 + 3
    post = EncoderLayer(D_MODEL, HEADS, D_FF, norm_first=False).eval()
    pre = EncoderLayer(D_MODEL, HEADS, D_FF, norm_first=True).eval()
    pre.load_state_dict(post.state_dict())
    y = post(x)
    torch.testing.assert_close(y.mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(2, 5), atol=1e-3, rtol=0)
    assert pre(x).mean(-1).abs().min() > 0.5


def test_encoder_layer_attention_weights_match_forward() -> None:
    gen = torch.Generator().manual_seed(6)
    tokens = _tokens(gen, 2, 5, [5, 3])
    for norm_first in (False, True):
        layer = EncoderLayer(D_MODEL, HEADS, D_FF, norm_first=norm_first).eval()
        x = torch.randn(2, 5, D_MODEL, generator=gen)
        w = layer.attention_weights(x, padding_mask(tokens, 0))
        assert w.shape == (2, HEADS, 5, 5)
        torch.testing.assert_close(w.sum(-1), torch.ones(2, HEADS, 5), atol=1e-5, rtol=0)
        assert w[1, :, :, 3:].abs().max() == 0  # padded keys get no weight
        # the weights reproduce the attention output forward uses
        h = layer.norm1(x) if norm_first else x
        v = layer.self_attn.w_v(h).view(2, 5, HEADS, D_MODEL // HEADS).transpose(1, 2)  # (batch, heads, seq, d_k)
        heads = (w @ v).transpose(1, 2).reshape(2, 5, D_MODEL)  # (batch, seq, d_model)
        attn_out = layer.self_attn(h, h, h, mask=padding_mask(tokens, 0))[0]
        torch.testing.assert_close(layer.self_attn.w_o(heads), attn_out, atol=ATOL, rtol=1e-5)


def test_load_from_torch_refuses_a_different_norm_placement() -> None:
    theirs = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, batch_first=True, norm_first=True)
    with pytest.raises(ValueError, match="norm_first"):
        EncoderLayer(D_MODEL, HEADS, D_FF, norm_first=False).load_from_torch(theirs)
    theirs = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, batch_first=True, activation="gelu")
    with pytest.raises(ValueError, match="activation"):
        EncoderLayer(D_MODEL, HEADS, D_FF).load_from_torch(theirs)
    theirs = nn.TransformerEncoderLayer(D_MODEL, HEADS, 2 * D_FF, batch_first=True)
    with pytest.raises(ValueError, match="shape"):
        EncoderLayer(D_MODEL, HEADS, D_FF).load_from_torch(theirs)


def test_encoder_layer_dropout_is_active_in_training_only() -> None:
    gen = torch.Generator().manual_seed(7)
    layer = EncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.5)
    x = torch.randn(2, 5, D_MODEL, generator=gen)
    torch.manual_seed(0)
    a, b = layer.train()(x), layer(x)
    assert not torch.allclose(a, b)
    layer.eval()
    torch.testing.assert_close(layer(x), layer(x))


# --- DecoderLayer against nn.TransformerDecoderLayer ------------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_decoder_layer_equals_pytorch(norm_first: bool) -> None:
    gen = torch.Generator().manual_seed(8)
    theirs = nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first)
    _randomise(theirs, gen)
    ours = DecoderLayer(D_MODEL, HEADS, D_FF, norm_first=norm_first).load_from_torch(theirs).eval()
    theirs.eval()
    src, tgt = _tokens(gen, 3, 7, [7, 5, 2]), _tokens(gen, 3, 4, [4, 3, 1])
    x, memory = torch.randn(3, 4, D_MODEL, generator=gen), torch.randn(3, 7, D_MODEL, generator=gen)
    got = ours(x, memory, self_mask=decoder_mask(tgt, 0), cross_mask=padding_mask(src, 0))
    expected = theirs(x, memory, tgt_mask=~causal_mask(4), tgt_key_padding_mask=tgt == 0,
                      memory_key_padding_mask=src == 0)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=1e-5)
    # without masks
    torch.testing.assert_close(ours(x, memory), theirs(x, memory), atol=ATOL, rtol=1e-5)


def test_decoder_layer_is_causal() -> None:
    """Changing a later target position changes no earlier output (with the causal mask), and does without."""
    gen = torch.Generator().manual_seed(9)
    layer = DecoderLayer(D_MODEL, HEADS, D_FF).eval()
    x, memory = torch.randn(1, 5, D_MODEL, generator=gen), torch.randn(1, 6, D_MODEL, generator=gen)
    x2 = x.clone()
    x2[:, 3:] += torch.randn(1, 2, D_MODEL, generator=gen)
    mask = causal_mask(5)
    torch.testing.assert_close(layer(x, memory, mask)[:, :3], layer(x2, memory, mask)[:, :3])
    assert not torch.allclose(layer(x, memory)[:, :3], layer(x2, memory)[:, :3], atol=1e-4)


def test_decoder_layer_cross_attention_weights() -> None:
    gen = torch.Generator().manual_seed(10)
    src = _tokens(gen, 2, 6, [6, 4])
    for norm_first in (False, True):
        layer = DecoderLayer(D_MODEL, HEADS, D_FF, norm_first=norm_first).eval()
        x, memory = torch.randn(2, 3, D_MODEL, generator=gen), torch.randn(2, 6, D_MODEL, generator=gen)
        w = layer.cross_attention_weights(x, memory, causal_mask(3), padding_mask(src, 0))
        assert w.shape == (2, HEADS, 3, 6)
        torch.testing.assert_close(w.sum(-1), torch.ones(2, HEADS, 3), atol=1e-5, rtol=0)
        assert w[1, :, :, 4:].abs().max() == 0
        # the keys come from the encoder: other memory, other weights (adding one constant to every key
        # would not do: it shifts each query's scores by one constant, which the softmax ignores)
        w2 = layer.cross_attention_weights(x, torch.randn(2, 6, D_MODEL, generator=gen), causal_mask(3),
                                           padding_mask(src, 0))
        assert not torch.allclose(w, w2)


# --- stacks against nn.TransformerEncoder / nn.TransformerDecoder -----------------------------------------

@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_stacks_equal_pytorch(norm_first: bool) -> None:
    gen = torch.Generator().manual_seed(11)
    enc_layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, 0.0, batch_first=True, norm_first=norm_first)
    dec_layer = nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, 0.0, batch_first=True, norm_first=norm_first)
    norm = nn.LayerNorm(D_MODEL) if norm_first else None
    t_enc = nn.TransformerEncoder(enc_layer, 3, norm=norm, enable_nested_tensor=False)
    t_dec = nn.TransformerDecoder(dec_layer, 2, norm=nn.LayerNorm(D_MODEL) if norm_first else None)
    _randomise(t_enc, gen)
    _randomise(t_dec, gen)
    enc = Encoder(3, D_MODEL, HEADS, D_FF, norm_first=norm_first).load_from_torch(t_enc).eval()
    dec = Decoder(2, D_MODEL, HEADS, D_FF, norm_first=norm_first).load_from_torch(t_dec).eval()
    t_enc.eval()
    t_dec.eval()
    src, tgt = _tokens(gen, 2, 6, [6, 3]), _tokens(gen, 2, 5, [5, 2])
    x, y = torch.randn(2, 6, D_MODEL, generator=gen), torch.randn(2, 5, D_MODEL, generator=gen)
    memory = enc(x, padding_mask(src, 0))
    torch.testing.assert_close(memory, t_enc(x, src_key_padding_mask=src == 0), atol=ATOL, rtol=1e-5)
    got = dec(y, memory, decoder_mask(tgt, 0), padding_mask(src, 0))
    expected = t_dec(y, memory, tgt_mask=~causal_mask(5), tgt_key_padding_mask=tgt == 0,
                     memory_key_padding_mask=src == 0)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=1e-5)
    assert len(enc.attention_weights(x)) == 3
    assert [w.shape for w in dec.cross_attention_weights(y, memory)] == [(2, HEADS, 5, 6)] * 2


def test_stack_refuses_pytorchs_extra_final_norm_for_post_ln() -> None:
    t_enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, batch_first=True), 2,
                                  norm=nn.LayerNorm(D_MODEL), enable_nested_tensor=False)
    with pytest.raises(ValueError, match="final LayerNorm"):
        Encoder(2, D_MODEL, HEADS, D_FF).load_from_torch(t_enc)
    with pytest.raises(ValueError, match="layers"):
        Encoder(3, D_MODEL, HEADS, D_FF, norm_first=False).load_from_torch(t_enc)


def test_pre_ln_stack_has_a_final_norm_post_ln_has_none() -> None:
    assert Encoder(2, D_MODEL, HEADS, D_FF, norm_first=True).norm is not None
    assert Encoder(2, D_MODEL, HEADS, D_FF, norm_first=False).norm is None
    assert Decoder(2, D_MODEL, HEADS, D_FF, norm_first=True).norm is not None
    assert Decoder(2, D_MODEL, HEADS, D_FF, norm_first=False).norm is None


@pytest.mark.parametrize("stack", [Encoder, Decoder])
@pytest.mark.parametrize("num_layers", [0, -1, 2.0, "2"])
def test_a_stack_refuses_a_number_of_layers_that_is_not_a_positive_integer(stack, num_layers) -> None:
    with pytest.raises(ValueError, match=rf"{stack.__name__}: num_layers must be a positive integer"):
        stack(num_layers, D_MODEL, HEADS, D_FF)
    layers = stack(3, D_MODEL, HEADS, D_FF).layers
    assert len(layers) == 3 and len({id(layer) for layer in layers}) == 3, "three layers, each its own"
    assert not torch.equal(layers[0].self_attn.w_q.weight, layers[1].self_attn.w_q.weight), "each drawn anew"


# --- bad input -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad,match", [
    (torch.randn(5, D_MODEL), r"\(batch, seq, d_model=16\), got \(5, 16\)"),
    (torch.randn(2, 5, D_MODEL + 1), r"got \(2, 5, 17\)"),
    (torch.randn(2, 0, D_MODEL), "empty"),
    (torch.ones(2, 5, D_MODEL, dtype=torch.long), "floating-point"),
])
def test_encoder_rejects_bad_activations(bad: torch.Tensor, match: str) -> None:
    enc = Encoder(1, D_MODEL, HEADS, D_FF)
    with pytest.raises((ValueError, TypeError), match=match):
        enc(bad)


def test_decoder_rejects_mismatched_memory() -> None:
    dec = Decoder(1, D_MODEL, HEADS, D_FF)
    with pytest.raises(ValueError, match="memory"):
        dec(torch.randn(2, 3, D_MODEL), torch.randn(3, 4, D_MODEL))
    with pytest.raises(ValueError, match="memory"):
        dec(torch.randn(2, 3, D_MODEL), torch.randn(2, 4, D_MODEL + 2))


def test_layers_reject_a_mask_of_the_wrong_shape_or_type() -> None:
    layer = EncoderLayer(D_MODEL, HEADS, D_FF)
    with pytest.raises(ValueError, match="mask"):
        layer(torch.randn(2, 5, D_MODEL), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="boolean"):
        layer(torch.randn(2, 5, D_MODEL), torch.ones(5, 5))


@pytest.mark.parametrize("kwargs,match", [
    (dict(d_model=10, num_heads=4, d_ff=8), "divisible"),
    (dict(d_model=8, num_heads=2, d_ff=0), "d_ff"),
    (dict(d_model=8, num_heads=2, d_ff=8, dropout=1.0), "dropout"),
])
def test_layers_reject_bad_sizes(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        EncoderLayer(**kwargs)
    with pytest.raises(ValueError, match=match):
        DecoderLayer(**kwargs)


# --- mean_pool ---------------------------------------------------------------------------------------------

def test_mean_pool_ignores_padding() -> None:
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(3, 6, 4, generator=gen)
    lengths = torch.tensor([6, 3, 1])
    mask = torch.arange(6)[None, :] < lengths[:, None]
    expected = torch.stack([x[b, : int(n)].mean(0) for b, n in enumerate(lengths)])
    from course_lib.models.layers import mean_pool
    torch.testing.assert_close(mean_pool(x, mask), expected)
    # changing padded positions changes nothing
    torch.testing.assert_close(mean_pool(x.masked_fill(~mask[..., None], 1e4), mask), expected)


def test_mean_pool_rejects_bad_masks() -> None:
    from course_lib.models.layers import mean_pool
    x = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match=r"\(batch, seq\) = \(2, 3\)"):
        mean_pool(x, torch.ones(2, 1, 1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="no real token"):
        mean_pool(x, torch.tensor([[True, False, False], [False, False, False]]))


# --- the one way to copy PyTorch's attention weights ---------------------------------------------------

@pytest.mark.parametrize("bias", [True, False])
def test_attention_load_from_torch_equals_pytorch(bias: bool) -> None:
    gen = torch.Generator().manual_seed(5)
    theirs = nn.MultiheadAttention(D_MODEL, HEADS, bias=bias, batch_first=True).eval()
    _randomise(theirs, gen)
    ours = MultiHeadAttention(D_MODEL, HEADS, bias=bias)
    assert ours.load_from_torch(theirs) is ours
    q, kv = torch.randn(2, 3, D_MODEL, generator=gen), torch.randn(2, 6, D_MODEL, generator=gen)
    out, weights = ours.eval()(q, kv, kv, need_weights=True)
    expected, expected_weights = theirs(q, kv, kv, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=ATOL)
    torch.testing.assert_close(weights, expected_weights, atol=ATOL, rtol=ATOL)
    built = MultiHeadAttention.from_torch(theirs)  # the constructor form goes through load_from_torch
    torch.testing.assert_close(built(q, kv, kv)[0], expected, atol=ATOL, rtol=ATOL)


def test_attention_load_from_torch_refuses_what_would_not_give_equal_numbers() -> None:
    with pytest.raises(ValueError, match=r"num_heads are \(16, 4\) here but \(16, 2\)"):
        MultiHeadAttention(D_MODEL, HEADS).load_from_torch(nn.MultiheadAttention(D_MODEL, 2))
    with pytest.raises(ValueError, match="bias is False here but True"):
        MultiHeadAttention(D_MODEL, HEADS, bias=False).load_from_torch(nn.MultiheadAttention(D_MODEL, HEADS))
    with pytest.raises(ValueError, match="kdim/vdim"):
        MultiHeadAttention(D_MODEL, HEADS).load_from_torch(nn.MultiheadAttention(D_MODEL, HEADS, kdim=8, vdim=8))
    with pytest.raises(TypeError, match="must be an nn.MultiheadAttention"):
        MultiHeadAttention(D_MODEL, HEADS).load_from_torch(nn.Linear(D_MODEL, D_MODEL))


def test_one_place_in_course_lib_reads_pytorchs_stacked_projection() -> None:
    """Every copy from nn.MultiheadAttention goes through MultiHeadAttention.load_from_torch."""
    package = Path(__file__).resolve().parents[2] / "course_lib"
    readers = [str(p.relative_to(package)) for p in package.rglob("*.py")
               for _ in re.finditer(r"\.in_proj_weight\.chunk\(", p.read_text())]
    assert readers == ["models/attention.py"], readers


# --- the one initialisation of the language models -------------------------------------------------------------

def _gpt2_init_as_it_was(model: nn.Module, num_layers: int) -> None:
    """GPT's own loop before ``normal_init_`` served it (the reference the helper must equal, draw for draw)."""
    for name, param in model.named_parameters():
        if param.dim() >= 2:
            std = 0.02
            if name.endswith("self_attn.w_o.weight") or name.endswith("feed_forward.linear2.weight"):
                std = 0.02 / math.sqrt(2 * num_layers)
            nn.init.normal_(param, mean=0.0, std=std)
        elif name.endswith("bias"):
            nn.init.zeros_(param)


def _bert_init_as_it_was(model: nn.Module) -> None:
    """BERT's own loop before ``normal_init_`` served it (GPT's without the residual scaling)."""
    for name, param in model.named_parameters():
        if param.dim() >= 2:
            nn.init.normal_(param, mean=0.0, std=0.02)
        elif name.endswith("bias"):
            nn.init.zeros_(param)


def _llama_init_as_it_was(model: nn.Module) -> None:
    """Llama's own loop before ``normal_init_`` served it (biases tested first, no residual scaling)."""
    for name, param in model.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(param)
        elif param.dim() >= 2:
            nn.init.normal_(param, mean=0.0, std=0.02)


@pytest.mark.parametrize("which", ["gpt", "bert", "llama"])
def test_normal_init_gives_each_model_the_weights_its_own_loop_gave(which: str) -> None:
    """One seed, the same weights bit for bit, before (the model's own loop) and after (``normal_init_``)."""
    from course_lib.models.bert import BERT
    from course_lib.models.gpt import GPT
    from course_lib.models.llama import Llama

    torch.manual_seed(1)
    if which == "gpt":
        model = GPT(vocab_size=30, d_model=16, num_heads=2, num_layers=3, max_len=12)
        old = lambda m: _gpt2_init_as_it_was(m, 3)  # noqa: E731
    elif which == "bert":
        model = BERT(30, d_model=16, num_heads=2, num_layers=2, max_len=12, num_classes=3)
        old = _bert_init_as_it_was
    else:
        model = Llama(vocab_size=30, d_model=16, num_heads=4, num_kv_heads=2, num_layers=2, attention_bias=True)
        old = _llama_init_as_it_was
    state = torch.random.get_rng_state()
    untouched = {name: p.clone() for name, p in model.named_parameters()}
    old(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.random.set_rng_state(state)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not torch.equal(p, untouched[name]):
                p.fill_(7.0)  # what the old loop wrote survives only if the helper writes it again
    model._reset_parameters()
    after = model.state_dict()
    assert before.keys() == after.keys()
    different = [k for k in before if not torch.equal(before[k], after[k])]
    assert not different, f"normal_init_ changed {different}"
    assert any(k.endswith("bias") for k in before) and all(before[k].abs().sum() == 0 for k in before
                                                           if k.endswith(".bias"))


def test_normal_init_scales_only_the_residual_writes() -> None:
    torch.manual_seed(0)
    model = nn.ModuleDict({"w_o": nn.Linear(256, 256), "other": nn.Linear(256, 256), "norm": nn.LayerNorm(256)})
    normal_init_(model, 0.02, residual=("w_o.weight",), num_layers=8)
    assert model["w_o"].weight.std().item() == pytest.approx(0.02 / 4, rel=0.02)  # 1 / sqrt(2 * 8) = 1 / 4
    assert model["other"].weight.std().item() == pytest.approx(0.02, rel=0.02)
    assert torch.equal(model["norm"].weight, torch.ones(256)) and not model["other"].bias.any()
    with pytest.raises(ValueError, match="std > 0"):
        normal_init_(model, 0.0)
