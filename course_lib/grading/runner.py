"""Grading one submission: rebuild it from the course's copy, run it under limits, compare in this process.

The steps (see ``docs/grading.md`` for the instructor's view):

1. **Read** the submission as JSON with a size cap; a file that is too big, not JSON or not a notebook gets a
   report saying so (every exercise ``missing``), never a crash.
2. **Find the course's copy** (``--source``, else the notebook id in the submission's metadata, else its file
   name, else the course notebook whose exercise names it defines). From the submission, only the *source*
   of the exercise cells is taken, matched by the name each stub defines (``def stable_softmax``) and its
   position in the course's copy; the submission's metadata, tags, kernelspec, outputs and other cells are
   dropped.
3. **Static policy** (:mod:`course_lib.grading.policy`) on each exercise cell: a refused cell never runs.
4. **Grading notebook**: a setup cell of the grader's (standard imports, the course copy's own import lines,
   an audit hook), then per exercise the learner's cell and a harness cell of the grader's that runs the
   learner's code on hidden inputs (shipped as ``.npz`` + JSON) with the reference poisoned, and writes the
   outputs as arrays. Run with nbclient in a fresh temporary folder, in a kernel under a memory limit
   (:mod:`course_lib.grading.kernel`), with a per-cell and a per-submission time limit.
5. If a cell times out, kills its kernel or leaves no harness output (a hook that blanked later cells), that
   exercise is marked, a fresh kernel replays the earlier exercise cells that were fine, and grading goes on
   with the next exercise.
6. **Compare** in this process: the outputs, loaded with ``allow_pickle=False``, against the reference run
   here on the same hidden cases (``Exercise.cases("hidden", seed)``), with
   :func:`course_lib.exercises.compare_outputs`. Points are all or nothing per exercise: ``exercise.points``
   when every hidden case passes (known mistakes often pass the easy cases; partial credit per case would
   reward exactly them). The report still says how many cases passed.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import json
import platform
import re
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from course_lib.exercises import Exercise, compare_outputs, get_exercise, run_case, to_plain
from course_lib.exercises.feedback import (  # the notebook check's own diagnosis and hint, shared
    NOT_DIFFERENTIABLE_HINT,
    _diagnose,
)
from course_lib.exercises.notebooks import exercise_cells

from . import harness as H
from . import policy as P

__all__ = ["GradeConfig", "ExerciseResult", "SubmissionReport", "grade_submission", "CourseCopy",
           "STATUSES", "versions"]

#: Every status an exercise can get in a report.
STATUSES = ("pass", "fail", "error", "timeout", "missing", "not-implemented", "forbidden")


@dataclass
class GradeConfig:
    """The grading command's options (see ``course-grade --help``)."""

    source: Path | None = None
    cell_timeout: float = 30.0
    total_timeout: float = 300.0
    memory_mb: int = 1024
    seed: int | None = None
    max_bytes: int = 20 << 20
    policy: bool = True
    extra_modules: tuple[str, ...] = ()
    startup_timeout: float = 60.0
    keep_workdir: bool = False

    def resolved_seed(self) -> int:
        """The seed of the hidden cases: the one given, else a secret random one drawn once."""
        if self.seed is None:
            self.seed = secrets.randbelow(2**31 - 1)
        return self.seed


@dataclass
class ExerciseResult:
    """One exercise's line in a report."""

    exercise: str
    score: float
    max: float
    status: str
    message: str = ""
    hint: str = ""
    cases_passed: int = 0
    cases_total: int = 0
    cell: int | None = None  # 1-based index of the submission's cell graded for this exercise
    line: str = ""


@dataclass
class SubmissionReport:
    """Everything the grader says about one submission (written as JSON, Markdown and CSV rows)."""

    submission: str
    sha256: str = ""
    notebook: str = ""
    source: str = ""
    status: str = "graded"  # graded, unreadable, unknown-notebook, internal-error
    message: str = ""
    total: float = 0.0
    max_total: float = 0.0
    exercises: list[ExerciseResult] = field(default_factory=list)
    elapsed_s: float = 0.0
    kernel_starts: int = 0
    seed: int | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    graded_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def versions() -> dict[str, str]:
    """The versions that decide a grade: course_lib, torch, numpy, nbclient, Python."""
    import nbclient
    import numpy
    import torch

    import course_lib

    return {"course_lib": course_lib.__version__, "torch": torch.__version__, "numpy": numpy.__version__,
            "nbclient": nbclient.__version__, "python": platform.python_version()}


# ----------------------------------------------------------------------------------------------------
# The course's copy of a notebook
# ----------------------------------------------------------------------------------------------------

