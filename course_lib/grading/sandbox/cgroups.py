"""Control groups around one sandbox: a cap on its processes and on its memory, shared memory included.

The runner's rlimits bound one process each; two holes remain that only the kernel's control groups close:
``RLIMIT_NPROC`` is not enforced for root (a grader run as root, as in CI or a container, would let a fork
bomb fill the machine's process table), and memory that no process maps (``memfd``, ``/dev/shm``, tmpfs
files) escapes ``RLIMIT_AS``. Where this process may create control groups (root, with the ``pids`` and
``memory`` controllers mounted: cgroup v1 at ``/sys/fs/cgroup/<controller>`` or v2 at ``/sys/fs/cgroup``),
:class:`SandboxCgroup` makes one group per sandbox and :meth:`SandboxCgroup.wrap` prefixes the sandbox's
command line with a shell that joins the group before it ``exec``s bubblewrap, so every process of the
sandbox is born inside it. Elsewhere it does nothing, and the rlimits are the bound (``docs/grading.md``).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["SandboxCgroup"]

_ROOT = Path("/sys/fs/cgroup")


def _group_dirs(name: str) -> dict[str, Path]:
    """Where the group's control files live, per controller (v2: one folder for both)."""
    if (_ROOT / "cgroup.controllers").exists():  # cgroup v2, unified
        controllers = (_ROOT / "cgroup.subtree_control").read_text().split()
        if {"pids", "memory"} <= set(controllers):
            return {"pids": _ROOT / name, "memory": _ROOT / name}
        return {}
    found = {c: _ROOT / c / name for c in ("pids", "memory", "cpu") if (_ROOT / c / "cgroup.procs").exists()}
    return found if {"pids", "memory"} <= set(found) else {}


class SandboxCgroup:
    """One control group for one sandbox: at most ``max_pids`` tasks (threads count) and ``memory_mb``, and
    ``cpus`` CPUs' worth of time where cgroup v2 delegates the ``cpu`` controller (0: no CPU limit)."""

    def __init__(self, max_pids: int, memory_mb: int, cpus: float = 0.0) -> None:
        self.dirs: dict[str, Path] = {}
        self.cpu_limited = False
        if os.geteuid() != 0:
            return
        dirs = _group_dirs(f"course-grade-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            for folder in set(dirs.values()):
                folder.mkdir()
            self.dirs = dirs
            self._write("pids", "pids.max", str(max_pids))
            limit = str(memory_mb << 20)
            self._write("memory", "memory.max" if self._v2 else "memory.limit_in_bytes", limit)
        except OSError:  # not allowed here after all: the rlimits remain the bound
            self.remove()
            return
        self.cpu_limited = cpus > 0 and self._limit_cpu(cpus)

    def _limit_cpu(self, cpus: float) -> bool:
        """A CPU share (``cpus`` CPUs' worth of time per 100 ms: cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``),
        where the host lets the grader use the ``cpu`` controller; False where it does not (the scheduler's
        fairness is then all there is)."""
        period = 100_000
        quota = max(1000, int(cpus * period))
        try:
            if self._v2:
                if "cpu" not in (_ROOT / "cgroup.subtree_control").read_text().split():
                    return False
                self._write("pids", "cpu.max", f"{quota} {period}")
                return True
            if "cpu" not in self.dirs:
                return False
            self._write("cpu", "cpu.cfs_period_us", str(period))
            self._write("cpu", "cpu.cfs_quota_us", str(quota))
            return True
        except OSError:
            return False

    @property
    def _v2(self) -> bool:
        return bool(self.dirs) and self.dirs["pids"] == self.dirs["memory"]

    @property
    def active(self) -> bool:
        """Whether the sandbox will run inside the group."""
        return bool(self.dirs)

    def _write(self, controller: str, name: str, value: str) -> None:
        (self.dirs[controller] / name).write_text(value)

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started from inside the group (a shell joins it, then ``exec``s the command)."""
        if not self.dirs:
            return argv
        procs = sorted({str(folder / "cgroup.procs") for folder in self.dirs.values()})
        # A join the kernel refuses must not stop the sandbox (every student would score 0): it then runs
        # under the runner's rlimits alone, and the fork_bomb fixture fails the tests where that happens.
        joins = "; ".join(f"echo $$ 2>/dev/null > '{path}'" for path in procs)
        return ["/bin/sh", "-c", f'{joins}; exec "$@"', "sandbox", *argv]

    def remove(self) -> None:
        """Remove the group (after the sandbox's processes are gone; a busy group is left to the kernel)."""
        for folder in set(self.dirs.values()):
            try:
                folder.rmdir()
            except OSError:
                pass
        self.dirs = {}
