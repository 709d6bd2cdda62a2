"""Running a grading notebook with nbclient: time limits, a memory-limited kernel, restarts after attacks.

:func:`execute` runs, in a fresh temporary folder, the grader's setup cell and then, for every exercise in
the course's order, the learner's cell and the grader's harness cell. When a cell exceeds its time limit,
kills the kernel (``os._exit``), or the harness leaves no output (an IPython hook blanked it, say), that
exercise gets ``timeout`` / ``error`` and a **fresh kernel** takes over: setup again, replay of the earlier
exercise cells that ran cleanly (later exercises may use them), then the next exercise. One bad exercise
costs its own points only.

Outputs of the learner's cells are kept only to quote an error; at most 64 kB per cell are recorded, so a
cell that prints without end cannot exhaust the grader's memory.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import site
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from . import harness as H
from .kernel import kernel_manager_class

__all__ = ["execute", "CappedClient"]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_OUTPUT_CAP = 64 * 1024


class CappedClient(NotebookClient):
    """A NotebookClient that records at most 64 kB of output per cell and drops the rest."""

    def output(self, outs: list[Any], msg: dict[str, Any], display_id: str | None, cell_index: int) -> Any:
        if msg.get("msg_type") == "error":
            return super().output(outs, msg, display_id, cell_index)
        content = msg.get("content", {})
        incoming = len(str(content.get("text", ""))) + sum(len(str(v)) for v in content.get("data", {}).values())
        size = sum(len(json.dumps(o.get("text", ""))) + len(json.dumps(o.get("data", {}))) for o in outs)
        if size + incoming > _OUTPUT_CAP:  # the message itself counts: one print of 150 MB is not kept
            return None
        return super().output(outs, msg, display_id, cell_index)


def _read_roots(course_folder: Path) -> list[str]:
    import course_lib

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sysconfig.get_paths()["stdlib"],
             sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
             str(Path(course_lib.__file__).resolve().parent), "/usr/lib", "/usr/share", "/lib", "/usr/local/lib"}
    try:
        roots.update(site.getsitepackages())
    except AttributeError:  # pragma: no cover - virtualenv's old site module
        pass
    roots.add(str(course_folder))  # an assignment's checks module (imported to poison its reference)
    return sorted(r for r in roots if r)


def _setup_source(course: Any, workdir: Path) -> str:
    from .runner import STANDARD_IMPORTS

    lines = ["# grader: setup (not the learner's code)", *STANDARD_IMPORTS]
    for line in course.setup_lines:
        lines += ["try:", f"    {line}", "except Exception:", "    pass"]
    lines += ["check = lambda name, impl, *args, **kwargs: impl  # the notebook's check, left in a cell: a no-op",
              "torch.set_num_threads(1)", "_grader_warm = torch.ones(2, 2) @ torch.ones(2, 2)",
              "import course_lib.exercises.core", "import course_lib.grading.harness as _grader_harness",
              f"_grader_harness.install({str(workdir)!r}, {_read_roots(course.folder)!r})",
              "del _grader_harness, _grader_warm"]
    return "\n".join(lines)


def _harness_source(manifest: Path) -> str:
    return ("# grader: harness (not the learner's code)\n"
            "import course_lib.grading.harness as _grader_harness\n"
            f"_grader_harness.run({str(manifest)!r}, globals())\n"
            "del _grader_harness")


def _poison_source(manifest: Path) -> str:
    return ("# grader: the exercise's reference is disabled while the learner's cell runs\n"
            "import course_lib.grading.harness as _grader_harness\n"
            f"_grader_harness.poison_during_cell({str(manifest)!r})\n"
            "del _grader_harness")


_RESTORE_SOURCE = ("# grader: the reference again (the harness poisons it once more for the hidden cases)\n"
                   "import course_lib.grading.harness as _grader_harness\n"
                   "_grader_harness.restore_after_cell()\n"
                   "del _grader_harness")


def _checkfill_source(spec: Any) -> str:
    """What the notebook's check cell leaves behind (``softmax_fn = ...``): the course's reference."""
    ref = spec.exercise.reference
    module, qualname = getattr(ref, "__module__", ""), getattr(ref, "__qualname__", "")
    if not spec.check_targets or not module or "." in qualname or "<" in qualname:
        return ""
    lines = ["try:"] + [f"    from {module} import {qualname} as {t}" for t in spec.check_targets]
    return "\n".join(lines + ["except Exception:", "    pass"])


def _error_of(cell: Any) -> tuple[str, str, str] | None:
    """``(ename, evalue, line)`` of the error a cell raised, or None."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            tb = _ANSI.sub("", "\n".join(out.get("traceback", [])))
            found = re.findall(r"line (\d+)", tb)
            return str(out.get("ename", "")), str(out.get("evalue", ""))[:400], (f"line {found[-1]}" if found else "")
    return None


