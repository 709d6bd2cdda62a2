"""The static policy: what an exercise cell may contain before the grader runs it at all.

The grader reads each exercise cell's source as a syntax tree (``ast``) and refuses, before execution,
a cell that

- calls the course's reference implementation of *that* exercise (imports it from ``course_lib``, uses
  a name the grading notebook binds to it, subclasses it, or imports a whole ``course_lib`` module, through
  which any reference is one attribute away), or reaches into the grading machinery
  (``course_lib.checks``, ``course_lib.exercises``, ``course_lib.grading``);
- contains an obviously hostile construct: ``exec``/``eval``/``compile``/``__import__``/``open``/
  ``globals``/``get_ipython``..., an import of anything but the computing libraries (``os``, ``sys``,
  ``subprocess``, ``builtins``, ``importlib``, ``pathlib``, ``pickle``, ``IPython``... are all refused),
  dunder attributes (``__globals__``, ``__subclasses__``, ``__code__``...), file access through libraries
  (``torch.load``, ``np.fromfile``...), or assignments into a library (``torch.allclose = ...``:
  monkeypatching).

A refused cell never runs: its exercise scores zero with status ``forbidden`` and the report quotes the
line and the reason. Ordinary solutions pass: imports of ``torch``, ``math``, ``numpy``, ``typing``,
``functools``, ``itertools``, ``collections``, ``einops`` (and a few other pure-computation modules), and
``from course_lib.<module> import <name>`` of anything that is not the exercise's own reference (the
solved notebooks import the course's private helpers this way, and a later exercise may reuse an earlier
one's reference, as the notebooks themselves do).

The policy is one layer: the grader also poisons the reference inside the kernel while the exercise is
graded, and compares outputs in its own process, so a construct the policy misses still cannot make a
wrong answer pass.

Example:
    >>> from course_lib.models.softmax import stable_softmax
    >>> src = "from course_lib.models.softmax import stable_softmax as s\\ndef stable_softmax(x):\\n    return s(x)"
    >>> [v.reason.split(":")[0] for v in check_source(src, own_reference=stable_softmax)]
    ['uses the reference implementation']
"""

from __future__ import annotations

import ast
import importlib
import inspect
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .parsing import parse_cell

__all__ = ["Violation", "check_source", "ALLOWED_MODULES", "ALLOWED_TORCH_MODULES", "setup_namespace", "module_allowed"]

#: Top-level modules an exercise cell may import (pure computation, no file or process access).
ALLOWED_MODULES = frozenset({
    "__future__", "math", "cmath", "numbers", "operator", "typing", "typing_extensions", "functools",
    "itertools", "collections", "dataclasses", "enum", "abc", "string", "copy", "numpy", "einops", "torch",
    # the standard library's harmless modules, which honest cells use (timing, randomness, text)
    "time", "timeit", "random", "re", "statistics", "fractions", "decimal", "heapq", "bisect", "textwrap",
    "pprint", "datetime", "warnings", "json", "contextlib", "array", "unicodedata",
})
#: Modules allowed by their full name only (``IPython.display`` gives ``display``, as the notebook has it).
ALLOWED_EXACT = frozenset({"IPython.display"})
#: Sub-modules of torch an exercise cell may import (``torch.hub``, ``torch.utils.cpp_extension``... are not).
ALLOWED_TORCH_MODULES = frozenset({
    "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.nn.parameter", "torch.linalg",
    "torch.fft", "torch.special", "torch.autograd", "torch.distributions",
})
#: Parts of course_lib that belong to the grading machinery: never importable from an exercise cell.
MACHINERY = ("course_lib.checks", "course_lib.exercises", "course_lib.grading")

_FORBIDDEN_NAMES = {
    "exec": "runs code from a string", "eval": "runs code from a string", "compile": "compiles code at run time",
    "__import__": "imports dynamically", "open": "opens files",
    "breakpoint": "starts a debugger", "globals": "reaches the notebook's namespace",
    "locals": "reaches the notebook's namespace", "vars": "reaches an object's namespace",
    "get_ipython": "reaches the IPython kernel", "exit": "stops the kernel", "quit": "stops the kernel",
    "__builtins__": "reaches the builtins", "__loader__": "reaches the import system",
    "__spec__": "reaches the import system", "memoryview": "reads raw memory",
}
#: Library attributes that read or write files, load native code or reach the network.
_FORBIDDEN_ATTRIBUTES = {
    "load", "save", "hub", "from_file", "fromfile", "tofile", "loadtxt", "savetxt", "genfromtxt", "memmap",
    "load_library", "cpp_extension", "system", "popen", "ctypes", "DataSource", "lib", "_C", "ops", "jit",
}
#: Attributes refused on any object (a tensor's ``share_memory_`` escapes the memory limit, ``tofile`` writes
#: files, ``attrgetter``/``methodcaller`` reach attributes by a string the checks below cannot see).
_ALWAYS_FORBIDDEN_ATTRIBUTES = {"share_memory_", "tofile", "from_file", "fromfile", "memmap", "attrgetter",
                                "methodcaller"}
