"""Shared fixtures: the repository's paths, and the course's notebooks."""

from __future__ import annotations

from pathlib import Path

import pytest

import course_lib.checks  # noqa: F401  (adds the course's exercise package: get_exercise finds exercises in it)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


# The grading fixtures are submissions to grade (some hostile on purpose), not notebooks for nbval to run.
collect_ignore_glob = ["grading_fixtures/*"]
