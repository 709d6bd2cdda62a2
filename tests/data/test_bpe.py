"""The hand-written byte-level BPE (course_lib.data.bpe) against Hugging Face ``tokenizers`` trained on the same
text with the same settings: the same pieces, merges, ids and encodings; ``encode_iterable`` equal to ``encode``
of the whole text, reading its input lazily."""

from __future__ import annotations

import itertools
import json
from collections import Counter

import pytest
from tokenizers import pre_tokenizers

from course_lib.data.bpe import ByteBPE, bpe_merge_step, bytes_to_unicode, pretokenize, train_bpe
from course_lib.data.python_docs import END_OF_TEXT, python_docs_corpus
from course_lib.data.translation import learn_bpe

MIXED = [
    "The Transformer is built from attention. It's fast; they'd say it's 10x faster!\n\n",
    "동물은 길을 건너지 않았다 왜냐하면 그것은 너무 피곤했기 때문이다.\n",
    "def softmax(x):\n    return x.exp() / x.exp().sum(-1, keepdim=True)  # 2024\n\t\tend   \n",
    "  leading spaces, trailing spaces   \n\n\nand   many   gaps 1234567 ÿĀ \u00a0 emoji 🙂🙂\n",
] * 3


def hf_model(texts: list[str], vocab_size: int, specials: list[str]) -> tuple[dict, list[tuple[str, str]], object]:
    tok = learn_bpe(texts, vocab_size, 2, specials, level="byte")
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    return tok.get_vocab(), merges, tok


def test_byte_table_is_gpt2s() -> None:
    table = bytes_to_unicode()
    assert sorted(table.values()) == sorted(pre_tokenizers.ByteLevel.alphabet())
    assert (table[ord(" ")], table[ord("\n")], table[ord("A")]) == ("Ġ", "Ċ", "A")
    assert len(set(table.values())) == 256


@pytest.mark.parametrize("text", [*MIXED, "a\n  b", "it's  x", "x\r\n\r\ny", "'''s'll", "ünï cödé 1,234.5"])
def test_pretokenize_equals_tokenizers_byte_level(text: str) -> None:
    expected = [piece for piece, _ in pre_tokenizers.ByteLevel(add_prefix_space=False).pre_tokenize_str(text)]
    assert pretokenize(text) == expected


@pytest.mark.parametrize("vocab_size", [256 + 1, 300, 420])
def test_training_equals_tokenizers_on_mixed_text(vocab_size: int) -> None:
    vocab, merges = train_bpe(MIXED, vocab_size, 2, [END_OF_TEXT])
    hf_vocab, hf_merges, _ = hf_model(MIXED, vocab_size, [END_OF_TEXT])
    assert merges == hf_merges
    assert vocab == hf_vocab


def test_tie_rule_smaller_ids_first() -> None:
    # "ab" and "cd" both occur 3 times: the pair with the smaller ids ('a' < 'c') is merged first, in both.
    texts = ["cd ab"] * 3
    _, merges = train_bpe(texts, 256 + 3, 1)
    _, hf_merges, _ = hf_model(texts, 256 + 3, [])
    assert merges[:2] == hf_merges[:2]
    assert merges.index(("a", "b")) < merges.index(("c", "d"))


def test_corpus_slice_merges_ids_and_encoding_equal_tokenizers() -> None:
    corpus = python_docs_corpus()
    texts = corpus.train[:12]
    bpe = ByteBPE.train(texts, 700, 2, [END_OF_TEXT])
    hf_vocab, hf_merges, tok = hf_model(texts, 700, [END_OF_TEXT])
    assert bpe.merges == hf_merges and bpe.vocab == hf_vocab
    held_out = "\n".join(corpus.valid[:2]) + END_OF_TEXT + MIXED[1]
    ids = bpe.encode(held_out)
    assert ids == tok.encode(held_out).ids
    assert bpe.decode(ids) == held_out


def test_encode_iterable_equals_encode_for_any_chunking() -> None:
    bpe = ByteBPE.train(MIXED, 400, 2, [END_OF_TEXT])
    text = "".join(MIXED) + "x" + END_OF_TEXT + "a\n  b   c"
    whole = bpe.encode(text)
    for size in (1, 2, 3, 7, 64):
        chunks = [text[i:i + size] for i in range(0, len(text), size)]
        assert list(bpe.encode_iterable(chunks)) == whole, size
    assert list(bpe.encode_iterable(text.splitlines(keepends=True))) == whole


def test_encode_iterable_reads_lazily() -> None:
    bpe = ByteBPE.train(MIXED, 300, 2)
    pulled = []

    def lines():
        for i in itertools.count():
            pulled.append(i)
            yield f"line {i} of a stream that never ends\n"

    first = list(itertools.islice(bpe.encode_iterable(lines()), 10))
    assert len(first) == 10 and len(pulled) <= 3


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="vocab_size must be an int >= 257"):
        train_bpe(["abc"], 256, special_tokens=["<s>"])
    with pytest.raises(ValueError, match="special_tokens must be distinct"):
        train_bpe(["abc"], 300, special_tokens=["<s>", "<s>"])
    with pytest.raises(ValueError, match="min_frequency"):
        train_bpe(["abc"], 300, min_frequency=-1)


def test_train_bpe_equals_repeated_merge_steps() -> None:
    """The incremental training and notebook 10's one-step model answer, repeated, learn the same merges."""
    vocab, merges = train_bpe(MIXED, 330, 1)
    pieces = Counter(piece for text in MIXED for piece in pretokenize(text))
    words = [[vocab[char] for char in piece] for piece in pieces]
    counts = list(pieces.values())
    token_of = {i: token for token, i in vocab.items()}
    stepped = []
    for left, right in merges:
        new_id = vocab[left + right]
        pair, words = bpe_merge_step(words, counts, new_id)
        stepped.append((token_of[pair[0]], token_of[pair[1]]))
    assert stepped == merges
