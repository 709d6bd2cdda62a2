"""Running one submission's exercises in the sandbox: time limits, restarts, nothing trusted.

:func:`execute` writes the submission's job (its exercise and helper cells, each exercise's hidden inputs
as ``.npz``, the course's setup lines, the limits) into a fresh folder, starts the runner in a sandbox
(:mod:`course_lib.grading.sandbox`) and follows its frames: each exercise's cell and its hidden cases get
``--timeout-cell`` seconds each, the whole submission ``--timeout-total``. When an exercise overruns, or the
sandbox dies or goes silent, that exercise gets ``timeout``/``error``, the container is killed (every
process in it dies), and a fresh sandbox replays the earlier exercises that ran cleanly, then goes on with
the next exercise. One attacked exercise costs its own points only.

Each result is judged as soon as it arrives (``judge``, the grader's, outside the sandbox): an exercise that
did not pass ends its sandbox, and the next one starts with that exercise's reference present (its cell not
replayed, its check cell binding the reference), as in the notebook, whose check falls back to the
reference: a later exercise that builds on it is graded on its own merits. An outcome is
``{"status": "judged", "verdict": (status, message, hint, cases passed, line)}`` or a final status with a
message.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .cgroups import SandboxCgroup
from .results import UntrustedData, parse_header
from .sandbox import SandboxRun, command, unsandboxed_command

__all__ = ["Limits", "Plan", "execute"]

_MB = 1 << 20
#: The largest message a sandbox may send (one exercise's outputs); the grader keeps one per exercise.
MAX_FRAME = 16 * _MB
#: Where the grader may make control groups (root): a sandbox's tasks (threads count) and its memory, shared
#: memory and its tmpfs folders included, on top of the runner's own limit (``course_lib.grading.cgroups``).
MAX_TASKS = 256
CGROUP_SLACK_MB = 1536  # above the address-space limit (+1024) and the tmpfs folders: a backstop


@dataclass
class Limits:
    """What a submission may use (see ``docs/grading.md``)."""

    cell_timeout: float = 30.0
    total_timeout: float = 300.0
    memory_mb: int = 1024
    startup_timeout: float = 60.0
    disk_mb: int = 64
    sandbox: bool = True

    def runner_limits(self) -> dict[str, int]:
        """The rlimits the runner sets on itself: address space leaves room for torch's mapped libraries."""
        return {"data_mb": self.memory_mb, "as_mb": self.memory_mb + 1024, "cpu_s": int(self.total_timeout * 2 + 60),
                "fsize_mb": 8, "nofile": 32, "nproc": 64}


@dataclass
class Plan:
    """What the grader runs for one submission, exercise by exercise in the course's order."""

    setup: list[str]
    exercises: list[dict[str, Any]] = field(default_factory=list)
    arrays: list[dict[str, np.ndarray] | None] = field(default_factory=list)


def write_job(folder: Path, plan: Plan, limits: Limits) -> None:
    """The job folder the sandbox mounts read-only: ``job.json`` and one ``.npz`` per exercise that runs."""
    for number, (exercise, arrays) in enumerate(zip(plan.exercises, plan.arrays, strict=True)):
        if exercise["cell"] is not None and arrays is not None:
            exercise["inputs"] = f"inputs{number}.npz"
            np.savez(folder / exercise["inputs"], **arrays)
    job = {"setup": plan.setup, "exercises": plan.exercises, "limits": limits.runner_limits()}
    (folder / "job.json").write_text(json.dumps(job, ensure_ascii=True), encoding="ascii")
    folder.chmod(0o755)
    for path in folder.iterdir():
        path.chmod(0o644)


