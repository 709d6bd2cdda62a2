"""The standard library's docstrings: unlabelled text to pre-train on, and a labelled task (notebook 12).

Every Python installation ships its standard library as source. Its docstrings are real English written by
hundreds of authors: about 7 000 of at least 40 characters (1.7 million characters) under Python 3.11,
read here with :mod:`ast` (nothing is imported or run) and licensed under the PSF licence like Python
itself (see ``data/README.md``). Nothing is downloaded.

**The labelled task: which package does a docstring come from?** Six packages with many docstrings and
distinct subjects (:data:`TASK_PACKAGES`: GUI widgets, asynchronous I/O, e-mail messages, logging, XML,
unit tests). The label is not a surface rule: most docstrings never name their package ("Return the
value of the option", "Close the stream"), no single word decides, and the same words ("message",
"handler", "stream", "event") occur in several packages with different meanings. A model must combine the
words it sees, which is what pre-training on the unlabelled docstrings can teach before any label is seen.

The split is by docstring with a fixed rule (a CRC-32 of the file and the definition's name, as in
:func:`course_lib.data.python_docs.is_validation_document`): the task's validation docstrings are held out of the
pre-training text too, so that pre-training never reads a docstring the classifier is scored on.
"""

from __future__ import annotations

import ast
import sys
import sysconfig
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from course_lib.data.python_docs import PINNED_PYTHON, corpus_fingerprint, is_validation_document

__all__ = ["TASK_PACKAGES", "PINNED_DOCSTRINGS_FINGERPRINT", "Docstring", "DocstringTask", "stdlib_docstrings",
           "docstring_task"]

#: The six packages of the labelled task, in label order.
TASK_PACKAGES = ("tkinter", "asyncio", "email", "logging", "xml", "unittest")

#: Takes tkinter's place in the task where this Python installation leaves tkinter's source out (Debian and Ubuntu
#: ship it apart, in python3-tk): the import system, a subject distinct from the other five.
_STAND_IN_PACKAGE = "importlib"

#: Folders of the standard library that hold tests or bundled third-party code, not the library's own text.
_SKIPPED_FOLDERS = {"site-packages", "test", "tests", "idle_test", "__pycache__"}

# (number of docstrings, characters, sha256) recorded from Python 3.11.7's standard library.
PINNED_DOCSTRINGS_FINGERPRINT = (7231, 1749804, "d98c34c4d446f73c54eadbfa78490c85d38b7803b5079ee47d78114aa942c294")


@dataclass(frozen=True)
class Docstring:
    """One docstring: the top-level package or module it belongs to, where it stands, and its text."""

    package: str  # "tkinter" for tkinter/ttk.py, "json" for json/decoder.py, "shutil" for shutil.py
    key: str  # "tkinter/ttk.py:Treeview.insert": file and qualified name, the split's key
    text: str


