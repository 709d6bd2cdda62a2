"""The paper's architecture figures, drawn from the course's own models: Figure 1 and Figure 2 of the paper.

Each function reads a model's structure (its sub-modules, their sizes, its ``norm_first`` flag) and draws boxes
and arrows with Matplotlib patches, so the picture always shows the model the notebook built:

- :func:`plot_layer`: one ``EncoderLayer`` or ``DecoderLayer``, post-LN ("Add & Norm" after each sub-layer, as
  the paper draws it) or pre-LN (a LayerNorm before each sub-layer, an "Add" after it), as its ``norm_first``
  says;
- :func:`plot_transformer`: the paper's Figure 1, the encoder-decoder ``Transformer`` with its ``N x`` stacks;
- :func:`plot_attention_diagram`: the paper's Figure 2, scaled dot-product attention and a
  ``MultiHeadAttention`` with its ``h`` heads;
- :func:`plot_lesson_map`: where a lesson sits, the opening figure of every notebook: Figure 1 (or the lesson's
  model: ViT, GPT, BERT, the Llama block, drawn with the same boxes) with the lesson's part outlined in red.

Every function returns the ``Axes`` it drew on (a new figure when none is given); each drawn box is a patch whose
label is in ``ax.texts``, which the tests read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import nn

from course_lib.figures import plotting  # noqa: F401 (the course's figures: a font with Hangul is set up)
from course_lib.models.attention import MultiHeadAttention
from course_lib.models.layers import DecoderLayer, EncoderLayer, FeedForward
from course_lib.models.transformer import Transformer

if TYPE_CHECKING:  # pyplot itself is imported where a figure is made: a process that draws nothing (the grader's
    import matplotlib.pyplot as plt  # sandbox runs every notebook's imports) does not pay its 0.26 s

__all__ = ["plot_layer", "plot_transformer", "plot_attention_diagram", "plot_lesson_map", "sublayers", "LESSON_MAP"]

# The paper's colours: attention orange, Add & Norm yellow, feed-forward blue, embeddings pink, linear purple.
COLOURS = {"attention": "#fcd9a8", "norm": "#f2f0b5", "feed_forward": "#c6e3f4", "embedding": "#f6c9cf",
           "linear": "#dcd3ee", "softmax": "#c8e6c9", "matmul": "#e8d4f0", "scale": "#f2f0b5", "mask": "#eeeeee",
           "io": "white"}
BOX_W, BOX_H, GAP = 4.8, 0.6, 0.45  # BOX_W holds "Masked Multi-Head Attention" in bold (a lesson map's)
HIGHLIGHT = "#d62728"  # the lesson's part in plot_lesson_map


def _new_axes(ax: plt.Axes | None, size: tuple[float, float]) -> plt.Axes:
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=size)
    ax.set_axis_off()
    ax.set_aspect("equal")
    return ax


def _box(ax: plt.Axes, x: float, y: float, text: str, kind: str, w: float = BOX_W, h: float = BOX_H,
         scope: str = "") -> tuple:
    """A rounded box centred on (x, y); returns (x, y, w, h) for the arrows.

    The box and its label share the gid ``scope + text`` ("encoder/Feed Forward"): :func:`plot_lesson_map`
    highlights boxes by it and the tests pair each label with its box by it.
    """
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.12",
                                facecolor=COLOURS[kind], edgecolor="black", linewidth=1.0, gid=scope + text))
    ax.text(x, y, text, ha="center", va="center", fontsize=8.5, gid=scope + text)
    return x, y, w, h


def _arrow(ax: plt.Axes, start: tuple[float, float], end: tuple[float, float], style: str = "-|>",
           connection: str = "arc3") -> None:
    from matplotlib.patches import FancyArrowPatch

    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=10, linewidth=1.0,
                                 connectionstyle=connection, color="black"))


def _up(ax: plt.Axes, lower: tuple, upper: tuple) -> None:
    """An arrow from the top of box ``lower`` to the bottom of box ``upper``."""
    _arrow(ax, (lower[0], lower[1] + lower[3] / 2), (upper[0], upper[1] - upper[3] / 2))


def _residual(ax: plt.Axes, x_from: float, y_from: float, target: tuple) -> None:
    """The residual connection: from the stream at (x_from, y_from) around the sub-layer into ``target``'s side."""
    side = target[0] - BOX_W / 2 - 0.35  # left of the widest box it skips, whatever the width of the Add
    ax.plot([x_from, side, side], [y_from, y_from, target[1]], color="black", linewidth=1.0)
    _arrow(ax, (side, target[1]), (target[0] - target[2] / 2, target[1]))


