"""The image data of notebook 08: scikit-learn's handwritten digits, a fixed split, small random shifts.

The digits (Alpaydin & Kaynak, UCI) ship inside the scikit-learn wheel, so nothing is downloaded: 1,797
grey-scale images of 8 x 8 pixels with integer intensities 0..16, ten classes of about 180 images each.
This module turns them into tensors ``(N, 1, 8, 8)`` scaled to ``[0, 1]``, splits them once, stratified by
class, into train / validation / test, augments training batches with small shifts, and trains an image
classifier for a fixed number of steps (notebook 08 and ``benchmarks/bench_vit.py``) on the course's one
training engine, :func:`course_lib.training.engine.train`.

Example::

    split = digits_split()                  # 1257 train, 180 validation, 360 test images
    print(split.train_x.shape)              # torch.Size([1257, 1, 8, 8])
    batch = random_shift(split.train_x[:4], max_shift=1)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.training.engine import Prediction, TrainHistory, classification_step, fused_if_supported, train

__all__ = [
    "load_digits_tensors",
    "DigitsSplit",
    "digits_split",
    "random_shift",
    "digits_loaders",
    "accuracy",
    "TrainHistory",
    "classifier_optimizer",
    "warmup_cosine_schedule",
    "train_classifier",
    "fit_classifier",
]


def load_digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1,797 digits as ``(images (1797, 1, 8, 8) float32 in [0, 1], labels (1797,) int64)``.

    The raw intensities 0..16 are divided by 16. No download: scikit-learn reads them from its wheel.

    Example:
        >>> images, labels = load_digits_tensors()
        >>> tuple(images.shape), int(labels.max())
        ((1797, 1, 8, 8), 9)
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (N, 1, 8, 8)
    labels = torch.tensor(digits.target, dtype=torch.long)  # (N,)
    return images, labels


@dataclass
class DigitsSplit:
    """A train / validation / test split of the digits: images ``(n, 1, 8, 8)`` and labels ``(n,)``.

    ``seed`` and the fractions record how the split was drawn, so that a result can say which split it
    was measured on.
    """

    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    seed: int = 0
    test_fraction: float = 0.2
    val_fraction: float = 0.1

    @property
    def sizes(self) -> dict[str, int]:
        """The number of images in each part, e.g. ``{"train": 1257, "val": 180, "test": 360}``."""
        return {"train": len(self.train_y), "val": len(self.val_y), "test": len(self.test_y)}

    def flat(self, part: str) -> tuple[np.ndarray, np.ndarray]:
        """One part as NumPy arrays ``(n, 64)`` and ``(n,)``, the format scikit-learn's models take."""
        if part not in ("train", "val", "test"):
            raise ValueError(f"DigitsSplit.flat: part must be 'train', 'val' or 'test', got {part!r}")
        x, y = getattr(self, f"{part}_x"), getattr(self, f"{part}_y")
        return x.reshape(len(x), -1).numpy(), y.numpy()  # (n, 1, 8, 8) -> (n, 64)


def digits_split(test_fraction: float = 0.2, val_fraction: float = 0.1, seed: int = 0) -> DigitsSplit:
    """Split the digits once, stratified by class: the course's fixed split (defaults: 1257/180/360).

    ``test_fraction`` and ``val_fraction`` are fractions of all 1,797 images. Stratifying keeps the ten
    classes in the same proportions in every part; the seed makes the split the same on every machine
    (scikit-learn's ``train_test_split`` with ``random_state=seed``).

    Example:
        >>> digits_split().sizes
        {'train': 1257, 'val': 180, 'test': 360}
    """
    if not (0 < test_fraction < 1 and 0 <= val_fraction < 1 and test_fraction + val_fraction < 1):
        raise ValueError(f"digits_split: need 0 < test_fraction, 0 <= val_fraction and a sum below 1; got "
                         f"test_fraction={test_fraction}, val_fraction={val_fraction}")
    from sklearn.model_selection import train_test_split

    images, labels = load_digits_tensors()
    index = np.arange(len(labels))
    rest, test = train_test_split(index, test_size=test_fraction, stratify=labels.numpy(), random_state=seed)
    if val_fraction > 0:
        val_size = val_fraction / (1.0 - test_fraction)  # a fraction of what is left
        train, val = train_test_split(rest, test_size=val_size, stratify=labels.numpy()[rest],
                                      random_state=seed)
    else:
        train, val = rest, rest[:0]
    pick = lambda idx: (images[torch.as_tensor(idx)], labels[torch.as_tensor(idx)])  # noqa: E731
    (trx, try_), (vx, vy), (tx, ty) = pick(train), pick(val), pick(test)
    return DigitsSplit(trx, try_, vx, vy, tx, ty, seed=seed, test_fraction=test_fraction,
                       val_fraction=val_fraction)


