"""The worked assignment ``assignments/kv_cache``: a key/value cache for incremental decoding.

- its three exercises are declared once (``kv_cache_checks.py``) with enough mistakes and alternatives;
  every check accepts the reference and the alternatives and rejects every known mistake, with its hint;
- the cache is right: cached decoding gives the uncached tokens and logits, and a cached attention step equals
  PyTorch's own ``nn.MultiheadAttention`` with a causal mask;
- the student and solved versions come from one source (``solve``/``unsolve``, ``course-notebooks``), the
  student version runs with every check "not implemented yet" and the solved one with every check "passed";
- through the grading command: the reference earns full marks, the untouched stubs zero, and a known mistake
  loses exactly its exercise's points.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from conftest import ROOT
from nbtools import agrees, check_statuses, run_smoke

ASSIGNMENT = ROOT / "assignments" / "kv_cache"
NOTEBOOK = ASSIGNMENT / "kv_cache.ipynb"
if str(ASSIGNMENT) not in sys.path:
    sys.path.insert(0, str(ASSIGNMENT))

import kv_cache_checks  # noqa: E402  (registers the assignment's exercises)
from kv_cache_reference import (  # noqa: E402
    CachedSelfAttention,
    TinyDecoder,
    append_kv,
    uncached_generate,
    uncached_logits,
)

from course_lib.exercises import Exercise, registered_exercises, run_check  # noqa: E402
from course_lib.exercises.notebooks import BEGIN, END, STUB_LINES, exercise_cells, solve, unsolve  # noqa: E402
from course_lib.models.attention import MultiHeadAttention  # noqa: E402
from course_lib.models.masking import causal_mask  # noqa: E402

EXERCISES = [kv_cache_checks.KV_APPEND, kv_cache_checks.KV_ATTENTION_STEP, kv_cache_checks.KV_DECODE_LOOP]
IDS = [ex.name for ex in EXERCISES]
POINTS = {ex.name: ex.points for ex in EXERCISES}




def _load() -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOK, as_version=4)


# --- the declaration ------------------------------------------------------------------------------------

def test_three_graded_exercises_declared_for_the_notebook() -> None:
    names = [ex.name for ex in registered_exercises("kv_cache")]
    assert sorted(names) == sorted(IDS)
    assert sum(POINTS.values()) == 8


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_enough_mistakes_and_alternatives(ex: Exercise) -> None:
    assert len(ex.mistakes) >= 5 and len(ex.also_correct) >= 2


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_reference_passes_public_and_hidden_cases(ex: Exercise) -> None:
    assert run_check(ex.name, ex.reference).passed
    for seed in (0, 1, 12345):
        assert agrees(ex, ex.reference, "hidden", seed)


MISTAKES = [(ex, m) for ex in EXERCISES for m in ex.mistakes]


@pytest.mark.parametrize("ex,mistake", MISTAKES, ids=[f"{ex.name}-{m.name}" for ex, m in MISTAKES])
def test_checks_reject_every_mistake(ex: Exercise, mistake) -> None:
    result = run_check(ex.name, mistake.impl)
    assert result.status in ("failed", "error"), f"{mistake.name}: {result.status}"
    if result.status == "failed":  # the learner reads this mistake's hint (or an earlier mistake's, if equal)
        assert result.hint, f"{mistake.name}: failed without a hint"
    for seed in (0, 7):
        assert not agrees(ex, mistake.impl, "hidden", seed), f"hidden cases accept {mistake.name}"


def test_most_mistakes_get_their_own_hint() -> None:
    own = sum(run_check(ex.name, m.impl).hint == m.hint for ex, m in MISTAKES)
    assert own >= len(MISTAKES) - 2, f"only {own} of {len(MISTAKES)} mistakes are diagnosed by their own hint"


ALTERNATIVES = [(ex, alt) for ex in EXERCISES for alt in ex.also_correct]


@pytest.mark.parametrize("ex,alt", ALTERNATIVES, ids=[f"{ex.name}-{getattr(a, '__name__', i)}"
                                                      for i, (ex, a) in enumerate(ALTERNATIVES)])
def test_checks_accept_correct_alternatives(ex: Exercise, alt) -> None:
    assert run_check(ex.name, alt).passed
    assert agrees(ex, alt, "hidden", 3)


def test_untouched_stubs_are_not_implemented_yet() -> None:
    def stub_fn(past_k, past_v, k_new, v_new):
        raise NotImplementedError()

    class StubStep(torch.nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.w_q, self.w_k = torch.nn.Linear(d_model, d_model), torch.nn.Linear(d_model, d_model)
            self.w_v, self.w_o = torch.nn.Linear(d_model, d_model), torch.nn.Linear(d_model, d_model)

        def forward(self, x, past_k=None, past_v=None):
            raise NotImplementedError()

    assert run_check("kv_append", stub_fn).status == "not implemented yet"
    assert run_check("kv_attention_step", StubStep).status == "not implemented yet"


def _points_from_checks(namespace: dict) -> float:
    """The points the in-notebook checks would give the exercise objects defined in ``namespace``."""
    objects = {"kv_append": namespace["append_kv"], "kv_attention_step": namespace["CachedSelfAttention"],
               "kv_decode_loop": namespace["TinyDecoder"]}
    return sum(POINTS[name] for name, obj in objects.items() if run_check(name, obj).passed)


def _exec_exercise_cells(nb: nbformat.NotebookNode) -> dict:
    """Run the notebook's exercise cells (only them) in a namespace holding what the notebook imported."""
    import math

    from torch import nn

    from course_lib.models.positional import sinusoidal_table

    namespace = {"torch": torch, "nn": nn, "math": math, "sinusoidal_table": sinusoidal_table,
                 "CachedAttention": CachedSelfAttention}  # what exercise 2's check leaves when it fails
    for _, cell, _ in exercise_cells(nb):
        exec(compile(cell.source, "<exercise cell>", "exec"), namespace)  # noqa: S102 - our own notebook
    return namespace