def sublayers(layer: nn.Module) -> list[tuple[str, nn.Module, nn.LayerNorm]]:
    """The sub-layers of an encoder or decoder layer in the order they run, each with its LayerNorm and a label.

    Read from the layer's children (attention and feed-forward modules, paired in order with its LayerNorms), so
    a layer built with other sizes or flags is drawn as it is. In a layer with a cross-attention (a decoder
    layer) the first attention is the masked self-attention.

    Example:
        >>> [label for label, _, _ in sublayers(EncoderLayer(32, 4, 64))]
        ['Multi-Head Attention', 'Feed Forward']
    """
    if not isinstance(layer, (EncoderLayer, DecoderLayer)):
        raise TypeError(f"sublayers: layer must be an EncoderLayer or a DecoderLayer, got {type(layer).__name__}")
    blocks = [m for m in layer.children() if isinstance(m, (MultiHeadAttention, FeedForward))]
    norms = [m for m in layer.children() if isinstance(m, nn.LayerNorm)]
    decoder = isinstance(layer, DecoderLayer)
    labels = []
    for i, block in enumerate(blocks):
        if isinstance(block, FeedForward):
            labels.append("Feed Forward")
        elif decoder and i == 0:
            labels.append("Masked Multi-Head Attention")
        else:
            labels.append("Multi-Head Attention")
    return list(zip(labels, blocks, norms, strict=True))


def _draw_sublayers(ax: plt.Axes, steps: list[tuple[str, str]], norm_first: bool, x: float, y: float,
                    scope: str = "", norm: str = "LayerNorm") -> tuple[float, dict[str, tuple]]:
    """Draw sub-layers ``(label, colour kind)`` upwards from the stream at (x, y), each with its residual.

    Post-LN (the paper): sub-layer -> "Add & Norm"; pre-LN: ``norm`` -> sub-layer -> "Add", the residual skipping
    both. Returns the stream's top y and the sub-layers' boxes by label.
    """
    boxes: dict[str, tuple] = {}
    for label, kind in steps:
        stream_y = y
        if norm_first:  # pre-LN: norm -> sub-layer -> Add (the residual skips the norm)
            norm_box = _box(ax, x, y + GAP + BOX_H / 2, norm, "norm", scope=scope)
            _arrow(ax, (x, y), (x, norm_box[1] - BOX_H / 2))
            block = _box(ax, x, norm_box[1] + BOX_H + GAP, label, kind, scope=scope)
            _up(ax, norm_box, block)
            add = _box(ax, x, block[1] + BOX_H + GAP, "Add", "norm", w=1.2, scope=scope)
        else:  # post-LN, the paper: sub-layer -> Add & Norm
            block = _box(ax, x, y + GAP + BOX_H / 2, label, kind, scope=scope)
            _arrow(ax, (x, y), (x, block[1] - BOX_H / 2))
            add = _box(ax, x, block[1] + BOX_H + GAP, "Add & Norm", "norm", scope=scope)
        _up(ax, block, add)
        _residual(ax, x, stream_y + GAP / 2, add)
        boxes[label] = block
        y = add[1] + BOX_H / 2
    return y, boxes


