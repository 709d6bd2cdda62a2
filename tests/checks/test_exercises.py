"""Every exercise's check: accepts the reference and correct alternatives, rejects every known mistake.

Also the mechanism itself: verdicts for stubs and bad input, and declaration errors.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap

import nbformat
import pytest
import torch
from conftest import ROOT
from nbtools import agrees

import course_lib.checks  # noqa: F401  (adds the course's exercise package)
from course_lib.exercises import (
    Case,
    Exercise,
    ExerciseDefinitionError,
    Mistake,
    check,
    get_exercise,
    register,
    registered_exercises,
    run_check,
    validate_exercise,
)


def _assignment_exercises() -> list[Exercise]:
    """The exercises of every assignment notebook (its checks module sits beside it, named in its metadata)."""
    found = []
    for path in sorted((ROOT / "assignments").glob("*/*.ipynb")):
        meta = nbformat.read(path, as_version=4).metadata.get("course", {})
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))
        importlib.import_module(meta["checks"])
        found += [ex for ex in registered_exercises(meta["notebook"])]
    return found


#: Every exercise of the course and of the assignments: the assignments' checks modules are imported first, so that
#: the sweeps do not depend on whether another test module (tests/grading/test_assignment.py) happened to import
#: them before.
ASSIGNMENT_EXERCISES = _assignment_exercises()
EXERCISES = registered_exercises()
IDS = [ex.name for ex in EXERCISES]


def test_every_notebook_exercise_is_registered() -> None:
    assert "stable_softmax" in IDS
    assert ASSIGNMENT_EXERCISES and {ex.name for ex in ASSIGNMENT_EXERCISES} <= set(IDS)


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_declaration_is_valid(ex: Exercise) -> None:
    """Every case is plain data and the reference accepts it (moved here from import time: see register)."""
    validate_exercise(ex, seeds=(0, 1, 12345))


def test_first_check_imports_only_its_notebooks_checks() -> None:
    """A fresh interpreter's first check imports the one module that declares the exercise, and no other."""
    code = ("import sys\nfrom course_lib.checks import check\nfrom course_lib.models.layers import mean_pool\n"
            "check('mean_pool')\n"
            "print(sorted(m for m in sys.modules if m.startswith('course_lib.checks.')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "mean_pool: passed" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "['course_lib.checks.nb05_encoder']"


def test_check_finds_the_name_where_it_is_called() -> None:
    from course_lib.models.softmax import stable_softmax  # noqa: F401  (what the exercise cell would define)

    assert check("stable_softmax") is stable_softmax


def test_check_of_a_missing_name_is_a_verdict_and_gives_the_reference(capsys) -> None:
    """A syntax error or a typo leaves the exercise undefined: the check says so and does not raise."""
    got = check("patchify")  # no `patchify` here: as after an exercise cell that stopped with an error
    out = capsys.readouterr().out
    assert "⏳ patchify: not implemented yet" in out and "`patchify` is not defined yet" in out
    assert got is get_exercise("patchify").reference


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_reference_passes_its_check(ex: Exercise) -> None:
    assert run_check(ex.name, ex.reference).passed


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_reference_passes_hidden_cases(ex: Exercise, seed: int) -> None:
    assert agrees(ex, ex.reference, "hidden", seed)


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_every_exercise_has_enough_known_mistakes_and_alternatives(ex: Exercise) -> None:
    assert len(ex.mistakes) >= 5, f"{ex.name}: at least five plausible wrong solutions"
    assert len(ex.also_correct) >= 2, f"{ex.name}: at least two correct alternatives"


MISTAKES = [(ex, m) for ex in EXERCISES for m in ex.mistakes]


@pytest.mark.parametrize("ex,mistake", MISTAKES, ids=[f"{ex.name}-{m.name}" for ex, m in MISTAKES])
def test_check_rejects_known_mistake(ex: Exercise, mistake: Mistake) -> None:
    result = run_check(ex.name, mistake.impl)
    assert result.status in ("failed", "error"), f"{mistake.name} was {result.status}"
    for seed in (0, 7):
        assert not agrees(ex, mistake.impl, "hidden", seed), f"hidden cases accept {mistake.name}"


ALTERNATIVES = [(ex, i, alt) for ex in EXERCISES for i, alt in enumerate(ex.also_correct)]


@pytest.mark.parametrize("ex,i,alt", ALTERNATIVES, ids=[f"{ex.name}-alt{i}" for ex, i, _ in ALTERNATIVES])
def test_check_accepts_correct_alternative(ex: Exercise, i: int, alt) -> None:
    assert run_check(ex.name, alt).passed
    assert agrees(ex, alt, "hidden", 3)


def test_known_mistakes_get_their_hint() -> None:
    from course_lib.checks.nb00_welcome import STABLE_SOFTMAX

    for mistake in STABLE_SOFTMAX.mistakes:
        result = run_check("stable_softmax", mistake.impl)
        if result.status == "failed":
            assert result.hint == mistake.hint, mistake.name


# --- verdicts for stubs and bad input ---------------------------------------------------------------

def _stub(x, dim=-1):
    raise NotImplementedError()


def test_untouched_stub_is_not_implemented_yet() -> None:
    assert run_check("stable_softmax", _stub).status == "not implemented yet"


@pytest.mark.parametrize("bad", [None, 3, "softmax", torch.zeros(3)])
def test_non_callable_gets_a_sentence(bad) -> None:
    result = run_check("stable_softmax", bad)
    assert result.status == "invalid"
    assert "expected your function" in result.message and type(bad).__name__ in result.message


def test_wrong_return_type_is_named() -> None:
    result = run_check("stable_softmax", lambda x, dim=-1: x.tolist())
    assert result.status == "failed" and "expected a tensor of shape" in result.message


def test_wrong_shape_is_named() -> None:
    from course_lib.models.softmax import stable_softmax

    result = run_check("stable_softmax", lambda x, dim=-1: stable_softmax(x, dim=dim).unsqueeze(0))
    assert result.status == "failed" and "expected shape (3,), got (1, 3)" in result.message


def test_equality_spoofing_object_fails() -> None:
    class AlwaysEqual:
        def __eq__(self, other):
            return True

        shape = (3,)

    result = run_check("stable_softmax", lambda x, dim=-1: AlwaysEqual())
    assert result.status == "failed"


def test_raising_code_is_an_error_verdict_with_the_line() -> None:
    def broken(x, dim=-1):
        return x.no_such_method()

    result = run_check("stable_softmax", broken)
    assert result.status == "error" and "AttributeError" in result.message and "no_such_method" in result.message


def test_code_that_changes_its_input_fails_and_names_it() -> None:
    def in_place(x, dim=-1):
        x -= x.amax(dim=dim, keepdim=True)  # right numbers, but the caller's tensor changes
        return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)

    result = run_check("stable_softmax", in_place)
    assert result.status == "failed" and "'x'" in result.message and "in place" in result.message
    assert "copy" in result.hint


