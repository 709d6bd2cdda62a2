"""One verdict: every exercise's known mistakes and correct alternatives get the same verdict from the four
entry points that judge a call (issue 47): the notebook check (``exercises.feedback.run_check``), the class
edition's check over stored data (``edition.stored.run_check``), the grader's judge (``grading.judging.judge``, fed
the sandbox runner's own observations of the same cases) and the authoring helper (``exercises.authoring.agrees``).

The same verdict: passed or not, the kind of problem found, and the known mistake named (hence the hint). Before
the one verdict module, the class edition never ran notebook 15's access check and passed three of online_softmax's
mistakes ("the whole row at once", "a maximum pass, then a sum pass", "computed outside PyTorch") that the notebook
check and the grader fail.

The sweep (363 answers, about 3 CPU-minutes) is sampled under ``make test`` (tests/conftest.py, SAMPLED_TESTS: a
share of each exercise's answers, drawn from the day's seed, so that successive runs cover the others) and run
whole under ``make test-all``; the class edition's data is stored once for the module, the grader's reference
observations once per exercise.
"""

from __future__ import annotations

import os
import threading
from functools import cache

import pytest

from course_lib.edition import stored
from course_lib.edition.build import course_exercises, store_exercise
from course_lib.exercises import get_exercise
from course_lib.exercises.authoring import agrees
from course_lib.exercises.feedback import run_check
from course_lib.exercises.passes import access_check_name
from course_lib.exercises.verdict import Rules, find_mistake, inputs_as_plain, known_mistakes, reference_observation
from course_lib.grading.course import ExerciseSpec
from course_lib.grading.judging.judge import judge
from course_lib.grading.sandbox.codec import encode_cases, npz_bytes, witnessed_ops
from course_lib.grading.sandbox.sandbox_main import observe_cases


def _answers() -> list:
    """Every known mistake and correct alternative of every exercise, one parameter each (``ex`` the exercise:
    tests/conftest.py samples the sweep per exercise, every exercise keeping one answer at least)."""
    found = []
    for ex in course_exercises():
        found += [pytest.param(ex, "mistake", i, id=f"{ex.name}-mistake-{i + 1}") for i in range(len(ex.mistakes))]
        found += [pytest.param(ex, "alternative", i, id=f"{ex.name}-alternative-{i + 1}")
                  for i in range(len(ex.also_correct))]
    return found


@pytest.fixture(scope="module")
def edition_data(tmp_path_factory: pytest.TempPathFactory):
    """The class edition's stored data of every exercise (what ``course-class-edition`` writes per exercise),
    built once for the module."""
    folder = tmp_path_factory.mktemp("edition-data")
    for ex in course_exercises():
        store_exercise(ex, folder, f"{ex.reference.__module__}.{ex.reference.__name__}")
    stored.add_data_folder(folder)
    yield folder
    stored.remove_data_folder(folder)


@cache
def _grader_spec(name: str) -> tuple[ExerciseSpec, dict]:
    """What the grader holds of an exercise before any submission (its cases, the reference's observations, the
    sandbox's job), built once per exercise as the grader builds it once per course copy."""
    exercise = get_exercise(name)
    spec = ExerciseSpec(exercise, 0, "", exercise.reference.__name__, [])
    spec.cases = exercise.cases("public", seed=0)
    spec.expected = [reference_observation(exercise, c) for c in spec.cases]
    spec.inputs = [inputs_as_plain(c) for c in spec.cases]
    job = {"differentiable": exercise.differentiable, "train_mode": exercise.train_mode,
           "watch": list(exercise.forbidden_calls), "seed": Rules.from_exercise(exercise).seed,
           "access": access_check_name(exercise.access_check)}
    return spec, job


@cache
def _witnessed():
    """The sandbox's second record of what ran (PyTorch's profiler around the call and its observation)."""
    from course_lib.grading.sandbox.sandbox_main import witness_recorder

    return witness_recorder()