def _layer_steps(layer: nn.Module) -> list[tuple[str, str]]:
    return [(label, "feed_forward" if label == "Feed Forward" else "attention") for label, _, _ in sublayers(layer)]


def _draw_layer(ax: plt.Axes, layer: nn.Module, x: float, y: float, scope: str = "") -> tuple[float, dict[str, tuple]]:
    """Draw ``layer`` upwards from the stream at (x, y); return the stream's top y and the boxes by label."""
    return _draw_sublayers(ax, _layer_steps(layer), layer.norm_first, x, y, scope)


def _column_height(num_sublayers: int, norm_first: bool) -> float:
    return num_sublayers * (3 if norm_first else 2) * (BOX_H + GAP)


def _layer_height(layer: nn.Module) -> float:
    return _column_height(len(sublayers(layer)), layer.norm_first)


def plot_layer(layer: nn.Module, ax: plt.Axes | None = None, title: str | None = None) -> plt.Axes:
    """Draw one encoder or decoder layer as the paper's Figure 1 draws it, post-LN or pre-LN as the layer is built.

    Args:
        layer: an ``EncoderLayer`` or ``DecoderLayer``; its ``norm_first`` decides the layout (post-LN: "Add &
            Norm" after each sub-layer; pre-LN: "LayerNorm" before, "Add" after).
        ax: where to draw; a new figure when None.
        title: the title (default: the layer's kind, its LayerNorm placement and its sizes).

    Example:
        >>> ax = plot_layer(EncoderLayer(32, 4, 64, norm_first=True))
        >>> sum(t.get_text() == "LayerNorm" for t in ax.texts)
        2
    """
    height = _layer_height(layer)
    ax = _new_axes(ax, (4.6, 1.0 + height * 0.62))
    _, boxes = _draw_layer(ax, layer, 0.0, 0.0)
    ax.text(0, -0.25, "input", ha="center", va="top", fontsize=8.5)
    _arrow(ax, (0, height), (0, height + 0.4))
    ax.text(0, height + 0.45, "output", ha="center", va="bottom", fontsize=8.5)
    if "Multi-Head Attention" in boxes and isinstance(layer, DecoderLayer):
        cross = boxes["Multi-Head Attention"]
        _arrow(ax, (cross[0] + BOX_W / 2 + 1.0, cross[1]), (cross[0] + BOX_W / 2, cross[1]))
        ax.text(cross[0] + BOX_W / 2 + 1.05, cross[1], "keys, values\nfrom the encoder", va="center", fontsize=7.5)
    attention = next(block for _, block, _ in sublayers(layer) if isinstance(block, MultiHeadAttention))
    kind = "Decoder layer" if isinstance(layer, DecoderLayer) else "Encoder layer"
    ax.set_title(title or f"{kind}, {'pre-LN' if layer.norm_first else 'post-LN (the paper)'}\n"
                          f"d_model={attention.d_model}, h={attention.num_heads}, "
                          f"d_ff={layer.feed_forward.linear1.out_features}", fontsize=9)
    ax.set_xlim(-BOX_W / 2 - 0.7, BOX_W / 2 + 2.6)
    ax.set_ylim(-0.6, height + 0.9)
    return ax


def _stack(ax: plt.Axes, steps: list[tuple[str, str]], norm_first: bool, count: int | str, final_norm: str | None,
           x: float, y: float, side: float, scope: str = "", norm: str = "LayerNorm") -> tuple[float, dict[str, tuple]]:
    """One stack: a layer of ``steps`` inside a frame marked "``count`` x", then the final norm (``final_norm``)."""
    from matplotlib.patches import FancyBboxPatch

    height = _column_height(len(steps), norm_first)
    ax.add_patch(FancyBboxPatch((x - BOX_W / 2 - 0.55, y + 0.1), BOX_W + 1.1, height - 0.05,
                                boxstyle="round,pad=0.05,rounding_size=0.2", facecolor="#f4f4f4",
                                edgecolor="black", linewidth=1.0, zorder=0, gid=scope + "frame"))
    top, boxes = _draw_sublayers(ax, steps, norm_first, x, y, scope, norm)
    ax.text(x + side * (BOX_W / 2 + 0.7), y + height / 2, f"{count}×", ha="right" if side < 0 else "left",
            va="center", fontsize=10)
    if final_norm is not None:
        norm_box = _box(ax, x, top + GAP + BOX_H / 2, final_norm, "norm", scope=scope)
        _arrow(ax, (x, top), (x, norm_box[1] - BOX_H / 2))
        top = norm_box[1] + BOX_H / 2
    return top, boxes


