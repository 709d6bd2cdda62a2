"""What ``course-train`` can train: the notebooks' models with the notebooks' configurations.

Each :class:`Task` has its defaults (the configuration its notebook uses) and a ``build`` function that
returns a :class:`Setup`: the model, optimizer, scheduler, training examples, how to batch them, how a
batch becomes a loss (a step: :func:`course_lib.training.engine.translation_step`, ``classification_step``,
:func:`course_lib.training.language_model.lm_step`, ...), and the final evaluation the notebook prints.
Everything comes from
``course_lib``; nothing here is a second copy of a model, a loss or a loop: every task trains on
:func:`course_lib.training.engine.train`.

The tasks: ``translate`` (notebook 07's Transformer; notebook 13's variants through ``--set``), ``vit``
(notebook 08), ``lm`` (notebook 11's GPT), ``bert`` (notebook 12: masked-language-model pre-training,
evaluated by fine-tuning copies on the labelled task) and ``llama`` (notebook 14's Llama-layout language model:
RMSNorm, SwiGLU, RoPE, grouped-query attention, an optional sliding window). :data:`NOTEBOOK_MODELS` says,
for every notebook that trains a model, which task trains it (``course-train --list``).

The model and recipe of each task come from its lesson (:mod:`course_lib.training.lessons`, the one place the
notebook and the benchmarks read too); the defaults here add what only ``course-train`` needs (data files,
evaluation sizes, the variants' switches).

Adding a task: write ``build_x(config, device) -> Setup`` and its defaults, and register
``TASKS["x"] = Task("x", X_DEFAULTS, build_x, "...")``. The command line, checkpoints, resume and many
processes then work unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from course_lib.training.engine import Prediction, classification_step, translation_step
from course_lib.training.lessons import LESSON_07, LESSON_08, LESSON_11, LESSON_12, LESSON_14

__all__ = ["Setup", "Task", "TASKS", "TRANSLATE_DEFAULTS", "VIT_DEFAULTS", "TRANSLATE_QUICK", "VIT_QUICK",
           "LM_DEFAULTS", "LM_QUICK", "BERT_DEFAULTS", "BERT_QUICK", "LLAMA_DEFAULTS", "LLAMA_QUICK",
           "NOTEBOOK_MODELS", "build_translate", "build_vit", "build_lm", "build_bert", "build_llama",
           "validate_translate", "validate_llama"]


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

# Notebook 07's model and recipe (LONG_RUN = False), its corpus and its evaluation (greedy, 2 000 test numbers);
# notebook 09's and 13's variants through architecture, d_k and positions; sentence pairs from files.
TRANSLATE_DEFAULTS = {**COMMON_DEFAULTS, "steps": LESSON_07.steps, **LESSON_07.model, **LESSON_07.train, **dict(
    architecture="transformer", d_k=0, positions="sinusoidal",
    train_tsv="", train_src="", train_tgt="", test_tsv="", test_src="", test_tgt="",
    eval_size=2_000, eval_max_len=40,
)}
TRANSLATE_QUICK = {**COMMON_QUICK, **LESSON_07.quick}

# Notebook 08's model and recipe ([CLS] pooling, 2 500 steps); evaluated on the 360 test digits.
VIT_DEFAULTS = {**COMMON_DEFAULTS, "steps": LESSON_08.steps, **LESSON_08.model, **LESSON_08.train}
VIT_QUICK = {**COMMON_QUICK, **LESSON_08.quick}


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
    """Notebook 07: English -> German, words to BPE pieces, a pre-LN Transformer, the paper's schedule
    (``architecture="gru"`` or ``"gru_additive"``: notebook 09's recurrent encoder-decoders instead)."""
    from course_lib.data.translation import BPETokenizer, TranslationDataset, Vocab, WordTokenizer, collate
    from course_lib.evaluation.metrics import translation_scores
    from course_lib.generation.decoding import translate
    from course_lib.models.seq2seq import RNNEncoderDecoder
    from course_lib.models.transformer import Transformer, with_key_size, with_learned_positions
    from course_lib.training.engine import label_smoothed_cross_entropy, make_optimizer, make_scheduler

    train_pairs, test_pairs, origin = _translation_pairs(config)
    src_tok = WordTokenizer()
    tgt_tok = BPETokenizer.train([p.tgt for p in train_pairs], vocab_size=config["bpe_vocab_size"])
    fits = [p for p in train_pairs if len(src_tok.tokenize(p.src)) <= config["max_len"]
            and len(tgt_tok.tokenize(p.tgt)) + 1 <= config["max_len"]]  # + <bos> or <eos>
    src_vocab = Vocab.build(src_tok.tokenize(p.src) for p in fits)
    tgt_vocab = Vocab.build(tgt_tok.tokenize(p.tgt) for p in fits)
    dataset = TranslationDataset(fits, src_tok, tgt_tok, src_vocab, tgt_vocab)
    if config["architecture"] == "transformer":
        model = Transformer(len(src_vocab), len(tgt_vocab), d_model=config["d_model"],
                            num_heads=config["num_heads"], num_encoder_layers=config["num_layers"],
                            num_decoder_layers=config["num_layers"], d_ff=config["d_ff"], dropout=config["dropout"],
                            max_len=config["max_len"], norm_first=config["norm_first"])
        if config["d_k"]:  # notebook 13, Table 3 row B: another key size (0: d_model / num_heads)
            with_key_size(model, config["d_k"])
        if config["positions"] == "learned":  # row E
            with_learned_positions(model)
        model = model.to(device)
    else:  # notebook 09's recurrent encoder-decoders: the bottleneck, or additive attention
        model = RNNEncoderDecoder(len(src_vocab), len(tgt_vocab), d_model=config["d_model"],
                                  attention="additive" if config["architecture"] == "gru_additive" else None,
                                  pad_id=tgt_vocab.pad_id).to(device)
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
    from course_lib.data.digits import digits_split, random_shift
    from course_lib.evaluation.metrics import classifier_accuracy
    from course_lib.models.vit import VisionTransformer
    from course_lib.training.engine import warmup_cosine_schedule
    from course_lib.training.image_classifier import classifier_optimizer

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
        return {"test_accuracy": 100 * classifier_accuracy(trained, split.test_x, split.test_y, 512),
                "val_accuracy": 100 * classifier_accuracy(trained, split.val_x, split.val_y, 512),
                "test_images": len(split.test_y)}

    return Setup(model, optimizer, scheduler, dataset, collate_fn, classification_step,
                 nn.CrossEntropyLoss(label_smoothing=config["label_smoothing"]), evaluate,
                 f"digits split {split.sizes}")


# Notebook 11's model and recipe (LONG_RUN = False): the Python manual (or text_file), byte-level BPE of 1 024, a
# GPT of 4 layers, AdamW with a warm-up and a cosine decay to 10 %; evaluated by the validation perplexity.
LM_DEFAULTS = {**COMMON_DEFAULTS, "steps": LESSON_11.steps, **LESSON_11.model, **LESSON_11.train, "text_file": ""}
LM_QUICK = {**COMMON_QUICK, **LESSON_11.quick}

# Notebook 12's model, pre-training and fine-tuning (LONG_RUN = False); evaluated like the notebook, by
# fine-tuning a copy on 32 labelled docstrings per class (seed 0) and scoring the held-out docstrings.
BERT_DEFAULTS = {**COMMON_DEFAULTS, "steps": LESSON_12.steps, **LESSON_12.model, **LESSON_12.train}
BERT_QUICK = {**COMMON_QUICK, **LESSON_12.quick}


class _Windows(torch.utils.data.Dataset):
    """Every window of ``length`` consecutive tokens of a stream, one per start position: (length,) each."""

    def __init__(self, stream: torch.Tensor, length: int) -> None:
        if stream.numel() <= length:
            raise ValueError(f"the token stream ({stream.numel()} tokens) is shorter than one window of {length}")
        self.stream, self.length = stream, length

    def __len__(self) -> int:
        return self.stream.numel() - self.length + 1

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.stream[index:index + self.length]


def _text_streams(config: dict) -> tuple[Any, Any, torch.Tensor, torch.Tensor]:
    """The language models' text (the Python manual, or ``text_file``), a byte-level BPE of ``vocab_size`` learned
    on its training documents, and both parts as token streams: ``(corpus, bpe, train (n,), valid (m,))``."""
    from course_lib.data.python_docs import ByteBPE, encode_documents, load_text_file, python_docs_corpus

    corpus = load_text_file(config["text_file"]) if config["text_file"] else python_docs_corpus()
    bpe = ByteBPE.train(corpus.train, vocab_size=config["vocab_size"])
    return corpus, bpe, encode_documents(bpe, corpus.train), encode_documents(bpe, corpus.valid)


def build_lm(config: dict, device: torch.device) -> Setup:
    """Notebook 11: a GPT on the Python manual (or ``text_file``), windows of ``seq_len + 1`` tokens."""
    import torch.nn.functional as F

    from course_lib.models.gpt import GPT
    from course_lib.training.engine import make_adamw, warmup_cosine_schedule
    from course_lib.training.language_model import evaluate_perplexity, lm_step

    corpus, bpe, train_stream, valid_stream = _text_streams(config)
    model = GPT(bpe.vocab_size, d_model=config["d_model"], num_heads=config["num_heads"],
                num_layers=config["num_layers"], max_len=config["seq_len"], dropout=config["dropout"],
                activation=config["activation"]).to(device)
    optimizer = make_adamw(model, config["lr"], config["weight_decay"], betas=(0.9, 0.95))
    scheduler = warmup_cosine_schedule(optimizer, config["warmup"], config["steps"], floor=0.1)

    def evaluate(trained: nn.Module, where: torch.device) -> dict[str, float]:
        return {"valid_perplexity": evaluate_perplexity(trained, valid_stream, config["seq_len"]),
                "valid_tokens": valid_stream.numel()}

    return Setup(model, optimizer, scheduler, _Windows(train_stream, config["seq_len"] + 1), torch.stack, lm_step,
                 F.cross_entropy, evaluate, f"{corpus!r}; {train_stream.numel():,} training tokens, vocabulary "
                                            f"{bpe.vocab_size}")


# Notebook 14's model and recipe (LONG_RUN = False), section 5's grouped-query model (4 query heads sharing 2
# key/value heads), AdamW with 30 warm-up steps and then a constant rate (the notebook's schedule: it does not
# depend on `steps`, so a resumed run may grow). The Llama's other arguments are its defaults (0: the model's
# own choice); window=0 is full causal attention, window=W Mistral's sliding window (section 6).
LLAMA_DEFAULTS = {**COMMON_DEFAULTS, "steps": LESSON_14.steps, **LESSON_14.model, **LESSON_14.train, **dict(
    num_kv_heads=2, d_ff=0, window=0, norm_eps=1e-6, rope_base=10000.0, rope_layout="half", tie_weights=False,
    text_file="",
)}
LLAMA_QUICK = {**COMMON_QUICK, **LESSON_14.quick}


def validate_llama(config: dict) -> None:
    """The keys whose 0 means "the default": ``d_ff`` (0: :func:`course_lib.models.llama.swiglu_width`) and
    ``window`` (0: full causal attention); neither may be negative."""
    for key, meaning in (("d_ff", "8/3 d_model, rounded up"), ("window", "full causal attention")):
        if config[key] < 0:
            raise ValueError(f"{key} must be >= 0 (0: {meaning}), got {config[key]}")


def build_llama(config: dict, device: torch.device) -> Setup:
    """Notebook 14: a Llama-layout language model (RMSNorm, SwiGLU, RoPE, grouped-query attention) on the Python
    manual (or ``text_file``), windows of ``seq_len + 1`` tokens, scored by the validation perplexity and the
    key/value cache it keeps per token."""
    import torch.nn.functional as F

    from course_lib.models.llama import Llama
    from course_lib.training.engine import make_adamw, warmup_cosine_schedule
    from course_lib.training.language_model import evaluate_perplexity, lm_step

    corpus, bpe, train_stream, valid_stream = _text_streams(config)
    model = Llama(bpe.vocab_size, d_model=config["d_model"], num_heads=config["num_heads"],
                  num_layers=config["num_layers"], num_kv_heads=config["num_kv_heads"], d_ff=config["d_ff"] or None,
                  max_len=config["seq_len"], norm_eps=config["norm_eps"], rope_base=config["rope_base"],
                  rope_layout=config["rope_layout"], window=config["window"] or None,
                  tie_weights=config["tie_weights"]).to(device)
    optimizer = make_adamw(model, config["lr"], config["weight_decay"], betas=(0.9, 0.95))
    # floor=1: the warm-up, then the peak rate kept (notebook 14's LambdaLR, min(1, (step + 1) / warmup))
    scheduler = warmup_cosine_schedule(optimizer, config["warmup"], config["steps"], floor=1.0)

    def evaluate(trained: nn.Module, where: torch.device) -> dict[str, float]:
        window = valid_stream[None, :config["seq_len"]].to(where)  # (1, seq_len): one validation window
        cache = trained.make_cache()
        with torch.no_grad():
            trained.eval()(window, cache)
        return {"valid_perplexity": evaluate_perplexity(trained, valid_stream, config["seq_len"]),
                "valid_tokens": valid_stream.numel(),
                "kv_cache_bytes_per_token": sum(layer.nbytes for layer in cache) / cache[0].seen}

    return Setup(model, optimizer, scheduler, _Windows(train_stream, config["seq_len"] + 1), torch.stack, lm_step,
                 F.cross_entropy, evaluate, f"{corpus!r}; {train_stream.numel():,} training tokens, vocabulary "
                                            f"{bpe.vocab_size}; {config['num_heads']} query heads, "
                                            f"{config['num_kv_heads']} key/value head(s)")


def _mlm_forward_step(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], device: torch.device | str
                      ) -> Prediction:
    """Masked-language-model logits through ``model(inputs)`` (batch, seq, vocab), scored at the selected
    positions: :func:`course_lib.training.pretraining.mlm_step` calls the model's parts to skip the output layer at
    unselected positions, which ``DistributedDataParallel`` cannot follow (it synchronises through forward)."""
    from course_lib.models.bert import IGNORE_INDEX

    inputs, labels = (t.to(device) for t in batch)
    selected = labels != IGNORE_INDEX  # (batch, seq)
    logits = model(inputs)  # (batch, seq, vocab)
    return Prediction(logits[selected][None], labels[selected][None], int(selected.sum()))


