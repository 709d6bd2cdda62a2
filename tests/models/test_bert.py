"""The encoder-only model (BERT), its 80/10/10 masking and its loss.

References we did not write: nn.TransformerEncoder (norm_first=True) with a key padding mask and copied
weights, F.cross_entropy with ignore_index, and the binomial spread of the masking's proportions.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.models.bert import BERT, IGNORE_INDEX, mask_tokens, mlm_loss

VOCAB, D_MODEL, HEADS, LAYERS, D_FF, MAX_LEN, PAD, CLS, SEP, MASK = 41, 16, 4, 2, 40, 20, 0, 1, 2, 3


def _randomise(module: nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)


def test_bert_equals_pytorchs_encoder_with_a_padding_mask() -> None:
    gen = torch.Generator().manual_seed(0)
    eps = 1e-6
    layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, 0.0, activation=nn.GELU(), layer_norm_eps=eps,
                                       batch_first=True, norm_first=True)
    stack = nn.TransformerEncoder(layer, LAYERS, norm=nn.LayerNorm(D_MODEL, eps=eps), enable_nested_tensor=False)
    tok_emb, pos_emb = nn.Embedding(VOCAB, D_MODEL), nn.Embedding(MAX_LEN, D_MODEL)
    transform, ln = nn.Linear(D_MODEL, D_MODEL), nn.LayerNorm(D_MODEL, eps=eps)
    pooler, head = nn.Linear(D_MODEL, D_MODEL), nn.Linear(D_MODEL, 3)
    bias = torch.randn(VOCAB, generator=gen)
    for m in (stack, tok_emb, pos_emb, transform, ln, pooler, head):
        _randomise(m, gen)
    ours = BERT(VOCAB, D_MODEL, HEADS, LAYERS, D_FF, MAX_LEN, dropout=0.0, layer_norm_eps=eps, pad_id=PAD,
                num_classes=3)
    ours.encoder.load_from_torch(stack)
    with torch.no_grad():
        ours.token_embedding.weight.copy_(tok_emb.weight)
        ours.positions.embedding.weight.copy_(pos_emb.weight)
        ours.mlm_transform[0].load_state_dict(transform.state_dict())
        ours.mlm_transform[2].load_state_dict(ln.state_dict())
        ours.mlm_bias.copy_(bias)
        ours.head.pooler.load_state_dict(pooler.state_dict())
        ours.head.classifier.load_state_dict(head.state_dict())
    ours.eval(), stack.eval()
    tokens = torch.randint(4, VOCAB, (3, 12), generator=gen)
    tokens[:, 0] = CLS
    tokens[1, 8:] = PAD  # the second sequence is padded
    x = tok_emb(tokens) + pos_emb(torch.arange(12))
    hidden = stack(x, src_key_padding_mask=tokens == PAD)  # PyTorch's convention: True = ignore
    real = tokens != PAD  # padded positions' own outputs are not compared (no one reads them)
    expected_logits = ln(F.gelu(transform(hidden))) @ tok_emb.weight.T + bias  # BERT's MLM head, tied
    torch.testing.assert_close(ours(tokens)[real], expected_logits[real], atol=1e-5, rtol=1e-5)
    expected_classes = head(torch.tanh(pooler(hidden[:, 0])))
    torch.testing.assert_close(ours.classify(tokens), expected_classes, atol=1e-5, rtol=1e-5)


def test_bert_sees_both_directions_and_ignores_padding() -> None:
    gen = torch.Generator().manual_seed(1)
    model = BERT(VOCAB, D_MODEL, HEADS, LAYERS, D_FF, MAX_LEN, dropout=0.0, pad_id=PAD, num_classes=2).eval()
    a = torch.randint(4, VOCAB, (1, 10), generator=gen)
    b = a.clone()
    b[0, 9] = (a[0, 9] + 1 - 4) % (VOCAB - 4) + 4  # change the last token only
    assert not torch.allclose(model(a)[0, 0], model(b)[0, 0])  # position 0 sees the future: no causal mask
    padded = torch.cat([a, torch.full((1, 5), PAD)], dim=1)
    torch.testing.assert_close(model(padded)[:, :10], model(a), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model.classify(padded), model.classify(a), atol=1e-5, rtol=1e-5)


def test_bert_rejects_bad_input_with_the_shape() -> None:
    model = BERT(VOCAB, D_MODEL, HEADS, 1, D_FF, MAX_LEN)
    with pytest.raises(ValueError, match=r"\(batch, seq\)"):
        model(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, MAX_LEN + 1, dtype=torch.long))
    with pytest.raises(ValueError, match="num_classes=0"):
        model.classify(torch.zeros(1, 4, dtype=torch.long))


def test_mlm_head_is_tied_to_the_embedding() -> None:
    model = BERT(VOCAB, D_MODEL, HEADS, 1, D_FF, MAX_LEN, dropout=0.0).eval()
    tokens = torch.randint(4, VOCAB, (2, 6))
    model(tokens).sum().backward()
    assert model.token_embedding.weight.grad is not None
    assert not any(p.shape == (VOCAB, D_MODEL) for n, p in model.named_parameters() if n != "token_embedding.weight")


def test_masking_follows_80_10_10_within_binomial_bounds() -> None:
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(4, VOCAB, (200, 100), generator=gen)
    tokens[:, 0], tokens[:, -1], tokens[::3, 80:-1] = CLS, SEP, PAD
    before = tokens.clone()
    inputs, labels = mask_tokens(tokens, MASK, VOCAB, [PAD, CLS, SEP], generator=gen)
    assert torch.equal(tokens, before)  # the input is not modified
    eligible = ~torch.isin(tokens, torch.tensor([PAD, CLS, SEP]))
    selected = labels != IGNORE_INDEX
    assert not bool((selected & ~eligible).any())  # specials and padding are never selected
    assert torch.equal(labels[selected], tokens[selected])
    assert torch.equal(inputs[~selected], tokens[~selected])  # unselected positions are untouched

    def within(count: int, n: int, p: float) -> bool:  # five standard deviations of a binomial
        return abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p))

    n_eligible, n_selected = int(eligible.sum()), int(selected.sum())
    assert within(n_selected, n_eligible, 0.15)
    masked = int((inputs[selected] == MASK).sum())
    unchanged = int((inputs[selected] == tokens[selected]).sum())
    replaced = n_selected - masked - unchanged
    assert within(masked, n_selected, 0.8) and within(unchanged, n_selected, 0.1 + 0.1 / (VOCAB - 4))
    assert within(replaced, n_selected, 0.1 - 0.1 / (VOCAB - 4))
    random_ids = inputs[selected & (inputs != MASK) & (inputs != tokens)]
    assert not bool(torch.isin(random_ids, torch.tensor([PAD, CLS, SEP, MASK])).any())  # never a special id
    again = mask_tokens(tokens, MASK, VOCAB, [PAD, CLS, SEP], generator=torch.Generator().manual_seed(0))
    first = mask_tokens(tokens, MASK, VOCAB, [PAD, CLS, SEP], generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(again, first, strict=True))  # seeded: reproducible


def test_masking_rejects_impossible_proportions_and_ids() -> None:
    tokens = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="mask_prob"):
        mask_tokens(tokens, MASK, VOCAB, [PAD], mask_prob=0.8, random_prob=0.3)
    with pytest.raises(ValueError, match="special_ids must be ids >= 0"):
        mask_tokens(tokens, MASK, VOCAB, [PAD, -1])  # -1 would silently mark the last id special
    with pytest.raises(ValueError, match="mask_id must be in"):
        mask_tokens(tokens, VOCAB, VOCAB, [PAD])
    with pytest.raises(ValueError, match="every id below vocab_size=4 is special"):
        mask_tokens(tokens, 3, 4, [0, 1, 2])


def test_mlm_loss_scores_selected_positions_only() -> None:
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 5, VOCAB, generator=gen, requires_grad=True)
    labels = torch.full((2, 5), IGNORE_INDEX)
    labels[0, 1], labels[1, 3], labels[1, 4] = 7, 9, 11
    expected = (F.cross_entropy(logits[0, 1], torch.tensor(7)) + F.cross_entropy(logits[1, 3], torch.tensor(9))
                + F.cross_entropy(logits[1, 4], torch.tensor(11))) / 3
    torch.testing.assert_close(mlm_loss(logits, labels), expected)
    none = mlm_loss(logits, torch.full((2, 5), IGNORE_INDEX))
    none.backward()
    assert none.item() == 0.0 and logits.grad is not None  # no NaN, still in the graph
    with pytest.raises(ValueError, match=r"\(batch, seq\)"):
        mlm_loss(logits, labels[:, :4])
