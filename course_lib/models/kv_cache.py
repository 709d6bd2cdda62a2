"""The key/value cache of one attention layer: what autoregressive generation keeps between steps.

Without a cache, producing token ``t`` runs the model on all ``t`` tokens again, although the keys and values
of positions ``0 .. t-1`` have not changed (under a causal mask a position never looks at later ones). With
one, each step feeds only the new tokens: every attention layer computes their keys and values, appends them
to those it stored (:meth:`KVCache.update`) and attends over all of them. A model keeps one cache per layer
(a ``list[KVCache]``), as Hugging Face's models keep one entry per layer in their ``past_key_values``.

A cache also counts the positions it has seen (:attr:`KVCache.seen`), which is the absolute position of the
next token: what learned position embeddings and rotary embeddings need, and what tells apart a cache that
stores everything from one that keeps a window (a subclass may drop old keys; ``seen`` keeps counting).

Shapes: keys and values ``(batch, kv_heads, stored, d_k)``; ``kv_heads`` is the model's number of heads, or
fewer when queries share keys (grouped-query attention).

A :class:`SlidingWindowCache` keeps only what sliding-window attention (Mistral) can still read: each query
sees itself and the ``window - 1`` positions before it, so older keys are dropped, memory stays bounded and
generation can run past the context length.

Example:
    >>> cache = KVCache()
    >>> k, v = cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))  # the prompt: 3 positions
    >>> k, v = cache.update(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))  # one new token
    >>> k.shape, cache.length, cache.seen
    (torch.Size([1, 2, 4, 4]), 4, 4)
"""

from __future__ import annotations

import torch

from course_lib.models.masking import sliding_window_mask

__all__ = ["KVCache", "SlidingWindowCache"]


