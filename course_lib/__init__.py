"""course_lib: the reference implementations, checks and grading of the Transformer course.

Everything a notebook or an instructor's assignment needs is importable from here; the submodules
follow the notebooks' order (``attention``, ``masking``, ``positional``, ``layers``, ``transformer``,
``vit``, ...). Public names are stable: a test records them with their signatures, and a name is
deprecated (with a warning naming its replacement) before it is removed.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .basics import stable_softmax
from .runtime import get_device, set_seed, steps

__all__ = [
    "__version__",
    "get_device",
    "set_seed",
    "steps",
    "stable_softmax",
]
