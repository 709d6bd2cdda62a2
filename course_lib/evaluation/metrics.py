"""Scoring translations (notebook 07): chrF and BLEU through sacrebleu, exact match, token accuracy.

A German number below one million is one word ("vierundsechzig"), so word-level BLEU only rewards exact
matches and gives 0 to a hypothesis that has one letter wrong. Two character-level scores see the near
misses:

- chrF (Popović, 2015): the F-score (beta = 2, recall weighted twice) of character n-grams, n = 1..6;
- BLEU with ``tokenize="char"``: BLEU's n-gram precisions (n = 1..4) and brevity penalty over characters.

Both are sacrebleu's own implementations (corpus-level, 0 to 100). :func:`exact_match` is the strictest
score: the fraction of sentences translated exactly right (also 0 to 100 here, to sit beside them).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["chrf", "bleu", "exact_match", "token_accuracy", "translation_scores"]


def _check(hypotheses: Sequence[str], references: Sequence[str], name: str) -> None:
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise TypeError(f"{name}: hypotheses and references must be lists of strings, not one string")
    if len(hypotheses) != len(references):
        raise ValueError(f"{name}: {len(hypotheses)} hypotheses but {len(references)} references")
    if len(hypotheses) == 0:
        raise ValueError(f"{name}: no sentences to score")


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus chrF (sacrebleu's ``CHRF()``, character 6-grams, beta 2), 0 to 100.

    Example:
        >>> round(chrf(["vierundsechzig"], ["vierundsechzig"]), 1)
        100.0
    """
    from sacrebleu.metrics import CHRF

    _check(hypotheses, references, "chrf")
    return float(CHRF().corpus_score(list(hypotheses), [list(references)]).score)


def bleu(hypotheses: Sequence[str], references: Sequence[str], tokenize: str = "char") -> float:
    """Corpus BLEU (sacrebleu's ``BLEU``), 0 to 100; over characters by default (see the module docstring).

    Example:
        >>> round(bleu(["vierundsechzig"], ["vierundsechzig"]), 1)
        100.0
    """
    from sacrebleu.metrics import BLEU

    _check(hypotheses, references, "bleu")
    return float(BLEU(tokenize=tokenize).corpus_score(list(hypotheses), [list(references)]).score)


def exact_match(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """The percentage of hypotheses equal to their reference (after stripping outer spaces), 0 to 100.

    Example:
        >>> exact_match(["elf", "zwölf"], ["elf", "zwolf"])
        50.0
    """
    _check(hypotheses, references, "exact_match")
    right = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references, strict=True))
    return 100.0 * right / len(references)


def token_accuracy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = 0) -> float:
    """The fraction of non-ignored positions where ``logits.argmax(-1) == target`` (0 to 1).

    Shapes: ``logits`` (..., C), ``target`` (...). NaN when every position is ignored.
    """
    if logits.shape[:-1] != target.shape:
        raise ValueError(f"token_accuracy: target must have shape {tuple(logits.shape[:-1])}, "
                         f"got {tuple(target.shape)}")
    keep = target != ignore_index
    if not keep.any():
        return float("nan")
    return float(((logits.argmax(-1) == target) & keep).sum() / keep.sum())


def translation_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """``{"exact": ..., "chrF": ..., "BLEU(char)": ...}`` for a list of translations."""
    return {"exact": exact_match(hypotheses, references), "chrF": chrf(hypotheses, references),
            "BLEU(char)": bleu(hypotheses, references)}
