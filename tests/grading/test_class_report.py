"""The class report (issue 44): per exercise the score distribution, how many students hit each known mistake,
the common errors and who is stuck; similar submissions flagged for review; the grader's flags per submission.

The grading is a stand-in (no sandbox): each fake submission is a real notebook whose ``fake`` field says what
the grader would report for each exercise, with the hint of one of notebook 00's own declared mistakes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from browser import chromium, screenshot

from course_lib.exercises import get_exercise
from course_lib.grading import cli
from course_lib.grading.cli import main
from course_lib.grading.records.class_report import normalise, similar_pairs
from course_lib.grading.records.report_types import ExerciseResult, SubmissionReport
from course_lib.grading.runner import GradeConfig
from course_lib.grading.submission import file_sha256

SOFTMAX = get_exercise("stable_softmax")
HINT = SOFTMAX.mistakes[0].hint  # the hint notebook 00's check names for its first declared mistake

SOLUTION = '''import torch

def stable_softmax(x, dim=-1):
    """Softmax along dim, shifted by the max."""
    shifted = x - x.max(dim=dim, keepdim=True).values  # no overflow
    exps = shifted.exp()
    total = exps.sum(dim=dim, keepdim=True)
    return exps / total
'''
RENAMED = '''import torch

def stable_softmax(x, dim=-1):
    # my own version
    z = x - x.max(dim=dim, keepdim=True).values
    e = z.exp()
    s = e.sum(dim=dim, keepdim=True)
    return e / s
'''
OTHER = '''import torch

def stable_softmax(x, dim=-1):
    m = torch.amax(x, dim=dim, keepdim=True)
    return torch.exp(x - m - torch.logsumexp(x - m, dim=dim, keepdim=True))
'''
HELPER = '''def helper(values):
    out = []
    for v in values:
        out.append(v * 2)
    return out
'''


@dataclass
class FlaggedReport(SubmissionReport):
    """A report with the grader's flags for review (issue 45's field: ``{"reason", "lines"}`` each)."""

    flags: list[dict] = field(default_factory=list)


def fake_grade(path: Path, config: GradeConfig, courses=None) -> SubmissionReport:
    """Each file's ``fake`` field: ``{exercise: [status, hint, 1-based cell]}``; ``flags``: the report's flags."""
    data = json.loads(Path(path).read_text())
    report = FlaggedReport(submission=str(path), sha256=file_sha256(path), notebook="00_welcome", max_total=1.0,
                           graded_at="2026-11-21T10:00:00Z", flags=data.get("flags", []))
    for name, (status, hint, cell) in data["fake"].items():
        message = {"error": "the exercise cell raised TypeError: unsupported operand",
                   "fail": "case 'hidden': expected [0.5] got [0.7]"}.get(status, "")
        report.exercises.append(ExerciseResult(name, 1.0 if status == "pass" else 0.0, 1.0, status, message, hint,
                                               4 if status == "pass" else 1, 4, cell))
    report.total = sum(r.score for r in report.exercises)
    return report


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(cli, "grade_submission", fake_grade)
    return fake_grade


def _notebook(folder: Path, name: str, cells: list[str], fake: dict, flags: list | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
          "cells": [{"cell_type": "code", "source": src, "metadata": {}, "outputs": [], "execution_count": None,
                     "id": f"c{i}"} for i, src in enumerate(cells)], "fake": fake}
    if flags:
        nb["flags"] = flags
    path = folder / f"{name}.ipynb"
    path.write_text(json.dumps(nb))
    return path


def test_normalised_code_ignores_renamed_variables_comments_and_docstrings() -> None:
    assert normalise(SOLUTION) == normalise(RENAMED)
    assert normalise(SOLUTION) != normalise(OTHER)
    assert "stable_softmax" in normalise(RENAMED)  # the exercise's own name is kept
    # Reordered cells: the cells of a submission are compared as a sorted set.
    a = {"ann": [normalise(SOLUTION), normalise(HELPER)], "ben": [normalise(HELPER), normalise(RENAMED)],
         "cat": [normalise(OTHER), normalise(HELPER)]}
    pairs = similar_pairs(a)
    assert [(x, y, kind) for x, y, kind, _ in pairs] == [("ann", "ben", "identical")]
    # One changed line out of many is near-identical; an answer too short to tell is never flagged.
    longer = SOLUTION + "\n".join(f"    y{i} = x * {i}" for i in range(12)).replace("    ", "") + "\n"
    edited = longer.replace("x * 11", "x * 12")
    near = similar_pairs({"a": [normalise(longer)], "b": [normalise(edited)]})
    assert near and near[0][2] == "near-identical" and 0.9 <= near[0][3] < 1
    assert similar_pairs({"a": ["return x"], "b": ["return x"]}) == []


def _class(folder: Path) -> list[Path]:
    """Six students: three share notebook 00's first known mistake, two submit the same code renamed and
    reordered, one's cell raises, one is stuck on a stub."""
    mistake = {"stable_softmax": ["fail", HINT, 1]}
    return [
        _notebook(folder, "hw_ann", [SOLUTION, HELPER], {"stable_softmax": ["pass", "", 1]}),
        _notebook(folder, "hw_ben", [HELPER, RENAMED], {"stable_softmax": ["pass", "", 2]}),
        _notebook(folder, "hw_cat", [OTHER], mistake),
        _notebook(folder, "hw_dan", [OTHER + "\n"], mistake),
        _notebook(folder, "hw_eve", [OTHER + "# mine\n"], mistake,
                  flags=[{"reason": "tampering: the check's record was cleared", "lines": [3, 4]}]),
        _notebook(folder, "hw_fay", ["def stable_softmax(x, dim=-1):\n    return x +"],
                  {"stable_softmax": ["error", "", 1]}),
        _notebook(folder, "hw_gus", ["raise NotImplementedError()"], {"stable_softmax": ["not-implemented", "", 1]}),
    ]


