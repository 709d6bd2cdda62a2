"""Real text that every machine already has: the running Python's own documentation, as a corpus for
language models (notebooks 11 and 12).

Python ships the prose of its reference manual in ``pydoc_data.topics`` (what ``help("for")`` prints):
79 documents, about 465 000 characters of English under Python 3.11, licensed under the PSF licence (see
``data/README.md``). Nothing is downloaded. The text differs between Python versions, so the numbers a
notebook prints are pinned to Python 3.11: :func:`corpus_fingerprint` records what the corpus was, and
:func:`python_docs_corpus` warns when the running Python's text differs from the pinned one.

The split is **by document** with a fixed rule (:func:`is_validation_document`: a CRC-32 of the
document's name), so that the split does not move when a document is added or removed. Documents can
still share text: the manual's topics quote one another (``attribute-access`` is also a section of
``specialnames``), and under Python 3.11.7 a third of the validation text occurred verbatim in a training
topic, which a counting model scores almost perfectly. So every validation paragraph that also occurs in
a training document is removed from validation (:func:`drop_seen_paragraphs`): no paragraph of the
validation text was seen in training.

Tokens: :class:`ByteBPE`, a byte-level Byte-Pair Encoding (GPT-2's scheme) trained with Hugging Face
``tokenizers`` on the training documents only: any string, code and unusual characters included,
becomes tokens without an unknown token. Its training is deterministic (same text, same merges).

Shapes: a token stream is a 1-D ``torch.long`` tensor; :func:`random_windows` cuts (batch, seq_len + 1)
windows from it, whose first ``seq_len`` tokens are the input and last ``seq_len`` the targets.
"""

from __future__ import annotations

import hashlib
import sys
import warnings
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from course_lib.data.translation import learn_bpe
from course_lib.validation import check_positive_ints

__all__ = [
    "PINNED_PYTHON", "PINNED_FINGERPRINT", "END_OF_TEXT", "TextCorpus", "is_validation_document",
    "drop_seen_paragraphs", "split_documents", "python_docs_corpus", "corpus_fingerprint", "load_text_file", "ByteBPE",
    "encode_documents", "random_windows", "sequential_windows",
]

#: The Python version whose documentation the course's printed numbers come from.
PINNED_PYTHON = (3, 11)
#: The token that separates documents in a stream (GPT-2's name for it).
END_OF_TEXT = "<|endoftext|>"


@dataclass(frozen=True)
class TextCorpus:
    """Documents split into training and validation sets, by document.

    Attributes:
        train, valid: the documents' texts.
        train_names, valid_names: their names (the ``pydoc`` topic, or ``"part 3"`` for a file's parts).
        source: where the text came from, in words.
    """

    train: list[str]
    valid: list[str]
    train_names: list[str]
    valid_names: list[str]
    source: str
    #: characters removed from the validation documents because they also occur in training
    removed_chars: int = 0

    def __repr__(self) -> str:
        chars = sum(map(len, self.train)), sum(map(len, self.valid))
        removed = f", {self.removed_chars:,} characters seen in training removed" if self.removed_chars else ""
        return (f"TextCorpus({self.source}: {len(self.train)} training documents ({chars[0]:,} characters), "
                f"{len(self.valid)} validation documents ({chars[1]:,} characters{removed}))")


def is_validation_document(name: str, every: int = 10) -> bool:
    """The fixed split rule: a document is held out when the CRC-32 of its name is divisible by ``every``.

    A hash of the name (not the position in a list) keeps each document on its side when others are added
    or removed, and the same on every machine (CRC-32 is not salted, unlike Python's ``hash``).

    Example:
        >>> is_validation_document("for") == is_validation_document("for")
        True
    """
    if every < 2:
        raise ValueError(f"is_validation_document: every must be >= 2, got {every}")
    return zlib.crc32(name.encode("utf-8")) % every == 0