def test_right_numbers_without_gradients_fail_where_the_notebooks_train() -> None:
    """Found from the student's seat: these passed the check, then the notebook's training cell crashed."""
    from course_lib.models.layers import mean_pool

    def through_numpy(x, mask):
        return torch.from_numpy(mean_pool(x.detach(), mask).numpy())

    result = run_check("mean_pool", through_numpy)
    assert result.status == "failed" and "gradients" in result.message and ".numpy()" in result.hint

    def nan_zeroed_in_place(q, k, v, mask=None, dropout_p=0.0):
        scores = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        weights[torch.isnan(weights)] = 0.0  # right numbers; backward fails
        return weights @ v, weights

    result = run_check("scaled_dot_product_attention", nan_zeroed_in_place)
    assert result.status == "failed" and "backpropagating" in result.message

    def item_loss(logits, target, smoothing=0.1, ignore_index=0):
        from course_lib.training.engine import label_smoothed_cross_entropy
        return torch.tensor(label_smoothed_cross_entropy(logits, target, smoothing, ignore_index).item())

    assert run_check("label_smoothed_cross_entropy", item_loss).status == "failed"


def test_sys_exit_in_learner_code_is_an_error_verdict() -> None:
    import sys

    result = run_check("stable_softmax", lambda x, dim=-1: sys.exit(0))
    assert result.status == "error" and "SystemExit" in result.message


def test_numpy_scalar_counts_as_the_number() -> None:
    import numpy as np

    from course_lib.models.complexity import max_path_length

    assert run_check("max_path_length", lambda *a, **k: np.int64(max_path_length(*a, **k))).passed
    result = run_check("max_path_length", lambda *a, **k: [max_path_length(*a, **k)])
    assert result.status == "failed" and "expected a number" in result.message


def test_namedtuple_output_is_read_as_a_tuple() -> None:
    from collections import namedtuple

    from course_lib.models.attention import MultiHeadAttention

    Out = namedtuple("Out", "output weights")

    class Named(MultiHeadAttention):
        def forward(self, *args, **kwargs):
            return Out(*super().forward(*args, **kwargs))

    assert run_check("multi_head_attention", Named).passed

    class Lying(tuple):  # holds a wrong output, but its own iteration shows the right one
        def __iter__(self):
            return iter(self.shown)

    class Liar(MultiHeadAttention):
        def forward(self, *args, **kwargs):
            output, weights = super().forward(*args, **kwargs)
            fake = Lying((torch.zeros_like(output), weights))
            fake.shown = (output, weights)
            return fake

    result = run_check("multi_head_attention", Liar)
    assert result.status == "failed" and "output[0]" in result.message


