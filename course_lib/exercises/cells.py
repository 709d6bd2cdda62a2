"""How each exercise cell last ran in the learner's kernel, so that a check never judges what a failed run left.

A check finds the learner's function by its name (``check("lm_loss")`` reads the notebook's ``lm_loss``). The
name alone cannot say whether the cell that defines it ran cleanly the last time: a cell stopped by a
``SyntaxError`` defines nothing, so the name is missing (a fresh kernel) or still holds what an earlier run
left (a correct answer, then a broken edit: the old answer would keep passing under the new error).

IPython reports every cell it runs to the callbacks of its ``post_run_cell`` event, with the cell's text and
whether it raised. :func:`install` registers a :class:`CellTracker` there (once per kernel; importing the
check machinery does it), which records, for each top-level ``def``/``class`` name a cell holds, whether
that cell's last run raised. The cell is recognised by the names its text defines, read with a regular
expression so that a cell that does not parse is recognised too. Outside IPython (plain Python, the
grading command's sandbox) nothing is installed and :func:`last_run` knows nothing: checks work as before.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["CellRun", "CellTracker", "defined_names", "install", "last_run"]

_DEFINITION = re.compile(r"^(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_]\w*)", re.MULTILINE)


def defined_names(source: str) -> list[str]:
    """The names a cell's text defines with a top-level ``def`` or ``class`` (text that does not parse too).

    >>> defined_names("import torch\\n\\ndef lm_loss(logits, tokens:\\n    return 0\\n")
    ['lm_loss']
    """
    return list(dict.fromkeys(_DEFINITION.findall(source)))


@dataclass(frozen=True)
class CellRun:
    """The last run of the cell that defines a name.

    Attributes:
        error: what stopped the cell (a ``SyntaxError`` before its first line, or any exception it raised);
            ``None`` when it ran to the end.
        removed: the cell that defined the name ran again without defining it (the ``def`` was renamed or
            deleted): what the name holds is left over from an earlier run.
    """

    error: BaseException | None = None
    removed: bool = False

    @property
    def succeeded(self) -> bool:
        return self.error is None and not self.removed


class CellTracker:
    """IPython ``post_run_cell`` callback: records each cell's outcome under the names the cell defines."""

    def __init__(self) -> None:
        self.runs: dict[str, CellRun] = {}
        self._names_by_cell: dict[str, list[str]] = {}

    def __call__(self, result: Any) -> None:
        """Record one finished cell (IPython's ``ExecutionResult``)."""
        info = getattr(result, "info", None)  # read defensively: an error here would show under every cell
        names = defined_names(str(getattr(info, "raw_cell", "") or ""))
        failed = not getattr(result, "success", True)
        error = (getattr(result, "error_before_exec", None) or getattr(result, "error_in_exec", None)
                 or RuntimeError("the cell did not finish")) if failed else None
        cell_id = getattr(info, "cell_id", None)
        if cell_id:  # a cell run again without a name it defined before (JupyterLab sends cell ids)
            for gone in set(self._names_by_cell.get(cell_id, [])) - set(names):
                self.runs[gone] = CellRun(removed=True)
            self._names_by_cell[cell_id] = names
        for name in names:
            self.runs[name] = CellRun(error=error)


def _current_shell() -> Any:
    """The running IPython shell, or None (IPython not imported: plain Python never imports it here)."""
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None


def _tracker_of(shell: Any) -> CellTracker | None:
    """The tracker registered in ``shell`` (found by class name, so that a reloaded module finds its own)."""
    callbacks = getattr(getattr(shell, "events", None), "callbacks", {}).get("post_run_cell", [])
    return next((cb for cb in callbacks if type(cb).__name__ == CellTracker.__name__), None)


def install(shell: Any = None) -> CellTracker | None:
    """Register a :class:`CellTracker` in ``shell`` (the running IPython shell by default), once; return it.

    Returns None outside IPython. Calling it again returns the tracker already registered.
    """
    shell = shell if shell is not None else _current_shell()
    events = getattr(shell, "events", None)
    if events is None:
        return None
    tracker = _tracker_of(shell)
    if tracker is None:
        tracker = CellTracker()
        events.register("post_run_cell", tracker)
    return tracker


def last_run(name: str, shell: Any = None) -> CellRun | None:
    """How the cell defining ``name`` last ran in ``shell`` (the running one by default); None if unknown."""
    tracker = _tracker_of(shell if shell is not None else _current_shell())
    return None if tracker is None else tracker.runs.get(name)