def build_bert(config: dict, device: torch.device) -> Setup:
    """Notebook 12: BERT pre-trained with masked language modelling on the standard library's docstrings."""
    import copy

    from course_lib.evaluation.metrics import classifier_accuracy
    from course_lib.models.bert import BERT, ClassificationHead, mask_tokens, mlm_loss
    from course_lib.runtime import set_seed
    from course_lib.training.engine import make_adamw, warmup_linear_schedule
    from course_lib.training.pretraining import DocstringData, fine_tune, labelled_subset

    data = DocstringData.build(vocab_size=config["vocab_size"], seq_len=config["seq_len"])
    model = BERT(data.bpe.vocab_size, d_model=config["d_model"], num_heads=config["num_heads"],
                 num_layers=config["num_layers"], max_len=config["seq_len"], dropout=config["dropout"],
                 pad_id=data.pad_id).to(device)
    optimizer = make_adamw(model, config["lr"])
    scheduler = warmup_linear_schedule(optimizer, min(config["warmup"], config["steps"]), config["steps"])
    cls = torch.tensor([data.cls_id])

    def collate_fn(windows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.stack([torch.cat([cls, window]) for window in windows])  # (batch, seq_len): [CLS] first
        return mask_tokens(tokens, data.mask_id, data.bpe.vocab_size, data.special_ids)  # the global generator

    def evaluate(trained: nn.Module, where: torch.device) -> dict[str, float]:
        chosen = labelled_subset(data.train_labels, config["per_class"], config["seed"])
        classifier = copy.deepcopy(trained)
        set_seed(config["seed"])
        classifier.head = ClassificationHead(config["d_model"], len(data.classes), config["dropout"]).to(where)
        fine_tune(classifier, data.train_tokens[chosen], data.train_labels[chosen], config["finetune_steps"],
                  batch_size=config["finetune_batch_size"], lr=config["finetune_lr"], seed=config["seed"],
                  progress=False)
        return {"valid_accuracy": 100 * classifier_accuracy(classifier, data.valid_tokens, data.valid_labels,
                                                            classify=classifier.classify),
                "labelled_examples": len(chosen), "valid_docstrings": len(data.valid_labels)}

    return Setup(model, optimizer, scheduler, _Windows(data.stream, config["seq_len"] - 1), collate_fn,
                 _mlm_forward_step, mlm_loss, evaluate,
                 f"{data.stream.numel():,} pre-training tokens, vocabulary {data.bpe.vocab_size}, "
                 f"{len(data.classes)} classes")


TASKS: dict[str, Task] = {
    "translate": Task("translate", TRANSLATE_DEFAULTS, build_translate,
                      "notebook 07's Transformer: English number words -> German (or your own sentence pairs)",
                      quick=TRANSLATE_QUICK, validate=validate_translate),
    # The ViT's cosine decay reaches its floor at `steps`: a resumed run with another `steps` would reshape it.
    "vit": Task("vit", VIT_DEFAULTS, build_vit, "notebook 08's Vision Transformer on the 8x8 digits",
                quick=VIT_QUICK, schedule_keys=("steps",)),
    "lm": Task("lm", LM_DEFAULTS, build_lm, "notebook 11's GPT language model on the Python manual (or text_file)",
               quick=LM_QUICK, schedule_keys=("steps",)),
    "bert": Task("bert", BERT_DEFAULTS, build_bert,
                 "notebook 12's BERT: masked-language-model pre-training on the standard library's docstrings, "
                 "scored by fine-tuning on the labelled task", quick=BERT_QUICK, schedule_keys=("steps",)),
    # Notebook 14's schedule is a warm-up then a constant rate: `steps` may grow on resume.
    "llama": Task("llama", LLAMA_DEFAULTS, build_llama,
                  "notebook 14's Llama-layout language model (RMSNorm, SwiGLU, RoPE, grouped-query attention; "
                  "window=W for a sliding window) on the Python manual (or text_file)", quick=LLAMA_QUICK,
                  validate=validate_llama),
}

#: Every notebook that trains a model, and how ``course-train`` trains it (``course-train --list``).
NOTEBOOK_MODELS: dict[str, str] = {
    "02_multi_head_attention": "a one-layer attention reader of a toy task: in the notebook (seconds of training)",
    "03_positional_encoding": "a previous-token attention toy: in the notebook (seconds of training)",
    "05_encoder": "a small encoder classifier of a toy task: in the notebook (seconds of training)",
    "06_decoder": "a small encoder-decoder reversing sequences: in the notebook (seconds of training)",
    "07_training_and_decoding": "course-train translate",
    "08_vision_transformer": "course-train vit",
    "09_why_self_attention": "course-train translate --set architecture=gru | gru_additive | transformer (section "
                             "7's three models, with notebook 07's optimiser); the recall toys train in the notebook",
    "10_tokeniser_and_training_loop": "a small GPT trained a few dozen steps with the learner's AdamW and clipping, "
                                      "checkpointed and resumed: in the notebook (seconds of training)",
    "11_language_model": "course-train lm",
    "12_bert": "course-train bert",
    "13_paper_experiments": "course-train translate --set key=value for each of Table 3's variations (num_heads, "
                            "d_k, num_layers, d_model, d_ff, dropout, smoothing, positions=learned); "
                            "course_lib.experiments.ablation.train_variant runs the notebook's grid",
    "14_todays_models": "course-train llama (today's block; the deep dive's LayerNorm + ReLU comparison trains in "
                        "the notebook)",
    "15_inference_at_scale": "course-train llama (--set num_kv_heads=2 for section 1's grouped-query model, 4 | 1 for "
                             "multi-head or multi-query attention, --set window=16 for section 2's sliding window)",
}