class _Follower:
    """Follows one sandbox's frames, recording outcomes; says where a fresh sandbox must start."""

    def __init__(self, plan: Plan, limits: Limits, deadline: float, outcomes: dict[int, dict[str, Any]],
                 judge: Callable[[int, dict[str, Any], bytes], tuple]) -> None:
        self.plan, self.limits, self.deadline, self.outcomes, self.judge = plan, limits, deadline, outcomes, judge
        self.current: int | None = None
        self.phase = "setup"
        self.until = min(deadline, time.monotonic() + limits.startup_timeout + limits.cell_timeout)
        self.clean: list[int] = []

    def _set_phase(self, phase: str) -> None:
        self.phase = phase
        self.until = min(self.deadline, time.monotonic() + self.limits.cell_timeout)

    def _fail_rest(self, start: int, status: str, message: str) -> int:
        for number in range(start, len(self.plan.exercises)):
            if self.plan.exercises[number]["cell"] is not None:
                self.outcomes.setdefault(number, {"status": status, "message": message})
        return len(self.plan.exercises)

    def on_silence(self, start: int) -> int:
        """No frame in time: the running exercise (or the setup) overran."""
        total = self.until >= self.deadline - 0.01
        if self.current is None:
            why = "the submission's time limit ran out" if total else "the sandbox's setup ran out of time"
            return self._fail_rest(start, "timeout", why)
        where = "the exercise cell" if self.phase == "cell" else "the hidden cases"
        self.outcomes[self.current] = {"status": "timeout", "message": (
            f"the submission's time limit ({self.limits.total_timeout:g} s) ran out during {where}" if total else
            f"{where} ran longer than the per-cell limit of {self.limits.cell_timeout:g} s (an endless loop?)")}
        return self.current + 1

    def on_end(self, start: int, problem: str) -> int:
        """The sandbox is gone (finished, crashed, exited, or killed for sending too much)."""
        if self.phase == "done":
            return len(self.plan.exercises)
        if self.current is None:
            return self._fail_rest(start, "error", problem or "the sandbox stopped during the grader's setup "
                                   "(is --memory-mb too small?)")
        if self.current in self.outcomes:
            return self.current + 1
        where = "the exercise cell" if self.phase == "cell" else "your code on the hidden cases"
        self.outcomes[self.current] = {"status": "error", "message": problem or (
            f"the sandbox stopped while {where} ran (it crashed, exited or ran out of memory)")}
        return self.current + 1

    def on_frame(self, header: dict[str, Any], arrays: bytes, start: int) -> str:
        """Record one frame; ``"done"`` when the runner said so, ``"restart"`` after a failed exercise
        (when exercises remain), else ``""``."""
        event, number = header.get("event"), header.get("exercise")
        if event == "done":
            self.phase = "done"
            return "done"
        valid = isinstance(number, int) and not isinstance(number, bool) and start <= number < len(
            self.plan.exercises) and self.plan.exercises[number]["cell"] is not None
        if not valid or number in self.outcomes:
            return ""
        if event in ("cell", "cases"):
            self.current = number
            self._set_phase(event)
        elif event == "result":
            verdict = self.judge(number, header, arrays)
            self.outcomes[number] = {"status": "judged", "verdict": verdict}
            self._set_phase("between")
            if verdict[0] == "pass":
                self.clean.append(number)
            elif any(ex["cell"] is not None for ex in self.plan.exercises[number + 1:]):
                self.phase, self.current = "done", number
                return "restart"
        return ""


def _run_once(library: Callable[[frozenset[int]], Path], job: Path, work: Path, start: int,
              follower: _Follower) -> int:
    """One sandbox from exercise ``start``; returns where the next one must start."""
    argv = [str(start), ",".join(str(n) for n in follower.clean)]
    lib = library(frozenset(n for n, ex in enumerate(follower.plan.exercises)
                            if ex["cell"] is not None and (n >= start or n in follower.clean)))
    limits = follower.limits
    group = SandboxCgroup(MAX_TASKS, limits.memory_mb + CGROUP_SLACK_MB) if limits.sandbox else None
    build = (lambda fd: group.wrap(command(lib, job, argv, limits.disk_mb, fd))) if group else (
        lambda fd: unsandboxed_command(lib, job, argv))
    run = SandboxRun(build, max_frame=MAX_FRAME, max_total=4 * MAX_FRAME, work=work)
    grace = 0.0
    try:
        while True:
            frame = run.next(follower.until - time.monotonic())
            if frame is None:
                return follower.on_silence(start)
            if frame is SandboxRun.EOF:
                return follower.on_end(start, run.problem)
            try:
                header = parse_header(frame.header)
            except UntrustedData:
                continue
            said = follower.on_frame(header, frame.arrays, start)
            if said == "restart":
                return int(follower.current or 0) + 1
            if said == "done":
                grace = 10.0  # the runner is done: let it exit (its CPU time is then accounted to the grader)
                return len(follower.plan.exercises)
    finally:
        run.close(grace)
        if group is not None:
            group.remove()


def execute(library: Callable[[frozenset[int]], Path], plan: Plan, limits: Limits, deadline: float,
            judge: Callable[[int, dict[str, Any], bytes], tuple]) -> tuple[dict[int, dict[str, Any]], int]:
    """Run the plan's exercises (those with a cell); ``(outcomes by exercise number, sandboxes started)``.

    ``library(withheld)`` gives the sandbox's library with the references of exercises ``withheld`` taken out;
    ``judge(number, header, arrays)`` the verdict of one exercise's result.
    """
    folder = Path(tempfile.mkdtemp(prefix="course-grade-"))
    outcomes: dict[int, dict[str, Any]] = {}
    starts = 0
    try:
        (folder / "job").mkdir()
        (folder / "work").mkdir()
        write_job(folder / "job", plan, limits)
        follower = _Follower(plan, limits, deadline, outcomes, judge)
        position = 0
        todo = [n for n, ex in enumerate(plan.exercises) if ex["cell"] is not None]
        while any(n >= position for n in todo) and deadline - time.monotonic() > 1:
            starts += 1
            follower.current, follower.phase = None, "setup"
            follower.until = min(deadline, time.monotonic() + limits.startup_timeout + limits.cell_timeout)
            position = _run_once(library, folder / "job", folder / "work", position, follower)
        for number in todo:
            outcomes.setdefault(number, {"status": "timeout", "message": (
                f"not run: the submission's time limit ({limits.total_timeout:g} s) ran out")})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return outcomes, starts
