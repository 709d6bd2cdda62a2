"""course_lib.data.translation: the number corpus, tokenisers, Vocab and padded batches with shifted targets."""

from __future__ import annotations

import pytest
import torch
from num2words import num2words

from course_lib.data.translation import (
    BPETokenizer,
    CharTokenizer,
    LengthBucketSampler,
    Pair,
    TranslationDataset,
    Vocab,
    WordTokenizer,
    collate,
    make_loader,
    make_number_corpus,
    number_to_words,
)


@pytest.fixture(scope="module")
def corpus():
    return make_number_corpus(600, 50, 100, max_number=99_999, seed=3)


def test_splits_are_disjoint_and_sized(corpus) -> None:
    train, valid, test = ({p.number for p in s} for s in (corpus.train, corpus.valid, corpus.test))
    assert (len(corpus.train), len(corpus.valid), len(corpus.test)) == (600, 50, 100)
    assert len(train) == 600 and not train & test and not train & valid and not valid & test


def test_pairs_agree_with_num2words(corpus) -> None:
    for p in corpus.test[:20]:
        assert p.src == num2words(p.number) and p.tgt == num2words(p.number, lang="de")
        assert 0 <= p.number <= 99_999


@pytest.mark.parametrize("lang", ["en", "de"])
def test_words_joined_from_parts_equal_num2words_itself(lang) -> None:
    """number_to_words joins cached parts below a million; the reference is num2words on the whole number.

    Every number below 2,000, every whole thousand, the joins around them, and a random sample (all
    1,000,000 numbers were compared once, in both languages, when the join was written).
    """
    import random

    rng = random.Random(lang)
    numbers = [*range(2000), *range(0, 1_000_000, 1000), *(t * 1000 + r for t in (1, 21, 100, 101, 999)
               for r in (1, 9, 10, 99, 100, 101, 110, 999)), *rng.sample(range(1_000_000), 3000),
               1_000_000, 1_234_567, 10**9 + 1]  # a million and above: num2words directly
    for n in numbers:
        assert number_to_words(n, lang) == num2words(n, lang=lang), n
    assert number_to_words(1101, "fr") == num2words(1101, lang="fr")  # other languages: num2words directly
    with pytest.raises(ValueError, match="non-negative int, got -1"):
        number_to_words(-1)


def test_corpus_is_reproducible_and_seed_dependent() -> None:
    a = make_number_corpus(50, 5, 5, max_number=9999, seed=1)
    b = make_number_corpus(50, 5, 5, max_number=9999, seed=1)
    c = make_number_corpus(50, 5, 5, max_number=9999, seed=2)
    assert a.train == b.train and a.train != c.train


def test_short_numbers_are_drawn_too() -> None:
    c = make_number_corpus(500, 0, 0, max_number=999_999, seed=0)
    assert sum(p.number < 100 for p in c.train) > 20  # uniform draws would give ~0


def test_the_reordering_is_in_the_data() -> None:
    assert Pair(64, num2words(64), num2words(64, lang="de")) == Pair(64, "sixty-four", "vierundsechzig")


@pytest.mark.parametrize("kwargs, word", [({"n_train": -1}, "n_train"), ({"max_number": 10**6}, "max_number"),
                                           ({"n_train": 20, "max_number": 9}, "distinct")])
def test_corpus_bad_arguments(kwargs, word) -> None:
    args = dict(n_train=5, n_valid=0, n_test=0, max_number=999)
    args.update(kwargs)
    with pytest.raises(ValueError, match=word):
        make_number_corpus(**args)


def test_word_tokenizer_round_trips(corpus) -> None:
    tok = WordTokenizer()
    assert tok.tokenize("forty-five") == ["forty", "-", "five"]
    for p in corpus.train[:50]:
        assert tok.detokenize(tok.tokenize(p.src)) == p.src


def test_char_tokenizer_round_trips() -> None:
    tok = CharTokenizer()
    assert tok.tokenize("zwölf") == ["z", "w", "ö", "l", "f"] and tok.detokenize(tok.tokenize("zwölf")) == "zwölf"


