"""A pytest plugin: every notebook that nbval executes without error is also written, with its outputs, to the
website's cache of executed notebooks (``tools/build_site.py``), so the site test builds from it instead of
executing every notebook a second time.

``make test`` executes each notebook once under nbval (the course's test of the notebooks) and then builds the
site (``tests/website/test_site.py``). The site shows the same notebooks executed the same way (a fresh kernel, the
course's default step counts), so the site test reuses nbval's run: when the last cell of a notebook has
passed, this plugin writes the notebook with the outputs nbval received to
``build/site-cache/notebooks/<name>-<key>.ipynb`` under the key ``build_site.py`` computes itself (the
notebook's source, course_lib, data/, the pins, the smoke flag). A notebook with a failing or skipped cell is
not written; a notebook whose key changed since is not found there, and the site build executes it as before.

nbval keeps the outputs a cell sent (streams, displays, results, errors) but not the ``clear_output``
messages; no course notebook clears its output, so the page is the one nbclient would write.

Under pytest-xdist (``make test`` runs two workers) each notebook runs on one worker (``tests/conftest.py`` keeps
a notebook's cells in one ``xdist_group``) and the site test on one of them, perhaps another. So the outcome of
every notebook (written, or failed) is also left as an empty file in a folder all workers of the run share
(beside their temporary folders), and :meth:`NbvalSiteCache.wait_for_notebooks` lets the site test wait for the
notebooks another worker is still executing, rather than find them missing and execute them all again.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import time
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_build_site() -> ModuleType:
    """tools/build_site.py as a module (tools/ is not a package): its cache keys are the ones to write under."""
    spec = importlib.util.spec_from_file_location("build_site", ROOT / "tools" / "build_site.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def smoke_mode() -> bool:
    """The mode the notebooks run in under test (COURSE_SMOKE=1 shortens the training loops)."""
    return os.environ.get("COURSE_SMOKE", "") == "1"


def cached_path(build_site: ModuleType, notebook: Path, smoke: bool) -> Path:
    """Where build_site.py looks for ``notebook`` executed in this mode (its default cache folder)."""
    return build_site.cached_notebook(build_site.default_cache(), notebook, build_site.environment_key(smoke))


def shared_status_folder(config: pytest.Config) -> Path | None:
    """Under pytest-xdist, a folder that every worker of this run shares (beside the workers' own temporary
    folders, which xdist places in the run's): the notebooks' outcomes are left there. None without xdist."""
    if not hasattr(config, "workerinput") or not config.option.basetemp:
        return None
    return Path(config.option.basetemp).parent / "course-nbval-notebooks"


class NbvalSiteCache:
    """Collects each course notebook's cell outputs from nbval and writes the notebook when all its cells passed."""

    def __init__(self, config: pytest.Config | None = None) -> None:
        self.cells: dict[Path, list[pytest.Item]] = {}  # notebook -> its nbval cell items, in order
        self.outputs: dict[Path, dict[int, list]] = defaultdict(dict)  # notebook -> code cell's number -> outputs
        self.failed: set[Path] = set()
        self.written: set[Path] = set()
        self.shared = shared_status_folder(config) if config is not None else None

    def _leave(self, notebook: Path, outcome: str) -> None:
        """Tell the other workers (if any) that ``notebook`` is done: ``outcome`` is "written" or "failed"."""
        if self.shared is not None:
            self.shared.mkdir(parents=True, exist_ok=True)
            (self.shared / f"{notebook.name}.{outcome}").touch()

    def outcomes(self) -> dict[Path, str]:
        """Each collected notebook that is done in this run, on any worker: "written" or "failed"."""
        done = {path: "failed" for path in self.failed} | {path: "written" for path in self.written}
        if self.shared is not None:
            for path in self.cells:
                for outcome in ("written", "failed"):
                    if (self.shared / f"{path.name}.{outcome}").exists():
                        done.setdefault(path, outcome)
        return done

    def wait_for_notebooks(self, timeout: float = 3600.0, poll: float = 2.0) -> dict[Path, str]:
        """Wait until every notebook nbval collected in this run is done (on whichever worker); its outcomes.

        Without xdist the site test runs after every notebook (tests/conftest.py orders it so), so nothing waits.
        Under xdist the site test is scheduled after every notebook's group has been handed to a worker; only the
        notebooks still running on the other worker are waited for. A notebook nobody will finish (a crashed
        worker) ends the wait at ``timeout`` seconds, and the site is then built from what is there.
        """
        deadline = time.monotonic() + timeout
        while len(done := self.outcomes()) < len(self.cells) and time.monotonic() < deadline:
            time.sleep(poll)
        return done

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            path = Path(str(item.path))
            if path.suffix == ".ipynb" and path.parent == ROOT / "notebooks" and hasattr(item, "cell_num"):
                self.cells.setdefault(path, []).append(item)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
        report = yield
        path = Path(str(item.path))
        if path not in self.cells or (report.when != "call" and report.passed):
            return report
        if not report.passed:
            if path not in self.failed:
                self._leave(path, "failed")
            self.failed.add(path)
        elif report.when == "call":
            self.outputs[path][item.cell_num] = list(item.test_outputs or [])
            if len(self.outputs[path]) == len(self.cells[path]) and path not in self.failed:
                self.write(path)
        return report

    def write(self, notebook: Path) -> None:
        """The notebook with nbval's outputs, in the site's cache (atomically, like build_site.py)."""
        build_site = load_build_site()
        nb = nbformat.read(notebook, as_version=4)
        code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]  # nbval numbers these from 0
        for number, cell in enumerate(code_cells):
            cell.execution_count = number + 1
            cell.outputs = [copy.deepcopy(out) for out in self.outputs[notebook][number]]
            for out in cell.outputs:
                if out.output_type == "execute_result":
                    out.execution_count = number + 1
        nbformat.validate(nb)
        destination = cached_path(build_site, notebook, smoke_mode())
        destination.parent.mkdir(parents=True, exist_ok=True)
        partial = destination.with_suffix(".partial")
        nbformat.write(nb, partial)
        partial.replace(destination)
        self.written.add(notebook)
        self._leave(notebook, "written")
