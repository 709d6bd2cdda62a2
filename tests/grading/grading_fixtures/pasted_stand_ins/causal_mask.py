# notebook: 04_masking
# exercise: causal_mask
# expect: forbidden
# The class edition's stand-in, pasted as the edition ships it.
import torch


def causal_mask(seq_len: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Class edition: PyTorch's ``nn.Transformer.generate_square_subsequent_mask`` as a boolean mask.

    PyTorch's mask is additive (0 where a query may attend, -inf elsewhere); ``== 0`` turns it into the
    course's convention (True = may attend). Shapes: -> boolean (seq_len, seq_len).
    """
    from torch import nn

    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"causal_mask: seq_len must be a positive int, got {seq_len!r}")
    additive = nn.Transformer.generate_square_subsequent_mask(seq_len, device=device)  # (seq, seq): 0 / -inf
    return additive == 0
