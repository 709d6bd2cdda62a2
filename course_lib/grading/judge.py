"""Deciding an exercise's status from what its sandbox sent, in the grader's process.

The sandbox's header and arrays are untrusted: the arrays are loaded with the limits of
:mod:`course_lib.grading.results`, decoded as NumPy (never pickles), and compared with the reference's
outputs computed by the grader (:func:`course_lib.exercises.compare_outputs`, or the exercise's own
``compare`` for a random answer). Points are all or nothing.

Example:
    >>> judge_cell_error({"ename": "NotImplementedError", "error": "NotImplementedError: ", "line": ""}, 1024)[0]
    'not-implemented'
"""

from __future__ import annotations

from typing import Any

from course_lib.exercises.feedback import NOT_DIFFERENTIABLE_HINT, diagnose, output_problems

from .codec import decode_value
from .course import ExerciseSpec
from .results import UntrustedData, load_arrays

__all__ = ["Verdict", "judge", "judge_cell_error"]

#: ``(status, message, hint, cases passed, line)``
Verdict = tuple[str, str, str, int, str]


def _text(value: Any, limit: int = 400) -> str:
    return str(value)[:limit] if isinstance(value, (str, int, float)) else ""


def judge_cell_error(error: Any, memory_mb: int) -> Verdict:
    """The verdict for an exercise cell that raised (its error as the sandbox described it)."""
    error = error if isinstance(error, dict) else {}
    ename, text, line = _text(error.get("ename"), 80), _text(error.get("error")), _text(error.get("line"), 300)
    status = "not-implemented" if ename == "NotImplementedError" else "error"
    message = f"the exercise cell raised {text}"
    if ename == "MemoryError" or "can't allocate memory" in text:
        message += f" (over the memory limit of {memory_mb} MB)"
    return status, message, "", 0, line


def _case_error(label: str, entry: dict[str, Any], memory_mb: int) -> tuple[str, str, str, str]:
    error, line = _text(entry.get("error")), _text(entry.get("line"), 300)
    if error.startswith("InputModifiedError: "):  # a wrong answer, as in the notebook's check
        return ("fail", f"case {label!r}: {error.removeprefix('InputModifiedError: ')}",
                "work on a copy: an in-place operation on an argument changes the caller's tensor too.", line)
    if error.startswith("NotDifferentiableError: "):
        message = f"case {label!r}: {error.removeprefix('NotDifferentiableError: ')}"
        return "fail", message, NOT_DIFFERENTIABLE_HINT, line
    if error.startswith("ReferenceWithheld: "):
        return "error", f"case {label!r}: {error.removeprefix('ReferenceWithheld: ')}", "", line
    message = f"case {label!r}: your code raised {error}"
    if entry.get("status") == "memory":
        message += f" (over the memory limit of {memory_mb} MB)"
    return "error", message, "", line


def _hint(spec: ExerciseSpec, case: Any, got: Any) -> str:
    """The known mistake a wrong output equals, if any (never raises, whatever ``got`` is)."""
    try:
        return diagnose(spec.exercise, case, got)
    except Exception:  # noqa: BLE001
        return ""


def _outputs(header: dict[str, Any], blob: bytes) -> list[Any]:
    cases = header.get("cases")
    if not isinstance(cases, list):
        raise UntrustedData("no list of cases")
    arrays = load_arrays(blob)
    for entry in cases:
        if isinstance(entry, dict) and entry.get("status") == "ok":
            entry["output"] = decode_value(entry.get("output"), arrays, as_torch=False)
    return cases


def judge(spec: ExerciseSpec, header: dict[str, Any], blob: bytes, memory_mb: int) -> Verdict:
    """The verdict of one exercise from its sandbox's result frame."""
    if "cell_error" in header:
        return judge_cell_error(header["cell_error"], memory_mb)
    if header.get("missing"):
        return "missing", _text(header["missing"]), "", 0, ""
    if header.get("withheld"):
        why = "the exercise's name is bound to the course's reference, which the grader withholds"
        return "forbidden", why, "", 0, ""
    try:
        cases = _outputs(header, blob)
    except (UntrustedData, RecursionError, KeyError, TypeError, ValueError) as err:
        return "error", f"the sandbox's output broke the grader's limits ({_text(str(err), 200)})", "", 0, ""
    passed, first = 0, None
    for i, (case, expected) in enumerate(zip(spec.cases, spec.expected, strict=False)):
        entry = cases[i] if i < len(cases) and isinstance(cases[i], dict) else {"status": "error", "error": "no output"}
        if entry.get("status") == "not-implemented":
            return "not-implemented", "the code still raises NotImplementedError", "", passed, ""
        if entry.get("status") != "ok":
            first = first or _case_error(case.label, entry, memory_mb)
            continue
        try:
            problems = output_problems(spec.exercise, case, expected, entry.get("output"))
        except Exception as err:  # noqa: BLE001 - whatever the sandbox sent, it is a wrong answer, not a crash
            problems = [f"the output could not be compared ({type(err).__name__})"]
        if problems:
            first = first or ("fail", f"case {case.label!r}: " + "; ".join(problems[:3]),
                              _hint(spec, case, entry.get("output")), "")
        else:
            passed += 1
    if first is None and passed == len(spec.cases):
        return "pass", f"every hidden case passed ({passed}/{passed})", "", passed, ""
    status, message, hint, line = first or ("error", "no outputs", "", "")
    return status, message, hint, passed, line
