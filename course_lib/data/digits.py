"""The image data of notebook 08: scikit-learn's handwritten digits, a fixed split, small random shifts.

The digits (Alpaydin & Kaynak, UCI) ship inside the scikit-learn wheel, so nothing is downloaded: 1,797
grey-scale images of 8 x 8 pixels with integer intensities 0..16, ten classes of about 180 images each.
This module turns them into tensors ``(N, 1, 8, 8)`` scaled to ``[0, 1]``, splits them once, stratified by
class, into train / validation / test, and augments training batches with small shifts. Training an image classifier on
them is :mod:`course_lib.training.image_classifier`'s job (its names served from here before, and still are, with a
warning).

Example::

    split = digits_split()                  # 1257 train, 180 validation, 360 test images
    print(split.train_x.shape)              # torch.Size([1257, 1, 8, 8])
    batch = random_shift(split.train_x[:4], max_shift=1)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

__all__ = [
    "load_digits_tensors",
    "DigitsSplit",
    "digits_split",
    "random_shift",
    "digits_loaders",
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
