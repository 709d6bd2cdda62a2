"""Text for the translation notebook (07): a generated corpus, tokenisers, vocabularies and padded batches.

This module does the jobs torchtext used to do, for a corpus that needs no download: integers written
as English words (the source) and as German words (the target), generated with ``num2words``::

    64     "sixty-four"                      -> "vierundsechzig"         (four-and-sixty)
    12345  "twelve thousand, three hundred   -> "zwölftausenddreihundertfünfundvierzig"
            and forty-five"

German puts the units before the tens ("vier-und-sechzig"), so the model must learn a real reordering,
and it writes a number as one long word, so a target tokeniser has to cut it into pieces.

The pipeline, each step a small public name:

1. :func:`make_number_corpus` -> :class:`NumberCorpus` with ``train``/``valid``/``test`` lists of
   :class:`Pair`; a number is in exactly one split, so test numbers never appear in training.
2. Tokenisers turn a string into a list of token strings and back: :class:`WordTokenizer` (English:
   words and punctuation), :class:`SpaceTokenizer` (tokens already cut, separated by spaces: the parsing
   task's trees), :class:`CharTokenizer` (German, one token per character) and
   :class:`BPETokenizer` (German sub-word pieces, Byte-Pair Encoding trained offline on the training
   split with Hugging Face ``tokenizers``).
3. :class:`Vocab` maps token strings to ids and back, with the special tokens ``<pad>`` = 0, ``<bos>``,
   ``<eos>`` and ``<unk>``.
4. :class:`TranslationDataset` holds id sequences; :func:`collate` pads a list of examples into a
   :class:`Batch` with the decoder's shifted input and output (``tgt_in`` starts with ``<bos>``,
   ``tgt_out`` ends with ``<eos>``); :class:`LengthBucketSampler` groups examples of similar length so
   that batches carry little padding; :func:`make_loader` puts it together on ``torch.utils.data``.
"""

from __future__ import annotations

import functools
import os
import random
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

__all__ = [
    "PAD", "BOS", "EOS", "UNK", "SPECIALS",
    "Pair", "NumberCorpus", "number_to_words", "make_number_corpus",
    "Tokenizer", "WordTokenizer", "SpaceTokenizer", "CharTokenizer", "learn_bpe", "BPETokenizer",
    "Vocab", "TranslationDataset", "Batch", "collate", "LengthBucketSampler", "make_loader",
    "read_tsv_pairs", "write_tsv_pairs", "read_parallel_files", "split_pairs",
]

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS: tuple[str, ...] = (PAD, BOS, EOS, UNK)  # ids 0, 1, 2, 3 in every Vocab


# ---------------------------------------------------------------------------------------------------
# 1. The corpus
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pair:
    """One example: the integer, its English words (source) and its German words (target)."""

    number: int
    src: str
    tgt: str


@dataclass(frozen=True)
class NumberCorpus:
    """Three disjoint splits of number translations; no number appears in two splits."""

    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    max_number: int
    seed: int

    def __repr__(self) -> str:
        return (f"NumberCorpus(train={len(self.train)}, valid={len(self.valid)}, test={len(self.test)}, "
                f"numbers 0..{self.max_number}, seed={self.seed})")


def number_to_words(number: int, lang: str = "en") -> str:
    """``number`` written in words by ``num2words`` (``lang`` "en" or "de").

    Below a million, in English and German, the words are joined from two parts that ``num2words`` wrote
    and that are kept after their first use: the thousands (``number`` rounded down to a multiple of 1000)
    and the rest (below 1000). German joins them directly ("zweitausend" + "eins"); English with ", "
    before hundreds and " and " before a smaller rest ("two thousand, one hundred"; "two thousand and
    one"). The result is ``num2words(number, lang=lang)`` exactly: all 1,000,000 numbers below a million
    were compared in both languages, and ``tests/data/test_text.py`` compares a sample. A corpus of 43,000
    numbers then needs about 4,000 calls of ``num2words`` instead of 86,000 (9 s less in notebook 07).

    Example:
        >>> number_to_words(64), number_to_words(64, "de")
        ('sixty-four', 'vierundsechzig')
        >>> number_to_words(1101), number_to_words(1101, "de")
        ('one thousand, one hundred and one', 'eintausendeinhunderteins')
    """
    if not isinstance(number, int) or isinstance(number, bool) or number < 0:
        raise ValueError(f"number_to_words: number must be a non-negative int, got {number!r}")
    if number < 1000:
        return _num2words_part(number, lang)
    if lang not in ("en", "de") or number >= 1_000_000:
        return _num2words(number, lang)
    thousands, rest = divmod(number, 1000)
    head = _num2words_part(thousands * 1000, lang)  # "two thousand", "zweitausend"
    if rest == 0:
        return head
    if lang == "de":
        return head + _num2words_part(rest, lang)
    return head + (", " if rest >= 100 else " and ") + _num2words_part(rest, lang)