def split_documents(names: Sequence[str], texts: Sequence[str], source: str, every: int = 10) -> TextCorpus:
    """Named documents split by :func:`is_validation_document` of each name, with the validation paragraphs
    that also occur in a training document removed (:func:`drop_seen_paragraphs`).

    Use it for documents of your own (one per file, chapter or page); ``source`` says where they came from.
    Raises a ValueError when either side ends up empty.

    Example:
        >>> names = [f"doc {i}" for i in range(20)]
        >>> corpus = split_documents(names, [f"Text of {n}." for n in names], "an example")
        >>> len(corpus.train) + len(corpus.valid)
        20
    """
    train, valid, train_names, valid_names = [], [], [], []
    for name, text in zip(names, texts, strict=True):
        if is_validation_document(name, every):
            valid.append(text)
            valid_names.append(name)
        else:
            train.append(text)
            train_names.append(name)
    return _without_copies(train, valid, train_names, valid_names, source)


def _without_copies(train: list[str], valid: list[str], train_names: list[str], valid_names: list[str],
                    source: str) -> TextCorpus:
    """The corpus, with the validation paragraphs seen in training removed (documents left empty dropped)."""
    before = sum(map(len, valid))
    valid = drop_seen_paragraphs(valid, train)
    valid_names = [name for name, text in zip(valid_names, valid, strict=True) if text]
    valid = [text for text in valid if text]
    if not train or not valid:
        raise ValueError(f"the split left {len(train)} training and {len(valid)} validation documents (after "
                         f"removing validation text seen in training); use more documents or another 'every'")
    return TextCorpus(train, valid, train_names, valid_names, source, before - sum(map(len, valid)))


def drop_seen_paragraphs(valid: Sequence[str], train: Sequence[str]) -> list[str]:
    """The validation documents without every paragraph (text between blank lines) that also occurs in a
    training document, compared after stripping surrounding whitespace; a document left empty becomes ``""``.

    A held-out document that quotes a training document would reward memorising: a counting model predicts
    a copied paragraph almost perfectly, and so would a network that learnt it by heart.

    Example:
        >>> drop_seen_paragraphs(["shared text\\n\\nnew text"], ["intro\\n\\n  shared text"])
        ['new text']
    """
    seen = {p.strip() for text in train for p in text.split("\n\n")}
    return ["\n\n".join(p for p in text.split("\n\n") if p.strip() and p.strip() not in seen) for text in valid]


def _pydoc_documents() -> tuple[list[str], list[str]]:
    from pydoc_data.topics import topics

    names = sorted(topics)
    return names, [topics[name] for name in names]


def corpus_fingerprint(texts: Iterable[str]) -> tuple[int, int, str]:
    """(number of documents, number of characters, sha256 of the documents joined by NUL): what the text was.

    Example:
        >>> corpus_fingerprint(["a", "b"])[:2]
        (2, 2)
    """
    texts = list(texts)
    digest = hashlib.sha256("\0".join(texts).encode("utf-8")).hexdigest()
    return len(texts), sum(map(len, texts)), digest


# Recorded from Python 3.11.7 (data/README.md gives the same figures).
PINNED_FINGERPRINT = (79, 464970, "d816f8d22e0cf35d139a6b91ddbf71926779433fc91cdc3a126e599d8445e57e")


def python_docs_corpus(every: int = 10) -> TextCorpus:
    """The reference manual's topics that the running Python ships (``pydoc_data.topics``), split by document.

    Warns (``UserWarning``) when the text differs from the pinned Python 3.11 text: the code still runs, but
    the numbers will differ a little from the ones the notebooks discuss.
    """
    names, texts = _pydoc_documents()
    fingerprint = corpus_fingerprint(texts)
    if fingerprint != PINNED_FINGERPRINT:
        warnings.warn(f"python_docs_corpus: this Python ({sys.version.split()[0]}) ships documentation text "
                      f"{fingerprint[:2]} that differs from the pinned Python "
                      f"{'.'.join(map(str, PINNED_PYTHON))} text {PINNED_FINGERPRINT[:2]}: everything runs, "
                      f"but the numbers will differ from those in the notebooks (see data/README.md)",
                      stacklevel=2)
    return split_documents(names, texts, "Python's reference manual (pydoc_data.topics)", every)


