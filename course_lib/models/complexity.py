"""What each kind of layer costs (notebook 09): the analytic columns of the paper's Table 1, in exact numbers.

The paper's Table 1 compares a self-attention layer with a recurrent and a convolutional layer on three counts:
operations per layer, sequential operations, and the maximum path length between two positions.
:func:`max_path_length` and :func:`layer_flops` give two of them exactly (the references of notebook 09's
exercises); ``tests/models/test_baselines.py`` verifies them against real layer stacks
(:mod:`course_lib.models.baselines`) and PyTorch's ``FlopCounterMode``.
"""

from __future__ import annotations

from course_lib.validation import validated_by

__all__ = ["LAYER_KINDS", "max_path_length", "layer_flops"]

#: The layer kinds of the paper's Table 1, as accepted by :func:`max_path_length` and :func:`layer_flops`.
LAYER_KINDS = ("self_attention", "recurrent", "convolution", "dilated_convolution", "restricted_self_attention")


def _check_kind_and_sizes(fn: str, layer: str, **sizes: int) -> None:
    """Raise a clear error for an unknown layer kind or a size that is not a positive integer."""
    if layer not in LAYER_KINDS:
        raise ValueError(f"{fn}: layer must be one of {LAYER_KINDS}, got {layer!r}")
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{fn}: {name} must be a positive integer, got {value!r}")


def _check_path_arguments(layer: str, n: int, k: int = 3, r: int = 4) -> None:
    _check_kind_and_sizes("max_path_length", layer, n=n, k=k, r=r)
    if k < 2:
        raise ValueError(f"max_path_length: kernel width k must be >= 2 to connect positions, got {k}")


def _check_flops_arguments(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> None:
    _check_kind_and_sizes("layer_flops", layer, n=n, d=d, k=k, r=r)


@validated_by(_check_path_arguments)
def max_path_length(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    """Fewest layers a signal must cross to connect the first and the last of ``n`` positions.

    The third column of the paper's Table 1, in exact numbers instead of O(.) (a stack of identical layers;
    "a path" is a chain of positions, each computed from the one before it):

    - ``"self_attention"``: every position attends to every other: 1 (0 when ``n == 1``).
    - ``"recurrent"``: h_t depends on h_{t-1}, so position 0 reaches position n-1 after n-1 steps.
    - ``"convolution"`` (kernel ``k``, contiguous): each layer widens the receptive field by k-1 positions;
      L layers see 1 + L(k-1) positions, so L = ceil((n-1) / (k-1)).
    - ``"dilated_convolution"`` (kernel ``k``, dilations 1, k, k^2, ...): L layers see k^L positions, so
      L is the smallest integer with k^L >= n (computed with integers: ``math.log`` rounds badly).
    - ``"restricted_self_attention"`` (each query attends to keys at distance <= ``r``):
      L = ceil((n-1) / r).

    Args:
        layer: one of :data:`LAYER_KINDS`.
        n: sequence length (>= 1).
        k: convolution kernel width (>= 2); used by the convolutions only.
        r: neighbourhood radius (>= 1); used by restricted self-attention only.

    Returns:
        the number of layers (an int).

    Example:
        >>> [max_path_length(kind, 9) for kind in ("self_attention", "recurrent", "convolution",
        ...                                           "dilated_convolution")]
        [1, 8, 4, 2]
    """
    distance = n - 1  # from the first position to the last
    if distance == 0:
        return 0
    if layer == "self_attention":
        return 1
    if layer == "recurrent":
        return distance
    if layer == "convolution":
        return -(-distance // (k - 1))  # ceil((n-1) / (k-1)) with integers
    if layer == "restricted_self_attention":
        return -(-distance // r)
    layers, receptive_field = 0, 1  # dilated convolution: the receptive field is k**layers
    while receptive_field < n:
        layers, receptive_field = layers + 1, receptive_field * k
    return layers


@validated_by(_check_flops_arguments)
def layer_flops(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    """Multiply-adds of one layer on a sequence of ``n`` vectors of width ``d`` (one sequence, no batch).

    The first column of the paper's Table 1 ("complexity per layer") with exact constants, counting a
    ``(p, q) @ (q, s)`` matrix product as p*q*s multiply-adds and ignoring biases, softmax and
    non-linearities:

    - ``"self_attention"``: the Q, K, V and output projections (4 n d^2), the scores Q K^T (n^2 d) and the
      weighted sum of values (n^2 d): 4 n d^2 + 2 n^2 d. The paper's O(n^2 d) is the part that grows with n^2.
    - ``"restricted_self_attention"``: the same projections, but each query meets only 2r+1 keys:
      4 n d^2 + 2 n (2r+1) d (the paper's O(r n d)).
    - ``"recurrent"``: an LSTM: four gates, each with an input and a hidden d x d matrix, at each of n
      steps: 8 n d^2 (the paper's O(n d^2)).
    - ``"convolution"`` and ``"dilated_convolution"``: k taps, each a d x d matrix, at n positions:
      k n d^2 (the paper's O(k n d^2)).

    Args:
        layer: one of :data:`LAYER_KINDS`.
        n: sequence length; d: width (``d_model``); k: kernel width; r: neighbourhood radius.

    Returns:
        the number of multiply-adds (an int; FLOPs are twice this).

    Example:
        >>> layer_flops("self_attention", n=10, d=4), layer_flops("recurrent", n=10, d=4)
        (1440, 1280)
    """
    if layer == "self_attention":
        return 4 * n * d * d + 2 * n * n * d
    if layer == "restricted_self_attention":
        return 4 * n * d * d + 2 * n * (2 * r + 1) * d
    if layer == "recurrent":
        return 8 * n * d * d
    return k * n * d * d  # convolution, dilated or not