def _num2words(number: int, lang: str) -> str:
    """``num2words`` itself, imported on first use."""
    from num2words import num2words

    return num2words(number, lang=lang)


@functools.lru_cache(maxsize=4096)
def _num2words_part(number: int, lang: str) -> str:
    """``num2words`` for the parts that :func:`number_to_words` joins (below 1000, or whole thousands)."""
    return _num2words(number, lang)


def make_number_corpus(n_train: int = 40_000, n_valid: int = 1_000, n_test: int = 2_000,
                       max_number: int = 999_999, seed: int = 0) -> NumberCorpus:
    """Generate English -> German number translations, split so that test numbers never appear in training.

    Numbers are drawn without replacement from ``0..max_number`` with a length-balanced scheme: first a
    number of digits uniformly in ``1..len(str(max_number))``, then a number with that many digits
    uniformly (so that short numbers, rare under a uniform draw, are still seen). The distinct numbers
    are shuffled and cut into the three splits, so each number belongs to exactly one split.

    Args:
        n_train, n_valid, n_test: the sizes of the splits.
        max_number: the largest number (below one million German writes a number as a single word).
        seed: the seed of the draw (the corpus is the same for the same arguments on any machine).

    Example:
        >>> corpus = make_number_corpus(200, 20, 20, max_number=9999, seed=0)
        >>> len(corpus.train), {p.number for p in corpus.train} & {p.number for p in corpus.test}
        (200, set())
    """
    for name, value in (("n_train", n_train), ("n_valid", n_valid), ("n_test", n_test)):
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"make_number_corpus: {name} must be an int >= 0, got {value!r}")
    if not isinstance(max_number, int) or not 0 < max_number < 1_000_000:
        raise ValueError(f"make_number_corpus: max_number must be an int in 1..999999, got {max_number!r}")
    total = n_train + n_valid + n_test
    if total > max_number + 1:
        raise ValueError(f"make_number_corpus: {total} distinct numbers requested but only "
                         f"{max_number + 1} exist in 0..{max_number}")
    rng = random.Random(seed)
    max_digits = len(str(max_number))
    chosen: set[int] = set()
    if total > (max_number + 1) // 2:  # a dense request: sample the range directly
        chosen = set(rng.sample(range(max_number + 1), total))
    while len(chosen) < total:
        digits = rng.randint(1, max_digits)
        low = 0 if digits == 1 else 10 ** (digits - 1)
        high = min(10 ** digits - 1, max_number)
        if low <= high:
            chosen.add(rng.randint(low, high))
    numbers = sorted(chosen)
    rng.shuffle(numbers)
    pairs = [Pair(n, number_to_words(n, "en"), number_to_words(n, "de")) for n in numbers]
    return NumberCorpus(train=pairs[:n_train], valid=pairs[n_train:n_train + n_valid],
                        test=pairs[n_train + n_valid:], max_number=max_number, seed=seed)


# ---------------------------------------------------------------------------------------------------
# 2. Tokenisers: string -> list of token strings -> string
# ---------------------------------------------------------------------------------------------------

class Tokenizer(Protocol):
    """What the course calls a tokeniser: ``tokenize(text) -> list[str]`` and its inverse ``detokenize``."""

    def tokenize(self, text: str) -> list[str]: ...

    def detokenize(self, tokens: Sequence[str]) -> str: ...