def test_integer_output_must_stay_integer() -> None:
    from course_lib.models.transformer import shift_right

    result = run_check("shift_right", lambda *a, **k: shift_right(*a, **k).float())
    assert result.status == "failed" and "integer tensor" in result.message


def test_unknown_exercise_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="stable_softmax"):
        run_check("no_such_exercise", _stub)


# --- declaration errors -------------------------------------------------------------------------------

def _decl(**overrides) -> Exercise:
    fields = dict(name="decl_test", notebook="test", points=1, reference=lambda x: x * 2,
                  public_cases=[Case("one", args=(torch.ones(2),))], hidden_cases=[Case("two", args=(torch.ones(3),))])
    fields.update(overrides)
    return Exercise(**fields)


def test_declaration_without_reference_fails() -> None:
    with pytest.raises(ExerciseDefinitionError, match="reference"):
        register(_decl(reference=None))


def test_declaration_with_case_the_reference_rejects_fails() -> None:
    with pytest.raises(ExerciseDefinitionError, match="rejects it"):
        validate_exercise(_decl(reference=lambda x: x @ torch.ones(5, 5)))


def test_declaration_with_non_plain_case_fails() -> None:
    with pytest.raises(ExerciseDefinitionError, match="object"):
        validate_exercise(_decl(public_cases=[Case("obj", args=(object(),))]))


def test_declaration_without_cases_fails() -> None:
    with pytest.raises(ExerciseDefinitionError, match="no hidden cases"):
        validate_exercise(_decl(hidden_cases=lambda gen: []))


def test_registering_names_the_declaring_module() -> None:
    ex = register(_decl(name="decl_module_test"))
    assert ex.declared_in == __name__


def test_declaration_with_duplicate_name_from_elsewhere_fails() -> None:
    ex = _decl(name="stable_softmax", declared_in="somewhere.else")
    with pytest.raises(ExerciseDefinitionError, match="used twice"):
        register(ex)


def test_declaration_with_bad_points_fails() -> None:
    with pytest.raises(ExerciseDefinitionError, match="points"):
        register(_decl(points=0))


# --- finding an exercise by name: a table, no prior import ------------------------------------------------------

def test_the_checks_add_themselves_and_a_lookup_imports_one_module() -> None:
    """In a fresh interpreter: the mechanism names no package of exercises (it never imports the checks, issue 47),
    so a lookup before ``import course_lib.checks`` says to import it; after it, run_check, check and get_exercise
    find the course's exercises by name, importing only the module the table names; the grader's course copy
    finds them through the notebook's metadata alone."""
    code = textwrap.dedent("""
        import sys
        from course_lib.exercises import check, get_exercise, run_check
        from course_lib.models.softmax import stable_softmax
        try:
            get_exercise("stable_softmax")
        except KeyError as err:
            assert "import course_lib.checks" in str(err), err
        else:
            raise AssertionError("found without the checks")
        import course_lib.checks
        assert run_check("stable_softmax", stable_softmax).passed
        loaded = sorted(m for m in sys.modules if m.startswith("course_lib.checks."))
        assert loaded == ["course_lib.checks.nb00_welcome"], loaded
        assert check("stable_softmax") is stable_softmax
        assert get_exercise("additive_attention").declared_in == "course_lib.checks.nb09_why_self_attention"
    """)
    grader = textwrap.dedent("""
        from pathlib import Path
        from course_lib.grading.course import CourseCopy
        copy = CourseCopy(Path("notebooks/00_welcome.ipynb"), seed=0)
        print([spec.exercise.name for spec in copy.specs])
    """)
    for source in (code, grader):
        proc = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, cwd=ROOT, timeout=300,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "['stable_softmax']"


def test_the_table_of_exercises_agrees_with_the_modules_and_the_notebooks() -> None:
    """``course_lib.checks.EXERCISES`` names each course exercise once, in the module that declares it, and that
    module is the one the notebook's metadata names, holding exactly the notebook's exercise cells."""
    from course_lib.checks import EXERCISES as TABLE
    from course_lib.exercises.notebooks import exercise_cells

    declared = {ex.name: ex.declared_in for ex in EXERCISES if ex.declared_in.startswith("course_lib.checks.")}
    listed = {name: f"course_lib.checks.{module}" for module, names in TABLE.items() for name in names}
    assert sum(len(names) for names in TABLE.values()) == len(listed), "an exercise is listed twice"
    assert listed == declared
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        module = nb.metadata["course"]["checks"]
        cells = [name for _, _, name in exercise_cells(nb)]
        assert module.startswith("course_lib.checks."), (path.name, module)
        assert cells == list(TABLE.get(module.removeprefix("course_lib.checks."), ())), (path.name, module, cells)


def test_a_misspelt_exercise_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"no exercise called 'stable_sofmax'; known exercises: .*stable_softmax"):
        get_exercise("stable_sofmax")