def _model_stack(ax: plt.Axes, stack: nn.Module, x: float, y: float, side: float,
                 scope: str) -> tuple[float, dict[str, tuple]]:
    """A course ``Encoder`` or ``Decoder``, read from the module: its first layer, its depth, its final norm."""
    return _stack(ax, _layer_steps(stack.layers[0]), stack.layers[0].norm_first, len(stack.layers),
                  "LayerNorm (final)" if stack.norm is not None else None, x, y, side, scope)


def _embedding_and_positions(ax: plt.Axes, x: float, y: float, inputs: str, embeddings: list[tuple[str, str]],
                             positions: str | None, side: float, scope: str = "") -> float:
    """``inputs`` -> the ``embeddings`` boxes -> (+) ``positions`` (None: no sum); returns the stream's top y."""
    ax.text(x, y, inputs, ha="center", va="top", fontsize=8.5, gid=scope + inputs)
    top = y
    for label, kind in embeddings:
        box = _box(ax, x, top + 0.2 + BOX_H / 2, label, kind, w=BOX_W + 0.6, scope=scope)  # "... ×√d_model"
        _arrow(ax, (x, top), (x, box[1] - BOX_H / 2))
        top = box[1] + BOX_H / 2
    if positions is None:
        return top
    plus_y = top + 0.45
    gid = scope + positions.replace("\n", " ")
    from matplotlib.patches import Circle

    ax.add_patch(Circle((x, plus_y), 0.16, facecolor="white", edgecolor="black", gid=gid))
    ax.text(x, plus_y, "+", ha="center", va="center", fontsize=9)
    _arrow(ax, (x, top), (x, plus_y - 0.16))
    ax.text(x + side * 0.45, plus_y, positions, ha="right" if side < 0 else "left", va="center", fontsize=7.5,
            gid=gid)
    return plus_y + 0.16


