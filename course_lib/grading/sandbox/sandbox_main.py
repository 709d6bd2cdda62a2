"""The runner executed *inside* the sandbox: it answers the grader's requests, one at a time, and decides nothing.

Started by the grader as ``python -P sandbox_main.py JOB_DIR`` under bubblewrap (see
:mod:`course_lib.grading.sandbox.sandbox`), with ``PYTHONPATH`` on the grader's copy of ``course_lib`` in which the
graded exercises' answers are withheld. It imports nothing of the grader but ``course_lib.grading.sandbox.codec``, and
``course_lib.exercises.observation`` to record what a call did.

It reads ``JOB_DIR/job.json`` (the setup lines, each exercise's cells and check cell, the limits: no hidden
case is in it), sets its own resource limits before any learner code runs, starts an IPython shell (so that a
cell runs as Jupyter runs it: ``display``, line and cell magics), says ``ready``, and then answers requests
read from the grader's request pipe, in order:

- ``cell``: run the exercise's helper cells and its cell; answer whether it ran and defines the name;
- ``cases``: the hidden cases of that exercise arrive *with this request* (they were nowhere in the sandbox
  before); observe the learner's function or class on each (the outputs, the inputs after the call, the
  gradients for a fixed upstream gradient, what ran) and answer with the observations as plain arrays;
- ``replay``: run an exercise's cells again in a fresh sandbox (no cases); ``check``: run the course's check
  cell (``softmax_fn = check(...)``) with ``check`` giving back the learner's own implementation, or the
  course's fallback when there is none;
- ``exit``.

**The witness.** Before any learner code runs, :func:`witness_recorder` takes PyTorch's profiler switches (C++
functions) and its event accessors into a closure that no module name reaches. Each ``cases`` request runs inside
one profiler session of it, from before the learner's code is called until the grader's observation of every
result has been encoded, marked at both ends with the request's unguessable id (which the learner's code is
never handed). Its operators are sent beside the answer (``witness``) by the main loop; the grader accepts the
record only with both marks (:func:`course_lib.grading.sandbox.codec.witnessed_ops`) and judges the forbidden
operators on it: rewriting the Python record (``Trace.as_plain``) hides nothing, an operator run lazily while the
grader observes the result is in it, and a session switched off, replaced or missing is a problem, not a pass.

Every answer carries the request's id. The grader keeps exactly one answer per request, times each request
with its own clock, and judges every observation in its own process: nothing sent from here is trusted, and
learner code that replaces anything in this process changes no verdict but its own answer's data.

Frames (both ways): 8 bytes big-endian length, then 4 bytes JSON length, the JSON, the ``.npz`` bytes.
"""

from __future__ import annotations

import functools
import gc
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
_CHANNEL = int(os.environ.get("COURSE_GRADE_CHANNEL", "3"))  # answers, to the grader
_REQUESTS = int(os.environ.get("COURSE_GRADE_REQUESTS", "4"))  # requests, from the grader
_WRITE, _READ = os.write, os.read  # captured before any learner code runs


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


def sender() -> Callable[..., None]:
    """``send(header, arrays=None)``: one frame to the grader, the JSON header and, when given, the arrays as an
    uncompressed ``.npz``; made before any learner code runs, from functions it holds itself (a later rebinding of
    ``json.dumps`` or ``struct.pack`` changes nothing it sends)."""
    from course_lib.grading.sandbox.codec import npz_bytes

    dumps, pack, write, view_of, channel = json.dumps, struct.pack, _WRITE, memoryview, _CHANNEL

    def send(header: dict[str, Any], arrays: dict[str, Any] | None = None) -> None:
        data = dumps(header, ensure_ascii=True).encode("ascii")
        payload = pack(">I", len(data)) + data + (npz_bytes(arrays) if arrays is not None else b"")
        view = view_of(pack(">Q", len(payload)) + payload)
        while view:
            view = view[write(channel, view):]

    return send


