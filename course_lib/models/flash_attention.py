"""FlashAttention's idea written out: attention over key tiles with an *online* softmax, never storing the
``seq_q x seq_k`` score matrix (Milakov & Gimelshein 2018; Dao et al. 2022).

Notebook 00's stable softmax (:func:`course_lib.models.softmax.stable_softmax`) subtracts the row's maximum ``m``
before exponentiating: ``softmax(x)_j = exp(x_j - m) / sum_i exp(x_i - m)``. That needs the whole row first.
The online softmax reads the row tile by tile and keeps a *running* maximum ``m`` and a running sum ``l`` of
``exp(x - m)``; when a tile raises the maximum from ``m`` to ``m'``, everything summed so far was scaled by
``exp(-m)`` instead of ``exp(-m')``, so it is multiplied by ``exp(m - m')``::

    m' = max(m, max_j s_j)                                   # s: this tile's scores
    l' = l * exp(m - m') + sum_j exp(s_j - m')
    o' = o * exp(m - m') + sum_j exp(s_j - m') v_j           # the unnormalised output
    ...
    output = o / l                                           # after the last tile

Forgetting the factor ``exp(m - m')`` on ``l`` or ``o`` is the classic mistake: the result is then wrong
whenever a later tile holds a larger score. Attention's output is a weighted sum of values, so the same
rescaling carries the output along and the scores of one tile are all that is ever stored:
``seq_q x tile_size`` numbers instead of ``seq_q x seq_k``. The real FlashAttention does this in a GPU kernel
with tiles sized to on-chip memory, and tiles the queries too; the arithmetic is the one below.

:func:`measure_memory` measures what a call allocates (the peak of the tensors alive at once, and the largest
one), to compare this path with the explicit one as the sequence grows.

Example:
    >>> q, k, v = torch.randn(2, 4, 100, 16), torch.randn(2, 4, 100, 16), torch.randn(2, 4, 100, 16)
    >>> out = online_softmax_attention(q, k, v, causal=True, tile_size=32)
    >>> torch.allclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-5)
    True
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F  # noqa: F401 - the module docstring's example uses it
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from course_lib.validation import check_positive_ints, validated_by

__all__ = ["online_softmax", "online_softmax_attention", "MemoryUse", "measure_memory"]


def _online_step(running_max: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One tile of the online softmax: the new running maximum, the factor ``exp(m - m')`` that rescales what
    was summed before, and ``exp(scores - m')``.

    A row that has seen only ``-inf`` so far (every key masked) keeps ``m' = -inf``; it is exponentiated
    against 0 instead, so that its terms are 0 rather than ``exp(-inf + inf) = NaN``.

    Shapes: ``running_max`` ``(..., rows, 1)``, ``scores`` ``(..., rows, tile)`` -> ``(..., rows, 1)``,
    ``(..., rows, 1)``, ``(..., rows, tile)``.
    """
    new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))  # (..., rows, 1)
    pivot = torch.where(new_max == float("-inf"), torch.zeros_like(new_max), new_max)
    return new_max, torch.exp(running_max - pivot), torch.exp(scores - pivot)


def _check_online_softmax(x: torch.Tensor, dim: int = -1, tile_size: int = 32) -> None:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() == 0:
        raise ValueError(f"online_softmax: x must be a floating-point tensor with at least one axis, got "
                         f"{getattr(x, 'dtype', type(x).__name__)} {tuple(getattr(x, 'shape', ()))}")
    check_positive_ints("online_softmax", tile_size=tile_size)


@validated_by(_check_online_softmax)
def online_softmax(x: torch.Tensor, dim: int = -1, tile_size: int = 32) -> torch.Tensor:
    """Softmax along ``dim`` whose normaliser is found in one pass over tiles: a running max and a running sum.

    Equal to :func:`course_lib.models.softmax.stable_softmax` (which finds the maximum first, then sums): here each
    tile of ``tile_size`` entries updates ``m' = max(m, max(tile))`` and ``l' = l exp(m - m') + sum exp(tile - m')``;
    the result is ``exp(x - m) / l``.

    Shapes: ``x`` any shape -> the same shape, summing to 1 along ``dim``.

    Example:
        >>> from course_lib.models.softmax import stable_softmax
        >>> x = torch.tensor([[1.0, 5.0, 2.0, 1000.0, 3.0]])
        >>> torch.allclose(online_softmax(x, tile_size=2), stable_softmax(x))
        True
    """
    rows = x.movedim(dim, -1)  # (..., n): the softmax axis last
    running_max = torch.full((*rows.shape[:-1], 1), float("-inf"), dtype=x.dtype, device=x.device)
    running_sum = torch.zeros_like(running_max)  # (..., 1)
    for start in range(0, rows.shape[-1], tile_size):
        tile = rows[..., start:start + tile_size]  # (..., tile)
        new_max = torch.maximum(running_max, tile.amax(dim=-1, keepdim=True))  # (..., 1)
        rescale = torch.exp(running_max - new_max)  # what was summed against the old maximum, now against new_max
        running_sum = running_sum * rescale + torch.exp(tile - new_max).sum(dim=-1, keepdim=True)
        running_max = new_max
    return (torch.exp(rows - running_max) / running_sum).movedim(-1, dim)