def random_shift(images: torch.Tensor, max_shift: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
    """Move each image by a random whole number of pixels in ``[-max_shift, max_shift]`` along each axis.

    The light augmentation of notebook 08: a digit moved by one pixel is the same digit, so the model
    sees "new" training images for free. Pixels shifted in from outside are 0 (background); pixels shifted
    out are lost. Each image draws its own (dy, dx).

    Shapes: ``images`` (batch, channels, height, width) -> the same shape.

    Example:
        >>> x = torch.zeros(1, 1, 3, 3); x[0, 0, 1, 1] = 1.0
        >>> int(random_shift(x, 1).sum())   # the one bright pixel is still inside the image
        1
    """
    if images.dim() != 4:
        raise ValueError(f"random_shift: images must have shape (batch, channels, height, width), "
                         f"got {tuple(images.shape)}")
    if max_shift < 0:
        raise ValueError(f"random_shift: max_shift must be >= 0, got {max_shift}")
    if max_shift == 0:
        return images
    batch, _, height, width = images.shape
    m = max_shift
    padded = F.pad(images, (m, m, m, m))  # (batch, C, H + 2m, W + 2m), zeros around
    shifts = torch.randint(-m, m + 1, (batch, 2), generator=generator).to(images.device)  # (batch, [dy, dx])
    rows = torch.arange(height, device=images.device) + m - shifts[:, :1]  # (batch, H): source rows
    cols = torch.arange(width, device=images.device) + m - shifts[:, 1:]  # (batch, W): source columns
    b = torch.arange(batch, device=images.device)[:, None, None]  # (batch, 1, 1)
    moved = padded.permute(0, 2, 3, 1)[b, rows[:, :, None], cols[:, None, :]]  # (batch, H, W, C)
    return moved.permute(0, 3, 1, 2).contiguous()  # (batch, C, H, W)


def digits_loaders(split: DigitsSplit, batch_size: int = 64, max_shift: int = 1, seed: int = 0,
                   ) -> tuple[torch.utils.data.DataLoader, torch.utils.data.DataLoader,
                              torch.utils.data.DataLoader]:
    """``(train, val, test)`` DataLoaders over a split; training batches are shuffled and shifted.

    The training loader reshuffles every epoch with a generator seeded by ``seed`` and applies
    :func:`random_shift` to each batch; validation and test batches are neither shuffled nor augmented.

    Example:
        >>> train, val, test = digits_loaders(digits_split(), batch_size=32)
        >>> images, labels = next(iter(train)); tuple(images.shape)
        (32, 1, 8, 8)
    """
    if batch_size < 1:
        raise ValueError(f"digits_loaders: batch_size must be >= 1, got {batch_size}")
    from torch.utils.data import DataLoader, TensorDataset

    gen = torch.Generator().manual_seed(seed)
    shift_gen = torch.Generator().manual_seed(seed + 1)

    def augment(batch: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        images = torch.stack([b[0] for b in batch])  # (batch, 1, 8, 8)
        labels = torch.stack([b[1] for b in batch])  # (batch,)
        return random_shift(images, max_shift, generator=shift_gen), labels

    train = DataLoader(TensorDataset(split.train_x, split.train_y), batch_size=batch_size, shuffle=True,
                       generator=gen, collate_fn=augment)
    val = DataLoader(TensorDataset(split.val_x, split.val_y), batch_size=256)
    test = DataLoader(TensorDataset(split.test_x, split.test_y), batch_size=256)
    return train, val, test


@torch.no_grad()
def accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 512) -> float:
    """The fraction of ``images`` (n, C, H, W) that ``model`` classifies as ``labels`` (n,), in eval mode.

    The model's train/eval mode is restored afterwards.

    Example:
        >>> accuracy(nn.Sequential(nn.Flatten(), nn.Linear(64, 10)), torch.zeros(4, 1, 8, 8),
        ...          torch.zeros(4, dtype=torch.long)) in (0.0, 1.0)
        True
    """
    if len(images) != len(labels):
        raise ValueError(f"accuracy: images ({len(images)}) and labels ({len(labels)}) differ in length")
    if len(labels) == 0:
        raise ValueError("accuracy: no images given")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    correct = 0
    for start in range(0, len(labels), batch_size):
        logits = model(images[start:start + batch_size].to(device))  # (b, num_classes)
        correct += int((logits.argmax(-1).cpu() == labels[start:start + batch_size]).sum())
    model.train(was_training)
    return correct / len(labels)


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


def warmup_cosine_schedule(optimizer: torch.optim.Optimizer, warmup: int, steps: int
                           ) -> torch.optim.lr_scheduler.LambdaLR:
    """A linear warm-up over ``warmup`` steps, then a cosine decay to 0 at ``steps`` (a ``LambdaLR``)."""
    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress_ = (step - warmup) / max(1, steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * progress_))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


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
                hist.val_acc.append(accuracy(model, split.val_x, split.val_y))

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
    any process as ``train_classifier(model, split, steps, **options)`` here (``tests/test_parallel.py``).

    Example:
        >>> model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
        >>> trained, hist = fit_classifier(model, digits_split(), 5, {"progress": False})
        >>> trained is model, len(hist.loss)
        (True, 5)
    """
    history = train_classifier(model, split, steps, **dict(options or {}))
    return model, history
