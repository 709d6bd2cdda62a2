"""Deciding an exercise's status from what its sandbox sent, in the grader's process.

The sandbox's answer is untrusted data: its arrays are loaded with the limits of
:mod:`course_lib.grading.judging.results`, decoded as NumPy (never pickles), and each case's observation (the output,
the inputs after the call, the gradients, what ran) is judged against the reference's observation computed
by the grader, with the one verdict of the course (:mod:`course_lib.exercises.verdict`, the notebook check's and
the class edition's too): the verdict on a write into an input, a cut graph, a wrong dtype, an alias or a
forbidden operation, the known mistake and the hint are decided here, never in the sandbox. An exercise's points
follow from its status (:mod:`course_lib.grading.judging.scoring`: all or nothing, or partial credit).

Example:
    >>> judge_cell_error({"ename": "NotImplementedError", "error": "NotImplementedError: ", "line": ""}, 1024)[0]
    'not-implemented'
"""

from __future__ import annotations

from typing import Any

from course_lib.exercises.tracing import matching_ops
from course_lib.exercises.verdict import (
    Finding,
    KnownMistake,
    Rules,
    judge_error,
    judge_observation,
    kind_hint,
    known_mistakes,
)

from ..course import ExerciseSpec
from ..sandbox.codec import decode_value
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


def _case_error(case: Any, index: int, entry: dict[str, Any], memory_mb: int,
                mistakes: list[KnownMistake]) -> tuple[str, str, str, str]:
    """The verdict of a case whose call raised in the sandbox (a known mistake that raises the same names it)."""
    error, line, label = _text(entry.get("error")), _text(entry.get("line"), 300), case.label
    ename, _, text = error.partition(": ")
    if ename == "AnswerWithheld":
        return "error", f"case {label!r}: {text}", "", line
    finding = judge_error(ename, text, "", case, index, mistakes)
    message = f"case {label!r}: {finding.messages[0]}"
    if entry.get("status") == "memory":
        message += f" (over the memory limit of {memory_mb} MB)"
    return _status(finding), message, finding.hint, line


def _observations(header: dict[str, Any], blob: bytes) -> list[Any]:
    """The cases' entries of an answer, each ``ok`` one with its plain observation under ``"observed"``."""
    cases = header.get("cases")
    if not isinstance(cases, list):
        raise UntrustedData("no list of cases")
    arrays = load_arrays(blob)
    for entry in cases:
        if isinstance(entry, dict) and entry.get("status") == "ok":
            observed = decode_value(entry.get("observed"), arrays, as_torch=False)
            observed = observed if isinstance(observed, dict) else {}
            observed["output"] = decode_value(entry.get("output"), arrays, as_torch=False)
            entry["observed"] = observed
    return cases


#: The report's status of a verdict's status, and of the kinds of problem that are refusals, not wrong answers.
_STATUS = {"failed": "fail", "error": "error", "not implemented yet": "not-implemented"}
_KIND_STATUS = {"forbidden": "forbidden", "record": "forbidden"}


def _status(finding: Finding) -> str:
    return _KIND_STATUS.get(finding.kind, _STATUS.get(finding.status, "fail"))


def witness_verdict(spec: ExerciseSpec, ops: Any, processes: Any = 0) -> Verdict | None:
    """The verdict the sandbox's witness gives (its operators, checked against the request's marks by the
    executor: None when missing or not this request's; the other processes it saw alive, or reaped, while the
    request ran), or None when it shows nothing against the answer."""
    if not isinstance(ops, list):
        return ("forbidden", "the grader's own record of what your code ran (kept where your code cannot rewrite "
                "it) is missing, was switched off or does not belong to this request: no points without it",
                kind_hint(spec.exercise, "record"), 0, "")
    if processes:
        return ("forbidden", f"{processes} process(es) besides the grader's runner were alive or ended while your "
                "code was called (started by your cells): their work is in no record of what ran, so it earns no "
                "points; compute in the call itself", kind_hint(spec.exercise, "record"), 0, "")
    hit = matching_ops([str(op) for op in ops], tuple(getattr(spec.exercise, "forbidden_ops", ())))
    if hit:
        return ("forbidden", f"your code ran {', '.join(hit[:4])}, which this exercise asks you to build yourself "
                "from smaller operations (seen by the grader's own record of the call and of the observation of "
                "its result, whatever name or object reached it)", kind_hint(spec.exercise, "forbidden"), 0, "")
    return None


def judge(spec: ExerciseSpec, header: dict[str, Any], blob: bytes, memory_mb: int) -> Verdict:
    """The verdict of one exercise from its sandbox's answer (to the ``cell`` or the ``cases`` request); for
    cases that ran and were compared (``pass`` or ``fail``), the witness's verdict when it has one (an error, a
    broken answer or a ``forbidden`` of the cases' own keeps its own reason: it scores nothing either way)."""
    verdict = _judge_answer(spec, header, blob, memory_mb)
    if "cases" not in header or verdict[0] not in ("pass", "fail"):
        return verdict
    return witness_verdict(spec, header.get("witness"), header.get("witness_processes", 0)) or verdict


def _judge_answer(spec: ExerciseSpec, header: dict[str, Any], blob: bytes, memory_mb: int) -> Verdict:
    if "cell_error" in header:
        return judge_cell_error(header["cell_error"], memory_mb)
    if header.get("missing"):
        return "missing", _text(header["missing"]), "", 0, ""
    if header.get("withheld"):
        why = "the exercise's name is bound to the course's reference, which the grader withholds"
        return "forbidden", why, "", 0, ""
    try:
        cases = _observations(header, blob)
    except (UntrustedData, RecursionError, KeyError, TypeError, ValueError) as err:
        return "error", f"the sandbox's output broke the grader's limits ({_text(str(err), 200)})", "", 0, ""
    passed, first = 0, None
    rules = Rules.from_exercise(spec.exercise)
    mistakes = known_mistakes(spec.exercise, rules)
    for i, (case, expected, before) in enumerate(zip(spec.cases, spec.expected, spec.inputs, strict=False)):
        entry = cases[i] if i < len(cases) and isinstance(cases[i], dict) else {"status": "error", "error": "no output"}
        if entry.get("status") == "not-implemented":
            return "not-implemented", "the code still raises NotImplementedError", "", passed, ""
        if entry.get("status") != "ok":
            first = first or _case_error(case, i, entry, memory_mb, mistakes)
            continue
        finding = judge_observation(rules, case, i, expected, entry["observed"], before, mistakes, threads=True)
        if finding is not None:
            status = _status(finding)
            found = (status, f"case {case.label!r}: {'; '.join(finding.every_problem[:3])}", finding.hint, "")
            first = found if first is None or (status == "forbidden" and first[0] != "forbidden") else first
        else:
            passed += 1
    if first is None and passed == len(spec.cases):
        return "pass", f"every hidden case passed ({passed}/{passed})", "", passed, ""
    status, message, hint, line = first or ("error", "no outputs", "", "")
    return status, message, hint, passed, line
