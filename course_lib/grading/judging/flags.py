"""Tampering made visible: the lines of a submission's graded cells that name the grader's internals.

No check inside the learner's process can be made unbeatable (docs/grading.md). What can be shown is *what the
code reaches for*: a cell that names ``sys.modules``, ``gc``, ``inspect``, ``__torch_function__`` or
``__torch_dispatch__``, the tracer and check modules (``course_lib.exercises``, ``course_lib.grading``), stack
frames, or rebinds built-ins has no business in an exercise of this course. :func:`tampering_flags` reads the
cells the grader runs (each exercise's cell and the helper cells it needs) and returns, per reason, the lines
that gave it: the report, the gradebook and ``summary.csv`` show them to the instructor, who decides (the
submission is graded as usual; ``course-grade --flags-score-zero`` scores a flagged submission 0).

It reads tokens (names, attributes, and strings that are a name, as ``getattr`` and ``importlib`` take them),
never comments or prose, so that ``# inspect the shapes`` and ``print("counted on the modules")`` raise nothing,
and ``model.modules()`` (PyTorch's) is not ``sys.modules``. The honest corpus
(``tests/grading/grading_fixtures/honest``) and the course's solved notebooks raise no flag
(``tests/grading/test_flags.py``).

Example:
    >>> [flag["lines"] for flag in tampering_flags([(3, "import gc\\nx = 1  # inspect the result")])]
    [['cell 4, line 1: import gc']]
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterable, Sequence

__all__ = ["tampering_flags", "REASONS"]

#: reason -> the tokens that give it (a name, an attribute or a word inside a string).
REASONS: dict[str, tuple[str, ...]] = {
    "the interpreter's module table (sys.modules)": ("sys.modules",),
    "the garbage collector (gc): reaches any live object, the grader's included": ("gc",),
    "introspection (inspect)": ("inspect",),
    "PyTorch's interception hooks (__torch_function__, __torch_dispatch__, dispatch modes)": (
        "__torch_function__", "__torch_dispatch__", "TorchDispatchMode", "TorchFunctionMode", "_python_dispatch",
        "_push_mode", "_pop_mode", "_set_torch_function_mode"),
    "the grader's tracer and checks (course_lib.exercises, course_lib.grading, course_lib.edition)": (
        "course_lib.exercises", "course_lib.grading", "course_lib.edition", "tracing", "sandbox_main",
        "as_plain", "_TAGS", "_PROVIDED"),
    "stack frames": ("_getframe", "currentframe", "f_back", "f_globals", "f_locals", "f_builtins", "tb_frame",
                     "gi_frame", "cr_frame", "f_code", "_current_frames"),
    "built-ins rebound or reached (builtins, __builtins__, __import__)": (
        "builtins", "__builtins__", "__import__"),
    "function internals (__globals__, __code__, __closure__, __subclasses__)": (
        "__globals__", "__code__", "__closure__", "__subclasses__"),
    "the profiler and tracer switches (setprofile, settrace)": ("setprofile", "settrace", "setprofile_all_threads",
                                                               "settrace_all_threads", "_disable_profiler"),
    "raw memory (ctypes)": ("ctypes",),
}

#: Words flagged only inside a string: ``getattr(sys, "modules")``, ``vars(sys)["modules"]``.
_STRING_ONLY = {"modules": "the interpreter's module table (sys.modules)"}

_WORD = {token: reason for reason, tokens in REASONS.items() for token in tokens if "." not in token}
_DOTTED = {token: reason for reason, tokens in REASONS.items() for token in tokens if "." in token}
_STRING_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")  # a string read as a name: "modules", "course_lib.x"
_MAX_LINES = 10  # lines quoted per reason


def _tokens(source: str) -> Iterable[tuple[int, str, bool]]:
    """``(line, text, is_string)`` of every name, operator and string of ``source``; comments left out. A cell
    that does not tokenize (IPython syntax, a syntax error) is read line by line without its comments."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in (tokenize.NAME, tokenize.OP):
                yield token.start[0], token.string, False
            elif token.type == tokenize.STRING or token.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
                yield token.start[0], token.string, True
    except (tokenize.TokenError, IndentationError, SyntaxError):
        for number, line in enumerate(source.splitlines(), 1):
            code = line.split("#", 1)[0]
            for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*|\.", code):
                yield number, word, False


def _reasons_by_line(source: str) -> dict[int, set[str]]:
    found: dict[int, set[str]] = {}
    names: list[tuple[int, str]] = []
    for line, text, is_string in _tokens(source):
        if is_string:  # a string that is a (dotted) name, as getattr and importlib take them; prose is not read
            word = text.strip("rbuRBUfF").strip("'\"")
            if _STRING_WORD.fullmatch(word):
                for part in (word, *word.split(".")):
                    reason = _WORD.get(part) or _DOTTED.get(part) or _STRING_ONLY.get(part)
                    if reason:
                        found.setdefault(line, set()).add(reason)
            names.append((line, ""))
            continue
        names.append((line, text))
        if text in _WORD:
            found.setdefault(line, set()).add(_WORD[text])
    # dotted names: a.b as consecutive NAME . NAME tokens (``torch.sys.modules`` holds ``sys.modules``)
    for i in range(len(names) - 2):
        (line, first), (_, dot), (_, second) = names[i], names[i + 1], names[i + 2]
        if dot == "." and f"{first}.{second}" in _DOTTED:
            found.setdefault(line, set()).add(_DOTTED[f"{first}.{second}"])
        if dot == "." and i + 4 < len(names) and names[i + 3][1] == ".":
            if f"{first}.{second}.{names[i + 4][1]}" in _DOTTED:
                found.setdefault(line, set()).add(_DOTTED[f"{first}.{second}.{names[i + 4][1]}"])
    return found


def tampering_flags(cells: Sequence[tuple[int, str]]) -> list[dict[str, object]]:
    """The flags of the graded cells ``(0-based cell index, source)``: one ``{"reason", "lines"}`` per reason
    found, ``lines`` as ``"cell C, line L: text"`` (C 1-based as the report numbers cells), at most 10 each."""
    by_reason: dict[str, list[str]] = {}
    for index, source in cells:
        lines = source.splitlines()
        for number, reasons in sorted(_reasons_by_line(source).items()):
            text = lines[number - 1].strip()[:200] if 0 < number <= len(lines) else ""
            for reason in sorted(reasons):
                quoted = by_reason.setdefault(reason, [])
                entry = f"cell {index + 1}, line {number}: {text}"
                if len(quoted) < _MAX_LINES and entry not in quoted:
                    quoted.append(entry)
    return [{"reason": reason, "lines": by_reason[reason]} for reason in REASONS if reason in by_reason]
