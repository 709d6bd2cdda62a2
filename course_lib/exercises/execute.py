"""Execute a notebook with nbclient in a kernel of the running Python environment.

Used by the tests (student and solved notebooks) and as the base of the grading command. The kernel is
always this interpreter (``sys.executable``), whatever kernelspecs a user has installed elsewhere.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import nbformat
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

__all__ = ["CurrentEnvKernelManager", "execute_notebook", "check_statuses"]


class CurrentEnvKernelManager(AsyncKernelManager):
    """A kernel manager that starts ``sys.executable -m ipykernel_launcher`` and nothing else."""

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        return [sys.executable, "-m", "ipykernel_launcher", "-f", os.path.realpath(self.connection_file),
                *(extra_arguments or [])]


def execute_notebook(nb: nbformat.NotebookNode, cwd: str | Path, timeout: int = 600,
                     allow_errors: bool = False) -> nbformat.NotebookNode:
    """Run every cell of ``nb`` (in place) with ``cwd`` as the working directory; return it.

    Raises ``nbclient.exceptions.CellExecutionError`` on the first failing cell unless ``allow_errors``.
    """
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
                            kernel_manager_class=CurrentEnvKernelManager,
                            resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


_STATUS = re.compile(r"^\S*\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*): (?P<status>passed|failed|not implemented yet|"
                     r"not defined|error|invalid)\b", re.MULTILINE)


def check_statuses(nb: nbformat.NotebookNode) -> dict[str, str]:
    """``{exercise: status}`` read from the printed verdicts of an executed notebook's check cells.

    A check cell that printed no verdict is reported as ``"no verdict"``.
    """
    found: dict[str, str] = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("course", {})
        if cell.cell_type != "code" or meta.get("role") != "check":
            continue
        text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        match = _STATUS.search(text)
        found[meta["exercise"]] = match.group("status") if match and match.group("name") == meta["exercise"] \
            else "no verdict"
    return found
