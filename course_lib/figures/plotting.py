"""Figures the notebooks share: attention heatmaps (and, later, positional-encoding and embedding plots).

Each helper draws on a Matplotlib ``Axes`` (a new figure when none is given) and returns that ``Axes``, so a
notebook can arrange several in a grid and add titles.

Importing this module also sets up a font that draws Hangul (:func:`use_korean_font`), so that every figure of
the course can carry Korean labels: many of the course's learners take their notes in Korean, and Matplotlib's
own font (DejaVu Sans) has no Hangul, which it draws as empty boxes with a "Glyph ... missing" warning.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from matplotlib import font_manager, rcParams

if TYPE_CHECKING:  # pyplot is imported where a figure is made (see course_lib.figures.diagrams)
    import matplotlib.pyplot as plt

__all__ = ["plot_attention", "use_korean_font", "KOREAN_FONT_PACKAGE", "SYSTEM_KOREAN_FONTS"]

# The pip package whose font file the course uses (pinned in requirements.txt): it ships Nanum Gothic (SIL Open
# Font License 1.1). Only its .ttf is read; the package itself is never imported, because importing it rewrites
# Matplotlib's settings and its code imports distutils, which Python 3.12 removed.
KOREAN_FONT_PACKAGE = "koreanize_matplotlib"
# Fonts with Hangul that an operating system may have (Debian's fonts-nanum and fonts-noto-cjk, Windows, macOS),
# tried in this order when the package is not installed.
SYSTEM_KOREAN_FONTS = ("NanumGothic", "Noto Sans CJK KR", "Noto Sans KR", "Malgun Gothic", "Apple SD Gothic Neo",
                       "AppleGothic", "UnDotum", "Baekmuk Gulim")


def _packaged_korean_font() -> Path | None:
    """The Nanum Gothic file of :data:`KOREAN_FONT_PACKAGE` if it is installed (found without importing it)."""
    spec = importlib.util.find_spec(KOREAN_FONT_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "fonts" / "NanumGothic.ttf"
        if path.is_file():
            return path
    return None


def use_korean_font() -> str | None:
    """Let every later figure draw Hangul: add a Korean font after Matplotlib's own, as a fallback per glyph.

    Latin text keeps Matplotlib's default font; a character that font lacks (a Hangul syllable) is drawn with the
    Korean one (Matplotlib >= 3.6 falls back glyph by glyph along ``rcParams["font.family"]``). The font comes
    from the pinned package :data:`KOREAN_FONT_PACKAGE`, else from the first of :data:`SYSTEM_KOREAN_FONTS` that
    Matplotlib's font manager finds. Calling it again changes nothing.

    Returns:
        The Korean font's family name, or None (after a one-line warning) when no Korean font is found.

    Example:
        >>> use_korean_font()
        'NanumGothic'
    """
    path = _packaged_korean_font()
    if path is not None:
        for weight in sorted(path.parent.glob("NanumGothic*.ttf")):  # regular, bold (for bold titles), ...
            font_manager.fontManager.addfont(str(weight))
        name = font_manager.FontProperties(fname=str(path)).get_name()
    else:
        known = {font.name for font in font_manager.fontManager.ttflist}
        name = next((font for font in SYSTEM_KOREAN_FONTS if font in known), None)
    if name is None:
        warnings.warn("course_lib.figures.plotting: no Korean font found, Hangul labels will be empty boxes "
                      f"(pip install -r requirements.txt installs {KOREAN_FONT_PACKAGE})", stacklevel=2)
        return None
    family = [rcParams["font.family"]] if isinstance(rcParams["font.family"], str) else list(rcParams["font.family"])
    if name not in family:
        rcParams["font.family"] = family + [name]
    return name


use_korean_font()


def plot_attention(
    weights: torch.Tensor,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    ax: plt.Axes | None = None,
    title: str | None = None,
    annotate: bool = False,
) -> plt.Axes:
    """Draw one attention weight matrix as a heatmap: one row per query, one column per key.

    Args:
        weights: ``(seq_q, seq_k)`` attention weights (any tensor or array that squeezes to 2-D, e.g. one
            head's ``weights[b, h]``); values are shown on a fixed 0..1 colour scale so that heatmaps side by
            side are comparable.
        x_labels: the keys' labels (``seq_k`` strings), or None for indices.
        y_labels: the queries' labels (``seq_q`` strings), or None for indices.
        ax: where to draw; a new figure when None.
        title: optional title.
        annotate: write each weight in its cell (for small matrices you follow by hand).

    Returns:
        The ``Axes`` drawn on.

    Example:
        >>> w = torch.softmax(torch.randn(3, 4), dim=-1)
        >>> ax = plot_attention(w, ["a", "b", "c", "d"], ["x", "y", "z"], title="one head")
    """
    w = torch.as_tensor(weights).detach().to("cpu", torch.float32)
    if w.squeeze().dim() == 2:
        w = w.squeeze()
    while w.dim() > 2 and w.shape[0] == 1:  # a single query (or key) row stays a (1, seq_k) matrix
        w = w[0]
    if w.dim() != 2:
        raise ValueError(f"plot_attention: weights must be (seq_q, seq_k) after squeezing, "
                         f"got shape {tuple(torch.as_tensor(weights).shape)}")
    seq_q, seq_k = w.shape
    for name, labels, size in (("x_labels", x_labels, seq_k), ("y_labels", y_labels, seq_q)):
        if labels is not None and len(labels) != size:
            raise ValueError(f"plot_attention: {name} must have {size} labels for weights of shape "
                             f"{tuple(w.shape)}, got {len(labels)}")
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(0.45 * seq_k + 1.5, 0.45 * seq_q + 1.0))
    if w.numel() == 0:  # e.g. an untrained model's empty translation: nothing to draw, say so
        ax.text(0.5, 0.5, f"no weights to show: shape {tuple(w.shape)}", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
        if title:
            ax.set_title(title)
        return ax
    image = ax.imshow(w.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    long_labels = x_labels is not None and max((len(str(label)) for label in x_labels), default=0) > 3
    ax.set_xticks(range(seq_k), [str(s) for s in x_labels] if x_labels is not None else range(seq_k),
                  rotation=90 if long_labels else 0)
    ax.set_yticks(range(seq_q), [str(s) for s in y_labels] if y_labels is not None else range(seq_q))
    if annotate:
        for i in range(seq_q):
            for j in range(seq_k):
                value = float(w[i, j])
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=9,
                        color="black" if value > 0.6 else "white")
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if title:
        ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax
