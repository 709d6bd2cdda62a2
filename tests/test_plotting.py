"""plot_attention on the shapes an untrained model's translation gives: one query row, or none at all."""

from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course_lib.plotting import plot_attention  # noqa: E402


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
