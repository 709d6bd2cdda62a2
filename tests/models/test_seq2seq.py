"""course_lib.models.seq2seq: additive attention (weights, masks, shapes, gradients) and the GRU encoder-decoder."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_lib.data.translation import collate
from course_lib.generation.decoding import greedy_decode
from course_lib.models.masking import padding_mask
from course_lib.models.seq2seq import AdditiveAttention, RNNEncoderDecoder, additive_attention
from course_lib.training.engine import train


def _inputs(batch=2, seq_q=3, seq_k=5, d_q=4, d_k=6, d_v=7, d_att=8, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(batch, seq_q, d_q), (batch, seq_k, d_k), (batch, seq_k, d_v), (d_att, d_q), (d_att, d_k), (d_att,)]
    return [torch.randn(*s, generator=gen, dtype=dtype) for s in shapes]


def test_shapes_and_weights_sum_to_one() -> None:
    context, weights = additive_attention(*_inputs())
    assert context.shape == (2, 3, 7) and weights.shape == (2, 3, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3))
    assert (weights >= 0).all()


def test_against_the_formula_written_per_pair() -> None:
    """e_tj = v^T tanh(W_q q_t + W_k k_j), computed one pair at a time, against the batched reference."""
    q, k, val, w_q, w_k, v = _inputs(dtype=torch.float64)
    context, weights = additive_attention(q, k, val, w_q, w_k, v)
    for b in range(2):
        for t in range(3):
            e = torch.stack([v @ torch.tanh(w_q @ q[b, t] + w_k @ k[b, j]) for j in range(5)])
            alpha = torch.exp(e) / torch.exp(e).sum()
            torch.testing.assert_close(weights[b, t], alpha)
            torch.testing.assert_close(context[b, t], alpha @ val[b])


def test_padding_mask_gives_zero_weight_and_ignores_padded_values() -> None:
    q, k, val, w_q, w_k, v = _inputs()
    mask = torch.tensor([[True, True, True, False, False], [True] * 5]).unsqueeze(1)  # (batch, 1, seq_k)
    context, weights = additive_attention(q, k, val, w_q, w_k, v, mask)
    assert (weights[0, :, 3:] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3))
    changed = val.clone()
    changed[0, 3:] = 1e6  # what sits at padded positions must not matter
    torch.testing.assert_close(additive_attention(q, k, changed, w_q, w_k, v, mask)[0], context)
    # the same as attending over the first three keys only
    short, _ = additive_attention(q[:1], k[:1, :3], val[:1, :3], w_q, w_k, v)
    torch.testing.assert_close(context[:1], short)


def test_fully_masked_row_gives_zeros_not_nan() -> None:
    q, k, val, w_q, w_k, v = _inputs()
    mask = torch.zeros(2, 1, 5, dtype=torch.bool)
    mask[1] = True
    context, weights = additive_attention(q, k, val, w_q, w_k, v, mask)
    assert torch.isfinite(context).all() and (weights[0] == 0).all() and (context[0] == 0).all()


def test_gradcheck() -> None:
    inputs = [x.requires_grad_() for x in _inputs(batch=1, seq_q=2, seq_k=3, d_q=2, d_k=3, d_v=2, d_att=4,
                                                    dtype=torch.float64)]
    mask = torch.tensor([[[True, True, False]]])
    assert torch.autograd.gradcheck(lambda *xs: additive_attention(*xs, mask), inputs)


@pytest.mark.parametrize("bad, message", [
    (dict(query=torch.randn(2, 4)), "query must be a 3-D tensor"),
    (dict(w_q=torch.randn(8, 5)), "w_q must have shape"),
    (dict(mask=torch.ones(2, 5)), "mask must be a bool tensor"),
    (dict(mask=torch.ones(3, 1, 5, dtype=torch.bool)), "mask must broadcast"),
])
def test_wrong_input_names_the_argument(bad, message) -> None:
    names = ["query", "keys", "values", "w_q", "w_k", "v"]
    kwargs = dict(zip(names, _inputs(), strict=True))
    kwargs.update(bad)
    with pytest.raises(ValueError, match=message):
        additive_attention(**kwargs)


def test_module_uses_its_parameters() -> None:
    att = AdditiveAttention(d_query=4, d_key=6, d_att=8)
    q, k, val = _inputs()[:3]
    context, weights = att(q, k, val)
    expected = additive_attention(q, k, val, att.w_q.weight, att.w_k.weight, att.v)
    torch.testing.assert_close(context, expected[0])
    context.sum().backward()
    assert att.v.grad is not None and att.w_q.weight.grad is not None


@pytest.mark.parametrize("attention", [None, "additive"])
def test_padding_of_the_source_changes_nothing(attention) -> None:
    torch.manual_seed(0)
    model = RNNEncoderDecoder(12, 9, d_model=16, attention=attention).eval()
    src, tgt_in = torch.tensor([[5, 6, 7]]), torch.tensor([[1, 4, 5]])
    padded = torch.tensor([[5, 6, 7, 0, 0]])
    torch.testing.assert_close(model(padded, tgt_in), model(src, tgt_in))
    memory = model.encode(padded)
    torch.testing.assert_close(model.decode(tgt_in, memory, padding_mask(padded, 0)), model(src, tgt_in))


def test_without_attention_only_the_last_state_reaches_the_decoder() -> None:
    """The bottleneck: changing earlier encoder states (not the last) changes nothing without attention."""
    torch.manual_seed(0)
    for attention, should_change in ((None, False), ("additive", True)):
        model = RNNEncoderDecoder(12, 9, d_model=16, attention=attention).eval()
        src, tgt_in = torch.tensor([[5, 6, 7]]), torch.tensor([[1, 4, 5]])
        memory = model.encode(src)
        edited = memory.clone()
        edited[:, :2] += 1.0
        changed = not torch.allclose(model.decode(tgt_in, memory), model.decode(tgt_in, edited))
        assert changed == should_change


def test_wrong_model_input_names_the_argument() -> None:
    model = RNNEncoderDecoder(12, 9, d_model=16)
    with pytest.raises(ValueError, match="attention must be None or 'additive'"):
        RNNEncoderDecoder(12, 9, attention="dot")
    with pytest.raises(ValueError, match="src must be"):
        model(torch.randn(2, 3), torch.tensor([[1, 2], [1, 2]]))
    with pytest.raises(ValueError, match="tgt_in holds ids outside"):
        model(torch.tensor([[4, 5]]), torch.tensor([[1, 9]]))


@pytest.mark.parametrize("attention", [None, "additive"])
def test_trains_on_a_tiny_copy_task_and_decodes(attention) -> None:
    """Loss falls on a tiny task (copy a 3-token sequence), and greedy_decode works on the model unchanged."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    examples = []
    for _ in range(64):
        tokens = torch.randint(4, 9, (3,), generator=gen)
        examples.append((tokens, torch.cat([torch.tensor([1]), tokens, torch.tensor([2])])))
    loader = [collate(examples[i:i + 16]) for i in range(0, 64, 16)]
    model = RNNEncoderDecoder(9, 9, d_model=32, attention=attention)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=0)

    history = train(model, loader, 60, optimizer, loss_fn=loss_fn, progress=False)
    assert sum(history.losses[-10:]) / 10 < 0.5 * sum(history.losses[:10]) / 10
    out = greedy_decode(model, loader[0].src, max_len=6)
    right = (out[:, :3] == loader[0].src).all(dim=1).float().mean()
    assert right > 0.5
