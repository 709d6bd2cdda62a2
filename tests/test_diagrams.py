"""The paper's Figures 1 and 2, drawn from the course's own models (course_lib.figures.diagrams)."""

from __future__ import annotations

import warnings
from collections import Counter

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from torch import nn  # noqa: E402

from course_lib import GPT, DecoderLayer, EncoderLayer, MultiHeadAttention, Transformer  # noqa: E402
from course_lib.figures.diagrams import plot_attention_diagram, plot_layer, plot_transformer, sublayers  # noqa: E402


def _texts(ax: plt.Axes) -> Counter:
    return Counter(t.get_text() for t in ax.texts)


def _drawn_cleanly(ax: plt.Axes) -> None:
    """Drawing raises nothing and warns nothing (no missing glyph, no font fallback message)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ax.figure.canvas.draw()
    plt.close(ax.figure)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_an_encoder_layer_is_drawn_as_its_flag_says(norm_first: bool) -> None:
    texts = _texts(ax := plot_layer(EncoderLayer(32, 4, 64, norm_first=norm_first)))
    if norm_first:  # LayerNorm before each of the two sub-layers, a plain Add after
        assert texts["LayerNorm"] == 2 and texts["Add"] == 2 and texts["Add & Norm"] == 0
    else:  # the paper: Add & Norm after each sub-layer
        assert texts["Add & Norm"] == 2 and texts["LayerNorm"] == 0 and texts["Add"] == 0
    assert texts["Multi-Head Attention"] == 1 and texts["Feed Forward"] == 1
    assert ("pre-LN" if norm_first else "post-LN") in ax.get_title() and "d_ff=64" in ax.get_title()
    _drawn_cleanly(ax)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_a_decoder_layer_has_three_sub_layers_and_the_encoder_input(norm_first: bool) -> None:
    texts = _texts(ax := plot_layer(DecoderLayer(32, 4, 64, norm_first=norm_first)))
    assert texts["Masked Multi-Head Attention"] == 1 and texts["Multi-Head Attention"] == 1
    assert texts["LayerNorm" if norm_first else "Add & Norm"] == 3
    assert texts["keys, values\nfrom the encoder"] == 1
    _drawn_cleanly(ax)


def test_sublayers_are_read_from_the_module_in_order() -> None:
    layer = DecoderLayer(16, 2, 24)
    found = sublayers(layer)
    assert [label for label, _, _ in found] == ["Masked Multi-Head Attention", "Multi-Head Attention", "Feed Forward"]
    assert [block for _, block, _ in found] == [layer.self_attn, layer.cross_attn, layer.feed_forward]
    assert [norm for _, _, norm in found] == [layer.norm1, layer.norm2, layer.norm3]
    with pytest.raises(TypeError, match="EncoderLayer or a DecoderLayer, got Linear"):
        sublayers(nn.Linear(2, 2))


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_figure_1_shows_the_model_as_built(norm_first: bool) -> None:
    model = Transformer(20, 30, d_model=32, num_heads=4, num_encoder_layers=2, num_decoder_layers=3, d_ff=64,
                        norm_first=norm_first)
    texts = _texts(ax := plot_transformer(model))
    assert texts["2×"] == 1 and texts["3×"] == 1  # the stacks' depths, read from the model
    assert texts["LayerNorm (final)"] == (2 if norm_first else 0)  # pre-LN stacks end with a LayerNorm
    for label in ("Linear", "Softmax", "Output Probabilities", "Input Embedding ×√d_model"):
        assert texts[label] == 1, label
    assert ax.get_title().startswith("Figure 1")
    _drawn_cleanly(ax)


def test_a_gpt_block_of_the_course_draws_as_a_pre_ln_layer() -> None:
    gpt = GPT(vocab_size=50, d_model=32, num_heads=4, num_layers=2, max_len=16)
    texts = _texts(ax := plot_layer(gpt.blocks.layers[0]))
    assert texts["LayerNorm"] == 2 and "pre-LN" in ax.get_title()
    _drawn_cleanly(ax)


def test_figure_2_reads_heads_and_d_k_from_the_module() -> None:
    texts = _texts(ax := plot_attention_diagram(MultiHeadAttention(512, 8)))
    assert "Scale  1/√d_k = 1/√64" in texts and "Scaled Dot-Product Attention\nh = 8 heads, d_k = 64 each" in texts
    assert "Concat  (h·d_k = 512)" in texts and ax.get_title() == "Figure 2"
    _drawn_cleanly(ax)
    with pytest.raises(TypeError, match="must be a MultiHeadAttention, got Linear"):
        plot_attention_diagram(nn.Linear(2, 2))
    with pytest.raises(TypeError, match="must be a course_lib Transformer"):
        plot_transformer(nn.Linear(2, 2))