def test_bpe_learns_pieces_and_round_trips(corpus) -> None:
    bpe = BPETokenizer.train([p.tgt for p in corpus.train], vocab_size=120)
    assert bpe.vocab_size <= 120
    lengths_bpe = [len(bpe.tokenize(p.tgt)) for p in corpus.test]
    assert sum(lengths_bpe) < 0.4 * sum(len(p.tgt) for p in corpus.test)  # much shorter than characters
    for p in corpus.test:  # unseen numbers are tokenised and restored exactly
        assert bpe.detokenize(bpe.tokenize(p.tgt)) == p.tgt
    assert bpe.detokenize(bpe.tokenize("elf zwölf")) == "elf zwölf"  # spaces survive (end-of-word suffix)


def test_bpe_unknown_character_becomes_unk(corpus) -> None:
    bpe = BPETokenizer.train([p.tgt for p in corpus.train], vocab_size=60)
    assert "<unk>" in bpe.tokenize("vierQ")


def test_bpe_bad_arguments() -> None:
    with pytest.raises(ValueError, match="texts"):
        BPETokenizer.train([], vocab_size=50)
    with pytest.raises(ValueError, match="vocab_size"):
        BPETokenizer.train(["a"], vocab_size=1)


def test_vocab_specials_lookups_and_unknowns() -> None:
    v = Vocab.build([["b", "a", "b"], ["c"]])
    assert v.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3)
    assert v.itos[4] == "b"  # most frequent first
    assert [v.lookup_token(v.lookup_id(t)) for t in "abc"] == list("abc")
    assert v.encode(["a", "zzz"]) == [v.stoi["a"], 3]
    assert v.encode(["a"], add_bos=True, add_eos=True) == [1, v.stoi["a"], 2]
    with pytest.raises(KeyError, match="zzz"):
        v.encode(["a", "zzz"], unknown="error")
    assert v.decode([1, v.stoi["c"], 2, v.stoi["a"]]) == ["c"]
    assert v.decode([v.stoi["c"], 2, v.stoi["a"]], stop_at_eos=False) == ["c", "a"]
    with pytest.raises(IndexError, match="outside"):
        v.lookup_token(99)


def test_vocab_rejects_missing_specials_and_duplicates() -> None:
    with pytest.raises(ValueError, match="first tokens"):
        Vocab(["a", "b"])
    with pytest.raises(ValueError, match="duplicate"):
        Vocab(["<pad>", "<bos>", "<eos>", "<unk>", "a", "a"])


def test_collate_pads_and_shifts() -> None:
    b = collate([(torch.tensor([7, 8, 9]), torch.tensor([1, 5, 6, 2])), (torch.tensor([9]), torch.tensor([1, 5, 2]))])
    assert b.src.tolist() == [[7, 8, 9], [9, 0, 0]]
    assert b.tgt_in.tolist() == [[1, 5, 6], [1, 5, 0]]   # starts with <bos>, no <eos> inside
    assert b.tgt_out.tolist() == [[5, 6, 2], [5, 2, 0]]  # ends with <eos>, then padding
    assert b.num_tgt_tokens == 5
    assert b.src_mask.shape == (2, 1, 1, 3) and b.src_mask[1, 0, 0].tolist() == [True, False, False]
    assert b.tgt_mask.shape == (2, 1, 3, 3) and not b.tgt_mask[0, 0, 0, 1]


def test_collate_bad_input() -> None:
    with pytest.raises(ValueError, match="empty"):
        collate([])
    with pytest.raises(ValueError, match="example 0"):
        collate([(torch.tensor([], dtype=torch.long), torch.tensor([1, 2]))])
    with pytest.raises(ValueError, match="at least 2"):
        collate([(torch.tensor([4]), torch.tensor([1]))])


