"""The package, its tests, benchmarks, tools and notebooks are linted alike: ``ruff check`` finds nothing.

Ruff (pinned in requirements.txt) reads ``.ipynb`` files natively, cell by cell, with the rules of
``pyproject.toml``'s ``[tool.ruff]``; the notebooks are no longer excluded. A finding fails the test with
ruff's own report (``path:cell N:line:col: CODE message``), so the fix is where it says.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

TARGETS = ["course_lib", "tests", "benchmarks", "tools", "notebooks", "assignments"]


def _ruff() -> list[str]:
    """The ruff of this environment: beside the interpreter (a venv's bin/), else on PATH."""
    beside = Path(sys.executable).with_name("ruff")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: it is pinned in requirements.txt (pip install -r requirements.txt)")
    return [found]


def _check(*paths: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([*_ruff(), "check", "--no-cache", "--output-format", "concise", *paths],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_ruff_finds_nothing_in_the_package_tests_scripts_and_notebooks() -> None:
    result = _check(*TARGETS)
    assert result.returncode == 0, f"ruff check found problems:\n{result.stdout}{result.stderr}"


def test_the_configuration_lints_notebooks(tmp_path: Path) -> None:
    """The notebooks are not excluded: with this pyproject.toml, a closure over a loop variable in a notebook
    cell is found (B023), and so is an unused import."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "notebooks").mkdir()
    cell = "import math\n\nfns = []\nfor i in range(3):\n    fns.append(lambda: i)\n"
    notebook = {"cells": [{"cell_type": "code", "execution_count": None, "id": "probe", "metadata": {},
                           "outputs": [], "source": cell}],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "notebooks" / "probe.ipynb").write_text(json.dumps(notebook))
    result = _check("notebooks", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "B023" in result.stdout and "F401" in result.stdout, result.stdout
