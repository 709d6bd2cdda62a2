"""The pieces around a model's training, written by hand: AdamW, gradient clipping, and a checkpoint.

PyTorch has all three (``torch.optim.AdamW``, ``torch.nn.utils.clip_grad_norm_``, ``torch.save`` of state
dicts), and the course's training engine uses PyTorch's. These are the same algorithms spelled out as the
papers write them, so that a learner can read every step; ``tests/training/test_optim.py`` proves them equal to
PyTorch's step for step. The learning-rate schedule lives with the engine
(:func:`course_lib.training.engine.warmup_cosine_factor`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable

import torch
from torch import nn

__all__ = ["adamw_update", "AdamW", "clip_by_global_norm", "clip_grad_norm", "save_training_state",
           "load_training_state"]


def adamw_update(param: torch.Tensor, grad: torch.Tensor, m: torch.Tensor, v: torch.Tensor, step: int,
                 lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One AdamW update of one parameter tensor, as new tensors: ``(param, m, v)`` after step ``step``.

    ``step`` counts from 1 (the first update is step 1); ``m`` and ``v`` are the running means before it
    (zeros before the first). :class:`AdamW` applies this to every parameter; its docstring gives the
    formulas. The operations are PyTorch's own, in PyTorch's order, so the result is bit-equal to
    ``torch.optim.AdamW``.

    Example:
        >>> p, m, v = adamw_update(torch.ones(2), torch.tensor([0.5, -2.0]), torch.zeros(2), torch.zeros(2),
        ...                        step=1, lr=0.1, weight_decay=0.0)
        >>> p  # the first step moves every entry by lr, whatever its gradient's size: m̂ / √v̂ = ±1
        tensor([0.9000, 1.1000])
    """
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)                        # decoupled weight decay
    m = torch.lerp(m, grad, 1 - beta1)                             # m ← β₁m + (1 − β₁)g
    v = torch.addcmul(v * beta2, grad, grad, value=1 - beta2)      # v ← β₂v + (1 − β₂)g²
    v_hat_sqrt = v.sqrt() / math.sqrt(1 - beta2 ** step)           # √v̂ (bias-corrected)
    # θ ← θ − lr·m̂/(√v̂ + ε), with m̂ = m / (1 − β₁ᵗ) folded into the step size
    param = torch.addcdiv(param, m, v_hat_sqrt + eps, value=-lr / (1 - beta1 ** step))
    return param, m, v


class AdamW(torch.optim.Optimizer):
    """Adam with decoupled weight decay (Loshchilov and Hutter, 2019, Algorithm 2), as ``torch.optim.AdamW``.

    For each parameter θ with gradient g, at step t = 1, 2, ...:

        θ ← θ − lr·λ·θ                          (weight decay, apart from the gradient: "decoupled")
        m ← β₁·m + (1 − β₁)·g                   (running mean of the gradient)
        v ← β₂·v + (1 − β₂)·g²                  (running mean of its square)
        m̂ = m / (1 − β₁ᵗ),  v̂ = v / (1 − β₂ᵗ)   (bias correction: m and v start at 0)
        θ ← θ − lr · m̂ / (√v̂ + ε)

    Adam with L2 regularisation would add λθ to g instead, so the decay would be divided by √v̂ like the
    gradient and parameters with large gradients would hardly decay; decoupling keeps it a plain shrink.
    The decay is scaled by ``lr`` (PyTorch's convention; the paper's schedule multiplier η_t plays that role).
    Each parameter's step is ``update`` (:func:`adamw_update` unless another function of its signature is given:
    notebook 10 trains with the learner's).
    """

    def __init__(self, params: Iterable[nn.Parameter] | Iterable[dict], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 update: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = adamw_update) -> None:
        if not lr >= 0.0:
            raise ValueError(f"AdamW: lr must be >= 0, got {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"AdamW: betas must each be in [0, 1), got {betas}")
        if not eps >= 0.0 or not weight_decay >= 0.0:
            raise ValueError(f"AdamW: eps and weight_decay must be >= 0, got eps={eps}, weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.update = update  # one parameter's step: adamw_update's signature (a learner's own, in notebook 10)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201  (torch.optim.Optimizer's signature)
        """One update of every parameter that has a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                p_new, m, v = self.update(p, p.grad, state["exp_avg"], state["exp_avg_sq"],
                                           int(state["step"].item()), lr, (beta1, beta2), eps, decay)
                p.copy_(p_new)
                state["exp_avg"].copy_(m)
                state["exp_avg_sq"].copy_(v)
        return loss


def clip_by_global_norm(grads: list[torch.Tensor], max_norm: float, eps: float = 1e-6
                        ) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Gradients scaled together so that their global L2 norm is at most ``max_norm``, as new tensors, and the
    global norm measured before: ``(clipped, norm)``.

    The global norm is the norm of every entry of every gradient at once, ‖g‖ = √(Σ_p ‖g_p‖²). When it
    exceeds ``max_norm``, every gradient is multiplied by max_norm / (‖g‖ + eps); otherwise nothing changes.
    The direction of the step is kept, only its length is capped (clipping each tensor or each entry on its
    own would turn the direction).

    Example:
        >>> clipped, norm = clip_by_global_norm([torch.tensor([3.0]), torch.tensor([4.0])], max_norm=1.0)
        >>> norm, [round(g.item(), 4) for g in clipped]
        (tensor(5.), [0.6, 0.8])
    """
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))  # ‖g‖
    scale = torch.clamp(max_norm / (total + eps), max=1.0)  # 1 when already short enough
    return [g * scale.to(g.dtype) for g in grads], total


def clip_grad_norm(parameters: Iterable[torch.Tensor], max_norm: float, eps: float = 1e-6,
                   clip: Callable[..., tuple[list[torch.Tensor], torch.Tensor]] = clip_by_global_norm) -> torch.Tensor:
    """Clip the gradients of ``parameters`` in place by their global norm (``clip``: :func:`clip_by_global_norm`
    unless another function of its signature is given, such as a learner's); return the norm measured before
    clipping (as ``torch.nn.utils.clip_grad_norm_``, and bit-equal to it)."""
    if not max_norm > 0:
        raise ValueError(f"clip_grad_norm: max_norm must be > 0, got {max_norm}")
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    clipped, total = clip(grads, max_norm, eps)
    for g, new in zip(grads, clipped, strict=True):
        g.copy_(new)
    return total


def save_training_state(path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer,
                        step: int) -> None:
    """Save what a run needs to go on where it stopped: the model's weights, the optimizer's state (AdamW's
    m, v and step count: without them the first steps after a restart are Adam's first steps again) and the
    step count. (``course-train``'s checkpoints add the random generators and write atomically:
    :mod:`course_lib.training.cli.checkpoint`.)"""
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": int(step)}, path)


def load_training_state(path: str | os.PathLike, model: nn.Module,
                        optimizer: torch.optim.Optimizer | None = None) -> int:
    """Restore a :func:`save_training_state` file into ``model`` (and ``optimizer``); return its step."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    missing = {"model", "optimizer", "step"} - set(state) if isinstance(state, dict) else {"model"}
    if missing:
        raise ValueError(f"load_training_state: {os.fspath(path)} is not a training state (missing "
                         f"{sorted(missing)})")
    model.load_state_dict(state["model"])
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    return int(state["step"])
