"""Notebook 02's Korean sentences: the study notes' two-head example as a tiny synthetic task.

The notes explain multi-head attention with one sentence, "동물은 길을 건너지 않았다 왜냐하면 그것은 너무
피곤했기 때문이다" (the animal did not cross the road because it was too tired): reading "그것은" (it), one head
should look at "동물은" (what "it" is: coreference) and another at "피곤" (what it was: tired). This module
generates sentences of that shape with the subject, the object and the state drawn at random and filler adverbs
inserted at random places (so that no word sits at a fixed position), and the two answers a model must give at
"그것은": which subject, which state. The state's word is split from its ending ("피곤 했기"), as a subword
tokeniser would split it (notebook 07).

Example::

    batch = coreference_batch(4, torch.Generator().manual_seed(0))
    batch.ids.shape            # torch.Size([4, 14]): token ids, padded with PAD
    batch.targets[0]           # tensor([subject, state]): indices into SUBJECTS and STATES
    decode(batch.ids[0])       # the sentence's words, padding dropped
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["SENTENCE", "SUBJECTS", "OBJECTS", "STATES", "FILLERS", "VOCAB", "PAD", "MAX_LEN", "CoreferenceBatch",
           "coreference_batch", "encode", "decode"]

SENTENCE = "동물은 길을 건너지 않았다 왜냐하면 그것은 너무 피곤 했기 때문이다".split()
# animal, child, cat, student, old man, puppy
SUBJECTS = ["동물은", "아이는", "고양이는", "학생은", "노인은", "강아지는"]
OBJECTS = ["길을", "강을", "다리를"]  # the road, the river, the bridge
STATES = ["피곤", "긴장", "불안", "우울", "지루", "심심"]  # tired, nervous, anxious, gloomy, bored, idle (+ 했기)
FILLERS = ["어제", "결국", "정말"]  # yesterday, in the end, really
PAD = "<pad>"
VOCAB = [*SUBJECTS, *OBJECTS, *STATES, *FILLERS, *SENTENCE[2:6], SENTENCE[6], *SENTENCE[8:], PAD]
MAX_FILLERS = 3
MAX_LEN = len(SENTENCE) + MAX_FILLERS + 1  # 14 (one position of padding at least)
_INDEX = {word: i for i, word in enumerate(VOCAB)}


class CoreferenceBatch(NamedTuple):
    """Token ids ``(batch, MAX_LEN)`` padded with ``PAD``; ``positions`` ``(batch, 3)``: where "그것은", the
    subject and the state stand; ``targets`` ``(batch, 2)``: the subject's index in ``SUBJECTS`` and the state's
    in ``STATES``, the two answers at "그것은"."""

    ids: torch.Tensor
    positions: torch.Tensor
    targets: torch.Tensor


def encode(words: list[str]) -> torch.Tensor:
    """Words -> token ids ``(len(words),)``; an unknown word raises a ValueError naming it."""
    unknown = [w for w in words if w not in _INDEX]
    if unknown:
        raise ValueError(f"encode: words {unknown} are not in VOCAB ({len(VOCAB)} words)")
    return torch.tensor([_INDEX[w] for w in words])


def decode(ids: torch.Tensor) -> list[str]:
    """Token ids ``(seq,)`` -> words, padding dropped."""
    return [VOCAB[i] for i in ids.tolist() if VOCAB[i] != PAD]


def _sentence(subject: int, obj: int, state: int, fillers: list[tuple[int, int]]) -> list[str]:
    words = [SUBJECTS[subject], OBJECTS[obj], *SENTENCE[2:7], STATES[state], *SENTENCE[8:]]
    for place, filler in fillers:  # place in 0..1: a relative position, so that every gap can be chosen
        words.insert(round(place * len(words)), FILLERS[filler])
    return words


def coreference_batch(batch_size: int, generator: torch.Generator) -> CoreferenceBatch:
    """``batch_size`` random sentences of the notes' shape, drawn with ``generator`` (same seed, same batch)."""
    if batch_size < 1:
        raise ValueError(f"coreference_batch: batch_size must be >= 1, got {batch_size}")
    subjects = torch.randint(len(SUBJECTS), (batch_size,), generator=generator)
    objects = torch.randint(len(OBJECTS), (batch_size,), generator=generator)
    states = torch.randint(len(STATES), (batch_size,), generator=generator)
    counts = torch.randint(MAX_FILLERS + 1, (batch_size,), generator=generator)
    places = torch.rand(batch_size, MAX_FILLERS, generator=generator)
    fillers = torch.randint(len(FILLERS), (batch_size, MAX_FILLERS), generator=generator)
    ids = torch.full((batch_size, MAX_LEN), _INDEX[PAD])
    positions = torch.zeros(batch_size, 3, dtype=torch.long)
    for b in range(batch_size):
        chosen = list(zip(places[b, :counts[b]].tolist(), fillers[b, :counts[b]].tolist(), strict=True))
        words = _sentence(int(subjects[b]), int(objects[b]), int(states[b]), chosen)
        ids[b, :len(words)] = encode(words)
        positions[b] = torch.tensor([words.index("그것은"), words.index(SUBJECTS[subjects[b]]),
                                     words.index(STATES[states[b]])])
    return CoreferenceBatch(ids, positions, torch.stack([subjects, states], dim=1))
