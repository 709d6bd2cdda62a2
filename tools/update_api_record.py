"""Record course_lib's public API (every public name with its signature) in ``tests/api_record.json``.

``tests/repository/test_api.py`` compares the live API with this record and fails when a public name is added,
removed or changes its signature. When the change is deliberate, regenerate the record and commit it
with the change (removing a released name? deprecate it first, see ``course_lib/_deprecation.py``)::

    python tools/update_api_record.py            # rewrite tests/api_record.json from the live API
    python tools/update_api_record.py --check    # only compare; exit 1 and list the differences
    python tools/update_api_record.py --modules  # print the public modules' names (for pdoc, see below)

What counts as public: the names in ``course_lib.__all__`` and in the ``__all__`` of every submodule whose
dotted name has no part starting with an underscore. For a function the record keeps its signature; for
a class, its constructor's signature, its bases and the signatures of the public methods that
``course_lib`` itself defines (``forward`` included, ``nn.Module``'s own methods not); for a type alias
(``Verdict = tuple[str, int]``), the type it stands for; for anything else, its type.

The same list of public modules feeds the API reference: pdoc documents a package's submodules only when its
``__all__`` names them, and ``course_lib``'s ``__all__`` lists functions and classes, so the modules are given
to pdoc explicitly (docs/instructors.md)::

    python -m pdoc $(python tools/update_api_record.py --modules) -o docs/api
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import pkgutil
import re
import sys
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "api_record.json"
PACKAGE = "course_lib"

__all__ = ["collect", "compare", "format_differences", "load_record", "write_record", "main"]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _signature(obj: Any) -> str:
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(signature unavailable)"
    return _ADDRESS.sub("", text)


def _class_signature(cls: type) -> str:
    """The constructor's signature, or where it comes from when another library defines it.

    A constructor inherited from outside course_lib (jupyter_client's for ``CurrentEnvKernelManager``) is that
    library's API, and ``inspect.signature`` renders it differently from one Python patch release to the next
    (3.11.2 reads traitlets' ``__new__``: ``(*args: 't.Any', **kwargs: 't.Any') -> 'Self'``; 3.11.7 its
    ``__init__``), so the record names the class it comes from instead.
    """
    owner = next(k for k in cls.__mro__ if "__init__" in vars(k) or "__new__" in vars(k))
    if owner is object or getattr(owner, "__module__", "").startswith(PACKAGE):
        return _signature(cls)
    return f"(constructor of {owner.__module__}.{owner.__qualname__})"


def _own_methods(cls: type) -> dict[str, str]:
    """Public methods and properties defined by ``cls`` or by its bases from course_lib."""
    methods: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not getattr(klass, "__module__", "").startswith(PACKAGE):
            continue
        for name, attr in vars(klass).items():
            if name.startswith("_"):
                continue
            if isinstance(attr, property):
                methods[name] = "property"
            elif isinstance(attr, (staticmethod, classmethod)):
                methods[name] = f"{type(attr).__name__} {_signature(attr.__func__)}"
            elif inspect.isfunction(attr):
                methods[name] = _signature(attr)
    return dict(sorted(methods.items()))


def _is_type_alias(obj: Any) -> bool:
    """Whether ``obj`` is a parametrised type such as ``tuple[str, int]``, ``Optional[int]``, ``int | None``,
    or a ``type X = ...`` statement's alias (Python 3.12 on).

    Such aliases are callable, and ``inspect.signature`` describes them differently from one Python version
    to the next (3.11 and 3.12 refuse, 3.13 answers with the origin's constructor), so the record keeps the
    type they stand for instead: the same text on every supported Python.
    """
    alias_type = getattr(typing, "TypeAliasType", None)
    return typing.get_origin(obj) is not None or (alias_type is not None and isinstance(obj, alias_type))


def describe(obj: Any) -> dict[str, Any]:
    """What the record keeps about one public object."""
    if inspect.ismodule(obj):
        return {"kind": "module"}
    if _is_type_alias(obj):
        return {"kind": "type alias", "value": repr(getattr(obj, "__value__", obj))}
    if inspect.isclass(obj):
        return {
            "kind": "class",
            "bases": [f"{b.__module__}.{b.__qualname__}" for b in obj.__bases__],
            "signature": _class_signature(obj),
            "methods": _own_methods(obj),
        }
    if callable(obj):
        return {"kind": "function", "signature": _signature(obj)}
    return {"kind": "variable", "type": type(obj).__name__}


def public_modules() -> list[str]:
    """``course_lib`` and every submodule without a leading underscore in its dotted name, sorted."""
    package = importlib.import_module(PACKAGE)
    names = [PACKAGE]
    # A subpackage that fails to import is still listed (walk_packages cannot look inside it); collect()
    # then reports its import error instead of leaving it out silently.
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{PACKAGE}.", onerror=lambda name: None):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        names.append(info.name)
    return sorted(names)


def collect() -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The live API: ``({module: {name: description}}, {module: import error})``.

    Modules without ``__all__`` have no public names of their own and are left out. A name listed in
    ``__all__`` that the module does not define is described as ``{"kind": "missing"}``.
    """
    api: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    for module_name in public_modules():
        try:
            module = importlib.import_module(module_name)
        except Exception as err:  # noqa: BLE001 - reported, never hidden
            errors[module_name] = f"{type(err).__name__}: {err}"
            continue
        exported = getattr(module, "__all__", None)
        if exported is None:
            continue
        entries: dict[str, Any] = {}
        for name in exported:
            if not hasattr(module, name):
                entries[name] = {"kind": "missing"}
            else:
                entries[name] = describe(getattr(module, name))
        api[module_name] = dict(sorted(entries.items()))
    return api, errors


def load_record(path: Path = RECORD) -> dict[str, dict[str, Any]]:
    """The recorded API (``{}`` when there is no record yet)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data["modules"]


def write_record(api: dict[str, dict[str, Any]], path: Path = RECORD) -> None:
    """Write the record, sorted, with a note saying how to regenerate it."""
    payload = {
        "note": "course_lib's public API; regenerate deliberately with: python tools/update_api_record.py",
        "modules": dict(sorted(api.items())),
    }
    path.write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n", encoding="utf-8")


def compare(recorded: dict[str, dict[str, Any]], live: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Differences between two APIs: ``{"added": [...], "removed": [...], "changed": [...]}``.

    Each entry is one line naming the module and the name; a change shows the recorded and the live
    description side by side.
    """
    added, removed, changed = [], [], []
    for module in sorted(set(recorded) | set(live)):
        old, new = recorded.get(module), live.get(module)
        if old is None:
            added.append(f"module {module} ({len(new or {})} public names)")
            continue
        if new is None:
            removed.append(f"module {module} (had {len(old)} public names)")
            continue
        for name in sorted(set(old) | set(new)):
            if name not in new:
                removed.append(f"{module}.{name}")
            elif name not in old:
                added.append(f"{module}.{name}: {_short(new[name])}")
            elif old[name] != new[name]:
                changed.append(f"{module}.{name}:\n      recorded: {_short(old[name])}\n      now:      "
                               f"{_short(new[name])}")
    return {"added": added, "removed": removed, "changed": changed}


def _short(entry: dict[str, Any]) -> str:
    kind = entry.get("kind")
    if kind == "function":
        return f"function{entry['signature']}"
    if kind == "class":
        methods = ", ".join(f"{k}{v if v.startswith('(') else ' ' + v}" for k, v in entry["methods"].items())
        return f"class{entry['signature']} bases={entry['bases']} methods=[{methods}]"
    return json.dumps(entry)


def format_differences(diff: dict[str, list[str]]) -> str:
    """A report of :func:`compare`'s result, empty when the APIs agree."""
    lines = []
    for key in ("removed", "changed", "added"):
        if diff[key]:
            lines.append(f"{key} ({len(diff[key])}):")
            lines += [f"  - {item}" for item in diff[key]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 when the API differs")
    parser.add_argument("--modules", action="store_true", help="print the public modules' names and exit")
    parser.add_argument("--record", type=Path, default=RECORD, help=f"record file (default: {RECORD})")
    args = parser.parse_args(argv)
    if args.modules:
        print(" ".join(public_modules()))
        return 0
    live, errors = collect()
    if errors:
        for module, error in errors.items():
            print(f"cannot import {module}: {error}", file=sys.stderr)
        print("fix the import errors first: the record must describe every public module", file=sys.stderr)
        return 2
    missing = [f"{m}.{n}" for m, names in live.items() for n, e in names.items() if e["kind"] == "missing"]
    if missing:
        print("names listed in __all__ but not defined: " + ", ".join(missing), file=sys.stderr)
        return 2
    report = format_differences(compare(load_record(args.record), live))
    if args.check:
        print(report or "the API agrees with the record")
        return 1 if report else 0
    write_record(live, args.record)
    print(report or "no change")
    print(f"wrote {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
