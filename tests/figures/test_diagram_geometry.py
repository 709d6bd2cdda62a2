"""The architecture figures' geometry, as the reader sees it: measured with Matplotlib's renderer.

``test_diagrams.py`` reads the figures' labels; this file renders every architecture figure the course draws
(plot_layer post-LN and pre-LN for encoder and decoder layers, plot_transformer, plot_attention_diagram and
every lesson map) and checks, in display coordinates (``get_window_extent``), that

- every label drawn on a box lies inside that box (a label overflowing its box reads as a drawing error);
- every arrow ends on a box, a circle or a label (not on a stack's frame, nor in the void);
- no line or arrow passes through a box (a residual drawn through the LayerNorm it skips says the opposite of
  the caption).

A box is a rounded ``FancyBboxPatch``; a frame is a box enclosing another box whole (a stack's "N x" frame), which lines
may cross and arrows may not end on.
"""

from __future__ import annotations

from collections.abc import Callable

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch  # noqa: E402
from matplotlib.path import Path  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from course_lib import GPT, DecoderLayer, EncoderLayer, MultiHeadAttention, Transformer  # noqa: E402
from course_lib.figures.diagrams import (  # noqa: E402
    LESSON_MAP,
    plot_attention_diagram,
    plot_layer,
    plot_lesson_map,
    plot_transformer,
)

TOLERANCE = 3.0  # pixels at 100 dpi: an arrow's end this close to an outline is on it

FIGURES: dict[str, Callable[[], plt.Axes]] = {
    "encoder-post-LN": lambda: plot_layer(EncoderLayer(32, 4, 64)),
    "encoder-pre-LN": lambda: plot_layer(EncoderLayer(32, 4, 64, norm_first=True)),
    "decoder-post-LN": lambda: plot_layer(DecoderLayer(32, 4, 64)),
    "decoder-pre-LN": lambda: plot_layer(DecoderLayer(32, 4, 64, norm_first=True)),
    "gpt-block": lambda: plot_layer(GPT(vocab_size=50, d_model=32, num_heads=4, num_layers=2).blocks.layers[0]),
    **{f"transformer-{name}": (lambda nf=nf: plot_transformer(Transformer(
        20, 20, d_model=32, num_heads=4, num_encoder_layers=6, num_decoder_layers=6, d_ff=64, norm_first=nf)))
       for name, nf in (("post-LN", False), ("pre-LN", True))},
    "attention-h8": lambda: plot_attention_diagram(MultiHeadAttention(512, 8)),
    "attention-h2": lambda: plot_attention_diagram(MultiHeadAttention(64, 2)),
    **{f"map-{stem}": (lambda stem=stem: plot_lesson_map(stem)) for stem in LESSON_MAP},
}


def _encloses(outer: Bbox, inner: Bbox) -> bool:
    return outer.x0 <= inner.x0 and inner.x1 <= outer.x1 and outer.y0 <= inner.y0 and inner.y1 <= outer.y1


class Drawing:
    """A rendered figure's boxes, frames, circles, labels, lines and arrows in display coordinates."""

    def __init__(self, ax: plt.Axes) -> None:
        ax.figure.set_dpi(100)
        ax.figure.canvas.draw()
        renderer = ax.figure.canvas.get_renderer()
        patches = sorted(ax.patches, key=lambda p: p.get_zorder())  # in the order they are drawn (a stable sort)
        rounded = [(p, p.get_window_extent(renderer)) for p in patches if isinstance(p, FancyBboxPatch)]
        is_frame = [any(_encloses(extent, other) for j, (_, other) in enumerate(rounded) if j != i)
                    for i, (_, extent) in enumerate(rounded)]
        self.boxes = [extent for (_, extent), frame in zip(rounded, is_frame, strict=True) if not frame]
        self.frames = [extent for (_, extent), frame in zip(rounded, is_frame, strict=True) if frame]
        self.circles = [p.get_window_extent(renderer) for p in ax.patches if isinstance(p, Circle)]
        self.shapes = [p.get_window_extent(renderer) for p in patches if isinstance(p, Circle | FancyBboxPatch)]
        self.texts = [(t.get_text(), t.get_window_extent(renderer), ax.transData.transform(t.get_position()))
                      for t in ax.texts if t.get_text().strip()]
        self.arrows = [(ax.transData.transform(a._posA_posB[0]), ax.transData.transform(a._posA_posB[1]),
                        a.get_transform().transform_path(a.get_path()))
                       for a in ax.patches if isinstance(a, FancyArrowPatch) and a._posA_posB is not None]
        self.lines = [line.get_transform().transform_path(line.get_path()) for line in ax.lines]
        plt.close(ax.figure)

    def box_under(self, point) -> Bbox | None:
        """The topmost box or circle under ``point`` (a label's anchor: the box it is written on), or None."""
        under = [b for b in self.shapes if b.contains(*point)]
        return under[-1] if under else None


