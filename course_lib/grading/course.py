"""The course's copy of a notebook: its exercises in order, their hidden cases and reference observations.

The grader trusts only this copy (the course's notebook, or an instructor's ``--source``): which cells are
exercises, the stub each one starts from, the name it defines, the check cell after it, and the import
lines of its other code cells (the sandbox's setup). The hidden cases are drawn here with the run's secret
seed and the reference's observations (outputs, gradients...) computed here, in the grader's process: the
observations never enter a sandbox, and an exercise's hidden inputs only with the request that grades it.
"""

from __future__ import annotations

import ast
import atexit
import hashlib
import importlib
import re
import shutil
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from course_lib.exercises import Exercise, get_exercise
from course_lib.exercises.notebooks import exercise_cells
from course_lib.exercises.verdict import inputs_as_plain, reference_observation

from .judging import policy as P
from .judging.parsing import MAX_SOURCE, parse_cell
from .sandbox import codec
from .sandbox.libcopy import build_library
from .sandbox.scratch import scratch_folder

__all__ = ["ExerciseSpec", "CourseCopy", "course_copy", "STANDARD_IMPORTS", "MAX_SOURCE", "course_notebooks",
           "find_course_copy", "defined_names", "assigned_names", "setup_imports", "notebook_id", "claimed_notebook"]


def defined_names(source: str) -> list[str]:
    """Top-level function, class and assignment names a cell defines (regex fallback if it does not parse)."""
    tree = parse_cell(source)
    if tree is None:
        return re.findall(r"^(?:def|class)\s+([A-Za-z_]\w*)", source, flags=re.MULTILINE)
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return names


def assigned_names(source: str) -> list[str]:
    """Names a cell assigns at top level (``softmax_fn = check(...)`` gives ``["softmax_fn"]``)."""
    tree = parse_cell(source)
    if tree is None:
        return []
    return [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
            if isinstance(t, ast.Name)]


def setup_imports(cells: Sequence[Any], skip: set[int]) -> list[str]:
    """Top-level import lines of the course copy's own code cells that a kernel can run cheaply and safely."""
    lines: list[str] = []
    for i, cell in enumerate(cells):
        if cell.cell_type != "code" or i in skip:
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                mods = [node.module]
            else:
                continue
            ok = all((m == "course_lib" or m.startswith("course_lib.")) and not m.startswith(P.MACHINERY)
                     or P.module_allowed(m) for m in mods)
            if isinstance(node, ast.ImportFrom) and node.module == "course_lib":
                ok = ok and not any(a.name in ("checks", "exercises", "grading") for a in node.names)
            text = ast.unparse(node)
            if ok and text not in lines:
                lines.append(text)
    return lines


@dataclass
class ExerciseSpec:
    """One exercise of a course copy: where its stub is, the name it defines, its hidden cases and outputs."""

    exercise: Exercise
    index: int  # cell index in the course's copy
    stub: str
    target: str
    check_targets: list[str]
    cases: list[Any] = field(default_factory=list)
    expected: list[Any] = field(default_factory=list)  # the reference's plain observation per hidden case
    inputs: list[Any] = field(default_factory=list)  # each hidden case's inputs as plain data
    arrays: dict[str, Any] = field(default_factory=dict)
    described: list[dict[str, Any]] = field(default_factory=list)
    check: str = ""  # the course's check cell (``softmax_fn = check(...)``), run in the sandbox after the exercise


