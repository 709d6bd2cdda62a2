"""Behavioural search of a withheld library for anything that computes a graded result, by any route.

Run inside the built copy's environment, never beside the repository's ``course_lib``::

    PYTHONPATH=LIBRARY python tests/grading/answer_search.py CASES.pt REPORT.json

``CASES.pt`` (written by the test, :func:`tests.test_withheld_library.cases_file`) holds, for each exercise the
library must not answer, its public and hidden cases, the reference's outputs on them, the reference's
arguments by name and the routes its grader refuses (``forbidden_calls``, ``forbidden_ops``).

The search imports every module of the copy (the grader's runner aside) and calls every callable it defines:
public and private functions, classes (a class exercise's layer: built from the case's ``init`` with its
``state`` loaded), methods (with a duck-typed ``self`` carrying the case's arguments by name, and with an
instance of their class built with small sizes and fed the case's length through ``update``), static and
class methods. Each is called on each case and on simple transforms of it: the arguments as given, each one
alone, one twice (positions as both arguments), ``arange(n)`` for a length ``n``, ``tokens == pad_id`` and
``tokens != pad_id``, identity values (``value = I``: attention's output is then its weights) and the
arguments' prefixes. An output (or any tensor in it) of the reference output's shape and values on two
cases (one when the exercise has a single non-trivial case) is a hit, unless it is one of the call's own
arguments given back; a trivial expected output (constant, or equal to an input) is never compared. A hit
whose call the exercise's grader refuses (a watched function or an operator of its
``forbidden_calls``/``forbidden_ops`` ran, recorded by :func:`course_lib.exercises.tracing.tracing` as the
grader records it), or whose call its access check refuses (``online_softmax``: a row read whole), is reported
as ``refused``; any other is a violation. Writes a JSON report.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import os
import pkgutil
import signal
import sys
import time
import types
import warnings
from collections.abc import Iterator
from typing import Any

import torch

import course_lib

SECONDS = 0.5
#: A callable that overruns this many times is not called again (the report lists it); one that overran so and
#: never once gave a result within the limit is not called for the later exercises either (it is slow whatever it is
#: given: reading the Python documentation, training a classifier), instead of overrunning again in each of them.
MAX_TIMEOUTS = 2
#: Where each exercise's child writes the callable it is about to try (to name one that ends the process).
TRACE: Any = None
#: The search's address space (torch maps about 1 GB of libraries).
MEMORY_GB = 4
#: Modules never called: the grader's runner in the sandbox's copy, command-line entry points.
SKIPPED = ("course_lib.grading", "course_lib.edition.provided")
#: Callables never called: they run a function given to them in other processes or threads (the function is
#: searched itself), which costs seconds per call and computes nothing of their own.
MACHINERY = ("course_lib.training.parallel.map_in_processes", "course_lib.runtime.measure_threads")
#: Small sizes for building the course's own models (only the names a constructor takes are passed).
SMALL = {"d_model": 8, "num_heads": 2, "num_kv_heads": 1, "d_ff": 16, "vocab_size": 16, "max_len": 32,
         "num_layers": 1, "n_layers": 1, "num_classes": 3, "image_size": 8, "patch_size": 4, "channels": 1,
         "dropout": 0.0, "window": 4, "d_k": 4}


class Timeout(Exception):
    """A call ran past the search's limit."""


@contextlib.contextmanager
def limit(seconds: float) -> Iterator[None]:
    def stop(*_: Any) -> None:
        raise Timeout()

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def modules() -> tuple[list[types.ModuleType], list[str]]:
    """The library's modules (``course_lib``'s, and an assignment's own named in ``COURSE_SEARCH_MODULES``,
    comma-separated), imported; and the imports that failed."""
    found, failed = [], []
    names = ["course_lib"] + [m.name for m in pkgutil.walk_packages(course_lib.__path__, "course_lib.")]
    names += [n for n in os.environ.get("COURSE_SEARCH_MODULES", "").split(",") if n]
    for name in names:
        if name.startswith(SKIPPED) or name.rsplit(".", 1)[-1] in ("__main__", "cli"):
            continue
        try:
            with limit(60), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                found.append(importlib.import_module(name))
        except BaseException as err:  # noqa: BLE001 - reported
            failed.append(f"{name}: {type(err).__name__}: {err}")
    return found, failed