def plot_transformer(model: Transformer, ax: plt.Axes | None = None, title: str | None = None) -> plt.Axes:
    """The paper's Figure 1, drawn from a course ``Transformer``: embeddings, positions, the two stacks, the output.

    The stacks show one layer each (as the paper does) with the number of layers the model has, in the layout its
    ``norm_first`` flag gives (pre-LN models also get the stacks' final LayerNorm); the encoder's output feeds the
    keys and values of every decoder layer's cross-attention.

    Example:
        >>> model = Transformer(20, 20, d_model=32, num_heads=4, num_encoder_layers=2, num_decoder_layers=3,
        ...                     d_ff=64)
        >>> ax = plot_transformer(model)
        >>> [t.get_text() for t in ax.texts if t.get_text().endswith("×")]
        ['2×', '3×']
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"plot_transformer: model must be a course_lib Transformer, got {type(model).__name__}")
    enc_x, dec_x = 0.0, BOX_W + 2.0
    ax = _new_axes(ax, (8.5, 9.5))
    enc_base = _embedding_and_positions(ax, enc_x, 0.0, "Inputs", [("Input Embedding ×√d_model", "embedding")],
                                        "Positional\nEncoding", -1.0)
    dec_base = _embedding_and_positions(ax, dec_x, 0.0, "Outputs (shifted right)",
                                        [("Output Embedding ×√d_model", "embedding")], "Positional\nEncoding", 1.0)
    enc_top, _ = _model_stack(ax, model.encoder, enc_x, enc_base, -1.0, "encoder/")
    dec_top, dec_boxes = _model_stack(ax, model.decoder, dec_x, dec_base, 1.0, "decoder/")
    cross = dec_boxes["Multi-Head Attention"]
    ax.plot([enc_x, enc_x, (enc_x + dec_x) / 2, (enc_x + dec_x) / 2], [enc_top, enc_top + 0.3, enc_top + 0.3,
            cross[1]], color="black", linewidth=1.0)
    _arrow(ax, ((enc_x + dec_x) / 2, cross[1]), (cross[0] - cross[2] / 2, cross[1]))  # into the cross-attention
    linear = _box(ax, dec_x, dec_top + GAP + BOX_H / 2, "Linear", "linear")
    _arrow(ax, (dec_x, dec_top), (dec_x, linear[1] - BOX_H / 2))
    softmax = _box(ax, dec_x, linear[1] + BOX_H + GAP, "Softmax", "softmax")
    _up(ax, linear, softmax)
    _arrow(ax, (dec_x, softmax[1] + BOX_H / 2), (dec_x, softmax[1] + BOX_H / 2 + 0.4))
    ax.text(dec_x, softmax[1] + BOX_H / 2 + 0.45, "Output Probabilities", ha="center", va="bottom", fontsize=8.5,
            gid="Output Probabilities")
    attention = model.encoder.layers[0].self_attn
    ax.set_title(title or f"Figure 1: the Transformer, {'pre-LN' if model.encoder.norm_first else 'post-LN'}\n"
                          f"d_model={model.d_model}, h={attention.num_heads}, "
                          f"d_ff={model.encoder.layers[0].feed_forward.linear1.out_features}", fontsize=9)
    ax.set_xlim(enc_x - BOX_W / 2 - 1.7, dec_x + BOX_W / 2 + 1.7)
    ax.set_ylim(-0.5, softmax[1] + 1.2)
    return ax


def _column(ax: plt.Axes, x: float, y: float, steps: list[tuple[str, str]]) -> list[tuple]:
    """Boxes stacked upwards from y with arrows between them."""
    boxes = [_box(ax, x, y + i * (BOX_H + GAP), text, kind, w=2.4) for i, (text, kind) in enumerate(steps)]
    for lower, upper in zip(boxes, boxes[1:], strict=False):
        _up(ax, lower, upper)
    return boxes


def plot_attention_diagram(attention: MultiHeadAttention, ax: plt.Axes | None = None) -> plt.Axes:
    """The paper's Figure 2, drawn from a ``MultiHeadAttention``: scaled dot-product attention (left) and the
    multi-head attention around it (right), with the module's d_model, h and d_k = d_model / h.

    Example:
        >>> ax = plot_attention_diagram(MultiHeadAttention(64, 8))
        >>> any("h = 8" in t.get_text() for t in ax.texts)
        True
    """
    if not isinstance(attention, MultiHeadAttention):
        raise TypeError(f"plot_attention_diagram: attention must be a MultiHeadAttention, "
                        f"got {type(attention).__name__}")
    ax = _new_axes(ax, (9.0, 5.0))
    d_k, h = attention.d_k, attention.num_heads
    left = _column(ax, 0.0, 0.9, [("MatMul  Q Kᵀ", "matmul"), (f"Scale  1/√d_k = 1/√{d_k}", "scale"),
                                  ("Mask (optional)", "mask"), ("SoftMax (over the keys)", "softmax"),
                                  ("MatMul  with V", "matmul")])
    for offset, name in ((-0.7, "Q"), (0.7, "K")):
        ax.text(offset, 0.1, name, ha="center", va="center", fontsize=9)
        _arrow(ax, (offset, 0.25), (offset * 0.6, left[0][1] - BOX_H / 2))
    ax.text(1.7, 0.1, "V", ha="center", va="center", fontsize=9)
    ax.plot([1.7, 1.7], [0.25, left[4][1]], color="black", linewidth=1.0)
    _arrow(ax, (1.7, left[4][1]), (1.2, left[4][1]))
    ax.text(0.0, left[4][1] + 0.75, "Scaled Dot-Product Attention", ha="center", fontsize=9, weight="bold")

    x = 5.8
    linears = [_box(ax, x + dx, 1.2, f"Linear $W^{name}$", "linear", w=1.35) for dx, name in
               ((-1.5, "Q"), (0.0, "K"), (1.5, "V"))]
    for dx, name, box in zip((-1.5, 0.0, 1.5), "QKV", linears, strict=True):
        ax.text(x + dx, 0.3, name, ha="center", va="center", fontsize=9)
        _arrow(ax, (x + dx, 0.45), (x + dx, box[1] - BOX_H / 2))
    shadows = min(h, 4) - 1
    for shadow in range(shadows, 0, -1):  # the h heads, as the paper's stacked boxes
        _box(ax, x + 0.1 * shadow, 2.45 + 0.1 * shadow, "", "attention", w=3.8, h=0.8)
    sdpa = _box(ax, x, 2.45, f"Scaled Dot-Product Attention\nh = {h} heads, d_k = {d_k} each", "attention", w=3.8,
                h=0.8)
    for box in linears:
        _arrow(ax, (box[0], box[1] + BOX_H / 2), (box[0], sdpa[1] - 0.4))
    concat = _box(ax, x, 3.75, f"Concat  (h·d_k = {h * d_k})", "norm", w=2.6)
    _arrow(ax, (x, sdpa[1] + 0.4 + 0.1 * shadows), (x, concat[1] - BOX_H / 2))  # from the top of the stack
    out = _box(ax, x, 4.8, f"Linear $W^O$  (d_model = {attention.d_model})", "linear", w=3.2)
    _up(ax, concat, out)
    ax.text(x, 5.55, "Multi-Head Attention", ha="center", fontsize=9, weight="bold")
    ax.set_title("Figure 2", fontsize=9)
    ax.set_xlim(-1.8, 8.6)
    ax.set_ylim(-0.2, 5.9)
    return ax


@dataclass(frozen=True)
class _ModelFigure:
    """A one-stack model drawn bottom-up: inputs, embeddings, a framed pre-norm layer, the final norm, the heads.

    ``heads`` holds one column of boxes per output head (bottom-up) with its output's text; ``side`` is a box
    drawn right of the sub-layer ``side[1]`` with an arrow into it (RoPE into the attention).
    """

    title: str
    inputs: str
    embeddings: tuple[tuple[str, str], ...]
    positions: str | None
    steps: tuple[tuple[str, str], ...]
    norm: str
    heads: tuple[tuple[tuple[tuple[str, str], ...], str], ...]
    side: tuple[str, str] | None = None


_MASKED_ATTENTION, _ATTENTION = ("Masked Multi-Head Attention", "attention"), ("Multi-Head Attention", "attention")
_FEED_FORWARD = ("Feed Forward", "feed_forward")
_LM_HEAD = (((("Linear (LM head)", "linear"), ("Softmax", "softmax")), "Next-token Probabilities"),)
_MODEL_FIGURES = {
    "vit": _ModelFigure("The Vision Transformer (ViT)", "Image, cut into p×p patches",
                        (("Patch Embedding", "embedding"), ("[CLS] + Positions", "embedding")), None,
                        (_ATTENTION, _FEED_FORWARD), "LayerNorm",
                        (((("Linear Head on [CLS]", "linear"),), "Class"),)),
    "gpt": _ModelFigure("GPT: the decoder-only model", "Tokens so far", (("Token Embedding", "embedding"),),
                        "Learned\nPositions", (_MASKED_ATTENTION, _FEED_FORWARD), "LayerNorm", _LM_HEAD),
    "bert": _ModelFigure("BERT: the encoder-only model", "Tokens, 15% masked", (("Token Embedding", "embedding"),),
                         "Learned\nPositions", (_ATTENTION, _FEED_FORWARD), "LayerNorm",
                         (((("MLM Head", "linear"),), "the masked tokens"),
                          ((("Classifier on [CLS]", "linear"),), "a label"))),
    "llama": _ModelFigure("The Llama block (today's models)", "Tokens so far", (("Token Embedding", "embedding"),),
                          None, (("Grouped-Query Attention", "attention"), ("SwiGLU Feed Forward", "feed_forward")),
                          "RMSNorm", _LM_HEAD, side=("RoPE on q, k", "Grouped-Query Attention")),
}


def _plot_model(spec: _ModelFigure, ax: plt.Axes | None) -> plt.Axes:
    """Draw a ``_ModelFigure``: the same boxes, residuals and frame as :func:`plot_transformer`'s stacks."""
    ax = _new_axes(ax, (6.4, 9.5))
    base = _embedding_and_positions(ax, 0.0, 0.0, spec.inputs, list(spec.embeddings), spec.positions, -1.0)
    top, boxes = _stack(ax, list(spec.steps), True, "N", f"{spec.norm} (final)", 0.0, base, -1.0, norm=spec.norm)
    if spec.side is not None:
        target = boxes[spec.side[1]]
        side = _box(ax, BOX_W / 2 + 1.5, target[1], spec.side[0], "embedding", w=2.0)
        _arrow(ax, (side[0] - side[2] / 2, side[1]), (target[0] + target[2] / 2, target[1]))
    offsets = [0.0] if len(spec.heads) == 1 else [-2.0, 2.0]
    width = BOX_W if len(spec.heads) == 1 else 3.6
    for dx, (column, output) in zip(offsets, spec.heads, strict=True):
        y, below = top + GAP + BOX_H / 2, (0.0, top)
        for label, kind in column:
            box = _box(ax, dx, y, label, kind, w=width)
            _arrow(ax, below, (dx, box[1] - BOX_H / 2))
            below, y = (dx, box[1] + BOX_H / 2), y + BOX_H + GAP
        _arrow(ax, below, (dx, below[1] + 0.4))
        ax.text(dx, below[1] + 0.45, output, ha="center", va="bottom", fontsize=8.5)
    ax.set_title(spec.title, fontsize=9)
    ax.set_xlim(-4.0, BOX_W / 2 + 2.8)
    ax.set_ylim(-0.5, y + 0.6)
    return ax


