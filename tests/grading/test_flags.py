"""Tampering made visible (issue 45): cells that name the grader's internals are graded and flagged for review.

The fixtures in ``tests/grading/grading_fixtures/tampering`` (each declares the reasons it must raise,
``# flag: ...``; the part above ``# exercise:`` goes into a helper cell above the exercise) are graded through the real
sandbox with the static policy off, next to honest neighbours: each report names the reasons and the lines,
``summary.csv`` and the gradebook's stored report carry them, and ``--flags-score-zero`` scores them 0 while the honest
keep theirs.
"""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT
from nbtools import load

from course_lib.exercises.notebooks import exercise_cells, solve
from course_lib.grading.cli import main
from course_lib.grading.judging.flags import REASONS, tampering_flags
from course_lib.grading.records.gradebook import Gradebook

NB00 = ROOT / "notebooks" / "00_welcome.ipynb"
TAMPERING = sorted((ROOT / "tests" / "grading" / "grading_fixtures" / "tampering").glob("*.py"))
HONEST = {  # what honest cells hold that looks close to a flagged word
    "comments and prose": "def f(x):\n    # inspect the shapes, gc-free, no frames\n    print('tracing the modules')\n"
                          "    return x\n",
    "a module's modules": "for m in model.modules():\n    m.eval()\nlayer.inspect_me = 1\n",
    "magics and display": "%timeit f(x)\n%%capture\nfrom IPython.display import display\ndisplay(x)\n",
    "a syntax error": "def f(x:\n    return inspected\n",
}


def _declared(path: Path) -> set[str]:
    return {line.removeprefix("# flag: ").strip() for line in path.read_text().splitlines()
            if line.startswith("# flag: ")}


def test_every_fixture_declares_known_reasons_and_raises_them() -> None:
    assert len(TAMPERING) >= 5
    for path in TAMPERING:
        declared = _declared(path)
        assert declared and declared <= set(REASONS), (path.name, declared)
        found = {f["reason"] for f in tampering_flags([(4, path.read_text())])}
        assert declared <= found, (path.name, found)


@pytest.mark.parametrize("name", HONEST)
def test_honest_code_raises_no_flag(name: str) -> None:
    assert tampering_flags([(0, HONEST[name])]) == []


def test_a_flag_quotes_the_cell_and_line_that_raised_it() -> None:
    flags = tampering_flags([(2, "x = 1\ny = getattr(sys, 'modules')\n"), (6, "import inspect as i\n")])
    assert flags == [
        {"reason": "the interpreter's module table (sys.modules)",
         "lines": ["cell 3, line 2: y = getattr(sys, 'modules')"]},
        {"reason": "introspection (inspect)", "lines": ["cell 7, line 1: import inspect as i"]}]


def _notebook(source: str) -> nbformat.NotebookNode:
    nb = copy.deepcopy(load(NB00))
    helper, _, exercise = source.rpartition("# exercise:\n")
    index, cell, _ = next(iter(exercise_cells(nb)))
    cell.source = exercise
    if helper:
        nb.cells.insert(index, nbformat.v4.new_code_cell(helper))
    return nb


@pytest.fixture(scope="module")
def flagged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The fixtures and two honest neighbours graded twice through the sandbox (policy off, --jobs 2): as usual,
    and with --flags-score-zero."""
    folder = tmp_path_factory.mktemp("tampering")
    subs = folder / "subs"
    subs.mkdir()
    for path in TAMPERING:
        nbformat.write(_notebook(path.read_text()), subs / f"00_welcome_{path.stem}.ipynb")
    for n in range(2):
        nbformat.write(solve(load(NB00)), subs / f"00_welcome_honest{n}.ipynb")
    outs = {"usual": folder / "usual", "zero": folder / "zero"}
    common = [str(subs), "--quiet", "--jobs", "2", "--seed", "7", "--no-policy"]
    assert main([*common, "--out", str(outs["usual"])]) == 0
    assert main([*common, "--out", str(outs["zero"]), "--flags-score-zero"]) == 0
    return outs


def _reports(out: Path) -> dict[str, dict]:
    return {p.stem.removeprefix("00_welcome_"): json.loads(p.read_text()) for p in out.glob("*.json")}


@pytest.mark.slow
def test_tampering_is_graded_and_flagged_with_its_lines_in_the_report_the_gradebook_and_the_summary(
        flagged: dict[str, Path]) -> None:
    reports = _reports(flagged["usual"])
    for path in TAMPERING:
        report = reports[path.stem]
        assert report["status"] == "graded" and report["exercises"][0]["status"] != "missing", report
        assert _declared(path) <= {f["reason"] for f in report["flags"]}, (path.stem, report["flags"])
        assert all(f["lines"] and all(line.startswith("cell ") for line in f["lines"]) for f in report["flags"])
        assert "Flagged for review" in (flagged["usual"] / f"00_welcome_{path.stem}.md").read_text()
    for name in ("honest0", "honest1"):
        assert reports[name]["flags"] == [] and reports[name]["total"] == 1
    rows = {Path(r["submission"]).stem.removeprefix("00_welcome_"): r
            for r in csv.DictReader((flagged["usual"] / "summary.csv").open(encoding="utf-8"))}
    assert all(rows[p.stem]["flags"] for p in TAMPERING) and not rows["honest0"]["flags"]
    assert "(sys.modules): cell " in rows["replace_as_plain"]["flags"]
    assert "torch.sys.modules" in rows["replace_as_plain"]["flags"]  # the line that raised it
    with Gradebook(flagged["usual"] / "gradebook.sqlite") as book:
        stored = {Path(r.file).stem.removeprefix("00_welcome_"): book.report(r.id)["flags"]
                  for r in book.current().values()}
    assert stored["helper_cell_as_plain"] == reports["helper_cell_as_plain"]["flags"] and stored["honest1"] == []


@pytest.mark.slow
def test_flags_score_zero_turns_a_flag_into_zero_and_leaves_honest_work_alone(flagged: dict[str, Path]) -> None:
    reports = _reports(flagged["zero"])
    for path in TAMPERING:
        assert reports[path.stem]["total"] == 0 and reports[path.stem]["flags"], path.stem
    assert reports["honest0"]["total"] == reports["honest1"]["total"] == 1
    usual = _reports(flagged["usual"])
    earned = [p.stem for p in TAMPERING if usual[p.stem]["total"] > 0]
    assert all("flagged for review" in reports[s]["exercises"][0]["message"] for s in earned)
