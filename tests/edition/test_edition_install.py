"""What students receive works as they receive it (issue 44): the class edition declares its dependencies and
installs into a fresh virtual environment, its README says what is graded and how to hand it in, and an
assignment's student folder ships only what the instructor's manifest names.

The install test is slow: it builds ``--graded 04`` (smoke mode), makes a fresh venv, installs the course's torch
pin first (``pip install torch==2.13.0``: a local CPU wheel where pip is configured for one), then ``pip install
class04/`` with its pinned dependencies from the package index pip is configured with, and runs notebook 04
unsolved with that venv's Python alone (its own nbclient and ipykernel, nothing of this repository on the path).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT

from course_lib.edition.build import EDITION_NEEDS, SHIP, build_edition, edition_pins, readme, shipped_files

RUN = '''
import sys, nbformat
from nbclient import NotebookClient
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
nb.cells.insert(0, nbformat.v4.new_code_cell("import course_lib, torch; print('EDITION', course_lib.__file__)"))
NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": sys.argv[2]}}).execute()
from course_lib.exercises.execute import check_statuses
print("STATUSES", sorted(set(check_statuses(nb).values())))
print("FIRST", nb.cells[0].outputs[0]["text"])
'''


def _requirements() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        name, sep, version = line.split("#", 1)[0].strip().partition("==")
        if sep:
            pins[name.lower()] = version
    return pins


def test_the_editions_pins_are_the_courses() -> None:
    pins = dict(p.split("==") for p in edition_pins())
    assert set(pins) == set(EDITION_NEEDS) and {"torch", "numpy", "ipykernel", "nbclient"} <= set(pins)
    course = _requirements()
    assert all(course[name] == version for name, version in pins.items()), (pins, course)


def test_the_readme_says_what_is_graded_and_how_to_hand_it_in() -> None:
    text = readme("04_masking", edition_pins())
    assert "**Graded: `notebooks/04_masking.ipynb`**" in text
    assert "hand in **that one file**, `04_masking.ipynb`" in text and "`04_masking_<your login>.ipynb`" in text
    assert "torch 2.13.0" in text


def test_an_assignment_ships_only_what_its_manifest_names_and_warns_of_the_rest(tmp_path: Path) -> None:
    kv = ROOT / "assignments" / "kv_cache"
    folder = tmp_path / "hw"
    folder.mkdir()
    for name in ("kv_cache.ipynb", "kv_cache_checks.py", "kv_cache_reference.py"):
        (folder / name).write_bytes((kv / name).read_bytes())
    (folder / "solution_draft.py").write_text("def append_kv(*a): ...\n")
    (folder / "test_hw.py").write_text("def test(): ...\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chosen = shipped_files(folder, folder / "kv_cache.ipynb", "kv_cache_checks")
    # No manifest: the modules the notebook imports; every other file is named in a warning.
    assert [p.name for p in chosen] == ["kv_cache_reference.py"]
    said = "\n".join(str(w.message) for w in caught)
    assert "solution_draft.py is not shipped" in said and "test_hw.py is not shipped" in said
    (folder / SHIP).write_text("# what students receive\nkv_cache_reference.py\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [p.name for p in shipped_files(folder, folder / "kv_cache.ipynb", "kv_cache_checks")] == \
            ["kv_cache_reference.py"]
    assert "not named in ship.txt" in "\n".join(str(w.message) for w in caught)
    (folder / SHIP).write_text("kv_cache_checks.py\n")
    with pytest.raises(ValueError, match="kv_cache_checks.py"):
        shipped_files(folder, folder / "kv_cache.ipynb", "kv_cache_checks")


@pytest.mark.slow
def test_pip_install_of_the_edition_into_a_fresh_venv_runs_the_graded_notebook_unsolved(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    edition = tmp_path / "class04"
    monkeypatch.setenv("COURSE_SMOKE", "1")
    build_edition(edition, graded="04")
    declared = tomllib.loads((edition / "pyproject.toml").read_text())["project"]["dependencies"]
    assert declared == edition_pins() and "torch==2.13.0" in declared
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "torch==2.13.0"], check=True, env=env, timeout=1800)
    subprocess.run([*pip, str(edition)], check=True, env=env, timeout=1800)
    env.update(COURSE_SMOKE="1", MPLBACKEND="Agg")
    run = subprocess.run([str(python), "-c", RUN, str(edition / "notebooks" / "04_masking.ipynb"),
                          str(tmp_path)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "STATUSES ['not implemented yet']" in run.stdout, run.stdout[-2000:]
    installed = next(line for line in run.stdout.splitlines() if line.startswith("FIRST"))
    assert str(venv) in installed and str(ROOT) not in installed  # the venv's own copy, not the repository's
    nb = nbformat.read(edition / "notebooks" / "04_masking.ipynb", as_version=4)
    assert any(c.cell_type == "code" and "YOUR CODE HERE" in c.source for c in nb.cells)  # shipped unsolved