# Where each lesson sits: the figure it opens with, the parts it highlights (gid patterns: "encoder/frame", a box's
# label; "*" is a wildcard, nothing else is: "[CLS]" is literal) and the sentence that reads the figure.
LESSON_MAP: dict[str, tuple[str, tuple[str, ...], str]] = {
    "00_welcome": ("transformer", ("Softmax",), "the model this course builds; the warm-up writes its softmax"),
    "01_attention": ("transformer", ("*Multi-Head Attention",), "attention, in every orange box"),
    "02_multi_head_attention": ("transformer", ("*Multi-Head Attention",), "several heads in every orange box"),
    "03_positional_encoding": ("transformer", ("*Positional Encoding", "*Embedding ×√d_model"),
                               "the positions added to the embeddings"),
    "04_masking": ("transformer", ("*Masked Multi-Head Attention",), "the masks, here the decoder's look-ahead"),
    "05_encoder": ("transformer", ("encoder/*",), "the encoder stack"),
    "06_decoder": ("transformer", ("decoder/*", "Linear", "Softmax"), "the decoder stack and the output"),
    "07_training_and_decoding": ("transformer", ("Linear", "Softmax", "Output Probabilities"),
                                 "the output: the loss in training, the search in decoding"),
    "08_vision_transformer": ("vit", ("Patch Embedding", "[CLS] + Positions", "Linear Head on [CLS]"),
                              "what an image needs: patches, [CLS] and a class head"),
    "09_why_self_attention": ("transformer", ("encoder/Multi-Head Attention", "decoder/Masked Multi-Head Attention"),
                              "self-attention, measured against recurrence and convolution"),
    "10_tokeniser_and_training_loop": ("gpt", ("Tokens so far", "Token Embedding", "Softmax"),
                                       "the tokens in, the loss on the softmax out; the optimiser updates every box"),
    "11_language_model": ("gpt", ("Masked Multi-Head Attention", "Linear (LM head)", "Softmax"),
                          "the causal attention and the next-token output"),
    "12_bert": ("bert", ("Tokens, 15% masked", "Multi-Head Attention", "MLM Head", "Classifier on [CLS]"),
                "the masked input, attention both ways, the two heads"),
    "13_paper_experiments": ("transformer", ("encoder/frame", "decoder/frame", "*Positional Encoding"),
                             "what Table 3 varies: the stacks' sizes, heads, dropout, the positions"),
    "14_todays_models": ("llama", ("RoPE on q, k", "RMSNorm*", "SwiGLU Feed Forward"),
                         "RoPE, RMSNorm and SwiGLU"),
    "15_inference_at_scale": ("llama", ("Grouped-Query Attention",),
                              "the attention at inference: shared keys and values, the cache, tiles"),
}


