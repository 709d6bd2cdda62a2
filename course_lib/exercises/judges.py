"""Output judges of exercises whose answer is random (an ``Exercise.compare``), by name.

No output of a random answer can be compared with the reference's number for number; a judge says what is wrong
with one (``judge(case, expected, got) -> problems``, each ``"kind: message"``, none when it is right). The judges
live here, in the mechanism, not beside their exercises, because the class edition ships them to run its checks
(it holds no checks module): its stored data names a judge by its key in :data:`JUDGES`, and the edition's check
imports this module plainly. A judge computes no answer.

Notebook 12's masking (BERT's 80/10/10): a learner who draws the same probabilities in another order, or picks
exactly 15 % of each sequence as the original BERT code does, is right too. :func:`masking_problems` judges what
came out: what must hold exactly (labels, untouched positions, special tokens, the range of random replacements)
and what must hold on average, each share within five standard deviations of its binomial spread (a correct
implementation fails about once in a million checks).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from course_lib.models.bert import IGNORE_INDEX

__all__ = ["JUDGES", "judge_name", "masking_problems", "SELECT", "MASK", "RANDOM", "SIGMAS"]

SELECT, MASK, RANDOM = 0.15, 0.8, 0.1  # BERT's proportions, which the learner's function must reproduce
SIGMAS = 5.0


def _share_problem(kind: str, what: str, count: int, total: int, low: float, high: float, hint: str) -> list[str]:
    """A problem unless count / total lies within ``SIGMAS`` binomial standard deviations of [low, high]."""
    if total == 0:
        return []
    share = count / total
    middle = min(max(share, low), high)
    spread = SIGMAS * math.sqrt(max(middle * (1 - middle), 1e-4) / total)
    if low - spread <= share <= high + spread:
        return []
    expected = f"{low:.1%}" if low == high else f"{low:.1%}-{high:.1%}"
    return [f"{kind}: {what} is {share:.1%} ({count} of {total}); expected {expected} (within ±{spread:.1%}). {hint}"]


def _integer_array(value: Any, shape: tuple[int, ...]) -> bool:
    return type(value) is np.ndarray and value.shape == shape and value.dtype.kind in "iu"


def masking_problems(case: Any, expected: Any, got: Any) -> list[str]:
    """Judge a learner's ``(inputs, labels)`` on a masking case (see the module docstring); [] when right.

    ``got`` is plain data (NumPy arrays, lists), untrusted: anything else is a problem, never an exception.
    """
    tokens, mask_id, vocab_size, special_ids = case.args
    tokens = tokens.numpy()
    if not (isinstance(got, list) and len(got) == 2):
        return ["output: expected a tuple (inputs, labels) of two integer tensors"]
    for name, value in zip(("inputs", "labels"), got, strict=True):
        if not _integer_array(value, tokens.shape):
            shape = getattr(value, "shape", None)
            return [f"output: {name} must be an integer tensor of shape {tokens.shape} like tokens, got "
                    f"{type(value).__name__} of shape {shape} and dtype {getattr(value, 'dtype', None)}"]
    inputs, labels = (value.astype(np.int64) for value in got)  # uint8...uint64 compared as signed numbers
    special_list = sorted({*special_ids, mask_id})
    special = np.isin(tokens, special_list)
    selected = labels != IGNORE_INDEX
    problems = []
    wrong_labels = selected & (labels != tokens)
    if wrong_labels.any():
        problems.append(f"labels: {int(wrong_labels.sum())} labels are neither -100 nor the original token "
                        f"(the label of a selected position is what was there before masking)")
    changed = ~selected & (inputs != tokens)
    if changed.any():
        problems.append(f"unselected positions: {int(changed.sum())} positions changed although their label is "
                        f"-100 (only selected positions may change)")
    if (selected & special).any():
        problems.append(f"special tokens: {int((selected & special).sum())} special tokens were selected "
                        f"([CLS], [SEP], [PAD] are never predicted)")
    problems += _share_problem("selected share", "the share of ordinary positions selected",
                               int(selected[~special].sum()), int((~special).sum()), SELECT, SELECT,
                               "select each ordinary position with probability 0.15")
    num_ordinary = vocab_size - len([s for s in special_list if 0 <= s < vocab_size])
    chosen = selected & ~special
    masked, kept = chosen & (inputs == mask_id), chosen & (inputs == tokens)
    replaced = chosen & ~masked & ~kept
    n = int(chosen.sum())
    problems += _share_problem("[MASK] share", "the share of selected positions given [MASK]", int(masked.sum()), n,
                               MASK, MASK, "80 % of the selected positions become [MASK]")
    problems += _share_problem("random share", "the share of selected positions given another token",
                               int(replaced.sum()), n, RANDOM * (1 - 1 / max(num_ordinary, 1)), RANDOM,
                               "10 % of the selected positions get a random token")
    problems += _share_problem("unchanged share", "the share of selected positions left as they were",
                               int(kept.sum()), n, 1 - MASK - RANDOM, 1 - MASK - RANDOM + RANDOM / max(num_ordinary, 1),
                               "10 % of the selected positions keep their token")
    drawn = inputs[replaced]
    if ((drawn < 0) | (drawn >= vocab_size)).any():
        problems.append(f"random range: a random token lies outside the vocabulary [0, {vocab_size})")
    elif np.isin(drawn, special_list).any():
        problems.append("random special: a random replacement is a special token (draw from the ordinary ids only)")
    elif drawn.size:
        ordinary = np.setdiff1d(np.arange(vocab_size), special_list)
        spread = SIGMAS * float(ordinary.std()) / math.sqrt(drawn.size) + 1.0
        if abs(float(drawn.mean()) - float(ordinary.mean())) > spread:
            problems.append(f"random spread: the random tokens average id {drawn.mean():.1f}; drawn uniformly from "
                            f"the ordinary ids they would average {ordinary.mean():.1f} ± {spread:.1f}")
    return problems


#: Every judge an exercise can name, by the name the class edition's stored data uses.
JUDGES: dict[str, Callable[[Any, Any, Any], list[str]]] = {"bert_masking": masking_problems}


def judge_name(judge: Callable[..., Any] | None) -> str:
    """The key of ``judge`` in :data:`JUDGES` ("" for none); a judge not there raises (the edition could not run
    it)."""
    if judge is None:
        return ""
    for name, known in JUDGES.items():
        if known is judge:
            return name
    raise ValueError(f"judge_name: {judge!r} is not in course_lib.exercises.judges.JUDGES (add it there, so that "
                     f"the class edition can run it)")
