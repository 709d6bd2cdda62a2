"""What the checks say (issue 43): the hint that fits the failing case, code quoted so that it cannot be misread,
a crash that is a known mistake named with its hint, and the class edition's words true to the edition."""

from __future__ import annotations

import math

import torch

import course_lib.checks.nb07_training_and_decoding  # noqa: F401 (registers the exercises)
import course_lib.checks.nb11_language_model  # noqa: F401
from course_lib.checks.nb07_training_and_decoding import ONE_TOKEN_PER_BEAM_HINT
from course_lib.checks.nb11_language_model import TIE_RULE_HINT
from course_lib.edition.stored import fallback_words
from course_lib.exercises.feedback import run_check


def hf_top_p(logits, p):
    """Hugging Face's TopPLogitsWarper, as a learner would copy it (right but for the exercise's tie rule)."""
    sorted_logits, sorted_indices = torch.sort(logits, descending=False)
    cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    sorted_indices_to_remove = cumulative_probs <= (1 - p)
    sorted_indices_to_remove[..., -1:] = 0
    indices_to_remove = sorted_indices_to_remove.scatter(-1, sorted_indices, sorted_indices_to_remove)
    return logits.masked_fill(indices_to_remove, -float("inf"))


def test_a_filter_that_breaks_only_the_tie_rule_is_told_the_tie_rule() -> None:
    result = run_check("top_p_filter", hf_top_p)
    assert result.status == "failed" and result.case.startswith("ties") and result.hint == TIE_RULE_HINT
    assert "sort by probability" not in result.hint


def test_a_filter_in_vocabulary_order_is_still_told_to_sort() -> None:
    def unsorted(logits, p):
        probs = torch.softmax(logits, -1)
        return logits.masked_fill(probs.cumsum(-1) - probs >= p, -math.inf)

    assert run_check("top_p_filter", unsorted).hint.startswith("sort by probability first")


def test_a_beam_step_keeping_one_token_per_beam_gets_its_hint() -> None:
    def one_per_beam(scores, log_probs, beam_size):
        best, token = log_probs.max(dim=-1)
        return scores + best, torch.arange(scores.shape[1]).expand_as(token), token

    result = run_check("beam_search_step", one_per_beam)
    assert result.status == "failed" and result.hint == ONE_TOKEN_PER_BEAM_HINT


def test_a_crash_that_is_a_known_mistake_is_named_with_its_hint() -> None:
    def transformer_lr(step, d_model, warmup=4000):
        return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)

    result = run_check("transformer_lr", transformer_lr)
    assert result.status == "error" and "ZeroDivisionError" in result.message
    assert "step 0" in result.hint and "max(step, 1)" in result.hint
    text = str(result)
    assert "at line" in text and "\n       return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)\n" in text


def test_an_unknown_crash_gets_no_borrowed_hint() -> None:
    def transformer_lr(step, d_model, warmup=4000):
        raise KeyError("warmup")

    result = run_check("transformer_lr", transformer_lr)
    assert result.status == "error" and result.hint == ""


def test_the_class_editions_words_say_what_the_cells_below_use() -> None:
    manifest = {"parts": {
        "course_lib.models.softmax.stable_softmax": {"kind": "backed", "through": ["torch.softmax"]},
        "course_lib.models.layers.EncoderLayer.forward": {"kind": "stored", "through": []},
        "course_lib.models.masking.causal_mask": {"kind": "withheld", "through": []}}}
    backed = fallback_words("course_lib.models.softmax.stable_softmax", manifest)
    assert "PyTorch's own torch.softmax" in backed and "reference" not in backed
    stored = fallback_words("course_lib.models.layers.EncoderLayer", manifest)  # a class: its methods' parts
    assert "outputs stored with this edition" in stored and "reference" not in stored
    assert "stop with a message" in fallback_words("course_lib.models.masking.causal_mask", manifest)
    shipped = fallback_words("course_lib.models.attention.split_heads", manifest)  # an earlier week's, shipped
    assert shipped == "the cells below use the course's reference implementation for now."
