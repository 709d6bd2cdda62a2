"""Held-out wrong answers that used to pass a check (issue: the student's seat, round 2) and now fail, with
a hint; each is judged from the observation of the call, so the grader rejects it the same way."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import course_lib.checks  # noqa: F401 - registers the course's exercises
from course_lib.exercises import get_exercise
from course_lib.exercises.compare import compare_outputs
from course_lib.exercises.feedback import run_check


def test_a_detached_zero_loss_when_nothing_is_selected_fails() -> None:
    def mlm_loss(logits, labels):
        selected = labels != -100
        if not bool(selected.any()):
            return torch.tensor(0.0)  # right number, no graph: .backward() crashes training
        return F.cross_entropy(logits[selected], labels[selected])

    result = run_check("mlm_loss", mlm_loss)
    assert result.status == "failed" and "gradient" in (result.message + result.hint), result
    assert run_check("mlm_loss", get_exercise("mlm_loss").reference).passed


def test_checkpoint_averaging_in_float64_or_returning_the_input_itself_fails() -> None:
    def in_float64(values):
        if not values[-1].is_floating_point():
            return values[-1].clone()
        return torch.stack([v.double() for v in values]).mean(0)

    def the_input_itself(values):
        if len(values) == 1 or not values[-1].is_floating_point():
            return values[-1]
        return torch.stack(list(values)).mean(0)

    wide = run_check("average_weights", in_float64)
    assert wide.status == "failed" and "float64" in wide.message, wide
    alias = run_check("average_weights", the_input_itself)
    assert alias.status == "failed" and "same memory" in alias.message and alias.hint, alias
    assert run_check("average_weights", get_exercise("average_weights").reference).passed


def test_dropout_before_the_pooler_fails_in_training_mode() -> None:
    reference = get_exercise("classification_head").reference

    class ClassificationHead(reference):  # right in eval mode; dropout on the [CLS] vector, not the pooled one
        def forward(self, hidden):
            return self.classifier(torch.tanh(self.pooler(self.dropout(hidden[:, 0]))))

    result = run_check("classification_head", ClassificationHead)
    assert result.status == "failed" and "training mode" in result.message and "dropout" in result.hint, result


def test_a_module_with_other_weight_names_gets_the_names_and_a_hint() -> None:
    reference = get_exercise("classification_head").reference

    class ClassificationHead(reference):
        def __init__(self, d_model: int, num_classes: int, dropout: float = 0.1) -> None:
            super().__init__(d_model, num_classes, dropout)
            self.dense = self.pooler  # called pooler in the stub
            del self.pooler

        def forward(self, hidden):
            return self.classifier(self.dropout(torch.tanh(self.dense(hidden[:, 0]))))

    result = run_check("classification_head", ClassificationHead)
    assert result.status == "failed" and "pooler" in result.message and "dense" in result.message, result
    assert "name" in result.hint and "load_state_dict" not in result.message
    assert run_check("classification_head", reference).passed


def test_a_wrong_answer_is_located_where_it_is_wrong_not_at_equal_infinities() -> None:
    expected = torch.tensor([[float("-inf"), 1.0, 2.0]]).numpy()
    got = torch.tensor([[float("-inf"), 1.0, 5.0]]).numpy()
    problem = compare_outputs(expected, got, 1e-5, 1e-4)[0]
    assert "at index [0, 2]" in problem and "expected 2" in problem, problem
