"""What a sandbox's start costs: the runner imports the codec, not the grader's front door.

Every submission starts at least one sandbox, so whatever its runner imports is paid once per submission. Importing
``course_lib.grading.sandbox.codec`` used to run ``course_lib/grading/__init__.py``, which imported the command, the
gradebook and nbformat (whose jsonschema builds a URI grammar at import): about 3 s of every sandbox's start.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import course_lib.grading

FRONT_DOOR = ["nbformat", "jsonschema", "course_lib.grading.cli", "course_lib.grading.runner",
              "course_lib.grading.records.gradebook", "course_lib.grading.judging.judge"]


def test_the_sandboxs_runner_imports_none_of_the_front_door() -> None:
    probe = ("import json, sys\n"
             "from course_lib.grading.sandbox.codec import npz_bytes, encode_value\n"
             "from course_lib.exercises.observation import observe\n"
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