def _defined_names(source: str) -> list[str]:
    """Top-level function, class and assignment names a cell defines (regex fallback if it does not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return re.findall(r"^(?:def|class)\s+([A-Za-z_]\w*)", source, flags=re.MULTILINE)
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return names


def _assigned_names(source: str) -> list[str]:
    """Names a cell assigns at top level (``softmax_fn = check(...)`` gives ``["softmax_fn"]``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
            if isinstance(t, ast.Name)]


def _setup_imports(cells: Sequence[Any], skip: set[int]) -> list[str]:
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
                     or P._module_allowed(m) for m in mods)
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
    expected: list[Any] = field(default_factory=list)
    arrays: dict[str, Any] = field(default_factory=dict)
    described: list[dict[str, Any]] = field(default_factory=list)


class CourseCopy:
    """The course's own copy of a notebook: its exercises in order, hidden cases and reference outputs."""

    def __init__(self, path: Path, seed: int) -> None:
        self.path = Path(path).resolve()
        self.folder = self.path.parent
        self.nb = nbformat.read(self.path, as_version=4)
        meta = self.nb.metadata.get("course", {})
        self.notebook_id = str(meta.get("notebook") or self.path.stem)
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
            names = _defined_names(cell.source)
            ref_name = getattr(exercise.reference, "__name__", "")
            target = ref_name if ref_name in names else (names[0] if names else ref_name)
            follower = self.nb.cells[index + 1] if index + 1 < len(self.nb.cells) else None
            check_targets = _assigned_names(follower.source) if follower is not None and \
                follower.get("metadata", {}).get("course", {}).get("role") == "check" else []
            spec = ExerciseSpec(exercise, index, cell.source, target, check_targets)
            spec.cases = exercise.cases("hidden", seed=seed)
            spec.expected = [to_plain(run_case(exercise.reference, c, grad=exercise.grad)) for c in spec.cases]
            spec.arrays, spec.described = H.encode_cases(spec.cases)
            self.specs.append(spec)
        skip = {s.index for s in self.specs} | {s.index + 1 for s in self.specs}
        self.setup_lines = _setup_imports(self.nb.cells, skip)
        self.namespace = P.setup_namespace(STANDARD_IMPORTS + self.setup_lines)

    @property
    def max_total(self) -> float:
        return float(sum(s.exercise.points for s in self.specs))


STANDARD_IMPORTS = ["import math", "import numpy as np", "import torch", "import torch.nn as nn",
                    "import torch.nn.functional as F", "from typing import Any, Optional"]


def course_notebooks() -> list[Path]:
    from course_lib.exercises.cli import NOTEBOOK_DIR

    return sorted(Path(NOTEBOOK_DIR).glob("[0-9][0-9]_*.ipynb"))


def find_course_copy(nb: dict[str, Any], submission: Path, code_sources: list[str]) -> Path | None:
    """Which course notebook a submission is (its id only chooses the course's copy; nothing else is trusted)."""
    candidates = {p.stem: p for p in course_notebooks()}
    meta = nb.get("metadata") if isinstance(nb.get("metadata"), dict) else {}
    course = meta.get("course") if isinstance(meta.get("course"), dict) else {}
    claimed = course.get("notebook")
    if isinstance(claimed, str) and claimed in candidates:
        return candidates[claimed]
    stem = submission.stem
    for name, path in candidates.items():
        if stem == name or stem.startswith(name) or stem.endswith(name):
            return path
    defined = {n for src in code_sources for n in _defined_names(src)}
    best, best_hits = None, 0
    for path in candidates.values():
        try:
            course_nb = nbformat.read(path, as_version=4)
        except Exception:  # noqa: BLE001
            continue
        hits = sum(1 for _, cell, _ in exercise_cells(course_nb) if set(_defined_names(cell.source)) & defined)
        if hits > best_hits:
            best, best_hits = path, hits
    return best


# ----------------------------------------------------------------------------------------------------
# Reading a submission
# ----------------------------------------------------------------------------------------------------

