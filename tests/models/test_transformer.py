"""course_lib.models.transformer: equal to nn.Transformer with copied weights, the paper's section 3.4 (tied
embeddings, sqrt(d_model) scale), Table 3's parameter counts, masks, and clear errors on bad input."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course_lib.models.masking import causal_mask, padding_mask
from course_lib.models.positional import sinusoidal_table
from course_lib.models.transformer import (
    PAPER_BASE,
    PAPER_BIG,
    Transformer,
    count_parameters,
    transformer_parameter_count,
)

SMALL = dict(d_model=32, num_heads=4, num_encoder_layers=2, num_decoder_layers=3, d_ff=48, dropout=0.0, max_len=20)
ATOL = 1e-5


def _batch(gen: torch.Generator, vocab: int, batch: int, seq: int, lengths: list[int]) -> torch.Tensor:
    tokens = torch.randint(1, vocab, (batch, seq), generator=gen)
    for b, n in enumerate(lengths):
        tokens[b, n:] = 0
    return tokens


def _reference_logits(model: Transformer, torch_tf: nn.Transformer, src: torch.Tensor, tgt_in: torch.Tensor):
    """Embeddings (ours, copied nowhere: they are the same module) -> nn.Transformer -> our projection."""
    scale = math.sqrt(model.d_model)
    pe = sinusoidal_table(64, model.d_model)
    x = model.src_embed(src) * scale + pe[: src.shape[1]]
    y = model.tgt_embed(tgt_in) * scale + pe[: tgt_in.shape[1]]
    out = torch_tf(x, y, tgt_mask=~causal_mask(tgt_in.shape[1]), src_key_padding_mask=src == 0,
                   tgt_key_padding_mask=tgt_in == 0, memory_key_padding_mask=src == 0)
    return out @ model.generator.weight.T


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_transformer_equals_nn_transformer(norm_first: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    torch_tf = nn.Transformer(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=3,
                              dim_feedforward=48, dropout=0.0, batch_first=True, norm_first=norm_first)
    if not norm_first:  # the paper's post-LN has no final LayerNorm; nn.Transformer always adds one
        torch_tf.encoder.norm = None
        torch_tf.decoder.norm = None
    with torch.no_grad():  # random LayerNorm gains and biases too, so that no copy mistake hides
        for p in torch_tf.parameters():
            if p.dim() == 1:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3 + 1.0)
    model = Transformer(30, 25, norm_first=norm_first, **SMALL).load_from_torch(torch_tf).eval()
    torch_tf.eval()
    src = _batch(gen, 30, 3, 9, [9, 6, 2])
    tgt_in = _batch(gen, 25, 3, 7, [7, 5, 1])
    got = model(src, tgt_in)
    expected = _reference_logits(model, torch_tf, src, tgt_in)
    assert got.shape == (3, 7, 25)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=1e-5)
    # and the two halves on their own
    memory = model.encode(src)
    torch.testing.assert_close(model.decode(tgt_in, memory, padding_mask(src, 0)), got, atol=ATOL, rtol=1e-5)


def test_padding_in_the_source_changes_nothing_at_real_positions() -> None:
    gen = torch.Generator().manual_seed(1)
    model = Transformer(20, 20, **SMALL).eval()
    src = _batch(gen, 20, 1, 5, [5])
    tgt_in = _batch(gen, 20, 1, 4, [4])
    padded = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(src, tgt_in), model(padded, tgt_in), atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(model.encode(src), model.encode(padded)[:, :5], atol=ATOL, rtol=1e-5)


def test_decoder_is_causal_end_to_end() -> None:
    gen = torch.Generator().manual_seed(2)
    model = Transformer(20, 20, **SMALL).eval()
    src, tgt_in = _batch(gen, 20, 2, 6, [6, 6]), _batch(gen, 20, 2, 5, [5, 5])
    changed = tgt_in.clone()
    changed[:, 3] = (changed[:, 3] % 19) + 1
    a, b = model(src, tgt_in), model(src, changed)
    torch.testing.assert_close(a[:, :3], b[:, :3], atol=ATOL, rtol=1e-5)
    assert not torch.allclose(a[:, 3:], b[:, 3:], atol=1e-4)


def test_tied_embeddings_are_one_tensor_and_scaled_by_sqrt_d_model() -> None:
    model = Transformer(20, 20, tie_embeddings=True, share_src_tgt_embeddings=True, **SMALL).eval()
    assert model.generator.weight is model.tgt_embed.weight is model.src_embed.weight
    untied = Transformer(20, 20, tie_embeddings=False, **SMALL)
    assert untied.generator.weight is not untied.tgt_embed.weight
    assert count_parameters(untied) - count_parameters(model) == 2 * 20 * 32
    # the embedding that enters the encoder is E[token] * sqrt(d_model) + PE[pos]
    seen = {}
    model.encoder.register_forward_pre_hook(lambda mod, args: seen.setdefault("x", args[0]))
    src = torch.tensor([[3, 4, 5]])
    model.encode(src)
    expected = model.src_embed.weight[src] * math.sqrt(32) + sinusoidal_table(3, 32)
    torch.testing.assert_close(seen["x"], expected)
    # a gradient step on the output projection moves the embedding (they are one matrix)
    before = model.tgt_embed.weight.detach().clone()
    model.train()
    logits = model(src, torch.tensor([[1, 6]]))
    nn.functional.cross_entropy(logits.reshape(-1, 20), torch.tensor([6, 2])).backward()
    with torch.no_grad():
        model.generator.weight -= 0.1 * model.generator.weight.grad
    assert not torch.equal(before, model.tgt_embed.weight)


def test_pad_embedding_is_zero_and_initial_logits_are_moderate() -> None:
    torch.manual_seed(0)
    model = Transformer(100, 100, **SMALL).eval()
    assert model.src_embed.weight[0].abs().max() == 0
    # N(0, 1/d_model) embeddings: after the sqrt(d_model) scale each coordinate has variance about 1
    scaled = model.src_embed.weight.detach()[1:] * model.embed_scale
    assert 0.8 < float(scaled.var()) < 1.2
    logits = model(torch.randint(1, 100, (4, 8)), torch.randint(1, 100, (4, 6)))
    assert 0.3 < float(logits.std()) < 3.0


def test_cross_attention_weights_one_per_decoder_layer() -> None:
    gen = torch.Generator().manual_seed(3)
    model = Transformer(20, 20, **SMALL).eval()
    src, tgt_in = _batch(gen, 20, 2, 6, [6, 4]), _batch(gen, 20, 2, 5, [5, 3])
    weights = model.cross_attention_weights(src, tgt_in)
    assert len(weights) == SMALL["num_decoder_layers"]
    for w in weights:
        assert w.shape == (2, 4, 5, 6)
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 5), atol=1e-5, rtol=0)
        assert w[1, ..., 4:].abs().max() == 0  # padded source positions get no attention


# --- Table 3 ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("config", [PAPER_BASE, PAPER_BIG], ids=["base", "big"])
def test_paper_configurations_match_table_3(config) -> None:
    with torch.device("meta"):  # no memory: parameters have shapes but no storage
        model = Transformer(37000, 37000, share_src_tgt_embeddings=True, tie_embeddings=True, **config.kwargs())
    counted = count_parameters(model)
    assert counted == transformer_parameter_count(37000, config.d_model, config.num_heads, config.num_layers,
                                                  config.d_ff, shared_embeddings=1)
    # within 3% of the paper's rounded count (65M, 213M): see notebook 06 for the remaining difference
    assert abs(counted / 1e6 - config.paper_params) / config.paper_params < 0.03, counted


def test_analytic_count_matches_a_real_small_model() -> None:
    model = Transformer(50, 50, share_src_tgt_embeddings=False, tie_embeddings=True, d_model=16, num_heads=2,
                        num_encoder_layers=2, num_decoder_layers=2, d_ff=24, norm_first=True)
    assert count_parameters(model) == transformer_parameter_count(50, 16, 2, 2, 24, shared_embeddings=2,
                                                                  final_norms=True)


# --- bad input -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("src,match", [
    (torch.ones(1, 21, dtype=torch.long), "max_len=20"),
    (torch.tensor([[3, 30]]), "token id 30"),
    (torch.tensor([[3, -1]]), "token id -1"),
    (torch.ones(1, 0, dtype=torch.long), "length 0"),  # batch 0 is accepted: tests/models/test_bad_inputs.py
    (torch.ones(4, dtype=torch.long), r"\(batch, seq\).*unsqueeze"),
    (torch.ones(1, 2, 3, dtype=torch.long), r"\(batch, seq\), got \(1, 2, 3\)"),
    (torch.ones(1, 4), "integer"),
])
def test_bad_source_gets_a_clear_error(src: torch.Tensor, match: str) -> None:
    model = Transformer(30, 25, **SMALL)
    with pytest.raises((ValueError, TypeError), match=match):
        model(src, torch.tensor([[1, 2]]))
    with pytest.raises((ValueError, TypeError), match=match):
        model.encode(src)


def test_bad_target_gets_a_clear_error() -> None:
    model = Transformer(30, 25, **SMALL)
    src = torch.tensor([[3, 4]])
    with pytest.raises(ValueError, match="tgt_in contains token id 25"):
        model(src, torch.tensor([[1, 25]]))
    with pytest.raises(ValueError, match="tgt_in has 21 positions"):
        model(src, torch.ones(1, 21, dtype=torch.long))
    with pytest.raises(ValueError, match="memory must have shape"):
        model.decode(torch.tensor([[1, 2]]), torch.randn(2, 3, 32))


def test_bad_construction_gets_a_clear_error() -> None:
    with pytest.raises(ValueError, match="joint vocabulary"):
        Transformer(30, 25, share_src_tgt_embeddings=True, **SMALL)
    with pytest.raises(ValueError, match="pad_id"):
        Transformer(30, 25, pad_id=25, **SMALL)
    with pytest.raises(ValueError, match="divisible"):
        Transformer(30, 25, **{**SMALL, "num_heads": 5})


# --- shift_right -------------------------------------------------------------------------------------------

def test_shift_right_agrees_with_the_batches_of_course_lib_text() -> None:
    """collate (course_lib.data.translation, written independently) builds tgt_in from <bos> y <eos>; shift_right
    builds it from tgt_out: the two must agree."""
    from course_lib.data.translation import collate
    from course_lib.models.transformer import shift_right

    examples = [(torch.tensor([7, 8]), torch.tensor([1, 5, 6, 9, 2])),
                (torch.tensor([9]), torch.tensor([1, 5, 2])),
                (torch.tensor([4, 4, 4]), torch.tensor([1, 2]))]
    batch = collate(examples, pad_id=0, eos_id=2)
    assert torch.equal(shift_right(batch.tgt_out, bos_id=1, eos_id=2, pad_id=0), batch.tgt_in)


def test_shift_right_rejects_bad_input() -> None:
    from course_lib.models.transformer import shift_right

    with pytest.raises(ValueError, match="tgt_out"):
        shift_right(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="tgt_out"):
        shift_right(torch.ones(2, 0, dtype=torch.long))
