"""Running one submission's exercises in the sandbox: the grader asks, the sandbox answers, the grader's clocks.

:func:`execute` writes the submission's job (its exercise and helper cells, the course's setup lines and check
cells, the limits; no hidden case) into a fresh folder, starts the runner in a sandbox
(:mod:`course_lib.grading.sandbox.sandbox`) and then *asks* it, one request at a time: run exercise N's cell; observe
exercise N on these hidden cases (the inputs travel with this request only); run N's check cell; replay N.
For each request the grader keeps exactly one answer, the first frame that carries the request's id and
exercise; anything else on the pipe (frames for other exercises, repeated answers, malformed data) is
ignored and counted in the report's notes. Every clock is the grader's own: a request gets
``--timeout-cell`` seconds from the moment it was sent, the submission ``--timeout-total`` from its start,
whatever the sandbox sends meanwhile.

When a request overruns, or the sandbox dies or goes silent, that exercise gets ``timeout``/``error``, the
container is killed (every process in it dies), and a fresh sandbox replays the earlier exercises that
passed, then goes on with the next exercise. An exercise that did not pass (or was not run: a stub, a refused
cell) ends its sandbox too when a later exercise is still to be graded, and the next sandbox's library has that
exercise's reference restored (:mod:`course_lib.grading.sandbox.libcopy`): its check binds the reference, as the
notebook's check falls back to it, so a wrong earlier exercise costs nothing in a later one. A sandbox never
holds the reference of the exercise it grades or of a later one. An outcome is
``{"status": "judged", "verdict": (status, message, hint, cases passed, line)}`` or a final status with a message.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import shutil
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..judging.results import UntrustedData, parse_header
from .cgroups import SandboxCgroup
from .codec import npz_bytes, witnessed_ops, witnessed_processes
from .sandbox import SandboxRun, command, unsandboxed_command
from .scratch import scratch_folder

__all__ = ["Limits", "Plan", "execute", "MAX_FRAMES"]

_MB = 1 << 20
#: The largest message a sandbox may send (one exercise's observations); one answer is kept per request.
MAX_FRAME = 16 * _MB
#: Messages one sandbox may send in all: one answer per request is all an honest runner sends.
MAX_FRAMES = 1000
#: Where the grader may make control groups (root): a sandbox's tasks (threads count) and its memory, shared
#: memory and its tmpfs folders included, on top of the runner's own limit (``course_lib.grading.sandbox.cgroups``).
MAX_TASKS = 256
CGROUP_SLACK_MB = 1536  # above the address-space limit (+1024) and the tmpfs folders: a backstop

Judge = Callable[[int, dict[str, Any], bytes], tuple]
#: The sandbox's library, given the names of the earlier exercises whose references it restores.
Library = Callable[[frozenset[str]], Path]


@dataclass
class Limits:
    """What a submission may use (see ``docs/grading.md``)."""

    cell_timeout: float = 30.0
    total_timeout: float = 300.0
    memory_mb: int = 1024
    startup_timeout: float = 60.0
    disk_mb: int = 64
    sandbox: bool = True
    cpu_share: float = 1.0  # CPUs a sandbox may use, where the host lets the grader set cgroup cpu.max
    modules: tuple[str, ...] = ()  # --allow-module: modules whose packages the sandbox shows beside the course's

    def runner_limits(self) -> dict[str, int]:
        """The rlimits the runner sets on itself: address space leaves room for torch's mapped libraries."""
        return {"data_mb": self.memory_mb, "as_mb": self.memory_mb + 1024, "cpu_s": int(self.total_timeout * 2 + 60),
                "fsize_mb": 8, "nofile": 32, "nproc": 64}


@dataclass
class Plan:
    """What the grader runs for one submission, exercise by exercise in the course's order."""

    setup: list[str]
    exercises: list[dict[str, Any]] = field(default_factory=list)
    cases: list[tuple[dict[str, np.ndarray], list[dict[str, Any]]] | None] = field(default_factory=list)


def write_job(folder: Path, plan: Plan, limits: Limits) -> None:
    """The job folder the sandbox mounts read-only: ``job.json`` only (the cells; hidden cases never)."""
    job = {"setup": plan.setup, "exercises": plan.exercises, "limits": limits.runner_limits()}
    (folder / "job.json").write_text(json.dumps(job, ensure_ascii=True), encoding="ascii")
    folder.chmod(0o755)
    (folder / "job.json").chmod(0o644)


class _Silence(Exception):
    """No answer to a request in time."""


class _Gone(Exception):
    """The sandbox ended (crashed, exited, was killed for what it sent)."""


