"""Notebook 13's runs (Table 3 in miniature, and the parsing task of Table 4), importable so that runs can go to
other processes.

Notebook 13 trains variants of a small Transformer, each with several seeds, on notebook 07's
English-to-German numbers. The runs are independent, so :func:`course_lib.training.parallel.map_in_processes` gives
each CPU core its own; a function sent to another process must live in a module (the notebook's own
functions cannot be imported there), hence this module:

- :class:`NumberData` and :func:`number_data`: the task's data, built from a small recipe
  (:class:`NumberDataRecipe`) so that each process builds it once (a few seconds) instead of receiving
  16,000 pickled tensors;
- :class:`RunSettings`: the base model and the training protocol shared by every run;
- :func:`build_variant`, :func:`score_model` and :func:`train_variant`: the model with one change, its
  development perplexity and exact match, and one training run that returns its last checkpoints.

The checkpoints come back to the notebook, which averages them with the learner's own function (an
exercise) and scores the average with :func:`score_model`.

The parsing task (the paper's section 6.3) is the same recipe on other data: :func:`parse_data` builds a
generated treebank (:func:`course_lib.data.treebank.make_treebank`) with notebook 07's tokenisers, vocabularies and
datasets, and :func:`train_parser` trains one parser with :func:`course_lib.training.engine.train` and scores its
greedy output (:func:`course_lib.generation.decoding.translate`) with
:func:`course_lib.evaluation.metrics.parse_scores` after each
training budget of :class:`ParseSettings`.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from course_lib.data.translation import (
    BPETokenizer,
    NumberCorpus,
    Pair,
    SpaceTokenizer,
    TranslationDataset,
    Vocab,
    WordTokenizer,
    make_loader,
    make_number_corpus,
)
from course_lib.data.treebank import Treebank, make_treebank
from course_lib.evaluation.metrics import parse_scores, translation_scores
from course_lib.generation.decoding import translate
from course_lib.models.transformer import Transformer, count_parameters, with_key_size, with_learned_positions
from course_lib.training.engine import label_smoothed_cross_entropy, make_optimizer, make_scheduler, train

__all__ = ["NumberDataRecipe", "NumberData", "number_data", "RunSettings", "build_variant", "score_model",
           "train_variant", "TreebankRecipe", "ParseData", "parse_data", "ParseSettings", "build_parser",
           "max_tree_tokens", "score_parser", "train_parser"]


@dataclass(frozen=True)
class NumberDataRecipe:
    """How to build the data: corpus sizes and seed, and the German BPE vocabulary size."""

    n_train: int = 8_000
    n_valid: int = 200
    seed: int = 0
    bpe_vocab_size: int = 120


@dataclass(frozen=True)
class NumberData:
    """The corpus, its tokenisers and vocabularies, and the numericalised training and development sets."""

    corpus: NumberCorpus
    src_tokenizer: WordTokenizer
    bpe: BPETokenizer
    src_vocab: Vocab
    tgt_vocab: Vocab
    train_set: TranslationDataset
    valid_set: TranslationDataset


@functools.lru_cache(maxsize=2)
def number_data(recipe: NumberDataRecipe) -> NumberData:
    """Build (once per process, then cached) notebook 07's task: English words in, German BPE pieces out.

    Deterministic: the same recipe gives the same data in every process. The development numbers are
    never seen in training (``make_number_corpus``'s split).
    """
    corpus = make_number_corpus(n_train=recipe.n_train, n_valid=recipe.n_valid, n_test=0, seed=recipe.seed)
    src_tokenizer = WordTokenizer()
    bpe = BPETokenizer.train([p.tgt for p in corpus.train], vocab_size=recipe.bpe_vocab_size)
    src_vocab = Vocab.build(src_tokenizer.tokenize(p.src) for p in corpus.train)
    tgt_vocab = Vocab.build(bpe.tokenize(p.tgt) for p in corpus.train)
    return NumberData(corpus, src_tokenizer, bpe, src_vocab, tgt_vocab,
                      TranslationDataset(corpus.train, src_tokenizer, bpe, src_vocab, tgt_vocab),
                      TranslationDataset(corpus.valid, src_tokenizer, bpe, src_vocab, tgt_vocab))


@dataclass(frozen=True)
class RunSettings:
    """What every run of a grid shares: the data, the base model, and the training protocol.

    ``base`` holds ``d_model``, ``num_heads``, ``num_layers`` (on each side), ``d_ff``, ``dropout``,
    ``smoothing`` (label smoothing) and ``positions`` (``"sinusoidal"`` or ``"learned"``); a variant's
    changes may also set ``d_k`` (row B). The learning rate follows the paper's warm-up schedule
    (:func:`course_lib.training.engine.make_scheduler`) scaled by ``lr_scale``; the last ``checkpoints``
    checkpoints are ``checkpoint_every`` steps apart and end at step ``train_steps``.
    """

    data: NumberDataRecipe
    base: Mapping[str, object] = field(default_factory=dict)
    train_steps: int = 160
    checkpoints: int = 5
    checkpoint_every: int = 10
    batch_size: int = 64
    warmup: int = 60
    lr_scale: float = 0.5
    decode_max_len: int = 24
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.checkpoints < 1 or self.checkpoint_every < 1:
            raise ValueError(f"RunSettings: checkpoints and checkpoint_every must be >= 1, got "
                             f"{self.checkpoints} and {self.checkpoint_every}")
        if self.train_steps < (self.checkpoints - 1) * self.checkpoint_every + 1:
            raise ValueError(f"RunSettings: train_steps={self.train_steps} cannot hold {self.checkpoints} "
                             f"checkpoints {self.checkpoint_every} steps apart")


def build_variant(cfg: Mapping[str, object], data: NumberData, device: torch.device | str = "cpu") -> Transformer:
    """The pre-LN Transformer described by ``cfg`` (the base with a variant's changes), on ``device``.

    ``num_heads``, ``num_layers``, ``d_model``, ``d_ff`` and ``dropout`` go to the constructor; ``d_k``
    (row B) replaces every attention by one whose queries and keys have ``d_k`` features per head
    (:func:`course_lib.models.transformer.with_key_size`); ``positions="learned"`` (row E) replaces the sinusoids.
    """
    model = Transformer(len(data.src_vocab), len(data.tgt_vocab), d_model=cfg["d_model"],
                        num_heads=cfg["num_heads"], num_encoder_layers=cfg["num_layers"],
                        num_decoder_layers=cfg["num_layers"], d_ff=cfg["d_ff"], dropout=cfg["dropout"],
                        max_len=64, norm_first=True)
    if "d_k" in cfg:
        with_key_size(model, cfg["d_k"])
    if cfg["positions"] == "learned":
        with_learned_positions(model)
    return model.to(device)


@torch.no_grad()
def score_model(model: Transformer, data: NumberData, max_len: int = 24) -> dict[str, float]:
    """Development perplexity per BPE piece (teacher forcing, no smoothing) and exact match of greedy output.

    Returns ``{"ppl": ..., "exact": ...}`` (exact match in percent). The model is left in eval mode.
    """
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for batch in make_loader(data.valid_set, 200, shuffle=False):
        batch = batch.to(device)
        logits = model(batch.src, batch.tgt_in)  # (batch, tgt_len, vocab)
        keep = batch.tgt_out != batch.pad_id
        total += F.cross_entropy(logits[keep], batch.tgt_out[keep], reduction="sum").item()
        count += int(keep.sum())
    valid = data.corpus.valid
    hyps = translate(model, [p.src for p in valid], data.src_tokenizer, data.src_vocab, data.bpe, data.tgt_vocab,
                     max_len=max_len)
    exact = translation_scores(hyps, [p.tgt for p in valid])["exact"]
    return {"ppl": math.exp(total / count), "exact": exact}


def train_variant(changes: Mapping[str, object], seed: int, settings: RunSettings) -> dict[str, object]:
    """Train the base model with ``changes`` for ``settings.train_steps`` steps with ``seed``.

    The seed fixes the initialisation and the batch order. Returns ``final`` (the final model's
    :func:`score_model`), ``checkpoints`` (the last ``settings.checkpoints`` state_dicts, oldest first, the
    last one the final model's), ``seconds`` and ``tokens`` of training, and ``params``.
    """
    from course_lib.runtime import set_seed

    cfg = dict(settings.base) | dict(changes)
    data = number_data(settings.data)
    set_seed(seed)
    model = build_variant(cfg, data, settings.device)
    optimizer = make_optimizer(model)
    scheduler = make_scheduler(optimizer, cfg["d_model"], warmup=settings.warmup, scale=settings.lr_scale)
    loader = make_loader(data.train_set, settings.batch_size, seed=seed)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return label_smoothed_cross_entropy(logits, target, cfg["smoothing"], data.tgt_vocab.pad_id)

    def snapshot() -> dict[str, torch.Tensor]:
        return {k: v.detach().clone().cpu() for k, v in model.state_dict().items()}

    first = settings.train_steps - (settings.checkpoints - 1) * settings.checkpoint_every
    history = train(model, loader, first, optimizer, scheduler, loss_fn=loss_fn, device=settings.device,
                    progress=False)
    checkpoints = [snapshot()]
    for _ in range(settings.checkpoints - 1):
        train(model, loader, settings.checkpoint_every, optimizer, scheduler, loss_fn=loss_fn,
              device=settings.device, progress=False, history=history)
        checkpoints.append(snapshot())
    return {"final": score_model(model, data, settings.decode_max_len), "checkpoints": checkpoints,
            "seconds": history.seconds, "tokens": history.tokens, "params": count_parameters(model)}


# ---------------------------------------------------------------------------------------------------
# The parsing task (the paper's section 6.3, Table 4)
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TreebankRecipe:
    """How to build the parsing data: the split sizes, the grammar's nesting depth and the seed of the draw."""

    n_train: int = 4_000
    n_valid: int = 200
    n_test: int = 400
    max_depth: int = 2
    seed: int = 0


@dataclass(frozen=True)
class ParseData:
    """The treebank, notebook 07's tokenisers and vocabularies for it, and the numericalised training set."""

    treebank: Treebank
    src_tokenizer: WordTokenizer
    tgt_tokenizer: SpaceTokenizer
    src_vocab: Vocab
    tgt_vocab: Vocab
    train_set: TranslationDataset
    max_output: int   # tokens of the longest tree a parser may write (max_tree_tokens of the longest sentence)


@functools.lru_cache(maxsize=2)
def parse_data(recipe: TreebankRecipe) -> ParseData:
    """Build (once per process, then cached) the parsing task: words in, linearised trees out.

    Deterministic: the same recipe gives the same data in every process. Both vocabularies are built from the
    training split only.
    """
    bank = make_treebank(recipe.n_train, recipe.n_valid, recipe.n_test, recipe.max_depth, recipe.seed)
    words, trees = WordTokenizer(), SpaceTokenizer()
    src_vocab = Vocab.build(words.tokenize(p.src) for p in bank.train)
    tgt_vocab = Vocab.build(trees.tokenize(p.tgt) for p in bank.train)
    longest = max_tree_tokens(max(len(words.tokenize(p.src)) for p in bank.train + bank.valid + bank.test))
    return ParseData(bank, words, trees, src_vocab, tgt_vocab,
                     TranslationDataset(bank.train, words, trees, src_vocab, tgt_vocab), longest)


@dataclass(frozen=True)
class ParseSettings:
    """One parsing run: the data, the model (``d_model``, ``num_heads``, ``num_layers`` on each side, ``d_ff``,
    ``dropout``), the recipe (batch size, label ``smoothing``, the warm-up schedule scaled by ``lr_scale``), the
    training ``budgets`` (the step counts after which the parser is scored, increasing) and the split scored
    (``"test"`` or ``"valid"``)."""

    data: TreebankRecipe
    budgets: tuple[int, ...] = (100, 200, 400)
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    d_ff: int = 128
    dropout: float = 0.1
    smoothing: float = 0.1
    batch_size: int = 64
    warmup: int = 100
    lr_scale: float = 1.0
    split: str = "test"
    device: str = "cpu"

    def __post_init__(self) -> None:
        budgets = list(self.budgets)
        if not budgets or budgets[0] < 1 or budgets != sorted(set(budgets)):
            raise ValueError(f"ParseSettings: budgets must be increasing step counts >= 1, got {self.budgets}")
        if self.split not in ("test", "valid"):
            raise ValueError(f"ParseSettings: split must be 'test' or 'valid', got {self.split!r}")


def build_parser(settings: ParseSettings, data: ParseData) -> Transformer:
    """The pre-LN encoder-decoder of notebook 07 at the size ``settings`` gives, with positions for the longest
    output decoding allows (``<bos>`` and :func:`max_tree_tokens` of the longest sentence)."""
    model = Transformer(len(data.src_vocab), len(data.tgt_vocab), d_model=settings.d_model,
                        num_heads=settings.num_heads, num_encoder_layers=settings.num_layers,
                        num_decoder_layers=settings.num_layers, d_ff=settings.d_ff, dropout=settings.dropout,
                        max_len=data.max_output + 1, norm_first=True)
    return model.to(settings.device)


def max_tree_tokens(words: int) -> int:
    """How many tokens a parser may write for a sentence of ``words`` words: 5 per word and 5 more.

    The paper let its parser write up to the input's length + 300 tokens. Our bound also grows with the
    input, with room to spare: no tree of the generated treebank has more than 4 tokens per word plus 4
    (``tests/experiments/test_parsing.py`` checks it), and an output cut at the bound is not a tree.
    """
    return 5 * words + 5


def score_parser(model: Transformer, data: ParseData, pairs: list[Pair]) -> tuple[dict[str, float], list[str]]:
    """Parse ``pairs``' sentences greedily and score the trees: ``(parse_scores(...), the output trees)``.

    Sentences of the same length are decoded together, each group up to :func:`max_tree_tokens` tokens (so a
    model that never writes ``<eos>`` costs little on short sentences). The model is left in eval mode.
    """
    hypotheses = [""] * len(pairs)
    by_length: dict[int, list[int]] = {}
    for i, pair in enumerate(pairs):
        by_length.setdefault(len(data.src_tokenizer.tokenize(pair.src)), []).append(i)
    for words, group in sorted(by_length.items()):
        trees = translate(model, [pairs[i].src for i in group], data.src_tokenizer, data.src_vocab,
                          data.tgt_tokenizer, data.tgt_vocab, max_len=max_tree_tokens(words))
        for i, tree in zip(group, trees, strict=True):
            hypotheses[i] = tree
    return parse_scores(hypotheses, [p.tgt for p in pairs]), hypotheses


def _endless(loader: Iterable) -> Iterator:
    """The loader's batches, epoch after epoch, as one iterator: train() called on it again continues where it
    stopped (called on the loader itself, it would start a new epoch, and a new shuffle, at every call)."""
    while True:
        yield from loader


def train_parser(seed: int, settings: ParseSettings) -> dict[str, object]:
    """Train one parser with ``seed`` and score it after each of ``settings.budgets`` steps.

    One run of :func:`course_lib.training.engine.train` continued budget after budget (the same optimizer, schedule
    and batch stream: scoring in between changes nothing in the training). Returns ``steps`` (the budgets),
    ``scores`` (one :func:`course_lib.evaluation.metrics.parse_scores` per budget, on ``settings.split``),
    ``train_seconds`` (training time up to each budget) and ``parse_seconds`` (each scoring's time),
    ``hypotheses`` (the last budget's output trees), ``params`` and ``seed``.
    """
    from course_lib.runtime import set_seed

    data = parse_data(settings.data)
    pairs = getattr(data.treebank, settings.split)
    set_seed(seed)
    model = build_parser(settings, data)
    optimizer = make_optimizer(model)
    scheduler = make_scheduler(optimizer, settings.d_model, warmup=settings.warmup, scale=settings.lr_scale)
    # One stream of batches for every budget: each call of train() starts a new pass over a loader it is given
    # (a new shuffle), so handing it the loader itself at each budget would make the scoring change the training.
    batches = _endless(make_loader(data.train_set, settings.batch_size, seed=seed))

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return label_smoothed_cross_entropy(logits, target, settings.smoothing, data.tgt_vocab.pad_id)

    history = None
    result: dict[str, object] = {"steps": list(settings.budgets), "scores": [], "train_seconds": [],
                                 "parse_seconds": [], "seed": seed, "params": count_parameters(model)}
    for budget in settings.budgets:
        history = train(model, batches, budget - (history.steps if history else 0), optimizer, scheduler,
                        loss_fn=loss_fn, device=settings.device, progress=False, history=history)
        start = time.perf_counter()
        scores, hypotheses = score_parser(model, data, pairs)
        result["parse_seconds"].append(time.perf_counter() - start)
        result["scores"].append(scores)
        result["train_seconds"].append(history.seconds)
    result["hypotheses"] = hypotheses
    return result
