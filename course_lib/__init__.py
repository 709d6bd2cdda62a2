"""course_lib: the reference implementations, checks and grading of the Transformer course.

The models and their building blocks are importable from here, in the notebooks' order::

    from course_lib import MultiHeadAttention, causal_mask, PositionalEncoding, Transformer

Data, training, decoding, metrics and plotting live in submodules, imported where needed (they pull in
heavier libraries): ``course_lib.text``, ``course_lib.training``, ``course_lib.decoding``,
``course_lib.metrics``, ``course_lib.images``, ``course_lib.plotting``, ``course_lib.diagrams`` (the
paper's Figures 1 and 2, drawn from the models), ``course_lib.baselines``,
``course_lib.corpus``, ``course_lib.lm``, ``course_lib.ngram``, ``course_lib.generation``,
``course_lib.experiments``, ``course_lib.ablation`` and ``course_lib.parallel`` (notebook 12's grid, in
several processes).
Exercises: ``course_lib.exercises`` (authoring) and ``course_lib.checks`` (the course's checks);
grading: ``course_lib.grading`` and the ``course-grade`` command.

Public names are stable: ``tests/api_record.json`` records them with their signatures, and a name is
deprecated (with a warning naming its replacement, see ``course_lib._deprecation``) before it is removed.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .attention import MultiHeadAttention, fused_attention, merge_heads, scaled_dot_product_attention, split_heads
from .basics import stable_softmax
from .bert import BERT
from .gpt import GPT
from .layers import Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward, mean_pool
from .masking import (
    causal_mask,
    decoder_mask,
    from_additive_mask,
    from_key_padding_mask,
    from_tf_mask,
    padding_mask,
    to_additive_mask,
    to_key_padding_mask,
    to_tf_mask,
)
from .positional import LearnedPositionalEmbedding, PositionalEncoding, offset_matrix, sinusoidal_table
from .runtime import get_device, set_seed, steps
from .transformer import PAPER_BASE, PAPER_BIG, PaperConfig, Transformer, count_parameters, shift_right
from .vit import PatchEmbedding, VisionTransformer, add_cls_and_positions, attention_maps, attention_rollout, patchify

__all__ = [
    "__version__",
    # runtime
    "get_device", "set_seed", "steps",
    # 00 welcome
    "stable_softmax",
    # 01-02 attention
    "scaled_dot_product_attention", "fused_attention", "split_heads", "merge_heads", "MultiHeadAttention",
    # 03 positional encoding
    "sinusoidal_table", "offset_matrix", "PositionalEncoding", "LearnedPositionalEmbedding",
    # 04 masking
    "padding_mask", "causal_mask", "decoder_mask", "to_tf_mask", "from_tf_mask", "to_key_padding_mask",
    "from_key_padding_mask", "to_additive_mask", "from_additive_mask",
    # 05-06 encoder, decoder, Transformer
    "FeedForward", "EncoderLayer", "DecoderLayer", "Encoder", "Decoder", "mean_pool",
    "Transformer", "shift_right", "PaperConfig", "PAPER_BASE", "PAPER_BIG", "count_parameters",
    # 08 Vision Transformer
    "patchify", "PatchEmbedding", "add_cls_and_positions", "VisionTransformer", "attention_maps",
    "attention_rollout",
    # 10 decoder-only language model
    "GPT",
    # 11 encoder-only model (the module is ready; its notebook is not written yet)
    "BERT",
]