def test_dataset_and_loader(corpus) -> None:
    st, tt = WordTokenizer(), CharTokenizer()
    sv = Vocab.build(st.tokenize(p.src) for p in corpus.train)
    tv = Vocab.build(tt.tokenize(p.tgt) for p in corpus.train)
    ds = TranslationDataset(corpus.train, st, tt, sv, tv)
    src, tgt = ds[0]
    assert tgt[0] == 1 and tgt[-1] == 2 and tt.detokenize(tv.decode(tgt.tolist())) == corpus.train[0].tgt
    assert st.detokenize(sv.decode(src.tolist())) == corpus.train[0].src
    seen = []
    for batch in make_loader(ds, 64, seed=0):
        assert batch.src.shape[0] == batch.tgt_in.shape[0] <= 64
        assert torch.equal(batch.tgt_in[:, 1:].ne(0), batch.tgt_out[:, :-1].ne(0) & batch.tgt_out[:, :-1].ne(2))
        seen.append(batch.src.shape[0])
    assert sum(seen) == len(ds)
    plain = next(iter(make_loader(ds, 64, bucket=False)))
    assert plain.src.shape[0] == 64


def test_length_buckets_reduce_padding(corpus) -> None:
    lengths = [1 + (i * 7919) % 40 for i in range(1000)]
    sampler = LengthBucketSampler(lengths, batch_size=50, pool_factor=10, seed=0)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(1000)) and len(batches) == len(sampler)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    shuffled = list(range(1000))
    import random
    random.Random(0).shuffle(shuffled)
    padded_random = sum(50 * max(lengths[i] for i in shuffled[s:s + 50]) for s in range(0, 1000, 50))
    assert padded < 0.75 * padded_random


def test_both_bpe_tokenisers_learn_their_merges_with_learn_bpe_as_before(monkeypatch) -> None:
    """The character-level (notebook 07) and byte-level (notebooks 11, 12) tokenisers share the merge learning;
    each gives the pieces and the tokenisation that Hugging Face's trainer gives when configured by hand (the
    ids of equally frequent symbols are not reproducible between two runs of that trainer on tiny inputs, so
    the pieces are compared as a set)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    import course_lib.data.python_docs
    import course_lib.data.translation
    from course_lib.data.python_docs import ByteBPE
    from course_lib.data.translation import BPETokenizer, learn_bpe

    texts = ["vierundsechzig", "dreiundsechzig", "vierzig", "hundert und eins"] * 3
    by_hand = Tokenizer(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"))
    by_hand.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    by_hand.train_from_iterator(texts + sorted(set("".join(texts)) - {" "}), trainer=trainers.BpeTrainer(
        vocab_size=40, min_frequency=2, special_tokens=["<unk>"], end_of_word_suffix="</w>", show_progress=False))
    ours = BPETokenizer.train(texts, vocab_size=40)
    assert sorted(ours._tok.get_vocab()) == sorted(by_hand.get_vocab())
    assert [ours.tokenize(t) for t in texts] == [by_hand.encode(t).tokens for t in texts]
    byte_hand = Tokenizer(models.BPE())
    byte_hand.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    byte_hand.decoder = decoders.ByteLevel()
    byte_hand.train_from_iterator(texts, trainer=trainers.BpeTrainer(
        vocab_size=280, min_frequency=2, special_tokens=["<|endoftext|>", "[PAD]"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    byte_ours = ByteBPE.train(texts, vocab_size=280, special_tokens=["[PAD]"])
    assert sorted(byte_ours.tokenizer.get_vocab()) == sorted(byte_hand.get_vocab())
    assert [byte_ours.pieces(t) for t in texts] == [byte_hand.encode(t).tokens for t in texts]
    calls = []
    monkeypatch.setattr(course_lib.data.translation, "learn_bpe",
                        lambda *a, **k: calls.append(k["level"]) or learn_bpe(*a, **k))
    monkeypatch.setattr(course_lib.data.python_docs, "learn_bpe", course_lib.data.translation.learn_bpe)
    BPETokenizer.train(texts, vocab_size=40), ByteBPE.train(texts, vocab_size=280)
    assert calls == ["character", "byte"]
    with pytest.raises(ValueError, match="level must be 'character' or 'byte'"):
        learn_bpe(texts, 40, level="word")
