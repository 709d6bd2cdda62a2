"""Exercises of notebook 15 (inference at scale): the key/value heads of grouped-query attention, and the online
softmax of FlashAttention (both moved, with their sections, from notebook 14).

Declarations, not logic to share: its mistakes are whole wrong answers, as a learner writes them, so
``duplicates`` pairs this module with the other checks modules by shape (:mod:`course_lib.checks` says why).

References, in :mod:`course_lib.models`: :func:`~course_lib.models.gqa.repeat_kv` and
:func:`~course_lib.models.flash_attention.online_softmax`.

The known mistakes are the ones these components are known for in the open models' issue trackers: key/value
heads repeated in the wrong order (``repeat`` where ``repeat_interleave`` is meant), and an online softmax whose
running sum is not rescaled when the maximum grows. Beside them, the wrong answers a review from the student's
seat wrote that got no hint or another mistake's: a new tile taken against the old maximum, a short last tile
dropped, ``dim`` ignored.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from course_lib.checks.nb00_welcome import ATTENTION_KERNELS, SOFTMAX_FUNCTIONS
from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import public_and_hidden
from course_lib.exercises.passes import case_row_reads
from course_lib.models.flash_attention import online_softmax
from course_lib.models.gqa import repeat_kv

NOTEBOOK = "15_inference_at_scale"


# ---------------------------------------------------------------------------------------------------
# 14.1 repeat_kv
# ---------------------------------------------------------------------------------------------------

def _repeat_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    seq, d_k = (6, 8) if hidden else (5, 4)
    return [
        Case("two key/value heads holding 10 and 20, 2 groups: heads (10, 10, 20, 20)",
             args=(torch.tensor([10.0, 20.0]).view(1, 2, 1, 1), 2)),
        Case(f"(batch=2, kv_heads=2, seq={seq}, d_k={d_k}), 3 groups: 6 query heads",
             args=(torch.randn(2, 2, seq, d_k, generator=gen), 3)),
        Case(f"(batch=1, kv_heads=4, seq={seq}, d_k={d_k}), 2 groups: 8 query heads",
             args=(torch.randn(1, 4, seq, d_k, generator=gen), 2)),
        Case("one key/value head, 4 groups (multi-query attention)",
             args=(torch.randn(2, 1, seq, d_k, generator=gen), 4)),
        Case("num_groups=1: multi-head attention, nothing to repeat",
             args=(torch.randn(2, 3, seq, d_k, generator=gen), 1)),
        Case(f"(batch=2, kv_heads=3, seq=2, d_k={d_k}), 2 groups (seq as short as the groups)",
             args=(torch.randn(2, 3, 2, d_k, generator=gen), 2)),
    ]


def _repeat_tiled(x, num_groups):
    return x.repeat(1, num_groups, 1, 1)  # heads 0, 1, 0, 1: query head h meets kv head h % num_kv_heads


def _repeat_along_seq(x, num_groups):
    return x.repeat_interleave(num_groups, dim=2)


def _repeat_along_batch(x, num_groups):
    return x.repeat_interleave(num_groups, dim=0)


def _repeat_along_features(x, num_groups):
    return x.repeat_interleave(num_groups, dim=-1)


def _repeat_mixing_heads_and_positions(x, num_groups):
    batch, kv_heads, seq, d_k = x.shape
    return x[:, :, :, None].expand(batch, kv_heads, seq, num_groups, d_k).reshape(
        batch, kv_heads * num_groups, seq, d_k)  # the group axis sits after seq: positions spill across heads


def _repeat_one_fewer(x, num_groups):
    return x.repeat_interleave(max(num_groups - 1, 1), dim=1)


def _repeat_by_interleave(x, num_groups):
    return torch.repeat_interleave(x, num_groups, dim=1)


def _repeat_by_concatenation(x, num_groups):
    return torch.cat([x[:, j:j + 1] for j in range(x.shape[1]) for _ in range(num_groups)], dim=1)


def _repeat_by_index(x, num_groups):
    source = torch.arange(x.shape[1] * num_groups) // num_groups  # query head h reads kv head h // num_groups
    return x.index_select(1, source)


REPEAT_KV = register(Exercise(
    name="repeat_kv",
    notebook=NOTEBOOK,
    points=1,
    differentiable=True,
    reference=repeat_kv,
    summary="grouped-query attention's key/value heads, each repeated for its group of consecutive query heads",
    **public_and_hidden(_repeat_cases),
    mistakes=[
        Mistake("heads repeated in the wrong order", _repeat_tiled,
                "each key/value head serves a group of CONSECUTIVE query heads: head j must be repeated in place, "
                "num_groups times side by side (j, j, k, k), not the whole list of heads copied num_groups times "
                "(j, k, j, k), which pairs query head h with key/value head h mod num_kv_heads.",
                detail="x.repeat_interleave(num_groups, dim=1), not x.repeat(1, num_groups, 1, 1)."),
        Mistake("repeated along the positions", _repeat_along_seq,
                "repeat along the heads axis (axis 1 of (batch, kv_heads, seq, d_k)), not along the positions."),
        Mistake("repeated along the batch", _repeat_along_batch,
                "repeat along the heads axis (axis 1), not the batch axis: every sequence keeps its own keys."),
        Mistake("repeated along the features", _repeat_along_features,
                "repeat along the heads axis (axis 1), not the features: each head keeps d_k features."),
        Mistake("group axis after the positions", _repeat_mixing_heads_and_positions,
                "put the new group axis right after the key/value heads axis, before the positions, then merge it "
                "with the heads: merging axes that are not neighbours mixes positions into heads."),
        Mistake("one repeat too few", _repeat_one_fewer,
                "each head appears num_groups times in the result, so that kv_heads * num_groups heads meet the "
                "query heads."),
    ],
    also_correct=[_repeat_by_interleave, _repeat_by_concatenation, _repeat_by_index],
))


# ---------------------------------------------------------------------------------------------------
# 14.2 online_softmax
# ---------------------------------------------------------------------------------------------------

def _online_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    rising = torch.arange(1.0, 10.0)[None] + torch.randn(2, 9, generator=gen) * 0.1
    return [
        Case("a row falling from 9 to 1, tile_size=3: the first tile holds the maximum",
             args=(rising.flip(-1),), kwargs={"tile_size": 3}),
        Case("a row rising from 1 to 9, tile_size=3: every tile raises the maximum",
             args=(rising,), kwargs={"tile_size": 3}),
        Case("(2, 10) logits of scale 3, tile_size=4 (a last tile of 2)",
             args=(torch.randn(2, 10, generator=gen) * 3,), kwargs={"tile_size": 4}),
        Case("large logits (1000 +- 5): exp overflows without a shift, tile_size=2",
             args=(1000.0 + torch.randn(2, 7, generator=gen) * 5,), kwargs={"tile_size": 2}),
        Case("very negative logits (-1000 +- 5): exp underflows to 0 without a shift, tile_size=3",
             args=(-1000.0 + torch.randn(2, 7, generator=gen) * 5,), kwargs={"tile_size": 3}),
        Case("tile_size larger than the row (one tile)", args=(torch.randn(3, 5, generator=gen) * 4,),
             kwargs={"tile_size": 16}),
        Case("dim=0 of a (12, 3) tensor, tile_size=5", args=(torch.randn(12, 3, generator=gen) * 4,),
             kwargs={"dim": 0, "tile_size": 5}),
        Case("(2, 3, 17) attention-like scores, tile_size=4" + (" (hidden)" if hidden else ""),
             args=(torch.randn(2, 3, 17, generator=gen) * 4,), kwargs={"tile_size": 4}),
        *_online_scale_cases(gen, hidden),
    ]


def _online_scale_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    """Rows of very different scale (each row needs its OWN maximum), and a row whose large scores come late
    (the running maximum must grow, or exp overflows)."""
    scales = torch.tensor([[0.0], [200.0], [-300.0]])  # (rows, 1)
    late = torch.tensor([[0.0, 1, 2, 150, 151, 152], [3.0, 0, 1, 90, 200, 95]])
    return [
        Case("three rows of very different scale (around 0, 200 and -300), tile_size=4: each row its own maximum",
             args=(scales + torch.randn(3, 10, generator=gen) * 3,), kwargs={"tile_size": 4}),
        Case("large scores late in the row, [0, 1, 2, 150, 151, 152], tile_size=3: the maximum must grow",
             args=(late[:1] if not hidden else late,), kwargs={"tile_size": 3}),
    ]


def _tiles(x, dim, tile_size):
    rows = x.movedim(dim, -1)  # (..., n): the softmax axis last
    return rows, [rows[..., s:s + tile_size] for s in range(0, rows.shape[-1], tile_size)]


def _online_no_rescale(x, dim=-1, tile_size=32):
    rows, tiles = _tiles(x, dim, tile_size)
    m = torch.full_like(rows[..., :1], -math.inf)
    total = torch.zeros_like(m)
    for tile in tiles:
        m = torch.maximum(m, tile.amax(-1, keepdim=True))
        total = total + torch.exp(tile - m).sum(-1, keepdim=True)  # the old sum is not rescaled to the new max
    return (torch.exp(rows - m) / total).movedim(-1, dim)


def _online_rescale_inverted(x, dim=-1, tile_size=32):
    rows, tiles = _tiles(x, dim, tile_size)
    m = torch.full_like(rows[..., :1], -math.inf)
    total = torch.zeros_like(m)
    for tile in tiles:
        new = torch.maximum(m, tile.amax(-1, keepdim=True))
        factor = torch.where(torch.isinf(m), torch.zeros_like(m), torch.exp(new - m))  # exp(m' - m): upside down
        total = total * factor + torch.exp(tile - new).sum(-1, keepdim=True)
        m = new
    return (torch.exp(rows - m) / total).movedim(-1, dim)


def _online_tile_max_only(x, dim=-1, tile_size=32):
    rows, tiles = _tiles(x, dim, tile_size)
    total = torch.zeros_like(rows[..., :1])
    for tile in tiles:
        m = tile.amax(-1, keepdim=True)  # this tile's maximum, forgotten at the next tile
        total = total + torch.exp(tile - m).sum(-1, keepdim=True)
    return (torch.exp(rows - m) / total).movedim(-1, dim)


def _online_sum_reset(x, dim=-1, tile_size=32):
    rows, tiles = _tiles(x, dim, tile_size)
    m = torch.full_like(rows[..., :1], -math.inf)
    for tile in tiles:
        m = torch.maximum(m, tile.amax(-1, keepdim=True))
        total = torch.exp(tile - m).sum(-1, keepdim=True)  # the sum starts again at every tile
    return (torch.exp(rows - m) / total).movedim(-1, dim)


def _online_recurrence(x, dim, tile_size, start=-math.inf, terms_against_new_max=True):
    """The online softmax's loop with two places a mutant changes: where the running maximum starts, and which
    maximum (the new m' or the old m) the new tile's terms are taken against."""
    rows, tiles = _tiles(x, dim, tile_size)
    m = torch.full_like(rows[..., :1], start)
    total = torch.zeros_like(m)
    for tile in tiles:
        new = torch.maximum(m, tile.amax(-1, keepdim=True))
        shift = new if terms_against_new_max else m
        total = total * torch.exp(m - new) + torch.exp(tile - shift).sum(-1, keepdim=True)
        m = new
    return (torch.exp(rows - m) / total).movedim(-1, dim)


def _online_max_from_zero(x, dim=-1, tile_size=32):
    return _online_recurrence(x, dim, tile_size, start=0.0)  # a running maximum that starts at 0, not -inf


def _online_no_shift(x, dim=-1, tile_size=32):
    rows, tiles = _tiles(x, dim, tile_size)
    total = torch.zeros_like(rows[..., :1])
    for tile in tiles:
        total = total + torch.exp(tile).sum(-1, keepdim=True)
    return (torch.exp(rows) / total).movedim(-1, dim)


def _online_tile_against_old_max(x, dim=-1, tile_size=32):
    return _online_recurrence(x, dim, tile_size, terms_against_new_max=False)  # exp(s_j - m), not exp(s_j - m')


def _online_short_tile_dropped(x, dim=-1, tile_size=32):
    rows = x.movedim(dim, -1)
    m = torch.full_like(rows[..., :1], -math.inf)
    total = torch.zeros_like(m)
    for start in range(0, rows.shape[-1] - tile_size + 1, tile_size):  # whole tiles only: a short last one is lost
        tile = rows[..., start:start + tile_size]
        new = torch.maximum(m, tile.amax(-1, keepdim=True))
        total = total * torch.exp(m - new) + torch.exp(tile - new).sum(-1, keepdim=True)
        m = new
    return (torch.exp(rows - m) / total).movedim(-1, dim)


def _online_one_maximum_for_all_rows(x, dim=-1, tile_size=32):
    rows, tiles = _tiles(x, dim, tile_size)
    m = torch.tensor(-math.inf, dtype=x.dtype)
    total = torch.zeros_like(rows[..., :1])
    for tile in tiles:
        new = torch.maximum(m, tile.amax())  # the largest entry of the whole tile, every row's at once
        total = total * torch.exp(m - new) + torch.exp(tile - new).sum(-1, keepdim=True)
        m = new
    return (torch.exp(rows - m) / total).movedim(-1, dim)


def _online_maximum_never_updated(x, dim=-1, tile_size=32):
    rows, tiles = _tiles(x, dim, tile_size)
    m = tiles[0].amax(-1, keepdim=True)  # the first tile's maximum, kept for the whole row
    total = torch.zeros_like(m)
    for tile in tiles:
        total = total + torch.exp(tile - m).sum(-1, keepdim=True)
    return (torch.exp(rows - m) / total).movedim(-1, dim)


def _online_in_numpy(x, dim=-1, tile_size=32):
    rows = x.movedim(dim, -1).numpy()  # the row taken out of PyTorch
    m = np.full(rows.shape[:-1] + (1,), -np.inf, dtype=rows.dtype)
    total = np.zeros_like(m)
    for start in range(0, rows.shape[-1], tile_size):
        tile = rows[..., start:start + tile_size]
        new = np.maximum(m, tile.max(-1, keepdims=True))
        total = total * np.exp(m - new) + np.exp(tile - new).sum(-1, keepdims=True)
        m = new
    return torch.from_numpy(np.exp(rows - m) / total).movedim(-1, dim)


def _online_dim_ignored(x, dim=-1, tile_size=32):
    return online_softmax(x, -1, tile_size)  # always the last axis


def _online_by_logaddexp(x, dim=-1, tile_size=32):
    """The running log of the sum, updated with logaddexp: the same recurrence in the log domain."""
    rows, tiles = _tiles(x, dim, tile_size)
    log_total = torch.full_like(rows[..., :1], -math.inf)
    for tile in tiles:
        top = tile.amax(-1, keepdim=True)
        log_total = torch.logaddexp(log_total, top + torch.log(torch.exp(tile - top).sum(-1, keepdim=True)))
    return torch.exp(rows - log_total).movedim(-1, dim)


def _online_by_merging_tiles(x, dim=-1, tile_size=32):
    """Every tile's own (maximum, sum), in one pass over the tiles, then merged (the split-K reduction of
    FlashDecoding). Each tile is read once: its maximum and its sum in the same step."""
    rows, tiles = _tiles(x, dim, tile_size)
    stats = []
    for t in tiles:
        top = t.amax(-1, keepdim=True)  # (..., 1): this tile's maximum
        stats.append((top, torch.exp(t - top).sum(-1, keepdim=True)))
    maxima = torch.cat([top for top, _ in stats], dim=-1)  # (..., tiles)
    sums = torch.cat([total for _, total in stats], dim=-1)  # (..., tiles)
    m = maxima.amax(-1, keepdim=True)
    total = (sums * torch.exp(maxima - m)).sum(-1, keepdim=True)
    return (torch.exp(rows - m) / total).movedim(-1, dim)


def _online_one_entry_at_a_time(x, dim=-1, tile_size=32):
    """Milakov and Gimelshein's loop: one entry per step (tiles of one)."""
    rows = x.movedim(dim, -1).double()
    m = torch.full(rows.shape[:-1], -math.inf, dtype=torch.float64)
    total = torch.zeros_like(m)
    for j in range(rows.shape[-1]):
        new = torch.maximum(m, rows[..., j])
        total = total * torch.exp(m - new) + torch.exp(rows[..., j] - new)
        m = new
    return (torch.exp(rows - m[..., None]) / total[..., None]).to(x.dtype).movedim(-1, dim)