def _grader(exercise, impl) -> tuple[str, str]:
    """The grader's judge on the public cases, observed as the sandbox's runner observes them."""
    spec, job = _grader_spec(exercise.name)
    arrays, described = encode_cases(spec.cases)
    before = frozenset(t.ident for t in threading.enumerate() if t.ident is not None)  # pytest's, not the answer's
    (header, out), record = _witnessed()("one-verdict", lambda: observe_cases(job, impl, described, dict(arrays),
                                                                              ignore_threads=before))
    header = {**header, "witness": witnessed_ops(record, "one-verdict")}  # as the executor reads the sandbox's
    status, _, hint, _, _ = judge(spec, header, npz_bytes(out), 1024)
    return status, hint


def _verdicts(name: str, impl) -> dict[str, tuple]:
    exercise = get_exercise(name)
    check, edition = run_check(name, impl), stored.run_check(name, impl)
    grader_status, grader_hint = _grader(exercise, impl)
    return {"check": (check.passed, check.kind, check.hint), "edition": (edition.passed, edition.kind, edition.hint),
            "grader": (grader_status == "pass", grader_hint if grader_status != "pass" else ""),
            "authoring": agrees(exercise, impl, "public", 0)}


@pytest.mark.skipif(bool(os.environ.get("PYTEST_XDIST_WORKER")), reason=(
    "run without xdist by `make test`, in a process of its own: pytest-xdist starts threads of its own during a "
    "call, which the grader's record counts as the answer's (the sandbox has none)"))
@pytest.mark.parametrize(("ex", "kind", "index"), _answers())
def test_every_mistake_and_alternative_gets_one_verdict_from_the_four_entry_points(ex, kind: str, index: int,
                                                                                    edition_data) -> None:
    """The same verdict (passed, the kind of problem, the known mistake's hint) from the four entry points, and
    the right one: a mistake fails, an alternative passes."""
    impl = ex.mistakes[index].impl if kind == "mistake" else ex.also_correct[index]
    label = f"mistake {ex.mistakes[index].name!r}" if kind == "mistake" else f"alternative {index + 1}"
    v = _verdicts(ex.name, impl)
    passed = {"check": v["check"][0], "edition": v["edition"][0], "grader": v["grader"][0],
              "authoring": v["authoring"]}
    assert len(set(passed.values())) == 1, f"{ex.name}, {label}: the entry points disagree: {v}"
    assert passed["check"] is (kind == "alternative"), f"{ex.name}, {label}: the wrong verdict: {v}"
    assert v["check"][1:] == v["edition"][1:], f"{ex.name}, {label}: the class edition says otherwise: {v}"
    assert v["grader"][1] == v["check"][2], f"{ex.name}, {label}: the grader's hint differs: {v}"


def test_the_edition_runs_the_access_check_of_online_softmax(edition_data) -> None:
    """The disagreement that opened issue 47: the class edition passed a two-pass softmax."""
    exercise = get_exercise("online_softmax")
    whole_row = next(m for m in exercise.mistakes if m.name.startswith("the whole row at once"))
    result = stored.run_check("online_softmax", whole_row.impl)
    assert not result.passed and result.kind == "access" and result.mistake == whole_row.name
    data = stored.load_exercise("online_softmax")
    assert stored.rules_of(data).access_check is exercise.access_check


def test_a_mistake_is_found_by_its_own_observation_not_only_its_output() -> None:
    """find_mistake names a known mistake for the way it goes wrong (here: how it reads its input)."""
    exercise = get_exercise("online_softmax")
    rules = Rules.from_exercise(exercise)
    case = exercise.cases("public")[1]
    two_pass = next(m for m in exercise.mistakes if m.name.startswith("a maximum pass"))
    got = rules.observe(two_pass.impl, case, trace=True)
    found = find_mistake(rules, case, 1, reference_observation(exercise, case), got, "access",
                         known_mistakes(exercise, rules))
    assert found is not None and found.name == two_pass.name