class WordTokenizer:
    """Words and punctuation as tokens: ``"forty-five"`` -> ``["forty", "-", "five"]``.

    English number words have a tiny vocabulary (about 35 tokens), so the source side needs no sub-words.
    :meth:`detokenize` rebuilds the text: spaces between words, none around ``-``, none before ``,``.

    Example:
        >>> WordTokenizer().tokenize("twelve thousand, three hundred and forty-five")
        ['twelve', 'thousand', ',', 'three', 'hundred', 'and', 'forty', '-', 'five']
    """

    _pattern = re.compile(r"\w+|[^\w\s]")

    def tokenize(self, text: str) -> list[str]:
        return self._pattern.findall(text)

    def detokenize(self, tokens: Sequence[str]) -> str:
        text = " ".join(tokens)
        return text.replace(" - ", "-").replace(" ,", ",")


class SpaceTokenizer:
    """Tokens separated by white space, joined back with one space: for text whose tokens are already cut.

    The linearised trees of the parsing task (notebook 13) are such text: ``"(S (NP DT NN ) )"`` is the tokens
    ``["(S", "(NP", "DT", "NN", ")", ")"]``, one token per bracket and label, as Vinyals et al. (2015) cut them.

    Example:
        >>> SpaceTokenizer().tokenize("(S (NP DT NN ) )")
        ['(S', '(NP', 'DT', 'NN', ')', ')']
    """

    def tokenize(self, text: str) -> list[str]:
        return text.split()

    def detokenize(self, tokens: Sequence[str]) -> str:
        return " ".join(tokens)


class CharTokenizer:
    """One token per character: ``"vierzig"`` -> ``["v", "i", "e", "r", "z", "i", "g"]``.

    The smallest vocabulary and the longest sequences: a six-digit German number is 40 to 60 characters.

    Example:
        >>> CharTokenizer().detokenize(CharTokenizer().tokenize("elf"))
        'elf'
    """

    def tokenize(self, text: str) -> list[str]:
        return list(text)

    def detokenize(self, tokens: Sequence[str]) -> str:
        return "".join(tokens)


