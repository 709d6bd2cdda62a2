"""The runner executed *inside* the sandbox: one submission's exercise cells, then the hidden cases.

Started by the grader as ``python -P sandbox_main.py JOB_DIR START REPLAY`` under bubblewrap (see
:mod:`course_lib.grading.sandbox`), with ``PYTHONPATH`` on the grader's copy of ``course_lib`` in which the
graded exercises' references are withheld. It imports nothing of the grader: only ``course_lib.grading.codec``
and ``course_lib.exercises.core`` from that copy, and the computing libraries.

It reads ``JOB_DIR/job.json`` (written by the grader, read-only here), sets its own resource limits before
any learner code runs, and then, for each exercise in the course's order:

1. announces the exercise's cell on the grader's pipe (the grader times it), runs the learner's helper
   cells and exercise cell in one namespace (as a notebook would), and hands the learner's function to the
   withheld reference's stand-in (so that course code calling the reference uses the learner's own);
2. announces the hidden cases, calls the learner's function or class on each (``run_case``), and sends the
   outputs as plain arrays (an ``.npz`` in memory, never a pickle) with a small JSON status;
3. runs the course's check cell with ``check`` bound to the identity (``softmax_fn = check(...)`` binds
   the learner's own function, which later exercises may use).

Nothing here is trusted by the grader: the learner's code runs in this same process and may change
anything in it. The grader only reads frames from its pipe with hard limits and compares the arrays
with its own reference outputs, outside the sandbox.

Frames: 8 bytes big-endian length, then the payload: 4 bytes JSON length, the JSON, the ``.npz`` bytes.
"""

from __future__ import annotations

import io
import json
import os
import resource
import struct
import sys
import traceback
from collections.abc import Callable
from typing import Any

_MB = 1 << 20
_CHANNEL = int(os.environ.get("COURSE_GRADE_CHANNEL", "3"))  # a pipe to the grader


def apply_limits(limits: dict[str, int]) -> None:
    """Hard resource limits on this process and every process it starts (learner code cannot raise them)."""
    pairs = {"RLIMIT_AS": limits["as_mb"] * _MB, "RLIMIT_DATA": limits["data_mb"] * _MB,
             "RLIMIT_CPU": limits["cpu_s"], "RLIMIT_FSIZE": limits["fsize_mb"] * _MB,
             "RLIMIT_NOFILE": limits["nofile"], "RLIMIT_CORE": 0, "RLIMIT_NPROC": limits["nproc"]}
    for name, value in pairs.items():
        kind = getattr(resource, name, None)
        if kind is not None:
            try:
                resource.setrlimit(kind, (value, value))
            except (ValueError, OSError):
                pass


def send(header: dict[str, Any], arrays: dict[str, Any] | None = None) -> None:
    """One frame to the grader: the JSON header and, when given, the arrays as an uncompressed ``.npz``."""
    import numpy as np

    blob = io.BytesIO()
    if arrays is not None:
        np.savez(blob, **arrays)
    data = json.dumps(header, ensure_ascii=True).encode("ascii")
    payload = struct.pack(">I", len(data)) + data + blob.getvalue()
    os.write(_CHANNEL, struct.pack(">Q", len(payload)))
    view = memoryview(payload)
    while view:
        view = view[os.write(_CHANNEL, view):]


def error_line(err: BaseException) -> str:
    """The innermost traceback line in a learner's cell (its file name is ``<cell N>``)."""
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        if frame.filename.startswith("<cell"):
            return f"line {frame.lineno}: {(frame.line or '').strip()}"[:300]
    return ""


def describe(err: BaseException) -> dict[str, str]:
    """An exception as data: its class name, message (cut) and the learner's line."""
    try:
        text = str(err)[:400]
    except Exception:  # noqa: BLE001 - a __str__ that raises
        text = "(an exception whose message cannot be shown)"
    return {"error": f"{type(err).__name__}: {text}", "ename": type(err).__name__, "line": error_line(err)}


def run_cell(source: str, namespace: dict[str, Any], label: str) -> BaseException | None:
    """Execute one cell's source in the notebook's namespace; the exception it raised, if any."""
    import linecache

    filename = f"<cell {label}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # lines in tracebacks
    try:
        exec(compile(source, filename, "exec"), namespace)  # the sandbox exists to run this
    except BaseException as err:  # noqa: BLE001 - SystemExit included: the learner's exit is data too
        return err
    return None


def run_helper(source: str, namespace: dict[str, Any], label: str) -> None:
    """Run a learner's helper cell statement by statement, as far as each goes: one failing line (an
    import of the checks, a plot) does not stop the definitions after it."""
    import ast

    try:
        statements = ast.parse(source).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return
    for k, statement in enumerate(statements):
        run_cell(ast.unparse(statement), namespace, f"{label}.{k}")


def withheld(key: str | None) -> Any:
    """The stand-in of a withheld reference, or None (the module ``course_lib._submitted`` of the copy)."""
    if not key:
        return None
    module, _, name = key.rpartition(".")
    try:
        return getattr(__import__(module, fromlist=[name]), name)
    except Exception:  # noqa: BLE001
        return None


