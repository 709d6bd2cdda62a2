"""The paper's own experiments at small scale (notebook 13): Table 3's variations, checkpoint averaging, cost.

- :data:`PAPER_TABLE3`: the rows of the paper's Table 3 (model variations on newstest2013) that notebook 13
  repeats in miniature, with the development perplexity and BLEU the paper printed for each.
- :func:`with_key_size` (row B: a smaller attention key size d_k at a fixed number of heads, through
  :class:`~course_lib.models.attention.MultiHeadAttention`'s ``d_k``) and
  :func:`with_learned_positions` (row E: learned positional embeddings instead of sinusoids) change a
  :class:`course_lib.models.transformer.Transformer` in place, since its constructor ties d_k to d_model / h and
  always uses sinusoids. They live in :mod:`course_lib.models.transformer` (the ``course-train`` tasks build
  them too, and training imports nothing from here) and are named here as the table's rows.
- :func:`average_checkpoints`: the element-wise mean of several ``state_dict``\\ s (section 6.1: "we used a
  single model obtained by averaging the last 5 checkpoints"), one entry at a time with
  :func:`average_weights`, the reference of notebook 13's exercise.
- :func:`transformer_forward_macs` and :func:`training_flops`: the cost of training the base and big
  models, from the layer counts of :func:`course_lib.models.complexity.layer_flops`, to set beside the paper's
  Table 2 (3.3e18 and 2.3e19 FLOPs) and its "3.5 days on 8 P100 GPUs".
- :data:`PAPER_TABLE2`: the whole of the paper's Table 2, BLEU on newstest2014 beside the training cost, for
  the Transformer and the earlier models it lists.
- :data:`PAPER_TABLE4` and :data:`PAPER_PARSING`: the paper's Table 4 (English constituency parsing, F1 on
  section 23 of the Wall Street Journal) and the setting of its section 6.3, for notebook 13's parsing task.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from course_lib.models.complexity import layer_flops
from course_lib.models.transformer import with_key_size, with_learned_positions  # Table 3's rows B and E

__all__ = [
    "Table3Row", "PAPER_TABLE3", "PAPER_BASE_DEV", "with_key_size", "with_learned_positions",
    "average_weights", "average_checkpoints", "transformer_forward_macs", "training_flops", "P100_FLOPS",
    "PAPER_TRAINING", "Table2Row", "PAPER_TABLE2", "Table4Row", "PAPER_TABLE4", "PAPER_PARSING",
]


# ---------------------------------------------------------------------------------------------------
# The paper's Table 3
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Table3Row:
    """One row of the paper's Table 3: what changed from the base model, and the paper's dev PPL and BLEU."""

    row: str                        # "A", "B", ...
    label: str                      # "h=1 (d_k=512)"
    changes: Mapping[str, object] = field(default_factory=dict)
    paper_ppl: float = math.nan     # perplexity per word piece on newstest2013 (lower is better)
    paper_bleu: float = math.nan    # BLEU on newstest2013 (higher is better)


#: The base model's development figures in Table 3 (PPL 4.92, BLEU 25.8).
PAPER_BASE_DEV = Table3Row("base", "base", {}, 4.92, 25.8)

#: The rows of Table 3 that notebook 13 repeats (the paper's figures, copied from the table).
PAPER_TABLE3: tuple[Table3Row, ...] = (
    Table3Row("A", "h=1 (d_k=512)", {"num_heads": 1}, 5.29, 24.9),
    Table3Row("A", "h=4 (d_k=128)", {"num_heads": 4}, 5.00, 25.5),
    Table3Row("A", "h=16 (d_k=32)", {"num_heads": 16}, 4.91, 25.8),
    Table3Row("A", "h=32 (d_k=16)", {"num_heads": 32}, 5.01, 25.4),
    Table3Row("B", "d_k=16", {"d_k": 16}, 5.16, 25.1),
    Table3Row("B", "d_k=32", {"d_k": 32}, 5.01, 25.4),
    Table3Row("C", "N=2", {"num_layers": 2}, 6.11, 23.7),
    Table3Row("C", "N=4", {"num_layers": 4}, 5.19, 25.3),
    Table3Row("C", "N=8", {"num_layers": 8}, 4.88, 25.5),
    Table3Row("C", "d_model=256", {"d_model": 256}, 5.75, 24.5),
    Table3Row("C", "d_model=1024", {"d_model": 1024}, 4.66, 26.0),
    Table3Row("C", "d_ff=1024", {"d_ff": 1024}, 5.12, 25.4),
    Table3Row("C", "d_ff=4096", {"d_ff": 4096}, 4.75, 26.2),
    Table3Row("D", "P_drop=0.0", {"dropout": 0.0}, 5.77, 24.6),
    Table3Row("D", "P_drop=0.2", {"dropout": 0.2}, 4.95, 25.5),
    Table3Row("D", "eps_ls=0.0", {"smoothing": 0.0}, 4.67, 25.3),
    Table3Row("D", "eps_ls=0.2", {"smoothing": 0.2}, 5.47, 25.7),
    Table3Row("E", "learned positions", {"positions": "learned"}, 4.92, 25.7),
)


# ---------------------------------------------------------------------------------------------------
# Checkpoint averaging
# ---------------------------------------------------------------------------------------------------

def average_weights(values: Sequence[torch.Tensor]) -> torch.Tensor:
    """One entry of a ``state_dict`` averaged over several checkpoints: the element-wise mean.

    A floating-point tensor is averaged (summed in float64, cast back to its dtype); any other tensor (an
    integer counter such as BatchNorm's ``num_batches_tracked`` is not a weight) is the last checkpoint's,
    copied. The inputs are not modified. The reference of notebook 13's exercise.

    Example:
        >>> average_weights([torch.tensor([0.0, 2.0]), torch.tensor([2.0, 4.0])])
        tensor([1., 3.])
    """
    if len(values) == 0:
        raise ValueError("average_weights: values is empty; give the tensor of at least one checkpoint")
    last = values[-1]
    for i, value in enumerate(values):
        if not isinstance(value, torch.Tensor) or value.shape != last.shape:
            raise ValueError(f"average_weights: checkpoint {i} holds {getattr(value, 'shape', type(value).__name__)}"
                             f", the last holds shape {tuple(last.shape)}; they must be the same parameter")
    if not last.is_floating_point():
        return last.clone()
    total = torch.stack([value.to(torch.float64) for value in values]).sum(dim=0)  # (*shape)
    return (total / len(values)).to(last.dtype)


def average_checkpoints(state_dicts: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of several checkpoints of one model (the paper's section 6.1), with
    :func:`average_weights` for each entry. Every checkpoint must have the same keys and shapes.

    Example:
        >>> a, b = {"w": torch.tensor([0.0, 2.0])}, {"w": torch.tensor([2.0, 4.0])}
        >>> average_checkpoints([a, b])
        {'w': tensor([1., 3.])}
    """
    if len(state_dicts) == 0:
        raise ValueError("average_checkpoints: state_dicts is empty; give at least one checkpoint")
    keys = list(state_dicts[0].keys())
    for i, sd in enumerate(state_dicts):
        if list(sd.keys()) != keys:
            raise ValueError(f"average_checkpoints: checkpoint {i} has keys {sorted(sd)[:5]}..., "
                             f"checkpoint 0 has {sorted(keys)[:5]}...; they must be of the same model")
    averaged = {}
    for key in keys:
        try:
            averaged[key] = average_weights([sd[key] for sd in state_dicts])
        except ValueError as err:
            raise ValueError(f"average_checkpoints: {key!r}: {err}") from None
    return averaged


# ---------------------------------------------------------------------------------------------------
# The training cost of the base and big models
# ---------------------------------------------------------------------------------------------------

#: The P100's single-precision throughput the paper assumed (Table 2's footnote: 9.5 TFLOPS).
P100_FLOPS = 9.5e12

#: What the paper says about its two trainings (section 5.2 and Table 2).
PAPER_TRAINING = {
    "base": {"steps": 100_000, "hours": 12.0, "gpus": 8, "table2_flops": 3.3e18},
    "big": {"steps": 300_000, "hours": 3.5 * 24, "gpus": 8, "table2_flops": 2.3e19},
}


def transformer_forward_macs(src_len: int, tgt_len: int, d_model: int, d_ff: int, num_layers: int,
                             vocab_size: int) -> int:
    """Multiply-adds of one forward pass of the encoder-decoder on one sentence pair.

    From :func:`course_lib.models.complexity.layer_flops` for the self-attention layers (projections 4 n d^2, scores
    and weighted sum 2 n^2 d), plus what that function does not cover: the feed-forward blocks (2 n d d_ff
    each), the decoder's cross-attention (queries and output on the target, keys and values on the source:
    2 m d^2 + 2 n d^2 + 2 m n d) and the pre-softmax projection (m d V). Embedding lookups, softmax,
    LayerNorm and biases are ignored (a few per cent).

    Example:
        >>> transformer_forward_macs(10, 10, d_model=8, d_ff=16, num_layers=1, vocab_size=20)
        19200
    """
    for name, value in (("src_len", src_len), ("tgt_len", tgt_len), ("d_model", d_model), ("d_ff", d_ff),
                        ("num_layers", num_layers), ("vocab_size", vocab_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"transformer_forward_macs: {name} must be a positive integer, got {value!r}")
    n, m, d = src_len, tgt_len, d_model
    encoder_layer = layer_flops("self_attention", n, d) + 2 * n * d * d_ff
    cross_attention = 2 * m * d * d + 2 * n * d * d + 2 * m * n * d
    decoder_layer = layer_flops("self_attention", m, d) + cross_attention + 2 * m * d * d_ff
    return num_layers * (encoder_layer + decoder_layer) + m * d * vocab_size


def training_flops(forward_macs_per_pair: int, pairs_per_step: float, steps: int) -> float:
    """FLOPs of a training run: 2 FLOPs per multiply-add, and a backward pass costing twice the forward
    (gradients with respect to the activations and to the weights: one matrix product each), so
    6 x multiply-adds per sentence pair per step."""
    return 6.0 * forward_macs_per_pair * pairs_per_step * steps


@dataclass(frozen=True)
class Table2Row:
    """One row of the paper's Table 2: BLEU on newstest2014 and the training cost in FLOPs (None: not reported)."""

    model: str
    bleu_en_de: float | None
    bleu_en_fr: float | None
    flops_en_de: float | None
    flops_en_fr: float | None


#: The paper's Table 2 (figures copied from the table): the Transformer against the best earlier models,
#: single models then ensembles. The Transformer's cost is one figure for both language pairs.
PAPER_TABLE2: tuple[Table2Row, ...] = (
    Table2Row("ByteNet", 23.75, None, None, None),
    Table2Row("Deep-Att + PosUnk", None, 39.2, None, 1.0e20),
    Table2Row("GNMT + RL", 24.6, 39.92, 2.3e19, 1.4e20),
    Table2Row("ConvS2S", 25.16, 40.46, 9.6e18, 1.5e20),
    Table2Row("MoE", 26.03, 40.56, 2.0e19, 1.2e20),
    Table2Row("Deep-Att + PosUnk Ensemble", None, 40.4, None, 8.0e20),
    Table2Row("GNMT + RL Ensemble", 26.30, 41.16, 1.8e20, 1.1e21),
    Table2Row("ConvS2S Ensemble", 26.36, 41.29, 7.7e19, 1.2e21),
    Table2Row("Transformer (base model)", 27.3, 38.1, PAPER_TRAINING["base"]["table2_flops"],
              PAPER_TRAINING["base"]["table2_flops"]),
    Table2Row("Transformer (big)", 28.4, 41.8, PAPER_TRAINING["big"]["table2_flops"],
              PAPER_TRAINING["big"]["table2_flops"]),
)


@dataclass(frozen=True)
class Table4Row:
    """One row of the paper's Table 4: a parser, how it was trained, and its F1 on WSJ section 23."""

    parser: str
    training: str   # "WSJ only, discriminative", "semi-supervised", "multi-task" or "generative"
    f1: float


#: The paper's Table 4 (figures copied from the table, in its order): English constituency parsing, labelled
#: F1 on section 23 of the Wall Street Journal part of the Penn Treebank.
PAPER_TABLE4: tuple[Table4Row, ...] = (
    Table4Row("Vinyals & Kaiser et al. (2014)", "WSJ only, discriminative", 88.3),
    Table4Row("Petrov et al. (2006)", "WSJ only, discriminative", 90.4),
    Table4Row("Zhu et al. (2013)", "WSJ only, discriminative", 90.4),
    Table4Row("Dyer et al. (2016)", "WSJ only, discriminative", 91.7),
    Table4Row("Transformer (4 layers)", "WSJ only, discriminative", 91.3),
    Table4Row("Zhu et al. (2013)", "semi-supervised", 91.3),
    Table4Row("Huang & Harper (2009)", "semi-supervised", 91.3),
    Table4Row("McClosky et al. (2006)", "semi-supervised", 92.1),
    Table4Row("Vinyals & Kaiser et al. (2014)", "semi-supervised", 92.1),
    Table4Row("Transformer (4 layers)", "semi-supervised", 92.7),
    Table4Row("Luong et al. (2015)", "multi-task", 93.0),
    Table4Row("Dyer et al. (2016)", "generative", 93.3),
)

#: Section 6.3's setting: the model, the data, and the decoding the paper used for Table 4.
PAPER_PARSING: Mapping[str, object] = {
    "num_layers": 4, "d_model": 1024,
    "wsj_sentences": 40_000, "semi_supervised_sentences": 17_000_000,
    "vocab_wsj": 16_000, "vocab_semi_supervised": 32_000,
    "beam_size": 21, "length_penalty": 0.3, "max_output": "input length + 300",
}