def _check_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None = None,
                     causal: bool = False, tile_size: int = 128) -> None:
    who = "online_softmax_attention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dim() < 2:
            raise ValueError(f"{who}: {name} must be a floating-point tensor of shape (..., seq, features), got "
                             f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}")
    if query.shape[:-2] != key.shape[:-2] or key.shape[:-1] != value.shape[:-1] or query.shape[-1] != key.shape[-1]:
        raise ValueError(f"{who}: expected query (..., seq_q, d_k), key (..., seq_k, d_k), value (..., seq_k, d_v) "
                         f"with the same leading axes, got query {tuple(query.shape)}, key {tuple(key.shape)}, "
                         f"value {tuple(value.shape)}")
    if not query.dtype == key.dtype == value.dtype:
        raise ValueError(f"{who}: query, key and value must have one dtype, got {query.dtype}, {key.dtype}, "
                         f"{value.dtype}")
    target = (*query.shape[:-1], key.shape[-2])
    if mask is not None and (not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool
                             or mask.dim() > len(target) or any(
                                 size not in (1, want) for size, want in zip(reversed(mask.shape), reversed(target),
                                                                             strict=False))):
        raise ValueError(f"{who}: mask must be a boolean tensor (True = may attend) broadcastable to (..., seq_q, "
                         f"seq_k) = {target}, got {getattr(mask, 'dtype', type(mask).__name__)} "
                         f"{tuple(getattr(mask, 'shape', ()))}")
    check_positive_ints(who, tile_size=tile_size)


@validated_by(_check_attention)
def online_softmax_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             mask: torch.Tensor | None = None, causal: bool = False,
                             tile_size: int = 128) -> torch.Tensor:
    """``softmax(Q K^T / sqrt(d_k)) V`` computed tile by tile with an online softmax (see the module docstring).

    Queries are cut into tiles of ``tile_size`` rows and, for each, keys into tiles of ``tile_size``: only one
    ``tile_size x tile_size`` block of scores exists at a time. Equal to ``F.scaled_dot_product_attention`` and
    to the course's :func:`~course_lib.models.attention.scaled_dot_product_attention`, with the course's conventions: a
    boolean ``mask``, ``True`` = may attend; a query whose keys are all masked gets a zero output. With
    ``causal``, query ``i`` sees keys ``j <= i + seq_k - seq_q`` (the queries are the *last* ``seq_q``
    positions, as with a cache), and key tiles wholly after a query tile are skipped (about half the work).
    Half-precision inputs are accumulated in float32 and the output cast back, as FlashAttention does.

    Args:
        query: ``(..., seq_q, d_k)``.
        key: ``(..., seq_k, d_k)``.
        value: ``(..., seq_k, d_v)``.
        mask: optional boolean, broadcastable to ``(..., seq_q, seq_k)``.
        causal: apply the causal rule without building the ``seq_q x seq_k`` mask.
        tile_size: rows and keys per tile.

    Returns: ``(..., seq_q, d_v)``.

    Example:
        >>> q, k, v = torch.randn(1, 5, 8), torch.randn(1, 7, 8), torch.randn(1, 7, 3)
        >>> ours = online_softmax_attention(q, k, v, tile_size=3)
        >>> torch.allclose(ours, F.scaled_dot_product_attention(q, k, v), atol=1e-6)
        True
    """
    work = torch.promote_types(query.dtype, torch.float32)  # float32 at least for the running statistics
    q = query.to(work) / math.sqrt(query.shape[-1])  # (..., seq_q, d_k), scaled once
    seq_q, seq_k = query.shape[-2], key.shape[-2]
    tiles = []
    for row in range(0, seq_q, tile_size):
        rows = slice(row, min(row + tile_size, seq_q))
        row_mask = None if mask is None else (mask if mask.dim() < 2 or mask.shape[-2] == 1 else mask[..., rows, :])
        tiles.append(_attend_rows(q[..., rows, :], key, value, row_mask, causal, row + seq_k - seq_q, tile_size))
    return torch.cat(tiles, dim=-2).to(query.dtype)  # (..., seq_q, d_v)


