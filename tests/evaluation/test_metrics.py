"""course_lib.evaluation.metrics: chrF and BLEU agree with sacrebleu's functional API; exact match; token accuracy."""

from __future__ import annotations

import pytest
import sacrebleu
import torch

from course_lib.evaluation.metrics import bleu, chrf, exact_match, token_accuracy, translation_scores

HYP = ["vierundsechzig", "dreihundertelf", "neunzehntausend", "zwölf"]
REF = ["vierundsechzig", "dreihundertzwölf", "neunzehntausendeins", "zwölf"]


def test_chrf_and_bleu_equal_sacrebleu_functional_api() -> None:
    assert chrf(HYP, REF) == pytest.approx(sacrebleu.corpus_chrf(HYP, [REF]).score)
    assert bleu(HYP, REF) == pytest.approx(sacrebleu.corpus_bleu(HYP, [REF], tokenize="char").score)


def test_perfect_and_near_misses() -> None:
    assert chrf(REF, REF) == pytest.approx(100.0) and bleu(REF, REF) == pytest.approx(100.0)
    assert 50 < chrf(HYP, REF) < 100 and 50 < bleu(HYP, REF) < 100


def test_word_bleu_is_blind_to_near_misses() -> None:
    near = ["vierundsechzog"]  # one letter wrong, one German word
    assert bleu(near, ["vierundsechzig"], tokenize="13a") == 0.0
    assert bleu(near, ["vierundsechzig"]) > 50 and chrf(near, ["vierundsechzig"]) > 50


def test_exact_match() -> None:
    assert exact_match(HYP, REF) == 50.0
    assert exact_match([" elf "], ["elf"]) == 100.0


def test_translation_scores_keys() -> None:
    scores = translation_scores(HYP, REF)
    assert set(scores) == {"exact", "chrF", "BLEU(char)"} and scores["exact"] == 50.0


@pytest.mark.parametrize("fn", [chrf, bleu, exact_match])
def test_bad_input(fn) -> None:
    with pytest.raises(ValueError, match="2 hypotheses but 1"):
        fn(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="no sentences"):
        fn([], [])
    with pytest.raises(TypeError, match="lists of strings"):
        fn("abc", "abc")


def test_token_accuracy() -> None:
    logits = torch.tensor([[[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]])  # argmax 1, 0, 2
    target = torch.tensor([[1, 2, 0]])  # last position is padding
    assert token_accuracy(logits, target, ignore_index=0) == 0.5
    assert torch.isnan(torch.tensor(token_accuracy(logits, torch.zeros(1, 3, dtype=torch.long))))
    with pytest.raises(ValueError, match="target"):
        token_accuracy(logits, torch.zeros(3, dtype=torch.long))
