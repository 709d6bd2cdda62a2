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

Example:
    >>> cache = KVCache()
    >>> k, v = cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))  # the prompt: 3 positions
    >>> k, v = cache.update(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))  # one new token
    >>> k.shape, cache.length, cache.seen
    (torch.Size([1, 2, 4, 4]), 4, 4)
"""

from __future__ import annotations

import torch

__all__ = ["KVCache"]


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
        """The absolute positions of the stored keys, oldest first: ``(stored,)``, ``seen - stored .. seen - 1``."""
        return torch.arange(self.seen - self.length, self.seen, device=device)