class Conversation:
    """One sandbox: requests out through a pipe, exactly one answer kept per request, the grader's clock."""

    def __init__(self, run: SandboxRun, requests: int, notes: list[str]) -> None:
        self.run, self.requests, self.notes = run, requests, notes
        self.frames = 0
        self.asked = ""  # the id of the last request sent (the witness's marks carry it)

    def _frame(self, until: float) -> tuple[dict[str, Any], bytes]:
        frame = self.run.next(until - time.monotonic())
        if frame is None:
            raise _Silence
        if frame is SandboxRun.EOF:
            raise _Gone
        self.frames += 1
        if self.frames > MAX_FRAMES:
            self.run.problem = f"the sandbox sent more than {MAX_FRAMES} messages"
            self.run.kill()
            raise _Gone
        try:
            return parse_header(frame.header), frame.arrays
        except UntrustedData:
            return {}, b""

    def wait_ready(self, until: float) -> None:
        """The runner's first frame (before any learner code ran): its setup is done."""
        while True:
            header, _ = self._frame(until)
            if header.get("event") == "ready" and "id" not in header:
                return
            self.notes.append("a message that answers no request was ignored")

    def _send(self, header: dict[str, Any], blob: bytes, until: float) -> None:
        data = json.dumps(header, ensure_ascii=True).encode("ascii")
        payload = struct.pack(">I", len(data)) + data + blob
        view = memoryview(struct.pack(">Q", len(payload)) + payload)
        while view:
            left = until - time.monotonic()
            if left <= 0:
                raise _Silence
            _, ready, _ = select.select([], [self.requests], [], left)
            if ready:
                try:
                    view = view[os.write(self.requests, view[:1 << 16]):]
                except (BrokenPipeError, OSError):
                    raise _Gone from None

    def ask(self, what: str, number: int, timeout: float, deadline: float, extra: dict[str, Any] | None = None,
            blob: bytes = b"") -> tuple[dict[str, Any], bytes]:
        """Send one request; return its one answer. Raises :class:`_Silence` after ``timeout`` seconds from now
        (or at the submission's ``deadline``), :class:`_Gone` when the sandbox ended."""
        ident = secrets.token_hex(8)  # unguessable: an answer sent before its request cannot carry it
        self.asked = ident
        until = min(deadline, time.monotonic() + timeout)
        self._send({"id": ident, "do": what, "exercise": number, **(extra or {})}, blob, until)
        while True:
            header, arrays = self._frame(until)
            if header.get("id") == ident and header.get("exercise") == number:
                return header, arrays
            self.notes.append("a message that answers no request was ignored")


