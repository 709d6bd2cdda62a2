"""Byte-level Byte-Pair Encoding written by hand: GPT-2's tokeniser, trained and applied in plain Python.

The course's other tokenisers learn their merges with Hugging Face ``tokenizers``
(:func:`course_lib.data.translation.learn_bpe`); this module is the same algorithm spelled out, so that a
learner can read every step, and it gives the same merges and the same ids as ``tokenizers`` trained on the
same text with the same settings (``tests/data/test_bpe.py`` holds the two side by side):

1. **Pre-tokenise** (:func:`pretokenize`): GPT-2's regular expression cuts the text into words, numbers,
   punctuation runs and whitespace; a space stays at the front of the word after it (``" the"``). Merges never
   cross these pieces.
2. **Bytes as symbols** (:func:`bytes_to_unicode`): each piece becomes its UTF-8 bytes, each byte shown as one
   printable character (a space is ``"Ġ"``, a newline ``"Ċ"``), so nothing is ever unknown.
3. **Train** (:func:`train_bpe`; one step of it is :func:`bpe_merge_step`): count every adjacent pair of
   symbols over all pieces (weighted by how often each piece occurs), merge the most frequent pair into a
   new symbol, update the counts, repeat until the vocabulary has ``vocab_size`` entries or no pair occurs
   ``min_frequency`` times. **Tie rule**: among pairs of equal count the one with the smaller ids wins (first
   the left symbol's id, then the right one's), as in ``tokenizers``; ids are the special tokens first, then
   the 256 byte symbols in the order of their characters, then each new symbol in the order it was made.
4. **Encode** (:meth:`ByteBPE.encode`): inside each piece, apply the learned merges in the order they were
   learned (the earliest merge present first, leftmost occurrence first) until none applies.

Why GPT-2's scheme: 256 base symbols cover every text in every script, so a Korean sentence or a
Python file never meets an unknown token; the price is that a Hangul syllable starts as three bytes.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise

import regex

__all__ = ["GPT2_PATTERN", "bytes_to_unicode", "pretokenize", "split_special", "merge_pair", "bpe_merge_step",
           "check_train_arguments", "train_bpe", "ByteBPE"]

# GPT-2's pre-tokeniser (also that of ``tokenizers``' ByteLevel with ``use_regex=True``): English contractions,
# a letter run, a number run, a punctuation run (each with at most one space in front), whitespace that is not
# followed by a word, and any other whitespace.
GPT2_PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


@functools.cache
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table byte value -> printable character: the 188 printable bytes stand for themselves, the
    other 68 (controls, space, ...) are shifted to the characters from U+0100 on (space -> ``"Ġ"``)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, shifted = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + shifted)
            shifted += 1
    return table


def pretokenize(text: str) -> list[str]:
    """Cut ``text`` into GPT-2's pieces, each written with :func:`bytes_to_unicode`'s characters.

    Example:
        >>> pretokenize("it's 42 cats")
        ['it', "'s", 'Ġ42', 'Ġcats']
    """
    return [_symbols(piece) for piece in GPT2_PATTERN.findall(text)]


def _symbols(piece: str) -> str:
    """``piece``'s UTF-8 bytes, each written as its :func:`bytes_to_unicode` character."""
    table = bytes_to_unicode()
    return "".join(table[b] for b in piece.encode("utf-8"))


def _pair_counts(words: Iterable[Sequence[int]], counts: Iterable[int]) -> Counter[tuple[int, int]]:
    """How often each adjacent pair of ids occurs, each word counted ``count`` times (never across words)."""
    pairs: Counter[tuple[int, int]] = Counter()
    for word, count in zip(words, counts, strict=True):
        for pair in pairwise(word):
            pairs[pair] += count
    return pairs


def _best_pair(pairs: Counter[tuple[int, int]]) -> tuple[int, int]:
    """The most frequent pair; the tie rule: among equal counts the smaller ids win (the left id, then the right)."""
    return max(pairs, key=lambda p: (pairs[p], -p[0], -p[1]))