#: Built-ins that reach attributes by name: allowed only as a direct call with a constant name.
_BY_NAME = ("getattr", "setattr", "delattr", "hasattr")
#: Dunder attributes that ordinary code uses (``super().__init__()``, ``type(x).__name__``...).
_HARMLESS_DUNDERS = {"__init__", "__name__", "__qualname__", "__doc__", "__len__", "__call__", "__class__",
                     "__repr__", "__str__"}


@dataclass(frozen=True)
class Violation:
    """One reason to refuse a cell: the line (1-based, in the cell) and a sentence for the report."""

    line: int
    reason: str
    kind: str = "hostile"  # "hostile" or "reference"

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


def _resolve(module: str, name: str | None = None) -> Any:
    """Import ``module`` (and take attribute ``name``) in the grading process; None when that fails."""
    try:
        obj = importlib.import_module(module)
        return obj if name is None else getattr(obj, name)
    except Exception:  # noqa: BLE001 - an unresolvable import is reported by the caller
        return None


def _is_reference(obj: Any, references: Iterable[Any]) -> bool:
    """True when ``obj`` is a reference, wraps one, or is a class derived from one."""
    for ref in references:
        if ref is None:
            continue
        if obj is ref:
            return True
        if callable(obj) and not inspect.isclass(obj):
            try:
                if inspect.unwrap(obj) is ref:
                    return True
            except ValueError:  # a cycle of __wrapped__
                return True

        if inspect.isclass(obj) and inspect.isclass(ref) and issubclass(obj, ref):
            return True
    return False


def setup_namespace(import_lines: Iterable[str]) -> dict[str, Any]:
    """The names the grading notebook binds before the learner's cells, resolved in this process."""
    namespace: dict[str, Any] = {}
    for line in import_lines:
        try:
            exec(compile(line, "<grading setup>", "exec"), namespace)  # the course's own import lines
        except Exception:  # noqa: BLE001 - the kernel reports the same failure in its setup cell
            continue
    namespace.pop("__builtins__", None)
    return namespace


#: IPython magics an honest exercise cell uses (timing, plots, printing); the others (``%load``, ``%run``,
#: ``%%bash``, ``%%writefile``...) and shell escapes (``!ls``) reach files or a shell: refused early here (the
#: sandbox would hold them anyway). The cell magics among them have a Python body, checked as Python.
HARMLESS_MAGICS = frozenset({"time", "timeit", "matplotlib", "precision", "who", "whos", "capture", "prun"})
_PYTHON_CELL_MAGICS = tuple(f"%%{name}" for name in ("time", "timeit", "capture", "prun"))


def magic_violations(source: str) -> list[Violation]:
    """The IPython magics and shell escapes of a cell that the policy refuses (see :data:`HARMLESS_MAGICS`)."""
    found = []
    for number, line in enumerate(source.splitlines(), 1):
        stripped = line.lstrip()
        if stripped.startswith("!"):
            found.append(Violation(number, "runs a shell command (!...), which graded cells may not use"))
        elif stripped.startswith("%"):
            name = stripped.lstrip("%").split(maxsplit=1)[0] if stripped.lstrip("%") else ""
            if name not in HARMLESS_MAGICS:
                found.append(Violation(number, f"uses the IPython magic %{name}, which graded cells may not use "
                                               f"(allowed: %{', %'.join(sorted(HARMLESS_MAGICS))})"))
    return found


def without_magics(source: str) -> str:
    """The cell as Python the policy can read: each IPython line magic or shell escape (``%timeit f(x)``,
    ``!ls``) becomes ``pass`` at its indentation; a cell magic whose body is Python loses its first line, and
    any other cell magic (``%%bash``) leaves nothing to check."""
    lines = source.splitlines()
    first = lines[0].lstrip() if lines else ""
    if first.startswith("%%"):
        if not first.startswith(_PYTHON_CELL_MAGICS):
            return ""
        lines = ["pass", *lines[1:]]
    out = []
    for line in lines:
        stripped = line.lstrip()
        out.append(line[:len(line) - len(stripped)] + "pass" if stripped.startswith(("%", "!")) else line)
    return "\n".join(out)


def module_allowed(module: str) -> bool:
    """Whether an exercise cell may import ``module`` (the computing libraries, a few torch sub-modules)."""
    top = module.split(".")[0]
    if top == "torch":
        return module in ALLOWED_TORCH_MODULES
    return top in ALLOWED_MODULES or module in ALLOWED_EXACT