def _on_outline(point, extent: Bbox) -> bool:
    inside_grown = extent.expanded(1, 1).padded(TOLERANCE).contains(*point)
    inner = Bbox.from_extents(extent.x0 + TOLERANCE, extent.y0 + TOLERANCE, extent.x1 - TOLERANCE,
                              extent.y1 - TOLERANCE)
    return inside_grown and not inner.contains(*point)


def _passes_through(path: Path, extent: Bbox, margin: float = 2.0) -> bool:
    """True when the drawn ``path`` (display coordinates) enters ``extent`` deeper than ``margin`` pixels.

    Each polygon of the path is walked in steps of half a pixel (curves are flattened first).
    """
    inner = Bbox.from_extents(extent.x0 + margin, extent.y0 + margin, extent.x1 - margin, extent.y1 - margin)
    for polygon in path.to_polygons(closed_only=False):
        for start, end in zip(polygon[:-1], polygon[1:], strict=True):
            steps = max(2, int(np.hypot(*(end - start)) * 2))
            points = start + np.linspace(0, 1, steps)[:, None] * (end - start)
            x, y = points[:, 0], points[:, 1]
            if ((inner.x0 < x) & (x < inner.x1) & (inner.y0 < y) & (y < inner.y1)).any():
                return True
    return False


@pytest.fixture(scope="module", params=sorted(FIGURES))
def drawing(request: pytest.FixtureRequest) -> Drawing:
    return Drawing(FIGURES[request.param]())


def test_every_label_on_a_box_lies_inside_it(drawing: Drawing) -> None:
    overflowing = []
    for text, extent, anchor in drawing.texts:
        box = drawing.box_under(anchor)
        if box is not None and not _encloses(box, extent):
            overflowing.append(f"{text!r}: {extent.width:.0f}x{extent.height:.0f} px in a box "
                               f"{box.width:.0f}x{box.height:.0f} px")
    assert not overflowing, f"labels overflowing their boxes: {overflowing}"


def test_every_arrow_ends_on_a_box_a_circle_or_a_label(drawing: Drawing) -> None:
    targets = drawing.boxes + drawing.circles + [extent for _, extent, _ in drawing.texts]
    stray = [f"arrow to ({end[0]:.0f}, {end[1]:.0f}) px" + (" (on a frame)" if any(
        _on_outline(end, f) for f in drawing.frames) else "")
        for _, end, _ in drawing.arrows if not any(_on_outline(end, t) for t in targets)]
    assert not stray, f"arrows that end on no box: {stray}"


def test_no_line_or_arrow_passes_through_a_box(drawing: Drawing) -> None:
    paths = drawing.lines + [path for _, _, path in drawing.arrows]
    crossing = [f"a {'line' if i < len(drawing.lines) else 'arrow'} through the box at "
                f"({box.x0:.0f}, {box.y0:.0f})-({box.x1:.0f}, {box.y1:.0f}) px"
                for i, path in enumerate(paths) for box in drawing.boxes
                if _passes_through(path, box)]
    assert not crossing, f"lines drawn through boxes: {crossing}"