def load_text_file(path: str | Path, every: int = 10, min_chars: int = 2000) -> TextCorpus:
    """A plain UTF-8 text file of your own as a corpus: cut into parts at blank lines, split by part.

    Paragraphs (separated by blank lines) are gathered into parts of at least ``min_chars`` characters;
    part ``i`` is named ``"part i"`` and goes to validation by :func:`is_validation_document`; validation
    paragraphs that also occur in a training part are removed (:func:`drop_seen_paragraphs`). A file too
    short for two parts raises a ValueError saying how long it is.
    """
    text = Path(path).read_text(encoding="utf-8")
    parts, current = [], []
    for paragraph in text.split("\n\n"):
        current.append(paragraph)
        if sum(map(len, current)) >= min_chars:
            parts.append("\n\n".join(current))
            current = []
    if current:
        parts.append("\n\n".join(current))
    if len(parts) < 2:
        raise ValueError(f"load_text_file: {path} has {len(text)} characters, too few to split into "
                         f"training and validation parts of {min_chars} characters")
    names = [f"part {i}" for i in range(len(parts))]
    try:
        return split_documents(names, parts, f"the file {Path(path).name}", every)
    except ValueError:  # few parts: hold out the last one instead
        return _without_copies(parts[:-1], parts[-1:], names[:-1], names[-1:], f"the file {Path(path).name}")


class ByteBPE:
    """Byte-level Byte-Pair Encoding (GPT-2's tokeniser scheme), trained with Hugging Face ``tokenizers``.

    The text is first turned into bytes (each of the 256 byte values is a symbol, shown as a printable
    character), then the most frequent adjacent pair is merged repeatedly until the vocabulary has
    ``vocab_size`` entries. Every string can be encoded (there is no unknown token) and decoding gives back
    the exact text. Pieces usually begin with the space before a word (``"Ġfor"``). Id 0 is
    :data:`END_OF_TEXT`, which separates documents.

    The course's other BPE, :class:`course_lib.data.translation.BPETokenizer` (notebook 07), merges characters
    and has an
    unknown piece; notebook 07 contrasts the two. Both learn their merges with
    :func:`course_lib.data.translation.learn_bpe`.

    Example:
        >>> bpe = ByteBPE.train(["the cat sat on the mat"] * 3, vocab_size=270)
        >>> bpe.decode(bpe.encode("the cat sat"))
        'the cat sat'
    """

    def __init__(self, tokenizer) -> None:  # a trained tokenizers.Tokenizer
        self.tokenizer = tokenizer
        self.eot_id: int = tokenizer.token_to_id(END_OF_TEXT)

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 1024, min_frequency: int = 2,
              special_tokens: Sequence[str] = ()) -> ByteBPE:
        """Learn the merges from ``texts`` (the training documents only) with
        :func:`course_lib.data.translation.learn_bpe`.
        Deterministic.

        ``special_tokens`` (BERT's ``"[PAD]"``, ``"[CLS]"``, ``"[SEP]"``, ``"[MASK]"``) get the ids after
        :data:`END_OF_TEXT`, in order, and are never cut into pieces nor produced by a merge.
        """
        specials = [END_OF_TEXT, *special_tokens]
        if len(set(specials)) != len(specials):
            raise ValueError(f"ByteBPE.train: special_tokens must be distinct and not {END_OF_TEXT}, got "
                             f"{list(special_tokens)}")
        if vocab_size < 256 + len(specials):
            raise ValueError(f"ByteBPE.train: vocab_size must be >= {256 + len(specials)} (256 bytes + "
                             f"{len(specials)} special tokens), got {vocab_size}")
        return cls(learn_bpe(texts, vocab_size, min_frequency, specials, level="byte"))

    def token_id(self, token: str) -> int:
        """The id of a special token (``"[MASK]"``); a KeyError naming the known ones if it has none."""
        found = self.tokenizer.token_to_id(token)
        if found is None:
            raise KeyError(f"ByteBPE.token_id: no token {token!r}; special tokens: "
                           f"{sorted(t.content for t in self.tokenizer.get_added_tokens_decoder().values())}")
        return found

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """Text -> token ids."""
        return self.tokenizer.encode(text).ids

    def decode(self, ids: Iterable[int]) -> str:
        """Token ids -> text (:data:`END_OF_TEXT` shown as itself)."""
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def pieces(self, text: str) -> list[str]:
        """The pieces ``text`` is cut into, as strings (bytes shown GPT-2's way: ``Ġ`` is a space)."""
        return self.tokenizer.encode(text).tokens