def read_submission(path: Path, max_bytes: int) -> tuple[dict[str, Any] | None, list[tuple[int, str]], str, str]:
    """``(notebook dict, [(cell index, code source)], sha256, problem)``; problem is "" when readable."""
    try:
        size = path.stat().st_size
    except OSError as err:
        return None, [], "", f"cannot read the file ({err.strerror})"
    if size > max_bytes:
        return None, [], "", (f"the file is {size / 2**20:.1f} MB, over the grader's limit of "
                              f"{max_bytes / 2**20:.0f} MB (outputs or data saved in the notebook?)")
    try:
        with path.open("rb") as f:  # at most max_bytes + 1, whatever stat said (a FIFO, /dev/zero...)
            raw = f.read(max_bytes + 1)
    except OSError as err:
        return None, [], "", f"cannot read the file ({err.strerror})"
    if len(raw) > max_bytes:
        return None, [], "", f"the file is over the grader's limit of {max_bytes / 2**20:.0f} MB"
    digest = hashlib.sha256(raw).hexdigest()
    try:
        nb = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        return None, [], digest, f"not a notebook: the file is not valid JSON ({str(err)[:120]})"
    except RecursionError:
        return None, [], digest, "not a notebook: the JSON is nested too deeply"
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return None, [], digest, "not a notebook: no list of cells"
    cells: list[tuple[int, str]] = []
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(s for s in source if isinstance(s, str))
        if not isinstance(source, str):
            source = ""
        cells.append((i, source))
    return nb, cells, digest, ""


def locate(spec: ExerciseSpec, cells: list[tuple[int, str]]) -> tuple[int, str] | None:
    """The submission's cell for an exercise: the one that defines the stub's name, nearest its place."""
    found = [(i, src) for i, src in cells if spec.target in _defined_names(src)]
    if not found:
        return None
    return min(found, key=lambda c: (abs(c[0] - spec.index), c[0]))


# ----------------------------------------------------------------------------------------------------
# Grading
# ----------------------------------------------------------------------------------------------------

def _same_code(a: str, b: str) -> bool:
    return [line.rstrip() for line in a.strip().splitlines()] == [line.rstrip() for line in b.strip().splitlines()]


def _is_stub(source: str, stub: str) -> bool:
    """True when the learner left the course's stub as it was (comments and blank lines aside)."""
    if _same_code(source, stub):
        return True
    try:
        return ast.dump(ast.parse(source)) == ast.dump(ast.parse(stub))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False




def _judge(spec: ExerciseSpec, outputs: dict[str, Any], memory_mb: int) -> tuple[str, str, str, int, str]:
    """``(status, message, hint, cases passed, line)`` from the harness's outputs, decided here."""
    exercise = spec.exercise
    if outputs.get("missing"):
        return "missing", str(outputs["missing"]), "", 0, ""
    if outputs.get("is_reference"):
        return "forbidden", "the exercise's name is bound to the course's reference implementation", "", 0, ""
    cases = outputs.get("cases", [])
    passed = 0
    first: tuple[str, str, str, str] | None = None
    for i, (case, expected) in enumerate(zip(spec.cases, spec.expected, strict=False)):
        entry = cases[i] if i < len(cases) and isinstance(cases[i], dict) else None
        if entry is None:
            if first is None:
                first = ("error", f"case {case.label!r}: no output", "", "")
            continue
        status = entry.get("status")
        if status == "not-implemented":
            return "not-implemented", "the stub still raises NotImplementedError", "", passed, ""
        if status in ("error", "memory"):
            if H._POISON_MESSAGE in str(entry.get("error", "")):
                return ("forbidden", "no points for calling the course's reference: your code called it while "
                        f"it was graded (case {case.label!r})", "", 0, str(entry.get("line", "")))
            error = str(entry.get("error", ""))
            if first is None and error.startswith("InputModifiedError: "):  # a wrong answer, as in the check
                first = ("fail", f"case {case.label!r}: {error.removeprefix('InputModifiedError: ')}",
                         "work on a copy: an in-place operation on an argument changes the caller's tensor too.",
                         str(entry.get("line", "")))
            elif first is None and error.startswith("NotDifferentiableError: "):
                first = ("fail", f"case {case.label!r}: {error.removeprefix('NotDifferentiableError: ')}",
                         NOT_DIFFERENTIABLE_HINT, str(entry.get("line", "")))
            elif first is None:
                message = f"case {case.label!r}: your code raised {error}"
                if status == "memory":
                    message += f" (over the memory limit of {memory_mb} MB)"
                first = ("error", message, "", str(entry.get("line", "")))
            continue
        got = entry.get("output")
        problems = compare_outputs(expected, got, exercise.atol, exercise.rtol)
        if problems:
            if first is None:
                first = ("fail", f"case {case.label!r}: " + "; ".join(problems[:3]),
                         _diagnose(exercise, case, got), "")
        else:
            passed += 1
    if first is None and passed == len(spec.cases):
        return "pass", f"every hidden case passed ({passed}/{passed})", "", passed, ""
    status, message, hint, line = first or ("error", "no outputs", "", "")
    return status, message, hint, passed, line


