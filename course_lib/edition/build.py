"""Build the class edition: the student notebooks and a ``course_lib`` that holds no graded answer.

:func:`strip_library` is the one implementation of "remove the answers" (the grader's sandbox copy,
:mod:`course_lib.grading.sandbox.libcopy`, builds on it): it copies the installed ``course_lib`` without its checks
(hidden cases, mistakes, alternatives), its grader and this builder, and rewrites every graded part
(:func:`course_lib.edition.answers.graded_parts`) in place: PyTorch's own module behind the same signature
(:data:`course_lib.edition.backed.BACKED`), stored outputs for the calls the lessons make
(:data:`course_lib.edition.answers.STORED_CALLS`), or a stand-in that raises
:class:`~course_lib.edition.stored.AnswerWithheld`. It then stores, per exercise, the public cases, the
reference's outputs on them and each known mistake's outputs (``course_lib/edition/data/*.pt``), which the
edition's ``course_lib.checks.check`` reads (:mod:`course_lib.edition.stored`).

:func:`build_edition` adds the student notebooks, a ``pyproject.toml`` (``pip install DIR``) and a README;
:func:`build_student_folder` does the same for an instructor's assignment (a notebook, its checks module and
its reference module beside it).

Example:
    >>> from pathlib import Path
    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp())
    >>> manifest = build_edition(out / "class", notebooks=[])   # doctest: +SKIP
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import re
import shutil
import sys
import textwrap
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import nbformat
import torch

import course_lib
from course_lib.exercises import Exercise, registered_exercises, run_case
from course_lib.exercises.judges import judge_name
from course_lib.exercises.passes import access_check_name
from course_lib.exercises.verdict import Rules, mistake_observation, reference_observation

from .answers import STORED_CALLS, GradedPart, graded_parts, keys_by_module, stand_in_kind
from .backed import BACKED
from .record import argument_values, as_tensors
from .stored import ORDER, call_digest
from .strip import decorate_parts, replace_parts

__all__ = ["strip_library", "build_edition", "build_student_folder", "stand_in_source", "store_exercise",
           "course_exercises", "copy_package", "rewrite_parts", "store_calls", "record_calls", "recordable",
           "MANIFEST", "assignment_split", "make_colab_ready", "mark_references", "withheld_for"]

HERE = Path(__file__).resolve().parent

#: The manifest of a built library (relative to its ``course_lib``): every graded part and its stand-in.
MANIFEST = "edition/manifest.json"

#: What of this package a student's copy holds: the checks over stored data and the mapping of the course's layers
#: onto PyTorch's (used by the PyTorch-backed stand-ins), nothing of the builder.
SHIPPED = ("stored.py", "torch_layers.py", "provided.py")

EDITION_INIT = '''"""The class edition: checks over stored data (``stored``) and its data; no graded answer is here."""
'''

CHECKS_INIT = '''"""The class edition's checks: the public cases and expected outputs are stored data (no answers here).

Notebooks call::

    from course_lib.checks import check
    softmax_fn = check("stable_softmax")