def callables(found: list[types.ModuleType]) -> list[tuple[str, Any, str]]:
    """``(key, object, kind)``: kind ``function``, ``class`` or ``method`` (called with a ``self``)."""
    out: list[tuple[str, Any, str]] = []
    for module in found:
        for attr, obj in vars(module).items():
            if getattr(obj, "__module__", None) != module.__name__:
                continue
            key = f"{module.__name__}.{attr}"
            if key in MACHINERY:
                continue
            if inspect.isfunction(obj):
                out.append((key, obj, "function"))
            elif inspect.isclass(obj):
                out.append((key, obj, "class"))
                for name, member in vars(obj).items():
                    if isinstance(member, staticmethod):
                        out.append((f"{key}.{name}", member.__func__, "function"))
                    elif isinstance(member, classmethod):
                        out.append((f"{key}.{name}", getattr(obj, name), "function"))
                    elif inspect.isfunction(member) and name not in ("__init__", "__new__", "__repr__", "__setattr__",
                                                                     "__getattr__", "__delattr__", "__del__"):
                        out.append((f"{key}.{name}", member, "method"))
    return out


def clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(clone(v) for v in value) if not hasattr(value, "_fields") else value
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    return value


def leaves(value: Any, depth: int = 0) -> list[torch.Tensor]:
    """The tensors (and numbers, as 0-d tensors) in an output."""
    if depth > 3:
        return []
    if isinstance(value, torch.Tensor):
        return [value.detach()]
    if isinstance(value, (bool, int, float)) and not isinstance(value, bool):
        return [torch.tensor(float(value))]
    if isinstance(value, (list, tuple)):
        return [t for v in list(value)[:8] for t in leaves(v, depth + 1)]
    if isinstance(value, dict):
        return [t for v in list(value.values())[:8] for t in leaves(v, depth + 1)]
    return []


def same(got: torch.Tensor, target: torch.Tensor, atol: float) -> bool:
    if got.numel() != target.numel() or got.is_complex() or target.is_complex():
        return False
    if got.shape != target.shape and (got.dim() or target.numel() != 1):
        return False
    a, b = got.reshape(-1).double(), target.reshape(-1).double()
    return bool(torch.allclose(a, b, atol=atol, rtol=1e-4, equal_nan=True))


def targets(expected: Any, inputs: list[torch.Tensor], atol: float) -> list[torch.Tensor]:
    """The expected output's tensors worth finding: not constant, not an input given back."""
    found = []
    for t in leaves(expected):
        if t.numel() >= 2 and t.reshape(-1).double().unique().numel() > 1 \
                and not any(same(x, t, atol) for x in inputs):
            found.append(t)
    return found