def learn_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int = 2, special_tokens: Sequence[str] = (),
              level: Literal["character", "byte"] = "character"):
    """Learn Byte-Pair Encoding merges from ``texts`` with Hugging Face ``tokenizers``; returns the trained
    ``tokenizers.Tokenizer``. The merge learning of both of the course's BPE tokenisers.

    BPE starts from single symbols and repeatedly merges the most frequent adjacent pair until the
    vocabulary has ``vocab_size`` entries (pairs seen fewer than ``min_frequency`` times are never merged).
    The symbols are

    - ``level="character"`` (:class:`BPETokenizer`): the characters of whitespace-separated words; a piece
      that ends a word carries ``</w>``; a character never seen is ``<unk>`` (the first special token);
    - ``level="byte"`` (:class:`course_lib.data.python_docs.ByteBPE`, GPT-2's scheme): the 256 byte values of the UTF-8
      text, spaces included (shown as ``Ġ``), so that nothing is unknown.

    ``special_tokens`` get the first ids, in order, and are never cut or produced by a merge. Deterministic.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = list(texts)
    if level == "character":
        tok = Tokenizer(models.BPE(unk_token=UNK, end_of_word_suffix="</w>"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.decoder = decoders.BPEDecoder(suffix="</w>")
        specials, options = [UNK, *special_tokens], {"end_of_word_suffix": "</w>"}
        # Every character also as a one-letter word, so that each exists as a word-final piece ("l</w>"):
        # a test word ending in a letter no training word ends in ("null") still has pieces, not <unk>.
        texts += sorted(set("".join(texts)) - {" "})
    elif level == "byte":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        specials, options = list(special_tokens), {"initial_alphabet": pre_tokenizers.ByteLevel.alphabet()}
    else:
        raise ValueError(f"learn_bpe: level must be 'character' or 'byte', got {level!r}")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
                                  show_progress=False, **options)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


class BPETokenizer:
    """Sub-word pieces learned by Byte-Pair Encoding over characters (Hugging Face ``tokenizers``), offline.

    BPE starts from characters and repeatedly merges the most frequent adjacent pair of symbols in the
    training text until the vocabulary has ``vocab_size`` entries. On German numbers it learns pieces such
    as ``"hundert"``, ``"tausend"``, ``"und"``, ``"zwanzig"``: sequences become 5 to 10 times shorter than
    with characters, and each piece carries a meaning the model can align with the English words.
    Pieces that end a word carry the suffix ``</w>``, so :meth:`detokenize` can restore spaces.

    Why the course has two BPE tokenisers: this one works on characters and gives readable pieces (strings)
    that a :class:`Vocab` numbers beside words, with an ``<unk>`` piece for a character never seen;
    :class:`course_lib.data.python_docs.ByteBPE` (notebooks 11 and 12, GPT-2's scheme) works on bytes and never meets
    an unknown symbol. Notebook 07 contrasts the two on Korean text (every Hangul syllable is ``<unk>`` here,
    three bytes there). Both learn their merges with :func:`learn_bpe`.

    Use :meth:`train` (the constructor wraps an already-trained ``tokenizers.Tokenizer``).

    Example:
        >>> bpe = BPETokenizer.train(["vierundsechzig", "dreiundsechzig", "vierzig"], vocab_size=40)
        >>> bpe.detokenize(bpe.tokenize("vierundsechzig"))
        'vierundsechzig'
    """

    def __init__(self, tokenizer) -> None:  # a trained tokenizers.Tokenizer
        self._tok = tokenizer

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 200, min_frequency: int = 2) -> BPETokenizer:
        """Learn BPE merges from ``texts`` (the training split only: the test set stays unseen)."""
        if vocab_size < 2:
            raise ValueError(f"BPETokenizer.train: vocab_size must be >= 2, got {vocab_size}")
        texts = list(texts)
        if not texts:
            raise ValueError("BPETokenizer.train: texts is empty")
        return cls(learn_bpe(texts, vocab_size, min_frequency, level="character"))

    @property
    def vocab_size(self) -> int:
        """The number of pieces learned (the ``<unk>`` piece included)."""
        return self._tok.get_vocab_size()

    def tokenize(self, text: str) -> list[str]:
        return self._tok.encode(text).tokens

    def detokenize(self, tokens: Sequence[str]) -> str:
        return self._tok.decoder.decode(list(tokens))


# ---------------------------------------------------------------------------------------------------
# 3. The vocabulary
# ---------------------------------------------------------------------------------------------------

class Vocab:
    """Token strings <-> integer ids, with the special tokens ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2,
    ``<unk>`` = 3.

    ``<pad>`` fills batches to a common length and is ignored by the loss and masked in attention;
    ``<bos>`` starts every decoder input; ``<eos>`` ends every target (the model learns when to stop);
    ``<unk>`` stands for a token the vocabulary does not know.

    Example:
        >>> v = Vocab.build([["a", "b"], ["b", "c"]])
        >>> v.encode(["b", "z"]), v.decode([5, 2, 0])
        ([4, 3], ['a'])
        >>> len(v), v.pad_id, v.lookup_token(4)
        (7, 0, 'b')
    """

    def __init__(self, tokens: Sequence[str]) -> None:
        tokens = list(tokens)
        if tuple(tokens[:len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"Vocab: the first tokens must be {SPECIALS}, got {tuple(tokens[:4])}")
        if len(set(tokens)) != len(tokens):
            dup = [t for t, c in Counter(tokens).items() if c > 1]
            raise ValueError(f"Vocab: duplicate tokens {dup[:5]}")
        self.itos: list[str] = tokens
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(tokens)}

    @classmethod
    def build(cls, token_lists: Iterable[Sequence[str]], min_freq: int = 1) -> Vocab:
        """The specials, then every token seen at least ``min_freq`` times, most frequent first (ties in
        first-seen order, so the ids are the same on every run)."""
        counts: Counter[str] = Counter()
        for tokens in token_lists:
            counts.update(tokens)
        kept = [t for t, c in sorted(counts.items(), key=lambda tc: -tc[1]) if c >= min_freq and t not in SPECIALS]
        return cls(list(SPECIALS) + kept)

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens: {self.itos[:8]}...)"

    def lookup_id(self, token: str) -> int:
        """The id of ``token``, or the id of ``<unk>`` when it is unknown."""
        return self.stoi.get(token, self.unk_id)

    def lookup_token(self, index: int) -> str:
        """The token of id ``index``; an IndexError naming the vocabulary size when out of range."""
        if not 0 <= int(index) < len(self.itos):
            raise IndexError(f"Vocab.lookup_token: id {index} is outside 0..{len(self.itos) - 1}")
        return self.itos[int(index)]

    def encode(self, tokens: Sequence[str], unknown: Literal["unk", "error"] = "unk",
               add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token strings -> ids. Unknown tokens become ``<unk>`` (``unknown="unk"``, the default) or raise a
        KeyError naming them (``unknown="error"``). ``add_bos``/``add_eos`` wrap the sequence."""
        if unknown not in ("unk", "error"):
            raise ValueError(f"Vocab.encode: unknown must be 'unk' or 'error', got {unknown!r}")
        if unknown == "error":
            missing = [t for t in tokens if t not in self.stoi]
            if missing:
                raise KeyError(f"Vocab.encode: tokens not in the vocabulary: {missing[:10]}")
        ids = [self.lookup_id(t) for t in tokens]
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Iterable[int], stop_at_eos: bool = True) -> list[str]:
        """Ids -> token strings, dropping ``<pad>`` and ``<bos>`` and (by default) stopping at ``<eos>``."""
        out: list[str] = []
        for i in ids:
            i = int(i)
            if i == self.eos_id and stop_at_eos:
                break
            if i in (self.pad_id, self.bos_id, self.eos_id):
                continue
            out.append(self.lookup_token(i))
        return out