"""

from course_lib.edition.stored import check, run_check

__all__ = ["check", "run_check"]
'''


def course_exercises() -> list[Exercise]:
    """Every exercise of the course: those declared in ``course_lib.checks`` (each of its modules imported),
    not an assignment's or a test's that happen to be registered too."""
    import course_lib.checks  # noqa: F401 - adds the course's exercise package, every module of it imported below

    return [ex for ex in registered_exercises() if ex.declared_in.startswith("course_lib.checks.")]


def _signature_node(obj: Any) -> ast.FunctionDef:
    """The parsed definition of a function (decorators kept, body to be replaced)."""
    node = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(obj)))).body[0]
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise TypeError(f"{obj!r} is not a function")
    return node  # type: ignore[return-value]


def _parameter_names(node: ast.FunctionDef) -> list[str]:
    a = node.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)]
    names += [a.vararg.arg] if a.vararg else []
    names += [p.arg for p in a.kwonlyargs]
    names += [a.kwarg.arg] if a.kwarg else []
    return names


def stand_in_source(part: GradedPart, kind: str) -> str:
    """The source that replaces graded part ``part`` in a student's copy (see the module docstring).

    A backed stand-in is the function of :data:`BACKED`; a stored or withheld one keeps the original's
    signature and docstring and replaces its body with a lookup of stored outputs or with an
    :class:`~course_lib.edition.stored.AnswerWithheld` error.
    """
    if kind == "backed":
        return textwrap.dedent(inspect.getsource(BACKED[part.key].stand_in))
    node = _signature_node(part.obj)
    first = node.body[0]
    docstring = [first] if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant) \
        and isinstance(first.value.value, str) else []
    names = _parameter_names(node)
    if kind == "stored":  # the stored outputs of the calls the lessons make (the answer is the exercise)
        if "." in part.obj.__qualname__:  # a method: the module's weights stand for self
            names[0] = f"dict({names[0]}.state_dict())"
        call = f"return stored_call({part.key!r}, {part.exercise!r}, [{', '.join(names)}])"
        imported = "stored_call"
    else:  # withheld: this is the learner's exercise
        call = f"withheld({part.key!r}, {part.exercise!r})"
        imported = "withheld"
    body = [*docstring, *ast.parse(f"from course_lib.edition.stored import {imported}\n{call}").body]
    node.body = body
    node.decorator_list = []
    return ast.unparse(ast.fix_missing_locations(ast.Module(body=[node], type_ignores=[])))


def _module_file(root: Path, module: str) -> Path:
    parts = module.split(".")
    for path in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
        if path.is_file():
            return path
    raise FileNotFoundError(f"{module} is not in the copy at {root}")


def copy_package(target: Path, checks: bool = True) -> None:
    """Copy the installed ``course_lib`` to ``target`` without its checks, its grader and this builder; add
    the edition's runtime (:mod:`course_lib.edition.stored`, an empty ``data`` folder) and, with ``checks``,
    a ``course_lib.checks`` whose ``check`` reads stored data."""
    source = Path(course_lib.__file__).resolve().parent
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(
        "__pycache__", "*.pyc", "checks", "grading", "edition"))
    (target / "edition").mkdir()
    (target / "edition" / "__init__.py").write_text(EDITION_INIT, encoding="utf-8")
    for name in SHIPPED:
        shutil.copyfile(HERE / name, target / "edition" / name)
    (target / "edition" / "data").mkdir()
    if checks:
        (target / "checks").mkdir()
        (target / "checks" / "__init__.py").write_text(CHECKS_INIT, encoding="utf-8")


def rewrite_parts(root: Path, replacements: dict[str, str], keep_decorators: bool) -> None:
    """Replace graded parts (key -> stand-in source) in the modules of the copy rooted at ``root``."""
    for module, names in keys_by_module(list(replacements)).items():
        path = _module_file(root, module)
        wanted = {name: replacements[f"{module}.{name}"] for name in names}
        path.write_text(replace_parts(path.read_text(encoding="utf-8"), wanted, keep_decorators), encoding="utf-8")


def store_exercise(exercise: Exercise, folder: Path, fallback: str) -> Path:
    """Write what the class edition's check needs to decide the verdict the notebook check decides
    (:mod:`course_lib.exercises.verdict`), as data: the public cases, the exercise's rules (tolerances, forbidden
    operations, the names of its access check and output judge, the reference's argument names), the reference's
    observation of each case (:func:`~course_lib.exercises.verdict.reference_observation`), and each known
    mistake's hint, its detail and its own observation of each case (output, gradients, training mode, how it
    read its input)."""
    cases = exercise.cases("public", seed=0)
    rules = Rules.from_exercise(exercise)
    data = {
        "name": exercise.name, "notebook": exercise.notebook, "summary": exercise.summary,
        "is_class": exercise.is_class, "target": getattr(exercise.reference, "__name__", exercise.name),
        "fallback": fallback, "atol": float(exercise.atol), "rtol": float(exercise.rtol),
        "argument_names": list(rules.argument_names),
        "differentiable": exercise.differentiable, "forbidden": list(exercise.forbidden_calls),
        "forbidden_ops": list(exercise.forbidden_ops), "forbidden_hint": exercise.forbidden_hint,
        "train_mode": exercise.train_mode, "access": access_check_name(exercise.access_check),
        "seed": rules.seed, "judge": judge_name(exercise.compare),
        "cases": [{"label": c.label, "args": list(c.args), "kwargs": dict(c.kwargs),
                   "init": None if c.init is None else dict(c.init),
                   "state": None if c.state is None else dict(c.state)} for c in cases],
        "expected": [as_tensors(run_case(exercise.reference, c, seed=exercise.seed)) for c in cases],
        "observations": [as_tensors(reference_observation(exercise, c)) for c in cases],  # what the check judges
        "mistakes": [{"name": m.name, "hint": m.hint, "detail": m.detail,
                      "observations": [as_tensors(mistake_observation(rules, m.impl, c)) for c in cases]}
                     for m in exercise.mistakes],
    }
    path = folder / f"{exercise.name}.pt"
    torch.save(data, path)
    return path


def store_calls(parts: Sequence[GradedPart], folder: Path, recorded: dict[str, dict[str, Any]]) -> None:
    """Write ``calls.pt``: the declared calls (:data:`STORED_CALLS`) computed now, and the recorded ones."""
    table: dict[str, dict[str, Any]] = {key: dict(calls) for key, calls in recorded.items()}
    for part in parts:
        for args, kwargs in STORED_CALLS.get(part.key, ()):
            digest = call_digest(argument_values(part.obj, args, kwargs))
            table.setdefault(part.key, {})[digest] = as_tensors(part.obj(*args, **kwargs))
    torch.save(table, folder / "calls.pt")


def recordable(parts: Sequence[GradedPart]) -> dict[str, str]:
    """The graded functions and methods whose calls a lesson's run can record (key -> exercise): references
    (not helpers: a helper's outputs would give its exercise away) that PyTorch does not stand in for."""
    return {p.key: p.exercise for p in parts if p.role == "reference" and stand_in_kind(p.key) != "backed"
            and inspect.isfunction(p.obj)}


def record_calls(notebooks: Sequence[Path], parts: Sequence[GradedPart], timeout: int = 900,
                 checks: str = "course_lib.checks") -> dict[str, dict[str, Any]]:
    """Run each self-study notebook once with :mod:`course_lib.edition.record` installed; the calls it made to
    the graded functions (key -> digest -> output). Cells that fail are skipped, as a learner would see."""
    import tempfile

    from course_lib.exercises.execute import execute_notebook

    keys = recordable(parts)
    outer = [p.key for p in parts]
    backed = [p.key for p in parts if p.key in BACKED]  # run as the edition runs them (see record's docstring)
    merged: dict[str, dict[str, Any]] = {}
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        with tempfile.TemporaryDirectory(prefix="course-record-") as tmp:
            out = Path(tmp) / "calls.pt"
            nb.cells.insert(0, nbformat.v4.new_code_cell(
                f"from course_lib.edition import record\n"
                f"record.install({keys!r}, {str(out)!r}, {checks!r}, {outer!r}, {backed!r})"))
            nb.cells.append(nbformat.v4.new_code_cell("record.save()"))
            with mock.patch.dict(os.environ, COURSE_WORKERS="1"):  # runs in other processes run here, recorded
                execute_notebook(nb, path.parent, timeout=timeout, allow_errors=True)
            failed = [o for o in nb.cells[0].get("outputs", []) if o.get("output_type") == "error"]
            if failed:  # nothing would be recorded: the edition would say "withheld" to every call, silently
                raise RuntimeError(f"record_calls: the recorder could not be installed in {path.name}'s kernel: "
                                   f"{failed[0]['ename']}: {failed[0]['evalue']}")
            if out.is_file():
                for key, calls in torch.load(out, weights_only=True).items():
                    order = merged.get(key, {}).get(ORDER, []) + calls.pop(ORDER, [])
                    merged.setdefault(key, {}).update(calls)
                    merged[key][ORDER] = order
    return merged


def mark_references(root: Path, exercises: Sequence[Exercise]) -> list[str]:
    """Decorate each exercise's reference in the copy rooted at ``root`` so that the learner's implementation,
    once provided (:mod:`course_lib.edition.provided`), runs wherever course code calls it; return their keys.

    A function reference (or its stand-in) gets ``standing_in(key)``, a class exercise's class
    ``standing_in_class(key)``; ``key`` is ``module.name``, as the grader names the reference. The module imports
    :mod:`course_lib.edition.provided` plainly (it imports nothing of the course: no cycle)."""
    decorations: dict[str, str] = {}
    for exercise in exercises:
        ref = exercise.reference
        module, name = getattr(ref, "__module__", ""), getattr(ref, "__qualname__", "")
        if not module or not name.isidentifier() or not _in_copy(root, module):
            continue
        kind = "standing_in_class" if inspect.isclass(ref) else "standing_in"
        decorations[f"{module}.{name}"] = f"course_lib.edition.provided.{kind}({module + '.' + name!r})"
    for module, names in keys_by_module(list(decorations)).items():
        path = _module_file(root, module)
        wanted = {n: decorations[f"{module}.{n}"] for n in names}
        path.write_text(decorate_parts(path.read_text(encoding="utf-8"), wanted,
                                       ["import course_lib.edition.provided"]), encoding="utf-8")
    return sorted(decorations)


def _in_copy(root: Path, module: str) -> bool:
    try:
        _module_file(root, module)
    except FileNotFoundError:
        return False
    return True


def withheld_for(number: int, exercises: Sequence[Exercise] | None = None) -> list[Exercise]:
    """The exercises whose answers notebook ``number``'s library withholds (its class edition and its grader's
    sandbox): the notebook's own and every later notebook's (the one rule, :func:`assignment_split`)."""
    exercises = list(course_exercises() if exercises is None else exercises)
    return [e for e in exercises if _number(e.notebook) >= number]


def strip_library(folder: Path, exercises: Sequence[Exercise] | None = None,
                  recorded: dict[str, dict[str, Any]] | None = None,
                  checked: Sequence[Exercise] | None = None, checks: bool = True) -> dict[str, Any]:
    """Write ``course_lib`` into ``folder`` with every graded part of ``exercises`` (default: the course's)
    replaced by its stand-in and the checks' stored data; return the manifest (also written to ``MANIFEST``).

    The one builder of a withheld library: the class edition ships it, the grader's sandbox imports it
    (:mod:`course_lib.grading.libcopy`, with ``checks=False``: no ``course_lib.checks`` and no stored cases,
    the grader brings its own). Each reference is marked (:func:`mark_references`) so that the learner's own
    implementation stands in once provided.

    ``recorded``: calls recorded from the lessons (:func:`record_calls`), served by stored stand-ins.
    ``checked``: the exercises whose checks the edition holds (default: ``exercises``); a per-assignment
    edition also checks the earlier notebooks' exercises, whose references it ships.
    """
    exercises = list(course_exercises() if exercises is None else exercises)
    checked = (exercises if checked is None else list(checked)) if checks else []
    recorded = dict(recorded or {})
    root = folder / "course_lib"
    copy_package(root, checks=checks)
    parts = graded_parts(exercises)
    kinds = {p.key: stand_in_kind(p.key, recorded) for p in parts}
    rewrite_parts(folder, {p.key: stand_in_source(p, kinds[p.key]) for p in parts if p.key.startswith("course_lib.")},
                  keep_decorators=True)
    mark_references(folder, exercises)
    data = root / "edition" / "data"
    store_calls([p for p in parts if p.key.startswith("course_lib.")], data, recorded)
    for exercise in checked:
        fallback = getattr(exercise.reference, "__module__", "") + "." + exercise.reference.__name__
        store_exercise(exercise, data, fallback)
    manifest = {"parts": {p.key: {"exercise": p.exercise, "role": p.role, "kind": kinds[p.key],
                                  "through": list(BACKED[p.key].through) if kinds[p.key] == "backed" else []}
                          for p in parts},
                "exercises": [e.name for e in exercises], "checked": [e.name for e in checked]}
    (root / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


PYPROJECT = '''[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "course_lib"
version = "{version}"
description = "The Transformer course's library, class edition: no graded exercise's answer is in it"
requires-python = ">=3.11"
# The course's pins (requirements.txt) of what the edition and its notebooks need.
dependencies = [
{dependencies}
]

[tool.setuptools.packages.find]
include = ["course_lib*"]

[tool.setuptools.package-data]
"*" = ["*.pt", "*.json"]
'''

#: What the class edition and its notebooks need (PyPI names), pinned as the course pins them.
EDITION_NEEDS = ("torch", "numpy", "matplotlib", "koreanize-matplotlib", "tqdm", "nbformat", "nbclient", "ipykernel",
                 "sacrebleu", "num2words", "tokenizers", "scikit-learn")


def edition_pins(requirements: Path | None = None) -> list[str]:
    """``name==version`` for each of :data:`EDITION_NEEDS`: the course's ``requirements.txt`` pins, else (an
    installed course_lib without the repository) the versions installed in the building environment."""
    from importlib import metadata

    path = requirements or Path(course_lib.__file__).resolve().parents[1] / "requirements.txt"
    pinned = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            name, sep, version = line.split("#", 1)[0].strip().partition("==")
            if sep:
                pinned[name.strip().lower()] = version.strip()
    pins = []
    for name in EDITION_NEEDS:
        version = pinned.get(name) or metadata.version(name)
        pins.append(f"{name}=={version}")
    return pins


def pyproject(pins: Sequence[str]) -> str:
    """The edition's ``pyproject.toml``: ``pip install DIR`` installs it and its pinned dependencies."""
    return PYPROJECT.format(version=course_lib.__version__,
                            dependencies="\n".join(f'  "{pin}",' for pin in pins))


README = '''# The Transformer course: class edition

What students receive for a graded class. `course_lib` here holds no graded exercise's answer: where a lesson
needs a graded component it uses PyTorch's own module, stored outputs, or your own implementation once your
exercise passes its check. The checks compare your code with stored outputs on public cases.

    pip install .            # with its pinned dependencies (torch {torch}); or: PYTHONPATH=. jupyter lab
    jupyter lab --notebook-dir=notebooks
{graded}'''

HAND_IN = '''
## What is graded and what to hand in

**Graded: `{where}{name}.ipynb`**{context}

1. Write your code in the exercise cells of `{name}.ipynb` (the cells that say `# YOUR CODE HERE`); keep
   each exercise's function or class name, and run the check cell under it (it says whether your code passes
   the public cases; the grade uses hidden cases).
2. Save the notebook and hand in **that one file**, `{name}.ipynb`, as your course's site asks: an LMS (Canvas,
   Moodle) adds your name when it collects it, so keep the file's name. If you hand it in another way, name it
   `{name}_<your login>.ipynb` (e.g. `{name}_jdoe.ipynb`): the name must begin with `{name}` and hold your
   login, and nobody else's.
3. Only the code cells' source is graded: outputs, other files and a PDF are not.
'''


def readme(graded: str | None, pins: Sequence[str]) -> str:
    """The edition's README: how to install it and, for a week's edition, which notebook is graded, what to
    hand in and how to name it."""
    torch = next((p.split("==")[1] for p in pins if p.startswith("torch==")), "")
    text = "" if graded is None else HAND_IN.format(
        where="notebooks/", name=graded,
        context=f" (notebook {graded.split('_')[0]}). The notebooks before it are lessons, not graded.")
    return README.format(torch=torch, graded=text)


def copy_notebooks(paths: Iterable[Path], out: Path) -> list[Path]:
    """Copy the notebooks without outputs, and without the course's install cell: it would install the whole
    ``course_lib``, every answer in it, where the edition's is missing (``--colab`` writes the edition's own)."""
    from .install import is_install_cell

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        nb.cells = [cell for cell in nb.cells if not is_install_cell(cell)]
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(nb, out / path.name)
        written.append(out / path.name)
    return written


def _number(notebook: str) -> int:
    """A notebook's number: ``"05_encoder"``, ``"05"`` or ``"5"`` -> 5."""
    head = Path(notebook).stem.split("_", 1)[0]
    if not head.isdigit():
        raise ValueError(f"not a notebook of the course: {notebook!r} (give its number, 00 to 13)")
    return int(head)


def assignment_split(graded: str, exercises: Sequence[Exercise], paths: Sequence[Path]
                     ) -> tuple[list[Path], list[Exercise], list[Exercise]]:
    """What a per-assignment edition of notebook ``graded`` holds: the notebooks it ships (``graded`` and the
    earlier ones: the later ones' references would be future answers), the exercises whose answers it
    withholds (the graded notebook's and every later one's: a later notebook's reference in the shipped
    ``course_lib`` would be next week's answer) and the exercises it checks (the shipped notebooks')."""
    number = _number(graded)
    if number not in {_number(p.name) for p in paths}:
        raise ValueError(f"no notebook {graded!r}: the course has {', '.join(p.stem for p in paths)}")
    shipped = [p for p in paths if _number(p.name) <= number]
    withheld = withheld_for(number, exercises)
    checked = [e for e in exercises if _number(e.notebook) <= number]
    return shipped, withheld, checked


def build_edition(out: Path, notebooks: Sequence[Path] | None = None, record: bool = True,
                  graded: str | None = None, colab: str | None = None) -> dict[str, Any]:
    """Build the class edition into ``out``: ``course_lib/`` (stripped), ``notebooks/``, ``pyproject.toml``.

    ``notebooks``: the student notebooks to include (default: every notebook of the course). With ``record``
    each is run once (self-study edition) to record the calls its lesson makes to graded functions that
    have no PyTorch counterpart (:func:`record_calls`); it takes as long as running the notebooks.

    ``graded``: a per-assignment edition, as a class runs (one notebook graded a week): notebook ``graded``
    and the earlier ones, the earlier ones' references shipped as they are (past due: the course's published
    solutions), the answers of ``graded`` and of every later notebook withheld, and only ``graded``'s calls
    recorded (:func:`assignment_split`). ``notebooks`` must then be None.

    ``colab``: where the instructor will publish the edition's ``packages/`` folder (a URL): the edition's wheel is
    built into ``out/packages/`` and every notebook's first cell installs it from there where ``course_lib`` is
    missing (Colab), beside the PyTorch that is there (:func:`make_colab_ready`).
    """
    from course_lib.exercises.cli import NOTEBOOK_DIR

    out = Path(out)
    if (out / "course_lib").exists():
        raise FileExistsError(f"build_edition: {out / 'course_lib'} exists; give an empty or new folder")
    every = sorted(Path(NOTEBOOK_DIR).glob("[0-9][0-9]_*.ipynb"))
    exercises = course_exercises()
    if graded is not None:
        if notebooks is not None:
            raise ValueError("build_edition: give graded or notebooks, not both")
        paths, withheld, checked = assignment_split(graded, exercises, every)
        to_record = [p for p in paths if _number(p.name) == _number(graded)]
    else:
        paths = every if notebooks is None else list(notebooks)
        withheld = checked = exercises
        to_record = paths
    out.mkdir(parents=True, exist_ok=True)
    recorded = record_calls(to_record, graded_parts(withheld)) if record else {}
    manifest = strip_library(out, withheld, recorded, checked)
    manifest["notebooks"] = [p.name for p in copy_notebooks(paths, out / "notebooks")]
    manifest["graded"] = None if graded is None else paths[-1].stem
    (out / "course_lib" / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    pins = edition_pins()
    (out / "pyproject.toml").write_text(pyproject(pins), encoding="utf-8")
    (out / "README.md").write_text(readme(manifest["graded"], pins), encoding="utf-8")
    if colab is not None:
        manifest["colab"] = str(make_colab_ready(out, colab).relative_to(out))
    return manifest


#: The instructor's list of the assignment's files that go to students (one name a line, ``#`` comments).
SHIP = "ship.txt"


def shipped_files(assignment: Path, notebook: Path, checks: str) -> list[Path]:
    """The assignment's modules that go to students: those its :data:`SHIP` manifest names, else those the
    notebook imports. Every other file of the folder (a draft solution, the instructor's tests) stays out, and a
    warning names each; a name in the manifest that is no module of the folder is an error."""
    manifest = assignment / SHIP
    if manifest.is_file():
        names = [line.split("#", 1)[0].strip() for line in manifest.read_text(encoding="utf-8").splitlines()]
        names = [n for n in names if n]
        wrong = [n for n in names if not (assignment / n).is_file() or not n.endswith(".py")
                 or n == f"{checks}.py" or "/" in n]
        if wrong:
            raise ValueError(f"{manifest}: expected the names of the assignment's own modules (not the checks "
                             f"module {checks}.py), got {wrong}")
        chosen = [assignment / n for n in names]
        why = f"not named in {SHIP}"
    else:
        nb = nbformat.read(notebook, as_version=4)
        imported = {name.split(".")[0] for cell in nb.cells if cell.cell_type == "code"
                    for name in re.findall(r"^\s*(?:from|import)\s+([A-Za-z_][\w.]*)", cell.source, re.M)}
        chosen = [p for p in sorted(assignment.glob("*.py")) if p.stem in imported and p.stem != checks]
        why = f"the notebook does not import it and there is no {SHIP} naming what to ship"
    for path in sorted(assignment.iterdir()):
        if path not in chosen and path != notebook and path.name not in (f"{checks}.py", SHIP) \
                and not path.name.startswith(".") and path.name != "__pycache__":
            warnings.warn(f"--assignment {assignment}: {path.name} is not shipped to students ({why})", stacklevel=2)
    return chosen


def make_colab_ready(edition: Path, packages: str) -> Path:
    """Make a built edition installable where only a PyTorch is (Colab): returns its wheel in ``packages/``.

    The edition's ``pyproject.toml`` declares the course's dependencies (so that the wheel brings what Colab lacks,
    and keeps what it has), its wheel is built into ``edition/packages/``, and every notebook's install cell
    (:mod:`course_lib.edition.install`) installs that wheel from ``packages``, where the instructor publishes the
    folder (a URL, or a path for a local class).
    """
    from .install import build_wheel, course_dependencies, install_cell_source, set_install_cell

    # The course's declared ranges, not the pins: Colab's own PyTorch (and numpy...) are kept, never replaced.
    (edition / "pyproject.toml").write_text(pyproject(course_dependencies()), encoding="utf-8")
    wheel = build_wheel(edition, edition / "packages")
    source = install_cell_source(course_lib.__version__, packages)
    for path in sorted((edition / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if set_install_cell(nb, source):
            nbformat.write(nb, path)
    return wheel


def build_student_folder(assignment: Path, out: Path, record: bool = True) -> dict[str, Any]:
    """Build the student folder of an instructor's assignment into ``out``.

    ``assignment`` holds one notebook whose metadata names its checks module (beside it). The folder gets
    the notebook, every module of the assignment except the checks module, with the graded parts of the
    assignment's exercises replaced by stand-ins (as :func:`strip_library` does for the course), and the
    checks as stored data: ``<checks module>.py`` becomes a module that makes ``course_lib.checks.check``
    read the stored public cases and outputs (the notebook's own ``import`` line keeps working). With
    ``record`` the notebook is run once (the instructor's copy) to record the calls it makes to graded parts
    (:func:`record_calls`), which the stand-ins then serve. Students install the class edition of
    ``course_lib`` beside it (:func:`build_edition`).
    """
    assignment, out = Path(assignment).resolve(), Path(out)
    notebooks = sorted(assignment.glob("*.ipynb"))
    if len(notebooks) != 1:
        raise ValueError(f"build_student_folder: {assignment} must hold exactly one notebook, found {len(notebooks)}")
    nb = nbformat.read(notebooks[0], as_version=4)
    checks = str(nb.metadata.get("course", {}).get("checks") or "")
    if not checks or not (assignment / f"{checks}.py").is_file():
        raise ValueError(f"build_student_folder: the notebook's metadata must name a checks module beside it, "
                         f"got {checks!r}")
    if str(assignment) not in sys.path:
        sys.path.insert(0, str(assignment))
    importlib.import_module(checks)
    notebook_id = str(nb.metadata["course"].get("notebook") or notebooks[0].stem)
    exercises = registered_exercises(notebook_id)
    out.mkdir(parents=True, exist_ok=True)
    for path in shipped_files(assignment, notebooks[0], checks):
        shutil.copyfile(path, out / path.name)
    parts = [p for p in graded_parts(exercises) if (out / f"{p.key.split('.')[0]}.py").is_file()]
    # The course's graded functions the assignment calls (a constructor's sinusoidal table) are recorded too.
    course_parts = [p for p in graded_parts(course_exercises()) if p.role == "reference"]
    recorded = record_calls(notebooks, [*parts, *course_parts], checks=checks) if record else {}
    kinds = {p.key: stand_in_kind(p.key, recorded) for p in parts}
    rewrite_parts(out, {p.key: stand_in_source(p, kinds[p.key]) for p in parts}, keep_decorators=True)
    mark_references(out, exercises)
    data = out / "stored"
    data.mkdir(exist_ok=True)
    store_calls(parts, data, recorded)
    for exercise in exercises:
        fallback = f"{exercise.reference.__module__}.{exercise.reference.__name__}"
        store_exercise(exercise, data, fallback)
    (out / f"{checks}.py").write_text(ASSIGNMENT_CHECKS, encoding="utf-8")
    copy_notebooks(notebooks, out)
    manifest = {"parts": {p.key: {"exercise": p.exercise, "role": p.role, "kind": kinds[p.key], "through": []}
                          for p in parts}, "exercises": [e.name for e in exercises], "checks": checks,
                "modules": sorted(p.stem for p in out.glob("*.py") if p.stem != checks)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    (out / "README.md").write_text(f"# {notebooks[0].stem}: student folder\n\nPut it beside the class edition "
                                   "(`pip install class/`, or `PYTHONPATH=this-folder:class`).\n"
                                   + HAND_IN.format(where="", name=notebooks[0].stem, context="."),
                                   encoding="utf-8")
    return manifest


ASSIGNMENT_CHECKS = '''"""This assignment's checks, class edition: public cases and expected outputs in ``stored/``.

Importing this module points the class edition's ``course_lib.checks.check`` at this folder's stored data.
"""

from pathlib import Path

from course_lib.edition import stored

stored.add_data_folder(Path(__file__).resolve().parent / "stored")
'''
