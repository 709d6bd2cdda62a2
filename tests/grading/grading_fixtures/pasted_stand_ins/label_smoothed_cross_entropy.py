# notebook: 07_training_and_decoding
# exercise: label_smoothed_cross_entropy
# expect: forbidden
# The class edition's stand-in, pasted as the edition ships it.
import torch


def label_smoothed_cross_entropy(logits: torch.Tensor, target: torch.Tensor, smoothing: float = 0.1,
                                 ignore_index: int = 0) -> torch.Tensor:
    """Class edition: PyTorch's ``F.cross_entropy(label_smoothing=...)`` with the course's signature.

    One documented difference from PyTorch kept as the course has it: a batch that is all padding gives 0
    (with a graph), not NaN. Shapes: ``logits`` (..., C), ``target`` (...) -> a scalar.
    """
    import torch.nn.functional as F

    flat_logits, flat_target = logits.reshape(-1, logits.shape[-1]), target.reshape(-1)  # (N, C), (N,)
    if not bool((flat_target != ignore_index).any()):
        return logits.sum() * 0.0
    return F.cross_entropy(flat_logits, flat_target, ignore_index=ignore_index, label_smoothing=smoothing)
