"""Hints in two steps (issue 33): the first names the mistake and the idea, the code comes when asked again.

Every known mistake's ``hint`` holds no code (the patterns below: indexing and slicing, calls with arguments,
assignments, Python-only operators, backticked expressions); its code-level fix lives in ``detail``, which
``check`` prints when it is run again and finds the same mistake.
"""

from __future__ import annotations

import re

import pytest
import torch

from course_lib.exercises import check, get_exercise, registered_exercises

CODE = [
    re.compile(r"`[^`]*[\[\]()=+\-*/<>~%][^`]*`"),  # a backticked expression with brackets or operators
    re.compile(r"[A-Za-z_)\]]\[[^\]\s][^\]]*\]"),  # indexing or slicing: tokens[:, 1:], hidden[0]
    re.compile(r"\b\w+\.\w+\(\S"),  # a call on a dotted name with arguments: F.dropout(w, ...)
    re.compile(r"(?<![\w.])\.\w+\("),  # a method call: .transpose(1, 2)
    re.compile(r"\b\w+\([^()]*(?:[=~\[]|\.\.\.)[^()]*\)"),  # a call with keywords, ~, brackets or ...
    re.compile(r"\b\w+\(\s*-?\d+(?:\s*,\s*-?\d+)+\s*\)"),  # a call with integer arguments: permute(0, 2, 1, 3)
    re.compile(r"\b[a-z_]\w*\((?:\w+,\s*){2,}\w+\)"),  # a call with three or more arguments: view(b, s, h, d)
    re.compile(r"\b[a-z_]\w* = (?:self\.|torch\.|F\.|[a-z_]\w*[\[(.])"),  # an assignment: k = self.w_k(key)
    re.compile(r"\*\*|//|\+=|-=|[A-Za-z_]\w* ?(?:!=|==) ?[A-Za-z_]|[A-Za-z_]\w* % [A-Za-z_]"),  # Python operators
]


def code_in(text: str) -> list[str]:
    """The pieces of ``text`` that read as Python code rather than as words or maths."""
    return [m.group(0) for pattern in CODE for m in pattern.finditer(text)]


MISTAKES = [(ex, m) for ex in registered_exercises() if ex.declared_in.startswith("course_lib.checks.")
            for m in ex.mistakes]  # the course's own (an assignment's author writes hints as they see fit)


@pytest.mark.parametrize("text, found", [
    ("compare logits[:, :-1] with tokens[:, 1:]", True), ("use x.amax(dim=dim, keepdim=True)", True),
    ("then transpose(1, 2)", True), ("k = self.w_k(key)", True), ("stop when k**L >= n", True),
    ("index // vocab", True), ("(tokens != pad_id)", True), ("`+=` into the first", True),
    ("masked_fill(~mask, 0)", True), ("view(batch, seq, num_heads, d_k)", True),
    ("divide the scores by sqrt(d_k)", False), ("the [CLS] token, shape (batch, 1, 1, seq)", False),
    ("exp(1000) overflows and 0/0 = NaN", False), ("True = may attend", False), ("mask key j unless j <= past + i",
                                                                                   False)])
def test_the_code_detector_tells_code_from_words(text: str, found: bool) -> None:
    assert bool(code_in(text)) is found, code_in(text)


@pytest.mark.parametrize("ex, mistake", MISTAKES, ids=[f"{ex.name}-{m.name}" for ex, m in MISTAKES])
def test_every_first_step_hint_holds_no_code(ex, mistake) -> None:
    assert not code_in(mistake.hint), f"{ex.name} / {mistake.name}: move {code_in(mistake.hint)} to detail"


def test_the_hints_that_gave_the_answer_away_keep_it_for_the_second_step() -> None:
    lm = {m.name: m for m in get_exercise("lm_loss").mistakes}
    assert "logits[:, :-1]" in lm["not shifted"].detail and "[:" not in lm["not shifted"].hint
    mlm = {m.name: m for m in get_exercise("mlm_loss").mistakes}
    assert "logits.sum() * 0.0" in mlm["NaN when nothing is selected"].detail


def _not_shifted(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1))


def test_check_gives_the_idea_first_and_the_code_when_run_again(capsys) -> None:
    mistake = {m.name: m for m in get_exercise("lm_loss").mistakes}["not shifted"]
    check("lm_loss", _not_shifted)
    first = capsys.readouterr().out
    assert f"hint: {mistake.hint}" in first and mistake.detail not in first
    assert "run this check again to see the fix in code" in first
    check("lm_loss", _not_shifted)
    second = capsys.readouterr().out
    assert f"in code: {mistake.detail}" in second
    check("lm_loss", get_exercise("lm_loss").reference)  # passing forgets the hint: the next mistake starts over
    capsys.readouterr()
    check("lm_loss", _not_shifted)
    assert mistake.detail not in capsys.readouterr().out
