"""How ``make test`` shares the suite between two pytest-xdist workers (tests/scheduling.py, tests/conftest.py)
and how the site test finds the notebooks the other worker executed (tests/site_cache.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import conftest
import pytest
import torch
from scheduling import function_key, work_unit
from site_cache import NbvalSiteCache


def test_a_notebooks_cells_and_a_files_tests_are_one_work_unit() -> None:
    spread = {"tests/test_a.py::test_sweep"}
    cells = [work_unit(f"notebooks/07_training_and_decoding.ipynb::Cell {n}", spread) for n in (0, 15)]
    assert cells == ["notebooks/07_training_and_decoding.ipynb"] * 2
    assert work_unit("tests/test_a.py::test_other[x]", spread) == "tests/test_a.py"
    assert work_unit("tests/test_a.py::test_sweeping[1]", spread) == "tests/test_a.py"  # a longer name is not it
    # The parameters of a spread sweep are units of their own, distinct from each other.
    assert work_unit("tests/test_a.py::test_sweep[1]", spread) == "tests/test_a.py::test_sweep[1]"
    assert work_unit("tests/test_a.py::test_sweep[a::b]", spread) == "tests/test_a.py::test_sweep[a::b]"
    assert function_key("tests/test_a.py::test_sweep[a::b]") == "tests/test_a.py::test_sweep"


def test_every_spread_sweep_is_also_slow_or_sampled() -> None:
    # Spreading is for the long sweeps; a fast test spread alone would only add scheduling messages.
    assert conftest.SPREAD_TESTS <= set(conftest.SLOW_TESTS) | set(conftest.SAMPLED_TESTS)


def _worker_config(base: Path, worker: str) -> SimpleNamespace:
    """What NbvalSiteCache reads of an xdist worker's config: its input and its own temporary folder."""
    return SimpleNamespace(workerinput={"workerid": worker}, option=SimpleNamespace(basetemp=str(base / worker)))


def test_the_site_test_sees_the_notebooks_another_worker_executed(tmp_path: Path) -> None:
    first, second = (NbvalSiteCache(_worker_config(tmp_path, w)) for w in ("popen-gw0", "popen-gw1"))
    done, failed, running = (Path(f"notebooks/{n}.ipynb") for n in ("00_a", "01_b", "02_c"))
    for recorder in (first, second):
        recorder.cells = {done: [], failed: [], running: []}
    first._leave(done, "written")
    first._leave(failed, "failed")
    assert second.outcomes() == {done: "written", failed: "failed"}
    started = time.monotonic()
    assert second.wait_for_notebooks(timeout=0.3, poll=0.05) == {done: "written", failed: "failed"}
    assert time.monotonic() - started >= 0.3  # it waited for the notebook still running, up to the timeout
    second._leave(running, "written")
    assert first.wait_for_notebooks(timeout=60) == {done: "written", failed: "failed", running: "written"}


def test_without_xdist_nothing_is_shared_and_nothing_waits(tmp_path: Path) -> None:
    recorder = NbvalSiteCache(SimpleNamespace(option=SimpleNamespace(basetemp=str(tmp_path))))
    assert recorder.shared is None
    recorder.cells = {Path("notebooks/00_a.ipynb"): []}
    recorder.written.add(Path("notebooks/00_a.ipynb"))
    assert recorder.wait_for_notebooks(timeout=0) == {Path("notebooks/00_a.ipynb"): "written"}


def test_the_workers_sample_counts_reach_the_controllers_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "SAMPLE_NOTES", [])
    controller = SimpleNamespace(stash=pytest.Stash())
    counts = {"tests/test_x.py::test_sweep": [3, 9]}
    for note in ("lab: 4 of 14 notebooks", "lab: 4 of 14 notebooks"):  # each worker sends its notes
        node = SimpleNamespace(config=controller, workeroutput={"course_sampled": counts,
                                                                "course_sample_notes": [note]})
        conftest.pytest_testnodedown(node, None)
    assert controller.stash[conftest.SAMPLED_KEY] == counts
    assert conftest.SAMPLE_NOTES == ["lab: 4 of 14 notebooks"]


@pytest.mark.parametrize(("workers", "expected"), [(2, "half"), (64, 1)])
def test_an_xdist_worker_runs_pytorch_on_its_share_of_the_cores(workers: int, expected: object) -> None:
    """Two workers on two cores must not run four spinning PyTorch threads (conftest._share_the_cores); a run
    without xdist keeps the thread count it had."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(7)
        conftest._share_the_cores(SimpleNamespace())  # not a worker: untouched
        assert torch.get_num_threads() == 7
        conftest._share_the_cores(SimpleNamespace(workerinput={"workercount": workers}))
        want = max(1, (os.cpu_count() or 1) // 2) if expected == "half" else expected
        assert torch.get_num_threads() == want
    finally:
        torch.set_num_threads(before)


def _item(nodeid: str, slow: bool = False, shared: bool = False) -> SimpleNamespace:
    """A stand-in for a collected test: what conftest._run_order reads."""
    file, _, name = nodeid.partition("::")
    scope = SimpleNamespace(scope="module" if shared else "function")
    return SimpleNamespace(path=Path(file), nodeid=nodeid, originalname=name.split("[")[0],
                           _fixtureinfo=SimpleNamespace(name2fixturedefs={"fixture": [scope]}),
                           get_closest_marker=lambda name: object() if slow and name == "slow" else None)


def test_the_run_starts_with_the_notebooks_and_ends_on_short_tests() -> None:
    """conftest._run_order: notebooks, then grouped files (the browser's first: it waits, and must not run beside
    the site, which waits too), then the site, then single tests, the slow ones (a distributed run) before the fast
    ones, so that no worker ends the run alone on a minute-long test."""
    lab = next(iter(conftest.WAITING_FILES))
    items = [_item("tests/a/test_fast.py::test_quick"), _item("tests/z/test_trainer.py::test_two_processes", slow=True),
             _item("tests/website/test_site.py::test_pages", shared=True),
             _item("tests/grading/test_grading.py::test_attack", slow=True, shared=True),
             _item(f"{lab}::test_runs", slow=True, shared=True),
             _item("notebooks/07_training_and_decoding.ipynb::Cell 3")]
    ordered = [item.nodeid for item in sorted(items, key=conftest._run_order)]
    assert ordered == ["notebooks/07_training_and_decoding.ipynb::Cell 3", f"{lab}::test_runs",
                       "tests/grading/test_grading.py::test_attack", "tests/website/test_site.py::test_pages",
                       "tests/z/test_trainer.py::test_two_processes", "tests/a/test_fast.py::test_quick"]