class CourseCopy:
    """The course's own copy of a notebook: its exercises in order, hidden cases and reference outputs."""

    def __init__(self, path: Path, seed: int) -> None:
        self.path = Path(path).resolve()
        self.folder = self.path.parent
        self.nb = nbformat.read(self.path, as_version=4)
        meta = self.nb.metadata.get("course", {})
        self.notebook_id = _own_id(self.nb.metadata, self.path)
        checks = meta.get("checks")
        if checks:
            if str(self.folder) not in sys.path:
                sys.path.insert(0, str(self.folder))
            importlib.import_module(checks)
        self.extra_path = str(self.folder)
        found = list(exercise_cells(self.nb))
        self.specs: list[ExerciseSpec] = []
        for index, cell, name in found:
            exercise = get_exercise(name)
            names = defined_names(cell.source)
            ref_name = getattr(exercise.reference, "__name__", "")
            target = ref_name if ref_name in names else (names[0] if names else ref_name)
            follower = self.nb.cells[index + 1] if index + 1 < len(self.nb.cells) else None
            check_targets = assigned_names(follower.source) if follower is not None and \
                follower.get("metadata", {}).get("course", {}).get("role") == "check" else []
            spec = ExerciseSpec(exercise, index, cell.source, target, check_targets,
                                check=follower.source if check_targets else "")
            spec.cases = exercise.cases("hidden", seed=seed)
            spec.expected = [reference_observation(exercise, c) for c in spec.cases]
            spec.inputs = [inputs_as_plain(c) for c in spec.cases]
            spec.arrays, spec.described = codec.encode_cases(spec.cases)
            self.specs.append(spec)
        skip = {s.index for s in self.specs} | {s.index + 1 for s in self.specs}
        self.setup_lines = setup_imports(self.nb.cells, skip)
        self.namespace = P.setup_namespace(STANDARD_IMPORTS + self.setup_lines)
        self.checks_module = str(checks or "")
        self._libs: dict[frozenset[str], Path] = {}
        self._lib_lock = threading.Lock()

    def library(self, restored: frozenset[str] = frozenset()) -> Path:
        """The sandbox's library: for a course notebook ``NN`` the week-``NN`` class edition's (its answers and
        every later notebook's withheld, :func:`~course_lib.grading.sandbox.libcopy.build_library`), for an
        instructor's assignment the whole course (its public API) with the assignment's own answers withheld;
        the exercises named in ``restored`` (earlier ones that did not pass) keep their references. Removed at exit;
        a course notebook's is built once per process for its week and ``restored`` (:func:`course_library`), an
        assignment's once per copy and ``restored``."""
        own = bool(self.checks_module) and not self.checks_module.startswith("course_lib.")
        if not own:
            return course_library(_week(self.notebook_id), restored)
        with self._lib_lock:
            if restored not in self._libs:
                self._libs[restored] = _new_library(lambda folder: build_library(
                    folder, None, self.folder, self.checks_module, [s.exercise for s in self.specs], restored))
            return self._libs[restored]

    @property
    def max_total(self) -> float:
        return float(sum(s.exercise.points for s in self.specs))


def _new_library(build: Callable[[Path], object]) -> Path:
    """A scratch folder (removed at exit) that ``build(folder)`` fills, readable by the sandbox's user."""
    folder = scratch_folder("lib")
    atexit.register(shutil.rmtree, folder, True)
    build(folder)
    folder.chmod(0o755)
    return folder


#: The sandbox libraries of course notebooks, by week and restored exercises: nothing else goes into one (the
#: seed, the hidden cases and the submission stay outside), so every copy of a notebook in this process, under any
#: seed, shares them.
_COURSE_LIBRARIES: dict[tuple[int, frozenset[str]], Path] = {}
_COURSE_LIBRARIES_LOCK = threading.Lock()


def course_library(week: int, restored: frozenset[str] = frozenset()) -> Path:
    """The sandbox's library for course notebook ``week`` (0: the whole course withheld) with the references of
    ``restored`` kept, built once per process (:func:`~course_lib.grading.sandbox.libcopy.build_library`)."""
    with _COURSE_LIBRARIES_LOCK:
        key = (week, frozenset(restored))
        if key not in _COURSE_LIBRARIES:
            _COURSE_LIBRARIES[key] = _new_library(lambda folder: build_library(folder, week, restored=key[1]))
        return _COURSE_LIBRARIES[key]


#: How many course copies :func:`course_copy` keeps (the least recently used goes first): a class's notebooks
#: under a few seeds, while a Python session that grades again and again with fresh secret seeds stays bounded.
KEPT_COPIES = 32
COPIES: OrderedDict[tuple[Path, int, str], CourseCopy] = OrderedDict()
_COPIES_LOCK = threading.Lock()


