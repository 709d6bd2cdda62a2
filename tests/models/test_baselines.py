"""course_lib.models.baselines and course_lib.models.complexity: notebook 09's comparison layers and Table 1.

The two analytic functions are verified against things they do not compute themselves:
- ``max_path_length``: the smallest stack of real layers (causal ``Conv1dLayer``s, dilated ones, banded
  attention) through which the last output's gradient reaches the first input;
- ``layer_flops``: PyTorch's own ``FlopCounterMode`` counting the matrix products of an ``nn.LSTMCell``
  loop, an ``nn.Conv1d`` and the paper's attention formula.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from course_lib.models.baselines import Conv1dLayer, LSTMClassifier, LSTMSeq2Seq
from course_lib.models.complexity import LAYER_KINDS, layer_flops, max_path_length


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """These models are tiny: one thread is faster than two fighting over a shared machine."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


# --- max_path_length ---------------------------------------------------------------------------------


def _reaches(layers: list, n: int, d: int = 2) -> bool:
    """True when the last output of ``layers`` (applied in turn) has a gradient w.r.t. the first input."""
    x = torch.randn(1, n, d, dtype=torch.float64, requires_grad=True)
    h = x
    for layer in layers:
        h = layer(h)
    h[0, -1].sum().backward()
    return bool(x.grad[0, 0].abs().sum() > 0)


def _smallest_stack(make_layer, n: int) -> int:
    """Fewest layers (made by ``make_layer(i)``) whose stack connects position 0 to position n-1."""
    torch.manual_seed(0)
    for depth in range(0, n + 1):
        if _reaches([make_layer(i) for i in range(depth)], n):
            return depth
    raise AssertionError("never connected")


def _causal_conv(k: int, dilation: int) -> nn.Module:
    layer = Conv1dLayer(d_model=2, kernel_size=k, dilation=dilation, causal=True).double()
    with torch.no_grad():
        layer.conv.weight.fill_(1.0)  # no accidental zero weights: connectivity only
    return layer