def test_in_notebook_checks_give_full_marks_to_the_solution_and_zero_to_the_stubs() -> None:
    student = _load()
    assert _points_from_checks(_exec_exercise_cells(solve(student))) == 8
    assert _points_from_checks(_exec_exercise_cells(student)) == 0
    stubbed = _exec_exercise_cells(student)
    assert {run_check(n, stubbed[o]).status for n, o in
            [("kv_append", "append_kv"), ("kv_attention_step", "CachedSelfAttention"),
             ("kv_decode_loop", "TinyDecoder")]} == {"not implemented yet"}


# --- the cache is right, against computations we did not write --------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cached_decoding_equals_uncached(seed: int) -> None:
    torch.manual_seed(seed)
    model = TinyDecoder(vocab_size=31, d_model=16, num_heads=4, max_len=48).eval()
    prompt = torch.randint(0, 31, (3, 5))
    with torch.no_grad():
        tokens, scores = model(prompt, max_new_tokens=20)
        tokens_u, scores_u = uncached_generate(model, prompt, max_new_tokens=20)
        replay = uncached_logits(model, tokens)[:, prompt.shape[1] - 1:-1]  # (batch, 20, vocab)
    assert tokens.shape == (3, 25) and scores.shape == (3, 20, 31)
    assert torch.equal(tokens[:, :5], prompt)
    assert torch.equal(tokens, tokens_u)
    torch.testing.assert_close(scores, scores_u, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(scores, replay, atol=1e-5, rtol=1e-5)


def test_cached_and_uncached_differ_only_by_rounding() -> None:
    """In float64 the two agree to ~1e-12: the float32 difference is summation order, not a bug."""
    torch.manual_seed(4)
    model = TinyDecoder(vocab_size=23, d_model=16, num_heads=2, max_len=40).double().eval()
    prompt = torch.randint(0, 23, (2, 4))
    with torch.no_grad():
        _, scores = model(prompt, max_new_tokens=25)
        _, scores_u = uncached_generate(model, prompt, max_new_tokens=25)
    assert (scores - scores_u).abs().max() < 1e-10


def test_cached_steps_equal_torch_multihead_attention_with_causal_mask() -> None:
    torch.manual_seed(5)
    d_model, heads, seq = 12, 3, 9
    torch_mha = torch.nn.MultiheadAttention(d_model, heads, batch_first=True).eval()
    cached = CachedSelfAttention(d_model, heads).eval()
    cached.load_state_dict(MultiHeadAttention.from_torch(torch_mha).state_dict())
    x = torch.randn(2, seq, d_model)
    with torch.no_grad():
        expected, _ = torch_mha(x, x, x, attn_mask=~causal_mask(seq), need_weights=False)  # True = masked there
        out, k, v = cached(x[:, :4])  # prompt of 4
        outs = [out]
        out, k, v = cached(x[:, 4:6], k, v)  # a chunk of 2
        outs.append(out)
        for t in range(6, seq):  # then one at a time
            out, k, v = cached(x[:, t:t + 1], k, v)
            outs.append(out)
    assert k.shape == v.shape == (2, heads, seq, d_model // heads)
    torch.testing.assert_close(torch.cat(outs, dim=1), expected, atol=1e-5, rtol=1e-5)


def test_bad_input_names_the_argument() -> None:
    with pytest.raises(ValueError, match="k_new"):
        append_kv(None, None, torch.zeros(2, 3, 4), torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="both be None"):
        append_kv(torch.zeros(1, 1, 1, 2), None, torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))
    with pytest.raises(ValueError, match=r"d_model=8"):
        CachedSelfAttention(8, 2)(torch.zeros(1, 3, 6))
    model = TinyDecoder(vocab_size=5, d_model=8, num_heads=2, max_len=6)
    with pytest.raises(ValueError, match="max_len=6"):
        model(torch.zeros(1, 3, dtype=torch.long), max_new_tokens=5)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model(torch.zeros(1, 3, dtype=torch.long), max_new_tokens=0)


# --- one source: the student and solved versions --------------------------------------------------------------

def test_notebook_structure() -> None:
    nb = _load()
    assert nb.metadata["course"] == {"notebook": "kv_cache", "checks": "kv_cache_checks"}
    names = [name for _, _, name in exercise_cells(nb)]
    assert names == ["kv_append", "kv_attention_step", "kv_decode_loop"]
    for i, cell, name in exercise_cells(nb):
        assert STUB_LINES[1] in cell.source and BEGIN not in cell.source and END not in cell.source
        follower = nb.cells[i + 1]
        assert follower.metadata.get("course") == {"exercise": name, "role": "check"}
        assert f'check("{name}"' in follower.source
    assert all(not c.outputs for c in nb.cells if c.cell_type == "code"), "stored with outputs"


def test_given_decoder_step_is_the_reference_step() -> None:
    """The notebook's TinyDecoder.step (given to the learner) is the reference's, word for word."""
    import inspect
    import textwrap

    cell = next(c for _, c, name in exercise_cells(_load()) if name == "kv_decode_loop")
    step = textwrap.indent(textwrap.dedent(inspect.getsource(TinyDecoder.step)), "    ")
    assert step in cell.source


def test_solved_and_student_versions_come_from_one_source() -> None:
    nb = _load()
    solved = solve(nb)
    for _, cell, _ in exercise_cells(solved):
        assert BEGIN in cell.source and END in cell.source and STUB_LINES[1] not in cell.source
        compile(cell.source, "<solution>", "exec")
        assert "kv_cache_reference" not in cell.source, "a solution imports the instructor's reference module"
    assert [c.source for c in unsolve(solved).cells] == [c.source for c in nb.cells]


def test_course_notebooks_command_builds_both_versions(tmp_path: Path) -> None:
    from course_lib.exercises.cli import main

    assert main(["solutions", str(NOTEBOOK), "--out", str(tmp_path / "solved")]) == 0
    solved = nbformat.read(tmp_path / "solved" / NOTEBOOK.name, as_version=4)
    assert [c.source for c in solved.cells] == [c.source for c in solve(_load()).cells]
    assert main(["student", str(tmp_path / "solved" / NOTEBOOK.name), "--out", str(tmp_path / "student")]) == 0
    student = nbformat.read(tmp_path / "student" / NOTEBOOK.name, as_version=4)
    assert [c.source for c in student.cells] == [c.source for c in _load().cells]


@pytest.mark.slow
def test_student_version_runs_with_every_check_not_implemented() -> None:
    executed = run_smoke(_load(), ASSIGNMENT)
    assert check_statuses(executed) == dict.fromkeys(IDS, "not implemented yet")


@pytest.mark.slow
def test_solved_version_passes_every_check() -> None:
    executed = run_smoke(solve(_load()), ASSIGNMENT)
    assert check_statuses(executed) == dict.fromkeys(IDS, "passed")


# --- through the grading command -------------------------------------------------------------------------------

def _with_cell(nb: nbformat.NotebookNode, name: str, source: str) -> nbformat.NotebookNode:
    out = copy.deepcopy(nb)
    for _, cell, cell_name in exercise_cells(out):
        if cell_name == name:
            cell.source = source
    return out


@pytest.mark.slow
def test_grading_command_full_marks_zero_and_a_mistake(tmp_path: Path) -> None:
    """Reference: 8/8. Untouched stubs: 0/8. A top-left causal mask in exercise 2: 5/8, with that hint."""
    grading_cli = pytest.importorskip(
        "course_lib.grading.cli", reason="the grading command (course_lib.grading) has not landed yet")
    student = _load()
    solved = solve(student)
    step_cell = next(c.source for _, c, n in exercise_cells(solved) if n == "kv_attention_step")
    wrong_line = "heads, _ = scaled_dot_product_attention(q, k, v, mask)"
    assert wrong_line in step_cell
    top_left = step_cell.replace(
        wrong_line, "heads = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)")
    submissions = {"solved": solved, "untouched": student,
                   "mistake": _with_cell(solved, "kv_attention_step", top_left)}
    for name, nb in submissions.items():
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
    out = tmp_path / "grades"
    status = grading_cli.main([*(str(tmp_path / f"{n}.ipynb") for n in submissions), "--out", str(out),
                               "--source", str(NOTEBOOK), "--quiet"])
    assert status == 0
    reports = {n: json.loads((out / f"{n}.json").read_text()) for n in submissions}
    scores = {n: {e["exercise"]: e["score"] for e in r["exercises"]} for n, r in reports.items()}
    statuses = {n: {e["exercise"]: e["status"] for e in r["exercises"]} for n, r in reports.items()}
    assert reports["solved"]["max_total"] == 8
    assert scores["solved"] == POINTS, statuses["solved"]
    assert scores["untouched"] == dict.fromkeys(IDS, 0), statuses["untouched"]
    assert set(statuses["untouched"].values()) == {"not-implemented"}
    assert scores["mistake"] == {**POINTS, "kv_attention_step": 0}, statuses["mistake"]
    step = next(e for e in reports["mistake"]["exercises"] if e["exercise"] == "kv_attention_step")
    assert step["status"] == "fail" and "top-left" in step["hint"]


@pytest.mark.slow
def test_grading_a_later_exercise_when_an_earlier_one_is_a_stub(tmp_path: Path) -> None:
    """Exercise 3 builds on exercise 2's class (``CachedAttention``, bound by its check cell). In the notebook a
    stub's check binds the reference, so exercise 3 can still pass; the grader must do the same (its sandbox for
    exercise 3 restores exercise 2's reference): 2 + 3 = 5."""
    grading_cli = pytest.importorskip(
        "course_lib.grading.cli", reason="the grading command (course_lib.grading) has not landed yet")
    student = _load()
    stub_cell = next(c.source for _, c, n in exercise_cells(student) if n == "kv_attention_step")
    nbformat.write(_with_cell(solve(student), "kv_attention_step", stub_cell), tmp_path / "partial.ipynb")
    out = tmp_path / "grades"
    assert grading_cli.main([str(tmp_path / "partial.ipynb"), "--out", str(out), "--source", str(NOTEBOOK),
                             "--quiet"]) == 0
    report = json.loads((out / "partial.json").read_text())
    scores = {e["exercise"]: e["score"] for e in report["exercises"]}
    assert scores == {**POINTS, "kv_attention_step": 0}, report["exercises"]


def test_reference_docstring_examples_run() -> None:
    import doctest

    import kv_cache_reference

    result = doctest.testmod(kv_cache_reference, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 15 and result.failed == 0
