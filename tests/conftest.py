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

Sampled sweeps: ``make test`` (CI) runs a documented share of the parameters of the sweeps in
``SAMPLED_TESTS`` (every exercise keeps at least one of its parameters); ``make test-all``
(``COURSE_TEST_ALL=1``) runs every parameter. The sample is drawn from a seed (``COURSE_SAMPLE_SEED``, by
default the UTC date, so successive days' runs cover different parameters), printed in the report's header
with the command that reruns the same sample; what was left out is counted as "deselected" and listed per
test in the summary, never dropped silently. A test named on the command line (``file::test[...]``) or
picked with ``-k`` is never sampled out. See CONTRIBUTING.md, "Test tiers".
"""

from __future__ import annotations

import datetime
import faulthandler
import hashlib
import importlib.util
import math
import os
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import pytest
from site_cache import NbvalSiteCache

import course_lib.checks  # noqa: F401  (adds the course's exercise package: get_exercise finds exercises in it)
from course_lib.runtime import configure_threads

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


def load_tool(name: str) -> ModuleType:
    """``tools/<name>.py`` as a module (tools/ is not a package), loaded once per process."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)  # before it runs: its dataclasses look it up
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


# The grading fixtures are submissions to grade (some hostile on purpose), not notebooks for nbval to run.
collect_ignore_glob = ["grading/grading_fixtures/*"]

# "file::test function": why it is slow. Seconds are wall time of all its parameters together, measured on the
# shared 2-core machine under a load average of 13-17 (an idle machine takes several times less).
SLOW_TESTS = {
    "tests/checks/test_exercises.py::test_check_rejects_known_mistake": "every mistake of every exercise (~220 s)",
    "tests/checks/test_exercises.py::test_check_accepts_correct_alternative": "every alternative (~100 s)",
    "tests/checks/test_exercises.py::test_reference_passes_hidden_cases": "hidden cases, three seeds (~70 s)",
    "tests/grading/test_assignment.py::test_checks_reject_every_mistake": "every mistake of the assignment (~30 s)",
    "tests/grading/test_assignment.py::test_checks_accept_correct_alternatives": "every alternative (~30 s)",
    "tests/grading/test_assignment.py::test_most_mistakes_get_their_own_hint": "runs every mistake again (~15 s)",
    "tests/repository/test_benchmarks.py::test_every_benchmark_accepts_quick": "starts each benchmark script (~150 s)",
    "tests/repository/test_benchmarks.py::test_run_all_quick_subset_end_to_end": "runs a benchmark (~65 s)",
    "tests/repository/test_docs.py::test_pdoc_builds_the_reference_without_warnings":
        "builds the API reference (~95 s)",
    "tests/repository/test_docs.py::test_every_docstring_example_runs":
        "runs every docstring example of the package (~35-90 s)",
    "tests/training/test_training.py::test_train_loop_learns_and_records": "trains a model (~50 s)",
    "tests/exercises/test_check_imports.py::test_no_check_imports_torch_dynamo_or_sympy":
        "every check, fresh Python (~60 s)",
    "tests/exercises/test_one_verdict.py::test_every_mistake_and_alternative_gets_one_verdict_from_the_four_entry_points":
        "every mistake and alternative through the four entry points (~180 s)",
}


# "file::test function": the share of its parameters that `make test` (CI) runs; `make test-all` runs them all.
# Seconds: all parameters together, on the shared 2-core machine beside other work.
SAMPLED_TESTS = {
    "tests/checks/test_exercises.py::test_check_rejects_known_mistake": 1 / 4,  # ~220 s in all
    "tests/checks/test_exercises.py::test_check_accepts_correct_alternative": 1 / 3,  # ~100 s
    "tests/checks/test_exercises.py::test_reference_passes_hidden_cases": 1 / 3,  # ~70 s: one of three seeds
    "tests/grading/test_assignment.py::test_checks_reject_every_mistake": 1 / 3,  # ~30 s
    "tests/grading/test_assignment.py::test_checks_accept_correct_alternatives": 1 / 3,  # ~30 s
    # Every known mistake and alternative through the four entry points that judge a call (~180 s CPU in all, plus
    # the class edition's stored data of every exercise, 4-18 s CPU, built once for the file): one answer in eight
    # of each exercise (63 of 363; the file: 67 s CPU at a load of 9-17 on 2 cores, and 32 s with one in six at 1.5).
    "tests/exercises/test_one_verdict.py::test_every_mistake_and_alternative_gets_one_verdict_from_the_four_entry_points":
        1 / 8,
    "tests/repository/test_benchmarks.py::test_every_benchmark_accepts_quick": 1 / 4,  # ~150 s: one Python start each
    # Each solved notebook executed with nbclient (smoke mode); every reference passes its check in the fast
    # tier, and nbval runs every notebook with the course's own code in full.
    "tests/notebooks/test_notebook_versions.py::test_solved_version_passes_every_check": 1 / 3,
    # Each notebook recorded and then run unsolved in its own week's class edition (--graded NN, smoke mode): only
    # the sampled ones are built (tests/edition/test_edition.py, graded_edition), so the sample saves both executions.
    "tests/edition/test_edition.py::test_the_editions_notebook_runs_unsolved_with_the_editions_course_lib": 1 / 3,
    # Each week's withheld library built and searched by behaviour for its own week's exercises
    # (tests/grading/answer_search.py, 10-40 s a week): a third of the weeks a day. COURSE_TEST_ALL=1 searches every
    # week, and every week's library for every later week's exercises too (about ten times as long).
    "tests/grading/test_withheld_library.py::test_no_callable_of_a_weeks_library_computes_a_graded_result_of_that_week":
        1 / 3,
    "tests/grading/test_withheld_library.py::test_an_earlier_exercise_restored_computes_no_later_result_of_its_week":
        1 / 7,
}


# "file::test function": sweeps whose parameters are independent (no module fixture: conftest checks it), run one
# by one on either xdist worker under `make test`; every other test runs on one worker with the rest of its file
# (tests/scheduling.py). The long sweeps of a file would otherwise all land on one worker.
SPREAD_TESTS = frozenset({
    "tests/checks/test_exercises.py::test_check_rejects_known_mistake",
    "tests/checks/test_exercises.py::test_check_accepts_correct_alternative",
    "tests/checks/test_exercises.py::test_reference_passes_hidden_cases",
    "tests/grading/test_assignment.py::test_checks_reject_every_mistake",
    "tests/grading/test_assignment.py::test_checks_accept_correct_alternatives",
    "tests/repository/test_benchmarks.py::test_every_benchmark_accepts_quick",
    "tests/notebooks/test_notebook_versions.py::test_solved_version_passes_every_check",
})


def run_everything() -> bool:
    """True under ``make test-all`` (``COURSE_TEST_ALL=1``): no sweep is sampled."""
    return os.environ.get("COURSE_TEST_ALL", "") == "1"


def sample_seed() -> str:
    """The seed of this run's sample: $COURSE_SAMPLE_SEED, else today's UTC date (one sample a day)."""
    return os.environ.get("COURSE_SAMPLE_SEED") or datetime.datetime.now(datetime.UTC).strftime("%Y%m%d")


def sample(names: list[str], share: float, salt: str = "") -> list[str]:
    """``ceil(share * len(names))`` of ``names`` (at least one), drawn from :func:`sample_seed`, in their order.

    Every name is ranked by a hash of the seed, ``salt`` and the name, so the draw depends on nothing else
    (not on the other names, the collection order or Python's hash seed): the same seed gives the same sample.
    """
    keep = max(1, math.ceil(share * len(names)))
    rank = sorted(names, key=lambda name: hashlib.sha256(f"{sample_seed()}:{salt}:{name}".encode()).hexdigest())
    chosen = set(rank[:keep])
    return [name for name in names if name in chosen]


def _group(item: pytest.Item) -> str:
    """The stratum of a parameter: its exercise when it has one (each exercise keeps a parameter), else one."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    exercise = params.get("ex")
    return getattr(exercise, "name", "") if exercise is not None else ""


def _explicitly_chosen(config: pytest.Config) -> bool:
    """True when the command line names single tests or filters with -k: those run as asked, unsampled."""
    return bool(config.option.keyword) or any("::" in str(arg) for arg in config.args)


def _sample_sweeps(config: pytest.Config, items: list[pytest.Item], keys: dict[pytest.Item, str]) -> None:
    """Deselect the parameters of SAMPLED_TESTS left out of this run's sample (reported, see the summary)."""
    if run_everything() or _explicitly_chosen(config):
        return
    strata: dict[tuple[str, str], list[pytest.Item]] = defaultdict(list)
    for item in items:
        key = keys.get(item, "")
        if key in SAMPLED_TESTS:
            strata[(key, _group(item))].append(item)
    left_out: list[pytest.Item] = []
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # test -> [kept, all]
    for (key, group), members in strata.items():
        kept = set(sample([m.nodeid for m in members], SAMPLED_TESTS[key], salt=key + group))
        left_out += [m for m in members if m.nodeid not in kept]
        counts[key][0] += len(kept)
        counts[key][1] += len(members)
    if left_out:
        gone = set(left_out)
        items[:] = [item for item in items if item not in gone]
        config.hook.pytest_deselected(items=left_out)
    config.stash[SAMPLED_KEY] = dict(counts)


SAMPLED_KEY = pytest.StashKey[dict]()
#: Samples drawn inside a test (which notebooks the JupyterLab test opened): one line each, in the summary.
SAMPLE_NOTES: list[str] = []


def pytest_report_header(config: pytest.Config) -> str:
    if run_everything():
        return "course sweeps: all parameters (COURSE_TEST_ALL=1)"
    return (f"course sweeps: sampled with seed {sample_seed()} (rerun this sample: COURSE_SAMPLE_SEED={sample_seed()}; "
            "every parameter: make test-all or COURSE_TEST_ALL=1)")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    counts = config.stash.get(SAMPLED_KEY, {})
    if counts or SAMPLE_NOTES:
        terminalreporter.section("sampled sweeps (make test-all runs every parameter)")
        for key, (kept, total) in sorted(counts.items()):
            terminalreporter.write_line(f"{key}: {kept} of {total} parameters (seed {sample_seed()})")
        for note in SAMPLE_NOTES:
            terminalreporter.write_line(note)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rootdir = config.rootpath
    modules = {}  # file -> its test module, for the files collected
    keys: dict[pytest.Item, str] = {}  # item -> "file::test function"
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
            continue
        file = item.path.relative_to(rootdir).as_posix() if item.path.is_relative_to(rootdir) else str(item.path)
        if getattr(item, "module", None) is not None:
            modules[file] = item.module
        keys[item] = f"{file}::{getattr(item, 'originalname', item.name)}"
        if keys[item] in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
    for name, listed in (("SLOW_TESTS", SLOW_TESTS), ("SAMPLED_TESTS", SAMPLED_TESTS), ("SPREAD_TESTS", SPREAD_TESTS),
                         ("BEFORE_THE_SITE", BEFORE_THE_SITE)):
        stale = sorted(key for key in listed if key.split("::")[0] in modules
                       and not hasattr(modules[key.split("::")[0]], key.split("::")[1]))
        if stale:
            raise pytest.UsageError(f"conftest.py {name} names tests that do not exist any more: {stale}")
    if gone := sorted(file for file in WAITING_FILES if not (rootdir / file).is_file()):
        raise pytest.UsageError(f"conftest.py WAITING_FILES names files that do not exist any more: {gone}")
    _sample_sweeps(config, items, keys)
    spread = [key for item, key in keys.items() if key in SPREAD_TESTS and _shares_fixture(item)]
    if spread:
        raise pytest.UsageError(f"conftest.py SPREAD_TESTS names tests that share a module fixture (keep them with "
                                f"their file): {sorted(set(spread))}")
    items.sort(key=_run_order)


def _shares_fixture(item: pytest.Item) -> bool:
    """True when the test uses a fixture of module, class or package scope (built once for the tests that share
    it: those tests must run on one xdist worker, or each worker would build it again)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:  # not a Python test function (a notebook's cell): it stays with its file anyway
        return True
    return any(fixture.scope in ("module", "class", "package")
               for fixtures in info.name2fixturedefs.values() for fixture in fixtures)


#: "file::test function": tests whose build the site reuses (``tests/repository/test_docs.py`` stores its pdoc build of
#: the API reference in the site's cache: tools/build_site.py, store_api_reference). They run first, so that their build
#: is there when the site is built; run after the site (as every other single test), the site ran pdoc a third time.
BEFORE_THE_SITE = frozenset({"tests/repository/test_docs.py::test_pdoc_builds_the_reference_without_warnings"})


#: Grouped files that spend much of their time waiting (Chromium renders JupyterLab while a kernel runs; the test
#: polls): they go first among the grouped files, beside the other worker's last notebooks (notebook 13 trains in two
#: processes) rather than beside the site's build and crawl, which wait too. In the same window the two left about
#: 120 core-seconds idle.
WAITING_FILES = frozenset({"tests/notebooks/test_browser_lab.py"})


def _run_order(item: pytest.Item) -> tuple[int, int]:
    """The order the run takes (a stable sort keeps collection order within each rank), for xdist and serial runs:

    0. the tests of ``BEFORE_THE_SITE`` (under xdist: their file), then the notebooks (nbval), the longest work:
       they start first, and the site is built from their executions;
    1. the other grouped tests (a file sharing a fixture: the class edition, JupyterLab, the grader), those of
       ``WAITING_FILES`` first;
    2. the site test (``tests/website/test_site.py``): it builds from the notebooks nbval executed in this session
       (site_cache.py); under xdist it waits for those still running on the other worker;
    3. every other test, one by one: while one worker builds and reads the site, the other takes these; the slow
       ones (``@pytest.mark.slow``: a distributed run, a benchmark script) first, so that the run ends on short
       tests that the two workers share evenly, not on one worker's minute-long test while the other waits.
    """
    if item.path.suffix == ".ipynb" or f"{item.nodeid.split('::')[0]}::{getattr(item, 'originalname', '')}" \
            in BEFORE_THE_SITE:
        return 0, 0
    if item.path.name == "test_site.py":
        return 2, 0
    if _shares_fixture(item):
        return 1, -1 if item.nodeid.split("::")[0] in WAITING_FILES else 0
    return 3, 0 if item.get_closest_marker("slow") is not None else 1


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadfile`` (``make test``): the course's scheduling (tests/scheduling.py), a file per worker except
    the sweeps of ``SPREAD_TESTS``, whose parameters go to either worker one by one."""
    if config.getvalue("dist") != "loadfile":
        return None
    from scheduling import CourseScheduling

    return CourseScheduling(config, log, spread=SPREAD_TESTS)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On an xdist worker: hand the sampled sweeps' counts and notes to the controller, which prints the summary
    (the workers collect and sample; the controller collects nothing)."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["course_sampled"] = session.config.stash.get(SAMPLED_KEY, {})
        output["course_sample_notes"] = list(SAMPLE_NOTES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """On the xdist controller: take a finished worker's counts (every worker drew the same sample) and notes."""
    output = getattr(node, "workeroutput", None) or {}
    if output.get("course_sampled"):
        node.config.stash[SAMPLED_KEY] = output["course_sampled"]  # type: ignore[attr-defined]
    SAMPLE_NOTES.extend(note for note in output.get("course_sample_notes", []) if note not in SAMPLE_NOTES)


#: A test that runs longer than this (seconds) is stopped, with every thread's traceback: no test hangs the run. A
#: test may set its own with ``@pytest.mark.timeout(seconds)`` (every distributed test does); COURSE_TEST_TIMEOUT
#: changes the default. A notebook cell has nbval's own limit (``--nbval-cell-timeout``), below this one.
DEFAULT_TIMEOUT = float(os.environ.get("COURSE_TEST_TIMEOUT", "1800"))
_TERMINAL: list[object] = []  # the run's own stderr, kept before output capture takes it over


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """Arm a watchdog for the test's setup, call and teardown. It lives in C (``faulthandler``), so it fires even
    when a thread hangs holding the interpreter's lock (a gloo process group's destructor at teardown did, for 15
    minutes): it prints every thread's stack and ends the process, which fails the run instead of hanging it."""
    marker = item.get_closest_marker("timeout")
    seconds = float(marker.args[0]) if marker is not None and marker.args else DEFAULT_TIMEOUT
    faulthandler.dump_traceback_later(seconds, exit=True, file=_TERMINAL[0] if _TERMINAL else sys.stderr)
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()


def pytest_configure(config: pytest.Config) -> None:
    capture = config.pluginmanager.getplugin("capturemanager")
    saved = getattr(getattr(getattr(capture, "_global_capturing", None), "err", None), "targetfd_save", None)
    _TERMINAL[:] = [os.fdopen(os.dup(saved if isinstance(saved, int) else sys.stderr.fileno()), "w")]
    # A plugin, not hooks of this conftest: a conftest's test hooks see only the items below its folder, and
    # this one must see nbval's cells in notebooks/.
    config.pluginmanager.register(NbvalSiteCache(config), "course-site-cache")
    _share_the_cores(config)


def _share_the_cores(config: pytest.Config) -> None:
    """On a pytest-xdist worker: PyTorch's threads in this process set to the worker's share of the CPUs (one each
    for ``make test``'s two workers on two cores). PyTorch's default is a thread per core in every process, so two
    workers ran four threads on two cores, and a thread waiting for its partner spins on a core the other worker
    needs: with one core busy elsewhere, this repository's exercise and model tests took 56-61 CPU s with two
    threads and 33-36 with one. Kernels, sandboxes and other processes the tests start choose their own threads as
    before."""
    workers = getattr(config, "workerinput", {}).get("workercount")
    if workers:
        configure_threads(max(1, (os.cpu_count() or 1) // int(workers)))
