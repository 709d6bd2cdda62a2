"""What ``course-train`` can train: the notebooks' models with the notebooks' configurations.

Each :class:`Task` has its defaults (the configuration its notebook uses) and a ``build`` function that
returns a :class:`Setup`: the model, optimizer, scheduler, training examples, how to batch them, how a
batch becomes a loss (:func:`course_lib.training.engine.translation_step` or ``classification_step``), and the
final evaluation the notebook prints. Everything comes from ``course_lib``; nothing here is a second copy
of a model or a loss.

Adding a task (for example ``lm`` for a GPT-style language model): write ``build_lm(config, device) ->
Setup`` and its defaults, and register ``TASKS["lm"] = Task("lm", LM_DEFAULTS, build_lm, "...")``. The
command line, checkpoints, resume and many processes then work unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from course_lib.training.engine import Prediction, classification_step, translation_step

__all__ = ["Setup", "Task", "TASKS", "TRANSLATE_DEFAULTS", "VIT_DEFAULTS", "TRANSLATE_QUICK", "VIT_QUICK",
           "build_translate", "build_vit", "validate_translate"]


@dataclass
class Setup:
    """Everything one training run needs, built from a configuration."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler | None
    dataset: Any                                   # indexable training examples
    collate_fn: Callable[[list], Any]              # a list of examples -> a batch
    step_fn: Callable[..., Prediction]             # (model, batch, device) -> Prediction
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    evaluate: Callable[[nn.Module, torch.device], dict[str, float]]  # the notebook's final numbers
    description: str = ""


@dataclass(frozen=True)
class Task:
    """A name, its default configuration and the function that builds a :class:`Setup` from a configuration.

    ``quick``: the keys that make a run of seconds (a tiny model, a few dozen steps) for ``--quick`` and
    ``COURSE_SMOKE=1``. ``validate(config)`` raises a ValueError naming the keys of an inconsistent
    configuration. ``schedule_keys``: the keys the learning-rate schedule is built from beyond those that never
    change on resume (``steps`` for a decay that ends at the last step): a resumed run refuses a new value.
    """

    name: str
    defaults: dict
    build: Callable[[dict, torch.device], Setup]
    help: str
    quick: dict = field(default_factory=dict)
    validate: Callable[[dict], None] | None = None
    schedule_keys: tuple[str, ...] = ()


# The run's own keys, common to every task.
# batch_size is per process and per batch; a step takes `accumulate` batches (gradient accumulation).
COMMON_DEFAULTS = dict(steps=0, seed=0, batch_size=0, accumulate=1, clip_grad_norm=1.0, checkpoint_every=100,
                       keep_checkpoints=2, amp="auto")

# --quick and COURSE_SMOKE=1: a run of seconds that still crosses checkpoints (every 10 of 30 steps).
COMMON_QUICK = dict(steps=30, checkpoint_every=10, batch_size=32)

# Notebook 07's CONFIG (LONG_RUN = False), its corpus and its evaluation (greedy, 2 000 test numbers).
TRANSLATE_DEFAULTS = {**COMMON_DEFAULTS, **dict(
    steps=800, batch_size=128,
    d_model=128, num_heads=4, num_layers=2, d_ff=256, dropout=0.0, norm_first=True, max_len=128,
    warmup=300, lr_scale=0.6, smoothing=0.1, bpe_vocab_size=120,
    n_train=40_000, n_valid=1_000, n_test=2_000, max_number=999_999,
    train_tsv="", train_src="", train_tgt="", test_tsv="", test_src="", test_tgt="",
    eval_size=2_000, eval_max_len=40,
)}

TRANSLATE_QUICK = {**COMMON_QUICK, **dict(
    n_train=2_000, n_valid=0, n_test=100, max_number=9_999, bpe_vocab_size=60, d_model=32, num_heads=2,
    num_layers=1, d_ff=64, warmup=10, eval_size=50,
)}