def witness_recorder() -> Callable[[str, Callable[[], Any]], tuple[Any, dict[str, Any]]]:
    """``witnessed(nonce, work)``: ``(work(), record)``, ``record`` the operators PyTorch's profiler saw while
    ``work`` ran, between two marks named with ``nonce`` (see the module docstring). Made before any learner
    code runs: every function it calls is held here, none looked up by name later."""
    import torch
    from torch._C._autograd import _disable_profiler, _enable_profiler, _KinetoEvent, _prepare_profiler, _ProfilerResult
    from torch._C._profiler import ProfilerConfig, _ExperimentalConfig

    from course_lib.grading.sandbox.codec import witness_mark

    settings = torch.autograd.profiler.profile(use_kineto=False)  # the CPU profiler's kind and activities
    config = ProfilerConfig(settings.profiler_kind, False, False, False, False, False, _ExperimentalConfig(), "")
    activities = set(settings.kineto_activities)
    enter, leave = torch.ops.profiler._record_function_enter_new, torch.ops.profiler._record_function_exit
    leave = leave._RecordFunction
    events_of, name_of, mark_of = _ProfilerResult.events, _KinetoEvent.name, witness_mark
    as_set, as_sorted, as_str, problem = set, sorted, str, Exception
    others = other_processes()

    def mark(name: str) -> None:
        leave(enter(name, None))

    def witnessed(nonce: str, work: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
        try:
            _prepare_profiler(config, activities)
            _enable_profiler(config, activities)
            mark(mark_of(nonce, "begin"))
        except problem as err:  # a session already on: the learner's (the grader's never is, here)
            return work(), {"complete": False, "error": as_str(err)[:200]}
        before = others(True)
        try:
            result = work()
        finally:
            try:
                mark(mark_of(nonce, "end"))
                names = as_sorted(as_set(name_of(e) for e in events_of(_disable_profiler())))
                record: dict[str, Any] = {"complete": True, "ops": names, "processes": max(before, others())}
            except problem as err:  # switched off inside: no record
                record = {"complete": False, "error": as_str(err)[:200]}
        return result, record

    return witnessed


def other_processes() -> Callable[[], int]:
    """``count(start)``: how many processes other than the runner's ran work while it was asked (the witness's
    profiler sees this process's operators only): the runner's descendants alive now (in the sandbox the runner is
    its PID namespace's init, so an orphan is its child too), plus one when a child was reaped since the count
    that started the request (``start``; its CPU time reached ``RUSAGE_CHILDREN``). Made before any learner code
    runs, from functions it holds."""
    getpid, listdir, read, usage, kind = os.getpid, os.listdir, _proc_parent, resource.getrusage, \
        resource.RUSAGE_CHILDREN

    def spent() -> tuple[float, float, int]:
        got = usage(kind)
        return got.ru_utime, got.ru_stime, got.ru_nvcsw + got.ru_nivcsw

    seen = [spent()]

    def count(start: bool = False) -> int:
        parents: dict[int, int] = {}
        for name in listdir("/proc"):
            if name.isdigit():
                parents[int(name)] = read(name)
        ours, frontier = set(), {getpid()}
        while frontier:
            frontier = {pid for pid, parent in parents.items() if parent in frontier} - ours
            ours |= frontier
        now = spent()
        reaped = now != seen[0] and not start
        seen[0] = now
        return len(ours) + int(reaped)

    return count


def _proc_parent(pid: str) -> int:
    """The parent of process ``pid`` from ``/proc/PID/stat`` (-1 when it ended meanwhile)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


#: RecordFunction's and the profiler's collection switches: either one, turned off and on again inside a call,
#: hides operators from the witness with its session and both marks intact. The witness needs neither.
DISARMED = ("_enable_record_function", "_toggle_collection_dynamic")


def disarm() -> list[str]:
    """Take :data:`DISARMED` out of every loaded module (PyTorch's C++ module and the Python modules that
    imported them), before any learner code runs: what is not there cannot be called (absence, as for the
    withheld references). Returns the ``module.name`` places replaced."""
    import torch

    held = [f for f in (getattr(torch._C._autograd, name, None) for name in DISARMED) if f is not None]
    originals = {id(f) for f in held}  # held until the loop ends: no other object can take their ids

    def refused(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the grader's sandbox does not let code switch PyTorch's record of operators off")

    places = []
    for module_name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            if id(value) in originals:
                namespace[key] = refused
                places.append(f"{module_name}.{key}")
    return places


def _read_exact(n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = _READ(_REQUESTS, min(n - got, _MB))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def receive() -> tuple[dict[str, Any], bytes] | None:
    """The grader's next request ``(header, npz bytes)``, or None when the grader closed the pipe."""
    size = _read_exact(8)
    if size is None:
        return None
    payload = _read_exact(struct.unpack(">Q", size)[0])
    if payload is None:
        return None
    (length,) = struct.unpack(">I", payload[:4])
    return json.loads(payload[4:4 + length]), payload[4 + length:]


def error_line(err: BaseException) -> str:
    """The innermost traceback line in one of the learner's cells (IPython names them ``<ipython-input-...>``)."""
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        if frame.filename.startswith(("<ipython-input", "<cell")):
            return f"line {frame.lineno}: {(frame.line or '').strip()}"[:300]
    return ""


def describe(err: BaseException) -> dict[str, str]:
    """An exception as data: its class name, message (cut) and the learner's line."""
    try:
        text = str(err)[:400]
    except Exception:  # noqa: BLE001 - a __str__ that raises
        text = "(an exception whose message cannot be shown)"
    return {"error": f"{type(err).__name__}: {text}", "ename": type(err).__name__, "line": error_line(err)}


class Notebook:
    """The learner's notebook as Jupyter would run it: an IPython shell and its namespace."""

    def __init__(self, setup: list[str]) -> None:
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config

        config = Config()
        config.HistoryManager.enabled = False  # no history thread, no database
        config.InteractiveShell.colors = "NoColor"
        self.shell = InteractiveShell.instance(config=config)
        shell = self.shell  # what a cell may hook into, reset before every cell (its own cell is all it changes)
        self._pristine = {name: list(getattr(shell, name)) for name in (
            "input_transformers_cleanup", "input_transformers_post", "ast_transformers")}
        self._events = {name: list(hooks) for name, hooks in shell.events.callbacks.items()}
        self.namespace: dict[str, Any] = self.shell.user_ns
        for line in setup:
            self.run(line)
        self.namespace["check"] = identity_check(self.namespace)

    def run(self, source: str) -> BaseException | None:
        """Run one cell as IPython runs it; the exception it raised, if any (SyntaxError included)."""
        for name, hooks in self._pristine.items():
            getattr(self.shell, name)[:] = hooks
        for name, hooks in self._events.items():
            self.shell.events.callbacks[name] = list(hooks)
        try:
            result = self.shell.run_cell(source, store_history=False, silent=False)
        except BaseException as err:  # noqa: BLE001 - SystemExit and friends are the learner's data too
            return err
        return result.error_before_exec or result.error_in_exec

    def run_helper(self, source: str) -> None:
        """A learner's helper cell statement by statement, as far as each goes: one failing line (an import
        of the checks, a plot) does not stop the definitions after it."""
        import ast

        try:
            statements = ast.parse(self.shell.transform_cell(source)).body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            self.run(source)
            return
        for statement in statements:
            self.run(ast.unparse(statement))


def withheld(key: str | None) -> Any:
    """The stand-in of a withheld reference in the sandbox's library, or None."""
    if not key:
        return None
    module, _, name = key.rpartition(".")
    try:
        return getattr(__import__(module, fromlist=[name]), name)
    except Exception:  # noqa: BLE001
        return None


def provide(exercise: dict[str, Any], namespace: dict[str, Any]) -> None:
    """Make the learner's implementation what course code calling the withheld reference gets
    (:mod:`course_lib.edition.provided`)."""
    try:
        from course_lib.edition.provided import provide as hand_over
    except ImportError:
        return
    impl = namespace.get(exercise["target"])
    if impl is not None and exercise.get("key") and impl is not withheld(exercise.get("key")):
        hand_over(exercise["key"], impl)


def identity_check(namespace: dict[str, Any], target: str | None = None) -> Callable[..., Any]:
    """The notebook's ``check`` in the sandbox: no verdict (the grader judges), the learner's own back.

    ``check("name", impl)`` gives ``impl``; ``check("name")`` (the notebooks' form) gives what the exercise's
    ``target`` name holds in the notebook's namespace, as the real check does."""
    def check(name: str, impl: Any = None, *args: Any, **kwargs: Any) -> Any:
        return impl if impl is not None or target is None else namespace.get(target)

    return check


def observe_cases(exercise: dict[str, Any], impl: Any, described: list[Any], inputs: dict[str, Any],
                  ignore_threads: frozenset[int] = frozenset()) -> tuple[dict[str, Any], dict[str, Any]]:
    """Observe ``impl`` on every hidden case; ``(JSON answer, arrays)``. No verdict: the facts only.
    ``ignore_threads``: the threads alive before any learner code ran (the runner's, none in the sandbox)."""
    from course_lib.exercises.core import Case
    from course_lib.exercises.observation import observe, plain_observation
    from course_lib.exercises.passes import resolve_access_check
    from course_lib.grading.sandbox.codec import decode_value, encode_value

    arrays: dict[str, Any] = {}
    entries = []
    for item in described:
        entry: dict[str, Any] = {"label": str(item["label"])[:200]}
        try:
            case = Case(entry["label"], args=tuple(decode_value(item["args"], inputs, True)),
                        kwargs=decode_value(item["kwargs"], inputs, True),
                        init=decode_value(item["init"], inputs, True),
                        state=decode_value(item["state"], inputs, True))
            plain = plain_observation(observe(
                impl, case, differentiable=bool(exercise["differentiable"]),
                seed=exercise.get("seed"), train_mode=bool(exercise.get("train_mode")),
                watch=tuple(exercise.get("watch", ())), trace=True, ignore_threads=ignore_threads,
                access=resolve_access_check(exercise.get("access"))))
            entry["output"] = encode_value(plain.pop("output"), arrays, strict=False)
            entry["observed"] = encode_value(plain, arrays, strict=False, dicts=True)
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


class Runner:
    """Answers the grader's requests for one submission (see the module docstring)."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.exercises: list[dict[str, Any]] = job["exercises"]
        self.notebook = Notebook(job["setup"])
        from course_lib.exercises.tracing import thread_idents

        self.baseline = thread_idents()  # before any learner code: threads started later count

    def cell(self, number: int) -> dict[str, Any]:
        exercise, nb = self.exercises[number], self.notebook
        for helper in exercise["helpers"]:
            nb.run_helper(helper)
        err = nb.run(exercise["cell"])
        if err is not None:
            return {"cell_error": describe(err)}
        impl = nb.namespace.get(exercise["target"])
        if impl is None:
            return {"missing": f"the cell does not define {exercise['target']}"}
        if impl is withheld(exercise.get("key")):
            return {"withheld": True}
        provide(exercise, nb.namespace)
        return {"ran": True}

    def cases(self, number: int, request: dict[str, Any], blob: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
        import numpy as np

        with np.load(io.BytesIO(blob), allow_pickle=False) as data:
            inputs = {k: data[k] for k in data.files}
        impl = self.notebook.namespace.get(self.exercises[number]["target"])
        return observe_cases(self.exercises[number], impl, request.get("cases", []), inputs, self.baseline)

    def check(self, number: int) -> dict[str, Any]:
        exercise, namespace = self.exercises[number], self.notebook.namespace
        if exercise["target"] not in namespace and withheld(exercise.get("key")) is not None:
            namespace[exercise["target"]] = withheld(exercise.get("key"))  # says why it cannot be used
        namespace["check"] = identity_check(namespace, exercise["target"])
        err = self.notebook.run(exercise["check"]) if exercise["check"] else None
        return {"checked": err is None}

    def answer(self, request: dict[str, Any], blob: bytes) -> tuple[dict[str, Any], dict[str, Any] | None]:
        what, number = request.get("do"), int(request.get("exercise", -1))
        if what == "cell":
            return self.cell(number), None
        if what == "replay":
            self.cell(number)
            return {"replayed": True}, None
        if what == "cases":
            return self.cases(number, request, blob)
        if what == "check":
            return self.check(number), None
        return {"unknown": str(what)[:40]}, None


def add_site_dirs() -> None:
    """The Python environment's package folders, which the sandbox's interpreter starts without (``-S``):
    ``COURSE_GRADE_SITE`` names them (``course_lib.grading.sandbox.python_layout``); their ``.pth`` files
    run as at a normal start. Also ``exit``, ``quit`` and ``help``, which the site module defines."""
    import site

    for folder in filter(None, os.environ.get("COURSE_GRADE_SITE", "").split(os.pathsep)):
        site.addsitedir(folder)
    site.setquit()
    site.sethelper()


def seed_font_list() -> None:
    """Matplotlib's font list, made once by the grader (:func:`course_lib.grading.sandbox.sandbox.font_list`),
    copied to where Matplotlib looks for it (``MPLCONFIGDIR``, the private ``/tmp``), so that the notebook's figure
    imports read it instead of opening every font file again. Nothing is copied when the grader has none."""
    source, target = os.environ.get("COURSE_GRADE_FONTS"), os.environ.get("MPLCONFIGDIR")
    if not source or not target or not os.path.isdir(source):
        return
    for name in os.listdir(source):
        if name.startswith("fontlist-") and name.endswith(".json"):
            with open(os.path.join(source, name), "rb") as given, open(os.path.join(target, name), "wb") as kept:
                kept.write(given.read())


def main(argv: list[str]) -> None:
    """``sandbox_main.py JOB_DIR``: answer the grader's requests until it says exit or closes the pipe."""
    add_site_dirs()
    with open(os.path.join(argv[0], "job.json"), encoding="utf-8") as f:
        job = json.load(f)
    apply_limits(job["limits"])
    seed_font_list()
    # The runner's own start (PyTorch, IPython, the notebook's setup imports) makes about 220,000 objects that live
    # as long as the process; the cyclic garbage collector would run about 500 times meanwhile, 0.3 s of a sandbox's
    # 3 s start. It is back on before the first learner line runs.
    gc.disable()
    import torch

    torch.set_num_threads(1)
    send, witnessed = sender(), witness_recorder()  # before any learner code runs
    disarm()
    runner = Runner(job)
    gc.enable()
    send({"event": "ready"})
    while True:
        received = receive()
        if received is None or received[0].get("do") == "exit":
            return
        request, blob = received
        nonce = str(request.pop("id", ""))  # never handed to the learner's code: the witness's marks carry it
        if request.get("do") == "cases":
            (answer, arrays), witness = witnessed(nonce, functools.partial(runner.answer, request, blob))
            answer = {**answer, "witness": witness}
        else:
            answer, arrays = runner.answer(request, blob)
        send({**answer, "id": nonce, "exercise": request.get("exercise")}, arrays)


if __name__ == "__main__":
    main(sys.argv[1:])
    # Every answer is sent (each frame is written whole before the next request is read). The interpreter's own
    # shutdown (PyTorch's, IPython's and any learner's exit handlers) only delays the grader, which waits for
    # this process to end: about 0.6 s of every sandbox. Leave at once.
    os._exit(0)