def _report(tmp_path: Path) -> Path:
    out = tmp_path / "grades"
    assert main([*map(str, _class(tmp_path / "subs")), "--out", str(out), "--unsafe-no-sandbox", "--quiet"]) == 0
    assert main(["class-report", "--out", str(out)]) == 0
    return out


def test_the_class_report_counts_the_known_mistakes_and_flags_similar_submissions(fake, tmp_path: Path) -> None:
    out = _report(tmp_path)
    md = (out / "class_report.md").read_text()
    assert "## stable\\_softmax (1 points)" in md  # every name escaped for Markdown
    assert "| 0 | 5 |" in md and "| 1 | 2 |" in md  # the score distribution
    line = next(x for x in md.splitlines() if x.startswith("| ") and "hw\\_cat" in x and "hw\\_dan" in x)
    assert "| 3 |" in line and "hw\\_eve" in line  # three students share the known mistake
    assert "Most common errors: TypeError (1)" in md
    assert "hw\\_gus: not-implemented" in md and "hw\\_fay: error" in md
    # Ann's and Ben's code: the same once names, comments and cell order are set aside.
    assert "| hw\\_ann, hw\\_ben | identical | 100% |" in md
    # Cat, Dan and Eve differ by a newline and a comment: identical too; the fay/gus stubs are not compared.
    assert "| hw\\_cat, hw\\_dan | identical |" in md and "hw\\_gus, " not in md.split("Similar")[1]
    flagged = md.split("## Flagged for review")[1]
    assert "- hw\\_eve: tampering: the check's record was cleared (lines \\[3, 4\\])" in flagged


@pytest.mark.slow
def test_the_class_report_shows_the_mistake_counts_in_a_browser(fake, tmp_path: Path) -> None:
    out = _report(tmp_path)
    with chromium() as browser:
        page = browser.new_page()
        page.goto((out / "class_report.html").as_uri())
        section = page.locator("section.exercise[data-exercise='stable_softmax']")
        assert section.locator("h2").inner_text() == "stable_softmax (1 points)"
        row = section.locator("tr.mistake").first
        assert row.locator("td.hint").inner_text() == HINT
        assert row.locator("td.count").inner_text() == "3"
        assert row.is_visible()
        assert "hw_cat, hw_dan, hw_eve" in row.inner_text()
        assert page.locator("table.similar").inner_text().count("identical") >= 2
        assert "tampering" in page.locator("ul.flags li[data-student='hw_eve']").inner_text()
        screenshot(page, "class_report")
