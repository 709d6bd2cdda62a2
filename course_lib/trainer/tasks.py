"""What ``course-train`` can train: the notebooks' models with the notebooks' configurations.

Each :class:`Task` has its defaults (the configuration its notebook uses) and a ``build`` function that
returns a :class:`Setup`: the model, optimizer, scheduler, training examples, how to batch them, how a
batch becomes a loss (:func:`course_lib.training.translation_step` or ``classification_step``), and the
final evaluation the notebook prints. Everything comes from ``course_lib``; nothing here is a second copy
of a model or a loss.

Adding a task (for example ``lm`` for a GPT-style language model): write ``build_lm(config, device) ->
Setup`` and its defaults, and register ``TASKS["lm"] = Task("lm", LM_DEFAULTS, build_lm, "...")``. The
command line, checkpoints, resume and many processes then work unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from course_lib.training import Prediction, classification_step, translation_step

__all__ = ["Setup", "Task", "TASKS", "TRANSLATE_DEFAULTS", "VIT_DEFAULTS", "build_translate", "build_vit"]


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
    """A name, its default configuration and the function that builds a :class:`Setup` from a configuration."""

    name: str
    defaults: dict
    build: Callable[[dict, torch.device], Setup]
    help: str


# The run's own keys, common to every task.
COMMON_DEFAULTS = dict(steps=0, seed=0, batch_size=0, clip_grad_norm=1.0, checkpoint_every=100,
                       keep_checkpoints=2, amp="auto")

# Notebook 07's CONFIG (LONG_RUN = False), its corpus and its evaluation (greedy, 2 000 test numbers).
TRANSLATE_DEFAULTS = {**COMMON_DEFAULTS, **dict(
    steps=800, batch_size=128,
    d_model=128, num_heads=4, num_layers=2, d_ff=256, dropout=0.0, norm_first=True, max_len=128,
    warmup=300, lr_scale=0.6, smoothing=0.1, bpe_vocab_size=120,
    n_train=40_000, n_valid=1_000, n_test=2_000, max_number=999_999,
    train_tsv="", train_src="", train_tgt="", test_tsv="", test_src="", test_tgt="",
    eval_size=2_000, eval_max_len=40,
)}

# Notebook 08's VIT_CONFIG and TRAIN, [CLS] pooling, 2 500 steps; evaluated on the 360 test digits.
VIT_DEFAULTS = {**COMMON_DEFAULTS, **dict(
    steps=2_500, batch_size=128,
    image_size=8, patch_size=4, in_channels=1, num_classes=10, d_model=64, num_heads=4, num_layers=2, d_ff=128,
    dropout=0.0, pool="cls", lr=3e-3, weight_decay=0.05, warmup=50, label_smoothing=0.1, max_shift=1,
)}


def _translation_pairs(config: dict) -> tuple[list, list, str]:
    """Training and test pairs: the number corpus of notebook 07, or sentences from files."""
    from course_lib.text import make_number_corpus, read_parallel_files, read_tsv_pairs, split_pairs

    if config["train_tsv"] or config["train_src"]:
        if config["train_tsv"]:
            pairs, origin = read_tsv_pairs(config["train_tsv"]), config["train_tsv"]
        else:
            if not config["train_tgt"]:
                raise ValueError("course-train translate: train_src needs train_tgt (two aligned files)")
            pairs, origin = read_parallel_files(config["train_src"], config["train_tgt"]), config["train_src"]
        if config["test_tsv"]:
            test = read_tsv_pairs(config["test_tsv"])
        elif config["test_src"]:
            test = read_parallel_files(config["test_src"], config["test_tgt"])
        else:  # cut the test pairs off the training file
            pairs, _, test = split_pairs(pairs, 0, min(config["n_test"], len(pairs) // 10 or 1), config["seed"])
        return pairs, test, f"{len(pairs)} training pairs from {origin}"
    corpus = make_number_corpus(config["n_train"], config["n_valid"], config["n_test"], config["max_number"],
                                seed=config["seed"])
    return corpus.train, corpus.test, repr(corpus)


def build_translate(config: dict, device: torch.device) -> Setup:
    """Notebook 07: English -> German, words to BPE pieces, a pre-LN Transformer, the paper's schedule."""
    from course_lib.decoding import translate
    from course_lib.metrics import translation_scores
    from course_lib.text import BPETokenizer, TranslationDataset, Vocab, WordTokenizer, collate
    from course_lib.training import label_smoothed_cross_entropy, make_optimizer, make_scheduler
    from course_lib.transformer import Transformer

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
    from course_lib.images import accuracy, classifier_optimizer, digits_split, random_shift, warmup_cosine_schedule
    from course_lib.vit import VisionTransformer

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
                      "notebook 07's Transformer: English number words -> German (or your own sentence pairs)"),
    "vit": Task("vit", VIT_DEFAULTS, build_vit, "notebook 08's Vision Transformer on the 8x8 digits"),
    # "lm": a GPT-style language model registers here once course_lib has one (see the module docstring).
}