def provide(exercise: dict[str, Any], namespace: dict[str, Any]) -> None:
    """Make the learner's implementation what course code calling the withheld reference gets."""
    try:
        import course_lib._submitted as submitted
    except ImportError:
        return
    impl = namespace.get(exercise["target"])
    if impl is not None and impl is not withheld(exercise.get("key")):
        submitted.provide(exercise.get("key") or "", impl)


def run_cases(exercise: dict[str, Any], impl: Any, inputs: dict[str, Any]) -> tuple[dict[str, Any], dict]:
    """Call ``impl`` on every hidden case; ``(status JSON, output arrays)``."""
    from course_lib.exercises.core import Case, run_case
    from course_lib.grading.codec import decode_value, encode_value

    arrays: dict[str, Any] = {}
    entries = []
    for described in exercise["cases"]:
        entry: dict[str, Any] = {"label": str(described["label"])}
        try:
            case = Case(entry["label"], args=tuple(decode_value(described["args"], inputs, True)),
                        kwargs=decode_value(described["kwargs"], inputs, True),
                        init=decode_value(described["init"], inputs, True),
                        state=decode_value(described["state"], inputs, True))
            out = run_case(impl, case, grad=bool(exercise["grad"]), differentiable=bool(exercise["differentiable"]),
                           forbidden=tuple(exercise.get("forbidden", ())), seed=exercise.get("seed"))
            entry["output"] = encode_value(out, arrays, strict=False)
            entry["status"] = "ok"
        except BaseException as err:  # noqa: BLE001 - the learner's error is data for the grader
            entry.update(describe(err))
            entry["status"] = "not-implemented" if isinstance(err, NotImplementedError) else "error"
            if isinstance(err, MemoryError) or "can't allocate memory" in entry["error"]:
                entry["status"] = "memory"
        entries.append(entry)
        if entry["status"] == "not-implemented":
            break
    return {"cases": entries}, arrays


def grade_exercise(number: int, exercise: dict[str, Any], namespace: dict[str, Any], job_dir: str) -> None:
    """Run one exercise's cells, then its hidden cases; send what happened."""
    import numpy as np

    send({"event": "cell", "exercise": number})
    for k, helper in enumerate(exercise["helpers"]):
        run_helper(helper, namespace, f"helper {number}.{k}")
    err = run_cell(exercise["cell"], namespace, str(exercise["cell_number"]))
    if err is not None:
        send({"event": "result", "exercise": number, "cell_error": describe(err)})
        return
    impl = namespace.get(exercise["target"])
    if impl is None:
        send({"event": "result", "exercise": number, "missing": f"the cell does not define {exercise['target']}"})
        return
    if impl is withheld(exercise.get("key")):
        send({"event": "result", "exercise": number, "withheld": True})
        return
    provide(exercise, namespace)
    send({"event": "cases", "exercise": number})
    with np.load(os.path.join(job_dir, exercise["inputs"]), allow_pickle=False) as data:
        inputs = {k: data[k] for k in data.files}
    status, arrays = run_cases(exercise, impl, inputs)
    send({"event": "result", "exercise": number, **status}, arrays)


def identity_check(namespace: dict[str, Any], target: str | None = None) -> Callable[..., Any]:
    """The notebook's ``check`` in the sandbox: no verdict (the grader judges), the learner's own back.

    ``check("name", impl)`` gives ``impl``; ``check("name")`` (the notebooks' form) gives what the exercise's
    ``target`` name holds in the notebook's namespace, as the real check does."""
    def check(name: str, impl: Any = None, *args: Any, **kwargs: Any) -> Any:
        return impl if impl is not None or target is None else namespace.get(target)

    return check


def setup(job: dict[str, Any]) -> dict[str, Any]:
    """The notebook's namespace: standard imports, the course copy's import lines, ``check`` as a no-op."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    for line in job["setup"]:
        run_cell(line, namespace, "setup")
    namespace["check"] = identity_check(namespace)
    return namespace


def main(argv: list[str]) -> None:
    """``sandbox_main.py JOB_DIR START REPLAY``: grade the exercises from START; REPLAY lists earlier ones
    (comma-separated numbers) whose cells ran cleanly and are run again without their cases."""
    job_dir, start = argv[0], int(argv[1])
    replay = {int(n) for n in argv[2].split(",") if n}
    with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as f:
        job = json.load(f)
    apply_limits(job["limits"])
    import torch

    torch.set_num_threads(1)
    namespace = setup(job)
    for number, exercise in enumerate(job["exercises"]):
        if number >= start and exercise["cell"] is not None:
            grade_exercise(number, exercise, namespace, job_dir)
        elif number in replay:
            for k, helper in enumerate(exercise["helpers"]):
                run_helper(helper, namespace, f"helper {number}.{k}")
            if run_cell(exercise["cell"], namespace, str(exercise["cell_number"])) is None:
                provide(exercise, namespace)
        if exercise["target"] not in namespace and withheld(exercise.get("key")) is not None:
            namespace[exercise["target"]] = withheld(exercise.get("key"))  # says why it cannot be used
        namespace["check"] = identity_check(namespace, exercise["target"])
        run_cell(exercise["check"], namespace, "check")
    send({"event": "done"})


if __name__ == "__main__":
    main(sys.argv[1:])
