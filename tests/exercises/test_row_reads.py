"""course_lib.exercises.passes: telling a one-pass online softmax from a two-pass or a whole-row one by how it
reads its input (their outputs are equal), and the online_softmax check that uses it (issue 34)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import course_lib.checks  # noqa: F401 - registers the exercises
from course_lib.exercises import get_exercise
from course_lib.exercises.feedback import run_check
from course_lib.exercises.observation import observe, plain_observation
from course_lib.exercises.passes import row_reads
from course_lib.exercises.verdict import Rules, inputs_as_plain, problems
from course_lib.models.flash_attention import online_softmax


def _backwards(x, dim=-1, tile_size=32):
    """One pass, the tiles taken from the last to the first."""
    rows = x.movedim(dim, -1)
    m = torch.full_like(rows[..., :1], -math.inf)
    total = torch.zeros_like(m)
    for start in reversed(range(0, rows.shape[-1], tile_size)):
        tile = rows[..., start:start + tile_size]
        new = torch.maximum(m, tile.amax(-1, keepdim=True))
        total = total * torch.exp(m - new) + torch.exp(tile - new).sum(-1, keepdim=True)
        m = new
    return (torch.exp(rows - m) / total).movedim(-1, dim)


def _output_tile_by_tile(x, dim=-1, tile_size=32):
    """One pass for the normaliser, and the output written tile by tile (the second visit reduces nothing)."""
    rows = x.movedim(dim, -1)
    m = torch.full_like(rows[..., :1], -math.inf)
    total = torch.zeros_like(m)
    tiles = rows.split(tile_size, -1)
    for tile in tiles:
        new = torch.maximum(m, tile.amax(-1, keepdim=True))
        total = total * torch.exp(m - new) + torch.exp(tile - new).sum(-1, keepdim=True)
        m = new
    return torch.cat([torch.exp(tile - m) / total for tile in tiles], -1).movedim(-1, dim)


def _tiled_max_then_whole_sum(x, dim=-1, tile_size=32):
    """A held-out two-pass answer: the maximum tile by tile, then the sum over the whole row against it."""
    rows = x.movedim(dim, -1)
    m = torch.full_like(rows[..., :1], -math.inf)
    for start in range(0, rows.shape[-1], tile_size):
        m = torch.maximum(m, rows[..., start:start + tile_size].amax(-1, keepdim=True))
    e = torch.exp(rows - m)
    return (e / e.sum(-1, keepdim=True)).movedim(-1, dim)


def _logsumexp_of_the_row(x, dim=-1, tile_size=32):
    """A held-out whole-row answer: one logsumexp over the row."""
    return torch.exp(x - torch.logsumexp(x, dim, keepdim=True))


EXERCISE = get_exercise("online_softmax")
MISTAKES = {m.name: m.impl for m in EXERCISE.mistakes}
WHOLE_ROW = MISTAKES["the whole row at once (a two-pass softmax)"]
TWO_PASSES = MISTAKES["a maximum pass, then a sum pass"]
PYTORCH = MISTAKES["PyTorch's softmax"]
ONE_PASS = [online_softmax, *EXERCISE.also_correct, _backwards, _output_tile_by_tile]
ROWS = [(torch.randn(2, 3, 17), -1, 4), (torch.randn(12, 3), 0, 5), (torch.randn(2, 9), -1, 3)]


@pytest.mark.parametrize("impl", ONE_PASS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(("x", "dim", "tile_size"), ROWS)
def test_one_pass_answers_read_each_tile_once(impl, x, dim, tile_size) -> None:
    assert row_reads(impl, x, dim=dim, tile_size=tile_size) == []
    torch.testing.assert_close(impl(x, dim=dim, tile_size=tile_size), torch.softmax(x, dim))


@pytest.mark.parametrize(("impl", "kind"), [
    (WHOLE_ROW, "whole row"),
    (_logsumexp_of_the_row, "whole row"),
    (PYTORCH, "whole row"),
    (TWO_PASSES, "second pass"),
    (_tiled_max_then_whole_sum, "second pass"),
], ids=lambda v: getattr(v, "__name__", v))
@pytest.mark.parametrize(("x", "dim", "tile_size"), ROWS[:2])
def test_two_pass_and_whole_row_answers_are_told_apart(impl, kind, x, dim, tile_size) -> None:
    found = row_reads(impl, x, dim=dim, tile_size=tile_size)
    assert [p.split(":", 1)[0] for p in found][:1] == [kind], found
    if impl is not PYTORCH:
        torch.testing.assert_close(impl(x, dim=dim, tile_size=tile_size), torch.softmax(x, dim))  # right numbers


def test_a_row_of_one_tile_may_be_read_twice() -> None:
    """With tile_size >= the row, one pass and two are the same algorithm: nothing to say."""
    assert row_reads(WHOLE_ROW, torch.randn(3, 5), tile_size=16) == []


def test_the_observation_carries_the_reads_and_the_judge_uses_them() -> None:
    exercise = get_exercise("online_softmax")
    case = exercise.cases("public")[1]
    got = plain_observation(observe(TWO_PASSES, case, trace=True, access=exercise.access_check))
    assert got["access"][0].startswith("second pass:")
    expected = plain_observation(observe(exercise.reference, case))
    inputs = inputs_as_plain(case)
    found = problems(Rules.from_exercise(exercise), case, expected, got, inputs, threads=False)
    assert [p.kind for p in found] == ["access"] and found[0].message == got["access"][0]
    got.pop("access")  # a sandbox that sent no record of the reads
    assert [p.kind for p in problems(Rules.from_exercise(exercise), case, expected, got, inputs, threads=False)] == [
        "record"]


@pytest.mark.parametrize(("impl", "mistake"), [
    (_tiled_max_then_whole_sum, "a maximum pass, then a sum pass"),
    (_logsumexp_of_the_row, "the whole row at once (a two-pass softmax)"),
])
def test_held_out_two_pass_answers_get_the_hint_of_their_kind(impl, mistake) -> None:
    exercise = get_exercise("online_softmax")
    result = run_check("online_softmax", impl)
    assert result.status == "failed"
    assert result.hint == next(m.hint for m in exercise.mistakes if m.name == mistake)


def test_the_grader_names_the_access_check_to_its_sandbox() -> None:
    from course_lib.exercises.passes import access_check_name, resolve_access_check

    check = EXERCISE.access_check
    assert access_check_name(check) == "row_reads"  # a table of course_lib.exercises, which the sandbox sees
    assert resolve_access_check(access_check_name(check)) is check
    assert resolve_access_check(None) is None and resolve_access_check("os:system") is None
    assert access_check_name(None) is None
    assert resolve_access_check("course_lib.checks.nb15_inference_at_scale:online_softmax") is None  # answers: hidden
    with pytest.raises(ValueError, match="ACCESS_CHECKS"):
        access_check_name(print)


def test_the_record_cannot_be_erased_through_the_input():
    """An attack that worked: a whole-row softmax that cleared the record through an attribute of its input
    (``x._reads.problems.clear()``, which the grader's policy lets through) passed. The record no longer
    lives on the tensor; setting such attributes changes nothing."""
    from course_lib.exercises.passes import row_reads

    def erasing(x, dim=-1, tile_size=32):
        out = torch.softmax(x, dim)
        assert not hasattr(x, "_reads")  # nothing of the record is on the tensor
        x._reads, x._cols, x._second = None, None, False  # what an attacker would try
        return out

    problems = row_reads(erasing, torch.randn(3, 40), dim=-1, tile_size=8)
    assert problems and problems[0].startswith("whole row"), problems


def test_values_taken_out_of_pytorch_are_read():
    """An attack that worked: read each tile once for the record, then compute the softmax in NumPy, out of the
    watcher's sight (it passed with no problem). Taking the values out of PyTorch now reads them."""
    from course_lib.exercises.passes import row_reads

    def numpy_behind_a_tiled_front(x, dim=-1, tile_size=32):
        for start in range(0, x.shape[dim], tile_size):
            x[..., start:start + tile_size].amax(-1)
        a = x.detach().numpy()
        e = np.exp(a - a.max(axis=dim, keepdims=True))
        return torch.from_numpy(e / e.sum(axis=dim, keepdims=True))

    problems = row_reads(numpy_behind_a_tiled_front, torch.randn(3, 40), dim=-1, tile_size=8)
    assert any(p.startswith("outside PyTorch") for p in problems), problems
    listed = row_reads(lambda x, dim=-1, tile_size=32: torch.tensor(x.tolist()).softmax(dim), torch.randn(3, 40),
                       dim=-1, tile_size=8)
    assert any(p.startswith("outside PyTorch") for p in listed), listed


# ---------------------------------------------------------------------------------------------------
# Issue 45: rows kept apart, the instrumented call's output judged, a cleared record is a problem
# ---------------------------------------------------------------------------------------------------

ONLINE_FIXTURES = sorted(
    (Path(__file__).resolve().parents[1] / "grading" / "grading_fixtures" / "online_softmax").glob("*.py"))


def _fixture(path: Path):
    import runpy

    return runpy.run_path(str(path))["online_softmax"]


def _expected(path: Path) -> str:
    return path.read_text().splitlines()[0].removeprefix("# expect: ").strip()


@pytest.mark.parametrize("path", ONLINE_FIXTURES, ids=lambda p: p.stem)
def test_a_per_row_loop_passes_and_a_two_pass_softmax_fails_however_written(path: Path) -> None:
    from course_lib.exercises.core import Case
    from course_lib.exercises.passes import case_row_reads

    impl = _fixture(path)
    for x, dim, tile in ROWS:
        problems = case_row_reads(impl, Case("c", args=(x,), kwargs={"dim": dim, "tile_size": tile}))
        assert (problems == []) == (_expected(path) == "pass"), (path.stem, problems)
    assert run_check("online_softmax", impl).passed == (_expected(path) == "pass")


def test_the_instrumented_call_must_return_the_softmax() -> None:
    """Told apart by its type, the instrumented copy gets another answer (here a one-pass reading of the tiles,
    then the input handed back): the output is judged, not only the reads."""
    from course_lib.exercises.core import Case
    from course_lib.exercises.passes import case_row_reads

    def reads_then_lies(x, dim=-1, tile_size=32):
        if type(x) is not torch.Tensor:
            online_softmax(x, dim=dim, tile_size=tile_size)  # every tile read once, for the record
            return x * 1.0
        return torch.softmax(x, dim)

    problems = case_row_reads(reads_then_lies, Case("c", args=(torch.randn(3, 40),), kwargs={"tile_size": 8}))
    assert problems and problems[0].startswith("output"), problems


@pytest.mark.slow
def test_the_online_softmax_fixtures_through_the_sandbox(tmp_path: Path) -> None:
    """Graded through the real sandbox (policy off): the per-row loop earns online_softmax's points, the
    type test and the cleared record earn nothing."""
    import copy
    import json

    import nbformat
    from conftest import ROOT
    from nbtools import load

    from course_lib.exercises.notebooks import exercise_cells, solve
    from course_lib.grading.cli import main

    notebook = get_exercise("online_softmax").notebook  # 14_todays_models, or 15_inference_at_scale since the split
    solved = solve(load(ROOT / "notebooks" / f"{notebook}.ipynb"))
    for path in ONLINE_FIXTURES:
        nb = copy.deepcopy(solved)
        cell = next(c for _, c, name in exercise_cells(nb) if name == "online_softmax")
        cell.source = path.read_text()
        nbformat.write(nb, tmp_path / f"{notebook}_{path.stem}.ipynb")
    out = tmp_path / "out"
    assert main([str(tmp_path), "--out", str(out), "--quiet", "--jobs", "2", "--seed", "9", "--no-policy"]) == 0
    for path in ONLINE_FIXTURES:
        report = json.loads((out / f"{notebook}_{path.stem}.json").read_text())
        line = next(e for e in report["exercises"] if e["exercise"] == "online_softmax")
        if _expected(path) == "pass":
            assert line["status"] == "pass", line
        else:
            assert line["score"] == 0 and line["status"] in ("fail", "forbidden"), line