def _highlight(ax: plt.Axes, patterns: tuple[str, ...]) -> int:
    """Outline in red the boxes (and bold the labels) whose gid matches a pattern; fade the other boxes.

    Returns how many artists were highlighted (zero means the table names a part the figure does not draw).
    """
    from fnmatch import fnmatchcase

    found = 0
    for artist in [*ax.patches, *ax.texts]:
        gid = artist.get_gid()
        if gid is None:
            continue
        names = (gid, gid.rsplit("/", 1)[-1])  # "encoder/Feed Forward" matches "encoder/*" and "Feed Forward"
        if any(fnmatchcase(n, p) if "*" in p else n == p for n in names for p in patterns):
            found += 1
            if hasattr(artist, "set_edgecolor"):
                artist.set_edgecolor(HIGHLIGHT)
                artist.set_linewidth(2.6)
            else:
                artist.set_fontweight("bold")
        elif hasattr(artist, "set_alpha") and hasattr(artist, "set_edgecolor"):
            artist.set_alpha(0.35)
    return found


def plot_lesson_map(notebook: str, ax: plt.Axes | None = None) -> plt.Axes:
    """Where a lesson sits: the paper's Figure 1 (or the lesson's model) with the lesson's part outlined in red.

    Args:
        notebook: the notebook's stem, "00_welcome" to "15_inference_at_scale" (the keys of ``LESSON_MAP``).
        ax: where to draw; a new figure when None.

    Example:
        >>> ax = plot_lesson_map("04_masking")
        >>> [t.get_text() for t in ax.texts if t.get_fontweight() == "bold"]
        ['Masked Multi-Head Attention']
    """
    if notebook not in LESSON_MAP:
        raise ValueError(f"plot_lesson_map: notebook must be a notebook's stem, one of {sorted(LESSON_MAP)}, "
                         f"got {notebook!r}")
    figure, parts, reading = LESSON_MAP[notebook]
    title = f"Lesson {notebook[:2]}: {reading} (in red)"
    if figure == "transformer":
        model = Transformer(8, 8, d_model=16, num_heads=2, num_encoder_layers=6, num_decoder_layers=6, d_ff=32)
        ax = plot_transformer(model, ax, title=f"The Transformer (the paper's Figure 1)\n{title}")
    else:
        ax = _plot_model(_MODEL_FIGURES[figure], ax)
        ax.set_title(f"{ax.get_title()}\n{title}", fontsize=9)
    if _highlight(ax, parts) == 0:
        raise AssertionError(f"plot_lesson_map: no part of the {figure} figure matches {parts}")
    return ax
