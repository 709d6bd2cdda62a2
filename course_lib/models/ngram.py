"""The baseline a neural language model must beat: an interpolated Kneser-Ney n-gram model of any order.

An n-gram model predicts a token from the ``n - 1`` tokens before it by counting. Raw counts give
probability 0 to every continuation not seen in training (infinite perplexity), so the counts are
*smoothed*. Interpolated Kneser-Ney (Kneser & Ney 1995; Chen & Goodman 1998) subtracts a discount ``D``
from every seen count and gives the mass saved to a lower-order model; the lower orders count in how many
*different contexts* a token appears (its continuation count) rather than how often, so that a token that
is frequent only after one word ("Francisco" after "San") is not predicted everywhere. For a trigram::

    P(w | u v) = max(c(u v w) - D, 0) / c(u v .)  +  D * N1+(u v .) / c(u v .) * P2(w | v)
    P2(w | v)  = max(N1+(. v w) - D, 0) / N1+(. v .)  +  D * N1+(v .) / N1+(. v .) * P1(w)
    P1(w)      = max(N1+(. w) - D, 0) / N1+(. .)  +  D * |{w: N1+(. w) > 0}| / N1+(. .) * 1 / V

where ``N1+(. v w)`` is the number of distinct tokens seen before ``v w``; an unseen context falls back to
the next order whole. Each distribution sums to 1 over the vocabulary (tested).
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import dataclass

import torch

from course_lib.validation import check_positive_ints

__all__ = ["KneserNeyLM", "KneserNeyTuning", "tune_kneser_ney"]


def _token_ids(stream: torch.Tensor, vocab_size: int, fn: str, name: str) -> list[int]:
    """The ids of a 1-D integer tensor as a list, after checking each lies in ``[0, vocab_size)``."""
    if not isinstance(stream, torch.Tensor) or stream.dim() != 1 or stream.is_floating_point() \
            or stream.is_complex() or stream.dtype == torch.bool:
        raise ValueError(f"{fn}: {name} must be a 1-D integer tensor of token ids, got "
                         f"{getattr(stream, 'dtype', type(stream).__name__)} of shape "
                         f"{tuple(getattr(stream, 'shape', ()))}")
    if stream.numel() and (int(stream.min()) < 0 or int(stream.max()) >= vocab_size):
        raise ValueError(f"{fn}: {name} must hold ids in [0, vocab_size={vocab_size}), got ids from "
                         f"{int(stream.min())} to {int(stream.max())}")
    return stream.tolist()


def _check_discount(discount: object, fn: str) -> None:
    if isinstance(discount, bool) or not isinstance(discount, (int, float)) or not 0.0 < discount < 1.0:
        raise ValueError(f"{fn}: discount must be a number in (0, 1), got {discount!r}")


class KneserNeyLM:
    """An interpolated Kneser-Ney language model of any order over token ids ``0 .. vocab_size - 1``.

    The highest order uses raw counts; every lower order ``k`` uses continuation counts, the number of
    distinct tokens seen before each ``k``-gram (read off the ``(k + 1)``-gram types of the stream).

    Example:
        >>> lm = KneserNeyLM(torch.tensor([0, 1, 2, 0, 1, 2, 0, 1]), vocab_size=4, order=3)
        >>> round(sum(lm.prob((0, 1), w) for w in range(4)), 6)
        1.0
    """

    def __init__(self, stream: torch.Tensor, vocab_size: int, order: int = 3, discount: float = 0.75) -> None:
        if not isinstance(order, int) or order < 1:
            raise ValueError(f"KneserNeyLM: order must be an integer >= 1, got {order!r}")
        _check_discount(discount, "KneserNeyLM")
        check_positive_ints("KneserNeyLM", vocab_size=vocab_size)
        ids = _token_ids(stream, vocab_size, "KneserNeyLM", "stream")
        if not ids:
            raise ValueError("KneserNeyLM: stream must hold at least one token to count, got an empty stream")
        self.vocab_size, self.order, self.discount = vocab_size, order, discount
        # counts[k]: k-gram -> count (raw at the highest order, continuation below it), k = 1 .. order
        self.counts: dict[int, Counter] = {order: Counter(zip(*(ids[i:] for i in range(order)), strict=False))}
        for k in range(order - 1, 0, -1):
            longer = Counter(zip(*(ids[i:] for i in range(k + 1)), strict=False))  # raw (k + 1)-grams
            self.counts[k] = Counter(gram[1:] for gram in longer)  # N1+(. gram): distinct left neighbours
        # for k >= 2: per context (the first k - 1 tokens), the total count and the number of distinct next tokens
        self.context_total: dict[int, Counter] = {}
        self.context_types: dict[int, Counter] = {}
        for k in range(2, order + 1):
            total, types = Counter(), Counter()
            for gram, c in self.counts[k].items():
                total[gram[:-1]] += c
                types[gram[:-1]] += 1
            self.context_total[k], self.context_types[k] = total, types
        self.uni_total = sum(self.counts[1].values())

    def rediscounted(self, discount: float) -> KneserNeyLM:
        """The same counts with another discount (the counts do not depend on it: no recounting).

        Example:
            >>> lm = KneserNeyLM(torch.tensor([0, 1, 2, 0, 1]), vocab_size=3, order=2)
            >>> lm.rediscounted(0.9).discount, lm.discount
            (0.9, 0.75)
        """
        _check_discount(discount, "KneserNeyLM.rediscounted")
        other = copy.copy(self)  # shares the count tables, which are never changed after __init__
        other.discount = discount
        return other

    def _p1(self, w: int) -> float:
        d, uni = self.discount, self.counts[1]
        return max(uni.get((w,), 0) - d, 0.0) / self.uni_total + d * len(uni) / self.uni_total / self.vocab_size

    def _p(self, context: tuple[int, ...], w: int) -> float:
        """P(w | context) at order len(context) + 1, interpolated down to the unigram."""
        if not context:
            return self._p1(w)
        k = len(context) + 1
        total = self.context_total[k].get(context, 0)
        lower = self._p(context[1:], w)
        if total == 0:  # an unseen context falls back to the next order whole
            return lower
        d = self.discount
        return (max(self.counts[k].get(context + (w,), 0) - d, 0.0) / total
                + d * self.context_types[k][context] / total * lower)

    def prob(self, context: tuple[int, ...], w: int) -> float:
        """P(w | the last ``order - 1`` tokens of ``context``); shorter contexts use the lower orders."""
        ids = [*context, w]
        outside = [i for i in ids if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.vocab_size]
        if outside:
            raise ValueError(f"KneserNeyLM.prob: context and w must be int ids in [0, {self.vocab_size}), "
                             f"got {outside[0]!r}")
        context = tuple(context)[-(self.order - 1):] if self.order > 1 else ()
        return self._p(context, w)

    def perplexity(self, stream: torch.Tensor, targets: torch.Tensor | None = None) -> float:
        """exp(mean negative log-probability) of the tokens of ``stream`` after its first, each given the
        tokens before it; or only of the positions where the boolean ``targets`` (same shape) is True."""
        ids = _token_ids(stream, self.vocab_size, "KneserNeyLM.perplexity", "stream")
        if targets is not None and (not isinstance(targets, torch.Tensor) or targets.dtype != torch.bool
                                    or targets.shape != stream.shape):
            raise ValueError(f"KneserNeyLM.perplexity: targets must be a bool tensor of the stream's shape "
                             f"{tuple(stream.shape)}, got {getattr(targets, 'dtype', type(targets).__name__)} "
                             f"{tuple(getattr(targets, 'shape', ()))}")
        chosen = range(1, len(ids)) if targets is None else [i for i in range(1, len(ids)) if bool(targets[i])]
        nll = [-math.log(self.prob(tuple(ids[max(0, i - self.order + 1):i]), ids[i])) for i in chosen]
        if not nll:
            raise ValueError("KneserNeyLM.perplexity: no token to score")
        return math.exp(sum(nll) / len(nll))


@dataclass(frozen=True)
class KneserNeyTuning:
    """The order and discount :func:`tune_kneser_ney` chose, and the development perplexity of every pair tried
    (``dev_perplexity[order][discount]``)."""

    order: int
    discount: float
    dev_perplexity: dict[int, dict[float, float]]


def tune_kneser_ney(train: torch.Tensor, dev: torch.Tensor, vocab_size: int, orders: tuple[int, ...] = (1, 2, 3, 4, 5),
                    discounts: tuple[float, ...] = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)) -> KneserNeyTuning:
    """Choose the order and discount of a :class:`KneserNeyLM` on held-out text: each order counted on ``train``
    once, every discount scored on ``dev``, the lowest development perplexity kept.

    ``dev`` must be text the final model is not scored on (a development split of the training documents):
    choosing on the validation text itself would tune the baseline on its own test.

    Example:
        >>> train, dev = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 3]), torch.tensor([0, 1, 2, 0, 1])
        >>> tune_kneser_ney(train, dev, vocab_size=4, orders=(1, 3), discounts=(0.5, 0.9)).order
        3
    """
    if not orders or not discounts:
        raise ValueError(f"tune_kneser_ney: orders and discounts must not be empty, got {orders!r}, {discounts!r}")
    table: dict[int, dict[float, float]] = {}
    for order in orders:
        counted = KneserNeyLM(train, vocab_size, order)
        table[order] = {d: counted.rediscounted(d).perplexity(dev) for d in discounts}
    order, discount = min(((o, d) for o in table for d in table[o]), key=lambda pair: table[pair[0]][pair[1]])
    return KneserNeyTuning(order, discount, table)
