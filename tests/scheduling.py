"""How ``make test`` shares the suite between its pytest-xdist workers (``-n 2 --dist loadfile``).

pytest-xdist's ``loadfile`` keeps each file's tests on one worker: a notebook's nbval cells share one kernel, and
tests that share a module fixture (the site build, the class edition, the grader's sandboxes, JupyterLab) build it
once. But a whole file on one worker puts a long sweep (every known mistake of every exercise) on one core. So
:class:`CourseScheduling` is ``loadfile`` with one exception: the tests named in ``SPREAD_TESTS``
(``tests/conftest.py``, which checks that none of them uses a module fixture) are work units of their own, one per
parameter, taken by whichever worker is free.

(``--dist loadgroup`` with ``xdist_group`` marks would say the same per test, but pytest-xdist 3.8 marks a group by
rewriting an attribute pytest 9 no longer reads, so its groups are silently ignored: cells of one notebook ran on
both workers.)

Work units are handed out in collection order (``--no-loadscope-reorder``), the order ``tests/conftest.py``
gives: the notebooks first, the site after them, single tests last to fill the workers' ends.
"""

from __future__ import annotations

from collections.abc import Collection

import pytest
from xdist.scheduler import LoadScopeScheduling


def function_key(nodeid: str) -> str:
    """``file::test function`` of a node id (parameters dropped), the form SPREAD_TESTS lists.

    >>> function_key("tests/checks/test_exercises.py::test_check_rejects_known_mistake[scaled_dot-no_scale]")
    'tests/checks/test_exercises.py::test_check_rejects_known_mistake'
    """
    file, _, rest = nodeid.partition("::")
    return f"{file}::{rest.split('[', 1)[0].split('::', 1)[0]}"


def work_unit(nodeid: str, spread: Collection[str]) -> str:
    """The work unit of a test: the test itself when its function is in ``spread``, else its file.

    >>> work_unit("notebooks/07_training_and_decoding.ipynb::Cell 15", spread=())
    'notebooks/07_training_and_decoding.ipynb'
    >>> work_unit("tests/test_a.py::test_sweep[3]", spread={"tests/test_a.py::test_sweep"})
    'tests/test_a.py::test_sweep[3]'
    """
    return nodeid if function_key(nodeid) in spread else nodeid.partition("::")[0]


class CourseScheduling(LoadScopeScheduling):
    """pytest-xdist's ``loadfile`` scheduling, with the tests of ``spread`` scheduled one by one."""

    def __init__(self, config: pytest.Config, log: object | None = None, *, spread: Collection[str]) -> None:
        super().__init__(config, log)
        self.spread = frozenset(spread)

    def _split_scope(self, nodeid: str) -> str:
        return work_unit(nodeid, self.spread)
