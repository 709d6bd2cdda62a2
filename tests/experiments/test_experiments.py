"""course_lib.experiments.paper: Table 3's variants, checkpoint averaging and the FLOP count of training."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from course_lib.experiments.paper import (
    P100_FLOPS,
    PAPER_TABLE3,
    PAPER_TRAINING,
    average_checkpoints,
    training_flops,
    transformer_forward_macs,
    with_key_size,
    with_learned_positions,
)
from course_lib.models.attention import MultiHeadAttention
from course_lib.models.positional import LearnedPositionalEmbedding
from course_lib.models.transformer import Transformer


def _small(**kwargs) -> Transformer:
    torch.manual_seed(0)
    return Transformer(50, 60, d_model=32, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=64,
                       dropout=0.0, **kwargs).eval()


@pytest.mark.parametrize("src_len, tgt_len", [(7, 5), (4, 9)])
def test_forward_macs_equal_pytorchs_flop_counter(src_len, tgt_len) -> None:
    """PyTorch's FlopCounterMode (2 FLOPs per multiply-add) on the course's Transformer, attention computed
    by the math backend so that its matrix products are counted too."""
    model, batch = _small(), 3
    src, tgt_in = torch.randint(4, 50, (batch, src_len)), torch.randint(4, 60, (batch, tgt_len))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(src, tgt_in)
    assert counter.get_total_flops() == 2 * batch * transformer_forward_macs(src_len, tgt_len, 32, 64, 2, 60)


def test_paper_figures_are_time_times_gpus_times_p100_throughput() -> None:
    """Table 2's footnote: FLOPs = training time x number of GPUs x 9.5 TFLOPS, which gives its 3.3e18 and 2.3e19."""
    for run in PAPER_TRAINING.values():
        estimate = run["hours"] * 3600 * run["gpus"] * P100_FLOPS
        assert estimate == pytest.approx(run["table2_flops"], rel=0.02)


def test_training_flops_is_six_times_the_forward_macs() -> None:
    assert training_flops(1000, 10, 5) == 6 * 1000 * 10 * 5


def test_average_checkpoints() -> None:
    gen = torch.Generator().manual_seed(0)
    sds = [{"w": torch.randn(3, 2, generator=gen), "n": torch.tensor(i)} for i in range(4)]
    before = [{k: v.clone() for k, v in sd.items()} for sd in sds]
    avg = average_checkpoints(sds)
    torch.testing.assert_close(avg["w"], torch.stack([sd["w"] for sd in sds]).mean(0))
    assert avg["n"].dtype == torch.int64 and int(avg["n"]) == 3
    for sd, old in zip(sds, before, strict=True):
        assert torch.equal(sd["w"], old["w"])  # the inputs are untouched


def test_averaged_model_loads_and_equals_the_mean_of_two_models() -> None:
    a = _small()
    torch.manual_seed(1)
    b = Transformer(50, 60, d_model=32, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=64,
                    dropout=0.0).eval()
    avg = average_checkpoints([a.state_dict(), b.state_dict()])
    merged = _small()
    merged.load_state_dict(avg)
    w_a, w_b = a.encoder.layers[0].self_attn.w_q.weight, b.encoder.layers[0].self_attn.w_q.weight
    torch.testing.assert_close(merged.encoder.layers[0].self_attn.w_q.weight, (w_a + w_b) / 2)


@pytest.mark.parametrize("bad, message", [([], "is empty"), ([{"w": torch.zeros(2)}, {"v": torch.zeros(2)}], "keys"),
                                          ([{"w": torch.zeros(2)}, {"w": torch.zeros(3)}], "shape")])
def test_average_checkpoints_rejects_mismatches(bad, message) -> None:
    with pytest.raises(ValueError, match=message):
        average_checkpoints(bad)


def test_with_key_size_changes_every_attention_and_the_parameter_count() -> None:
    model = with_key_size(_small(), d_k=2)
    attentions = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert len(attentions) == 6  # 2 encoder self-attentions, 2 decoder self- and 2 cross-attentions
    assert all(m.d_k == 2 for m in attentions)
    # W_q and W_k shrink from (32, 32) to (4 * 2, 32), biases from 32 to 8: 6 attentions x 2 x (24 * 32 + 24)
    removed = sum(p.numel() for p in _small().parameters()) - sum(p.numel() for p in model.parameters())
    assert removed == 6 * 2 * (24 * 33)
    assert model(torch.randint(4, 50, (2, 6)), torch.randint(4, 60, (2, 4))).shape == (2, 4, 60)


def test_with_learned_positions() -> None:
    model = with_learned_positions(_small())
    assert isinstance(model.positional, LearnedPositionalEmbedding)
    assert model(torch.randint(4, 50, (2, 6)), torch.randint(4, 60, (2, 4))).shape == (2, 4, 60)


def test_table3_rows() -> None:
    assert {row.row for row in PAPER_TABLE3} == {"A", "B", "C", "D", "E"}
    assert all(row.paper_ppl > 4 and 23 < row.paper_bleu < 27 for row in PAPER_TABLE3)