# ---------------------------------------------------------------------------------------------------
# 4. Datasets and padded batches
# ---------------------------------------------------------------------------------------------------

class TranslationDataset(Dataset):
    """Tokenised and numericalised pairs: item ``i`` is ``(src_ids, tgt_ids)``, two 1-D LongTensors.

    ``src_ids`` holds the source tokens; ``tgt_ids`` holds ``<bos>`` + the target tokens + ``<eos>``, from
    which :func:`collate` cuts the decoder's input and output.

    Example:
        >>> pairs = [Pair(5, "five", "fünf")]
        >>> ds = TranslationDataset(pairs, WordTokenizer(), CharTokenizer(),
        ...                         Vocab.build([["five"]]), Vocab.build([list("fünf")]))
        >>> ds[0]
        (tensor([4]), tensor([1, 4, 5, 6, 4, 2]))
    """

    def __init__(self, pairs: Sequence[Pair], src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer,
                 src_vocab: Vocab, tgt_vocab: Vocab) -> None:
        self.pairs = list(pairs)
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        self.src = [torch.tensor(src_vocab.encode(src_tokenizer.tokenize(p.src)), dtype=torch.long)
                    for p in self.pairs]
        self.tgt = [torch.tensor(tgt_vocab.encode(tgt_tokenizer.tokenize(p.tgt), add_bos=True, add_eos=True),
                                 dtype=torch.long) for p in self.pairs]

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.src[index], self.tgt[index]

    def lengths(self) -> list[int]:
        """The length of each example (source and target tokens together), for length bucketing."""
        return [len(s) + len(t) for s, t in zip(self.src, self.tgt, strict=True)]


@dataclass
class Batch:
    """A padded batch. ``src`` (batch, src_len); ``tgt_in`` (batch, tgt_len) = ``<bos>`` y1 ... yn;
    ``tgt_out`` (batch, tgt_len) = y1 ... yn ``<eos>``: position t of ``tgt_in`` predicts position t of
    ``tgt_out`` (teacher forcing). Padding is ``pad_id`` everywhere."""

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    pad_id: int = 0

    def to(self, device: torch.device | str) -> Batch:
        """The same batch on ``device``."""
        return Batch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device), self.pad_id)

    @property
    def num_tgt_tokens(self) -> int:
        """The number of target tokens the loss counts (padding excluded)."""
        return int((self.tgt_out != self.pad_id).sum())

    @property
    def src_mask(self) -> torch.Tensor:
        """Padding mask of the source, (batch, 1, 1, src_len), True at real tokens."""
        from course_lib.models.masking import padding_mask

        return padding_mask(self.src, self.pad_id)

    @property
    def tgt_mask(self) -> torch.Tensor:
        """The decoder's self-attention mask, (batch, 1, tgt_len, tgt_len): causal and not padding."""
        from course_lib.models.masking import decoder_mask

        return decoder_mask(self.tgt_in, self.pad_id)


