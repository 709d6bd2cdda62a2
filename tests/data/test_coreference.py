"""Notebook 02's Korean sentences (course_lib.data.coreference): the words, the answers and their positions agree."""

from __future__ import annotations

import pytest
import torch

from course_lib.data.coreference import (
    FILLERS,
    MAX_LEN,
    PAD,
    SENTENCE,
    STATES,
    SUBJECTS,
    VOCAB,
    coreference_batch,
    decode,
    encode,
)


def test_the_notes_sentence_round_trips() -> None:
    assert " ".join(SENTENCE) == "동물은 길을 건너지 않았다 왜냐하면 그것은 너무 피곤 했기 때문이다"
    assert decode(encode(SENTENCE)) == SENTENCE
    assert len(set(VOCAB)) == len(VOCAB)


def test_every_sentence_holds_its_answers_where_it_says() -> None:
    batch = coreference_batch(300, torch.Generator().manual_seed(0))
    assert batch.ids.shape == (300, MAX_LEN) and batch.positions.shape == (300, 3) and batch.targets.shape == (300, 2)
    fillers_seen = set()
    for ids, (it, subject, state), (who, what) in zip(batch.ids, batch.positions, batch.targets, strict=True):
        words = decode(ids)
        assert words[it] == "그것은" and words[subject] == SUBJECTS[who] and words[state] == STATES[what]
        assert [w for w in words if w not in FILLERS][2:] == [*SENTENCE[2:7], STATES[what], *SENTENCE[8:]]
        assert VOCAB[ids[-1]] == PAD
        fillers_seen.add(sum(w in FILLERS for w in words))
    assert fillers_seen == {0, 1, 2, 3}
    assert len(set(batch.positions[:, 0].tolist())) > 1, "'그것은' must not sit at one fixed position"


def test_a_seed_gives_the_same_batch_and_bad_inputs_are_named() -> None:
    one, two = (coreference_batch(8, torch.Generator().manual_seed(3)) for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))
    with pytest.raises(ValueError, match="batch_size"):
        coreference_batch(0, torch.Generator())
    with pytest.raises(ValueError, match="개구리는"):
        encode(["개구리는"])
