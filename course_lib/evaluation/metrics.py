"""Scoring translations (notebook 07): chrF and BLEU through sacrebleu, exact match, token accuracy; and the
accuracy of a classifier (notebooks 08 and 12).

A German number below one million is one word ("vierundsechzig"), so word-level BLEU only rewards exact
matches and gives 0 to a hypothesis that has one letter wrong. Two character-level scores see the near
misses:

- chrF (Popović, 2015): the F-score (beta = 2, recall weighted twice) of character n-grams, n = 1..6;
- BLEU with ``tokenize="char"``: BLEU's n-gram precisions (n = 1..4) and brevity penalty over characters.

Both are sacrebleu's own implementations (corpus-level, 0 to 100). :func:`exact_match` is the strictest
score: the fraction of sentences translated exactly right (also 0 to 100 here, to sit beside them).

:func:`classifier_accuracy` is the one accuracy of a whole-input classifier (images for the ViT, ``[CLS]``
sequences for BERT); :func:`token_accuracy` scores per-position predictions.

Parsing (notebook 13, the paper's section 6.3) is scored as the paper's Table 4 is: labelled-bracket F1, the
measure of the ``evalb`` program (Sekine and Collins, 1997). A tree is read as its constituents, each a labelled
span ``(label, first leaf, last leaf + 1)`` (:func:`labelled_brackets`); a constituent of the output is right
when the reference has the same label over the same span. :func:`bracket_f1` gives the F1 over a corpus, and
:func:`parse_scores` adds precision, recall, exact match and the share of outputs that are well-formed trees.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence

import torch
from torch import nn

__all__ = ["chrf", "bleu", "exact_match", "token_accuracy", "translation_scores", "classifier_accuracy",
           "labelled_brackets", "bracket_f1", "parse_scores"]


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


@torch.no_grad()
def classifier_accuracy(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, batch_size: int = 256,
                        classify: Callable[[torch.Tensor], torch.Tensor] | None = None) -> float:
    """The fraction of ``inputs`` whose most probable class is their label (0 to 1), with ``model`` in eval mode.

    ``classify`` maps a batch of inputs to logits (batch, num_classes): ``model`` itself by default (a ViT on
    images (n, C, H, W)), or a method of it (``bert.classify`` on token ids (n, seq)). The inputs go to the
    model's device ``batch_size`` at a time; the model's train/eval mode is restored afterwards.

    Example:
        >>> classifier_accuracy(nn.Linear(2, 2), torch.zeros(4, 2), torch.zeros(4, dtype=torch.long)) in (0.0, 1.0)
        True
    """
    if not isinstance(inputs, torch.Tensor) or not isinstance(labels, torch.Tensor) or labels.dim() != 1 \
            or len(inputs) != len(labels):
        raise ValueError(f"classifier_accuracy: inputs (n, ...) and labels (n,) must be tensors of the same "
                         f"length n, got {tuple(getattr(inputs, 'shape', ()))} and "
                         f"{tuple(getattr(labels, 'shape', ()))}")
    if len(labels) == 0:
        raise ValueError("classifier_accuracy: no inputs given (an accuracy of nothing is undefined)")
    classify = classify if classify is not None else model
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    right = 0
    for x, y in zip(inputs.split(batch_size), labels.split(batch_size), strict=True):
        right += int((classify(x.to(device)).argmax(-1).cpu() == y).sum())  # logits (b, num_classes)
    model.train(was_training)
    return right / len(labels)


# ---------------------------------------------------------------------------------------------------
# Parsing: labelled-bracket precision, recall and F1 (evalb's measure)
# ---------------------------------------------------------------------------------------------------

_TREE_TOKENS = re.compile(r"\(|\)|[^\s()]+")


def labelled_brackets(tree: str) -> tuple[Counter[tuple[str, int, int]], int]:
    """The constituents of a linearised tree, as a multiset of ``(label, start, end)``, and its number of leaves.

    The format is :func:`course_lib.data.treebank.linearise`'s: ``(`` and a label open a constituent, any other
    token is a leaf (a part-of-speech tag standing for a word), ``)`` closes the constituent opened last. A
    constituent spans leaves ``start`` to ``end - 1``; the leaves are not brackets themselves (evalb does not
    count part-of-speech tags either), the outermost constituent is. The same bracket twice (a unary chain such
    as ``(NP (NP DT NN ) )``) counts twice.

    A string that is not exactly one tree raises a ValueError saying why: empty, brackets that do not balance,
    a ``(`` without a label, a constituent without a leaf, or tokens outside the outermost constituent.

    Example:
        >>> brackets, leaves = labelled_brackets("(S (NP DT NN ) (VP VBZ ) )")
        >>> sorted(brackets), leaves
        ([('NP', 0, 2), ('S', 0, 3), ('VP', 2, 3)], 3)
    """
    if not isinstance(tree, str):
        raise TypeError(f"labelled_brackets: tree must be a string, got {type(tree).__name__}")
    tokens = _TREE_TOKENS.findall(tree)
    if not tokens:
        raise ValueError("labelled_brackets: the tree is empty")
    if tokens[0] != "(":
        raise ValueError(f"labelled_brackets: a tree starts with '(' and a label, got {tokens[0]!r}")
    brackets: Counter[tuple[str, int, int]] = Counter()
    open_: list[tuple[str, int]] = []    # (label, first leaf) of the constituents not closed yet
    leaves = 0
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "(":
            if i + 1 == len(tokens) or tokens[i + 1] in ("(", ")"):
                raise ValueError(f"labelled_brackets: '(' without a label at token {i}")
            if not open_ and brackets:
                raise ValueError(f"labelled_brackets: a second tree starts at token {i}; expected one tree")
            open_.append((tokens[i + 1], leaves))
            i += 2
            continue
        if token == ")":
            if not open_:
                raise ValueError(f"labelled_brackets: ')' at token {i} closes nothing (too many closing brackets)")
            label, start = open_.pop()
            if start == leaves:
                raise ValueError(f"labelled_brackets: the constituent {label!r} closed at token {i} has no leaf")
            brackets[(label, start, leaves)] += 1
        elif not open_:
            raise ValueError(f"labelled_brackets: the leaf {token!r} at token {i} is outside the tree")
        else:
            leaves += 1
        i += 1
    if open_:
        raise ValueError(f"labelled_brackets: {len(open_)} constituent(s) not closed (too few closing brackets)")
    return brackets, leaves


def _bracket_totals(hypotheses: Sequence[str], references: Sequence[str], name: str) -> tuple[int, int, int, int]:
    """``(matched, hypothesis brackets, reference brackets, well-formed hypotheses)`` over the corpus.

    A hypothesis that is not one tree, or whose number of leaves differs from its reference's, is not
    well-formed: it contributes no bracket (and no match), while its reference's brackets still count.
    """
    _check(hypotheses, references, name)
    matched = n_hyp = n_ref = well_formed = 0
    for i, (hypothesis, reference) in enumerate(zip(hypotheses, references, strict=True)):
        try:
            gold, gold_leaves = labelled_brackets(reference)
        except ValueError as error:
            raise ValueError(f"{name}: reference {i} is not a tree: {error}") from None
        n_ref += gold.total()
        try:
            test, test_leaves = labelled_brackets(hypothesis)
        except ValueError:
            continue
        if test_leaves != gold_leaves:
            continue
        well_formed += 1
        n_hyp += test.total()
        matched += (test & gold).total()    # each reference bracket matches at most once
    return matched, n_hyp, n_ref, well_formed


def _f1(matched: int, n_hyp: int, n_ref: int) -> tuple[float, float, float]:
    precision = 100.0 * matched / n_hyp if n_hyp else 0.0
    recall = 100.0 * matched / n_ref if n_ref else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def bracket_f1(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus labelled-bracket F1 (0 to 100) of linearised trees against their references: evalb's measure.

    Precision is the share of the hypotheses' brackets (:func:`labelled_brackets`) found in their reference,
    recall the share of the references' brackets found, each bracket matched at most once (a duplicated
    bracket earns one match); both are summed over the corpus before dividing, as evalb does, and F1 is their
    harmonic mean. One difference from evalb: evalb skips a sentence whose output cannot be aligned with the
    reference (not a tree, or a different number of words) and reports it apart; here it counts as an output
    with no bracket, so a parser cannot gain by failing (:func:`parse_scores` reports their share as well).

    Example:
        >>> bracket_f1(["(S (NP DT NN ) (VP VBZ ) )"], ["(S (NP DT NN ) (VP VBZ ) )"])
        100.0
        >>> round(bracket_f1(["(S (NP DT ) (VP NN VBZ ) )"], ["(S (NP DT NN ) (VP VBZ ) )"]), 2)
        33.33
    """
    return _f1(*_bracket_totals(hypotheses, references, "bracket_f1")[:3])[2]


def parse_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """``{"F1", "precision", "recall", "exact", "well-formed"}`` of linearised trees, each 0 to 100.

    ``F1``, ``precision`` and ``recall`` as :func:`bracket_f1` counts them; ``exact`` is :func:`exact_match`
    (the whole tree right); ``well-formed`` the percentage of hypotheses that are one tree with as many leaves
    as their reference.
    """
    matched, n_hyp, n_ref, well_formed = _bracket_totals(hypotheses, references, "parse_scores")
    precision, recall, f1 = _f1(matched, n_hyp, n_ref)
    return {"F1": f1, "precision": precision, "recall": recall, "exact": exact_match(hypotheses, references),
            "well-formed": 100.0 * well_formed / len(references)}
