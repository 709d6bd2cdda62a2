"""Where the course runs: one device choice, one seed, one switch for quick smoke runs.

Every notebook starts with::

    from course_lib.runtime import get_device, set_seed, SMOKE
    device = get_device()   # cuda, then mps, then cpu: chosen here once, never hard-coded
    set_seed(0)

On the CPU, :func:`get_device` also sets PyTorch's number of threads, once (see :func:`configure_threads`):
one thread by default, because most of the course's models are small, and on a 2-core machine shared with
other work two threads fighting over small matrices made a training step 17-21x slower than one thread
(``benchmarks/results/threads.md``). The notebooks whose models are large enough to gain from a second core
on an idle machine (07, 10, 11: 1.2-1.7x faster) ask for two with ``get_device(threads=2)``.
``COURSE_THREADS=1`` (or ``2``, ``all``) in the environment overrides every notebook's choice.

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

__all__ = ["get_device", "set_seed", "SMOKE", "steps", "configure_threads", "DEFAULT_THREADS"]

SMOKE: bool = os.environ.get("COURSE_SMOKE", "") == "1"
DEFAULT_THREADS = 1
_threads_configured = False


def configure_threads(threads: int | str | None = None, *, default: int = DEFAULT_THREADS) -> int:
    """Set the number of threads PyTorch uses on the CPU; return it.

    Args:
        threads: a positive number, or ``"all"`` (one per logical CPU). ``None`` reads the environment
            variable ``COURSE_THREADS`` and falls back to ``default``.
        default: the number used when neither ``threads`` nor ``COURSE_THREADS`` says one; at most the
            number of logical CPUs (a default of 2 on a one-CPU machine is 1).

    The default is one thread: for the notebooks' small models a step with two threads was 17x (ViT of
    notebook 08) and 21x (notebook 02's toy model) slower than with one on a busy 2-core machine (measured
    with ``benchmarks/bench_threads.py``). Larger models on an idle machine gain from more. The number of
    threads changes the order of floating-point sums, so a notebook's numbers are reproducible for a fixed
    thread count on one machine (1 and 2 threads give slightly different trainings).

    Example:
        >>> configure_threads(1)
        1
    """
    count = os.cpu_count() or 1
    if default < 1:
        raise ValueError(f"configure_threads: default must be >= 1, got {default!r}")
    chosen = threads if threads is not None else os.environ.get("COURSE_THREADS") or min(default, count)
    if chosen == "all":
        value = count
    else:
        try:
            value = int(chosen)
        except (TypeError, ValueError):
            value = 0
        if value < 1:
            raise ValueError(f"configure_threads: threads (or COURSE_THREADS) must be a number >= 1 or 'all', "
                             f"got {chosen!r}")
    torch.set_num_threads(value)
    return value


def get_device(prefer: str | None = None, threads: int | None = None) -> torch.device:
    """Return the best available device: CUDA, then Apple MPS, then CPU (threads set on first use, see above).

    Args:
        prefer: force a device by name (``"cpu"``, ``"cuda"``, ``"mps"``); the environment variable
            ``COURSE_DEVICE`` does the same without editing a notebook.
        threads: this notebook's number of CPU threads when ``COURSE_THREADS`` is not set (default
            :data:`DEFAULT_THREADS`, capped at the number of logical CPUs). Given, it is applied even if an
            earlier call already set the threads.

    Example:
        >>> get_device("cpu")
        device(type='cpu')
    """
    name = prefer or os.environ.get("COURSE_DEVICE")
    if name:
        device = torch.device(name)
    elif torch.cuda.is_available():
        device = torch.device("cuda")
    elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        device = torch.device("mps")
    else:
        device = torch.device("cpu")
    global _threads_configured
    if device.type == "cpu" and (threads is not None or not _threads_configured):
        # once, unless asked: a later torch.set_num_threads(n) in a notebook stays
        configure_threads(default=threads if threads is not None else DEFAULT_THREADS)
        _threads_configured = True
    return device


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
