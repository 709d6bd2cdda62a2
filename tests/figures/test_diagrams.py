"""The paper's Figures 1 and 2, drawn from the course's own models (course_lib.figures.diagrams)."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from torch import nn  # noqa: E402

from course_lib import GPT, DecoderLayer, EncoderLayer, MultiHeadAttention, Transformer  # noqa: E402
from course_lib.figures.diagrams import (  # noqa: E402
    HIGHLIGHT,
    LESSON_MAP,
    plot_attention_diagram,
    plot_layer,
    plot_lesson_map,
    plot_transformer,
    sublayers,
)


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


def _highlighted(ax: plt.Axes) -> list[str]:
    """The labels plot_lesson_map made bold (the highlighted boxes' labels), in drawing order."""
    return [t.get_text() for t in ax.texts if t.get_fontweight() == "bold"]


def test_every_notebook_has_a_lesson_map() -> None:
    stems = {path.stem for path in (Path(__file__).parents[2] / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert stems <= set(LESSON_MAP), f"notebooks without a lesson map: {sorted(stems - set(LESSON_MAP))}"
    assert {f"{n:02d}" for n in range(16)} == {stem[:2] for stem in LESSON_MAP}  # 00 .. 15, one each


@pytest.mark.parametrize("notebook", sorted(LESSON_MAP))
def test_a_lesson_map_highlights_its_part_and_dims_the_rest(notebook: str) -> None:
    ax = plot_lesson_map(notebook)
    red = [p for p in ax.patches if p.get_edgecolor()[:3] == to_rgb(HIGHLIGHT)]
    faded = [p for p in ax.patches if p.get_alpha() is not None and p.get_alpha() < 1]
    assert red and faded, "a lesson map shows its part in red among faded others"
    assert f"Lesson {notebook[:2]}" in ax.get_title()
    _drawn_cleanly(ax)


@pytest.mark.parametrize(("notebook", "bold"), [
    ("04_masking", ["Masked Multi-Head Attention"]),
    ("03_positional_encoding", ["Input Embedding ×√d_model", "Positional\nEncoding", "Output Embedding ×√d_model",
                                "Positional\nEncoding"]),
    ("12_bert", ["Tokens, 15% masked", "Multi-Head Attention", "MLM Head", "Classifier on [CLS]"]),
    ("15_inference_at_scale", ["Grouped-Query Attention"]),
])
def test_a_lesson_map_highlights_exactly_the_tables_parts(notebook: str, bold: list[str]) -> None:
    assert _highlighted(ax := plot_lesson_map(notebook)) == bold
    plt.close(ax.figure)


def test_lesson_09_highlights_self_attention_not_the_cross_attention() -> None:
    ax = plot_lesson_map("09_why_self_attention")
    red = {p.get_gid() for p in ax.patches if p.get_edgecolor()[:3] == to_rgb(HIGHLIGHT)}
    assert red == {"encoder/Multi-Head Attention", "decoder/Masked Multi-Head Attention"}
    plt.close(ax.figure)


def test_a_lesson_map_draws_on_the_axes_given_and_names_a_wrong_notebook() -> None:
    fig, ax = plt.subplots()
    assert plot_lesson_map("11_language_model", ax=ax) is ax and ax.get_title().startswith("GPT")
    plt.close(fig)
    with pytest.raises(ValueError, match=r"notebook must be a notebook's stem, one of .*got '01_attn'"):
        plot_lesson_map("01_attn")
