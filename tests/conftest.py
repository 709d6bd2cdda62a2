"""Shared fixtures (the repository's paths, the course's notebooks) and the test tiers.

Test tiers: ``make test`` runs everything; ``make test-fast`` (``pytest -m "not slow" tests``) runs every
module's unit tests in a couple of minutes. What is slow is marked ``slow`` with ``@pytest.mark.slow`` beside
the test, or here:

- every cell nbval collects from an ``.ipynb`` (the course's notebooks, the assignments): executing a
  notebook (this hook sees every collected item, notebooks' too, whenever tests/ is collected);
- the tests listed in ``SLOW_TESTS``, each for its reason (training, building the API reference, running
  benchmark scripts, sweeping every known mistake and alternative of every exercise). The fast tier keeps a
  quick test of every module (for the exercises: each reference passes its own check).

The list names tests by file and function (all parameters), so that their files stay untouched; an entry
whose file is collected but has no such test function fails the collection, so the list cannot go stale.
See CONTRIBUTING.md, "Test tiers".
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from site_cache import NbvalSiteCache

import course_lib.checks  # noqa: F401  (adds the course's exercise package: get_exercise finds exercises in it)

# nbval reads a cell's messages only after the cell has finished. A long training cell with a widget progress
# bar sends a message at every refresh (tqdm's default: ten a second), and the kernel's message socket keeps at
# most 1000 unread ones: past that it drops messages, the cell's closing "idle" among them, and nbval fails
# with "Timeout of 5 seconds exceeded waiting for output" (notebooks 05 and 07 did so in CI). Under test the
# bars refresh at most every 2 s; kernels started later (nbval's, nbclient's) inherit this environment, since
# every conftest is imported at collection, before any test runs. A learner's JupyterLab, which reads as it
# goes, keeps tqdm's default.
os.environ.setdefault("TQDM_MININTERVAL", "2")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


# The grading fixtures are submissions to grade (some hostile on purpose), not notebooks for nbval to run.
collect_ignore_glob = ["grading_fixtures/*"]

# "file::test function": why it is slow. Seconds are wall time of all its parameters together, measured on the
# shared 2-core machine under a load average of 13-17 (an idle machine takes several times less).
SLOW_TESTS = {
    "tests/test_exercises.py::test_check_rejects_known_mistake": "every mistake of every exercise (~220 s)",
    "tests/test_exercises.py::test_check_accepts_correct_alternative": "every alternative (~100 s)",
    "tests/test_exercises.py::test_reference_passes_hidden_cases": "hidden cases, three seeds (~70 s)",
    "tests/test_assignment.py::test_checks_reject_every_mistake": "every mistake of the assignment (~30 s)",
    "tests/test_assignment.py::test_checks_accept_correct_alternatives": "every alternative (~30 s)",
    "tests/test_assignment.py::test_most_mistakes_get_their_own_hint": "runs every mistake again (~15 s)",
    "tests/test_benchmarks.py::test_every_benchmark_accepts_quick": "starts each benchmark script (~150 s)",
    "tests/test_benchmarks.py::test_run_all_quick_subset_end_to_end": "runs a benchmark (~65 s)",
    "tests/test_docs.py::test_pdoc_builds_the_reference_without_warnings": "builds the API reference (~95 s)",
    "tests/test_docs.py::test_every_docstring_example_runs": "runs every docstring example of the package (~35-90 s)",
    "tests/test_training.py::test_train_loop_learns_and_records": "trains a model (~50 s)",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rootdir = config.rootpath
    modules = {}  # file -> its test module, for the files collected
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
            continue
        file = item.path.relative_to(rootdir).as_posix() if item.path.is_relative_to(rootdir) else str(item.path)
        if getattr(item, "module", None) is not None:
            modules[file] = item.module
        if f"{file}::{getattr(item, 'originalname', item.name)}" in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
    stale = sorted(key for key in SLOW_TESTS
                   if key.split("::")[0] in modules and not hasattr(modules[key.split("::")[0]], key.split("::")[1]))
    if stale:
        raise pytest.UsageError(f"conftest.py SLOW_TESTS names tests that do not exist any more: {stale}")
    # The site test last: it builds from the notebooks nbval has executed in this session (site_cache.py).
    items.sort(key=lambda item: item.path.name == "test_site.py")


def pytest_configure(config: pytest.Config) -> None:
    # A plugin, not hooks of this conftest: a conftest's test hooks see only the items below its folder, and
    # this one must see nbval's cells in notebooks/.
    config.pluginmanager.register(NbvalSiteCache(), "course-site-cache")
