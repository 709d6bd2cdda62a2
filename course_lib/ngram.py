"""The baseline a neural language model must beat: an interpolated Kneser-Ney n-gram model (n <= 3).

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

import math
from collections import Counter

import torch

__all__ = ["KneserNeyLM"]


class KneserNeyLM:
    """An interpolated Kneser-Ney language model of order 1, 2 or 3 over token ids ``0 .. vocab_size - 1``.

    Example:
        >>> lm = KneserNeyLM(torch.tensor([0, 1, 2, 0, 1, 2, 0, 1]), vocab_size=4, order=3)
        >>> round(sum(lm.prob((0, 1), w) for w in range(4)), 6)
        1.0
    """

    def __init__(self, stream: torch.Tensor, vocab_size: int, order: int = 3, discount: float = 0.75) -> None:
        if order not in (1, 2, 3):
            raise ValueError(f"KneserNeyLM: order must be 1, 2 or 3, got {order}")
        if not 0.0 < discount < 1.0:
            raise ValueError(f"KneserNeyLM: discount must be in (0, 1), got {discount}")
        ids = [int(t) for t in stream]
        self.vocab_size, self.order, self.discount = vocab_size, order, discount
        trigrams = Counter(zip(ids, ids[1:], ids[2:], strict=False))  # stops at the shortest
        bigrams = Counter(zip(ids, ids[1:], strict=False))
        # Highest order: raw counts. Lower orders: continuation counts (number of distinct left neighbours).
        self.tri = trigrams
        self.tri_context = Counter()  # c(u v .)
        self.tri_types = Counter()  # N1+(u v .)
        for (u, v, _), c in trigrams.items():
            self.tri_context[(u, v)] += c
            self.tri_types[(u, v)] += 1
        bigram_counts = bigrams if order == 2 else Counter((v, w) for (_, v, w) in trigrams)  # N1+(. v w)
        self.bi = bigram_counts
        self.bi_context = Counter()
        self.bi_types = Counter()
        for (v, _), c in bigram_counts.items():
            self.bi_context[v] += c
            self.bi_types[v] += 1
        if order == 1:
            self.uni = Counter(ids)
        else:
            self.uni = Counter(w for (_, w) in bigrams)  # N1+(. w)
        self.uni_total = sum(self.uni.values())

    def _p1(self, w: int) -> float:
        d = self.discount
        return (max(self.uni.get(w, 0) - d, 0.0) / self.uni_total
                + d * len(self.uni) / self.uni_total / self.vocab_size)

    def _p2(self, v: int, w: int) -> float:
        total = self.bi_context.get(v, 0)
        if total == 0:
            return self._p1(w)
        d = self.discount
        return max(self.bi.get((v, w), 0) - d, 0.0) / total + d * self.bi_types[v] / total * self._p1(w)

    def _p3(self, u: int, v: int, w: int) -> float:
        total = self.tri_context.get((u, v), 0)
        if total == 0:
            return self._p2(v, w)
        d = self.discount
        return (max(self.tri.get((u, v, w), 0) - d, 0.0) / total
                + d * self.tri_types[(u, v)] / total * self._p2(v, w))

    def prob(self, context: tuple[int, ...], w: int) -> float:
        """P(w | the last ``order - 1`` tokens of ``context``); shorter contexts use the lower orders."""
        context = tuple(context)[-(self.order - 1):] if self.order > 1 else ()
        if len(context) == 2:
            return self._p3(context[0], context[1], w)
        if len(context) == 1:
            return self._p2(context[0], w)
        return self._p1(w)

    def perplexity(self, stream: torch.Tensor, targets: torch.Tensor | None = None) -> float:
        """exp(mean negative log-probability) of the tokens of ``stream`` after its first, each given the
        tokens before it; or only of the positions where the boolean ``targets`` (same shape) is True."""
        ids = [int(t) for t in stream]
        chosen = range(1, len(ids)) if targets is None else [i for i in range(1, len(ids)) if bool(targets[i])]
        nll = [-math.log(self.prob(tuple(ids[max(0, i - self.order + 1):i]), ids[i])) for i in chosen]
        if not nll:
            raise ValueError("KneserNeyLM.perplexity: no token to score")
        return math.exp(sum(nll) / len(nll))