class KVCache:
    """One attention layer's stored keys and values, ``(batch, kv_heads, stored, d_k)`` each.

    Empty at first; :meth:`update` appends a step's keys and values and returns everything the step may
    attend to. The attention module calls it; the model only creates one cache per layer and passes it on.
    """

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None  # (batch, kv_heads, stored, d_k)
        self.values: torch.Tensor | None = None  # (batch, kv_heads, stored, d_v)
        self.seen = 0  # positions fed so far = the absolute position of the next token

    @property
    def length(self) -> int:
        """How many positions are stored now (0 when empty)."""
        return 0 if self.keys is None else self.keys.shape[2]

    @property
    def nbytes(self) -> int:
        """The memory the stored keys and values take, in bytes (0 when empty): what grouped-query attention
        divides by ``num_heads / num_kv_heads``."""
        return 0 if self.keys is None else self.keys.nbytes + self.values.nbytes

    def _check_update(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Raise a ValueError naming the argument, the shape expected and the shape given."""
        for name, x in (("keys", keys), ("values", values)):
            if not isinstance(x, torch.Tensor) or x.dim() != 4:
                raise ValueError(f"KVCache.update: {name} must be a 4-D tensor (batch, kv_heads, new, d_k), got "
                                 f"{tuple(getattr(x, 'shape', ())) or type(x).__name__}")
        if keys.shape[:3] != values.shape[:3]:
            raise ValueError(f"KVCache.update: keys and values must agree on (batch, kv_heads, new), got "
                             f"{tuple(keys.shape)} and {tuple(values.shape)}")
        if self.keys is not None and (self.keys.shape[:2] != keys.shape[:2] or self.keys.shape[3] != keys.shape[3]
                                      or self.values.shape[3] != values.shape[3]):
            raise ValueError(f"KVCache.update: the cache holds keys {tuple(self.keys.shape)} and values "
                             f"{tuple(self.values.shape)}; new keys {tuple(keys.shape)} and values "
                             f"{tuple(values.shape)} must match them in every axis but the third (positions)")

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this step's ``keys``/``values`` (batch, kv_heads, new, d_k) and return all stored ones.

        Returns ``(keys, values)`` of shape (batch, kv_heads, stored + new, d_k): the positions this step's
        queries may attend to (a causal mask over them is :meth:`key_positions` against the queries').
        """
        self._check_update(keys, values)
        if self.keys is None:
            self.keys, self.values = keys, values
        else:
            self.keys = torch.cat([self.keys, keys], dim=2)  # (batch, kv_heads, stored + new, d_k)
            self.values = torch.cat([self.values, values], dim=2)
        self.seen += keys.shape[2]
        return self.keys, self.values

    def key_positions(self, device: torch.device | str | None = None) -> torch.Tensor:
        """The absolute positions of the keys the last update returned, oldest first: here every stored key,
        ``(stored,)``, ``seen - stored .. seen - 1`` (a rolling cache may return more than it keeps)."""
        return torch.arange(self.seen - self.length, self.seen, device=device)

    def causal_mask(self, num_queries: int, device: torch.device | str | None = None) -> torch.Tensor:
        """Which stored keys the last ``num_queries`` positions fed may attend to: ``(num_queries, stored)``,
        True = may attend (the course's convention).

        The queries are the newest positions, at absolute positions ``seen - num_queries .. seen - 1``; each
        sees every stored key at its own position or before (:meth:`key_positions`), never a later one.
        Call it after :meth:`update`. A subclass that keeps fewer keys answers through its own
        :meth:`key_positions`.

        Example:
            >>> cache = KVCache()
            >>> _ = cache.update(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))
            >>> cache.causal_mask(2).int()
            tensor([[1, 1, 0],
                    [1, 1, 1]], dtype=torch.int32)
        """
        if not 1 <= num_queries <= self.seen:
            raise ValueError(f"KVCache.causal_mask: num_queries must be between 1 and the {self.seen} positions "
                             f"seen, got {num_queries}")
        query_positions = torch.arange(self.seen - num_queries, self.seen, device=device)  # (num_queries,)
        return sliding_window_mask(query_positions, self.key_positions(device))  # (num_queries, stored)

class SlidingWindowCache(KVCache):
    """A rolling cache for sliding-window attention (Mistral): it never stores more than ``window`` positions.

    Under a sliding window of ``window`` positions, the query at position ``p`` attends to keys
    ``p - window + 1 .. p``: of the positions before a step, only the last ``window - 1`` can still be read
    (Hugging Face keeps the same number). :meth:`update` first drops the older ones, appends the step's keys and
    values and returns everything kept plus the step's own (a step, a prompt longer than the window say, needs
    all of its own keys), then **stores only the last** ``window`` **positions**: after a prefill of any length
    the cache holds ``window`` positions, as between single-token steps, so memory is bounded by the window
    from the first step on. :meth:`key_positions` (and :meth:`causal_mask`) describe the keys the last update
    *returned*, which the step's queries attend to; :attr:`length` counts the stored ones. :attr:`seen` keeps
    counting, so positions (for rotary embeddings) stay absolute and generation runs past any context length.

    Shapes: as :class:`KVCache`; an update returns at most ``window - 1 + new`` positions and the cache then
    stores at most ``window``.

    Example:
        >>> cache = SlidingWindowCache(window=3)
        >>> k, v = cache.update(torch.zeros(1, 2, 5, 4), torch.zeros(1, 2, 5, 4))  # a prompt of 5
        >>> k.shape[2], cache.length, cache.key_positions().tolist()  # all 5 for the prompt, 3 stored
        (5, 3, [0, 1, 2, 3, 4])
        >>> k, v = cache.update(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))  # one new token
        >>> k.shape[2], cache.seen, cache.key_positions().tolist()
        (3, 6, [3, 4, 5])
    """

    def __init__(self, window: int) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"SlidingWindowCache: window must be an int >= 1, got {window!r}")
        super().__init__()
        self.window = window
        self._returned = 0  # how many positions the last update returned (its queries' keys)

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Drop the stored positions older than the last ``window - 1``, append ``keys``/``values``
        (batch, kv_heads, new, d_k), return all of them, (batch, kv_heads, kept + new, d_k), and keep only the
        last ``window`` positions stored."""
        self._check_update(keys, values)  # before anything is dropped: a refused update changes nothing
        drop = self.length - (self.window - 1)
        if drop > 0:  # views here; the concatenation in KVCache.update copies, freeing the dropped positions
            self.keys, self.values = self.keys[:, :, drop:], self.values[:, :, drop:]
        all_keys, all_values = super().update(keys, values)  # (batch, kv_heads, kept + new, d_k)
        self._returned = all_keys.shape[2]
        if self._returned > self.window:  # a step of more than one token (a prefill): keep the window only
            # copies, so that the step's tensors (the caller's, or the concatenation) are not held by a view
            self.keys = all_keys[:, :, -self.window:].clone()  # (batch, kv_heads, window, d_k)
            self.values = all_values[:, :, -self.window:].clone()
        return all_keys, all_values

    def key_positions(self, device: torch.device | str | None = None) -> torch.Tensor:
        """The absolute positions of the keys the last update returned, oldest first: ``(returned,)``,
        ``seen - returned .. seen - 1`` (after a prefill longer than the window, more than are stored)."""
        return torch.arange(self.seen - self._returned, self.seen, device=device)

    def __repr__(self) -> str:
        return f"SlidingWindowCache(window={self.window}, length={self.length}, seen={self.seen})"