def _pad(seqs: Sequence[torch.Tensor], pad_id: int) -> torch.Tensor:
    longest = max(len(s) for s in seqs)
    out = torch.full((len(seqs), longest), pad_id, dtype=torch.long)  # (batch, longest)
    for i, s in enumerate(seqs):
        out[i, :len(s)] = s
    return out


def collate(examples: Sequence[tuple[torch.Tensor, torch.Tensor]], pad_id: int = 0, eos_id: int = 2) -> Batch:
    """Pad a list of ``(src_ids, tgt_ids)`` examples into a :class:`Batch` with shifted targets.

    ``tgt_ids`` is ``<bos> y1 ... yn <eos>``; ``tgt_in`` drops its last token and ``tgt_out`` its first,
    so both have the same length and ``tgt_out`` is ``tgt_in`` shifted left by one. In a row shorter than
    the longest, the ``<eos>`` that would appear in ``tgt_in`` becomes padding: nothing follows it.

    Example:
        >>> b = collate([(torch.tensor([7, 8]), torch.tensor([1, 5, 6, 2])),
        ...              (torch.tensor([9]), torch.tensor([1, 5, 2]))])
        >>> b.src.tolist(), b.tgt_in.tolist(), b.tgt_out.tolist()
        ([[7, 8], [9, 0]], [[1, 5, 6], [1, 5, 0]], [[5, 6, 2], [5, 2, 0]])
    """
    if len(examples) == 0:
        raise ValueError("collate: examples is empty")
    for i, (src, tgt) in enumerate(examples):
        if src.dim() != 1 or len(src) == 0:
            raise ValueError(f"collate: example {i} has an empty or non 1-D source of shape {tuple(src.shape)}")
        if tgt.dim() != 1 or len(tgt) < 2:
            raise ValueError(f"collate: example {i} needs a target of at least 2 ids (<bos> ... <eos>), "
                             f"got shape {tuple(tgt.shape)}")
    src = _pad([s for s, _ in examples], pad_id)  # (batch, src_len)
    tgt = _pad([t for _, t in examples], pad_id)  # (batch, tgt_len + 1)
    tgt_in = tgt[:, :-1].masked_fill(tgt[:, :-1] == eos_id, pad_id)  # (batch, tgt_len)
    return Batch(src=src, tgt_in=tgt_in, tgt_out=tgt[:, 1:], pad_id=pad_id)


