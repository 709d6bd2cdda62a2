"""Real sentences from files (course_lib.data.translation): the Tatoeba tab-separated format and the Multi30k two-file
layout, read back exactly, fed through notebook 07's tokeniser, vocabulary and batching, and clear errors
(file, line number, what was expected) on malformed input. The files are written by the tests."""

from __future__ import annotations

import pytest
import torch

from course_lib.data.translation import (
    CharTokenizer,
    Pair,
    TranslationDataset,
    Vocab,
    WordTokenizer,
    make_loader,
    read_parallel_files,
    read_tsv_pairs,
    split_pairs,
    write_tsv_pairs,
)

SENTENCES = [("Hi.", "Hallo!"), ("I'm cold.", "Mir ist kalt."), ("Tom isn't home.", "Tom ist nicht zu Hause."),
             ("Grüß dich, Zoë!", "Grüß dich, Zoë!"), ("It's 5 o'clock.", "Es ist 5 Uhr.")]


def test_tsv_round_trip(tmp_path) -> None:
    pairs = [Pair(i + 1, s, t) for i, (s, t) in enumerate(SENTENCES)]
    write_tsv_pairs(pairs, tmp_path / "eng-deu.txt")
    assert read_tsv_pairs(tmp_path / "eng-deu.txt") == pairs


def test_tsv_tatoeba_format_with_attribution_crlf_and_blank_lines(tmp_path) -> None:
    attribution = "CC-BY 2.0 (France) Attribution: tatoeba.org #2877272 (CM) & #380701 (cburgmer)"
    text = f"Go.\tGeh.\t{attribution}\r\n\r\nHi. \t Hallo!\t{attribution}\r\n"
    (tmp_path / "eng-deu.txt").write_bytes(text.encode("utf-8"))
    assert read_tsv_pairs(tmp_path / "eng-deu.txt") == [Pair(1, "Go.", "Geh."), Pair(3, "Hi.", "Hallo!")]


@pytest.mark.parametrize("content, line, words", [
    ("Go.\tGeh.\nno tab here\n", 2, "expected 2 or 3 tab-separated columns"),
    ("a\tb\tc\td\n", 1, "got 4"),
    ("Go.\tGeh.\n\tHallo\n", 2, "source (column 1) is empty"),
    ("Go.\t \n", 1, "target (column 2) is empty"),
])
def test_tsv_malformed_lines_name_file_line_and_expectation(tmp_path, content, line, words) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError) as info:
        read_tsv_pairs(path)
    assert f"bad.txt:{line}:" in str(info.value) and words in str(info.value)


def test_tsv_other_errors(tmp_path) -> None:
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no sentence pairs"):
        read_tsv_pairs(tmp_path / "empty.txt")
    with pytest.raises(ValueError, match="blank line"):
        read_tsv_pairs(tmp_path / "empty.txt", skip_blank=False)
    (tmp_path / "latin1.txt").write_bytes("Grüß\tdich\n".encode("latin-1"))
    with pytest.raises(ValueError, match="not utf-8 text"):
        read_tsv_pairs(tmp_path / "latin1.txt")
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        read_tsv_pairs(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="pair 0 has a src"):
        write_tsv_pairs([Pair(1, "a\tb", "c")], tmp_path / "out.txt")


def _write_two_files(tmp_path, src_lines, tgt_lines):
    (tmp_path / "train.en").write_text("".join(s + "\n" for s in src_lines), encoding="utf-8")
    (tmp_path / "train.de").write_text("".join(t + "\n" for t in tgt_lines), encoding="utf-8")
    return tmp_path / "train.en", tmp_path / "train.de"


def test_two_files_round_trip(tmp_path) -> None:
    src, tgt = _write_two_files(tmp_path, [s for s, _ in SENTENCES], [t for _, t in SENTENCES])
    assert read_parallel_files(src, tgt) == [Pair(i + 1, s, t) for i, (s, t) in enumerate(SENTENCES)]


def test_two_files_errors(tmp_path) -> None:
    src, tgt = _write_two_files(tmp_path, ["A dog.", "A cat."], ["Ein Hund."])
    with pytest.raises(ValueError, match=r"train.en has 2 lines but .*train.de has 1: expected the same number"):
        read_parallel_files(src, tgt)
    src, tgt = _write_two_files(tmp_path, ["A dog.", "A cat."], ["Ein Hund.", ""])
    with pytest.raises(ValueError, match=r"train.de:2: empty line; expected a sentence aligned with line 2"):
        read_parallel_files(src, tgt)


def test_file_pairs_feed_notebook_07s_pipeline(tmp_path) -> None:
    """Pairs read from a file go through the same tokeniser, vocabulary and batching as the number corpus,
    and the batches decode back to the sentences of the file."""
    write_tsv_pairs([Pair(i + 1, s, t) for i, (s, t) in enumerate(SENTENCES)], tmp_path / "eng-deu.txt")
    pairs = read_tsv_pairs(tmp_path / "eng-deu.txt")
    src_tok, tgt_tok = WordTokenizer(), CharTokenizer()
    src_vocab = Vocab.build(src_tok.tokenize(p.src) for p in pairs)
    tgt_vocab = Vocab.build(tgt_tok.tokenize(p.tgt) for p in pairs)
    dataset = TranslationDataset(pairs, src_tok, tgt_tok, src_vocab, tgt_vocab)
    decoded = []
    for batch in make_loader(dataset, batch_size=2, shuffle=False, bucket=False):
        assert batch.src.shape[0] == batch.tgt_out.shape[0] and batch.tgt_out.dtype == torch.long
        decoded += [tgt_tok.detokenize(tgt_vocab.decode(row.tolist())) for row in batch.tgt_out]
        assert all(src_vocab.unk_id not in row.tolist() for row in batch.src)
    assert decoded == [t for _, t in SENTENCES]


def test_split_pairs_is_a_seeded_partition() -> None:
    pairs = [Pair(i, f"s{i}", f"t{i}") for i in range(20)]
    train, valid, test = split_pairs(pairs, 3, 4, seed=1)
    assert (len(train), len(valid), len(test)) == (13, 3, 4)
    assert sorted(p.number for p in train + valid + test) == list(range(20))
    assert split_pairs(pairs, 3, 4, seed=1) == (train, valid, test) != split_pairs(pairs, 3, 4, seed=2)
    with pytest.raises(ValueError, match="n_valid"):
        split_pairs(pairs, 10, 10)
