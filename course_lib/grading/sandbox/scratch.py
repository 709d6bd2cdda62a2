"""The grader's scratch folders: named after the process that made them, removed by the next run if left.

A run that is killed (SIGKILL, a machine stop) cannot remove its library copies and job folders; the next
run of the grader finds them by name, sees that the process that made them is gone, and removes them.

Example:
    >>> folder = scratch_folder("lib")
    >>> folder.name.startswith(f"course-grade-lib-{os.getpid()}-")
    True
    >>> folder.rmdir()
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

__all__ = ["scratch_folder", "remove_stale"]

_NAME = re.compile(r"^course-grade-(?:[a-z]+-)?(\d+)-")
_CLEANED = threading.Event()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def remove_stale(folder: Path | None = None) -> list[Path]:
    """Remove the grader's scratch folders in ``folder`` (the temporary folder) whose process is gone."""
    root = Path(folder or tempfile.gettempdir())
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _NAME.match(entry.name)
        if match and entry.is_dir() and not entry.is_symlink() and not _alive(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def scratch_folder(kind: str) -> Path:
    """A new scratch folder ``course-grade-<kind>-<pid>-<random>``; the first one of a run removes stale ones."""
    if not _CLEANED.is_set():
        _CLEANED.set()
        remove_stale()
    return Path(tempfile.mkdtemp(prefix=f"course-grade-{kind}-{os.getpid()}-"))