def merge_pair(word: Sequence[int], pair: tuple[int, int], new_id: int) -> tuple[int, ...]:
    """``word`` with every occurrence of ``pair`` replaced by ``new_id``, left to right, never overlapping
    (``a a a`` -> ``aa a``)."""
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def bpe_merge_step(words: Sequence[Sequence[int]], counts: Sequence[int], new_id: int
                   ) -> tuple[tuple[int, int], list[list[int]]]:
    """One step of BPE training: the pair to merge and the words after merging it.

    ``words`` are the pre-tokens as lists of token ids, ``counts[i]`` how often word ``i`` occurs in the text.
    Count every adjacent pair inside each word (weighted by its count; a pair never spans two words), take the
    most frequent one (ties: the smaller left id, then the smaller right id) and replace each of its
    occurrences by ``new_id``, left to right (``a a a`` -> ``aa a``).

    Notebook 10's exercise, so written out whole as its model answer: :func:`train_bpe` takes the same step
    with the module's helpers (:func:`merge_pair`, the same tie rule), updating only the counts a merge changes,
    and ``tests/data/test_bpe.py`` holds the two equal step for step.

    Example:
        >>> bpe_merge_step([[1, 2, 3], [2, 3]], [1, 2], new_id=9)
        ((2, 3), [[1, 9], [9]])
    """
    pairs: Counter[tuple[int, int]] = Counter()
    for word, count in zip(words, counts, strict=True):
        for pair in pairwise(word):  # inside each word: never across two pre-tokens
            pairs[pair] += count
    pair = max(pairs, key=lambda p: (pairs[p], -p[0], -p[1]))  # ties: the smaller left id, then the right
    merged = []
    for word in words:
        out, i = [], 0
        while i < len(word):  # left to right; a merged pair's two symbols are used once
            if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
                out.append(new_id)
                i += 2
            else:
                out.append(word[i])
                i += 1
        merged.append(out)
    return pair, merged


def check_train_arguments(vocab_size: int, min_frequency: int, special_tokens: Sequence[str]) -> None:
    """Raise a ValueError naming the argument unless :func:`train_bpe`'s arguments are valid (also used by the
    class edition's ``train_bpe``, which learns the merges with ``tokenizers``)."""
    if len(set(special_tokens)) != len(special_tokens):
        raise ValueError(f"train_bpe: special_tokens must be distinct, got {list(special_tokens)}")
    if not isinstance(vocab_size, int) or vocab_size < 256 + len(special_tokens):
        raise ValueError(f"train_bpe: vocab_size must be an int >= {256 + len(special_tokens)} (256 bytes + "
                         f"{len(special_tokens)} special tokens), got {vocab_size!r}")
    if not isinstance(min_frequency, int) or min_frequency < 0:
        raise ValueError(f"train_bpe: min_frequency must be an int >= 0, got {min_frequency!r}")


