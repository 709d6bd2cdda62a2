# notebook: 14_todays_models
# exercise: rms_norm
# expect: forbidden
# The class edition's RMSNorm.forward, pasted as the edition ships it, made the forward of the stub's class.
from typing import Any

import torch
from torch import nn


def rms_norm_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """Class edition: PyTorch's ``F.rms_norm`` over the last axis, in float32, cast back before the gain (as the
    course's ``RMSNorm`` and Hugging Face's ``LlamaRMSNorm`` do). Gradients reach ``x`` and the gain, so a Llama
    trains through it. Shapes: ``x`` (..., d_model) -> (..., d_model)."""
    import torch.nn.functional as F

    normalised = F.rms_norm(x.to(torch.float32), (self.d_model,), eps=self.eps)  # (..., d_model), float32
    return self.weight * normalised.to(x.dtype)  # (..., d_model)


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight, over the last axis: (..., d_model) -> (..., d_model)."""

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))  # the gain g, one per feature

    forward = rms_norm_forward
