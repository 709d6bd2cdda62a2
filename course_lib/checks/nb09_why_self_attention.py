"""Exercises of notebook 09 (why self-attention): the paper's Table 1 in exact numbers.

- ``max_path_length(layer, n, k=3, r=4)``: fewest layers connecting the first and last of n positions;
- ``layer_flops(layer, n, d, k=3, r=4)``: multiply-adds of one layer on n vectors of width d.

Both references live in :mod:`course_lib.models.baselines`; ``tests/test_baselines.py`` verifies them against
real layer stacks and PyTorch's ``FlopCounterMode``.
"""

from __future__ import annotations

import math

import torch

from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import public_and_hidden
from course_lib.models.complexity import layer_flops, max_path_length

NOTEBOOK = "09_why_self_attention"


def _randint(gen: torch.Generator, low: int, high: int) -> int:
    """A random integer in [low, high] from ``gen``."""
    return int(torch.randint(low, high + 1, (), generator=gen))


# --- max_path_length ------------------------------------------------------------------------------------

def _path_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    cases = [
        Case("self-attention, n=100", args=("self_attention", 100)),
        Case("self-attention, a single position (n=1)", args=("self_attention", 1)),
        Case("recurrent, n=100", args=("recurrent", 100)),
        Case("recurrent, n=1", args=("recurrent", 1)),
        Case("convolution, n=9, k=3 (divides evenly)", args=("convolution", 9), kwargs={"k": 3}),
        Case("convolution, n=10, k=3 (does not divide evenly)", args=("convolution", 10), kwargs={"k": 3}),
        Case("convolution, n=100, k=5", args=("convolution", 100), kwargs={"k": 5}),
        Case("dilated convolution, n=9, k=3 (n is a power of k)", args=("dilated_convolution", 9), kwargs={"k": 3}),
        Case("dilated convolution, n=10, k=3", args=("dilated_convolution", 10), kwargs={"k": 3}),
        Case("dilated convolution, n=125, k=5 (log(125)/log(5) is 3.0000000000000004 in floats)",
             args=("dilated_convolution", 125), kwargs={"k": 5}),
        Case("restricted self-attention, n=100, r=4", args=("restricted_self_attention", 100), kwargs={"r": 4}),
        Case("restricted self-attention, n=9, r=4", args=("restricted_self_attention", 9), kwargs={"r": 4}),
        Case("restricted self-attention, n=100, r=7 (use r, not 4)", args=("restricted_self_attention", 100),
             kwargs={"r": 7}),
    ]
    if hidden:
        for kind in ("recurrent", "convolution", "dilated_convolution", "restricted_self_attention"):
            n, k, r = _randint(gen, 2, 500), _randint(gen, 2, 7), _randint(gen, 1, 9)
            cases.append(Case(f"{kind}, n={n}, k={k}, r={r}", args=(kind, n), kwargs={"k": k, "r": r}))
        k = _randint(gen, 2, 6)
        power = _randint(gen, 2, 5)
        cases.append(Case(f"dilated convolution at a power, n={k ** power}, k={k}",
                          args=("dilated_convolution", k ** power), kwargs={"k": k}))
        cases.append(Case("dilated convolution, n=1000, k=10", args=("dilated_convolution", 1000), kwargs={"k": 10}))
    return cases