def _two_pass_softmax(x, dim=-1, tile_size=32):
    """Notebook 00's stable softmax: the whole row's maximum first, then the sum: right numbers, no tiles."""
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def _two_pass_over_tiles(x, dim=-1, tile_size=32):
    """Tiles, but two passes over them: the running maximum in the first, the sum against it in the second."""
    rows, tiles = _tiles(x, dim, tile_size)
    m = torch.full_like(rows[..., :1], -math.inf)
    for tile in tiles:
        m = torch.maximum(m, tile.amax(-1, keepdim=True))
    total = torch.zeros_like(m)
    for tile in tiles:  # the row read again, now that the maximum is known
        total = total + torch.exp(tile - m).sum(-1, keepdim=True)
    return (torch.exp(rows - m) / total).movedim(-1, dim)


def _pytorchs_softmax(x, dim=-1, tile_size=32):
    return torch.softmax(x, -1)  # the whole exercise in one call (and always on the last axis)


def _softmax_by_pytorchs_attention(x, dim=-1, tile_size=32):
    """The class edition's online_softmax_attention (PyTorch's fused attention) turned into a softmax: one query
    of ones against keys x (d_k = 1) and the identity as values give softmax(x) as the weights' row."""
    rows = x.movedim(dim, -1)  # (..., n)
    n = rows.shape[-1]
    ones = torch.ones(*rows.shape[:-1], 1, 1, dtype=x.dtype)  # (..., 1, 1): one query
    identity = torch.eye(n, dtype=x.dtype).expand(*rows.shape[:-1], n, n)  # (..., n, n)
    out = F.scaled_dot_product_attention(ones, rows[..., None], identity, scale=1.0)  # (..., 1, n)
    return out[..., 0, :].movedim(-1, dim)


