"""Which installed packages the grading sandbox shows: what the course needs to run, and nothing else.

A course environment holds more than the course needs to run a notebook. Notebook 14's tests need Hugging Face's
``transformers``, whose ``repeat_kv``, ``LlamaRMSNorm`` and ``rotate_half`` are notebook 14's answers; an
instructor's own environment may hold ``timm``, ``d2l`` or ``torchtune``, with an attention or a Transformer layer
ready to call. An exercise cell that reaches one of them (``torch.importlib.import_module`` is one name away, and
no static policy can close every such route) would hand in a library's answer as its own. So the sandbox does not
show them at all: its package folders hold only the distributions that :data:`COURSE_REQUIREMENTS` (the course's
own dependencies, ``pyproject.toml``, but :data:`NOT_GRADED`), IPython (the runner's shell) and the modules the
policy lets a cell import (``policy.ALLOWED_MODULES`` and ``--allow-module``) need, with everything those require
in turn; the rest of each package folder is absent (:func:`visible_entries`, bound one by one by
:func:`course_lib.grading.sandbox.sandbox.command`).

The defence is absence, outside the learner's process (``docs/grading.md``): a library the sandbox cannot see
cannot be called, whatever name a cell finds for the importer.

Example:
    >>> "torch" in sandbox_distributions() and "transformers" not in sandbox_distributions()
    True
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from functools import lru_cache
from importlib import metadata

__all__ = ["COURSE_REQUIREMENTS", "NOT_GRADED", "RUNNER_REQUIREMENTS", "canonical", "sandbox_distributions",
           "visible_entries"]

#: The course's own dependencies: ``[project] dependencies`` of ``pyproject.toml`` (a test keeps them equal).
COURSE_REQUIREMENTS = ("torch", "numpy", "matplotlib", "koreanize-matplotlib", "tqdm", "nbformat", "nbclient",
                       "ipykernel", "sacrebleu", "num2words", "tokenizers", "regex", "scikit-learn", "anywidget")
#: The course's dependencies a graded cell never needs, left out of the sandbox with what they alone require:
#: scikit-learn serves notebook 08's and 09's baselines outside any exercise, and brings SciPy, whose
#: ``scipy.special.softmax`` (and ``log_softmax``, ``logsumexp``) answers notebook 00 (issue 45).
#: anywidget draws the explorer (course_lib.figures.explorer), which no graded cell uses.
NOT_GRADED = ("scikit-learn", "anywidget")
#: What the sandbox's runner itself imports beyond those: IPython's shell, which runs each cell as Jupyter does.
RUNNER_REQUIREMENTS = ("ipython",)


def canonical(name: str) -> str:
    """A distribution's name as PyPI compares them (PEP 503): ``Scikit_Learn`` -> ``scikit-learn``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(dist: metadata.Distribution) -> list[str]:
    """The distributions ``dist`` needs on this machine: its requirements whose markers hold (no extras)."""
    from packaging.requirements import InvalidRequirement, Requirement

    needed = []
    for line in dist.requires or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            needed.append(canonical(requirement.name))
    return needed


def _distributions_of_modules(modules: Iterable[str]) -> set[str]:
    """The installed distributions that provide these top-level modules (``sklearn`` -> ``scikit-learn``)."""
    providers = metadata.packages_distributions()
    return {canonical(dist) for module in modules for dist in providers.get(module.split(".")[0], [])}


@lru_cache(maxsize=8)
def sandbox_distributions(extra_modules: tuple[str, ...] = ()) -> frozenset[str]:
    """The installed distributions the sandbox shows (canonical names): the closure of what the course, its
    runner and the importable modules (the policy's, and ``extra_modules``: ``--allow-module``) require."""
    from ..judging.policy import ALLOWED_MODULES

    installed = {canonical(d.metadata["Name"]): d for d in metadata.distributions() if d.metadata["Name"]}
    todo = [canonical(n) for n in (*COURSE_REQUIREMENTS, *RUNNER_REQUIREMENTS) if n not in NOT_GRADED]
    todo += sorted(_distributions_of_modules((*ALLOWED_MODULES, *extra_modules)))
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in installed or name == "course-lib":  # course_lib: the grader's copy
            continue
        seen.add(name)
        todo += _requirements(installed[name])
    return frozenset(seen)


def _top_level(dist: metadata.Distribution) -> set[str]:
    """The entries of its package folder (folders, modules, ``.dist-info``) that hold ``dist``'s files: the
    first part of each path its ``RECORD`` lists (paths outside the folder, ``../../bin/...``, left out).
    The record is read as text: torch's lists 14,000 files, which ``Distribution.files`` turns into objects."""
    record = dist.read_text("RECORD")
    if record is not None:
        firsts = {line.split(",", 1)[0].replace("\\", "/").split("/", 1)[0] for line in record.splitlines()}
    else:  # an older installation's file list
        firsts = {file.parts[0] for file in dist.files or [] if file.parts}
    return firsts - {"", "..", "__pycache__"}


@lru_cache(maxsize=32)
def visible_entries(site_dir: str, extra_modules: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The names in the package folder ``site_dir`` that the sandbox shows, sorted: every file and folder of
    the distributions :func:`sandbox_distributions` names that are installed there; ``.pth`` files of other
    distributions (an editable install's path hook) and every other package stay out."""
    wanted = sandbox_distributions(tuple(sorted(extra_modules)))
    entries: set[str] = set()
    for dist in metadata.distributions(path=[site_dir]):
        if dist.metadata["Name"] and canonical(dist.metadata["Name"]) in wanted:
            entries |= _top_level(dist)
    return tuple(sorted(e for e in entries if os.path.lexists(os.path.join(site_dir, e))))