class LengthBucketSampler(Sampler[list[int]]):
    """Batches of examples of similar length, in random order: less padding, the same randomness.

    Each epoch shuffles the indices, cuts them into pools of ``batch_size * pool_factor`` examples, sorts
    each pool by length, cuts it into batches, and shuffles the batches. A batch of similar lengths wastes
    little compute on padding; the pools keep batches from being always the same.

    Example:
        >>> s = LengthBucketSampler([3, 1, 2, 9, 8, 7], batch_size=3, pool_factor=2, seed=0)
        >>> sorted(sorted(b) for b in s)
        [[0, 1, 2], [3, 4, 5]]
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, pool_factor: int = 50, seed: int = 0,
                 drop_last: bool = False) -> None:
        if batch_size < 1 or pool_factor < 1:
            raise ValueError(f"LengthBucketSampler: batch_size and pool_factor must be >= 1, "
                             f"got {batch_size} and {pool_factor}")
        self.lengths = list(lengths)
        self.batch_size, self.pool_factor, self.drop_last = batch_size, pool_factor, drop_last
        self._rng = random.Random(seed)

    def __iter__(self) -> Iterator[list[int]]:
        order = list(range(len(self.lengths)))
        self._rng.shuffle(order)
        pool = self.batch_size * self.pool_factor
        batches: list[list[int]] = []
        for start in range(0, len(order), pool):
            chunk = sorted(order[start:start + pool], key=lambda i: self.lengths[i])
            for b in range(0, len(chunk), self.batch_size):
                batch = chunk[b:b + self.batch_size]
                if len(batch) == self.batch_size or not self.drop_last:
                    batches.append(batch)
        self._rng.shuffle(batches)
        return iter(batches)

    def __len__(self) -> int:
        n = len(self.lengths)
        full, rest = divmod(n, self.batch_size)
        if self.drop_last:
            return full
        pool = self.batch_size * self.pool_factor  # partial batches appear once per pool
        return sum(-(-min(pool, n - s) // self.batch_size) for s in range(0, n, pool)) if n else 0


def make_loader(dataset: TranslationDataset, batch_size: int, shuffle: bool = True, bucket: bool = True,
                seed: int = 0) -> DataLoader:
    """A ``DataLoader`` of padded :class:`Batch` objects over ``dataset``.

    ``bucket=True`` groups similar lengths (:class:`LengthBucketSampler`, random order when ``shuffle``);
    ``bucket=False`` gives plain shuffled (or sequential) batches.
    """
    pad_id = dataset.tgt_vocab.pad_id
    if bucket:
        if shuffle:
            sampler = LengthBucketSampler(dataset.lengths(), batch_size, seed=seed)
        else:  # sorted by length, deterministic: for evaluation
            order = sorted(range(len(dataset)), key=lambda i: dataset.lengths()[i])
            sampler = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=lambda ex: collate(ex, pad_id))
    gen = torch.Generator().manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=gen,
                      collate_fn=lambda ex: collate(ex, pad_id))


# ---------------------------------------------------------------------------------------------------
# 5. Real sentences from files (nothing is downloaded: you bring the file)
# ---------------------------------------------------------------------------------------------------

def _read_lines(path: str | os.PathLike, encoding: str) -> list[str]:
    """The lines of a text file without their line endings (a clear error when the file is missing)."""
    try:
        with open(path, encoding=encoding, newline="") as f:
            return [line.rstrip("\r\n") for line in f]
    except FileNotFoundError:
        raise FileNotFoundError(f"no such file: {os.fspath(path)!r}") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{os.fspath(path)}: not {encoding} text ({error.reason} at byte {error.start})") from None


def read_tsv_pairs(path: str | os.PathLike, encoding: str = "utf-8", skip_blank: bool = True) -> list[Pair]:
    """Sentence pairs from a tab-separated file: ``source<TAB>target`` or ``source<TAB>target<TAB>attribution``.

    The format of the Tatoeba sentence pairs that many tutorials use (``eng-deu.txt`` from the
    ``deu-eng.zip`` of manythings.org/anki, or an export from tatoeba.org): one pair a line, the English
    sentence, a tab, its German translation, and optionally a third column with the attribution (licence
    and contributors), which is ignored. Surrounding spaces are stripped; blank lines are skipped (with
    ``skip_blank``). Each :class:`Pair` gets its 1-based line number as ``number``, so that an example can
    be traced back to its line. Nothing is downloaded: fetch the file yourself (see docs/scaling.md).

    A malformed line raises a ValueError naming the file, the line number and what was expected.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "eng-deu.txt"
        >>> _ = path.write_text("Hi.\\tHallo!\\tCC-BY 2.0 (France) Attribution: tatoeba.org\\n", encoding="utf-8")
        >>> read_tsv_pairs(path)
        [Pair(number=1, src='Hi.', tgt='Hallo!')]
    """
    pairs: list[Pair] = []
    for lineno, line in enumerate(_read_lines(path, encoding), start=1):
        if not line.strip():
            if skip_blank:
                continue
            raise ValueError(f"{os.fspath(path)}:{lineno}: blank line; expected source<TAB>target[<TAB>attribution]")
        fields = line.split("\t")
        if len(fields) not in (2, 3):
            raise ValueError(f"{os.fspath(path)}:{lineno}: expected 2 or 3 tab-separated columns "
                             f"(source, target, optional attribution), got {len(fields)}: {line[:80]!r}")
        src, tgt = fields[0].strip(), fields[1].strip()
        for column, text in (("source (column 1)", src), ("target (column 2)", tgt)):
            if not text:
                raise ValueError(f"{os.fspath(path)}:{lineno}: the {column} is empty: {line[:80]!r}")
        pairs.append(Pair(lineno, src, tgt))
    if not pairs:
        raise ValueError(f"{os.fspath(path)}: no sentence pairs (expected lines source<TAB>target)")
    return pairs


def write_tsv_pairs(pairs: Iterable[Pair], path: str | os.PathLike, encoding: str = "utf-8") -> None:
    """Write pairs as ``source<TAB>target`` lines, the format :func:`read_tsv_pairs` reads.

    A sentence containing a tab or a line break cannot be written in this format: a ValueError names it.
    """
    lines = []
    for i, pair in enumerate(pairs):
        for side, text in (("src", pair.src), ("tgt", pair.tgt)):
            if "\t" in text or "\n" in text or "\r" in text or not text.strip():
                raise ValueError(f"write_tsv_pairs: pair {i} has a {side} that is empty or contains a tab or a "
                                 f"line break: {text!r}")
        lines.append(f"{pair.src}\t{pair.tgt}\n")
    with open(path, "w", encoding=encoding, newline="\n") as f:
        f.writelines(lines)


def read_parallel_files(src_path: str | os.PathLike, tgt_path: str | os.PathLike,
                        encoding: str = "utf-8") -> list[Pair]:
    """Sentence pairs from two aligned plain-text files, line i of one translating line i of the other.

    The layout of Multi30k (``train.en`` and ``train.de``, ``val.en`` and ``val.de``, ...) and of most
    corpora on opus.nlpl.eu in "Moses" format. Each :class:`Pair` gets its 1-based line number as
    ``number``. Files of different lengths, or an empty line on either side, raise a ValueError naming the
    files and the line number.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "train.en").write_text("A dog runs.\\n", encoding="utf-8")
        >>> _ = (d / "train.de").write_text("Ein Hund rennt.\\n", encoding="utf-8")
        >>> read_parallel_files(d / "train.en", d / "train.de")
        [Pair(number=1, src='A dog runs.', tgt='Ein Hund rennt.')]
    """
    src_lines, tgt_lines = _read_lines(src_path, encoding), _read_lines(tgt_path, encoding)
    while src_lines and tgt_lines and not src_lines[-1].strip() and not tgt_lines[-1].strip():
        src_lines.pop(), tgt_lines.pop()  # trailing blank lines at the end of both files
    if len(src_lines) != len(tgt_lines):
        raise ValueError(f"{os.fspath(src_path)} has {len(src_lines)} lines but {os.fspath(tgt_path)} has "
                         f"{len(tgt_lines)}: expected the same number, line i of one translating line i of "
                         f"the other")
    pairs = []
    for lineno, (src, tgt) in enumerate(zip(src_lines, tgt_lines, strict=True), start=1):
        for path, text in ((src_path, src), (tgt_path, tgt)):
            if not text.strip():
                raise ValueError(f"{os.fspath(path)}:{lineno}: empty line; expected a sentence aligned with "
                                 f"line {lineno} of the other file")
        pairs.append(Pair(lineno, src.strip(), tgt.strip()))
    if not pairs:
        raise ValueError(f"{os.fspath(src_path)}: no sentences")
    return pairs


def split_pairs(pairs: Sequence[Pair], n_valid: int, n_test: int, seed: int = 0
                ) -> tuple[list[Pair], list[Pair], list[Pair]]:
    """Shuffle ``pairs`` with ``seed`` and cut off ``n_valid`` and ``n_test`` of them: ``(train, valid, test)``.

    For a corpus that comes as one file (Tatoeba). A sentence repeated in the file may land in two splits;
    deduplicate first if that matters for your measurement.
    """
    if n_valid < 0 or n_test < 0 or n_valid + n_test >= len(pairs):
        raise ValueError(f"split_pairs: need 0 <= n_valid, 0 <= n_test and n_valid + n_test < len(pairs) "
                         f"= {len(pairs)}, got n_valid={n_valid}, n_test={n_test}")
    order = list(pairs)
    random.Random(seed).shuffle(order)
    return order[n_valid + n_test:], order[:n_valid], order[n_valid:n_valid + n_test]