def _path_recurrent_n(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    return n if layer == "recurrent" else max_path_length(layer, n, k=k, r=r)


def _path_conv_n_over_k(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    return math.ceil(n / k) if layer == "convolution" else max_path_length(layer, n, k=k, r=r)


def _path_conv_floor(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    return (n - 1) // (k - 1) if layer == "convolution" else max_path_length(layer, n, k=k, r=r)


def _path_float_log(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    if layer == "dilated_convolution":
        return math.ceil(math.log(n) / math.log(k))
    return max_path_length(layer, n, k=k, r=r)


def _path_dilated_strict(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    if layer == "dilated_convolution":
        layers = 0
        while k ** layers <= n:  # one layer too many when n is a power of k
            layers += 1
        return layers
    return max_path_length(layer, n, k=k, r=r)


def _path_single_position(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    return 1 if layer == "self_attention" else max_path_length(layer, n, k=k, r=r)


def _path_restricted_n_over_r(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    return math.ceil(n / r) if layer == "restricted_self_attention" else max_path_length(layer, n, k=k, r=r)


def _path_with_floats(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    if n == 1:
        return 0
    steps = {
        "self_attention": 1,
        "recurrent": n - 1,
        "convolution": math.ceil((n - 1) / (k - 1)),
        "restricted_self_attention": math.ceil((n - 1) / r),
    }
    if layer in steps:
        return steps[layer]
    return next(depth for depth in range(n + 1) if k ** depth >= n)


def _path_by_reach(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    """Grow the set of positions the last output sees, one layer at a time."""
    seen_from_last, depth = 1, 0  # how many positions (counting back from the last) it depends on
    while seen_from_last < n:
        depth += 1
        if layer == "self_attention":
            seen_from_last = n
        elif layer == "recurrent":
            seen_from_last += 1
        elif layer == "convolution":
            seen_from_last += k - 1
        elif layer == "dilated_convolution":
            seen_from_last *= k
        else:
            seen_from_last += r
    return depth


MAX_PATH_LENGTH = register(Exercise(
    name="max_path_length",
    notebook=NOTEBOOK,
    points=1,
    reference=max_path_length,
    summary="the maximum path length column of the paper's Table 1, in exact numbers of layers",
    **public_and_hidden(_path_cases),
    mistakes=[
        Mistake("recurrent: n steps", _path_recurrent_n,
                "from the first to the last of n positions a recurrence takes n - 1 steps, not n."),
        Mistake("convolution: n / k", _path_conv_n_over_k,
                "a kernel of width k adds k - 1 new positions per layer (not k), the last position needs to "
                "reach n - 1 others, and a partial layer still counts: ceil((n - 1) / (k - 1))."),
        Mistake("convolution: rounded down", _path_conv_floor,
                "a partial layer is still a layer: round up (ceil), not down."),
        Mistake("dilated: math.log rounds", _path_float_log,
                "a ratio of floating-point logarithms is not exact (log 125 / log 5 = 3.0000000000000004): count "
                "with integers, e.g. multiply the receptive field by k until it reaches n.",
                detail="layers = 0; reach = 1; while reach < n: reach *= k; layers += 1."),
        Mistake("dilated: one layer too many", _path_dilated_strict,
                "k to the power L positions are enough when that equals n exactly: stop as soon as the receptive "
                "field reaches n.",
                detail="stop when k ** L >= n."),
        Mistake("one position still needs a layer", _path_single_position,
                "with n = 1 there is nothing to connect: every layer kind needs 0 layers."),
        Mistake("restricted attention: n / r", _path_restricted_n_over_r,
                "a query reaches keys up to distance r, so one layer covers r more positions; the last "
                "position must reach n - 1 others: ceil((n - 1) / r)."),
    ],
    also_correct=[_path_with_floats, _path_by_reach],
))


# --- layer_flops ------------------------------------------------------------------------------------------

def _flops_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    cases = [
        Case("self-attention, n=10, d=4", args=("self_attention", 10, 4)),
        Case("self-attention, n=512, d=64", args=("self_attention", 512, 64)),
        Case("recurrent (LSTM), n=10, d=4", args=("recurrent", 10, 4)),
        Case("recurrent (LSTM), n=50, d=512", args=("recurrent", 50, 512)),
        Case("convolution, n=10, d=4, k=3", args=("convolution", 10, 4), kwargs={"k": 3}),
        Case("dilated convolution, n=10, d=6, k=5", args=("dilated_convolution", 10, 6), kwargs={"k": 5}),
        Case("restricted self-attention, n=100, d=8, r=4", args=("restricted_self_attention", 100, 8),
             kwargs={"r": 4}),
        Case("restricted self-attention, n=50, d=8, r=2 (use r, not 4)", args=("restricted_self_attention", 50, 8),
             kwargs={"r": 2}),
    ]
    if hidden:
        for kind in ("self_attention", "recurrent", "convolution", "restricted_self_attention"):
            n, d, k, r = _randint(gen, 2, 300), _randint(gen, 2, 128), _randint(gen, 2, 7), _randint(gen, 1, 9)
            n = max(n, 2 * r + 1)  # the paper's r-neighbourhood assumes n >= 2r + 1 (no clipping at short n)
            cases.append(Case(f"{kind}, n={n}, d={d}, k={k}, r={r}", args=(kind, n, d), kwargs={"k": k, "r": r}))
    return cases


def _flops_no_projections(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    if layer == "self_attention":
        return 2 * n * n * d
    return layer_flops(layer, n, d, k=k, r=r)


def _flops_scores_once(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    if layer == "self_attention":
        return 4 * n * d * d + n * n * d
    return layer_flops(layer, n, d, k=k, r=r)


def _flops_lstm_one_gate(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    return 2 * n * d * d if layer == "recurrent" else layer_flops(layer, n, d, k=k, r=r)


def _flops_lstm_hidden_only(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    return 4 * n * d * d if layer == "recurrent" else layer_flops(layer, n, d, k=k, r=r)


def _flops_conv_depthwise(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    return k * n * d if layer in ("convolution", "dilated_convolution") else layer_flops(layer, n, d, k=k, r=r)


def _flops_restricted_r_keys(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    if layer == "restricted_self_attention":
        return 4 * n * d * d + 2 * n * r * d
    return layer_flops(layer, n, d, k=k, r=r)


def _flops_counted_twice(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    return 2 * layer_flops(layer, n, d, k=k, r=r)


def _flops_from_products(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    """Sum p*q*s over the (p, q) @ (q, s) products the layer performs."""
    products: list[tuple[int, int, int]]
    if layer in ("self_attention", "restricted_self_attention"):
        keys = n if layer == "self_attention" else 2 * r + 1
        products = [(n, d, d)] * 4 + [(n, d, keys), (n, keys, d)]  # projections, Q K^T, weights @ V
    elif layer == "recurrent":
        products = [(1, d, 4 * d), (1, d, 4 * d)] * n  # x_t W_ih and h_{t-1} W_hh for the four gates
    else:
        products = [(n, d, d)] * k  # one d x d matrix per tap
    return sum(p * q * s for p, q, s in products)


def _flops_by_table(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    projections = 4 * n * d ** 2
    table = {
        "self_attention": projections + 2 * d * n ** 2,
        "restricted_self_attention": projections + 2 * d * n * (2 * r + 1),
        "recurrent": 2 * 4 * n * d ** 2,
        "convolution": k * n * d ** 2,
        "dilated_convolution": k * n * d ** 2,
    }
    return table[layer]


LAYER_FLOPS = register(Exercise(
    name="layer_flops",
    notebook=NOTEBOOK,
    points=1,
    reference=layer_flops,
    summary="the complexity-per-layer column of the paper's Table 1, in exact multiply-adds",
    **public_and_hidden(_flops_cases),
    mistakes=[
        Mistake("attention without projections", _flops_no_projections,
                "a self-attention layer also projects Q, K, V and the output: four (n, d) @ (d, d) products."),
        Mistake("attention: only the scores", _flops_scores_once,
                "there are two n x n products: the scores Q K^T and the weighted sum of the values."),
        Mistake("LSTM: one gate", _flops_lstm_one_gate,
                "an LSTM has four gates (input, forget, cell, output), each with its own matrices."),
        Mistake("LSTM: hidden matrices only", _flops_lstm_hidden_only,
                "each gate multiplies the input x_t by W_ih and the previous state h_{t-1} by W_hh: "
                "two d x d products per gate per step."),
        Mistake("convolution: one weight per channel", _flops_conv_depthwise,
                "each of the k taps is a full d x d matrix (every output channel mixes every input channel)."),
        Mistake("restricted attention: r keys", _flops_restricted_r_keys,
                "a neighbourhood of radius r holds 2r + 1 keys (r on each side and the position itself)."),
        Mistake("FLOPs instead of multiply-adds", _flops_counted_twice,
                "count one multiply-add per (i, j, l) of a product; FLOPs (2 per multiply-add) are twice that."),
    ],
    also_correct=[_flops_from_products, _flops_by_table],
))
