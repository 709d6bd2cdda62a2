"""Brute-force search of a built ``course_lib`` for anything that computes a graded exercise's result.

Run inside the built copy's environment (``PYTHONPATH=EDITION python tests/edition/edition_probe.py``), never beside
the repository's ``course_lib``: it imports every module of the copy, calls every public function, and
constructs every public class and calls it, wherever the signature can be satisfied from an exercise's public
case (a class exercise's ``init`` and ``state`` for classes), and compares with the stored expected outputs
(or the exercise's stored judge). A callable that reproduces every public case is a violation unless it is a
stand-in the manifest declares PyTorch-backed *and*, with those PyTorch functions switched off (a tripwire),
it no longer reproduces them: then it computes only through PyTorch's own module. A callable the manifest does
not name is a violation, except a class (a model built on the backed layers) that computes nothing with every
backed stand-in's PyTorch functions switched off. Prints a JSON report.
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
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

import course_lib
from course_lib.edition.stored import load_exercise, stored_exercises
from course_lib.exercises.compare import compare_outputs, to_plain
from course_lib.exercises.core import Case, forbid_calls

SECONDS = 3


class Timeout(Exception):
    """A call ran past the probe's limit."""


@contextlib.contextmanager
def limit(seconds: int) -> Iterator[None]:
    def stop(*_: Any) -> None:
        raise Timeout()

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def public_callables() -> tuple[list[tuple[str, Any]], list[str]]:
    """``(dotted name, object)`` of every public function and class defined in a module of the copy."""
    found, failed = [], []
    names = ["course_lib"] + [m.name for m in pkgutil.walk_packages(course_lib.__path__, "course_lib.")]
    for name in names:
        if name.rsplit(".", 1)[-1] == "__main__":
            continue
        try:
            with limit(60):
                module = importlib.import_module(name)
        except BaseException as err:  # noqa: BLE001 - reported
            failed.append(f"{name}: {type(err).__name__}: {err}")
            continue
        for attr, obj in vars(module).items():
            if attr.startswith("_") or getattr(obj, "__module__", None) != name:
                continue
            if inspect.isfunction(obj) or inspect.isclass(obj):
                found.append((f"{name}.{attr}", obj))
    return found, failed


def case_of(entry: dict[str, Any]) -> Case:
    return Case(entry["label"], args=tuple(entry["args"]), kwargs=dict(entry["kwargs"]), init=entry["init"],
                state=entry["state"])


def judge_of(data: dict[str, Any]) -> Any:
    from course_lib.exercises.judges import JUDGES

    return JUDGES.get(str(data.get("judge") or ""))


def call(obj: Any, case: Case, data: dict[str, Any]) -> Any:
    """Call ``obj`` on ``case`` as the exercise would (a class: constructed from ``init``, ``state`` loaded)."""
    args, kwargs = case.args, dict(case.kwargs)
    if data["is_class"]:
        module = obj(**dict(case.init or {}))
        if case.state is not None:
            module.load_state_dict(dict(case.state))
        module.eval()
        return module(*args, **kwargs)
    if inspect.isclass(obj):
        return obj()(*args, **kwargs)
    return obj(*args, **kwargs)


def satisfiable(obj: Any, case: Case, data: dict[str, Any]) -> bool:
    try:
        if data["is_class"]:
            if not inspect.isclass(obj):
                return False
            inspect.signature(obj).bind(**dict(case.init or {}))
            return callable(getattr(obj, "forward", None))
        target = obj
        if inspect.isclass(obj):
            inspect.signature(obj).bind()
            target = getattr(obj, "forward", None) or obj.__call__
            inspect.signature(target).bind(None, *case.args, **dict(case.kwargs))
            return True
        inspect.signature(target).bind(*case.args, **dict(case.kwargs))
        return True
    except (TypeError, ValueError):
        return False


def reproduces(obj: Any, data: dict[str, Any], cases: list[Case], forbidden: tuple[str, ...] = ()) -> bool:
    """True when ``obj`` gives every public case's expected output (judged as the check judges it)."""
    judge = judge_of(data)
    for i, case in enumerate(cases):
        try:
            with limit(SECONDS), warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
                warnings.simplefilter("ignore")
                if data["seed"] is not None:
                    torch.manual_seed(data["seed"])
                with torch.no_grad(), forbid_calls(forbidden):
                    got = to_plain(call(obj, case, data))
        except BaseException:  # noqa: BLE001 - a callable that cannot run a case does not reproduce it
            return False
        expected = to_plain(data["expected"][i])
        problems = judge(case, expected, got) if judge else compare_outputs(expected, got, data["atol"], data["rtol"])
        if problems:
            return False
    return True


def main() -> None:
    root = Path(course_lib.__file__).resolve().parent
    manifest = json.loads((root / "edition" / "manifest.json").read_text())
    extra = sys.argv[1:]  # assignment folders: their modules are searched too
    for folder in extra:
        sys.path.insert(0, folder)
        for stem in json.loads((Path(folder) / "manifest.json").read_text()).get("modules", []):
            importlib.import_module(stem)
        manifest["parts"].update(json.loads((Path(folder) / "manifest.json").read_text())["parts"])
        if (Path(folder) / "stored").is_dir():
            from course_lib.edition.stored import add_data_folder
            add_data_folder(Path(folder) / "stored")
    callables, failed = public_callables()
    for folder in extra:
        for stem in json.loads((Path(folder) / "manifest.json").read_text()).get("modules", []):
            module = sys.modules[stem]
            callables += [(f"{stem}.{a}", o) for a, o in vars(module).items() if not a.startswith("_")
                          and getattr(o, "__module__", None) == stem and (inspect.isfunction(o) or inspect.isclass(o))]
    report: dict[str, Any] = {"callables": len(callables), "exercises": 0, "tried": 0, "violations": [],
                              "wrappers": [], "import_failures": failed}
    every_through = tuple(sorted({t for part in manifest["parts"].values() if part.get("kind") == "backed"
                                  for t in part.get("through", ())}))
    withheld = set(manifest["exercises"])  # a per-assignment edition ships the earlier notebooks' references
    for folder in extra:
        withheld |= set(json.loads((Path(folder) / "manifest.json").read_text())["exercises"])
    only = [n for n in os.environ.get("COURSE_PROBE_EXERCISES", "").split(",") if n]
    if only:  # a test of the probe itself searches only the exercises whose answers it planted
        withheld &= set(only)
    for name in [n for n in stored_exercises() if n in withheld]:
        data = load_exercise(name)
        cases = [case_of(e) for e in data["cases"]]
        report["exercises"] += 1
        for dotted, obj in callables:
            if not satisfiable(obj, cases[0], data):
                continue
            report["tried"] += 1
            if not reproduces(obj, data, cases):
                continue
            key = f"{dotted}.forward" if inspect.isclass(obj) and f"{dotted}.forward" in manifest["parts"] else dotted
            part = manifest["parts"].get(key)
            # a declared stand-in is judged on its own PyTorch functions; another class (a model built on the
            # backed layers) on all of them: either way, switched off, it must compute nothing. Any other
            # function that reproduces the cases is a violation.
            if part is None:
                through, backed = (every_through if inspect.isclass(obj) else ()), True
            else:
                through, backed = tuple(part.get("through", ())), part.get("kind") == "backed"
            if backed and through and not reproduces(obj, data, cases, through):
                report["wrappers"].append({"exercise": name, "callable": dotted, "through": list(through)})
            else:
                report["violations"].append({"exercise": name, "callable": dotted})
    print(json.dumps(report))


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    main()