def _banded_attention(n: int, r: int):
    positions = torch.arange(n)
    band = (positions[:, None] - positions[None, :]).abs() <= r  # (n, n): True = may attend

    def attend(h: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(h, h, h, attn_mask=band)

    return attend


@pytest.mark.parametrize("n,k", [(1, 3), (2, 3), (5, 2), (9, 2), (9, 3), (10, 3), (17, 3), (25, 5), (26, 5),
                                 (27, 3), (28, 3)])
def test_convolution_path_length_matches_a_real_causal_stack(n: int, k: int) -> None:
    assert max_path_length("convolution", n, k=k) == _smallest_stack(lambda i: _causal_conv(k, 1), n)
    assert max_path_length("dilated_convolution", n, k=k) == _smallest_stack(lambda i: _causal_conv(k, k ** i), n)


@pytest.mark.parametrize("n", [1, 2, 6, 13])
@pytest.mark.parametrize("r", [1, 2, 4])
def test_restricted_attention_path_length_matches_a_banded_stack(n: int, r: int) -> None:
    assert max_path_length("restricted_self_attention", n, r=r) == _smallest_stack(
        lambda i: _banded_attention(n, r), n)


def test_self_attention_and_recurrent_path_lengths() -> None:
    assert max_path_length("self_attention", 1000) == 1 and max_path_length("self_attention", 1) == 0
    assert _smallest_stack(lambda i: _banded_attention(12, 11), 12) == 1  # full attention: one layer
    assert max_path_length("recurrent", 1000) == 999
    # an LSTM's last output depends on the first input through n-1 recurrent steps: unroll and count them
    cell, n = nn.LSTMCell(2, 2), 6
    x = torch.randn(n, 1, 2, requires_grad=True)
    h = c = torch.zeros(1, 2)
    reached = []
    for t in range(n):
        h, c = cell(x[t], (h, c))
        reached.append(torch.autograd.grad(h.sum(), x, retain_graph=True)[0][0].abs().sum() > 0)
    assert all(reached) and max_path_length("recurrent", n) == n - 1


def test_dilated_path_length_is_exact_at_powers_where_math_log_rounds_up() -> None:
    assert math.ceil(math.log(125) / math.log(5)) == 4  # the floating-point trap the reference avoids
    assert max_path_length("dilated_convolution", 125, k=5) == 3
    assert max_path_length("dilated_convolution", 126, k=5) == 4
    assert max_path_length("dilated_convolution", 3 ** 10, k=3) == 10


@pytest.mark.parametrize("bad,name", [(dict(layer="lstm", n=3), "layer"), (dict(layer="recurrent", n=0), "n"),
                                      (dict(layer="recurrent", n=2.5), "n"),
                                      (dict(layer="convolution", n=4, k=1), "k")])
def test_path_length_bad_input_names_the_argument(bad, name) -> None:
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        max_path_length(**bad)


# --- layer_flops ---------------------------------------------------------------------------------------


def _counted_macs(fn) -> int:
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        fn()
    return counter.get_total_flops() // 2  # FlopCounterMode counts a multiply-add as 2 FLOPs


@pytest.mark.parametrize("n,d", [(10, 8), (7, 16), (32, 4)])
def test_layer_flops_match_pytorchs_flop_counter(n: int, d: int) -> None:
    x = torch.randn(1, n, d)
    cell = nn.LSTMCell(d, d, bias=False)

    def lstm() -> None:
        h = c = torch.zeros(1, d)
        for t in range(n):
            h, c = cell(x[:, t], (h, c))

    assert layer_flops("recurrent", n, d) == _counted_macs(lstm)

    for k in (1, 3, 5):
        conv = nn.Conv1d(d, d, k, padding=k // 2, bias=False)
        assert layer_flops("convolution", n, d, k=k) == _counted_macs(lambda conv=conv: conv(x.transpose(1, 2)))

    w_q, w_k, w_v, w_o = (nn.Linear(d, d, bias=False) for _ in range(4))

    def attention() -> None:  # the paper's formula, written out with matrix products
        q, k_, v = w_q(x), w_k(x), w_v(x)
        weights = torch.softmax(q @ k_.transpose(-2, -1) / math.sqrt(d), dim=-1)
        w_o(weights @ v)

    assert layer_flops("self_attention", n, d) == _counted_macs(attention)


def test_layer_flops_crossover_is_at_n_equal_to_the_papers_d() -> None:
    # the paper: self-attention is faster than recurrence when n < d. With the exact constants the
    # attention-specific term 2 n^2 d stays below an LSTM's 8 n d^2 - 4 n d^2 = 4 n d^2 for n < 2d.
    d = 64
    assert layer_flops("self_attention", 2 * d - 1, d) < layer_flops("recurrent", 2 * d - 1, d)
    assert layer_flops("self_attention", 2 * d + 1, d) > layer_flops("recurrent", 2 * d + 1, d)
    assert layer_flops("restricted_self_attention", 10_000, d, r=4) < layer_flops("self_attention", 10_000, d)


def test_every_layer_kind_is_handled() -> None:
    for kind in LAYER_KINDS:
        assert layer_flops(kind, 16, 8) > 0 and max_path_length(kind, 16) >= 1


# --- the comparison modules ------------------------------------------------------------------------


def test_conv1d_layer_equals_functional_conv_with_same_padding() -> None:
    torch.manual_seed(0)
    layer = Conv1dLayer(d_model=6, kernel_size=5)
    x = torch.randn(3, 11, 6)
    expected = F.conv1d(x.transpose(1, 2), layer.conv.weight, layer.conv.bias, padding="same").transpose(1, 2)
    torch.testing.assert_close(layer(x), expected)


def test_causal_conv_does_not_see_the_future() -> None:
    torch.manual_seed(0)
    layer = Conv1dLayer(d_model=4, kernel_size=3, dilation=2, causal=True)
    x = torch.randn(2, 9, 4)
    changed = x.clone()
    changed[:, 5:] += 1.0
    out, out_changed = layer(x), layer(changed)
    assert out.shape == (2, 9, 4)
    torch.testing.assert_close(out[:, :5], out_changed[:, :5])
    assert not torch.allclose(out[:, 5:], out_changed[:, 5:])


def test_conv1d_layer_rejects_wrong_width() -> None:
    with pytest.raises(ValueError, match=r"\(batch, seq, 4\), got \(2, 3, 5\)"):
        Conv1dLayer(4)(torch.randn(2, 3, 5))


def test_lstm_classifier_reads_the_last_position_of_nn_lstm() -> None:
    torch.manual_seed(0)
    model = LSTMClassifier(vocab_size=10, d_model=8, num_classes=3)
    tokens = torch.randint(0, 10, (4, 6))
    outputs, _ = model.lstm(model.embedding(tokens))
    torch.testing.assert_close(model(tokens), model.head(outputs[:, -1]))
    # an independent unroll with nn.LSTMCell and the same weights gives the same prediction
    cell = nn.LSTMCell(8, 8)
    cell.weight_ih.data, cell.weight_hh.data = model.lstm.weight_ih_l0.data, model.lstm.weight_hh_l0.data
    cell.bias_ih.data, cell.bias_hh.data = model.lstm.bias_ih_l0.data, model.lstm.bias_hh_l0.data
    h = c = torch.zeros(4, 8)
    for t in range(6):
        h, c = cell(model.embedding(tokens[:, t]), (h, c))
    torch.testing.assert_close(model(tokens), model.head(h))


def test_lstm_classifier_learns_to_recall_the_first_token() -> None:
    torch.manual_seed(0)
    model = LSTMClassifier(vocab_size=5, d_model=16, num_classes=5)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    tokens = torch.randint(0, 5, (64, 5))
    for _ in range(80):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(tokens), tokens[:, 0])
        loss.backward()
        optimizer.step()
    assert (model(tokens).argmax(-1) == tokens[:, 0]).float().mean() > 0.95


@pytest.mark.parametrize("bad", [torch.zeros(3, dtype=torch.long), torch.zeros(2, 3),
                                 torch.full((2, 3), 10), torch.zeros(2, 0, dtype=torch.long)])
def test_lstm_classifier_rejects_bad_tokens(bad) -> None:
    with pytest.raises(ValueError, match="tokens"):
        LSTMClassifier(vocab_size=10, d_model=4, num_classes=2)(bad)


def test_seq2seq_decoder_is_causal_and_depends_on_the_source() -> None:
    torch.manual_seed(0)
    model = LSTMSeq2Seq(src_vocab_size=12, tgt_vocab_size=9, d_model=16, num_layers=2).eval()
    src, tgt_in = torch.randint(1, 12, (2, 7)), torch.randint(1, 9, (2, 5))
    logits = model(src, tgt_in)
    assert logits.shape == (2, 5, 9)
    later = tgt_in.clone()
    later[:, 3:] = (later[:, 3:] % 8) + 1
    torch.testing.assert_close(model(src, later)[:, :3], logits[:, :3])
    other_src = src.clone()
    other_src[:, 0] = (other_src[:, 0] % 11) + 1
    assert not torch.allclose(model(other_src, tgt_in), logits)


def test_seq2seq_rejects_mismatched_batches_and_bad_ids() -> None:
    model = LSTMSeq2Seq(src_vocab_size=12, tgt_vocab_size=9, d_model=8)
    with pytest.raises(ValueError, match="batch size"):
        model(torch.ones(2, 3, dtype=torch.long), torch.ones(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="tgt_in holds token ids outside"):
        model(torch.ones(2, 3, dtype=torch.long), torch.full((2, 3), 9))
