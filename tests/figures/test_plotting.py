"""plot_attention on the shapes an untrained model's translation gives: one query row, or none at all."""

from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course_lib.figures.plotting import plot_attention  # noqa: E402


def test_an_empty_matrix_is_a_sentence_not_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ax = plot_attention(torch.zeros(0, 5), x_labels=list("abcde"), y_labels=[], title="empty")
    assert "no weights to show" in ax.texts[0].get_text() and ax.get_title() == "empty"
    plt.close("all")


def test_one_query_row_stays_a_row() -> None:
    ax = plot_attention(torch.softmax(torch.randn(1, 1, 1, 4), -1), x_labels=list("abcd"), y_labels=["q"])
    assert ax.images[0].get_array().shape == (1, 4)
    plt.close("all")


def test_wrong_label_count_is_named() -> None:
    with pytest.raises(ValueError, match="y_labels must have 3 labels"):
        plot_attention(torch.rand(3, 4), y_labels=["a"])
    plt.close("all")


HANGUL = ["어텐션", "분포", "셀프", "어텐션"]  # "attention", "distribution", "self"
GLOSSARY_TITLE = "룩-어헤드 마스크 · 교사 강요 · 층 정규화"


def _missing_glyph_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if "missing from" in str(w.message) or "Glyph" in str(w.message)]


def test_hangul_labels_draw_without_a_missing_glyph() -> None:
    """With the course's Korean font, Hangul labels and titles render: no "Glyph ... missing from font" warning."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ax = plot_attention(torch.softmax(torch.randn(4, 4), -1), x_labels=HANGUL, y_labels=HANGUL,
                            title=GLOSSARY_TITLE)
        ax.figure.canvas.draw()  # the warnings come at drawing time
    assert not _missing_glyph_warnings(record), _missing_glyph_warnings(record)
    plt.close("all")


def test_without_the_font_hangul_is_missing_and_a_clear_message_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: Matplotlib's default font alone has no Hangul, and use_korean_font says so in one line."""
    import course_lib.figures.plotting as plotting

    monkeypatch.setattr(plotting, "KOREAN_FONT_PACKAGE", "no_such_font_package")
    monkeypatch.setattr(plotting, "SYSTEM_KOREAN_FONTS", ())
    with matplotlib.rc_context({"font.family": ["sans-serif"]}):
        with pytest.warns(UserWarning, match="no Korean font found") as found:
            assert plotting.use_korean_font() is None
        assert "\n" not in str(found[0].message)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            plot_attention(torch.rand(4, 4), x_labels=HANGUL, y_labels=HANGUL).figure.canvas.draw()
        assert _missing_glyph_warnings(record), "DejaVu Sans alone should miss the Hangul glyphs"
    plt.close("all")


def test_a_system_font_is_found_by_name_when_the_package_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import course_lib.figures.plotting as plotting

    monkeypatch.setattr(plotting, "KOREAN_FONT_PACKAGE", "no_such_font_package")
    monkeypatch.setattr(plotting, "SYSTEM_KOREAN_FONTS", ("No Such Font", "NanumGothic"))  # registered at import
    with matplotlib.rc_context({"font.family": ["sans-serif"]}):
        assert plotting.use_korean_font() == "NanumGothic"
        assert list(matplotlib.rcParams["font.family"]) == ["sans-serif", "NanumGothic"]
        assert plotting.use_korean_font() == "NanumGothic"  # a second call adds nothing
        assert list(matplotlib.rcParams["font.family"]) == ["sans-serif", "NanumGothic"]