def transforms(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """The argument lists tried for one case, each with a label that names it across cases."""
    out = [("as given", args, kwargs), ("positional only", args, {})]
    tensors = [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    ints = [(i, a) for i, a in enumerate(args) if isinstance(a, int) and not isinstance(a, bool) and 0 < a <= 4096]
    for i, a in tensors:
        out += [(f"arg{i} alone", (a,), {}), (f"arg{i} twice", (a, a), {})]
    for i, n in ints:
        positions = torch.arange(n)
        out += [(f"arg{i} alone", (n,), {}), (f"arange(arg{i})", (positions,), {}),
                (f"arange(arg{i}) twice", (positions, positions), {})]
    for i, t in tensors:
        if not t.is_floating_point() and t.dtype != torch.bool:
            for j, p in ints + [(j, a) for j, a in enumerate(args) if isinstance(a, int) and a == 0]:
                out += [(f"arg{i} == arg{j}", (t == p,), {}), (f"arg{i} != arg{j}", (t != p,), {})]
            for name, p in kwargs.items():
                if isinstance(p, int) and not isinstance(p, bool):
                    out += [(f"arg{i} == {name}", (t == p,), {}), (f"arg{i} != {name}", (t != p,), {})]
    if len(tensors) >= 3 and all(t.is_floating_point() and t.dim() >= 2 for _, t in tensors[:3]):
        (_, q), (_, k), (i_v, _) = tensors[:3]
        seq_k = k.shape[-2]
        identity = torch.eye(seq_k, dtype=q.dtype).expand(*k.shape[:-2], seq_k, seq_k)
        values = tuple(identity if i == i_v else a for i, a in enumerate(args))
        out += [("identity values", values, kwargs), ("identity values, positional", values, {}),
                ("identity values, first three", (q, k, identity), {})]
    out += [(f"first {n} arguments", args[:n], {}) for n in range(1, len(args))]
    unique, seen = [], set()
    for label, a, k in out:  # the same call once (``positional only`` is ``as given`` without keywords...)
        key = (tuple(id(x) if isinstance(x, torch.Tensor) else repr(x) for x in a), tuple(sorted(k)))
        if key not in seen:
            seen.add(key)
            unique.append((label, a, k))
    return unique


def selves(cls: type, named: dict[str, Any], args: tuple[Any, ...]) -> list[tuple[str, Any]]:
    """``self`` for a method: a duck carrying the case's arguments by name, and instances of the class."""
    found: list[tuple[str, Any]] = [("duck self", types.SimpleNamespace(**named))]
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return found
    small = {k: v for k, v in {**SMALL, **{k: v for k, v in named.items() if not isinstance(v, torch.Tensor)}}.items()
             if k in params}
    for label, kwargs in (("instance", {}), ("small instance", small)):
        try:
            with limit(SECONDS), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                obj = cls(**kwargs)
                if isinstance(obj, torch.nn.Module):
                    obj.eval()
                update = getattr(obj, "update", None)
                for n in [a for a in args if isinstance(a, int) and not isinstance(a, bool) and 0 < a <= 4096]:
                    if callable(update):  # a cache fed the case's length (its state answers its questions)
                        with contextlib.suppress(Exception):
                            update(torch.zeros(1, 1, n, 2), torch.zeros(1, 1, n, 2))
        except BaseException:  # noqa: BLE001 - not constructible that way
            continue
        found.append((label, obj))
    return found


def call(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], seed: int | None) -> Any:
    with limit(SECONDS), warnings.catch_warnings(), torch.random.fork_rng(devices=[]), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.random.default_generator.manual_seed(0 if seed is None else seed)  # the CPU's (no device hooks)
        return fn(*clone(args), **clone(kwargs))


_SIGNATURES: dict[int, Any] = {}


def bindable(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    signature = _SIGNATURES.get(id(fn), False)
    if signature is False:
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            signature = None
        _SIGNATURES[id(fn)] = signature
    if signature is None:
        return False
    try:
        signature.bind(*args, **kwargs)
    except TypeError:
        return False
    return True


class Case:
    """One case of an exercise with what is tried on it, built once (transforms, a ``self`` per class)."""

    def __init__(self, entry: dict[str, Any]) -> None:
        self.entry = entry
        self.args, self.kwargs = tuple(entry["args"]), dict(entry["kwargs"])
        self.tried = transforms(self.args, self.kwargs)
        self._selves: dict[type, list[tuple[str, Any]]] = {}

    def selves(self, cls: type) -> list[tuple[str, Any]]:
        if cls not in self._selves:
            sizes = tuple(sorted((k, v) for k, v in self.entry["named"].items()
                                 if isinstance(v, (bool, int, float, str, type(None)))))
            lengths = tuple(a for a in self.args if isinstance(a, int) and not isinstance(a, bool))
            key = (cls, sizes, lengths)
            if key not in _INSTANCES:  # one instance per class and sizes, shared by the exercises' cases
                _INSTANCES[key] = [s for s in selves(cls, self.entry["named"], self.args) if s[0] != "duck self"]
            self._selves[cls] = [("duck self", types.SimpleNamespace(**self.entry["named"])), *_INSTANCES[key]]
        return self._selves[cls]


_INSTANCES: dict[Any, list[tuple[str, Any]]] = {}


def attempts(key: str, obj: Any, kind: str, ex: dict[str, Any], case: Case
             ) -> Iterator[tuple[str, Any, tuple[Any, ...], dict[str, Any]]]:
    """``(label, function, args, kwargs)`` for one callable on one case."""
    entry = case.entry
    if ex["is_class"]:
        if kind == "class" and callable(getattr(obj, "forward", None)) and bindable(obj, (), dict(entry["init"] or {})):
            def build_and_run(*a: Any, **k: Any) -> Any:
                module = obj(**dict(entry["init"] or {}))
                if entry["state"] is not None:
                    module.load_state_dict(dict(entry["state"]))
                return module.eval()(*a, **k)

            yield "the case's layer", build_and_run, case.args, case.kwargs
        return
    if kind == "function":
        for label, a, k in case.tried:
            if bindable(obj, a, k):
                yield label, obj, a, k
    elif kind == "method":
        owner = getattr(inspect.getmodule(obj), key.split(".")[-2], None)
        if not inspect.isclass(owner):
            return
        for label, a, k in case.tried:
            if not bindable(obj, (None, *a), k):
                continue
            for self_label, self_obj in case.selves(owner):
                yield f"{self_label}, {label}", obj, (self_obj, *a), k


def refused(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], ex: dict[str, Any]) -> bool:
    """Whether the exercise's grader refuses this call: a watched function or a forbidden operator ran."""
    from course_lib.exercises.tracing import matching_ops, tracing

    try:
        with tracing(watch=tuple(ex["forbidden_calls"])) as trace:
            call(fn, args, kwargs, ex["seed"])
    except BaseException:  # noqa: BLE001
        return False
    if trace.calls or matching_ops(trace.ops, tuple(ex["forbidden_ops"])):
        return True
    return bool(ex.get("access")) and _access_refuses(fn, args, kwargs, ex["access"])


def _access_refuses(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> bool:
    """Whether the exercise's access check (``online_softmax``: how a row is read) refuses this call, as the
    grader's sandbox runs it: a problem found, or an error (the exercise's signature not taken)."""
    from course_lib.exercises.core import Case
    from course_lib.exercises.passes import resolve_access_check

    check = resolve_access_check(name)
    if check is None:
        return False
    try:
        with limit(SECONDS * 4), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return bool(check(fn, Case("hit", args=clone(args), kwargs=clone(kwargs))))
    except BaseException:  # noqa: BLE001 - the grader's sandbox would report the error: no points
        return True


def search(exercises: list[dict[str, Any]], found: list[tuple[str, Any, str]]) -> dict[str, Any]:
    report: dict[str, Any] = {"callables": len(found), "exercises": len(exercises), "calls": 0, "hits": [],
                              "overran": []}
    overruns: dict[str, int] = {}
    returned: set[str] = set()  # callables that gave a result within the limit at least once
    spent: dict[str, float] = {}
    for ex in exercises:
        atol = max(1e-5, float(ex["atol"]))
        cases = [Case(entry) for entry in ex["cases"]]
        wanted = []
        for entry, expected in zip(ex["cases"], ex["expected"], strict=True):
            inputs = [t for t in leaves([entry["args"], entry["kwargs"]]) if t.numel() >= 2]
            wanted.append(targets(expected, inputs, atol))
        scalar = all(len(leaves(e)) == 1 and leaves(e)[0].numel() == 1 for e in ex["expected"]) and len(
            {float(leaves(e)[0]) for e in ex["expected"]}) >= 2
        if scalar:
            wanted = [leaves(e) for e in ex["expected"]]
        needed = 3 if scalar else min(2, sum(1 for w in wanted if w))
        if needed == 0:
            continue
        for key, obj, kind in found:
            if TRACE:
                TRACE.write(f"{ex['name']} {key}\n")
                TRACE.flush()
            began = time.perf_counter()
            matched: dict[str, list[tuple[Any, tuple[Any, ...], dict[str, Any]]]] = {}
            searched = 0
            for index, case in enumerate(cases):
                if not wanted[index]:
                    continue
                searched += 1
                for label, fn, a, k in attempts(key, obj, kind, ex, case):
                    if overruns.get(key, 0) >= MAX_TIMEOUTS:
                        break
                    if searched > 2 and label not in matched:  # two cases tried it and neither matched
                        continue
                    report["calls"] += 1
                    try:
                        got = leaves(call(fn, a, k, ex["seed"]))
                    except Timeout:
                        overruns[key] = overruns.get(key, 0) + 1
                        continue
                    except BaseException:  # noqa: BLE001 - a call that fails computes nothing
                        continue
                    returned.add(key)
                    if scalar and len(got) != 1:  # a number is found only as the whole output, not in a list
                        continue
                    given = [x for x in leaves([a, k]) if x.numel() >= 2]
                    if any(same(g, t, atol) and not any(same(g, x, atol) for x in given)
                           for g in got for t in wanted[index]):
                        matched.setdefault(label, []).append((fn, a, k))
            spent[key] = spent.get(key, 0.0) + time.perf_counter() - began
            for label, calls in matched.items():
                if len(calls) >= needed:
                    fn, a, k = calls[0]
                    report["hits"].append({"exercise": ex["name"], "callable": key, "how": label,
                                           "refused": refused(fn, a, k, ex)})
    report["overran"] = sorted(k for k, n in overruns.items() if n >= MAX_TIMEOUTS)
    report["never_returned"] = sorted(k for k in report["overran"] if k not in returned)
    report["slowest"] = [[k, round(v, 1)] for k, v in sorted(spent.items(), key=lambda kv: -kv[1])[:8]]
    return report


def _isolated(exercise: dict[str, Any], found: list[tuple[str, Any, str]], folder: str) -> dict[str, Any]:
    """Search one exercise in a forked child (a callable that ends the process, a state it leaves behind, do not
    reach the next exercise); a callable that ended the child is reported (``ended``) and left out of a retry.
    The child's overruns die with it: :func:`main` leaves out of the next exercises what never gave a result here."""
    ended: list[str] = []
    attempt = 0
    for attempt in range(4):  # noqa: B007 - reported below
        part, trace = os.path.join(folder, "part.json"), os.path.join(folder, "trace.txt")
        for name in (part, trace):
            if os.path.exists(name):
                os.remove(name)
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                global TRACE
                TRACE = open(trace, "w")  # noqa: SIM115 - closed by the child's exit
                report = search([exercise], [c for c in found if c[0] not in ended])
                with open(part, "w", encoding="utf-8") as f:
                    json.dump(report, f)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if os.path.exists(part):
            with open(part, encoding="utf-8") as f:
                report = json.load(f)
            report["ended"] = ended
            return report
        lines = open(trace, encoding="utf-8").read().splitlines() if os.path.exists(trace) else []
        culprit = lines[-1].split(" ", 1)[1] if lines else ""
        if not culprit or culprit in ended:
            break
        ended.append(culprit)
    return {"calls": 0, "hits": [], "overran": [], "never_returned": [], "slowest": [], "ended": ended,
            "error": f"the search of {exercise['name']} ended its process {attempt + 1} time(s)"}


def main(path: str, out: str) -> None:
    import resource
    import tempfile
    import traceback

    start = time.perf_counter()
    limit_bytes = MEMORY_GB << 30  # a call that allocates without bound raises MemoryError, not the OOM killer
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    torch.set_num_threads(1)  # forked children: no thread pool to inherit
    exercises = torch.load(path, weights_only=False)
    found_modules, failed = modules()
    found = callables(found_modules)
    report: dict[str, Any] = {"callables": len(found), "exercises": len(exercises), "calls": 0, "hits": [],
                              "overran": [], "ended": [], "errors": []}
    stuck: set[str] = set()  # overran MAX_TIMEOUTS times in an exercise without ever returning: not called again
    try:
        with tempfile.TemporaryDirectory(prefix="answer-search-") as folder:
            for exercise in exercises:
                part = _isolated(exercise, [c for c in found if c[0] not in stuck], folder)
                stuck.update(part["never_returned"])
                report["calls"] += part["calls"]
                report["hits"] += part["hits"]
                report["overran"] = sorted(set(report["overran"]) | set(part["overran"]))
                report["ended"] += [f"{exercise['name']}: {key}" for key in part["ended"]]
                report["errors"] += [part["error"]] if "error" in part else []
    except BaseException:  # noqa: BLE001 - written where the test reads it (a callable may have moved stderr)
        report["errors"].append(traceback.format_exc())
    report["not_called_again"] = sorted(stuck)
    report["import_failures"] = failed
    report["library"] = os.path.dirname(os.path.dirname(course_lib.__file__))
    report["seconds"] = round(time.perf_counter() - start, 1)
    with open(out, "w", encoding="utf-8") as f:  # not stdout: a callable may redirect it and never restore it
        json.dump(report, f)


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    main(sys.argv[1], sys.argv[2])