def _kernel_env(workdir: Path, extra_path: str) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir), "TMPDIR": str(workdir),
        "IPYTHONDIR": str(workdir / ".ipython"), "MPLCONFIGDIR": str(workdir / ".mpl"), "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "COURSE_DEVICE": "cpu",
        "PYTHONDONTWRITEBYTECODE": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1", "LANG": "C.UTF-8",
        "PYTHONPATH": extra_path, "JUPYTER_PLATFORM_DIRS": "1",
        "PYTHONSAFEPATH": "1",  # the working folder (where cells may write files) is never on sys.path
    }
    return env


class _Session:
    """One kernel: started, set up, fed cells, torn down."""

    def __init__(self, course: Any, workdir: Path, config: Any, deadline: float) -> None:
        self.nb = nbformat.v4.new_notebook()
        cpu = int(config.total_timeout * 2 + 60)
        self.client = CappedClient(
            self.nb, timeout=int(config.cell_timeout), kernel_name="python3", allow_errors=True,
            kernel_manager_class=kernel_manager_class(config.memory_mb, cpu),
            resources={"metadata": {"path": str(workdir)}}, shutdown_kernel="immediate",
            startup_timeout=int(config.startup_timeout), record_timing=False, iopub_timeout=5,
            interrupt_on_timeout=False, raise_on_iopub_timeout=False)
        self.workdir, self.config, self.deadline = workdir, config, deadline
        self.env = _kernel_env(workdir, course.extra_path)
        self._ctx: Any = None

    def __enter__(self) -> _Session:
        self._ctx = self.client.setup_kernel(env=self.env, cwd=str(self.workdir), stderr=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self._ctx.__exit__(None, None, None)
        except Exception:  # noqa: BLE001 - a kernel that is already gone
            pass

    def run(self, source: str, limit: float | None = None) -> tuple[str, Any]:
        """Run one cell: ``("ok" | "error" | "timeout" | "dead", cell)``."""
        remaining = self.deadline - time.monotonic()
        budget = min(self.config.cell_timeout if limit is None else limit, remaining)
        if budget < 0.5:
            return "timeout-total", None
        cell = nbformat.v4.new_code_cell(source)
        self.nb.cells.append(cell)
        self.client.timeout = max(1, int(round(budget)))
        try:
            self.client.execute_cell(cell, len(self.nb.cells) - 1)
        except CellTimeoutError:
            return ("timeout" if budget >= self.config.cell_timeout - 0.5 else "timeout-total"), cell
        except DeadKernelError:
            return "dead", cell
        except Exception:  # noqa: BLE001 - anything else from the kernel: treat it as lost
            return "dead", cell
        return ("error" if _error_of(cell) else "ok"), cell


def _timeout_message(kind: str, config: Any, where: str) -> str:
    if kind == "timeout-total":
        return f"the submission's time limit ({config.total_timeout:g} s) ran out during {where}"
    return f"{where} ran longer than the per-cell limit of {config.cell_timeout:g} s (an endless loop?)"


def execute(course: Any, items: list[dict[str, Any]], config: Any, deadline: float
            ) -> tuple[dict[str, dict[str, Any]], int]:
    """Run the exercises ``items`` (those with a ``cell`` to run); return outcomes by name and kernel starts.

    An outcome is ``{"status": "ran", "outputs": {...}}`` (to be judged by the grader) or a final status
    (``timeout``, ``error``, ``not-implemented``) with a message.
    """
    from .runner import make_workdir, remove_workdir

    workdir = make_workdir()
    outcomes: dict[str, dict[str, Any]] = {}
    starts = 0
    todo = [it for it in items if it["cell"] is not None]
    # A skipped exercise (stub left, forbidden, missing) still binds the names its check cell would define
    # (``xxx_fn`` = the reference), so that a later exercise using them runs, as it does in the notebook.
    pending: list[str] = []
    for it in items:
        if it["cell"] is None:
            fill = _checkfill_source(it["spec"])
            if fill:
                pending.append(fill)
        else:
            it["prefills"], pending = pending, []
    replay: list[str] = []  # what a fresh kernel must run again after a restart, in order
    for number, item in enumerate(todo):
        spec = item["spec"]
        item["stem"] = f"ex{number}_{secrets.token_hex(4)}"
        item["nonce"] = secrets.token_hex(16)
        manifest = {"stem": item["stem"], "nonce": item["nonce"], "exercise": spec.exercise.name,
                    "target": spec.target, "grad": spec.exercise.grad,
                    "differentiable": spec.exercise.differentiable, "cases": spec.described,
                    "forbidden": list(spec.exercise.forbidden_calls),
                    "reference": {"module": getattr(spec.exercise.reference, "__module__", ""),
                                  "qualname": getattr(spec.exercise.reference, "__qualname__", "")}}
        item["manifest"] = H.write_inputs(workdir, item["stem"], manifest, spec.arrays)
    try:
        position = 0
        while position < len(todo):
            if deadline - time.monotonic() < 1:
                break
            starts += 1
            try:
                session = _Session(course, workdir, config, deadline)
                session.__enter__()
            except Exception as err:  # noqa: BLE001 - the kernel could not start
                for item in todo[position:]:
                    outcomes[item["spec"].exercise.name] = {
                        "status": "error", "message": f"the grading kernel did not start ({type(err).__name__}: "
                                                      f"{str(err)[:200]})"}
                break
            try:
                kind, cell = session.run(_setup_source(course, workdir), limit=max(60.0, config.cell_timeout))
                if kind != "ok":
                    detail = _error_of(cell) if cell is not None else None
                    message = "the grader's setup cell failed in the kernel"
                    if detail:
                        message += f" ({detail[0]}: {detail[1]}; is --memory-mb too small?)"
                    elif kind.startswith("timeout"):
                        message += " (time limit)"
                    for item in todo[position:]:
                        outcomes[item["spec"].exercise.name] = {"status": "error", "message": message}
                    break
                for source in replay:  # replay what ran cleanly (and the names bound) before the restart
                    session.run(source)
                restart = False
                while position < len(todo) and not restart:
                    item = todo[position]
                    position += 1
                    name = item["spec"].exercise.name
                    item["checkfill"] = _checkfill_source(item["spec"])
                    for fill in item.get("prefills", []):
                        session.run(fill)
                        replay.append(fill)
                    session.run(_poison_source(item["manifest"]))
                    kind, cell = session.run(item["cell"])
                    if kind not in ("timeout", "timeout-total", "dead"):
                        session.run(_RESTORE_SOURCE)
                    if kind in ("timeout", "timeout-total", "dead"):
                        outcomes[name] = {
                            "status": "timeout" if kind.startswith("timeout") else "error",
                            "message": _timeout_message(kind, config, "the exercise cell") if kind != "dead" else
                            "the exercise cell stopped the kernel (it crashed, exited or ran out of memory)"}
                        if item["checkfill"]:
                            replay.append(item["checkfill"])
                        restart = True
                        continue
                    if kind == "error":
                        ename, evalue, line = _error_of(cell) or ("Error", "", "")
                        status = "not-implemented" if ename == "NotImplementedError" else "error"
                        memory = "can't allocate memory" in evalue or ename == "MemoryError"
                        outcomes[name] = {"status": status, "line": line,
                                          "message": f"the exercise cell raised {ename}: {evalue}" +
                                          (f" (over the memory limit of {config.memory_mb} MB)" if memory else "")}
                        if item["checkfill"]:
                            session.run(item["checkfill"])
                            replay.append(item["checkfill"])
                        continue
                    kind, _ = session.run(_harness_source(item["manifest"]))
                    outputs = H.read_outputs(workdir, item["stem"], item["nonce"])
                    if kind in ("timeout", "timeout-total", "dead") or outputs is None:
                        if kind.startswith("timeout"):
                            outcomes[name] = {"status": "timeout",
                                              "message": _timeout_message(kind, config, "the hidden cases")}
                        elif kind == "dead":
                            outcomes[name] = {"status": "error", "message": "the kernel died while your code ran on "
                                              "the hidden cases (it crashed, exited or ran out of memory)"}
                        else:
                            outcomes[name] = {"status": "error", "message": "the grader's harness cell did not run "
                                              "or its output was altered: the exercise cell changed how the "
                                              "kernel runs later cells"}
                        if item["checkfill"]:
                            replay.append(item["checkfill"])
                        restart = True
                        continue
                    outcomes[name] = {"status": "ran", "outputs": outputs}
                    replay += [_poison_source(item["manifest"]), item["cell"], _RESTORE_SOURCE]
                    if item["checkfill"]:
                        session.run(item["checkfill"])
                        replay.append(item["checkfill"])
            finally:
                session.__exit__(None, None, None)
        for item in todo:
            outcomes.setdefault(item["spec"].exercise.name, {
                "status": "timeout", "message": f"not run: the submission's time limit ({config.total_timeout:g} s) "
                                                f"ran out"})
    finally:
        if not config.keep_workdir:
            remove_workdir(workdir)
    return outcomes, starts
