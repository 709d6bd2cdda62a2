"""Each lesson's model configuration, in one place: the notebook, ``course-train``'s task and the benchmarks read it.

A :class:`Lesson` names its notebook and its ``course-train`` task, and holds three frozen tables:

- ``model``: the model's constructor arguments (the vocabulary size aside, which the data decides; for the
  language models the context ``max_len`` is the recipe's ``seq_len``);
- ``train``: the training recipe: batch size, learning rate and schedule, and the data's own sizes (the
  tokeniser's vocabulary, the window);
- ``quick``: what ``course-train --quick`` and ``COURSE_SMOKE=1`` change (a tiny model, a few dozen steps).

``steps`` is the length of the notebook's default run (``LONG_RUN = False``), ``long_steps`` that of its
``LONG_RUN = True`` (four times the steps or more; the notebook says how many). Changing a number here changes the
notebook, ``course-train`` and the benchmarks together; ``tests/training/test_lessons.py`` holds each of them to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

__all__ = ["Lesson", "LESSON_07", "LESSON_08", "LESSON_11", "LESSON_12", "LESSON_14", "LESSON_15", "LESSONS"]


@dataclass(frozen=True)
class Lesson:
    """One notebook's model and recipe (read-only: ``dict(lesson.model)`` gives a copy to change)."""

    notebook: str
    task: str
    model: Mapping
    train: Mapping
    steps: int
    long_steps: int
    quick: Mapping

    def __post_init__(self) -> None:
        for name in ("model", "train", "quick"):  # frozen all the way down: no consumer can change another's copy
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))


LESSON_07 = Lesson(
    notebook="07_training_and_decoding", task="translate",
    model=dict(d_model=128, num_heads=4, num_layers=2, d_ff=256, dropout=0.0, norm_first=True, max_len=128),
    train=dict(batch_size=128, warmup=300, lr_scale=0.6, smoothing=0.1, bpe_vocab_size=120,
               n_train=40_000, n_valid=1_000, n_test=2_000, max_number=999_999),
    steps=500, long_steps=2_000,
    quick=dict(n_train=2_000, n_valid=0, n_test=100, max_number=9_999, bpe_vocab_size=60, d_model=32, num_heads=2,
               num_layers=1, d_ff=64, warmup=10, eval_size=50),
)
"""Notebook 07: English number words -> German BPE pieces, a pre-LN Transformer of 2 + 2 layers, the paper's
schedule scaled by ``lr_scale``, label smoothing."""

LESSON_08 = Lesson(
    notebook="08_vision_transformer", task="vit",
    model=dict(image_size=8, patch_size=4, in_channels=1, num_classes=10, d_model=64, num_heads=4, num_layers=2,
               d_ff=128, dropout=0.0, pool="cls"),
    train=dict(batch_size=128, lr=3e-3, weight_decay=0.05, warmup=50, label_smoothing=0.1,
               max_shift=1),
    steps=1_400, long_steps=1_400,  # notebook 08 has no long run
    quick=dict(d_model=32, num_heads=2, num_layers=1, d_ff=64, warmup=5),
)
"""Notebook 08: the Vision Transformer on the 8x8 digits ([CLS] pooling), AdamW, warm-up and cosine decay, shifts
of at most one pixel."""

LESSON_11 = Lesson(
    notebook="11_language_model", task="lm",
    model=dict(d_model=128, num_heads=4, num_layers=4, dropout=0.0, activation="gelu_tanh"),
    train=dict(batch_size=16, vocab_size=1024, seq_len=128, lr=2e-3, warmup=30, weight_decay=0.1),
    steps=250, long_steps=1_600,
    quick=dict(batch_size=8, vocab_size=300, seq_len=32, d_model=32, num_heads=2, num_layers=1, warmup=5),
)
"""Notebook 11: a GPT of 4 layers on the Python manual, byte-level BPE of 1 024, AdamW with a warm-up and a cosine
decay to 10 % (the long run also sets dropout 0.1)."""

LESSON_12 = Lesson(
    notebook="12_bert", task="bert",
    model=dict(d_model=128, num_heads=4, num_layers=2, dropout=0.0),
    train=dict(batch_size=32, vocab_size=1000, seq_len=64, lr=1e-3, warmup=50, per_class=32,
               finetune_steps=120, finetune_lr=3e-4, finetune_batch_size=16),
    steps=400, long_steps=2_400,
    quick=dict(batch_size=16, vocab_size=300, seq_len=32, d_model=32, num_heads=2, num_layers=1, warmup=5,
               per_class=4, finetune_steps=10),
)
"""Notebook 12: a BERT of 2 layers pre-trained with masked language modelling on the standard library's
docstrings (byte-level BPE of 1 000), then fine-tuned on 32 labelled docstrings per class."""

LESSON_14 = Lesson(
    notebook="14_todays_models", task="llama",
    model=dict(d_model=64, num_heads=4, num_layers=2),
    train=dict(batch_size=16, vocab_size=512, seq_len=64, lr=3e-3, warmup=30, weight_decay=0.1),
    steps=200, long_steps=800,
    quick=dict(batch_size=8, vocab_size=300, seq_len=32, d_model=32, num_heads=2, num_kv_heads=1, num_layers=1,
               warmup=5),
)
"""Notebook 14: a Llama-layout language model of 2 layers on the Python manual (byte-level BPE of 512), AdamW
with 30 warm-up steps and then a constant rate; its variants (key/value heads, norms) change the model's
other arguments."""

LESSON_15 = replace(LESSON_14, notebook="15_inference_at_scale")
"""Notebook 15 trains notebook 14's model with the same recipe (its variants: the key/value heads, the window)."""

#: Every lesson, by notebook.
LESSONS: dict[str, Lesson] = {lesson.notebook: lesson for lesson in
                              (LESSON_07, LESSON_08, LESSON_11, LESSON_12, LESSON_14, LESSON_15)}