def train_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int = 2, special_tokens: Sequence[str] = ()
              ) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Learn byte-level BPE merges from ``texts``. Returns ``(vocab, merges)``: token -> id, and the merged
    pairs in the order they were learned (the module's docstring gives the algorithm and its tie rule).

    The counts are updated only for the words that hold the merged pair, so a merge costs the size of those
    words, not of the whole corpus. Special tokens are cut out of the text before pre-tokenising (never
    merged) and get the first ids.

    Example:
        >>> vocab, merges = train_bpe(["low lower lowest"] * 2, vocab_size=260)
        >>> merges[:2]
        [('l', 'o'), ('lo', 'w')]
    """
    special_tokens = list(special_tokens)
    check_train_arguments(vocab_size, min_frequency, special_tokens)
    vocab = {token: i for i, token in enumerate(special_tokens)}
    for char in sorted(bytes_to_unicode().values()):
        vocab[char] = len(vocab)
    pieces: Counter[str] = Counter()
    for text in texts:
        for chunk in split_special(text, special_tokens):
            if chunk not in special_tokens:
                pieces.update(pretokenize(chunk))
    words = {tuple(vocab[char] for char in piece): freq for piece, freq in pieces.items()}  # ids -> count
    token_of = {i: token for token, i in vocab.items()}
    counts = _pair_counts(words, words.values())
    where: dict[tuple[int, int], set[tuple[int, ...]]] = {}
    for word in words:
        for pair in pairwise(word):
            where.setdefault(pair, set()).add(word)
    merges: list[tuple[str, str]] = []
    while len(vocab) < vocab_size and counts:
        pair = _best_pair(counts)
        if counts[pair] < max(min_frequency, 1):
            break
        left, right = token_of[pair[0]], token_of[pair[1]]
        merges.append((left, right))
        new_id = vocab.setdefault(left + right, len(vocab))
        token_of[new_id] = left + right
        for word in where.pop(pair, set()):  # only the words that hold the pair change
            freq = words.pop(word)
            new = merge_pair(word, pair, new_id)
            words[new] = words.get(new, 0) + freq
            for old_pair in pairwise(word):
                counts[old_pair] -= freq
                where.get(old_pair, set()).discard(word)
            for new_pair in pairwise(new):
                counts[new_pair] += freq
                where.setdefault(new_pair, set()).add(new)
        counts = +counts  # drop the pairs whose count fell to zero
    return vocab, merges


def split_special(text: str, special_tokens: Sequence[str]) -> list[str]:
    """``text`` cut around the special tokens, which stay as chunks of their own (longest first).

    Example:
        >>> split_special("a<|x|>b", ["<|x|>"])
        ['a', '<|x|>', 'b']
    """
    if not special_tokens:
        return [text]
    pattern = "|".join(regex.escape(t) for t in sorted(special_tokens, key=len, reverse=True))
    return [chunk for chunk in regex.split(f"({pattern})", text) if chunk]


@dataclass
class ByteBPE:
    """A trained byte-level BPE: ``vocab`` (token -> id) and ``merges`` (in the order learned).

    Example:
        >>> bpe = ByteBPE.train(["the cat sat on the mat"] * 3, vocab_size=270)
        >>> bpe.decode(bpe.encode("the cat sat"))
        'the cat sat'
    """

    vocab: dict[str, int]
    merges: list[tuple[str, str]]
    special_tokens: tuple[str, ...] = ()

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int, min_frequency: int = 2,
              special_tokens: Sequence[str] = ()) -> ByteBPE:
        """Learn the merges with :func:`train_bpe`."""
        vocab, merges = train_bpe(texts, vocab_size, min_frequency, special_tokens)
        return cls(vocab, merges, tuple(special_tokens))

    def __post_init__(self) -> None:
        self.ranks = {pair: rank for rank, pair in enumerate(self.merges)}
        # (left id, right id) -> (rank, merged id): encoding merges ids with the same step as training
        self.id_merges = {(self.vocab[a], self.vocab[b]): (rank, self.vocab[a + b])
                          for (a, b), rank in self.ranks.items()}
        self.id_to_token = {i: token for token, i in self.vocab.items()}
        self.byte_of = {char: byte for byte, char in bytes_to_unicode().items()}
        self._cache: dict[str, tuple[int, ...]] = {}  # piece -> ids: pieces repeat a lot in any text

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        if piece not in self._cache:
            self._cache[piece] = self._merge_piece(piece)
        return self._cache[piece]

    def _merge_piece(self, piece: str) -> tuple[int, ...]:
        word = tuple(self.vocab[char] for char in piece)
        never = (len(self.id_merges), -1)
        while len(word) > 1:
            # The earliest-learned merge present in the word; all its occurrences, left to right.
            pair = min(pairwise(word), key=lambda p: self.id_merges.get(p, never)[0])
            rank, new_id = self.id_merges.get(pair, never)
            if new_id < 0:
                break
            word = merge_pair(word, pair, new_id)
        return word

    def encode(self, text: str) -> list[int]:
        """Text -> token ids (special tokens kept whole)."""
        ids: list[int] = []
        for chunk in split_special(text, self.special_tokens):
            if chunk in self.special_tokens:
                ids.append(self.vocab[chunk])
            else:
                for piece in pretokenize(chunk):
                    ids.extend(self._encode_piece(piece))
        return ids

    def encode_iterable(self, chunks: Iterable[str]) -> Iterator[int]:
        """Token ids of the concatenation of ``chunks`` (a file's lines, say), one at a time, holding only one
        chunk and one unfinished piece in memory; the same ids as :meth:`encode` of the whole text.

        A chunk's last piece may go on in the next chunk (``"a\\n"`` then ``"  b"``: the whitespace run
        ``"\\n "`` spans both), so it waits for the next chunk, as does a tail that may begin a special token.
        The pieces before it are final: each was cut where the text after it already decides.
        """
        carry = ""
        for chunk in chunks:
            finished, carry = self._finished_part(carry + chunk)
            yield from finished
        yield from self.encode(carry)

    def _finished_part(self, text: str) -> tuple[list[int], str]:
        """The ids of the part of ``text`` that no text after it can change, and the rest of ``text``."""
        parts = split_special(text, self.special_tokens)
        last = max((i for i, part in enumerate(parts) if part in self.special_tokens), default=-1)
        ids = self.encode("".join(parts[:last + 1]))  # up to the last special token: a hard boundary
        tail = "".join(parts[last + 1:])
        if any(tail.endswith(t[:k]) for t in self.special_tokens for k in range(1, len(t))):
            return ids, tail
        matches = list(GPT2_PATTERN.finditer(tail))
        for match in matches[:-1]:  # pieces as cut in context (a whitespace run's cut depends on what follows)
            ids.extend(self._encode_piece(_symbols(match.group())))
        return ids, tail[matches[-1].start():] if matches else tail

    def decode(self, ids: Iterable[int]) -> str:
        """Token ids -> text; bytes that do not form UTF-8 (a cut Hangul syllable) become U+FFFD."""
        parts: list[bytes] = []
        for i in ids:
            token = self.id_to_token[int(i)]
            if token in self.special_tokens:
                parts.append(token.encode("utf-8"))
            else:
                parts.append(bytes(self.byte_of[char] for char in token))
        return b"".join(parts).decode("utf-8", errors="replace")

    def pieces(self, text: str) -> list[str]:
        """The pieces ``text`` is cut into (bytes shown GPT-2's way: ``Ġ`` is a space)."""
        return [self.id_to_token[i] for i in self.encode(text)]

