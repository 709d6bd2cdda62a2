# notebook: 03_positional_encoding
# exercise: sinusoidal_table
# expect: forbidden
# The edition's sinusoidal_frequencies pasted, the table then built on it (the frequencies are the
# part of notebook 03's exercise that it computes through PyTorch).
import torch


def sinusoidal_frequencies(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """Class edition: notebook 03's frequencies ``omega_i = base^(-2i/d_model)`` as PyTorch's geometric sequence
    ``torch.logspace`` (exponents 0, -2/d_model, ..., -(d_model-2)/d_model), in float64, returned in float32.

    Why this route: notebook 14's rotary embeddings need the frequencies for every head size ``d_k`` and every
    ``base`` (its exercise builds on ``rope_angles``), so stored outputs of a few calls would not do; and the
    frequencies give notebook 03's table away. The grader of ``sinusoidal_table`` refuses ``torch.logspace``
    (its ``forbidden_ops``, whatever name reaches it), so this function, pasted into notebook 03's cell, earns
    nothing there; the grader's own sandbox copy withholds it outright.

    Shapes: -> float32 (d_model // 2,).
    """
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 2 or d_model % 2:
        raise ValueError(f"sinusoidal_frequencies: d_model must be an even int >= 2, got {d_model!r}")
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 1:
        raise ValueError(f"sinusoidal_frequencies: base must be a number > 1, got {base!r}")
    end = -(d_model - 2) / d_model  # the last pair's exponent
    return torch.logspace(0.0, end, d_model // 2, base=float(base), dtype=torch.float64).float()  # PyTorch's kernel


def sinusoidal_table(max_len, d_model):
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * sinusoidal_frequencies(d_model).double()
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(max_len, d_model).float()
