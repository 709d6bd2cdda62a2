"""A pytest plugin: every notebook that nbval executes without error is also written, with its outputs, to the
website's cache of executed notebooks (``tools/build_site.py``), so the site test builds from it instead of
executing every notebook a second time.

``make test`` executes each notebook once under nbval (the course's test of the notebooks) and then builds the
site (``tests/test_site.py``). The site shows the same notebooks executed the same way (a fresh kernel, the
course's default step counts), so the site test reuses nbval's run: when the last cell of a notebook has
passed, this plugin writes the notebook with the outputs nbval received to
``build/site-cache/notebooks/<name>-<key>.ipynb`` under the key ``build_site.py`` computes itself (the
notebook's source, course_lib, data/, the pins, the smoke flag). A notebook with a failing or skipped cell is
not written; a notebook whose key changed since is not found there, and the site build executes it as before.

nbval keeps the outputs a cell sent (streams, displays, results, errors) but not the ``clear_output``
messages; no course notebook clears its output, so the page is the one nbclient would write.
"""

from __future__ import annotations

import copy
import importlib.util
import os
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


class NbvalSiteCache:
    """Collects each course notebook's cell outputs from nbval and writes the notebook when all its cells passed."""

    def __init__(self) -> None:
        self.cells: dict[Path, list[pytest.Item]] = {}  # notebook -> its nbval cell items, in order
        self.outputs: dict[Path, dict[int, list]] = defaultdict(dict)  # notebook -> code cell's number -> outputs
        self.failed: set[Path] = set()
        self.written: set[Path] = set()

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