def grade_submission(path: Path, config: GradeConfig, courses: dict[Path, CourseCopy] | None = None
                     ) -> SubmissionReport:
    """Grade one submission; always returns a report (never raises for anything in the submission)."""
    started = time.monotonic()
    path = Path(path)
    report = SubmissionReport(submission=str(path), seed=config.resolved_seed(),
                              limits={"cell_timeout_s": config.cell_timeout, "total_timeout_s": config.total_timeout,
                                      "memory_mb": config.memory_mb, "max_bytes": config.max_bytes,
                                      "policy": config.policy},
                              versions=versions(), graded_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    courses = {} if courses is None else courses
    try:
        _grade_into(report, path, config, courses, started)
    except Exception as err:  # noqa: BLE001 - the grader never crashes on a submission
        report.status = "internal-error"
        report.message = f"the grader failed: {type(err).__name__}: {err}"
        for result in report.exercises:
            if result.status == "pass":
                continue
            result.score = 0.0
        report.total = sum(r.score for r in report.exercises)
    report.elapsed_s = round(time.monotonic() - started, 3)
    return report


_COURSES_LOCK = threading.Lock()


def _course_for(path: Path, config: GradeConfig, courses: dict[Path, CourseCopy]) -> CourseCopy:
    key = Path(path).resolve()
    with _COURSES_LOCK:  # graded in parallel threads (--jobs): build each course copy once
        if key not in courses:
            courses[key] = CourseCopy(key, config.resolved_seed())
        return courses[key]


def _grade_into(report: SubmissionReport, path: Path, config: GradeConfig, courses: dict[Path, CourseCopy],
                started: float) -> None:
    nb, cells, digest, problem = read_submission(path, config.max_bytes)
    report.sha256 = digest
    source_path = config.source
    if source_path is None and nb is not None:
        source_path = find_course_copy(nb, path, [s for _, s in cells])
    if source_path is None and nb is None:
        source_path = next((p for p in course_notebooks() if path.stem.startswith(p.stem)), None)
    if source_path is None:
        report.status = "unknown-notebook" if nb is not None else "unreadable"
        report.message = problem or ("could not tell which course notebook this submission is: it defines none "
                                     "of the exercises (grade it with --source NOTEBOOK)")
        return
    course = _course_for(source_path, config, courses)
    report.notebook, report.source = course.notebook_id, str(course.path)
    report.max_total = course.max_total
    results = {s.exercise.name: ExerciseResult(s.exercise.name, 0.0, float(s.exercise.points), "missing")
               for s in course.specs}
    report.exercises = list(results.values())
    if nb is None:
        report.status = "unreadable"
        report.message = problem
        for r in report.exercises:
            r.message = problem
        return

    items: list[dict[str, Any]] = []
    for spec in course.specs:
        result = results[spec.exercise.name]
        result.cases_total = len(spec.cases)
        where = locate(spec, cells)
        item: dict[str, Any] = {"spec": spec, "cell": None, "index": None}
        items.append(item)
        if where is None:
            result.status, result.message = "missing", f"no cell defines {spec.target}"
            continue
        index, source = where
        result.cell = index + 1
        item["index"] = index
        if _is_stub(source, spec.stub):
            result.status, result.message = "not-implemented", "the exercise cell is still the stub"
            continue
        if config.policy:
            violations = P.check_source(source, spec.exercise.reference, course.namespace, config.extra_modules)
            if violations:
                kind = violations[0].kind
                result.status = "error" if kind == "syntax" else "forbidden"
                result.message = "; ".join(str(v) for v in violations[:4])
                if kind == "reference":
                    result.message = "no points for calling the course's reference: " + result.message
                result.line = str(violations[0])
                continue
        item["cell"] = source
        result.status = "pending"

    pending = [it for it in items if it["cell"] is not None]
    if pending:
        from .executor import execute

        deadline = started + config.total_timeout
        outcomes, starts = execute(course, items, config, deadline)
        report.kernel_starts = starts
        for item in items:
            spec = item["spec"]
            result = results[spec.exercise.name]
            if item["cell"] is None:
                continue
            outcome = outcomes.get(spec.exercise.name, {"status": "timeout",
                                                        "message": "not run: the submission's time limit ran out"})
            if outcome["status"] == "ran":
                status, message, hint, passed, line = _judge(spec, outcome["outputs"], config.memory_mb)
                result.status, result.message, result.hint, result.cases_passed = status, message, hint, passed
                result.line = line
            else:
                result.status, result.message = outcome["status"], outcome.get("message", "")
                result.line = outcome.get("line", "")
            if result.status == "pass":
                result.score = result.max
    report.total = float(sum(r.score for r in report.exercises))
    if problem:
        report.message = problem


def make_workdir() -> Path:
    """A fresh, private temporary folder for one submission's kernel."""
    return Path(tempfile.mkdtemp(prefix="course-grade-"))


def remove_workdir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