#: The class edition computes ``online_softmax_attention`` (a give-away of this exercise: with the identity as
#: values it is a softmax) through PyTorch's fused attention, so the grader refuses PyTorch's attention here too.
ONLINE_FORBIDDEN_HINT = ("build the softmax from a running maximum and a rescaled running sum, tile by tile: "
                         "PyTorch's softmax and its fused attention kernels (which run an online softmax inside) "
                         "do the whole exercise for you, so they are not accepted here.")


ONLINE_SOFTMAX = register(Exercise(
    name="online_softmax",
    notebook=NOTEBOOK,
    points=2,
    forbidden_calls=(*SOFTMAX_FUNCTIONS, "torch.nn.functional.scaled_dot_product_attention"),
    forbidden_ops=("softmax", *ATTENTION_KERNELS),  # PyTorch's softmax and attention, whatever name reaches them
    forbidden_hint=ONLINE_FORBIDDEN_HINT,
    reference=online_softmax,
    summary="softmax whose normaliser is found in one pass over tiles: a running maximum and a rescaled running sum",
    **public_and_hidden(_online_cases),
    access_check=case_row_reads,  # its outputs equal a two-pass softmax's: how it reads x tells them apart
    mistakes=[
        Mistake("the whole row at once (a two-pass softmax)", _two_pass_softmax,
                "your numbers are right, but the maximum and the sum are taken over the whole row at once, as "
                "notebook 00's stable softmax does. The exercise is the online softmax: read the row a tile of "
                "tile_size entries at a time and keep a running maximum and a running sum, updated after each "
                "tile, so that no step ever needs more than one tile.",
                detail="loop over start in range(0, n, tile_size) with tile = rows[..., start:start + tile_size]; "
                       "from each tile update m and l (m' = max(m, tile.amax(-1)), l' = l * exp(m - m') + "
                       "exp(tile - m').sum(-1)); only after the loop return exp(rows - m) / l."),
        Mistake("a maximum pass, then a sum pass", _two_pass_over_tiles,
                "your numbers are right and you read the row in tiles, but twice: the maximum in a first pass, "
                "the sum in a second. The online softmax finds both in the same pass: when a tile raises the "
                "maximum, the sum so far is rescaled to the new maximum instead of being recomputed.",
                detail="one loop: new = torch.maximum(m, tile.amax(-1, keepdim=True)); l = l * torch.exp(m - new) "
                       "+ torch.exp(tile - new).sum(-1, keepdim=True); m = new."),
        Mistake("running sum not rescaled", _online_no_rescale,
                "when a tile raises the running maximum from m to m', the sum so far was computed against "
                "exp(-m): multiply it by exp(m - m') before adding the new tile's terms."),
        Mistake("new tile measured against the old maximum", _online_tile_against_old_max,
                "once the maximum has grown to m', the whole running sum is measured against m': rescale the old "
                "sum by exp(m - m') AND take the new tile's terms against the new maximum m', not the old m (the "
                "old m is minus infinity at the first tile)."),
        Mistake("a short last tile dropped", _online_short_tile_dropped,
                "the last tile may be shorter than tile_size (10 entries in tiles of 4: 4, 4 and 2): it must be "
                "summed too, or the sum misses its terms and the probabilities add up to more than 1."),
        Mistake("dim ignored", _online_dim_ignored,
                "take the softmax along the axis the dim argument names, not always the last one: move that axis "
                "last, work there, and move it back."),
        Mistake("rescaling factor upside down", _online_rescale_inverted,
                "the old sum is multiplied by exp(m - m'), at most 1 since the maximum only grows: the old terms "
                "shrink relative to the new, larger maximum."),
        Mistake("each tile's own maximum", _online_tile_max_only,
                "keep one RUNNING maximum, the largest entry seen so far, and rescale the sum whenever it grows; "
                "a tile's own maximum is forgotten at the next tile."),
        Mistake("sum restarted at every tile", _online_sum_reset,
                "the running sum accumulates every tile's terms (after rescaling); starting it again at each tile "
                "keeps only the last tile's."),
        Mistake("running maximum started at 0", _online_max_from_zero,
                "start the running maximum at minus infinity, the maximum of nothing: started at 0, rows of very "
                "negative logits are shifted by too little and every exponential underflows to 0 (0/0)."),
        # before "no maximum subtracted": on the late large scores both give NaN, and this hint is the one that fits
        Mistake("running maximum never updated", _online_maximum_never_updated,
                "the running maximum must grow when a tile holds a larger score, with the sum so far rescaled to "
                "it: kept at the first tile's maximum, a later score 150 above it overflows exp to infinity."),
        Mistake("no maximum subtracted", _online_no_shift,
                "subtract the running maximum before exponentiating, as notebook 00's stable softmax does: "
                "exp(1000) overflows to infinity."),
        Mistake("one maximum for all rows", _online_one_maximum_for_all_rows,
                "each row is a softmax of its own, so each row keeps its OWN running maximum (a maximum over the "
                "last axis only). One maximum shared by every row shifts a row of small scores so far down that "
                "all its exponentials underflow to 0, and 0/0 gives NaN."),
        Mistake("computed outside PyTorch (NumPy)", _online_in_numpy,
                "compute with tensor operations: the check follows how your code reads the row tile by tile, and "
                "values taken out of PyTorch (into NumPy or Python lists) are out of its sight, so such an "
                "answer is not accepted even when its numbers are right."),
        Mistake("PyTorch's fused attention as a softmax", _softmax_by_pytorchs_attention, ONLINE_FORBIDDEN_HINT),
        # after "dim ignored": on the dim=0 case both give the last axis's softmax, and that hint is the better one
        Mistake("PyTorch's softmax", _pytorchs_softmax, ONLINE_FORBIDDEN_HINT),
    ],
    also_correct=[_online_by_logaddexp, _online_by_merging_tiles, _online_one_entry_at_a_time],
))