def _sources_digest(path: Path) -> str:
    """SHA-256 over what a copy is built from besides the installed ``course_lib``: the notebook's bytes and those
    of the Python modules beside it (an instructor's assignment: its checks and the modules its library copies)."""
    digest = hashlib.sha256()
    for file in [path, *sorted(path.parent.glob("*.py"))]:
        digest.update(file.name.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def course_copy(path: Path, seed: int) -> CourseCopy:
    """The :class:`CourseCopy` of notebook ``path`` under ``seed``, built once per process for the same notebook,
    seed and sources (:func:`_sources_digest`): grading a notebook again in one process (another
    ``grade_submission`` call, another ``course-grade`` run from Python) reuses its hidden cases, reference
    observations and sandbox libraries instead of rebuilding them, which takes 1-3 s of CPU a notebook. A
    changed notebook or module beside it is built anew."""
    key = (Path(path).resolve(), seed, _sources_digest(Path(path).resolve()))
    with _COPIES_LOCK:
        if key in COPIES:
            COPIES.move_to_end(key)
            return COPIES[key]
    built = CourseCopy(key[0], seed)  # outside the lock: building one notebook does not hold up another
    with _COPIES_LOCK:
        copy = COPIES.setdefault(key, built)
        COPIES.move_to_end(key)
        while len(COPIES) > KEPT_COPIES:
            COPIES.popitem(last=False)
        return copy


STANDARD_IMPORTS = ["import math", "import numpy as np", "import torch", "import torch.nn as nn",
                    "import torch.nn.functional as F", "from typing import Any, Optional"]


def _week(notebook: str) -> int:
    """A course notebook's number (``"04_masking"`` -> 4); 0 (the whole course withheld) for any other id."""
    head = notebook.split("_", 1)[0]
    return int(head) if head.isdigit() else 0


def course_notebooks() -> list[Path]:
    """The course's own notebooks (``notebooks/NN_*.ipynb``), the copies submissions are matched against."""
    from course_lib.exercises.cli import NOTEBOOK_DIR

    return sorted(Path(NOTEBOOK_DIR).glob("[0-9][0-9]_*.ipynb"))


def _own_id(metadata: Any, path: Path) -> str:
    """A course copy's id: its ``metadata.course.notebook``, else its file name without ``.ipynb``."""
    course = metadata.get("course") if isinstance(metadata, dict) else None
    claimed = course.get("notebook") if isinstance(course, dict) else None
    return str(claimed) if isinstance(claimed, str) and claimed else Path(path).stem


def notebook_id(source: Path) -> str:
    """The id of the course's (or an instructor's) copy of a notebook, as reports and gradebooks record it:
    ``metadata.course.notebook``, else the file name without ``.ipynb`` (only the metadata is read)."""
    return _own_id(nbformat.read(Path(source), as_version=4).metadata, Path(source))


def claimed_notebook(nb: dict[str, Any], submission: Path) -> str | None:
    """The notebook a submission says it is, or None: its ``metadata.course.notebook`` (any id, an
    instructor's too), else the course notebook its file name begins or ends with (``bob_13_todays_models``).
    Only a claim: it never chooses what a submission is graded against when the assignment is known, it
    tells the instructor that the file handed in is another notebook."""
    meta = nb.get("metadata") if isinstance(nb.get("metadata"), dict) else {}
    course = meta.get("course") if isinstance(meta.get("course"), dict) else {}
    claimed = course.get("notebook")
    if isinstance(claimed, str) and claimed.strip():  # the student's text: printed, so only plain characters
        return re.sub(r"[^\w.+-]", "?", claimed.strip()[:100], flags=re.ASCII)
    named = _named_in(submission.stem)
    return named.stem if named is not None else None


def _named_in(stem: str) -> Path | None:
    """The course notebook a file name (without ``.ipynb``) is, begins or ends with."""
    return next((p for p in course_notebooks() if stem == p.stem or stem.startswith(p.stem) or stem.endswith(p.stem)),
                None)


def find_course_copy(nb: dict[str, Any], submission: Path, code_sources: list[str]) -> Path | None:
    """Which course notebook a submission is (its id only chooses the course's copy; nothing else is trusted):
    the course notebook it claims (:func:`claimed_notebook`), else the one whose exercise names it defines most."""
    candidates = {p.stem: p for p in course_notebooks()}
    claimed = claimed_notebook(nb, submission)
    if claimed in candidates:
        return candidates[claimed]
    named = _named_in(submission.stem)  # a claim in the metadata that is no course notebook: the name may tell
    if named is not None:
        return named
    defined = {n for src in code_sources for n in defined_names(src)}
    best, best_hits = None, 0
    for path in candidates.values():
        try:
            course_nb = nbformat.read(path, as_version=4)
        except Exception:  # noqa: BLE001
            continue
        hits = sum(1 for _, cell, _ in exercise_cells(course_nb) if set(defined_names(cell.source)) & defined)
        if hits > best_hits:
            best, best_hits = path, hits
    return best