def encode_documents(bpe: ByteBPE, documents: Iterable[str]) -> torch.Tensor:
    """One stream of token ids: every document followed by :data:`END_OF_TEXT`. Returns (num_tokens,) long."""
    ids: list[int] = []
    for doc in documents:
        ids.extend(bpe.encode(doc))
        ids.append(bpe.eot_id)
    return torch.tensor(ids, dtype=torch.long)


def _check_stream(stream: torch.Tensor | np.ndarray, seq_len: int, fn: str, arrays: bool = False) -> None:
    is_tensor = isinstance(stream, torch.Tensor) and stream.dim() == 1 and stream.dtype == torch.long
    is_array = arrays and isinstance(stream, np.ndarray) and stream.ndim == 1 and stream.dtype.kind in "iu"
    if not (is_tensor or is_array):
        kinds = "a 1-D torch.long tensor or a 1-D NumPy integer array" if arrays else "a 1-D torch.long tensor"
        raise ValueError(f"{fn}: stream must be {kinds} of token ids, got "
                         f"{getattr(stream, 'dtype', type(stream).__name__)} {tuple(getattr(stream, 'shape', ()))}")
    check_positive_ints(fn, seq_len=seq_len)
    if len(stream) < seq_len + 1:
        raise ValueError(f"{fn}: seq_len={seq_len} needs a stream of at least seq_len + 1 tokens, "
                         f"got {len(stream)}")


def random_windows(stream: torch.Tensor | np.ndarray, batch_size: int, seq_len: int,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """``batch_size`` windows of ``seq_len + 1`` consecutive tokens at random offsets: (batch, seq_len + 1).

    A language model reads ``window[:, :-1]`` and is trained to predict ``window[:, 1:]`` (teacher forcing
    on one stream of text: no padding, every position is a training example). ``stream`` may also be a NumPy
    array, such as ``np.memmap(path, dtype=np.uint16)`` over a token file larger than memory: only the windows
    drawn are read from disk. The windows are the same for a tensor and an array of the same ids.
    """
    _check_stream(stream, seq_len, "random_windows", arrays=True)
    starts = torch.randint(0, len(stream) - seq_len, (batch_size,), generator=generator)  # (batch,)
    index = starts[:, None] + torch.arange(seq_len + 1)  # (batch, seq_len + 1)
    if isinstance(stream, np.ndarray):  # read just these rows of the (memory-mapped) array
        return torch.from_numpy(np.asarray(stream[index.numpy()], dtype=np.int64))
    return stream[index]


def sequential_windows(stream: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The stream cut into non-overlapping windows of ``seq_len + 1`` tokens that share their edge token:
    (num_windows, seq_len + 1). Window ``i`` covers tokens ``i*seq_len .. (i+1)*seq_len``, so every token
    after the first is a target exactly once (the tail shorter than a window is dropped)."""
    _check_stream(stream, seq_len, "sequential_windows")
    num_windows = (stream.numel() - 1) // seq_len
    starts = torch.arange(num_windows) * seq_len  # (num_windows,)
    return stream[starts[:, None] + torch.arange(seq_len + 1)]  # (num_windows, seq_len + 1)