def _definitions(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    """(qualified name, node) of the module and of every class and function in it, in source order."""
    found: list[tuple[str, ast.AST]] = [("<module>", tree)]

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                found.append((name, child))
                visit(child, name + ".")
            else:  # definitions under `if`, `try`, `with`... keep the enclosing name
                visit(child, prefix)

    visit(tree, "")
    return found


def stdlib_docstrings(min_chars: int = 40, root: str | Path | None = None) -> list[Docstring]:
    """Every docstring of at least ``min_chars`` characters in the running Python's standard library.

    Files are read in sorted order and parsed with :mod:`ast` (never imported); tests and ``site-packages``
    are skipped; a file that does not parse is skipped. ``root`` defaults to the standard library's folder.
    Warns (``UserWarning``) when the result differs from the pinned Python 3.11 one: everything runs, but the
    numbers will differ a little from those the notebook discusses.
    """
    folder = Path(root) if root is not None else Path(sysconfig.get_paths()["stdlib"])
    found: list[Docstring] = []
    for path in sorted(folder.rglob("*.py")):
        relative = path.relative_to(folder)
        if _SKIPPED_FOLDERS & set(relative.parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        package = relative.parts[0].removesuffix(".py")
        for name, node in _definitions(tree):
            text = ast.get_docstring(node)  # type: ignore[arg-type]
            if text and len(text) >= min_chars:
                found.append(Docstring(package, f"{relative.as_posix()}:{name}", text))
    if root is None and min_chars == 40 and corpus_fingerprint(d.text for d in found) != PINNED_DOCSTRINGS_FINGERPRINT:
        warnings.warn(f"stdlib_docstrings: this Python ({sys.version.split()[0]}) ships {len(found)} docstrings "
                      f"that differ from the pinned Python {'.'.join(map(str, PINNED_PYTHON))} ones "
                      f"{PINNED_DOCSTRINGS_FINGERPRINT[:2]}: everything runs, but the numbers will differ from "
                      f"those in the notebook (see data/README.md)", stacklevel=2)
    return found


@dataclass(frozen=True)
class DocstringTask:
    """The labelled task and the unlabelled text, split so that no validation docstring is pre-trained on.

    Attributes:
        classes: the package names, in label order.
        train_texts, train_labels: the labelled training docstrings and their labels (indices into classes).
        valid_texts, valid_labels: the held-out docstrings of the same packages.
        pretrain_texts: every docstring of the library except the held-out ones (all packages).
    """

    classes: tuple[str, ...]
    train_texts: list[str]
    train_labels: list[int]
    valid_texts: list[str]
    valid_labels: list[int]
    pretrain_texts: list[str]

    def __repr__(self) -> str:
        return (f"DocstringTask({len(self.classes)} classes, {len(self.train_texts)} labelled training and "
                f"{len(self.valid_texts)} validation docstrings; {len(self.pretrain_texts)} docstrings "
                f"({sum(map(len, self.pretrain_texts)):,} characters) to pre-train on)")


def docstring_task(docstrings: Sequence[Docstring], classes: Sequence[str] = TASK_PACKAGES,
                   every: int = 4) -> DocstringTask:
    """Split ``docstrings`` into the labelled task over ``classes`` and the pre-training text.

    A docstring is held out for validation when :func:`~course_lib.data.python_docs.is_validation_document` of its
    key is true (one in ``every``, by a CRC-32); held-out docstrings of other packages are pre-trained on,
    those of the task's packages are not. A held-out docstring whose text also occurs in the pre-training
    text (the labelled training docstrings included) is dropped: the library repeats some docstrings word
    for word, and a copy would test memory, not the task.

    With the default classes on a Python without tkinter's source (Debian's or Ubuntu's without python3-tk),
    ``importlib`` takes tkinter's place, with a warning: the lesson runs, its numbers differ. Any other class
    absent from ``docstrings`` is an error that names it.
    """
    classes = tuple(classes)
    present = {doc.package for doc in docstrings}
    absent = [c for c in classes if c not in present]
    if classes == TASK_PACKAGES and absent == ["tkinter"] and _STAND_IN_PACKAGE in present:
        warnings.warn(f"docstring_task: this Python's standard library has no 'tkinter' source (Debian and Ubuntu "
                      f"ship it apart: apt install python3-tk); the task takes {_STAND_IN_PACKAGE!r} in its place, "
                      f"so the numbers will differ from the notebook's", stacklevel=2)
        classes = tuple(_STAND_IN_PACKAGE if c == "tkinter" else c for c in classes)
    elif absent and docstrings:
        raise ValueError(f"docstring_task: no docstrings of {absent} among the {len(docstrings)} given (the "
                         f"packages present include {sorted(present)[:8]}); is their source installed?")
    if len(set(classes)) < 2:
        raise ValueError(f"docstring_task: need at least two different classes, got {classes}")
    label = {name: i for i, name in enumerate(classes)}
    train_texts, train_labels, valid_texts, valid_labels, pretrain = [], [], [], [], []
    for doc in docstrings:
        held_out = doc.package in label and is_validation_document(doc.key, every)
        if not held_out:
            pretrain.append(doc.text)
        if doc.package in label:
            texts, labels = (valid_texts, valid_labels) if held_out else (train_texts, train_labels)
            texts.append(doc.text)
            labels.append(label[doc.package])
    # A docstring copied word for word (an overridden method's, an alias's) would be scored on a text the
    # classifier was trained on: held-out docstrings whose text also occurs outside the held-out set go.
    seen = {text.strip() for text in pretrain}
    kept = [i for i, text in enumerate(valid_texts) if text.strip() not in seen]
    valid_texts, valid_labels = [valid_texts[i] for i in kept], [valid_labels[i] for i in kept]
    missing = [c for c in classes if c not in {classes[i] for i in train_labels}]
    if missing or not valid_texts:
        raise ValueError(f"docstring_task: no training docstrings for {missing} or no validation docstrings")
    return DocstringTask(classes, train_texts, train_labels, valid_texts, valid_labels, pretrain)
