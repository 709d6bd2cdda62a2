"""course_lib: the reference implementations, checks and grading of the Transformer course.

The models and their building blocks are importable from here, in the notebooks' order::

    from course_lib import MultiHeadAttention, causal_mask, PositionalEncoding, Transformer

The rest lives in packages named by their job, imported where needed (they pull in heavier libraries);
``docs/architecture.md`` maps every module to its notebooks, checks and tests:

- ``course_lib.models``: every model and building block (attention, masking, positional, layers, transformer,
  vit, gpt, bert, seq2seq, the LSTM/CNN baselines, the n-gram model, the key/value cache);
- ``course_lib.data``: data sets, tokenisers, vocabularies and batches (translation, python_docs,
  stdlib_docstrings, digits);
- ``course_lib.training``: the one training engine, image-classifier and language-model training, pre-training and
  fine-tuning, runs in several processes, and the ``course-train`` command (``course_lib.training.cli``);
- ``course_lib.generation``: decoding (greedy, beam search) and sampling;
- ``course_lib.evaluation``: metrics and the baselines scores are compared with;
- ``course_lib.experiments``: the paper's experiments at small scale (notebook 13);
- ``course_lib.figures``: plots and the paper's architecture diagrams;
- exercises: ``course_lib.exercises`` (the mechanism) and ``course_lib.checks`` (the course's checks);
  grading: ``course_lib.grading`` and the ``course-grade`` command; the class edition: ``course_lib.edition``;
- infrastructure: ``course_lib.runtime`` (device, seed, threads), ``course_lib.validation`` (input checks).

Public names are stable: ``tests/api_record.json`` records them with their signatures, and a released name is
deprecated (with a warning naming its replacement and the release that removes it, see
``course_lib._deprecation``) before it is removed.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .models.attention import (
    MultiHeadAttention,
    fused_attention,
    merge_heads,
    scaled_dot_product_attention,
    split_heads,
)
from .models.bert import BERT
from .models.gpt import GPT
from .models.layers import Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward, mean_pool
from .models.masking import (
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
from .models.positional import LearnedPositionalEmbedding, PositionalEncoding, offset_matrix, sinusoidal_table
from .models.softmax import stable_softmax
from .models.transformer import PAPER_BASE, PAPER_BIG, PaperConfig, Transformer, count_parameters, shift_right
from .models.vit import (
    PatchEmbedding,
    VisionTransformer,
    add_cls_and_positions,
    attention_maps,
    attention_rollout,
    patchify,
)
from .runtime import get_device, set_seed, steps

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
    # 11 encoder-only model
    "BERT",
]