# Notebook 08's VIT_CONFIG and TRAIN, [CLS] pooling, 2 500 steps; evaluated on the 360 test digits.
VIT_DEFAULTS = {**COMMON_DEFAULTS, **dict(
    steps=2_500, batch_size=128,
    image_size=8, patch_size=4, in_channels=1, num_classes=10, d_model=64, num_heads=4, num_layers=2, d_ff=128,
    dropout=0.0, pool="cls", lr=3e-3, weight_decay=0.05, warmup=50, label_smoothing=0.1, max_shift=1,
)}
VIT_QUICK = {**COMMON_QUICK, **dict(d_model=32, num_heads=2, num_layers=1, d_ff=64, warmup=5)}


def validate_translate(config: dict) -> None:
    """Data keys that go together: one training source (a TSV file, or two aligned files), one test source."""
    for part in ("train", "test"):
        tsv, src, tgt = (config[f"{part}_{kind}"] for kind in ("tsv", "src", "tgt"))
        if tsv and (src or tgt):
            raise ValueError(f"{part}_tsv and {part}_src/{part}_tgt both given ({tsv!r}, {src!r}, {tgt!r}): "
                             f"set either the TSV file or the two aligned files")
        if bool(src) != bool(tgt):
            given, missing = (f"{part}_src", f"{part}_tgt") if src else (f"{part}_tgt", f"{part}_src")
            raise ValueError(f"{given} = {config[given]!r} needs {missing} (the aligned file of the other "
                             f"language)")
    if (config["test_tsv"] or config["test_src"]) and not (config["train_tsv"] or config["train_src"]):
        raise ValueError("test_tsv/test_src need training files too (train_tsv, or train_src and train_tgt): "
                         "the number corpus brings its own test numbers")


def _read_pairs(config: dict, part: str) -> tuple[list, str]:
    """``part``'s pairs (``train`` or ``test``) from its TSV file or its two aligned files, and their origin."""
    from course_lib.data.translation import read_parallel_files, read_tsv_pairs

    key = f"{part}_tsv" if config[f"{part}_tsv"] else f"{part}_src/{part}_tgt"
    try:
        if config[f"{part}_tsv"]:
            return read_tsv_pairs(config[f"{part}_tsv"]), config[f"{part}_tsv"]
        return read_parallel_files(config[f"{part}_src"], config[f"{part}_tgt"]), config[f"{part}_src"]
    except (OSError, ValueError) as error:  # name the key too: the file alone may not say which setting it was
        raise ValueError(f"{key}: {error}") from error


