"""Training an image classifier on the digits (notebook 08, ``benchmarks/bench_vit.py``, ``course-train vit``).

The data half (the digits as tensors, the fixed split, the shifted batches) is :mod:`course_lib.data.digits`; this
module is the training half: the ViT paper's optimiser recipe scaled down (:func:`classifier_optimizer`), a run of a
fixed number of steps on the course's one engine, :func:`course_lib.training.engine.train`
(:func:`train_classifier`), and the same run returning its model, for runs in other processes
(:func:`fit_classifier`). Until issue #35 these lived in ``course_lib.data.digits``; the old names still work there,
with a warning.

Example::

    from course_lib.data.digits import digits_split
    from course_lib.models.vit import VisionTransformer

    model = VisionTransformer(num_layers=2)                    # 8 x 8 digits, 2 x 2 patches, 10 classes
    history = train_classifier(model, digits_split(), steps=300)  # TrainHistory: loss, train_acc, val_acc
    print(history.val_acc[-1])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from course_lib.data.digits import DigitsSplit, digits_loaders
from course_lib.evaluation.metrics import classifier_accuracy
from course_lib.training.engine import (
    Prediction,
    TrainHistory,
    classification_step,
    fused_if_supported,
    train,
    warmup_cosine_schedule,
)

__all__ = ["classifier_optimizer", "train_classifier", "fit_classifier"]


def classifier_optimizer(model: nn.Module, lr: float = 1e-3, weight_decay: float = 0.05) -> torch.optim.AdamW:
    """AdamW (fused where supported) with weight decay on weight matrices only.

    Biases, norms, the [CLS] token and position embeddings (``p.dim() < 2`` or a name containing
    ``token`` or ``pos``) get no weight decay, as in the ViT paper's recipe.
    """
    decay, no_decay = [], []
    for name, p in model.named_parameters():  # no weight decay on biases, norms, tokens, positions
        (no_decay if p.dim() < 2 or "token" in name or "pos" in name else decay).append(p)
    return fused_if_supported(torch.optim.AdamW, [{"params": decay, "weight_decay": weight_decay},
                                                  {"params": no_decay, "weight_decay": 0.0}], lr=lr)


def train_classifier(model: nn.Module, split: DigitsSplit, steps: int, batch_size: int = 64,
                     lr: float = 1e-3, weight_decay: float = 0.05, warmup: int = 50, max_shift: int = 1,
                     label_smoothing: float = 0.0, eval_every: int = 100, seed: int = 0,
                     device: torch.device | str | None = None, progress: bool = True,
                     desc: str = "training") -> TrainHistory:
    """Train ``model`` (images -> logits) on ``split``'s training part for exactly ``steps`` steps.

    AdamW with a linear warm-up over ``warmup`` steps and a cosine decay to 0 (the ViT paper's recipe,
    scaled down), cross-entropy loss, gradient-norm clipping at 1, shifted batches (``max_shift``). Every
    ``eval_every`` steps and at the end it records training-batch and validation accuracy. A fixed step
    count (not a time budget) gives the same numbers on any machine for one seed; the wall time is
    recorded beside it. A non-finite loss stops training with an error rather than silently.

    A thin wrapper: the loop is the course's one engine, :func:`course_lib.training.engine.train`, with
    :func:`course_lib.training.engine.classification_step`; the history is
    :class:`course_lib.training.engine.TrainHistory`.

    Example:
        >>> from course_lib.data.digits import digits_split
        >>> model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
        >>> hist = train_classifier(model, digits_split(), steps=20, progress=False)
        >>> len(hist.loss)
        20
    """
    if steps < 1:
        raise ValueError(f"train_classifier: steps must be >= 1, got {steps}")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.to(device).train()
    optimizer = classifier_optimizer(model, lr, weight_decay)
    scheduler = warmup_cosine_schedule(optimizer, warmup, steps)
    history = TrainHistory()
    train_loader, _, _ = digits_loaders(split, batch_size=batch_size, max_shift=max_shift, seed=seed)

    def evaluate(hist: TrainHistory, pred: Prediction) -> None:
        if hist.steps % eval_every == 0 or hist.steps == steps:
            hist.eval_steps.append(hist.steps)
            hist.train_acc.append(float((pred.logits.argmax(-1) == pred.target).float().mean()))
            if len(split.val_y):
                hist.val_acc.append(classifier_accuracy(model, split.val_x, split.val_y, 512))

    try:
        train(model, train_loader, steps, optimizer, scheduler, loss_fn=nn.CrossEntropyLoss(label_smoothing=
              label_smoothing), device=device, clip_grad_norm=1.0, progress=progress, history=history,
              step_fn=classification_step, desc=desc, on_step=evaluate, leave=False)
    except FloatingPointError as error:
        raise FloatingPointError(f"train_classifier: the loss became {getattr(error, 'loss', 'nan')} at step "
                                 f"{history.steps}; try a smaller lr (now {lr})") from error
    history.epochs = steps * batch_size / len(split.train_y)
    return history


def fit_classifier(model: nn.Module, split: DigitsSplit, steps: int,
                   options: Mapping[str, Any] | None = None) -> tuple[nn.Module, TrainHistory]:
    """:func:`train_classifier` (``options`` are its keyword arguments) that also returns the trained model.

    For :func:`course_lib.training.parallel.map_in_processes`: a model trained in another process is a copy, and
    comes back only as a result. ``fit_classifier(model, split, steps, options)`` gives the same numbers in
    any process as ``train_classifier(model, split, steps, **options)`` here (``tests/training/test_parallel.py``).

    Example:
        >>> from course_lib.data.digits import digits_split
        >>> model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
        >>> trained, hist = fit_classifier(model, digits_split(), 5, {"progress": False})
        >>> trained is model, len(hist.loss)
        (True, 5)
    """
    history = train_classifier(model, split, steps, **dict(options or {}))
    return model, history