class _Visitor(ast.NodeVisitor):
    def __init__(self, own: list[Any], namespace: Mapping[str, Any], extra_modules: frozenset[str]) -> None:
        self.own = own
        self.namespace = namespace
        self.extra_modules = extra_modules
        self.violations: list[Violation] = []
        self.module_names: set[str] = {k for k, v in namespace.items() if isinstance(v, types.ModuleType)}
        self.bound: set[str] = set()
        self.defined: set[str] = set()
        self.direct_calls: set[int] = set()  # ids of the Name nodes of direct getattr(...) calls
        self._imported: dict[str, Any] = {}

    def flag(self, node: ast.AST, reason: str, kind: str = "hostile") -> None:
        self.violations.append(Violation(getattr(node, "lineno", 0), reason, kind))

    # imports -------------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            name = alias.name
            if name == "course_lib" or name.startswith("course_lib."):
                self.flag(node, f"imports the module {name}: import the names you need "
                                f"(`from {name} import ...`), not a whole course module", "reference")
            elif not (module_allowed(name) or name.split(".")[0] in self.extra_modules):
                self.flag(node, f"imports {name}, which graded cells may not use (allowed: "
                                f"{', '.join(sorted(ALLOWED_MODULES - {'__future__'}))})")
            self.module_names.add((alias.asname or name).split(".")[0])
            self.bound.add((alias.asname or name).split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.flag(node, "uses a relative import")
            return
        if module == "course_lib" or module.startswith("course_lib."):
            if module.startswith(MACHINERY):
                self.flag(node, f"imports from {module}, the grading machinery", "reference")
                return
            for alias in node.names:
                if alias.name == "*":
                    self.flag(node, f"`from {module} import *` may bring in the reference", "reference")
                    continue
                obj = _resolve(module, alias.name)
                if obj is None:
                    obj = _resolve(f"{module}.{alias.name}")
                if obj is None:
                    self.flag(node, f"imports {module}.{alias.name}, which the course does not define")
                elif isinstance(obj, types.ModuleType):
                    self.flag(node, f"imports the module {obj.__name__}: import the names you need, not a "
                                    f"whole course module", "reference")
                elif _is_reference(obj, self.own):
                    self.flag(node, f"uses the reference implementation: imports {module}.{alias.name}, the "
                                    f"course's own solution of this exercise; write your own", "reference")
                self.bound.add(alias.asname or alias.name)
            return
        if not (module_allowed(module) or module.split(".")[0] in self.extra_modules):
            self.flag(node, f"imports from {module}, which graded cells may not use")
        for alias in node.names:
            if alias.name == "*":
                self.flag(node, f"`from {module} import *` is not allowed in graded cells")
            full = f"{module}.{alias.name}"
            if module.split(".")[0] == "torch" and _resolve(full) is not None and \
                    full not in ALLOWED_TORCH_MODULES and isinstance(_resolve(full), types.ModuleType):
                self.flag(node, f"imports {full}, which graded cells may not use")
            if alias.name in _FORBIDDEN_ATTRIBUTES or alias.name in _ALWAYS_FORBIDDEN_ATTRIBUTES:
                self.flag(node, f"imports {full}, which graded cells may not use (files, code, attributes by name)")
            target = alias.asname or alias.name
            self.bound.add(target)
            if isinstance(_resolve(full), types.ModuleType):
                self.module_names.add(target)

    # names and attributes ------------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if node.id in _FORBIDDEN_NAMES:  # never shadowable: `def f(open=open)` would hide the builtin
            self.flag(node, f"uses {node.id}(), which {_FORBIDDEN_NAMES[node.id]}")
        elif node.id in _BY_NAME and id(node) not in self.direct_calls:
            self.flag(node, f"uses {node.id} other than as a direct call (g = {node.id}, reduce({node.id}, ...))")
        elif node.id in _ALWAYS_FORBIDDEN_ATTRIBUTES:
            self.flag(node, f"uses {node.id}, which is not allowed in graded cells")
        elif node.id.startswith("_grader"):
            self.flag(node, f"uses {node.id}, a name of the grader's")
        elif isinstance(node.ctx, ast.Load) and node.id not in self.defined and node.id in self.namespace and \
                _is_reference(self.namespace[node.id], self.own):
            self.flag(node, f"uses the reference implementation: `{node.id}` is the course's own solution "
                            f"of this exercise; write your own", "reference")
        if isinstance(node.ctx, ast.Store):
            self.bound.add(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        if attr.startswith("__") and attr.endswith("__") and attr not in _HARMLESS_DUNDERS:
            self.flag(node, f"accesses the special attribute {attr}")
        elif attr in _ALWAYS_FORBIDDEN_ATTRIBUTES:
            self.flag(node, f"uses .{attr}, which is not allowed in graded cells (files, shared memory or "
                            f"attributes by name)")
        elif attr in _FORBIDDEN_ATTRIBUTES and self._root_is_module(node.value):
            self.flag(node, f"uses {ast.unparse(node)}, which reads or writes files or loads code")
        if isinstance(node.ctx, (ast.Store, ast.Del)) and self._root_is_module(node.value):
            self.flag(node, f"assigns into a library ({ast.unparse(node)}): monkeypatching is not allowed")
        self.generic_visit(node)

    def _root_is_module(self, node: ast.AST) -> bool:
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            node = node.value if not isinstance(node, ast.Call) else node.func
        return isinstance(node, ast.Name) and node.id in self.module_names

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, str) and len(value) > 4 and value.startswith("__") and value.endswith("__") \
                and value.isidentifier() and value not in _HARMLESS_DUNDERS:
            self.flag(node, f"names the special attribute {value} in a string")

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in _BY_NAME:
            self.direct_calls.add(id(func))
            if len(node.args) >= 2:
                name = node.args[1]
                if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                    self.flag(node, f"{func.id}() with a computed attribute name is not allowed in graded cells")
                elif name.value.startswith("__"):
                    self.flag(node, f"{func.id}() of the special attribute {name.value}")
            if func.id in ("setattr", "delattr") and node.args and self._root_is_module(node.args[0]):
                self.flag(node, f"{func.id}() on a library: monkeypatching is not allowed")
        if isinstance(func, ast.Name) and func.id == "type" and len(node.args) == 3:
            self.flag(node, "type() with three arguments builds classes dynamically")
        self.generic_visit(node)

    # definitions -------------------------------------------------------------------------------
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            obj = self._static_value(base)
            if obj is not None and _is_reference(obj, self.own):
                self.flag(base, f"uses the reference implementation: class {node.name} derives from the course's "
                                f"own solution ({ast.unparse(base)}); derive from nn.Module and write forward",
                          "reference")
        self.bound.add(node.name)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.bound.add(node.name)
        for arg in ast.walk(node.args):
            if isinstance(arg, ast.arg):
                self.bound.add(arg.arg)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Global(self, node: ast.Global) -> None:
        self.generic_visit(node)

    def _static_value(self, node: ast.AST) -> Any:
        """The object an expression such as ``nn.Module`` or ``MultiHeadAttention`` names, if known here."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        obj = self.namespace.get(node.id, self._imported.get(node.id))
        for part in reversed(parts):
            obj = getattr(obj, part, None)
        return obj


def _imports_of(tree: ast.Module) -> dict[str, Any]:
    """Names the cell binds by ``from course_lib... import`` (resolved), for base-class checks."""
    found: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                obj = _resolve(node.module, alias.name)
                if obj is not None:
                    found[alias.asname or alias.name] = obj
    return found


def check_source(source: str, own_reference: Any = None, namespace: Mapping[str, Any] | None = None,
                 extra_modules: Iterable[str] = ()) -> list[Violation]:
    """The policy's verdict on one exercise cell: an empty list when the cell may run.

    Args:
        source: the cell's source (IPython magics and shell escapes are read as ``pass``: the grader runs the
            cell in IPython, as Jupyter does, and the sandbox, not this policy, holds what they do).
        own_reference: the exercise's reference (function or class); using it is a ``reference`` violation.
        namespace: the names the grading notebook binds before this cell (see :func:`setup_namespace`).
        extra_modules: further top-level modules an instructor allows (``--allow-module``).
    """
    magics = magic_violations(source)
    if magics:
        return magics
    readable = without_magics(source)
    try:
        tree = parse_cell(readable) if readable == source else None
        tree = tree or ast.parse(readable)
    except (ValueError, RecursionError, MemoryError) as err:
        return [Violation(0, f"cannot be read as Python ({type(err).__name__})", "syntax")]
    except SyntaxError as err:
        return [Violation(err.lineno or 0, f"is not valid Python ({err.msg})", "syntax")]
    own = [own_reference] if own_reference is not None else []
    visitor = _Visitor(own, dict(namespace or {}), frozenset(extra_modules))
    visitor._imported = _imports_of(tree)
    # Functions, classes and parameters the cell defines shadow the setup's names (a learner's own
    # `stable_softmax`); a plain assignment does not (`x = reference` must still be seen).
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            visitor.bound.add(node.name)
            visitor.defined.add(node.name)
        elif isinstance(node, ast.arg):
            visitor.defined.add(node.arg)
    try:
        visitor.visit(tree)
    except RecursionError:
        return [Violation(0, "is nested too deeply to be checked", "hostile")]
    unique: dict[tuple[int, str], Violation] = {}
    for v in visitor.violations:
        unique.setdefault((v.line, v.reason), v)
    return sorted(unique.values(), key=lambda v: v.line)
