"""Where the course runs: one device choice, one seed, one switch for quick smoke runs.

Every notebook starts with::

    from course_lib.runtime import get_device, set_seed, SMOKE
    device = get_device()   # cuda, then mps, then cpu: chosen here once, never hard-coded
    set_seed(0)

``SMOKE`` is True only when the environment variable ``COURSE_SMOKE=1`` is set. The test suite sets it
when it executes notebooks a second and third time (student and solved versions) to test the exercise
mechanism; it shrinks training loops through :func:`steps`. The nbval run and every learner see the full
default (``SMOKE`` False).
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

__all__ = ["get_device", "set_seed", "SMOKE", "steps"]

SMOKE: bool = os.environ.get("COURSE_SMOKE", "") == "1"


def get_device(prefer: str | None = None) -> torch.device:
    """Return the best available device: CUDA, then Apple MPS, then CPU.

    Args:
        prefer: force a device by name (``"cpu"``, ``"cuda"``, ``"mps"``); the environment variable
            ``COURSE_DEVICE`` does the same without editing a notebook.

    Example:
        >>> get_device("cpu")
        device(type='cpu')
    """
    name = prefer or os.environ.get("COURSE_DEVICE")
    if name:
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def set_seed(seed: int = 0) -> None:
    """Seed Python, NumPy and PyTorch so that a notebook gives the same numbers twice on one machine.

    Example:
        >>> set_seed(0); a = torch.rand(2)
        >>> set_seed(0); bool(torch.equal(a, torch.rand(2)))
        True
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def steps(full: int, smoke: int) -> int:
    """The number of training steps for a loop: ``full`` normally, ``smoke`` under ``COURSE_SMOKE=1``.

    Example:
        >>> steps(3000, 20) in (3000, 20)
        True
    """
    if full < 1 or smoke < 1:
        raise ValueError(f"steps: full and smoke must be >= 1, got full={full}, smoke={smoke}")
    return smoke if SMOKE else full