class _Grading:
    """The exercises of one submission through as many sandboxes as it takes."""

    def __init__(self, plan: Plan, limits: Limits, deadline: float, judge: Judge) -> None:
        self.plan, self.limits, self.deadline, self.judge = plan, limits, deadline, judge
        self.outcomes: dict[int, dict[str, Any]] = {}
        self.clean: list[int] = []
        self.notes: list[str] = []

    def graded(self) -> list[int]:
        return [n for n, ex in enumerate(self.plan.exercises) if ex["cell"] is not None]

    def _fail_from(self, start: int, status: str, message: str) -> int:
        for number in self.graded():
            if number >= start:
                self.outcomes.setdefault(number, {"status": status, "message": message})
        return len(self.plan.exercises)

    def _overran(self, number: int, where: str) -> None:
        total = time.monotonic() >= self.deadline - 0.05
        self.outcomes[number] = {"status": "timeout", "message": (
            f"the submission's time limit ({self.limits.total_timeout:g} s) ran out during {where}" if total else
            f"{where} ran longer than the per-cell limit of {self.limits.cell_timeout:g} s (an endless loop?)")}

    def _stopped(self, number: int, where: str, problem: str) -> None:
        self.outcomes[number] = {"status": "error", "message": problem or (
            f"the sandbox stopped while {where} ran (it crashed, exited or ran out of memory)")}

    def restored(self, start: int) -> frozenset[str]:
        """The exercises whose references a sandbox starting at ``start`` restores: those before the first
        exercise it grades that are not replayed as the learner's (they did not pass, or did not run)."""
        first = next((n for n in self.graded() if n >= start), len(self.plan.exercises))
        return frozenset(self.plan.exercises[n]["name"] for n in range(first) if n not in self.clean)

    def _earlier(self, talk: Conversation, start: int) -> None:
        """A fresh sandbox: the exercises before ``start`` as the notebook left them (passed ones replayed)."""
        for number in range(start):
            if number in self.clean:
                talk.ask("replay", number, self.limits.cell_timeout, self.deadline)
            talk.ask("check", number, self.limits.cell_timeout, self.deadline)

    def _one(self, talk: Conversation, number: int) -> bool:
        """Grade exercise ``number`` in this sandbox; True when the sandbox may go on to the next one."""
        exercise, step = self.plan.exercises[number], self.limits.cell_timeout
        if exercise["cell"] is None:
            talk.ask("check", number, step, self.deadline)
            return True
        where = "the exercise cell"
        try:
            answer, _ = talk.ask("cell", number, step, self.deadline)
            if answer.get("ran") is True:
                where = "your code on the hidden cases"
                arrays, described = self.plan.cases[number] or ({}, [])
                answer, blob = talk.ask("cases", number, step, self.deadline, {"cases": described},
                                        npz_bytes(arrays))
                record = answer.get("witness")
                answer["witness"] = witnessed_ops(record, talk.asked)  # None: no record of it
                answer["witness_processes"] = witnessed_processes(record)
            else:
                blob = b""
        except _Silence:
            self._overran(number, where)
            return False
        except _Gone:
            self._stopped(number, where, talk.run.problem)
            return False
        verdict = self.judge(number, answer, blob)
        self.outcomes[number] = {"status": "judged", "verdict": verdict}
        if verdict[0] != "pass":
            return False
        self.clean.append(number)
        talk.ask("check", number, step, self.deadline)
        return True

    def run_from(self, library: Library, job: Path, work: Path, start: int) -> int:
        """One sandbox from exercise ``start``; returns where the next one must start."""
        exercises = self.plan.exercises
        restored = self.restored(start)
        lib = library(restored)
        limits = self.limits
        group = SandboxCgroup(MAX_TASKS, limits.memory_mb + CGROUP_SLACK_MB, limits.cpu_share) \
            if limits.sandbox else None
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        build = (lambda fd: group.wrap(command(lib, job, limits.disk_mb, fd, read_end, limits.modules))) if group else (
            lambda fd: unsandboxed_command(lib, job, fd, read_end))
        try:
            run = SandboxRun(build, max_frame=MAX_FRAME, max_total=4 * MAX_FRAME, work=work, keep=read_end)
        finally:
            os.close(read_end)
        talk = Conversation(run, write_end, self.notes)
        number = start
        try:
            try:
                talk.wait_ready(min(self.deadline, time.monotonic() + limits.startup_timeout))
                self._earlier(talk, start)
            except _Silence:
                total = time.monotonic() >= self.deadline - 0.05
                return self._fail_from(start, "timeout", "the submission's time limit ran out" if total else
                                       "the sandbox's setup (or the replay of your earlier exercises) ran out of time")
            except _Gone:
                return self._fail_from(start, "error", run.problem or "the sandbox stopped during the grader's setup "
                                       "or the replay of your earlier exercises (is --memory-mb too small?)")
            while number < len(exercises):
                if exercises[number]["name"] not in restored and exercises[number]["cell"] is None and \
                        any(n > number for n in self.graded()):
                    return number  # a fresh sandbox from here, with this exercise's reference restored
                if not self._one(talk, number):
                    return number + 1
                number += 1
            return number
        except (_Silence, _Gone) as stop:  # a check cell after an exercise: that exercise keeps its verdict
            if number in self.clean:
                self.clean.remove(number)  # not replayed: the next sandbox binds the reference, as the notebook
            self.notes.append("the course's check cell after an exercise " + (
                "ran out of time" if isinstance(stop, _Silence) else "stopped its sandbox"))
            return number + 1
        finally:
            try:
                talk._send({"do": "exit"}, b"", time.monotonic() + 0.5)
            except (_Silence, _Gone):
                pass
            os.close(write_end)
            run.close(2.0)
            if group is not None:
                group.remove()


def execute(library: Library, plan: Plan, limits: Limits, deadline: float,
            judge: Judge) -> tuple[dict[int, dict[str, Any]], int, list[str]]:
    """Run the plan's exercises (those with a cell); ``(outcomes by exercise number, sandboxes started, notes)``.

    ``library(restored)`` gives the sandbox's library (the graded week's class edition with the references of
    ``restored`` earlier exercises, :mod:`course_lib.grading.sandbox.libcopy`);
    ``judge(number, answer, arrays)`` the verdict of one exercise from its answer.
    """
    folder = scratch_folder("job")
    grading = _Grading(plan, limits, deadline, judge)
    starts = 0
    try:
        (folder / "job").mkdir()
        (folder / "work").mkdir()
        write_job(folder / "job", plan, limits)
        position = 0
        todo = grading.graded()
        while any(n >= position and n not in grading.outcomes for n in todo) and deadline - time.monotonic() > 1:
            starts += 1
            position = grading.run_from(library, folder / "job", folder / "work", position)
        for number in todo:
            grading.outcomes.setdefault(number, {"status": "timeout", "message": (
                f"not run: the submission's time limit ({limits.total_timeout:g} s) ran out")})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    notes = sorted(set(grading.notes))
    counted = [f"{note} ({grading.notes.count(note)} time(s))" for note in notes]
    return grading.outcomes, starts, counted

