"""What a sandbox's start costs: the runner imports the codec, not the grader's front door.

Every submission starts at least one sandbox, so whatever its runner imports is paid once per submission. Importing
``course_lib.grading.sandbox.codec`` used to run ``course_lib/grading/__init__.py``, which imported the command, the
gradebook and nbformat (whose jsonschema builds a URI grammar at import): about 3 s of every sandbox's start.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import course_lib.grading
from course_lib.grading.sandbox import sandbox_main

FRONT_DOOR = ["nbformat", "jsonschema", "course_lib.grading.cli", "course_lib.grading.runner",
              "course_lib.grading.records.gradebook", "course_lib.grading.judging.judge"]


def _runner_imports() -> list[str]:
    """Every module ``sandbox_main.py`` imports, at its top or inside its functions (read from its source, so that an
    import added to the runner is probed too)."""
    tree = ast.parse(Path(sandbox_main.__file__).read_text(encoding="utf-8"))
    found = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    found |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return sorted(found - {"__future__"})


def test_the_sandboxs_runner_imports_none_of_the_front_door() -> None:
    modules = _runner_imports()
    assert "course_lib.grading.sandbox.codec" in modules and "IPython.core.interactiveshell" in modules, modules
    probe = ("import importlib, json, sys\n"
             f"for name in {modules!r}:\n    importlib.import_module(name)\n"
             f"print(json.dumps([m for m in {FRONT_DOOR!r} if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == [], "the sandbox's start imports the grader's front door"


@pytest.mark.parametrize("name", course_lib.grading.__all__)
def test_every_public_name_of_the_grading_package_is_still_there(name: str) -> None:
    value = getattr(course_lib.grading, name)
    assert value.__name__ == name and name in dir(course_lib.grading)


def test_a_name_the_grading_package_does_not_have_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="grade_everything"):
        course_lib.grading.grade_everything  # noqa: B018