def _translation_pairs(config: dict) -> tuple[list, list, str]:
    """Training and test pairs: the number corpus of notebook 07, or sentences from files."""
    from course_lib.data.translation import make_number_corpus, split_pairs

    if config["train_tsv"] or config["train_src"]:
        pairs, origin = _read_pairs(config, "train")
        if config["test_tsv"] or config["test_src"]:
            test, _ = _read_pairs(config, "test")
        else:  # cut the test pairs off the training file
            pairs, _, test = split_pairs(pairs, 0, min(config["n_test"], len(pairs) // 10 or 1), config["seed"])
        return pairs, test, f"{len(pairs)} training pairs from {origin}"
    corpus = make_number_corpus(config["n_train"], config["n_valid"], config["n_test"], config["max_number"],
                                seed=config["seed"])
    return corpus.train, corpus.test, repr(corpus)


def build_translate(config: dict, device: torch.device) -> Setup:
    """Notebook 07: English -> German, words to BPE pieces, a pre-LN Transformer, the paper's schedule."""
    from course_lib.data.translation import BPETokenizer, TranslationDataset, Vocab, WordTokenizer, collate
    from course_lib.evaluation.metrics import translation_scores
    from course_lib.generation.decoding import translate
    from course_lib.models.transformer import Transformer
    from course_lib.training.engine import label_smoothed_cross_entropy, make_optimizer, make_scheduler

    train_pairs, test_pairs, origin = _translation_pairs(config)
    src_tok = WordTokenizer()
    tgt_tok = BPETokenizer.train([p.tgt for p in train_pairs], vocab_size=config["bpe_vocab_size"])
    fits = [p for p in train_pairs if len(src_tok.tokenize(p.src)) <= config["max_len"]
            and len(tgt_tok.tokenize(p.tgt)) + 1 <= config["max_len"]]  # + <bos> or <eos>
    src_vocab = Vocab.build(src_tok.tokenize(p.src) for p in fits)
    tgt_vocab = Vocab.build(tgt_tok.tokenize(p.tgt) for p in fits)
    dataset = TranslationDataset(fits, src_tok, tgt_tok, src_vocab, tgt_vocab)
    model = Transformer(len(src_vocab), len(tgt_vocab), d_model=config["d_model"], num_heads=config["num_heads"],
                        num_encoder_layers=config["num_layers"], num_decoder_layers=config["num_layers"],
                        d_ff=config["d_ff"], dropout=config["dropout"], max_len=config["max_len"],
                        norm_first=config["norm_first"]).to(device)
    optimizer = make_optimizer(model)
    scheduler = make_scheduler(optimizer, config["d_model"], config["warmup"], config["lr_scale"])
    pad_id, smoothing = tgt_vocab.pad_id, config["smoothing"]

    def evaluate(trained: nn.Module, where: torch.device) -> dict[str, float]:
        test = [p for p in test_pairs if len(src_tok.tokenize(p.src)) <= config["max_len"]][:config["eval_size"]]
        hyps = translate(trained, [p.src for p in test], src_tok, src_vocab, tgt_tok, tgt_vocab,
                         max_len=config["eval_max_len"], device=where)
        return {**translation_scores(hyps, [p.tgt for p in test]), "test_sentences": len(test)}

    return Setup(model, optimizer, scheduler, dataset, lambda ex: collate(ex, pad_id), translation_step,
                 lambda logits, target: label_smoothed_cross_entropy(logits, target, smoothing, pad_id), evaluate,
                 f"{origin}; {len(dataset)} used (at most max_len={config['max_len']} tokens); "
                 f"vocabularies {len(src_vocab)} -> {len(tgt_vocab)}")


def build_vit(config: dict, device: torch.device) -> Setup:
    """Notebook 08: the Vision Transformer on the 8x8 digits, AdamW, warm-up and cosine decay, small shifts."""
    from course_lib.data.digits import (
        accuracy,
        classifier_optimizer,
        digits_split,
        random_shift,
        warmup_cosine_schedule,
    )
    from course_lib.models.vit import VisionTransformer

    split = digits_split(seed=config["seed"])
    model = VisionTransformer(image_size=config["image_size"], patch_size=config["patch_size"],
                              in_channels=config["in_channels"], num_classes=config["num_classes"],
                              d_model=config["d_model"], num_heads=config["num_heads"],
                              num_layers=config["num_layers"], d_ff=config["d_ff"], dropout=config["dropout"],
                              pool=config["pool"]).to(device)
    optimizer = classifier_optimizer(model, config["lr"], config["weight_decay"])
    scheduler = warmup_cosine_schedule(optimizer, config["warmup"], config["steps"])
    dataset = torch.utils.data.TensorDataset(split.train_x, split.train_y)
    max_shift = config["max_shift"]

    def collate_fn(examples: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        images = torch.stack([image for image, _ in examples])  # (batch, 1, 8, 8)
        labels = torch.stack([label for _, label in examples])  # (batch,)
        return random_shift(images, max_shift), labels  # the global generator: restored on resume

    def evaluate(trained: nn.Module, where: torch.device) -> dict[str, float]:
        return {"test_accuracy": 100 * accuracy(trained, split.test_x, split.test_y),
                "val_accuracy": 100 * accuracy(trained, split.val_x, split.val_y), "test_images": len(split.test_y)}

    return Setup(model, optimizer, scheduler, dataset, collate_fn, classification_step,
                 nn.CrossEntropyLoss(label_smoothing=config["label_smoothing"]), evaluate,
                 f"digits split {split.sizes}")


TASKS: dict[str, Task] = {
    "translate": Task("translate", TRANSLATE_DEFAULTS, build_translate,
                      "notebook 07's Transformer: English number words -> German (or your own sentence pairs)",
                      quick=TRANSLATE_QUICK, validate=validate_translate),
    # The ViT's cosine decay reaches its floor at `steps`: a resumed run with another `steps` would reshape it.
    "vit": Task("vit", VIT_DEFAULTS, build_vit, "notebook 08's Vision Transformer on the 8x8 digits",
                quick=VIT_QUICK, schedule_keys=("steps",)),
    # "lm": a GPT-style language model registers here once course_lib has one (see the module docstring).
}