def _attend_rows(q: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, causal: bool,
                 first_visible_end: int, tile_size: int) -> torch.Tensor:
    """One tile of (scaled) queries ``(..., rows, d_k)`` over all key tiles; the first row sees keys
    ``<= first_visible_end`` when ``causal``. Returns the normalised output ``(..., rows, d_v)`` in q's dtype."""
    work, device = q.dtype, q.device
    last_visible = torch.arange(q.shape[-2], device=device)[:, None] + first_visible_end  # (rows, 1)
    running_max = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=work, device=device)  # (..., rows, 1)
    running_sum = torch.zeros_like(running_max)  # (..., rows, 1)
    output = torch.zeros((*q.shape[:-1], value.shape[-1]), dtype=work, device=device)  # (..., rows, d_v)
    for start in range(0, key.shape[-2], tile_size):
        if causal and start > int(last_visible[-1]):
            break  # this key tile and every later one lie after every query of the tile
        keys = slice(start, min(start + tile_size, key.shape[-2]))
        scores = q @ key[..., keys, :].to(work).transpose(-2, -1)  # (..., rows, tile): all that is stored
        allowed = None if mask is None else (mask if mask.shape[-1] == 1 else mask[..., keys])
        if causal:
            in_order = torch.arange(keys.start, keys.stop, device=device)[None, :] <= last_visible  # (rows, tile)
            allowed = in_order if allowed is None else allowed & in_order
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        running_max, rescale, exps = _online_step(running_max, scores)
        running_sum = running_sum * rescale + exps.sum(dim=-1, keepdim=True)
        output = output * rescale + exps @ value[..., keys, :].to(work)  # (..., rows, d_v)
    # A row with no allowed key has sum 0 and output 0: divide by 1 there (a zero output, as the course defines).
    return output / torch.where(running_sum == 0, 1.0, running_sum)


@dataclass(frozen=True)
class MemoryUse:
    """What a call allocated: ``peak_bytes``, the most bytes held at once by tensors it created, and
    ``largest_bytes``, the size of the largest single tensor it created.

    Example:
        >>> MemoryUse(peak_bytes=4096, largest_bytes=1024).peak_bytes
        4096
    """

    peak_bytes: int
    largest_bytes: int


class _AllocationTracker(TorchDispatchMode):
    """Sees every PyTorch operator's outputs; counts those that own new memory until they are freed."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, list[int]] = {}  # storage address -> [bytes, tensors alive that use it]
        self.current = self.peak = self.largest = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        result = func(*args, **kwargs)
        for t in tree_leaves(result):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                address = t.untyped_storage().data_ptr()
                if address not in inputs and address != 0:  # new memory, not a view or an in-place result
                    self._hold(t, address)
        return result

    def _hold(self, tensor: torch.Tensor, address: int) -> None:
        if address not in self.live:
            size = tensor.untyped_storage().nbytes()
            self.live[address] = [size, 0]
            self.current += size
            self.peak, self.largest = max(self.peak, self.current), max(self.largest, size)
        self.live[address][1] += 1
        weakref.finalize(tensor, self._release, address)

    def _release(self, address: int) -> None:
        entry = self.live.get(address)
        if entry is not None:
            entry[1] -= 1
            if entry[1] == 0:
                self.current -= entry[0]
                del self.live[address]


def measure_memory(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> MemoryUse:
    """Run ``fn(*args, **kwargs)`` without gradients and measure the memory its tensors take.

    Every tensor an operator returns that owns new memory (not a view, not written in place) is counted from
    its creation until it is freed; the peak of their sum and the largest of them are returned. The inputs
    and the result count only as far as ``fn`` creates them. Workspace that a fused kernel allocates inside
    itself (``F.scaled_dot_product_attention``'s tiles) is not seen: this measures the tensors a Python-level
    algorithm materialises, which is where the explicit path's ``seq_q x seq_k`` matrix lives.

    Example:
        >>> use = measure_memory(lambda: torch.ones(1000, 1000) + 1)       # two 4 MB tensors at once
        >>> use.peak_bytes, use.largest_bytes
        (8000000, 4000000)
    """
    if not callable(fn):
        raise TypeError(f"measure_memory: fn must be callable, got {type(fn).__name__}")
    tracker = _AllocationTracker()
    with torch.no_grad(), tracker:
        fn(*args, **kwargs)
    return MemoryUse(peak_bytes=tracker.peak, largest_bytes=tracker.largest)
