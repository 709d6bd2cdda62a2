"""One withheld library per week, searched by behaviour (issue 45).

The grader's sandbox for notebook NN imports exactly the library the week-NN class edition ships
(:func:`course_lib.grading.libcopy.build_library` over :func:`course_lib.edition.build.strip_library`), and in it
no function, method or class computes a graded result of NN or a later notebook, by any route the grader does
not refuse: ``tests/grading/answer_search.py`` calls every callable of the built library in a subprocess on every such
exercise's public and hidden cases and on simple transforms of them (see its docstring).

Under ``make test`` each week's library is searched for its own week's exercises (a sample of the weeks:
tests/conftest.py, SAMPLED_TESTS); ``COURSE_TEST_ALL=1`` searches every week's library for its week's and every
later week's exercises. Each week's libraries are built once per module.
"""

from __future__ import annotations

import filecmp
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
import torch
from conftest import run_everything

from course_lib.edition.build import build_edition, course_exercises, withheld_for
from course_lib.edition.record import as_tensors
from course_lib.exercises import get_exercise, run_case
from course_lib.exercises.notebooks import exercise_cells
from course_lib.exercises.passes import access_check_name
from course_lib.grading.sandbox.libcopy import build_library

ROOT = Path(__file__).resolve().parents[2]
SEARCH = Path(__file__).resolve().parent / "answer_search.py"
WEEKS = sorted({int(p.name[:2]) for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")})
HIDDEN_SEED = 45
#: Cases searched per exercise: the first public ones and the first hidden ones (the search's time is linear in it).
PUBLIC, HIDDEN = 2, 2


def cases_file(exercises: list[Any], path: Path) -> Path:
    """Every exercise's public and hidden cases, the reference's outputs and its arguments by name."""
    data = []
    for ex in exercises:
        cases = [*ex.cases("public", seed=0)[:PUBLIC], *ex.cases("hidden", seed=HIDDEN_SEED)[:HIDDEN]]
        entries, expected = [], []
        for case in cases:
            named: dict[str, Any] = {}
            if not ex.is_class:
                try:
                    named = dict(inspect.signature(ex.reference).bind(*case.args, **case.kwargs).arguments)
                except TypeError:
                    named = {}
            entries.append({"args": tuple(case.args), "kwargs": dict(case.kwargs), "init": case.init,
                            "state": case.state, "named": named})
            expected.append(as_tensors(run_case(ex.reference, case, seed=ex.seed)))
        data.append({"name": ex.name, "notebook": ex.notebook, "is_class": ex.is_class, "seed": ex.seed,
                     "atol": float(ex.atol), "forbidden_calls": list(ex.forbidden_calls),
                     "forbidden_ops": list(ex.forbidden_ops), "access": access_check_name(ex.access_check),
                     "cases": entries, "expected": expected})
    torch.save(data, path)
    return path


def run_search(library: Path, cases: Path, modules: tuple[str, ...] = ()) -> dict[str, Any]:
    """The search's report on ``library`` (``modules``: an assignment's own, searched beside ``course_lib``)."""
    env = {**os.environ, "PYTHONPATH": str(library), "MPLBACKEND": "Agg", "COURSE_WORKERS": "1",
           "COURSE_SEARCH_MODULES": ",".join(modules)}
    written = cases.with_suffix(".json")
    done = subprocess.run([sys.executable, str(SEARCH), str(cases), str(written)], capture_output=True, text=True,
                          env=env, cwd=library, timeout=3000)
    assert done.returncode == 0 and written.is_file(), (done.returncode, done.stderr[-3000:], done.stdout[-1000:])
    report = json.loads(written.read_text())
    assert not report["errors"], report["errors"]
    assert report["library"] == str(library), "the search imported another course_lib"
    return report


@pytest.fixture(scope="module")
def week_library(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The grader's sandbox library of a week, built once per module."""
    built: dict[int, Path] = {}

    def library(week: int) -> Path:
        if week not in built:
            built[week] = tmp_path_factory.mktemp(f"lib{week:02d}")
            build_library(built[week], week)
        return built[week]

    return library


def own_exercises(week: int) -> list[Any]:
    """The exercises of notebook ``week`` (those its library withholds with every earlier reference present)."""
    return [e for e in withheld_for(week) if e.notebook[:2] == f"{week:02d}"]


def assert_no_answer(report: dict[str, Any], exercises: list[Any]) -> None:
    violations = [h for h in report["hits"] if not h["refused"]]
    assert not violations, json.dumps(violations, indent=1)
    assert len(report["ended"]) <= len(exercises), report["ended"]  # the few callables that end a process, named
    assert not report["import_failures"], report["import_failures"]
    assert report["exercises"] == len(exercises) and report["callables"] > 300, report


@pytest.mark.slow
@pytest.mark.parametrize("week", WEEKS, ids=[f"{w:02d}" for w in WEEKS])
def test_no_callable_of_a_weeks_library_computes_a_graded_result_of_that_week(
        week_library: Any, week: int, tmp_path: Path) -> None:
    """Week NN's exercises searched in week NN's library: of all the libraries that withhold them, the one with the
    most working code (every earlier week's references are there). An earlier week's library holds the same
    callables with fewer references, more of them stand-ins that raise; a callable that computes a later week's
    result there computes it here too, unless it turns a stand-in's error into another route (an ``except``
    around a withheld call). The test below searches every library for every later week's exercises too; it runs
    under ``make test-all`` (COURSE_TEST_ALL=1), and costs about five times this one over the 16 weeks."""
    exercises = own_exercises(week)
    report = run_search(week_library(week), cases_file(exercises, tmp_path / "cases.pt"))
    assert_no_answer(report, exercises)
    assert report["calls"] > 100 * len(exercises), report


@pytest.mark.slow
@pytest.mark.skipif(not run_everything(),
                    reason="every later week's exercises in every week's library: make test-all (COURSE_TEST_ALL=1)")
@pytest.mark.parametrize("week", WEEKS, ids=[f"{w:02d}" for w in WEEKS])
def test_no_callable_of_a_weeks_library_computes_a_graded_result_of_that_week_or_later(
        week_library: Any, week: int, tmp_path: Path) -> None:
    exercises = withheld_for(week)
    report = run_search(week_library(week), cases_file(exercises, tmp_path / "cases.pt"))
    assert_no_answer(report, exercises)
    assert report["calls"] > 1000, report


def _sources(folder: Path) -> dict[str, Path]:
    root = folder / "course_lib"
    return {str(p.relative_to(root)): p for p in root.rglob("*.py")
            if p.relative_to(root).parts[0] not in ("checks", "grading")
            and not p.name.startswith("judge_")}


@pytest.mark.slow
@pytest.mark.parametrize("week", [4, WEEKS[-1]], ids=["04", f"{WEEKS[-1]:02d}"])
def test_the_sandbox_holds_the_library_the_weeks_class_edition_ships(week_library: Any, week: int,
                                                                      tmp_path: Path) -> None:
    """One builder, one rule: the code of the grader's library is the week's class edition's, file for file
    (the edition adds its checks and their stored data, the sandbox the grader's runner)."""
    edition = tmp_path / "edition"
    build_edition(edition, record=False, graded=f"{week:02d}")
    ours, theirs = _sources(week_library(week)), _sources(edition)
    assert sorted(ours) == sorted(theirs)
    differ = [name for name in ours if not filecmp.cmp(ours[name], theirs[name], shallow=False)]
    assert not differ, differ
    manifest = json.loads((edition / "course_lib" / "edition" / "manifest.json").read_text())
    assert set(manifest["exercises"]) == {e.name for e in withheld_for(week)}


@pytest.mark.slow
def test_the_search_finds_answers_planted_in_a_weeks_library(week_library: Any, tmp_path: Path) -> None:
    """The search can fail: the course's own ``masking`` and ``flash_attention`` modules put back into week 04's
    library answer notebook 04's masks through the routes a red team used (the key-padding conversion on
    ``tokens == pad_id``, the sliding-window mask on positions, the cache's and BERT's methods) and the online
    softmax's exercise."""
    planted = tmp_path / "planted"
    shutil.copytree(week_library(4), planted)
    for name in ("models/masking.py", "models/flash_attention.py"):
        shutil.copyfile(ROOT / "course_lib" / name, planted / "course_lib" / name)
    online = get_exercise("online_softmax").notebook[:2]  # notebook 14's, or 15's since the split
    exercises = [e for e in course_exercises() if e.notebook[:2] in ("04", online)]
    report = run_search(planted, cases_file(exercises, tmp_path / "c.pt"))
    found = {(h["callable"], h["exercise"]) for h in report["hits"] if not h["refused"]}
    assert {("course_lib.models.masking.padding_mask", "padding_mask"),
            ("course_lib.models.masking.from_key_padding_mask", "padding_mask"),
            ("course_lib.models.bert.BERT.padding_mask", "padding_mask"),
            ("course_lib.models.masking.causal_mask", "causal_mask"),
            ("course_lib.models.masking.sliding_window_mask", "causal_mask"),
            ("course_lib.models.kv_cache.KVCache.causal_mask", "causal_mask"),
            ("course_lib.models.flash_attention.online_softmax", "online_softmax")} <= found, sorted(found)


def in_notebook_order(week: int) -> list[Any]:
    """Week ``week``'s exercises in the order its notebook asks them."""
    path = next((ROOT / "notebooks").glob(f"{week:02d}_*.ipynb"))
    return [get_exercise(name) for _, _, name in exercise_cells(nbformat.read(path, as_version=4))]


def restored_violations(library: Path, restored: list[Any], later: list[Any], cases: Path,
                        modules: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The hits, not refused, of a library whose ``restored`` exercises keep their references, on ``later``."""
    report = run_search(library, cases_file(later, cases), modules)
    assert report["exercises"] == len(later) and not report["import_failures"], report
    return [{**h, "restored": [e.name for e in restored]} for h in report["hits"] if not h["refused"]]


MULTI = [w for w in WEEKS if len(in_notebook_order(w)) > 1]


@pytest.mark.slow
@pytest.mark.parametrize("week", MULTI, ids=[f"{w:02d}" for w in MULTI])
def test_an_earlier_exercise_restored_computes_no_later_result_of_its_week(week: int, tmp_path: Path) -> None:
    """A sandbox grading exercise k after earlier ones did not pass holds their references (the notebook's check
    binds them, :mod:`course_lib.grading.sandbox.libcopy`): none of them, nor anything else there, computes
    exercise k's result or a later one's. Later weeks need no new search: their libraries ship this week's
    references whole and are searched above."""
    ordered = in_notebook_order(week)
    violations = []
    for k in range(1, len(ordered)):
        library = tmp_path / f"restored{k}"
        build_library(library, week, restored={e.name for e in ordered[:k]})
        violations += restored_violations(library, ordered[:k], ordered[k:], tmp_path / f"cases{k}.pt")
    assert not violations, json.dumps(violations, indent=1)


@pytest.mark.slow
def test_an_assignments_library_answers_none_of_its_exercises_restored_or_not(tmp_path: Path) -> None:
    """The key/value-cache assignment's sandbox (the whole course beside its own modules, its answers withheld):
    nothing in it computes an exercise's result, with no earlier exercise restored and with each prefix restored."""
    assignment = ROOT / "assignments" / "kv_cache"
    if str(assignment) not in sys.path:
        sys.path.insert(0, str(assignment))
    import kv_cache_checks

    ordered = [kv_cache_checks.KV_APPEND, kv_cache_checks.KV_ATTENTION_STEP, kv_cache_checks.KV_DECODE_LOOP]
    violations = []
    for k in range(len(ordered)):
        library = tmp_path / f"restored{k}"
        build_library(library, None, assignment, "kv_cache_checks", ordered, restored={e.name for e in ordered[:k]})
        violations += restored_violations(library, ordered[:k], ordered[k:], tmp_path / f"cases{k}.pt",
                                          ("kv_cache_reference",))
    assert not violations, json.dumps(violations, indent=1)
